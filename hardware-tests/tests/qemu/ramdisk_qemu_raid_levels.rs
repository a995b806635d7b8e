//! RAID 1+0, 5 and 6 built by the deploy ramdisk's agent and run by the
//! guest kernel's md (`raid10` and `raid456`, shipped in the ramdisk): on
//! four virtio disks under a BIOS boot mode (MBR members, no ESP), the test
//! conductor's manual cleans run `delete_configuration` +
//! `create_configuration` three times, for a `MAX` RAID-1 root volume
//! listed first plus a 1 GiB volume at level 1+0, then 5, then 6, each time
//! across all four disks. As in IPA 13 the `MAX` volume is moved last:
//! the 1 GiB volume is `md0` on each disk's first partition, the root
//! `md1` on the second. After each: the guest's `/proc/mdstat` shows `md0`
//! active at that level over four members and `md1` a RAID-1, and each
//! disk's partitions carry version-1.2 superblocks of those levels for four
//! devices (read from the host). A last `delete_configuration` leaves no
//! superblock and no signature on any disk.

use std::os::unix::fs::FileExt;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use agent_contents::raid::superblock;
use hardware_tests::bed::direct::{self, partitions};
use hardware_tests::bed::{self, Net, NetOptions, Vm};
use hardware_tests::{require_root, run};
use serde_json::json;

const MAC: &str = "52:54:00:12:34:5a";
const GIB: u64 = 1 << 30;

/// Every version-1 superblock on the partitions `parts` of a disk image:
/// `(partition index, name, level, raid_disks)`.
fn superblocks(disk: &Path, parts: &[(u64, u64)]) -> Vec<(usize, String, u32, u32)> {
    let Ok(f) = std::fs::File::open(disk) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (i, &(start, len)) in parts.iter().enumerate() {
        for sector in superblock::offsets(len / 512) {
            let mut b = vec![0u8; 4096];
            if f.read_exact_at(&mut b, start + sector * 512).is_err() {
                continue;
            }
            if let Some(found) = superblock::decode(&b, sector) {
                out.push((i, found.name, found.level, found.raid_disks));
            }
        }
    }
    out
}

#[test]
fn ramdisk_runs_raid10_raid5_and_raid6() {
    require_root("the QEMU RAID levels test");
    let ramdisk = bed::ramdisk_dir().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let disks = direct::virtio_disks(
        tmp.path(),
        &["LVL00001", "LVL00002", "LVL00003", "LVL00004"],
        2 * GIB,
    );
    let mut opts = NetOptions::pxe("raidlvl", &ramdisk, "");
    opts.ramdisk = None;
    let net = Net::start(opts).unwrap();
    let spec = direct::ramdisk_spec(&ramdisk, MAC, &disks, "agent.shell=1");
    let config = |level: &str| {
        json!({"logical_disks": [
            {"controller": "software", "raid_level": "1", "size_gb": "MAX", "volume_name": "root",
             "is_root_volume": true},
            {"controller": "software", "raid_level": level, "size_gb": 1, "volume_name": "data"}
        ]})
    };
    let step = |name: &str| json!({"interface": "raid", "step": name, "args": {}});
    let levels = [
        ("1+0", "raid10", 10u32),
        ("5", "raid5", 5),
        ("6", "raid6", 6),
    ];
    let (rounds, deleted, console, transcript) = net
        .block_on(async {
            let conductor = direct::conductor().await;
            let uuid = conductor.enroll(&[MAC]);
            conductor.update_node(&uuid, |n| {
                n.properties["capabilities"] = json!("boot_mode:bios");
            });
            let mut vm = Vm::start(&net, &spec).unwrap();
            let mut rounds = Vec::new();
            for (i, (level, _, _)) in levels.iter().enumerate() {
                conductor.update_node(&uuid, |n| n.target_raid_config = config(level));
                conductor
                    .start_clean(
                        &uuid,
                        Some(vec![
                            step("delete_configuration"),
                            step("create_configuration"),
                        ]),
                    )
                    .unwrap();
                let built = conductor
                    .wait_for_state(&uuid, "manageable", Duration::from_secs(300))
                    .await;
                println!("RAID {level} built {:?} after starting QEMU", vm.elapsed());
                let marker = format!("lvl{i}");
                vm.type_line(&format!("cat /proc/mdstat; echo {marker}-$((6*7))"))
                    .unwrap();
                tokio::task::block_in_place(|| {
                    vm.wait_console(&format!("{marker}-42"), Duration::from_secs(30))
                })
                .ok();
                let c = vm.console();
                let end = c.rfind(&format!("{marker}-42")).unwrap_or(c.len());
                let start = c[..end].rfind("Personalities").unwrap_or(end);
                let mdstat = c[start..end].to_string();
                let parts: Vec<_> = disks.iter().map(|d| partitions(&d.path)).collect();
                let sbs: Vec<_> = disks
                    .iter()
                    .zip(&parts)
                    .map(|(d, p)| superblocks(&d.path, p))
                    .collect();
                rounds.push((built, mdstat, sbs, parts));
            }
            conductor
                .start_clean(&uuid, Some(vec![step("delete_configuration")]))
                .unwrap();
            let deleted = conductor
                .wait_for_state(&uuid, "manageable", Duration::from_secs(120))
                .await;
            let c = vm.console();
            vm.kill();
            (rounds, deleted, c, conductor.transcript())
        })
        .unwrap();
    let ctx = format!(
        "\n--- transcript ---\n{}\n--- console ({}) ---\n{console}",
        transcript.join("\n"),
        net.logs.display()
    );
    let last_parts = rounds.last().map(|r| r.3.clone()).unwrap_or_default();
    for ((level, md_level, number), (built, mdstat, sbs, _)) in levels.iter().zip(rounds) {
        built.unwrap_or_else(|e| panic!("create_configuration at {level} failed: {e:#}{ctx}"));
        let line = mdstat
            .lines()
            .find(|l| l.starts_with("md0 : "))
            .unwrap_or_else(|| panic!("no md0 for {level}:\n{mdstat}{ctx}"));
        assert!(
            line.starts_with(&format!("md0 : active {md_level} "))
                && line.matches('[').count() == 4,
            "md0 is not an active {md_level} of four members: {line}\n{mdstat}{ctx}"
        );
        assert!(
            mdstat.lines().any(|l| l.starts_with("md1 : active raid1 ")),
            "no RAID-1 root as md1:\n{mdstat}{ctx}"
        );
        for (d, found) in disks.iter().zip(&sbs) {
            assert_eq!(
                found,
                &vec![
                    (0, "data".to_string(), *number, 4),
                    (1, "root".to_string(), 1, 4)
                ],
                "{} after creating {level}{ctx}",
                d.path.display()
            );
        }
    }
    deleted.unwrap_or_else(|e| panic!("delete_configuration failed: {e:#}{ctx}"));
    for (d, parts) in disks.iter().zip(&last_parts) {
        assert!(
            superblocks(&d.path, parts).is_empty(),
            "{} keeps a superblock{ctx}",
            d.path.display()
        );
        let left = run(Command::new("wipefs").arg("--no-act").arg(&d.path)).unwrap_or_default();
        assert!(
            left.is_empty(),
            "{} keeps signatures: {left}{ctx}",
            d.path.display()
        );
    }
}
