//! The software RAID steps in host mode on loop devices this test creates,
//! through the agent's command API as the conductor calls them:
//! `create_configuration` on two allowed loop devices either builds the
//! mirror (a kernel with md) or, on a kernel without md (this machine's),
//! fails with a precise `SoftwareRAIDError` before writing anything; a
//! `physical_disks` hint naming a device the agent may not write finds no
//! candidate; `delete_configuration` removes every md superblock (version
//! 1.0, 1.2 and 0.90 locations) and the partition table of the allowed
//! devices that held one, and leaves a device it may not write alone.

use std::os::unix::fs::FileExt;
use std::path::Path;

use agent_base::config::Config;
use agent_contents::raid::superblock::{self, ArrayInfo, MemberInfo};
use hardware_tests::agentapi::AgentApi;
use hardware_tests::loopdev::LoopDevice;
use serde_json::{json, Value};

const MIB: u64 = 1 << 20;

fn step(name: &str, target_raid_config: &Value) -> Value {
    json!({
        "step": {"interface": "raid", "step": name, "args": {}, "priority": 0},
        "node": {"uuid": "raid-loop", "target_raid_config": target_raid_config,
                 "properties": {}, "instance_info": {}, "driver_internal_info": {}},
        "ports": [],
        "clean_version": agent_core::commands::steps::hardware_manager_version(),
    })
}

/// Writes an md member superblock of array `name` into the partition at
/// byte `start` (`len` bytes) of `dev`: version 1.2 at 4 KiB or 1.0 at the
/// end.
fn plant(dev: &Path, start: u64, len: u64, name: &str, at_end: bool) {
    let sectors = len / 512;
    let super_offset = if at_end {
        superblock::offsets(sectors)[0]
    } else {
        8
    };
    let sb = superblock::encode(
        &ArrayInfo {
            uuid: [7; 16],
            name: name.into(),
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
            uuid: [8; 16],
            data_offset: if at_end { 0 } else { 2048 },
            data_size: 2048,
            super_offset,
        },
    );
    let f = std::fs::OpenOptions::new().write(true).open(dev).unwrap();
    f.write_all_at(&sb, start + super_offset * 512).unwrap();
    f.sync_all().unwrap();
}

fn superblocks(dev: &Path, parts: &[(u64, u64)]) -> Vec<String> {
    let f = std::fs::File::open(dev).unwrap();
    let mut found = Vec::new();
    for &(start, len) in parts {
        for sector in superblock::offsets(len / 512) {
            let mut b = vec![0u8; 4096];
            f.read_exact_at(&mut b, start + sector * 512).unwrap();
            if let Some(s) = superblock::decode(&b, sector) {
                found.push(format!("{} at {}", s.name, start + sector * 512));
            }
        }
        if let Some(o) = superblock::v090_offset(len) {
            let mut m = [0u8; 4];
            f.read_exact_at(&mut m, start + o).unwrap();
            if u32::from_le_bytes(m) == superblock::MAGIC {
                found.push(format!("0.90 at {}", start + o));
            }
        }
    }
    found
}

fn error_details(v: &Value) -> String {
    assert_eq!(v["command_status"], "FAILED", "{v}");
    assert_eq!(v["command_error"]["type"], "SoftwareRAIDError", "{v}");
    v["command_error"]["details"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raid_steps_on_loop_devices() {
    hardware_tests::require_root("the loop-device software RAID test");
    let a = LoopDevice::new(64 * MIB).unwrap();
    let b = LoopDevice::new(64 * MIB).unwrap();
    let outsider = LoopDevice::new(64 * MIB).unwrap();
    let api = AgentApi::start(Config {
        allowed_devices: vec![a.path.clone(), b.path.clone()],
        ..Config::default()
    })
    .await
    .unwrap();

    // A hint naming a device the agent may not write matches nothing.
    let cfg = json!({"logical_disks": [{"controller": "software", "raid_level": "1", "size_gb": "MAX",
        "physical_disks": [{"name": a.path}, {"name": outsider.path}]}]});
    let v = api
        .run(
            "clean.execute_clean_step",
            step("create_configuration", &cfg),
        )
        .await
        .unwrap();
    let details = error_details(&v);
    assert!(
        details.contains(&format!(
            "No candidates for physical disk {{\"name\":\"{}\"}}",
            outsider.path.display()
        )),
        "{details}"
    );

    let mirror = json!({"logical_disks": [{"controller": "software", "raid_level": "1", "size_gb": "MAX",
        "volume_name": "root"}]});
    let v = api
        .run(
            "clean.execute_clean_step",
            step("create_configuration", &mirror),
        )
        .await
        .unwrap();
    if Path::new("/sys/module/md_mod").exists() {
        assert_eq!(v["command_status"], "SUCCEEDED", "{v}");
        assert_eq!(v["command_result"]["clean_result"], mirror);
    } else {
        let details = error_details(&v);
        assert!(
            details.contains("the running kernel has no md (software RAID) driver"),
            "{details}"
        );
        for d in [&a, &b] {
            assert!(
                d.signatures().unwrap().is_empty(),
                "{} was written",
                d.path.display()
            );
        }
    }

    // Members of an old array on both allowed disks and on the outsider.
    let parts = [(MIB, 16 * MIB), (17 * MIB, 46 * MIB)];
    for d in [&a, &b, &outsider] {
        let mut child = std::process::Command::new("sfdisk")
            .args(["--quiet", "--wipe", "always"])
            .arg(&d.path)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(b"label: gpt\nstart=2048,size=32768\nstart=34816,size=94208\n")
            .unwrap();
        assert!(child.wait().unwrap().success());
        plant(&d.path, parts[0].0, parts[0].1, "esp", true);
        plant(&d.path, parts[1].0, parts[1].1, "root", false);
    }
    // A version-0.90 superblock at the end of the second partition of b.
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&b.path)
        .unwrap();
    let o = parts[1].0 + superblock::v090_offset(parts[1].1).unwrap();
    f.write_all_at(&superblock::MAGIC.to_le_bytes(), o).unwrap();
    f.sync_all().unwrap();
    drop(f);
    hardware_tests::run(
        std::process::Command::new("partx")
            .arg("--update")
            .arg(&a.path),
    )
    .ok();
    hardware_tests::run(
        std::process::Command::new("partx")
            .arg("--update")
            .arg(&b.path),
    )
    .ok();
    assert_eq!(superblocks(&a.path, &parts).len(), 2);
    assert_eq!(superblocks(&b.path, &parts).len(), 3);
    assert!(a.signatures().unwrap().iter().any(|s| s == "gpt"));

    let v = api
        .run(
            "clean.execute_clean_step",
            step("delete_configuration", &json!({})),
        )
        .await
        .unwrap();
    assert_eq!(v["command_status"], "SUCCEEDED", "{v}");
    for d in [&a, &b] {
        assert_eq!(
            superblocks(&d.path, &parts),
            Vec::<String>::new(),
            "{}",
            d.path.display()
        );
        assert!(
            d.signatures().unwrap().is_empty(),
            "{}: {:?}",
            d.path.display(),
            d.signatures()
        );
    }
    assert_eq!(
        superblocks(&outsider.path, &parts).len(),
        2,
        "the outsider was touched"
    );
    assert!(outsider.signatures().unwrap().iter().any(|s| s == "gpt"));
}
