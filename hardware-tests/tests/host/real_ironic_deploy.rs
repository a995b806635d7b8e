//! Real Ironic 39.0.0 (unmodified, `require_tls = true`) deploys a
//! whole-disk raw image with a config drive through the agent in host mode
//! onto a loop device this test creates: the node reaches `active`, the
//! device holds the image and a `config-2` partition the kernel and libblkid
//! read. Then an undeploy with automated cleaning wipes it (`available`),
//! and a deploy with a wrong checksum ends `deploy failed` with the agent's
//! message in `last_error` and the agent's logs stored by Ironic. Also:
//! `disable_power_off` ends in `system.lockdown`, and a CoreOS-like image
//! with Metal3's dict config drive gets its Ignition config injected.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use agent::testconductor::demo::host_config;
use agent_testkit::image_server::{Fault, ImageServer};
use hardware_tests::images;
use hardware_tests::ironic::Ironic;
use hardware_tests::loopdev::LoopDevice;
use serde_json::json;

const MAC: &str = "52:54:00:c1:ea:02";
const MIB: u64 = 1 << 20;

/// A 32 MiB GPT disk image with one partition full of random bytes.
fn make_image(path: &Path) -> (Vec<u8>, String) {
    images::sfdisk_image(path, 32 * MIB, "label: gpt\nname=root\n").unwrap();
    let mut img = std::fs::read(path).unwrap();
    let mut rng = fastrand::Rng::with_seed(6);
    for b in &mut img[(2 * MIB) as usize..(6 * MIB) as usize] {
        *b = rng.u8(..);
    }
    std::fs::write(path, &img).unwrap();
    let hex = images::sha256_hex(&img);
    (img, hex)
}

