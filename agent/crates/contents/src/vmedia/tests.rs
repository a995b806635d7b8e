//! Finding and reading virtual media on fixtures: a sysfs tree, an ISO made
//! by genisoimage the way Ironic makes it (`-r -J -V <label>`), FAT
//! floppies (the reader itself is tested in `floppy/tests.rs`).

use super::*;

fn ironic_iso(label: &str, dir: &Path) -> PathBuf {
    let tree = dir.join("cd");
    for (path, text) in [
        (
            "etc/ironic-python-agent/ironic.crt",
            "-----BEGIN CERTIFICATE-----\n",
        ),
        (
            "etc/ironic-python-agent.d/ironic-tls.conf",
            "[DEFAULT]\ncafile = /etc/ironic-python-agent/ironic.crt\n",
        ),
        ("openstack/latest/network_data.json", "{\"links\": []}"),
        ("vmlinuz", "kernel"),
    ] {
        let p = tree.join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    let out = dir.join(format!("{label}.iso"));
    let ok = std::process::Command::new("genisoimage")
        .args(["-quiet", "-r", "-J", "-l", "-V", label, "-o"])
        .arg(&out)
        .arg(&tree)
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap()
        .success();
    assert!(ok, "genisoimage");
    out
}

#[test]
fn only_whole_cd_drives_and_small_usb_disks_are_candidates() {
    let dir = tempfile::tempdir().unwrap();
    let sys = dir.path().join("sys");
    let devices = dir.path().join("devices");
    let block = sys.join("class/block");
    std::fs::create_dir_all(&block).unwrap();
    let mk = |name: &str, real: &str, files: &[(&str, &str)]| {
        let d = devices.join(real).join(name);
        std::fs::create_dir_all(d.join("device")).unwrap();
        for (f, v) in files {
            std::fs::write(d.join(f), v).unwrap();
        }
        std::os::unix::fs::symlink(&d, block.join(name)).unwrap();
    };
    mk(
        "sr0",
        "pci0000:00/ata1",
        &[("device/type", "5\n"), ("size", "2048\n")],
    );
    mk(
        "sda",
        "pci0000:00/ata2",
        &[("device/type", "0\n"), ("size", "4000000\n")],
    );
    mk(
        "sda1",
        "pci0000:00/ata2/sda",
        &[("partition", "1\n"), ("size", "2048\n")],
    );
    mk(
        "sdb",
        "pci0000:00/usb1/1-1",
        &[("device/type", "0\n"), ("size", "2880\n")],
    );
    mk(
        "sdc",
        "pci0000:00/usb1/1-2",
        &[("device/type", "0\n"), ("size", "16777216\n")],
    );
    let c = candidates(&sys);
    let names: Vec<&str> = c.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["sr0", "sdb"], "{c:?}");
    assert_eq!(c[0].kind, Kind::CdDvd);
    assert_eq!(c[1].why, "USB disk of 1474560 bytes");
    assert_eq!(c[1].kind, Kind::UsbDisk);
}

#[test]
fn the_boot_iso_is_found_by_label_and_its_config_copied() {
    let dir = tempfile::tempdir().unwrap();
    let dev = dir.path().join("dev");
    std::fs::create_dir_all(&dev).unwrap();
    // sr0 holds some other disc, sr1 Ironic's.
    std::fs::copy(ironic_iso("OTHER", dir.path()), dev.join("sr0")).unwrap();
    std::fs::copy(ironic_iso("config-2", dir.path()), dev.join("sr1")).unwrap();
    let cands = ["sr0", "sr1", "sr9"].map(cd);
    let Disc {
        candidate,
        path,
        file: f,
    } = find_iso(&dev, &cands).unwrap();
    assert_eq!(path, dev.join("sr1"));
    assert_eq!(candidate, cands[1]);
    assert_eq!(
        iso::read_file_from(
            &f,
            agent_devices::netconf::network_data::PATH_ON_MEDIA,
            1 << 20
        )
        .as_deref(),
        Some(&b"{\"links\": []}"[..])
    );
    let root = dir.path().join("root");
    let mut written = copy_config(&f, &root).unwrap();
    written.sort();
    assert_eq!(
        written,
        vec![
            root.join("etc/ironic-python-agent/ironic.crt"),
            root.join("etc/ironic-python-agent.d/ironic-tls.conf"),
        ]
    );
    // The copied file is what the agent's configuration then reads.
    let o = agent_base::config::files::read(&root);
    assert_eq!(
        o.cafile.as_deref(),
        Some(Path::new("/etc/ironic-python-agent/ironic.crt"))
    );
    // VMEDIA_BOOT_ISO (no openstack/ files) counts too; no disc: none.
    std::fs::copy(ironic_iso("VMEDIA_BOOT_ISO", dir.path()), dev.join("sr0")).unwrap();
    assert_eq!(find_iso(&dev, &cands).unwrap().path, dev.join("sr0"));
    assert!(find_iso(&dev, &cands[2..]).is_none());
}

fn cd(name: &str) -> Candidate {
    Candidate {
        name: name.into(),
        kind: Kind::CdDvd,
        why: "CD/DVD drive".into(),
    }
}

