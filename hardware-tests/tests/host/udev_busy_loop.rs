//! The agent beside a real systemd-udevd (issue 20, item 4): udev watches
//! the disks the agent writes and, each time the agent closes one, re-reads
//! its partition table and probes it and its partitions; meanwhile the
//! kernel answers EBUSY to the agent's own re-read and exclusive opens.
//! Before `agent_devices::disk::busy` the metadata erase failed two times in three
//! with "re-reading the partition table: Device or resource busy".
//!
//! Here udevd (Debian's, `hardware_tests::udevd`: private mount namespace,
//! acting only on this test's loop devices) runs while the agent erases the
//! metadata of a partitioned, formatted loop device and writes a
//! partitioned image to it, again and again; every run must succeed and
//! leave the expected disk. The test first proves udevd really acts on the
//! device: it recorded the probe's results and watches the device.

use agent::cli::Cli;
use clap::Parser;
use hardware_tests::loopdev::LoopDevice;
use hardware_tests::udevd::Udevd;

const MIB: u64 = 1 << 20;
const ROUNDS: usize = 8;

async fn agent(sub: &str, args: &[&str]) -> anyhow::Result<()> {
    let mut argv = vec!["agent", sub];
    argv.extend_from_slice(args);
    agent::cli::run(Cli::try_parse_from(argv)?).await
}

fn devno(path: &std::path::Path) -> (u64, u64) {
    agent_devices::disk::Device::open(path)
        .unwrap()
        .devno
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn erase_and_write_succeed_every_time_with_udevd_probing_the_disk() {
    hardware_tests::require_root("the udev loop-device test");
    assert!(
        !agent_core::power::in_ramdisk(),
        "this test is for host mode"
    );
    let scope = tempfile::tempdir().unwrap();
    let udevd = Udevd::start(scope.path()).unwrap();
    let d = LoopDevice::new_in(scope.path(), 48 * MIB).unwrap();
    let dev = d.path.to_str().unwrap().to_string();
    let (major, minor) = devno(&d.path);

    // udevd probes and watches it (the loop device was just attached; the
    // partitioning closes it after writing, which udev sees).
    d.partition_and_format().unwrap();
    let start = std::time::Instant::now();
    loop {
        let entry = udevd.db_entry(major, minor).unwrap_or_default();
        if entry.contains("ID_PART_TABLE_TYPE=gpt") && udevd.watches(major, minor) {
            break;
        }
        assert!(
            start.elapsed().as_secs() < 20,
            "udevd did not probe or watch {dev}: db {entry:?}\n{}",
            udevd.log()
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }

    // The image: GPT, two partitions, some data.
    let img = scope.path().join("image.raw");
    hardware_tests::images::sfdisk_image(&img, 40 * MIB, "label: gpt\n,8MiB\n,\n").unwrap();
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new().write(true).open(&img).unwrap();
        f.write_all_at(&[0xa5; 4096], 2 * MIB).unwrap();
    }
    let image = std::fs::read(&img).unwrap();
    let sum = format!("sha256:{}", hardware_tests::images::sha256_hex(&image));

    for round in 0..ROUNDS {
        if round > 0 {
            d.partition_and_format().unwrap();
        }
        agent(
            "erase",
            &[
                "--device",
                &dev,
                "--allow-device",
                &dev,
                "--method",
                "metadata",
            ],
        )
        .await
        .unwrap_or_else(|e| panic!("round {round}: erase: {e:#}"));
        assert!(d.signatures().unwrap().is_empty(), "round {round}");

        agent(
            "write-image",
            &[
                "--image",
                img.to_str().unwrap(),
                "--checksum",
                &sum,
                "--device",
                &dev,
            ],
        )
        .await
        .unwrap_or_else(|e| panic!("round {round}: write-image: {e:#}"));
        let written = std::fs::read(&d.path).unwrap();
        // The partitions' bytes are the image's (the agent rewrote the GPT
        // headers to move the backup table to the disk's end).
        let body = MIB as usize..image.len() - MIB as usize;
        assert!(
            written[body.clone()] == image[body],
            "round {round}: image differs"
        );
    }

    println!(
        "{ROUNDS} rounds: the agent waited out EBUSY {} time(s)",
        agent_devices::disk::busy::waits()
    );
    let log = udevd.stop();
    // It kept working on this device through the rounds.
    let events = log
        .matches(&format!(
            "{}:",
            d.path.file_name().unwrap().to_str().unwrap()
        ))
        .count();
    assert!(
        events > ROUNDS,
        "udevd logged {events} lines about the device:\n{log}"
    );
}
