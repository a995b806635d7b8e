//! The test disk image (`hardware_tests::testimage`) boots from disk in
//! QEMU (TCG) under SeaBIOS and under OVMF after the agent deployed it as
//! it deploys any whole-disk image: `write_image` onto a 2 GiB sparse disk
//! file (raw for BIOS, compressed qcow2 for UEFI; the backup GPT moved to
//! the disk's end), then `configdrive::write` adding a `config-2`
//! partition with a genisoimage config drive. The booted system must print
//! the image's random marker and the config drive's random uuid, with the
//! disk on virtio-blk (both firmwares) and on NVMe, AHCI and virtio-scsi
//! (SeaBIOS); without a config drive it says so. A disk left by a failed
//! write (wrong checksum: both ends zeroed) must not boot: SeaBIOS says
//! "No bootable device.", OVMF falls back to its shell.
//!
//! The QEMU launch here is deliberately small; the shared QEMU test bed
//! will replace it.

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use agent_base::config::{Config, RunMode};
use agent_contents::image::checksum::ChecksumSpec;
use agent_contents::image::fetch::HttpOptions;
use agent_contents::image::progress::Progress;
use agent_contents::image::{write_image, ImageError, WriteReport, WriteRequest};
use agent_devices::disk::WritePolicy;
use hardware_tests::testimage::{self, marker_line, no_boot_lines, TestImage};

const GIB: u64 = 1 << 30;
const OVMF_CODE: &str = "/usr/share/OVMF/OVMF_CODE.fd";
const OVMF_VARS: &str = "/usr/share/OVMF/OVMF_VARS.fd";

/// One image for all tests (built once), and one QEMU at a time: the
/// machine has two cores and the wall times should mean something.
static IMAGE: OnceLock<(tempfile::TempDir, TestImage, String)> = OnceLock::new();
static QEMU: Mutex<()> = Mutex::new(());

fn image() -> &'static (tempfile::TempDir, TestImage, String) {
    IMAGE.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let marker = format!("m{:016x}", fastrand::u64(..));
        let started = Instant::now();
        let img = testimage::build(dir.path(), &marker).unwrap();
        let sha = sha256_file(&img.raw);
        println!(
            "built {} ({} MiB) in {:.1} s",
            img.raw.display(),
            img.size >> 20,
            started.elapsed().as_secs_f64()
        );
        (dir, img, sha)
    })
}

fn sha256_file(p: &Path) -> String {
    hardware_tests::sha256_prefix(p, u64::MAX).unwrap()
}

fn random_uuid() -> String {
    let h = format!("{:016x}{:016x}", fastrand::u64(..), fastrand::u64(..));
    format!(
        "{}-{}-4{}-8{}-{}",
        &h[..8],
        &h[8..12],
        &h[13..16],
        &h[17..20],
        &h[20..32]
    )
}

