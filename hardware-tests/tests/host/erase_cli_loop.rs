//! `agent erase` as typed in a shell (parsed and run in-process, host
//! mode): refused unless the device is named again with --allow-device,
//! refused when mounted, and on an allowed file-backed loop device each
//! method leaves it wiped (discard and overwrite: all zeros; metadata: no
//! signature left).

use std::process::Command;

use agent::cli::Cli;
use clap::Parser;
use hardware_tests::loopdev::LoopDevice;
use hardware_tests::run;

const MIB: u64 = 1 << 20;

async fn erase(args: &[&str]) -> anyhow::Result<()> {
    let mut argv = vec!["agent", "erase"];
    argv.extend_from_slice(args);
    agent::cli::run(Cli::try_parse_from(argv)?).await
}

fn all_zero(dev: &LoopDevice) -> bool {
    std::fs::read(&dev.path).unwrap().iter().all(|b| *b == 0)
}

/// GPT + ext4 on the first partition, then the kernel's partitions
/// removed (as after a reboot; they would hold the disk).
fn formatted(size: u64) -> LoopDevice {
    let d = LoopDevice::new(size).unwrap();
    d.partition_and_format().unwrap();
    run(Command::new("partx").arg("--delete").arg(&d.path)).ok();
    assert!(!d.signatures().unwrap().is_empty());
    d
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn erase_refuses_unlisted_and_mounted_devices_and_wipes_an_allowed_one() {
    hardware_tests::require_root("the agent erase loop-device test");
    assert!(
        !agent_core::power::in_ramdisk(),
        "this test is for host mode"
    );
    let a = formatted(32 * MIB);
    let other = LoopDevice::new(8 * MIB).unwrap();
    let dev = a.path.to_str().unwrap();

    let e = erase(&["--device", dev]).await.unwrap_err();
    assert!(format!("{e:#}").contains("--allow-device"), "{e:#}");
    let e = erase(&[
        "--device",
        dev,
        "--allow-device",
        other.path.to_str().unwrap(),
    ])
    .await
    .unwrap_err();
    assert!(format!("{e:#}").contains("--allow-device"), "{e:#}");
    let e = erase(&["--device", dev, "--allow-device", dev, "--method", "shred"])
        .await
        .unwrap_err();
    assert!(
        format!("{e:#}").contains("expected auto, metadata"),
        "{e:#}"
    );
    assert!(!a.signatures().unwrap().is_empty(), "still untouched");

    // A mounted device is refused even when allowed.
    let b = LoopDevice::new(16 * MIB).unwrap();
    run(Command::new("mkfs.ext4").args(["-q", "-F"]).arg(&b.path)).unwrap();
    let mnt = tempfile::tempdir().unwrap();
    run(Command::new("mount").arg(&b.path).arg(mnt.path())).unwrap();
    let bdev = b.path.to_str().unwrap();
    let refused = erase(&["--device", bdev, "--allow-device", bdev]).await;
    run(Command::new("umount").arg(mnt.path())).unwrap();
    let e = refused.unwrap_err();
    assert!(format!("{e:#}").contains("is mounted at"), "{e:#}");
    assert!(!b.signatures().unwrap().is_empty());

    // Allowed: each method.
    erase(&[
        "--device",
        dev,
        "--allow-device",
        dev,
        "--method",
        "discard",
    ])
    .await
    .unwrap();
    assert!(all_zero(&a));

    std::fs::write(&a.path, vec![0x5au8; 4 << 20]).unwrap();
    erase(&[
        "--device",
        dev,
        "--allow-device",
        dev,
        "--method",
        "overwrite",
        "--iterations",
        "1",
    ])
    .await
    .unwrap();
    assert!(all_zero(&a));

    let c = formatted(32 * MIB);
    let cdev = c.path.to_str().unwrap();
    erase(&[
        "--device",
        cdev,
        "--allow-device",
        cdev,
        "--method",
        "metadata",
    ])
    .await
    .unwrap();
    assert!(c.signatures().unwrap().is_empty());

    // A loop device is no NVMe namespace: --method nvme fails cleanly.
    let e = erase(&["--device", cdev, "--allow-device", cdev, "--method", "nvme"])
        .await
        .unwrap_err();
    assert!(format!("{e:#}").contains("not an NVMe namespace"), "{e:#}");
}

/// A loop device has no SG_IO: the ATA security erase is "not applicable"
/// (not an error) and `erase_devices`' choice falls through to overwrite,
/// discard enabled or not (IPA 13 discards only after a secure erase that
/// failed); asked for explicitly, the method fails with the reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ata_security_erase_falls_through_on_a_device_without_sg_io() {
    use agent_base::config::{Config, RunMode};
    use agent_devices::disk::fullerase::{ata, erase_with, Erased, Knobs, Method};
    use std::sync::atomic::{AtomicBool, AtomicU64};

    hardware_tests::require_root("the ATA fall-through loop-device test");
    let d = formatted(16 * MIB);
    let f = std::fs::File::open(&d.path).unwrap();
    let name = d.path.file_name().unwrap().to_str().unwrap().to_string();
    match ata::try_secure_erase(&d.path, Some(&name), &f).unwrap() {
        ata::Outcome::NotApplicable(why) => {
            assert!(why.contains("no SG_IO"), "{why}")
        }
        other => panic!("{other:?}"),
    }
    drop(f);

    let policy = agent_devices::disk::WritePolicy::from_config(&Config {
        mode: RunMode::Host,
        allowed_devices: vec![d.path.clone()],
        ..Config::default()
    });
    let knobs = Knobs {
        enable_ata_secure_erase: true,
        enable_discard: true,
        ..Knobs::default()
    };
    let done = AtomicU64::new(0);
    let erased = erase_with(
        &d.path,
        &policy,
        &knobs,
        Method::Auto,
        &AtomicBool::new(false),
        &done,
    )
    .unwrap();
    assert!(matches!(erased, Erased::Overwrite { .. }), "{erased:?}");
    assert!(all_zero(&d));

    let dev = d.path.to_str().unwrap();
    let e = erase(&["--device", dev, "--allow-device", dev, "--method", "ata"])
        .await
        .unwrap_err();
    assert!(format!("{e:#}").contains("does not apply"), "{e:#}");
}