fn usb(name: &str) -> Candidate {
    Candidate {
        name: name.into(),
        kind: Kind::UsbDisk,
        why: "USB disk".into(),
    }
}

/// A sysfs tree with a USB disk `sda` (a stick left behind) and a CD
/// drive `sr0` (the BMC's), and their devices under `dev`.
fn stick_and_cd(dir: &Path) -> (PathBuf, PathBuf) {
    let (sys, dev) = (dir.join("sys"), dir.join("dev"));
    let block = sys.join("class/block");
    std::fs::create_dir_all(&block).unwrap();
    std::fs::create_dir_all(&dev).unwrap();
    for (name, real, ty) in [
        ("sda", "pci0000:00/usb2/2-1/host6", "0"),
        ("sr0", "pci0000:00/ata1/host0", "5"),
    ] {
        let d = dir.join("devices").join(real).join(name);
        std::fs::create_dir_all(d.join("device")).unwrap();
        std::fs::write(d.join("device/type"), ty).unwrap();
        std::fs::write(d.join("size"), "2048\n").unwrap();
        std::os::unix::fs::symlink(&d, block.join(name)).unwrap();
    }
    (sys, dev)
}

#[test]
fn the_cd_drive_is_tried_before_a_usb_stick() {
    let dir = tempfile::tempdir().unwrap();
    let (sys, dev) = stick_and_cd(dir.path());
    let c = candidates(&sys);
    assert_eq!(
        c,
        [
            cd("sr0"),
            Candidate {
                why: "USB disk of 1048576 bytes".into(),
                ..usb("sda")
            }
        ]
    );
    // Both carry a disc labelled config-2: the CD's is the one read.
    std::fs::copy(ironic_iso("config-2", dir.path()), dev.join("sda")).unwrap();
    std::fs::copy(ironic_iso("config-2", dir.path()), dev.join("sr0")).unwrap();
    let disc = find_iso(&dev, &c).unwrap();
    assert_eq!(
        (disc.path, disc.candidate.kind),
        (dev.join("sr0"), Kind::CdDvd)
    );
}

fn floppy(label: &[u8; 11]) -> Vec<u8> {
    let mut img = std::io::Cursor::new(vec![0u8; 1440 * 1024]);
    fatfs::format_volume(
        &mut img,
        fatfs::FormatVolumeOptions::new().volume_label(*label),
    )
    .unwrap();
    {
        use std::io::Write;
        let fs = fatfs::FileSystem::new(&mut img, fatfs::FsOptions::new()).unwrap();
        let mut f = fs.root_dir().create_file("parameters.txt").unwrap();
        f.write_all(b"ipa-api-url=http://10.0.0.1:6385 boot_method=vmedia\n")
            .unwrap();
    }
    img.into_inner()
}

#[test]
fn the_floppy_gives_parameters_only_with_its_label() {
    assert_eq!(
        floppy::parameters(&floppy(b"ir-vfd-dev ")).as_deref(),
        Ok("ipa-api-url=http://10.0.0.1:6385 boot_method=vmedia\n")
    );
    let other = floppy::parameters(&floppy(b"OTHER      "));
    assert!(other.unwrap_err().is_other_media());
    assert!(floppy::parameters(&[0u8; 4096])
        .unwrap_err()
        .is_other_media());
}

#[test]
fn a_refused_floppy_is_a_note_naming_its_device() {
    let dir = tempfile::tempdir().unwrap();
    let dev = dir.path().join("dev");
    std::fs::create_dir_all(&dev).unwrap();
    // sr0: the boot ISO; sda: a floppy whose boot sector says FAT32 (what
    // a looping root directory would hide behind); sdb: another FAT
    // volume; sdc: Ironic's floppy; sr1: an empty drive.
    std::fs::copy(ironic_iso("config-2", dir.path()), dev.join("sr0")).unwrap();
    let mut fat32 = floppy(b"ir-vfd-dev ");
    fat32[22..24].fill(0);
    fat32[66] = 0x29;
    fat32[71..82].copy_from_slice(b"ir-vfd-dev ");
    std::fs::write(dev.join("sda"), fat32).unwrap();
    std::fs::write(dev.join("sdb"), floppy(b"OTHER      ")).unwrap();
    std::fs::write(dev.join("sdc"), floppy(b"ir-vfd-dev ")).unwrap();
    let cands = [cd("sr0"), cd("sr1"), usb("sda"), usb("sdb"), usb("sdc")];
    let found = floppy_parameters(&dev, &cands);
    let (from, text) = found.found.unwrap();
    assert_eq!(
        (from, text.as_str()),
        (
            usb("sdc"),
            "ipa-api-url=http://10.0.0.1:6385 boot_method=vmedia\n"
        )
    );
    assert_eq!(
        found.notes,
        [format!(
            "{} (USB disk): labelled ir-vfd-dev but FAT32; only FAT12 and FAT16 are read; not read as the floppy",
            dev.join("sda").display()
        )]
    );
    // Without sdc: no parameters, the same note.
    let found = floppy_parameters(&dev, &cands[..4]);
    assert!(found.found.is_none());
    assert_eq!(found.notes.len(), 1);
}