/// A config-2 ISO as Ironic renders it, with `uuid` in its meta_data.json.
fn config_drive(dir: &Path, uuid: &str) -> Vec<u8> {
    let tree = dir.join("cd");
    std::fs::create_dir_all(tree.join("openstack/latest")).unwrap();
    std::fs::write(
        tree.join("openstack/latest/meta_data.json"),
        format!(r#"{{"uuid": "{uuid}", "name": "testimage"}}"#),
    )
    .unwrap();
    let iso = dir.join("cd.iso");
    hardware_tests::run(
        Command::new("genisoimage")
            .args(["-quiet", "-o"])
            .arg(&iso)
            .args(["-ldots", "-allow-lowercase", "-allow-multidot", "-l"])
            .args(["-J", "-r", "-V", "config-2"])
            .arg(&tree),
    )
    .unwrap();
    std::fs::read(iso).unwrap()
}

/// The agent's image write of `image` (raw or qcow2) onto `disk`, a file.
fn deploy(image: &Path, sha256: &str, disk: &Path) -> Result<WriteReport, ImageError> {
    let policy = WritePolicy::from_config(&Config {
        mode: RunMode::Host,
        allowed_devices: vec![disk.to_path_buf()],
        ..Config::default()
    });
    let req = WriteRequest {
        urls: vec![image.display().to_string()],
        checksum: ChecksumSpec::parse_cli(&format!("sha256:{sha256}")).unwrap(),
        md5_allowed: false,
        format: None,
        formats: Default::default(),
        http: HttpOptions::default(),
    };
    write_image(&req, disk, &policy, &Progress::default())
}

fn sparse_disk(path: &Path, size: u64) {
    std::fs::File::create(path).unwrap().set_len(size).unwrap();
}

#[derive(Debug, Clone, Copy)]
enum Firmware {
    Bios,
    Uefi,
}

/// How the disk is attached (the image's initramfs has a driver for each).
#[derive(Debug, Clone, Copy)]
enum Bus {
    VirtioBlk,
    Nvme,
    Ahci,
    VirtioScsi,
}

impl Bus {
    fn args(self, disk: &Path) -> Vec<String> {
        let drive = |iface: &str| format!("file={},if={iface},format=raw,id=d0", disk.display());
        let dev = |d: &str| vec!["-device".to_string(), d.to_string()];
        let mut a = vec!["-drive".to_string()];
        match self {
            Bus::VirtioBlk => a.push(drive("virtio")),
            Bus::Nvme => {
                a.push(drive("none"));
                a.extend(dev("nvme,drive=d0,serial=testimage,bootindex=0"));
            }
            // q35's built-in ICH9 AHCI controller.
            Bus::Ahci => {
                a.push(drive("none"));
                a.extend(dev("ide-hd,drive=d0,bus=ide.0,bootindex=0"));
            }
            Bus::VirtioScsi => {
                a.push(drive("none"));
                a.extend(dev("virtio-scsi-pci,id=scsi0"));
                a.extend(dev("scsi-hd,drive=d0,bus=scsi0.0,bootindex=0"));
            }
        }
        a
    }
}

struct Qemu(Child);

impl Drop for Qemu {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// What one boot showed.
struct Boot {
    console: String,
    /// When the marker line appeared, from starting QEMU.
    marker_at: Option<Duration>,
    /// Wall time until QEMU exited or we stopped it.
    wall: Duration,
    /// QEMU exited by itself (the guest powered off).
    exited: bool,
}

/// Boots `disk` until the guest powers off, a line of [`no_boot_lines`]
/// appears, or `timeout`.
fn boot(fw: Firmware, bus: Bus, disk: &Path, dir: &Path, marker: &str, timeout: Duration) -> Boot {
    let _one_at_a_time = QEMU.lock().unwrap_or_else(|e| e.into_inner());
    let console = dir.join(format!("console-{fw:?}-{bus:?}.log"));
    let mut cmd = Command::new("qemu-system-x86_64");
    cmd.args(["-machine", "q35", "-accel", "tcg", "-cpu", "qemu64,+rdrand"])
        .args(["-m", "512", "-smp", "1"])
        .args([
            "-nographic",
            "-monitor",
            "none",
            "-no-reboot",
            "-nodefaults",
        ])
        .arg("-serial")
        .arg(format!("file:{}", console.display()))
        .args(bus.args(disk));
    match fw {
        Firmware::Bios => {
            cmd.args(["-boot", "c"]);
        }
        Firmware::Uefi => {
            let vars = dir.join("OVMF_VARS.fd");
            std::fs::copy(OVMF_VARS, &vars).expect("OVMF (ci/install-deps installs ovmf)");
            cmd.arg("-drive")
                .arg(format!("if=pflash,format=raw,readonly=on,file={OVMF_CODE}"))
                .arg("-drive")
                .arg(format!("if=pflash,format=raw,file={}", vars.display()));
        }
    }
    let started = Instant::now();
    let mut qemu = Qemu(
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("qemu-system-x86_64 (ci/install-deps installs it)"),
    );
    let want = marker_line(marker);
    let mut marker_at = None;
    let mut exited = false;
    let mut text = String::new();
    while started.elapsed() < timeout {
        exited = matches!(qemu.0.try_wait(), Ok(Some(_)));
        text = String::from_utf8_lossy(&std::fs::read(&console).unwrap_or_default()).into_owned();
        if marker_at.is_none() && text.contains(&want) {
            marker_at = Some(started.elapsed());
        }
        if exited || no_boot_lines().iter().any(|l| text.contains(l)) {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let wall = started.elapsed();
    drop(qemu);
    let console =
        String::from_utf8_lossy(&std::fs::read(&console).unwrap_or_default()).into_owned();
    Boot {
        console: if console.len() >= text.len() {
            console
        } else {
            text
        },
        marker_at,
        wall,
        exited,
    }
}

fn show(what: &str, b: &Boot) {
    println!(
        "{what}: marker after {:?}, wall {:.1} s, guest powered off: {}",
        b.marker_at.map(|d| format!("{:.1} s", d.as_secs_f64())),
        b.wall.as_secs_f64(),
        b.exited
    );
}

/// The console lines the image's init printed, and the firmware's verdict.
fn summary(b: &Boot) -> String {
    let verdict = no_boot_lines();
    let mut in_meta = false;
    b.console
        .lines()
        .map(|l| l.trim_end_matches('\r'))
        .filter(|l| {
            let keep =
                in_meta || l.starts_with("testimage:") || verdict.iter().any(|v| l.contains(v));
            if l.starts_with(testimage::CONFIG_DRIVE_BEGIN) {
                in_meta = true;
            } else if l.starts_with(testimage::CONFIG_DRIVE_END) {
                in_meta = false;
            }
            keep
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn dump(b: &Boot) -> String {
    format!("--- console ---\n{}\n--- end ---", b.console)
}

/// Deploys the image (raw or qcow2) with a config drive and boots it on
/// each of `buses`.
fn deploy_and_boot(fw: Firmware, qcow2: bool, buses: &[Bus]) {
    let (_keep, img, raw_sha) = image();
    let dir = tempfile::tempdir().unwrap();
    let (source, sha) = if qcow2 {
        let q = dir.path().join("testimage.qcow2");
        testimage::to_qcow2(&img.raw, &q, true).unwrap();
        let sha = sha256_file(&q);
        (q, sha)
    } else {
        (img.raw.clone(), raw_sha.clone())
    };
    let disk = dir.path().join("disk.img");
    sparse_disk(&disk, 2 * GIB);
    let report = deploy(&source, &sha, &disk).unwrap();
    assert_eq!(report.image_size, img.size);
    assert!(
        report.gpt_moved,
        "the backup GPT was moved to the disk's end"
    );
    let uuid = random_uuid();
    let placed =
        agent_contents::configdrive::write(&disk, &config_drive(dir.path(), &uuid)).unwrap();
    assert!(
        !placed.reused,
        "the image has no config-2 partition of its own"
    );
    assert_eq!(placed.part.number, 2, "{placed:?}");

    for bus in buses {
        let b = boot(
            fw,
            *bus,
            &disk,
            dir.path(),
            &img.marker,
            Duration::from_secs(240),
        );
        show(&format!("{fw:?} boot of the deployed image on {bus:?}"), &b);
        println!("{}", summary(&b));
        assert!(b.marker_at.is_some(), "no marker line\n{}", dump(&b));
        let meta = testimage::meta_data(&b.console);
        assert!(
            meta.as_deref().is_some_and(|m| m.contains(&uuid)),
            "meta_data.json with {uuid} not printed (got {meta:?})\n{}",
            dump(&b)
        );
        assert!(b.exited, "the guest did not power off\n{}", dump(&b));
    }
}

#[test]
fn the_image_is_a_small_gpt_disk_with_a_bios_bootable_esp() {
    let (_keep, img, _) = image();
    assert_eq!(img.size, testimage::IMAGE_SIZE);
    assert!(img.size <= 64 << 20);
    let dump = hardware_tests::run(Command::new("sfdisk").arg("-d").arg(&img.raw)).unwrap();
    assert!(dump.contains("label: gpt"), "{dump}");
    assert!(
        dump.contains("type=C12A7328-F81F-11D2-BA4B-00A0C93EC93B")
            && dump.contains("LegacyBIOSBootable"),
        "{dump}"
    );
    let raw = std::fs::read(&img.raw).unwrap();
    let gptmbr = std::fs::read("/usr/lib/syslinux/mbr/gptmbr.bin").unwrap();
    assert_eq!(&raw[..gptmbr.len()], &gptmbr[..], "gptmbr.bin boot code");
    let listing = hardware_tests::run(
        hardware_tests::mtools("mdir", format!("{}@@1M", img.raw.display()))
            .args(["-/", "-a", "-b", "::"]),
    )
    .unwrap();
    for f in ["VMLINUZ", "INITRD.IMG", "LDLINUX.SYS", "BOOTX64.EFI"] {
        assert!(
            listing.to_uppercase().contains(f),
            "{f} missing:\n{listing}"
        );
    }
}

#[test]
fn the_same_inputs_give_the_same_image() {
    let (_keep, img, sha) = image();
    let dir = tempfile::tempdir().unwrap();
    // Not while a VM boots: the boots' wall times are reported.
    let _quiet = QEMU.lock().unwrap_or_else(|e| e.into_inner());
    let again = testimage::build(dir.path(), &img.marker).unwrap();
    assert_eq!(&sha256_file(&again.raw), sha);
}

#[test]
fn seabios_boots_the_deployed_raw_image_and_it_reads_its_config_drive() {
    deploy_and_boot(Firmware::Bios, false, &[Bus::VirtioBlk]);
}

#[test]
fn ovmf_boots_the_deployed_qcow2_image_and_it_reads_its_config_drive() {
    deploy_and_boot(Firmware::Uefi, true, &[Bus::VirtioBlk]);
}

#[test]
fn the_deployed_image_finds_its_config_drive_on_nvme_ahci_and_virtio_scsi() {
    deploy_and_boot(
        Firmware::Bios,
        false,
        &[Bus::Nvme, Bus::Ahci, Bus::VirtioScsi],
    );
}

#[test]
fn without_a_config_drive_the_booted_system_says_so() {
    let (_keep, img, sha) = image();
    let dir = tempfile::tempdir().unwrap();
    let disk = dir.path().join("disk.img");
    sparse_disk(&disk, 2 * GIB);
    deploy(&img.raw, sha, &disk).unwrap();
    let b = boot(
        Firmware::Bios,
        Bus::VirtioBlk,
        &disk,
        dir.path(),
        &img.marker,
        Duration::from_secs(240),
    );
    show("Bios boot without a config drive", &b);
    println!("{}", summary(&b));
    assert!(b.marker_at.is_some(), "no marker line\n{}", dump(&b));
    assert!(
        b.console.contains(testimage::NO_CONFIG_DRIVE)
            && testimage::meta_data(&b.console).is_none(),
        "{}",
        dump(&b)
    );
    assert!(b.exited, "the guest did not power off\n{}", dump(&b));
}

/// The bootable CoreOS-like image (`coreosimage::bootable_coreos_image`,
/// which the live-system bed deploys with coreos-installer) boots under
/// OVMF through systemd-boot from its BLS entry: the kernel's command line
/// is the entry's `options` after the initrd's path, and its first boot
/// shows the Ignition config put where coreos-installer puts it
/// (`ignition/config.ign` in the `boot` filesystem, here with mtools) and
/// its stand-in for Ignition applies it (a file and a user's SSH key).
#[test]
fn ovmf_boots_the_coreos_like_image_from_its_bls_entry() {
    let dir = tempfile::tempdir().unwrap();
    let img = hardware_tests::coreosimage::bootable_coreos_image(dir.path(), "fcos-like").unwrap();
    let config = r#"{"ignition":{"version":"3.2.0"},"passwd":{"users":[{"name":"core","sshAuthorizedKeys":["ssh-ed25519 AAAA bed"]}]},"storage":{"files":[{"path":"/etc/hostname","mode":420,"contents":{"source":"data:,fcos%2Dlike"}}]}}"#;
    let ign = dir.path().join("config.ign");
    std::fs::write(&ign, config).unwrap();
    let fat = format!("{}@@1M", img.raw.display());
    let mtools = |tool: &str, args: &[&str]| {
        hardware_tests::run(hardware_tests::mtools(tool, &fat).args(args)).unwrap();
    };
    mtools("mmd", &["::ignition"]);
    mtools("mcopy", &[ign.to_str().unwrap(), "::ignition/config.ign"]);
    let b = boot(
        Firmware::Uefi,
        Bus::VirtioBlk,
        &img.raw,
        dir.path(),
        "fcos-like",
        Duration::from_secs(240),
    );
    show("Uefi boot of the CoreOS-like image", &b);
    println!("{}", summary(&b));
    assert!(b.marker_at.is_some(), "no marker line\n{}", dump(&b));
    let options = img
        .bls
        .lines()
        .find_map(|l| l.strip_prefix("options "))
        .unwrap();
    // systemd-boot puts the initrd's path first (`initrd=\initrd.img`).
    let cmdline = testimage::kernel_cmdline(&b.console).unwrap_or_default();
    assert!(
        cmdline.starts_with("initrd=") && cmdline.ends_with(&format!(" {options}")),
        "{cmdline:?}\n{}",
        dump(&b)
    );
    assert_eq!(
        testimage::ignition_config(&b.console).as_deref(),
        Some(config),
        "{}",
        dump(&b)
    );
    let applied = testimage::ignition::applied(&b.console).unwrap_or_default();
    let want = [
        ("/etc/hostname", "fcos-like"),
        (
            "/home/core/.ssh/authorized_keys.d/ignition",
            "ssh-ed25519 AAAA bed",
        ),
    ];
    assert_eq!(
        applied,
        want.map(|(p, c)| (p.to_string(), c.to_string())).into(),
        "{}",
        dump(&b)
    );
    assert!(b.exited, "the guest did not power off\n{}", dump(&b));
}

/// The disk a failed write leaves: the agent zeroes both ends.
fn failed_deploy(dir: &Path) -> PathBuf {
    let (_keep, img, _) = image();
    let disk = dir.join("disk.img");
    sparse_disk(&disk, 2 * GIB);
    let err = deploy(&img.raw, &"0".repeat(64), &disk).unwrap_err();
    assert!(matches!(err, ImageError::ChecksumMismatch { .. }), "{err}");
    // What the agent leaves: nothing in the first MiB, the rest of the
    // image (up to its last MiB) as written.
    let n = img.size as usize;
    let mut head = vec![0u8; n];
    std::fs::File::open(&disk)
        .unwrap()
        .read_exact_at(&mut head, 0)
        .unwrap();
    let raw = std::fs::read(&img.raw).unwrap();
    assert!(head[..1 << 20].iter().all(|b| *b == 0), "first MiB zeroed");
    let body = (1 << 20)..(n - (1 << 20));
    assert!(raw[body.clone()].iter().any(|b| *b != 0));
    assert!(
        head[body.clone()] == raw[body],
        "the rest of the image was written"
    );
    disk
}

fn no_boot(fw: Firmware) {
    let (_keep, img, _) = image();
    let dir = tempfile::tempdir().unwrap();
    let disk = failed_deploy(dir.path());
    let b = boot(
        fw,
        Bus::VirtioBlk,
        &disk,
        dir.path(),
        &img.marker,
        Duration::from_secs(120),
    );
    show(&format!("{fw:?} boot after a failed write"), &b);
    println!("{}", summary(&b));
    assert!(b.marker_at.is_none(), "booted anyway\n{}", dump(&b));
    assert!(
        no_boot_lines().iter().any(|l| b.console.contains(l)),
        "no line of {:?} on the console\n{}",
        no_boot_lines(),
        dump(&b)
    );
}

#[test]
fn seabios_finds_nothing_to_boot_after_a_failed_write() {
    no_boot(Firmware::Bios);
}

#[test]
fn ovmf_finds_nothing_to_boot_after_a_failed_write() {
    no_boot(Firmware::Uefi);
}
