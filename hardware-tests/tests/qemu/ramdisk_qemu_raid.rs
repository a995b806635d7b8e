//! Software RAID built by the deploy ramdisk's agent with the guest
//! kernel's md driver (this machine's kernel has none), driven by the test
//! conductor's manual cleans exactly as Ironic's `agent` RAID interface
//! drives them: on two virtio disks, `delete_configuration` +
//! `create_configuration` of a `target_raid_config` with a RAID-1 root
//! volume (members chosen by `physical_disks` serial hints) and a RAID-0
//! `MAX` volume under a UEFI boot mode (so every member also gets an ESP,
//! mirrored as a RAID-1 with end-of-device metadata); the guest's
//! `/proc/mdstat` shows the three arrays and the disks carry the
//! superblocks; `erase_devices_metadata` (as IPA 13) wipes the md devices
//! (the mirrored ESP's FAT is gone from both members) and skips the
//! members (arrays still running, superblocks kept); `delete_configuration`
//! stops them and leaves no superblock
//! and no partition table; a configuration naming a disk that does not
//! exist fails with a precise `SoftwareRAIDError` and touches nothing.

use std::os::unix::fs::FileExt;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use agent_contents::raid::superblock;
use hardware_tests::bed::direct::{self, partitions};
use hardware_tests::bed::{self, Disk, Net, NetOptions, Vm};
use hardware_tests::{require_root, run};
use serde_json::json;

const MAC: &str = "52:54:00:12:34:58";
const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;

/// The version-1 superblock of the partition at byte `start` (length
/// `len`) of a disk image: `(minor version, name)`.
fn member(disk: &Path, start: u64, len: u64) -> Option<(usize, String)> {
    let f = std::fs::File::open(disk).ok()?;
    for (minor, sector) in superblock::offsets(len / 512).iter().enumerate() {
        let mut b = vec![0u8; 4096];
        f.read_exact_at(&mut b, start + sector * 512).ok()?;
        if let Some(found) = superblock::decode(&b, *sector) {
            return Some((minor, found.name));
        }
    }
    None
}

/// A partition's start and length in bytes and the md member superblock on
/// it (minor version, array name).
type Planted = (u64, u64, Option<(usize, String)>);

