//! The PReP boot partition IPA 13 makes for a partition image on a ppc64
//! machine in BIOS mode, written by the agent's partition-image layer onto
//! a loop device (this machine is x86_64: the layout is planned for
//! `ppc64le` as the agent would on a POWER node): first, 8 MiB, PReP type
//! on GPT (sfdisk reads it back), no BIOS boot partition, and
//! `get_partition_uuids` reports `PReP Boot partition uuid` (its PARTUUID,
//! as IPA's `block_uuid` falls back to) next to `root uuid`. On an MBR the
//! PReP partition is type 0x41 and active, the root is not.

use std::process::Command;

use agent_contents::partimage::layout::{self, Role};
use agent_contents::partimage::params::{BootMode, Label, Params};
use agent_contents::partimage::{prepare, uuids};
use hardware_tests::loopdev::LoopDevice;

const MIB: u64 = 1 << 20;

fn params() -> Params {
    Params {
        root_mb: 16,
        swap_mb: 4,
        ephemeral_mb: 0,
        ephemeral_format: None,
        preserve_ephemeral: false,
        deploy_boot_mode: None,
        disk_label: None,
        esp_mb: agent_base::config::groups::EFI_SYSTEM_PARTITION_MB,
        bios_boot_mb: agent_base::config::groups::BIOS_BOOT_PARTITION_MB,
    }
}

fn sfdisk(disk: &std::path::Path) -> serde_json::Value {
    let out = hardware_tests::run(Command::new("sfdisk").arg("--json").arg(disk)).unwrap();
    serde_json::from_str(&out).unwrap()
}

#[test]
fn ppc64_partition_images_get_a_prep_boot_partition() {
    hardware_tests::require_root("the PReP partition loop-device test");
    let disk = LoopDevice::new(64 * MIB).unwrap();

    let plan = layout::plan(&params(), BootMode::Bios, Label::Gpt, 0, "ppc64le");
    let prepared = prepare(&disk.path, &plan, None, false, None).unwrap();
    let t = sfdisk(&disk.path);
    let parts = t["partitiontable"]["partitions"].as_array().unwrap();
    let shape: Vec<(u64, u64, String)> = parts
        .iter()
        .map(|p| {
            (
                p["start"].as_u64().unwrap() * 512 / MIB,
                p["size"].as_u64().unwrap() * 512 / MIB,
                p["type"].as_str().unwrap().to_lowercase(),
            )
        })
        .collect();
    assert_eq!(
        shape,
        [
            (1, 8, "9e1a2d38-c612-4316-aa26-8b49521e5a8b".to_string()),
            (9, 4, "0657fd6d-a4ab-43c4-84e5-0933c84b4f4f".to_string()),
            (13, 16, "0fc63daf-8483-4772-8e79-3d69d8477de4".to_string()),
        ],
        "{t}"
    );
    let u = uuids(&prepared);
    let prep_partuuid = parts[0]["uuid"].as_str().unwrap().to_lowercase();
    assert_eq!(
        u["PReP Boot partition uuid"]
            .as_str()
            .map(str::to_lowercase),
        Some(prep_partuuid),
        "{u}"
    );
    assert_eq!(
        u["partitions"]["PReP Boot partition"],
        prepared.path(Role::PrepBoot).unwrap().display().to_string(),
        "{u}"
    );
    assert!(u["root uuid"].is_string(), "{u}");
    assert!(u["efi system partition uuid"].is_null(), "{u}");

    // x86_64 reports no PReP key at all (IPA adds it on ppc only).
    let plan = layout::plan(&params(), BootMode::Bios, Label::Gpt, 0, "x86_64");
    let prepared = prepare(&disk.path, &plan, None, false, None).unwrap();
    let u = uuids(&prepared);
    assert!(u.get("PReP Boot partition uuid").is_none(), "{u}");
    assert!(u["partitions"].get("BIOS Boot partition").is_some(), "{u}");

    // MBR: 0x41, active; the root not active.
    let plan = layout::plan(&params(), BootMode::Bios, Label::Msdos, 0, "ppc64");
    prepare(&disk.path, &plan, None, false, None).unwrap();
    let t = sfdisk(&disk.path);
    let parts = t["partitiontable"]["partitions"].as_array().unwrap();
    let shape: Vec<(String, bool)> = parts
        .iter()
        .map(|p| {
            (
                p["type"].as_str().unwrap().to_string(),
                p["bootable"].as_bool().unwrap_or(false),
            )
        })
        .collect();
    assert_eq!(
        shape,
        [
            ("41".to_string(), true),
            ("82".to_string(), false),
            ("83".to_string(), false)
        ],
        "{t}"
    );
}
