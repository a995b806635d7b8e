//! A vfat config drive (made by mkfs.vfat with 512-byte sectors, as
//! Ironic-side tools make them) on a loop device with 4096-byte logical
//! sectors: Linux mounts FAT only when its bytes-per-sector is at least the
//! device's logical block size, so the agent rebuilds it with 4096-byte
//! sectors. Checked here: the new partition's boot sector says 4096 bytes
//! per sector, fsck.fat finds nothing wrong, the label is CONFIG-2 and
//! mtools reads the same files through the 4Kn partition device. This
//! host's kernel has no vfat module, so the kernel mount itself is checked
//! in the QEMU guest (`ramdisk_qemu_4kn_configdrive.rs`).

use std::path::Path;
use std::process::Command;

use hardware_tests::loopdev::LoopDevice;
use hardware_tests::run;

const MIB: u64 = 1 << 20;
const META: &str = r#"{"uuid": "5c4a-4kn", "hostname": "node-4kn"}"#;

/// A 4 MiB vfat image (512-byte sectors) with openstack/latest/*.
fn vfat_config_drive(dir: &Path) -> Vec<u8> {
    hardware_tests::vfat_config_drive(
        dir,
        &[
            ("meta_data.json", META),
            ("user_data", "#cloud-config\nhostname: node-4kn\n"),
        ],
    )
    .unwrap()
}

fn bytes_per_sector(dev: &Path) -> u16 {
    use std::os::unix::fs::FileExt;
    let mut b = [0u8; 2];
    std::fs::File::open(dev)
        .unwrap()
        .read_exact_at(&mut b, 11)
        .unwrap();
    u16::from_le_bytes(b)
}

fn mtype(dev: &Path, file: &str) -> String {
    run(hardware_tests::mtools("mtype", dev).arg(format!("::/{file}"))).unwrap()
}

#[test]
fn a_512_byte_vfat_config_drive_is_rebuilt_for_a_4kn_disk() {
    hardware_tests::require_root("the 4Kn config-drive test");
    let dir = tempfile::tempdir().unwrap();
    let cd = vfat_config_drive(dir.path());
    assert_eq!(u16::from_le_bytes([cd[11], cd[12]]), 512);

    let disk = LoopDevice::with_sector_size(128 * MIB, 4096).unwrap();
    let ss = run(Command::new("blockdev").arg("--getss").arg(&disk.path)).unwrap();
    assert_eq!(ss, "4096");
    let mut child = Command::new("sfdisk")
        .args(["--quiet", "--no-reread", "--no-tell-kernel"])
        .arg(&disk.path)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"label: gpt\nsize=32MiB, name=root\n")
        .unwrap();
    assert!(child.wait().unwrap().success());

    let placed = agent_contents::configdrive::write(&disk.path, &cd).unwrap();
    assert!(!placed.reused);
    assert_eq!(placed.label.as_deref(), Some("CONFIG-2"));
    // Settled: beside a real udevd (ci/test's with-udevd job), the close
    // after the write makes it re-read the table, and the partitions'
    // nodes go away for a moment.
    disk.settled_partitions(2).unwrap();
    let part = disk.wait_partition(placed.part.number).unwrap();
    assert_eq!(bytes_per_sector(&part), 4096);
    run(Command::new("fsck.fat").arg("-n").arg(&part)).expect("fsck.fat finds no error");
    let label = run(Command::new("blkid")
        .args(["-o", "value", "-s", "LABEL"])
        .arg(&part))
    .unwrap();
    assert_eq!(label, "CONFIG-2");
    assert_eq!(mtype(&part, "openstack/latest/meta_data.json"), META);
    assert_eq!(
        mtype(&part, "openstack/latest/user_data"),
        "#cloud-config\nhostname: node-4kn"
    );
    run(Command::new("partx").arg("--delete").arg(&disk.path)).ok();
}
