//! `image.install_bootloader` under BIOS for a partition image, on a loop
//! device in host mode: the failures, which need no virtual machine.
//!
//! The image is one ext4 filesystem holding a Debian root with Debian's
//! GRUB for BIOS and the test image's kernel and initramfs
//! (`hardware_tests::grubimage`). The agent (host mode, command API) lays
//! out the loop device as IPA does for BIOS with an MBR (`disk_label`
//! msdos) and writes the image into the root partition. Then:
//!
//! 1. without `enable_bios_bootloader_install` in the lookup answer the
//!    command fails with IPA's `InvalidImage` naming the option, and the
//!    disk's MBR boot code is still zeros;
//! 2. with it, the agent mounts the root, binds `/dev`, `/proc`, `/run`
//!    and `/sys` into it and runs the image's own `grub-install
//!    --target=i386-pc` on the disk, which refuses a loop device (GRUB asks
//!    the partition for its start with `HDIO_GETGEO`, which loop devices
//!    do not answer): the command fails with a `CommandExecutionError`
//!    carrying GRUB's own message, nothing stays mounted, the MBR is still
//!    zeros;
//! 3. an image without GRUB (`hardware_tests::partimage`) redeployed there
//!    fails with an error naming its root and the missing `grub-install`,
//!    nothing left mounted.
//!
//! That GRUB from the image really boots a disk is shown on a virtio disk
//! under SeaBIOS through real Ironic (`ironic_bios_grub_ramdisk.rs`).

use std::os::unix::fs::FileExt;
use std::path::Path;
use std::process::Command;
use std::time::Instant;

use agent_base::config::{Config, RunMode};
use agent_testkit::image_server::{Fault, ImageServer};
use hardware_tests::agentapi::AgentApi;
use hardware_tests::loopdev::LoopDevice;
use hardware_tests::{grubimage, run};
use serde_json::json;

const MIB: u64 = 1 << 20;
const ROOT_UUID: &str = "0d4c7a52-6b1e-4f3a-9c8d-51e2a7b3c9f0";
const MARKER: &str = "partition-image-bios-grub";

/// A config-2 ISO as Ironic renders it.
fn config_drive(dir: &Path) -> Vec<u8> {
    let tree = dir.join("cd");
    std::fs::create_dir_all(tree.join("openstack/latest")).unwrap();
    std::fs::write(
        tree.join("openstack/latest/meta_data.json"),
        r#"{"uuid": "bios-grub-boot"}"#,
    )
    .unwrap();
    let iso = dir.join("cd.iso");
    run(Command::new("genisoimage")
        .args(["-quiet", "-o"])
        .arg(&iso)
        .args(["-ldots", "-allow-lowercase", "-allow-multidot", "-l"])
        .args(["-J", "-r", "-V", "config-2"])
        .arg(&tree))
    .unwrap();
    std::fs::read(iso).unwrap()
}

fn mbr_boot_code(disk: &Path) -> Vec<u8> {
    let f = std::fs::File::open(disk).unwrap();
    let mut b = vec![0u8; 440];
    f.read_exact_at(&mut b, 0).unwrap();
    b
}