/// A config-2 ISO as Ironic renders it, gzip+base64.
fn config_drive(dir: &Path) -> String {
    let tree = dir.join("cd/openstack/latest");
    std::fs::create_dir_all(&tree).unwrap();
    std::fs::write(tree.join("meta_data.json"), r#"{"uuid": "deploy-test"}"#).unwrap();
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

/// The kernel's view of partition `k`, after asking it to re-read the table
/// (this host's loop driver does not scan by itself).
fn kernel_label(disk: &LoopDevice, k: u32) -> String {
    let p = match disk.wait_partition(k) {
        Ok(p) => p,
        Err(e) => return format!("<{e:#}>"),
    };
    hardware_tests::run(
        Command::new("blkid")
            .args(["-p", "-o", "value", "-s", "LABEL"])
            .arg(&p),
    )
    .unwrap_or_else(|e| format!("<{e:#}>"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_ironic_deploys_with_config_drive_undeploys_and_reports_bad_checksum() {
    hardware_tests::require_root("the real-Ironic deploy test");
    let dir = tempfile::tempdir().unwrap();
    let image_path = dir.path().join("test.raw");
    let (img, sha) = make_image(&image_path);
    let server = ImageServer::start().unwrap();
    server.route("/images/test.raw", &image_path, &[], Fault::None);
    let image_url = server.url("/images/test.raw");
    let cd = config_drive(dir.path());
    let disk = LoopDevice::new(256 * MIB).expect("creating a loop device");

    let ironic = Ironic::start().expect("starting Ironic 39.0.0");
    let uuid = ironic
        .enroll_ready("agent-deploy", MAC, true)
        .await
        .unwrap();
    let set_image = |hash: String| {
        Ironic::image_patch(
            &image_url,
            &hash,
            json!([{"op": "add", "path": "/instance_info/image_disk_format", "value": "raw"}]),
        )
    };
    ironic.patch(&uuid, set_image(sha.clone())).await.unwrap();

    let agent = agent::agent::start_detached(host_config(&ironic.url, MAC, &disk.path));

    // 1. Deploy with a config drive.
    let t = Instant::now();
    ironic
        .provision(&uuid, json!({"target": "active", "configdrive": cd}))
        .await
        .unwrap();
    let node = ironic
        .wait_for(&uuid, "active", Duration::from_secs(240))
        .await
        .unwrap_or_else(|e| panic!("deploy: {e:#}"));
    println!("deploy: active after {:.1} s", t.elapsed().as_secs_f64());
    assert!(node["last_error"].is_null(), "{}", node["last_error"]);
    let data = {
        use std::io::Read;
        let mut buf = vec![0u8; 32 * MIB as usize];
        std::fs::File::open(&disk.path)
            .unwrap()
            .read_exact(&mut buf)
            .unwrap();
        buf
    };
    // The partition data is the image's; the GPT itself was rewritten
    // (backup moved to the disk's end, config-2 entry added).
    let body = (2 * MIB) as usize..(31 * MIB) as usize;
    assert!(data[body.clone()] == img[body]);
    let f = std::fs::File::open(&disk.path).unwrap();
    let table = agent_devices::disk::table::read(&f, 512).unwrap().unwrap();
    let names: Vec<&str> = table.parts.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["root", "config-2"]);
    let cd_part = &table.parts[1];
    assert_eq!(cd_part.start + cd_part.len, 256 * MIB - 33 * 512);
    assert_eq!(
        agent_contents::configdrive::probe_label(&f, cd_part.start, cd_part.len).as_deref(),
        Some("config-2")
    );
    assert_eq!(kernel_label(&disk, 2), "config-2");
    drop(f);

    // 2. Undeploy with automated cleaning (erase_devices_metadata).
    ironic.enable_automated_clean(&uuid).await.unwrap();
    hardware_tests::run(Command::new("partx").arg("--delete").arg(&disk.path)).ok();
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

    // 3. A deploy with a wrong checksum fails with the agent's message.
    ironic
        .patch(&uuid, set_image("0".repeat(64)))
        .await
        .unwrap();
    ironic
        .provision(&uuid, json!({"target": "active"}))
        .await
        .unwrap();
    let node = ironic
        .wait_for_any_target(&uuid, "deploy failed", Duration::from_secs(240))
        .await
        .unwrap_or_else(|e| panic!("bad-checksum deploy: {e:#}"));
    let err = node["last_error"].as_str().unwrap_or_default();
    println!("bad checksum: last_error = {err}");
    assert!(
        err.contains("write_image") && err.contains(&"0".repeat(64)),
        "{err}"
    );
    let logs = ironic.deploy_logs();
    assert_eq!(logs.len(), 1, "{logs:?}");
    let listing = hardware_tests::run(Command::new("tar").arg("-tzf").arg(&logs[0])).unwrap();
    // IPA 13's bundle, made natively: the tables, multipath, udev and
    // kernel properties beside the agent's log.
    for part in [
        "agent.log",
        "dmesg",
        "partitions",
        "multipath",
        "inventory.json",
    ] {
        assert!(
            listing.lines().any(|l| l == part),
            "{part} not in {listing}"
        );
    }
    assert!(listing.lines().any(|l| l.starts_with("udev/")), "{listing}");
    assert!(!agent.is_finished(), "the agent stopped");
    agent.abort();
}

/// A node with `disable_power_off`: Ironic ends the deploy with
/// `standby.sync` and `system.lockdown`, then polls the agent until it is
/// unreachable; the node must reach `active` and the agent's API be closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_ironic_locks_the_agent_down_when_power_off_is_disabled() {
    hardware_tests::require_root("the real-Ironic lockdown test");
    let dir = tempfile::tempdir().unwrap();
    let image_path = dir.path().join("test.raw");
    let (_, sha) = make_image(&image_path);
    let server = ImageServer::start().unwrap();
    server.route("/images/test.raw", &image_path, &[], Fault::None);
    let disk = LoopDevice::new(64 * MIB).expect("creating a loop device");

    let ironic = Ironic::start().expect("starting Ironic 39.0.0");
    let mac = "52:54:00:c1:ea:03";
    let uuid = ironic
        .enroll_ready("agent-lockdown", mac, true)
        .await
        .unwrap();
    ironic
        .patch(
            &uuid,
            Ironic::image_patch(
                &server.url("/images/test.raw"),
                &sha,
                json!([{"op": "replace", "path": "/disable_power_off", "value": true}]),
            ),
        )
        .await
        .unwrap();
    let agent = agent::agent::start_detached(host_config(&ironic.url, mac, &disk.path));
    ironic
        .provision(&uuid, json!({"target": "active"}))
        .await
        .unwrap();
    let node = ironic
        .wait_for(&uuid, "active", Duration::from_secs(240))
        .await
        .unwrap_or_else(|e| panic!("deploy with disable_power_off: {e:#}"));
    assert!(node["last_error"].is_null(), "{}", node["last_error"]);
    let log = std::fs::read_to_string(ironic.log_path()).unwrap_or_default();
    assert!(
        log.contains("system.lockdown"),
        "Ironic never asked for a lockdown"
    );
    assert!(
        !agent.is_finished(),
        "a locked-down agent idles, it does not exit"
    );
    agent.abort();
}

/// Metal3's form: the config drive as a dict that Ironic renders into an
/// ISO, with an Ignition `user_data`; the image is CoreOS-like (an ext4
/// filesystem labelled `boot`). After the deploy the Ignition config is in
/// the boot filesystem.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_ironic_deploys_a_coreos_like_image_and_the_agent_injects_ignition() {
    hardware_tests::require_root("the real-Ironic Ignition test");
    let dir = tempfile::tempdir().unwrap();
    let image_path = dir.path().join("coreos.raw");
    images::sfdisk_image(
        &image_path,
        64 * MIB,
        "label: gpt\nsize=32MiB, name=boot\nname=root\n",
    )
    .unwrap();
    hardware_tests::run(
        Command::new("mkfs.ext4")
            .args(["-q", "-F", "-L", "boot", "-E", "offset=1048576"])
            .arg(&image_path)
            .arg("32M"),
    )
    .unwrap();
    let sha = images::sha256_hex(&std::fs::read(&image_path).unwrap());
    let server = ImageServer::start().unwrap();
    server.route("/images/coreos.raw", &image_path, &[], Fault::None);
    let disk = LoopDevice::new(192 * MIB).expect("creating a loop device");

    let ironic = Ironic::start().expect("starting Ironic 39.0.0");
    let mac = "52:54:00:c1:ea:04";
    let uuid = ironic
        .enroll_ready("agent-ignition", mac, true)
        .await
        .unwrap();
    ironic
        .patch(
            &uuid,
            Ironic::image_patch(&server.url("/images/coreos.raw"), &sha, json!([])),
        )
        .await
        .unwrap();
    let agent = agent::agent::start_detached(host_config(&ironic.url, mac, &disk.path));
    let ign = r#"{"ignition": {"version": "3.4.0"}, "passwd": {"users": [{"name": "core"}]}}"#;
    let configdrive = json!({
        "meta_data": {"uuid": uuid, "local-hostname": "coreos-0", "metal3-name": "coreos-0"},
        "user_data": ign,
    });
    ironic
        .provision(
            &uuid,
            json!({"target": "active", "configdrive": configdrive}),
        )
        .await
        .unwrap();
    let node = ironic
        .wait_for(&uuid, "active", Duration::from_secs(240))
        .await
        .unwrap_or_else(|e| panic!("CoreOS deploy: {e:#}"));
    assert!(node["last_error"].is_null(), "{}", node["last_error"]);
    let boot = agent_contents::ignition::boot_partition(&disk.path)
        .unwrap()
        .expect("the boot partition survives");
    let m = agent_contents::ignition::mount::Mounted::new(
        &disk.path, boot.start, boot.len, "ext4", true,
    )
    .unwrap();
    let written = std::fs::read_to_string(m.path().join("ignition/config.ign"));
    let stamp = m.path().join("ignition.firstboot").exists();
    m.unmount().unwrap();
    assert_eq!(written.unwrap(), ign);
    assert!(stamp);
    assert_eq!(kernel_label(&disk, 3), "config-2");
    agent.abort();
}

/// A deploy template (`CUSTOM_INJECT`, the node's and the instance's
/// trait) runs the agent's `inject_files` deploy step after `write_image`:
/// the file lands in the deployed image's root filesystem, found by its
/// first directory (`/etc`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_ironic_runs_inject_files_from_a_deploy_template() {
    hardware_tests::require_root("the real-Ironic deploy template test");
    let dir = tempfile::tempdir().unwrap();
    let rootfs = dir.path().join("rootfs");
    std::fs::create_dir_all(rootfs.join("etc")).unwrap();
    std::fs::write(rootfs.join("etc/hostname"), "tenant\n").unwrap();
    let image_path = dir.path().join("tenant.raw");
    images::sfdisk_image(&image_path, 40 * MIB, "label: gpt\nsize=32MiB, name=root\n").unwrap();
    hardware_tests::run(
        Command::new("mkfs.ext4")
            .args(["-q", "-F", "-L", "root", "-E", "offset=1048576", "-d"])
            .arg(&rootfs)
            .arg(&image_path)
            .arg("32M"),
    )
    .unwrap();
    let sha = images::sha256_hex(&std::fs::read(&image_path).unwrap());
    let server = ImageServer::start().unwrap();
    server.route("/images/tenant.raw", &image_path, &[], Fault::None);
    let disk = LoopDevice::new(64 * MIB).expect("creating a loop device");

    let ironic = Ironic::start().expect("starting Ironic 39.0.0");
    let mac = "52:54:00:c1:ea:05";
    let uuid = ironic
        .enroll_ready("agent-template", mac, true)
        .await
        .unwrap();
    use base64::Engine as _;
    let content =
        base64::engine::general_purpose::STANDARD.encode("injected by a deploy template\n");
    ironic
        .create_deploy_template(
            "CUSTOM_INJECT",
            json!([{"interface": "deploy", "step": "inject_files", "priority": 50,
                    "args": {"files": [{"path": "/etc/injected.conf", "content": content,
                                        "mode": 0o640}]}}]),
        )
        .await
        .unwrap();
    ironic.set_traits(&uuid, &["CUSTOM_INJECT"]).await.unwrap();
    ironic
        .patch(
            &uuid,
            Ironic::image_patch(
                &server.url("/images/tenant.raw"),
                &sha,
                json!([{"op": "add", "path": "/instance_info/traits", "value": ["CUSTOM_INJECT"]}]),
            ),
        )
        .await
        .unwrap();
    let agent = agent::agent::start_detached(host_config(&ironic.url, mac, &disk.path));
    ironic
        .provision(&uuid, json!({"target": "active"}))
        .await
        .unwrap();
    let node = ironic
        .wait_for(&uuid, "active", Duration::from_secs(240))
        .await
        .unwrap_or_else(|e| panic!("deploy with the template: {e:#}"));
    assert!(node["last_error"].is_null(), "{}", node["last_error"]);
    let m = agent_contents::ignition::mount::Mounted::new(&disk.path, MIB, 32 * MIB, "ext4", true)
        .unwrap();
    let injected = std::fs::read_to_string(m.path().join("etc/injected.conf"));
    let mode = std::fs::metadata(m.path().join("etc/injected.conf")).map(|md| {
        use std::os::unix::fs::PermissionsExt;
        md.permissions().mode() & 0o777
    });
    let kept = std::fs::read_to_string(m.path().join("etc/hostname"));
    m.unmount().unwrap();
    assert_eq!(injected.unwrap(), "injected by a deploy template\n");
    assert_eq!(mode.unwrap(), 0o640);
    assert_eq!(kept.unwrap(), "tenant\n");
    agent.abort();
}
