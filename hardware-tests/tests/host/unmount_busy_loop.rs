//! Unmounting a partition the agent mounted while something still holds it
//! (`agent_contents::ignition::mount::umount`, host mode, an ext4 filesystem in an
//! image file mounted through a loop device). The CI run on 2026-11-24
//! failed `install_bootloader` once with "umount: target is busy": a tool
//! started by another thread at that moment held copies of the agent's
//! descriptors into the mount until it exec'd.
//!
//! 1. A holder that lets go after about a second: the unmount is retried
//!    and succeeds, the mount and its directory are gone.
//! 2. A holder that never lets go: the unmount fails after its retries with
//!    umount's own "target is busy", and the mount is still detached
//!    (lazily), so nothing is left in the mount table, nor its directory.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use agent_contents::ignition::mount::Mounted;

const MIB: u64 = 1 << 20;

/// An image file holding one ext4 filesystem of 16 MiB.
fn ext4_file(dir: &Path) -> std::path::PathBuf {
    let img = dir.join("fs.img");
    std::fs::File::create(&img)
        .unwrap()
        .set_len(16 * MIB)
        .unwrap();
    hardware_tests::run(Command::new("mkfs.ext4").args(["-q", "-F"]).arg(&img)).unwrap();
    img
}

fn mounted_here(dir: &Path) -> bool {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let dir = dir.to_str().unwrap();
    info.lines().any(|l| l.split(' ').nth(4) == Some(dir))
}

#[test]
fn a_briefly_busy_mount_is_unmounted_after_a_retry() {
    hardware_tests::require_root("the busy unmount test");
    let tmp = tempfile::tempdir().unwrap();
    let img = ext4_file(tmp.path());
    let m = Mounted::new(&img, 0, 16 * MIB, "ext4", false).unwrap();
    let dir = m.path();
    assert!(mounted_here(&dir), "not mounted at {}", dir.display());
    // Held from the mount's root, released after a second.
    let held = std::fs::File::open(&dir).unwrap();
    let holder = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(1000));
        drop(held);
    });
    let t = Instant::now();
    m.unmount().expect("the unmount after the holder let go");
    holder.join().unwrap();
    assert!(
        t.elapsed() >= Duration::from_millis(900),
        "unmounted in {:?} although held for a second",
        t.elapsed()
    );
    assert!(!mounted_here(&dir), "still mounted at {}", dir.display());
    assert!(!dir.exists(), "mount point {} left behind", dir.display());
}

#[test]
fn a_mount_that_stays_busy_fails_and_is_detached() {
    hardware_tests::require_root("the busy unmount test");
    let tmp = tempfile::tempdir().unwrap();
    let img = ext4_file(tmp.path());
    let m = Mounted::new(&img, 0, 16 * MIB, "ext4", false).unwrap();
    let dir = m.path();
    let held = std::fs::File::open(dir.join("lost+found")).unwrap();
    let err = m.unmount().expect_err("unmounted although held throughout");
    let msg = format!("{err}");
    assert!(
        msg.contains("umount") && msg.contains("busy"),
        "not umount's busy error: {msg}"
    );
    assert!(
        !mounted_here(&dir),
        "still in the mount table at {}",
        dir.display()
    );
    assert!(!dir.exists(), "mount point {} left behind", dir.display());
    drop(held);
}
