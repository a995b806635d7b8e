//! Cleaning figures (issue 18): automated cleaning (`erase_devices_metadata`
//! at 99, then `erase_devices` at 10) of four disks of four kinds at once
//! on the QEMU bed, virtio-blk, NVMe, SATA (AHCI) and SCSI (virtio-scsi),
//! each with a GPT and an ext4 filesystem. For each disk the agent's log
//! says which method it chose and the wall time and MB/s of its erase (the
//! same line is the disk's entry in the step's result), and the time of the
//! metadata wipe. The figures go to `target/bed-logs/clean-bench/
//! erase-times.txt`; the disks must be left without any signature, and the
//! erases must have overlapped (disks in parallel).
//!
//! `cargo test` runs it with 256 MiB disks and the default knobs, as Ironic
//! sends them: the NVMe disk is formatted, the others are overwritten with
//! one random pass and verified zeros. With `BED_CLEAN_DISCARD=1`
//! (`ipa-enable-discard-erase`) the outcome is the same: as in IPA 13, a
//! discard only follows a secure erase that *failed*, and QEMU's disks
//! have no ATA security feature set (not applicable: overwrite).
//! `ci/bench-clean` runs larger disks (2 GiB each by default).

use std::time::Duration;

use agent::testconductor::{Settings, TestConductor};
use hardware_tests::bed::dirty_disk;
use hardware_tests::bed::{self, Bus, Disk, Net, NetOptions, Nic, Vm, VmSpec, BRIDGE_IP};
use hardware_tests::require_root;

const MIB: u64 = 1 << 20;

/// One disk's erase as the agent logged it.
#[derive(Debug)]
struct Erase {
    device: String,
    seconds: f64,
    mb_per_s: f64,
    method: String,
    /// Uptime of the log line (the end of this disk's erase).
    ended: f64,
}

/// `key=value` from an agent log line (values without spaces), or the rest
/// of the line for the last field.
fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let at = line.find(&format!(" {key}="))? + key.len() + 2;
    let rest = &line[at..];
    Some(if key == "method" {
        rest.trim()
    } else {
        rest.split_whitespace().next()?
    })
}

fn uptime(line: &str) -> Option<f64> {
    line.strip_prefix('[')?
        .split_once(']')?
        .0
        .trim()
        .parse()
        .ok()
}

fn erases(console: &str) -> Vec<Erase> {
    console
        .lines()
        .filter(|l| l.contains("INFO disk erase done"))
        .filter_map(|l| {
            Some(Erase {
                device: field(l, "device")?.to_string(),
                seconds: field(l, "seconds")?.parse().ok()?,
                mb_per_s: field(l, "mb_per_s")?.parse().ok()?,
                method: field(l, "method")?.to_string(),
                ended: uptime(l)?,
            })
        })
        .collect()
}

