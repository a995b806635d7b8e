//! Real Ironic 39.0.0 (unmodified, `require_tls = true`) and a node's
//! `properties.skip_block_devices`, read as IPA 13 reads them (root-device
//! hints and RAID volume names), with the agent in host mode on loop devices
//! this test creates:
//! - by size: a 5 GiB and a 6 GiB disk, `[{"size": 5}]`. A manual clean
//!   (`erase_devices_metadata`, `erase_devices_express`) leaves the 5 GiB
//!   disk byte-identical and wipes the other; a deploy with no
//!   `root_device` hint writes the 6 GiB disk and leaves the 5 GiB one
//!   byte-identical.
//! - by RAID volume name: two disks holding members of the md volume `data`
//!   and a third plain one, `[{"volume_name": "data"}]`. A manual clean
//!   with `delete_configuration` and `erase_devices_metadata` leaves both
//!   member disks byte-identical (superblocks included) and wipes the third.
//!
//! Serial and WWN entries need disks that report them: the selection's unit
//! tests cover them (`agent/crates/contents/src/selection/tests.rs`), loop devices have none.

use std::os::unix::fs::FileExt;
use std::time::Duration;

use agent::testconductor::demo::host_config;
use agent_base::config::Config;
use agent_contents::raid::superblock::{self, ArrayInfo, MemberInfo};
use agent_testkit::image_server::{Fault, ImageServer};
use hardware_tests::images;
use hardware_tests::ironic::Ironic;
use hardware_tests::loopdev::LoopDevice;
use serde_json::{json, Value};

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;

/// The device's whole contents, as data extents and their hashes (fast on
/// the sparse files behind these loop devices).
fn digest(dev: &LoopDevice) -> Vec<(u64, u64, String)> {
    dev.fingerprint().unwrap()
}

fn host_config_for(url: &str, mac: &str, devices: &[&LoopDevice]) -> Config {
    Config {
        allowed_devices: devices.iter().map(|d| d.path.clone()).collect(),
        ..host_config(url, mac, &devices[0].path)
    }
}

