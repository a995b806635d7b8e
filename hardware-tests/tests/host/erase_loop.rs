//! `erase_devices` on loop devices this test creates: two disks in
//! parallel, overwritten although discard is enabled (a loop device has no
//! secure erase, and IPA 13 discards only after a secure erase that
//! failed); discard asked for by name, with a sampled read-back (the loop
//! driver punches holes in the backing file); then the overwrite method on
//! a block device (random pass, zero pass through BLKZEROOUT, verified).

use std::sync::atomic::{AtomicBool, AtomicU64};

use agent_base::config::Config;
use agent_devices::disk::fullerase::{erase_disks, erase_with, methods, Erased, Knobs, Method};
use agent_devices::disk::WritePolicy;
use hardware_tests::loopdev::LoopDevice;

fn all_zero(dev: &LoopDevice) -> bool {
    std::fs::read(&dev.path).unwrap().iter().all(|b| *b == 0)
}

#[test]
fn erase_devices_discards_two_loop_devices_and_overwrites_one() {
    hardware_tests::require_root("the loop-device erase test");
    let a = LoopDevice::new(48 << 20).unwrap();
    let b = LoopDevice::new(48 << 20).unwrap();
    for d in [&a, &b] {
        d.partition_and_format().unwrap();
        assert!(!d.signatures().unwrap().is_empty());
        // The kernel's partitions would hold the disk; the agent erases
        // whole disks only after they are gone (as after a reboot).
        hardware_tests::run(
            std::process::Command::new("partx")
                .arg("--delete")
                .arg(&d.path),
        )
        .ok();
    }
    let disks = vec![a.path.clone(), b.path.clone()];
    let policy = WritePolicy::from_config(&Config {
        allowed_devices: disks.clone(),
        ..Config::default()
    });
    let knobs = Knobs {
        concurrency: 2,
        enable_discard: true,
        ..Knobs::default()
    };
    let out = erase_disks(&disks, &policy, &knobs, &AtomicBool::new(false)).unwrap();
    for (d, o) in &out {
        assert!(
            matches!(o.erased, Erased::Overwrite { .. }),
            "{}: {:?}",
            d.display(),
            o.erased
        );
    }
    assert!(all_zero(&a) && all_zero(&b));
    assert!(a.signatures().unwrap().is_empty());

    std::fs::write(&b.path, vec![0x5au8; 1 << 20]).unwrap();
    let done = AtomicU64::new(0);
    let e = erase_with(
        &b.path,
        &policy,
        &knobs,
        Method::Discard,
        &AtomicBool::new(false),
        &done,
    )
    .unwrap();
    assert_eq!(e, Erased::Discard);
    assert!(all_zero(&b));

    std::fs::write(&a.path, vec![0xa5u8; 1 << 20]).unwrap();
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&a.path)
        .unwrap();
    let (cancel, done) = (AtomicBool::new(false), AtomicU64::new(0));
    let t = methods::Target {
        file: &file,
        size: 48 << 20,
        is_block: true,
        cancel: &cancel,
        done: &done,
    };
    t.overwrite(1, true).unwrap();
    drop(file);
    assert!(all_zero(&a));
}

/// IPA 13's read-only branch: a read-only device fails the erase unless
/// `agent_erase_skip_read_only`, and is then skipped untouched.
#[test]
fn a_read_only_disk_fails_the_erase_or_is_skipped_when_allowed() {
    hardware_tests::require_root("the loop-device erase test");
    let d = LoopDevice::new(16 << 20).unwrap();
    std::fs::write(&d.path, vec![0x77u8; 1 << 20]).unwrap();
    hardware_tests::run(
        std::process::Command::new("blockdev")
            .arg("--setro")
            .arg(&d.path),
    )
    .unwrap();
    let disks = vec![d.path.clone()];
    let policy = WritePolicy::from_config(&Config {
        allowed_devices: disks.clone(),
        ..Config::default()
    });
    let e = erase_disks(&disks, &policy, &Knobs::default(), &AtomicBool::new(false)).unwrap_err();
    assert!(
        format!("{e:#}").contains("agent_erase_skip_read_only"),
        "{e:#}"
    );
    let knobs = Knobs {
        skip_read_only: true,
        ..Knobs::default()
    };
    let out = erase_disks(&disks, &policy, &knobs, &AtomicBool::new(false)).unwrap();
    assert!(
        matches!(out[0].1.erased, Erased::Skipped(_)),
        "{:?}",
        out[0].1
    );
    hardware_tests::run(
        std::process::Command::new("blockdev")
            .arg("--setrw")
            .arg(&d.path),
    )
    .unwrap();
    assert!(std::fs::read(&d.path).unwrap()[..1 << 20]
        .iter()
        .all(|b| *b == 0x77));
}