#[test]
fn ramdisk_builds_and_deletes_software_raid() {
    require_root("the QEMU software RAID test");
    let ramdisk = bed::ramdisk_dir().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let disks = direct::virtio_disks(tmp.path(), &["RAID0001", "RAID0002"], 2 * GIB);
    let mut opts = NetOptions::pxe("raid", &ramdisk, "");
    opts.ramdisk = None;
    let net = Net::start(opts).unwrap();
    let spec = direct::ramdisk_spec(&ramdisk, MAC, &disks, "agent.shell=1");
    let raid_config = json!({"logical_disks": [
        {"controller": "software", "raid_level": "1", "size_gb": 1, "volume_name": "root",
         "is_root_volume": true, "physical_disks": [{"serial": "RAID0001"}, {"serial": "RAID0002"}]},
        {"controller": "software", "raid_level": "0", "size_gb": "MAX", "volume_name": "scratch"}
    ]});
    let step = |name: &str| json!({"interface": "raid", "step": name, "args": {}});
    let esp_sector = |d: &Disk| {
        let mut b = [0u8; 512];
        std::fs::File::open(&d.path)
            .and_then(|f| f.read_exact_at(&mut b, MIB))
            .map(|()| b)
            .unwrap_or([0xee; 512])
    };
    let (
        (built, mdstat_built, deleted, mdstat_deleted, failed, console, transcript, layout),
        (erased, mdstat_erased, esp_before, esp_after, members_after),
    ) = net
        .block_on(async {
            let conductor = direct::conductor().await;
            let uuid = conductor.enroll(&[MAC]);
            conductor.update_node(&uuid, |n| {
                n.target_raid_config = raid_config.clone();
                n.properties["capabilities"] = json!("boot_mode:uefi");
            });
            conductor
                .start_clean(
                    &uuid,
                    Some(vec![
                        step("delete_configuration"),
                        step("create_configuration"),
                    ]),
                )
                .unwrap();
            let mut vm = Vm::start(&net, &spec).unwrap();
            let built = conductor
                .wait_for_state(&uuid, "manageable", Duration::from_secs(300))
                .await;
            println!("RAID built {:?} after starting QEMU", vm.elapsed());
            let shell = |vm: &mut Vm, marker: &str| {
                vm.type_line(&format!("cat /proc/mdstat; echo {marker}-$((6*7))"))
                    .unwrap();
                tokio::task::block_in_place(|| {
                    vm.wait_console(&format!("{marker}-42"), Duration::from_secs(30))
                })
                .ok();
                let c = vm.console();
                let end = c.rfind(&format!("{marker}-42")).unwrap_or(c.len());
                let start = c[..end].rfind("Personalities").unwrap_or(end);
                c[start..end].to_string()
            };
            let mdstat_built = shell(&mut vm, "built");
            // The superblocks as they are on the disks now (flushed: the
            // agent syncs them before assembling).
            let layout: Vec<Vec<Planted>> = disks
                .iter()
                .map(|d| {
                    partitions(&d.path)
                        .into_iter()
                        .map(|(s, l)| (s, l, member(&d.path, s, l)))
                        .collect()
                })
                .collect();
            let esp_before: Vec<_> = disks.iter().map(esp_sector).collect();
            conductor
                .start_clean(
                    &uuid,
                    Some(vec![json!({"interface": "deploy", "step": "erase_devices_metadata", "args": {}})]),
                )
                .unwrap();
            let erased = conductor
                .wait_for_state(&uuid, "manageable", Duration::from_secs(120))
                .await;
            let mdstat_erased = shell(&mut vm, "erased");
            let esp_after: Vec<_> = disks.iter().map(esp_sector).collect();
            let members_after: Vec<Vec<Option<(usize, String)>>> = disks
                .iter()
                .zip(&layout)
                .map(|(d, parts)| parts.iter().map(|(s, l, _)| member(&d.path, *s, *l)).collect())
                .collect();
            conductor
                .start_clean(&uuid, Some(vec![step("delete_configuration")]))
                .unwrap();
            let deleted = conductor
                .wait_for_state(&uuid, "manageable", Duration::from_secs(120))
                .await;
            let mdstat_deleted = shell(&mut vm, "deleted");
            conductor.update_node(&uuid, |n| {
                n.target_raid_config = json!({"logical_disks": [
                    {"controller": "software", "raid_level": "1", "size_gb": "MAX",
                     "physical_disks": [{"serial": "RAID0001"}, {"serial": "NOSUCHDISK"}]}]});
            });
            conductor
                .start_clean(&uuid, Some(vec![step("create_configuration")]))
                .unwrap();
            let failed = conductor
                .wait_for_state(&uuid, "clean failed", Duration::from_secs(120))
                .await;
            let c = vm.console();
            vm.kill();
            (
                (
                    built,
                    mdstat_built,
                    deleted,
                    mdstat_deleted,
                    failed,
                    c,
                    conductor.transcript(),
                    layout,
                ),
                (erased, mdstat_erased, esp_before, esp_after, members_after),
            )
        })
        .unwrap();
    let ctx = format!(
        "\n--- transcript ---\n{}\n--- console ({}) ---\n{console}",
        transcript.join("\n"),
        net.logs.display()
    );
    built.unwrap_or_else(|e| panic!("create_configuration failed: {e:#}{ctx}"));
    for (md, level) in [("md0", "raid1"), ("md1", "raid0"), ("md2", "raid1")] {
        assert!(
            mdstat_built
                .lines()
                .any(|l| l.starts_with(&format!("{md} : active {level}"))),
            "{md} is not an active {level}:\n{mdstat_built}{ctx}"
        );
    }
    for (i, parts) in layout.iter().enumerate() {
        assert_eq!(
            parts.len(),
            3,
            "disk {i}: ESP, root, scratch: {parts:?}{ctx}"
        );
        assert_eq!(
            (parts[0].0, parts[0].1),
            (MIB, 550 * MIB),
            "disk {i}: the ESP"
        );
        assert_eq!(
            parts[0].2,
            Some((0, "esp".to_string())),
            "disk {i}: ESP member, metadata 1.0"
        );
        assert_eq!(parts[1].0, 551 * MIB, "disk {i}: root from 551 MiB");
        assert_eq!(
            parts[1].1,
            GIB + MIB,
            "disk {i}: 1 GiB of data + md's offset"
        );
        assert_eq!(
            parts[1].2,
            Some((2, "root".to_string())),
            "disk {i}: root member, metadata 1.2"
        );
        assert_eq!(
            parts[2].2,
            Some((2, "scratch".to_string())),
            "disk {i}: scratch member"
        );
    }
    erased.unwrap_or_else(|e| panic!("erase_devices_metadata failed: {e:#}{ctx}"));
    for (md, level) in [("md0", "raid1"), ("md1", "raid0"), ("md2", "raid1")] {
        assert!(
            mdstat_erased
                .lines()
                .any(|l| l.starts_with(&format!("{md} : active {level}"))),
            "{md} stopped by erase_devices_metadata:\n{mdstat_erased}{ctx}"
        );
    }
    for (i, (before, after)) in esp_before.iter().zip(&esp_after).enumerate() {
        assert_eq!(
            &before[510..],
            &[0x55, 0xaa],
            "disk {i}: no FAT boot sector on the ESP before{ctx}"
        );
        assert!(
            after.iter().all(|b| *b == 0),
            "disk {i}: the mirrored ESP's FAT boot sector survived erase_devices_metadata{ctx}"
        );
    }
    for (i, (parts, after)) in layout.iter().zip(&members_after).enumerate() {
        let before: Vec<_> = parts.iter().map(|(_, _, m)| m.clone()).collect();
        assert_eq!(
            &before, after,
            "disk {i}: erase_devices_metadata touched the member superblocks{ctx}"
        );
    }
    deleted.unwrap_or_else(|e| panic!("delete_configuration failed: {e:#}{ctx}"));
    assert!(
        !mdstat_deleted.contains(" : active"),
        "arrays left:\n{mdstat_deleted}{ctx}"
    );
    for (d, parts) in disks.iter().zip(&layout) {
        for (s, l, _) in parts {
            assert_eq!(
                member(&d.path, *s, *l),
                None,
                "{} keeps a superblock at {s}{ctx}",
                d.path.display()
            );
        }
        let left = run(Command::new("wipefs").arg("--no-act").arg(&d.path)).unwrap_or_default();
        assert!(
            left.is_empty(),
            "{} keeps signatures: {left}{ctx}",
            d.path.display()
        );
    }
    let node = failed
        .unwrap_or_else(|e| panic!("the bad configuration did not fail the clean: {e:#}{ctx}"));
    let err = node.last_error.unwrap_or_default();
    assert!(
        err.contains("No candidates for physical disk {\"serial\":\"NOSUCHDISK\"}"),
        "imprecise error: {err}{ctx}"
    );
    for d in &disks {
        let left = run(Command::new("wipefs").arg("--no-act").arg(&d.path)).unwrap_or_default();
        assert!(
            left.is_empty(),
            "the failed create touched {}: {left}{ctx}",
            d.path.display()
        );
    }
}