async fn manual_clean(ironic: &Ironic, uuid: &str, steps: Value) -> Value {
    ironic
        .manual_clean(uuid, steps, Duration::from_secs(180))
        .await
        .unwrap_or_else(|e| panic!("{e:#}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disk_protected_by_size_is_neither_cleaned_nor_deployed_to() {
    hardware_tests::require_root("the real-Ironic skip_block_devices test");
    let mac = "52:54:00:c1:ea:31";
    let small = LoopDevice::new(5 * GIB).expect("creating a loop device");
    let big = LoopDevice::new(6 * GIB).expect("creating a loop device");
    for d in [&small, &big] {
        d.partition_and_format()
            .expect("partitioning a loop device");
    }
    let kept = digest(&small);

    let dir = tempfile::tempdir().unwrap();
    let image = dir.path().join("test.raw");
    images::sfdisk_image(&image, 32 * MIB, "label: gpt\nname=root\n").unwrap();
    let mut bytes = std::fs::read(&image).unwrap();
    let mut rng = fastrand::Rng::with_seed(31);
    let body = (2 * MIB) as usize..(6 * MIB) as usize;
    for b in &mut bytes[body.clone()] {
        *b = rng.u8(..);
    }
    std::fs::write(&image, &bytes).unwrap();
    let server = ImageServer::start().unwrap();
    server.route("/images/test.raw", &image, &[], Fault::None);

    let ironic = Ironic::start().expect("starting Ironic 39.0.0");
    let uuid = ironic.enroll_ready("skip-size", mac, false).await.unwrap();
    ironic
        .patch(
            &uuid,
            json!([{"op": "add", "path": "/properties/skip_block_devices", "value": [{"size": 5}]}]),
        )
        .await
        .unwrap();
    let agent = agent::agent::start_detached(host_config_for(&ironic.url, mac, &[&small, &big]));

    manual_clean(
        &ironic,
        &uuid,
        json!([{"interface": "deploy", "step": "erase_devices_metadata"},
               {"interface": "deploy", "step": "erase_devices_express"}]),
    )
    .await;
    assert_eq!(digest(&small), kept, "the protected 5 GiB disk changed");
    let left = big.signatures().unwrap();
    assert!(left.is_empty(), "the 6 GiB disk kept {left:?}");

    ironic
        .move_to(&uuid, "provide", "available", Duration::from_secs(60))
        .await
        .unwrap();
    ironic
        .patch(
            &uuid,
            Ironic::image_patch(
                &server.url("/images/test.raw"),
                &images::sha256_hex(&bytes),
                json!([{"op": "add", "path": "/instance_info/image_disk_format", "value": "raw"}]),
            ),
        )
        .await
        .unwrap();
    ironic
        .provision(&uuid, json!({"target": "active"}))
        .await
        .unwrap();
    let node = ironic
        .wait_for(&uuid, "active", Duration::from_secs(240))
        .await
        .unwrap_or_else(|e| panic!("deploy: {e:#}"));
    assert!(node["last_error"].is_null(), "{}", node["last_error"]);
    let mut head = vec![0u8; bytes.len()];
    std::fs::File::open(&big.path)
        .unwrap()
        .read_exact_at(&mut head, 0)
        .unwrap();
    // The partition's data is the image's (the GPT itself is rewritten: its
    // backup moves to the disk's end).
    assert!(
        head[body.clone()] == bytes[body],
        "the image is not on the 6 GiB disk"
    );
    assert_eq!(digest(&small), kept, "the deploy wrote the protected disk");
    assert!(!agent.is_finished(), "the agent stopped");
    agent.abort();
}

/// An md member superblock (version 1.2) of array `host:name` at the start
/// of the second partition of `dev` (the one without a filesystem).
fn plant_member(dev: &LoopDevice, name: &str, role: u32) {
    let part = dev.partition(2);
    let kname = part.file_name().unwrap().to_string_lossy().into_owned();
    let start: u64 = std::fs::read_to_string(format!("/sys/class/block/{kname}/start"))
        .unwrap_or_else(|e| panic!("the start of {}: {e}", part.display()))
        .trim()
        .parse::<u64>()
        .unwrap()
        * 512;
    let sb = superblock::encode(
        &ArrayInfo {
            uuid: [7; 16],
            name: format!("bed:{name}"),
            ctime: 1,
            level: 1,
            layout: 0,
            chunk_sectors: 0,
            raid_disks: 2,
            size: 2048,
            resync_offset: superblock::IN_SYNC,
        },
        &MemberInfo {
            role,
            uuid: [8 + role as u8; 16],
            data_offset: 2048,
            data_size: 2048,
            super_offset: 8,
        },
    );
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&dev.path)
        .unwrap();
    f.write_all_at(&sb, start + 8 * 512).unwrap();
    f.sync_all().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_raid_volume_survives_delete_configuration_and_erase() {
    hardware_tests::require_root("the real-Ironic skip_block_devices test");
    let mac = "52:54:00:c1:ea:32";
    let (a, b, plain) = (
        LoopDevice::new(64 * MIB).unwrap(),
        LoopDevice::new(64 * MIB).unwrap(),
        LoopDevice::new(64 * MIB).unwrap(),
    );
    for d in [&a, &b, &plain] {
        d.partition_and_format()
            .expect("partitioning a loop device");
    }
    plant_member(&a, "data", 0);
    plant_member(&b, "data", 1);
    let (kept_a, kept_b) = (digest(&a), digest(&b));

    let ironic = Ironic::start().expect("starting Ironic 39.0.0");
    let uuid = ironic.enroll_ready("skip-raid", mac, false).await.unwrap();
    ironic
        .patch(
            &uuid,
            json!([{"op": "replace", "path": "/raid_interface", "value": "agent"},
                   {"op": "add", "path": "/properties/skip_block_devices",
                    "value": [{"volume_name": "data"}]}]),
        )
        .await
        .unwrap();
    let agent = agent::agent::start_detached(host_config_for(&ironic.url, mac, &[&a, &b, &plain]));
    manual_clean(
        &ironic,
        &uuid,
        json!([{"interface": "raid", "step": "delete_configuration"},
               {"interface": "deploy", "step": "erase_devices_metadata"}]),
    )
    .await;
    assert_eq!(digest(&a), kept_a, "a member of the kept volume changed");
    assert_eq!(digest(&b), kept_b, "a member of the kept volume changed");
    let left = plain.signatures().unwrap();
    assert!(left.is_empty(), "the unprotected disk kept {left:?}");
    agent.abort();
}
