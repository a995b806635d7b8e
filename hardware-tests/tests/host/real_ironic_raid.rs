//! Real Ironic 39.0.0 (unmodified, `raid_interface = agent`) drives the
//! software RAID clean steps of a host-mode agent on two loop devices this
//! test creates: `target_raid_config` set through Ironic's API (its schema
//! and `AgentRAID` validation), a manual clean with
//! `raid.delete_configuration` removes the md members of an old array
//! (superblocks and tables) and Ironic clears `raid_config`; a manual clean
//! with `raid.create_configuration` then builds the mirror where the kernel
//! has md, and where it has none (this machine: `CONFIG_MD` unset) ends in
//! `clean failed` with the agent's precise `SoftwareRAIDError`, nothing
//! written. Building and booting RAID for real runs in the deploy ramdisk
//! under QEMU (`ramdisk_qemu_raid*.rs`).

use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::Duration;

use agent::testconductor::demo::host_config;
use agent_contents::raid::superblock::{self, ArrayInfo, MemberInfo};
use hardware_tests::ironic::Ironic;
use hardware_tests::loopdev::LoopDevice;
use serde_json::json;

const MAC: &str = "52:54:00:c1:ea:31";
const MIB: u64 = 1 << 20;

/// A GPT with one partition from 1 MiB carrying a v1.2 md member.
fn old_member(dev: &Path) {
    let mut child = std::process::Command::new("sfdisk")
        .args(["--quiet", "--wipe", "always"])
        .arg(dev)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"label: gpt\nstart=2048,size=65536\n")
        .unwrap();
    assert!(child.wait().unwrap().success());
    let sb = superblock::encode(
        &ArrayInfo {
            uuid: [9; 16],
            name: "old".into(),
            ctime: 1,
            level: 1,
            layout: 0,
            chunk_sectors: 0,
            raid_disks: 2,
            size: 2048,
            resync_offset: superblock::IN_SYNC,
        },
        &MemberInfo {
            role: 0,
            uuid: [3; 16],
            data_offset: 2048,
            data_size: 2048,
            super_offset: 8,
        },
    );
    let f = std::fs::OpenOptions::new().write(true).open(dev).unwrap();
    f.write_all_at(&sb, MIB + 4096).unwrap();
    f.sync_all().unwrap();
}

fn has_member(dev: &Path) -> bool {
    let f = std::fs::File::open(dev).unwrap();
    let mut b = vec![0u8; 4096];
    f.read_exact_at(&mut b, MIB + 4096).unwrap();
    superblock::decode(&b, 8).is_some()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_ironic_deletes_and_creates_software_raid() {
    hardware_tests::require_root("the real-Ironic software RAID test");
    // Room for the ESP (the node boots UEFI) and a mirror; sparse files.
    let a = LoopDevice::new(700 * MIB).unwrap();
    let b = LoopDevice::new(700 * MIB).unwrap();
    for d in [&a, &b] {
        old_member(&d.path);
        assert!(has_member(&d.path));
    }
    let ironic = Ironic::start().expect("starting Ironic 39.0.0");
    let uuid = ironic.enroll_ready("agent-raid", MAC, false).await.unwrap();
    ironic
        .patch(
            &uuid,
            json!([{"op": "replace", "path": "/raid_interface", "value": "agent"}]),
        )
        .await
        .unwrap();
    let target = json!({"logical_disks": [{"controller": "software", "raid_level": "1", "size_gb": "MAX",
        "volume_name": "root", "is_root_volume": true,
        "physical_disks": [{"name": a.path}, {"name": b.path}]}]});
    ironic
        .set_target_raid_config(&uuid, target.clone())
        .await
        .unwrap();
    let mut config = host_config(&ironic.url, MAC, &a.path);
    config.allowed_devices.push(b.path.clone());
    let agent = agent::agent::start_detached(config);

    ironic
        .provision(
            &uuid,
            json!({"target": "clean",
            "clean_steps": [{"interface": "raid", "step": "delete_configuration"}]}),
        )
        .await
        .unwrap();
    let node = ironic
        .wait_for(&uuid, "manageable", Duration::from_secs(180))
        .await
        .unwrap_or_else(|e| {
            panic!(
                "delete_configuration: {e:#}\n(Ironic log {})",
                ironic.log_path().display()
            )
        });
    assert!(node["last_error"].is_null(), "{}", node["last_error"]);
    for d in [&a, &b] {
        assert!(
            !has_member(&d.path),
            "{} keeps its md superblock",
            d.path.display()
        );
        assert!(
            d.signatures().unwrap().is_empty(),
            "{}: {:?}",
            d.path.display(),
            d.signatures()
        );
    }
    let node = ironic.node(&uuid).await.unwrap();
    assert_eq!(node["raid_config"], json!({}), "{node}");
    assert_eq!(node["target_raid_config"], target);

    ironic
        .provision(
            &uuid,
            json!({"target": "clean",
            "clean_steps": [{"interface": "raid", "step": "create_configuration"}]}),
        )
        .await
        .unwrap();
    if Path::new("/sys/module/md_mod").exists() {
        ironic
            .wait_for(&uuid, "manageable", Duration::from_secs(180))
            .await
            .unwrap();
        let node = ironic.node(&uuid).await.unwrap();
        assert_eq!(
            node["raid_config"]["logical_disks"][0]["volume_name"], "root",
            "{node}"
        );
    } else {
        let node = ironic
            .poll_node(
                &uuid,
                hardware_tests::ironic::POLL_ANY,
                Duration::from_secs(180),
                &mut (),
                hardware_tests::ironic::reached("clean failed"),
            )
            .await
            .unwrap();
        let err = node["last_error"].as_str().unwrap_or_default();
        assert!(
            err.contains("the running kernel has no md (software RAID) driver"),
            "imprecise last_error: {err}"
        );
        for d in [&a, &b] {
            assert!(
                d.signatures().unwrap().is_empty(),
                "{} was written",
                d.path.display()
            );
        }
    }
    agent.abort();
}