/// `(device, seconds)` of each metadata wipe.
fn metadata_wipes(console: &str) -> Vec<(String, f64)> {
    console
        .lines()
        .filter(|l| l.contains("INFO metadata erased"))
        .filter_map(|l| {
            Some((
                field(l, "device")?.to_string(),
                field(l, "seconds")?.parse().ok()?,
            ))
        })
        .collect()
}

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[test]
fn erase_devices_on_four_kinds_of_disk_reports_method_time_and_rate_per_disk() {
    require_root("the QEMU test bed");
    let size = env_or("BED_CLEAN_DISK_MIB", 256u64) * MIB;
    let discard = env_or("BED_CLEAN_DISCARD", 0u8) == 1;
    let ramdisk = bed::ramdisk_dir().unwrap();
    let work = bed::logs_dir("clean-bench").unwrap();
    let disks_dir = tempfile::tempdir_in(hardware_tests::repo_root().join("target")).unwrap();
    let mac = "52:54:00:20:00:31";
    let args = format!(
        "console=ttyS0 quiet panic=-1 ipa-api-url=http://{BRIDGE_IP}:6385{}",
        if discard {
            " ipa-enable-discard-erase=1"
        } else {
            ""
        }
    );
    let net = Net::start(NetOptions::pxe("clean-bench", &ramdisk, &args)).unwrap();
    let mut spec = VmSpec::new("vm");
    let kinds = [
        ("VIRT0031", Bus::Virtio, None),
        ("NVME0032", Bus::Nvme, None),
        ("SATA0033", Bus::Sata, Some("BED SATA DISK")),
        ("SCSI0034", Bus::Scsi, Some("BED SCSI DISK")),
    ];
    spec.disks = kinds
        .iter()
        .map(|(serial, bus, model)| Disk {
            path: disks_dir.path().join(format!("{serial}.img")),
            size,
            bus: *bus,
            serial: serial.to_string(),
            model: model.map(str::to_string),
        })
        .collect();
    for d in &spec.disks {
        dirty_disk::gpt_ext4(&d.path, d.size).unwrap();
    }
    spec.nics.push(Nic { mac: mac.into() });

    let console = net
        .block_on(async {
            let conductor = TestConductor::start_on(
                Settings::default(),
                format!("{BRIDGE_IP}:6385").parse().unwrap(),
            )
            .await?;
            let uuid = conductor.enroll(&[mac]);
            conductor.start_clean(&uuid, None)?;
            let mut vm = Vm::start(&net, &spec)?;
            let node = conductor
                .wait_for_state(&uuid, "available", Duration::from_secs(1800))
                .await;
            vm.kill();
            let console = vm.console();
            node.map_err(|e| {
                anyhow::anyhow!(
                    "{e:#}\n--- console {} ---\n{console}",
                    vm.console_path().display()
                )
            })?;
            anyhow::Ok(console)
        })
        .unwrap()
        .unwrap_or_else(|e| panic!("{e:#}"));

    let erased = erases(&console);
    let wipes = metadata_wipes(&console);
    let mut report = format!(
        "automated cleaning of 4 disks of {} MiB (virtio, NVMe, SATA, SCSI), discard {}:\n",
        size / MIB,
        if discard {
            "enabled"
        } else {
            "off (Ironic's default)"
        }
    );
    for e in &erased {
        report += &format!(
            "erase_devices {}: {} in {:.2} s, {:.0} MB/s\n",
            e.device, e.method, e.seconds, e.mb_per_s
        );
    }
    for (dev, s) in &wipes {
        report += &format!("erase_devices_metadata {dev}: {s:.2} s\n");
    }
    print!("{report}");
    std::fs::write(work.join("erase-times.txt"), &report).unwrap();

    let ctx = format!("console: {}", net.logs.join("vm.console.log").display());
    assert_eq!(erased.len(), 4, "one erase line per disk; {ctx}\n{report}");
    for d in &spec.disks {
        let left = dirty_disk::signatures(&d.path).unwrap();
        assert!(left.is_empty(), "{} still has: {left}; {ctx}", d.serial);
    }
    let method = |dev: &str| {
        erased
            .iter()
            .find(|e| e.device.contains(dev))
            .map(|e| e.method.clone())
            .unwrap_or_default()
    };
    assert!(method("nvme").starts_with("NVMe format"), "{report}");
    let others = "overwrite: 1 random pass(es), zeroed and verified";
    for e in erased.iter().filter(|e| !e.device.contains("nvme")) {
        assert!(
            e.method.starts_with(others),
            "{}: {}; {report}",
            e.device,
            e.method
        );
        assert!(e.mb_per_s > 0.0 && e.seconds > 0.0, "{report}");
    }
    // In parallel: the longest erase began before the shortest one ended.
    let longest = erased
        .iter()
        .max_by(|a, b| a.seconds.total_cmp(&b.seconds))
        .unwrap();
    let first_end = erased.iter().map(|e| e.ended).fold(f64::MAX, f64::min);
    assert!(
        longest.ended - longest.seconds < first_end,
        "the erases did not overlap: {erased:?}"
    );
    assert!(wipes.len() >= 4, "a metadata wipe time per disk; {report}");
}