/// This process's agent left nothing mounted. Its mount points are named
/// `agent-mnt-PID-…`; other test binaries running beside this one (ci/lanes)
/// have their own mounts in the same table.
fn assert_no_agent_mounts() {
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let ours = format!("agent-mnt-{}-", std::process::id());
    assert!(
        !mounts.contains(&ours),
        "the agent left mounts behind:\n{mounts}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bios_grub_from_the_image_is_refused_unless_allowed_and_fails_cleanly() {
    hardware_tests::require_root("the BIOS partition image GRUB test");
    let started = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let disk = LoopDevice::new(1024 * MIB).unwrap();
    let img = grubimage::ext4_image(dir.path(), MARKER, ROOT_UUID, 160).unwrap();
    println!("image built in {:.1} s", started.elapsed().as_secs_f64());
    let sha = ring::digest::digest(&ring::digest::SHA256, &std::fs::read(&img).unwrap());
    let sha: String = sha.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    let cd = config_drive(dir.path());
    let server = ImageServer::start().unwrap();
    server.route("/root.img", &img, &[], Fault::None);
    let api = AgentApi::start(Config {
        mode: RunMode::Host,
        allowed_devices: vec![disk.path.clone()],
        ..Config::default()
    })
    .await
    .unwrap();
    let r = api
        .run(
            "standby.prepare_image",
            json!({"image_info": {"id": "root.img", "urls": [server.url("/root.img")],
                "disk_format": "raw", "os_hash_algo": "sha256", "os_hash_value": sha,
                "image_type": "partition", "root_mb": 256, "swap_mb": 16, "ephemeral_mb": 0,
                "ephemeral_format": null, "preserve_ephemeral": false,
                "deploy_boot_mode": "bios", "boot_option": "local", "disk_label": "msdos"},
                "configdrive": agent_contents::configdrive::source::encode(&cd)}),
        )
        .await
        .unwrap();
    assert_eq!(r["command_status"], "SUCCEEDED", "{r}");
    let uuids = api
        .run("standby.get_partition_uuids", json!({}))
        .await
        .unwrap();
    assert_eq!(uuids["command_result"]["root uuid"], ROOT_UUID, "{uuids}");
    let install = json!({"root_uuid": ROOT_UUID, "efi_system_part_uuid": null,
                         "prep_boot_part_uuid": null, "target_boot_mode": "bios"});

    // 1. Not allowed by the conductor: refused, nothing written.
    let r = api
        .run("image.install_bootloader", install.clone())
        .await
        .unwrap();
    assert_eq!(r["command_status"], "FAILED", "{r}");
    assert_eq!(r["command_error"]["type"], "InvalidImage", "{r}");
    let msg = r["command_error"]["details"].as_str().unwrap_or_default();
    assert!(msg.contains("enable_bios_bootloader_install"), "{msg}");
    assert!(
        mbr_boot_code(&disk.path).iter().all(|&b| b == 0),
        "boot code written although refused"
    );

    // 2. Allowed: GRUB from the image, which refuses a loop device.
    let lookup = agent_conductor::conductor::lookup::parse_lookup(&json!({"node": {"uuid": "n"},
        "config": {"heartbeat_timeout": 300, "enable_bios_bootloader_install": true}}))
    .unwrap();
    api.state.set_lookup_config(lookup.config);
    let r = api.run("image.install_bootloader", install).await.unwrap();
    assert_eq!(r["command_status"], "FAILED", "{r}");
    assert_eq!(r["command_error"]["type"], "CommandExecutionError", "{r}");
    let msg = r["command_error"]["details"].as_str().unwrap_or_default();
    assert!(
        msg.contains("grub-install --target=i386-pc") && msg.contains("cannot find a GRUB drive"),
        "{msg}"
    );
    assert!(
        mbr_boot_code(&disk.path).iter().all(|&b| b == 0),
        "boot code written although GRUB failed"
    );
    assert_no_agent_mounts();

    // 3. An image without GRUB: a precise error, nothing left mounted.
    let plain = hardware_tests::partimage::ext4_image(&dir.path().join("plain")).unwrap();
    let sha = ring::digest::digest(&ring::digest::SHA256, &std::fs::read(&plain).unwrap());
    let sha: String = sha.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    server.route("/plain.img", &plain, &[], Fault::None);
    let r = api
        .run(
            "standby.prepare_image",
            json!({"image_info": {"id": "plain.img", "urls": [server.url("/plain.img")],
                "disk_format": "raw", "os_hash_algo": "sha256", "os_hash_value": sha,
                "image_type": "partition", "root_mb": 64, "swap_mb": 0, "ephemeral_mb": 0,
                "ephemeral_format": null, "preserve_ephemeral": false,
                "deploy_boot_mode": "bios", "boot_option": "local", "disk_label": "msdos"}}),
        )
        .await
        .unwrap();
    assert_eq!(r["command_status"], "SUCCEEDED", "{r}");
    let plain_uuid = hardware_tests::partimage::ROOT_UUID;
    let r = api
        .run(
            "image.install_bootloader",
            json!({"root_uuid": plain_uuid, "efi_system_part_uuid": null,
                   "prep_boot_part_uuid": null, "target_boot_mode": "bios"}),
        )
        .await
        .unwrap();
    drop(api);
    assert_eq!(r["command_status"], "FAILED", "{r}");
    let msg = r["command_error"]["details"].as_str().unwrap_or_default();
    assert!(
        msg.contains("has no grub-install") && msg.contains(plain_uuid),
        "{msg}"
    );
    assert_no_agent_mounts();
    println!("all: {:.1} s", started.elapsed().as_secs_f64());
}
