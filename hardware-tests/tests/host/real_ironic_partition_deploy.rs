//! Real Ironic 39.0.0 (unmodified, `require_tls = true`) deploys a
//! partition image (`instance_info.image_type = partition`, `root_gb`,
//! `swap_mb`, a UEFI node) with a config drive through the agent in host
//! mode onto a loop device this test creates: Ironic's `write_image` step
//! sends the layout keys, reads `get_partition_uuids` and calls
//! `install_bootloader` with the root filesystem's and the ESP's UUIDs; the
//! node reaches `active` with `root_uuid_or_disk_id` the image's filesystem
//! UUID, and the disk holds IPA's layout, the image in its root partition
//! and the image's loaders on the ESP. An undeploy with automated cleaning
//! then leaves no signature on the disk.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use agent::testconductor::demo::host_config;
use agent_testkit::image_server::{Fault, ImageServer};
use hardware_tests::ironic::Ironic;
use hardware_tests::loopdev::LoopDevice;
use hardware_tests::partimage::{ext4_cat, fat_cat, BOOTX64, MARKER, ROOT_UUID};
use serde_json::{json, Value};

const MAC: &str = "52:54:00:c1:ea:06";
const MIB: u64 = 1 << 20;

/// A config-2 ISO as Ironic renders it, gzip+base64.
fn config_drive(dir: &Path) -> String {
    let tree = dir.join("cd/openstack/latest");
    std::fs::create_dir_all(&tree).unwrap();
    std::fs::write(tree.join("meta_data.json"), r#"{"uuid": "partition-test"}"#).unwrap();
    let iso = dir.join("cd.iso");
    hardware_tests::run(
        Command::new("genisoimage")
            .args(["-quiet", "-J", "-r", "-V", "config-2", "-o"])
            .arg(&iso)
            .arg(dir.join("cd")),
    )
    .unwrap();
    agent_contents::configdrive::source::encode(&std::fs::read(iso).unwrap())
}

fn blkid(dev: &Path, tag: &str) -> String {
    hardware_tests::run(
        Command::new("blkid")
            .args(["-p", "-o", "value", "-s", tag])
            .arg(dev),
    )
    .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_ironic_deploys_a_uefi_partition_image() {
    hardware_tests::require_root("the real-Ironic partition image test");
    let dir = tempfile::tempdir().unwrap();
    let img = hardware_tests::partimage::ext4_image(dir.path()).unwrap();
    let sha = ring::digest::digest(&ring::digest::SHA256, &std::fs::read(&img).unwrap());
    let sha: String = sha.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    let server = ImageServer::start().unwrap();
    server.route("/images/root.img", &img, &[], Fault::None);
    let cd = config_drive(dir.path());
    // 1 MiB + ESP 550 + swap 64 + config drive 1 + root 1024 MiB.
    let disk = LoopDevice::new(1700 * MIB).expect("creating a loop device");

    let ironic = Ironic::start().expect("starting Ironic 39.0.0");
    let uuid = ironic
        .enroll_ready("agent-partition", MAC, true)
        .await
        .unwrap();
    ironic
        .patch(
            &uuid,
            Ironic::image_patch(
                &server.url("/images/root.img"),
                &sha,
                json!([
                    {"op": "add", "path": "/properties/capabilities", "value": "boot_mode:uefi"},
                    {"op": "add", "path": "/instance_info/image_type", "value": "partition"},
                    {"op": "add", "path": "/instance_info/image_disk_format", "value": "raw"},
                    {"op": "add", "path": "/instance_info/swap_mb", "value": 64},
                ]),
            ),
        )
        .await
        .unwrap();
    let agent = agent::agent::start_detached(host_config(&ironic.url, MAC, &disk.path));

    let t = Instant::now();
    ironic
        .provision(&uuid, json!({"target": "active", "configdrive": cd}))
        .await
        .unwrap();
    let node = ironic
        .wait_for(&uuid, "active", Duration::from_secs(300))
        .await
        .unwrap_or_else(|e| panic!("partition image deploy: {e:#}"));
    println!(
        "partition image deploy: active after {:.1} s",
        t.elapsed().as_secs_f64()
    );
    assert!(node["last_error"].is_null(), "{}", node["last_error"]);
    assert_eq!(
        node["driver_internal_info"]["root_uuid_or_disk_id"], ROOT_UUID,
        "{}",
        node["driver_internal_info"]
    );

    let j: Value = serde_json::from_str(
        &hardware_tests::run(Command::new("sfdisk").arg("--json").arg(&disk.path)).unwrap(),
    )
    .unwrap();
    let pt = &j["partitiontable"];
    assert_eq!(pt["label"], "gpt", "{pt}");
    let sizes: Vec<(u64, u64)> = pt["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["start"].as_u64().unwrap() * 512 / MIB,
                p["size"].as_u64().unwrap() * 512 / MIB,
            )
        })
        .collect();
    // ESP, swap, config drive (the ISO rounded up to a MiB), root.
    assert_eq!(sizes, [(1, 550), (551, 64), (615, 1), (616, 1024)], "{pt}");
    let p = |n: u32| PathBuf::from(format!("{}p{n}", disk.path.display()));
    assert_eq!(blkid(&p(1), "LABEL"), "efi-part");
    assert_eq!(blkid(&p(2), "TYPE"), "swap");
    assert_eq!(blkid(&p(3), "LABEL"), "config-2");
    assert_eq!(blkid(&p(4), "UUID"), ROOT_UUID);
    assert_eq!(ext4_cat(&p(4), "/marker").unwrap(), MARKER.trim_end());
    assert_eq!(fat_cat(&p(1), "/EFI/BOOT/BOOTX64.EFI").unwrap(), BOOTX64);
    let esp_uuid = blkid(&p(1), "UUID");
    assert!(ext4_cat(&p(4), "/etc/fstab")
        .unwrap()
        .contains(&format!("UUID={esp_uuid}\t/boot/efi")));

    // Undeploy with automated cleaning: every partition and the table go.
    ironic.enable_automated_clean(&uuid).await.unwrap();
    let t = Instant::now();
    ironic
        .provision(&uuid, json!({"target": "deleted"}))
        .await
        .unwrap();
    let node = ironic
        .wait_for(&uuid, "available", Duration::from_secs(240))
        .await
        .unwrap_or_else(|e| panic!("undeploy: {e:#}"));
    println!(
        "undeploy: available after {:.1} s",
        t.elapsed().as_secs_f64()
    );
    assert!(node["last_error"].is_null(), "{}", node["last_error"]);
    let left = disk.signatures().unwrap();
    assert!(left.is_empty(), "undeploy left signatures {left:?}");
    assert!(!agent.is_finished(), "the agent stopped");
    agent.abort();
}
