//! The `install_coreos` deploy step through the command API
//! (`deploy.execute_deploy_step`) onto a loop device: a CoreOS-like image
//! (GPT, ext4 `boot` filesystem with a BLS entry and the image's own
//! first-boot stamp, a root partition) is downloaded from the node's
//! `instance_info.image_source` and verified; the step's Ignition argument
//! wins over the config drive's `user_data`; the config drive's
//! `coreos_append_karg` is used when the step gives none; a cloud-init
//! user data is refused before the disk is touched.

use std::path::Path;
use std::process::Command;

use agent::config::{Config, RunMode};
use agent::ignition::mount::Mounted;
use agent::testconductor::image_server::{Fault, ImageServer};
use hardware_tests::agentapi::AgentApi;
use hardware_tests::loopdev::LoopDevice;
use hardware_tests::run;
use serde_json::{json, Value};

const MIB: u64 = 1 << 20;
const STAMP: &str = "set ignition_network_kcmdline='ip=dhcp'\n";
const BLS: &str = "title Fedora CoreOS 42\nversion 1\nlinux /ostree/fedora-coreos/vmlinuz\ninitrd /ostree/fedora-coreos/initramfs.img\noptions $ignition_firstboot root=UUID=abc rw ostree=/ostree/boot.1/fedora-coreos/0\n";

/// A 96 MiB CoreOS-like disk image and its sha256.
fn coreos_image(dir: &Path) -> (std::path::PathBuf, String) {
    let tree = dir.join("bootfs");
    std::fs::create_dir_all(tree.join("loader/entries")).unwrap();
    std::fs::write(tree.join("loader/entries/ostree-1.conf"), BLS).unwrap();
    std::fs::write(tree.join("ignition.firstboot"), STAMP).unwrap();
    let img = dir.join("fcos.raw");
    std::fs::File::create(&img)
        .unwrap()
        .set_len(96 * MIB)
        .unwrap();
    run(Command::new("bash").args([
        "-c",
        &format!(
            "printf 'label: gpt\\nsize=32MiB, name=boot\\nsize=32MiB, name=root\\n' | sfdisk --quiet --no-reread --no-tell-kernel {}",
            img.display()
        ),
    ]))
    .unwrap();
    run(Command::new("mkfs.ext4")
        .args(["-q", "-F", "-L", "boot", "-E", "offset=1048576", "-d"])
        .arg(&tree)
        .arg(&img)
        .arg("32M"))
    .unwrap();
    let sha = ring::digest::digest(&ring::digest::SHA256, &std::fs::read(&img).unwrap());
    (
        img,
        sha.as_ref().iter().map(|b| format!("{b:02x}")).collect(),
    )
}

fn step(args: Value, instance_info: Value) -> Value {
    json!({"step": {"interface": "deploy", "step": "install_coreos", "args": args},
           "node": {"uuid": "n1", "instance_info": instance_info, "properties": {}},
           "ports": []})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn install_coreos_writes_the_image_ignition_and_kernel_arguments() {
    hardware_tests::require_root("the install_coreos loop-device test");
    let dir = tempfile::tempdir().unwrap();
    let (img, sha) = coreos_image(dir.path());
    let server = ImageServer::start().unwrap();
    server.route("/fcos.raw", &img, &[], Fault::None);
    let disk = LoopDevice::new(128 * MIB).unwrap();
    let api = AgentApi::start(Config {
        mode: RunMode::Host,
        allowed_devices: vec![disk.path.clone()],
        ..Config::default()
    })
    .await
    .unwrap();
    let from_user_data = r#"{"ignition": {"version": "3.2.0"}}"#;
    let instance_info = json!({
        "image_source": server.url("/fcos.raw"),
        "image_os_hash_algo": "sha256", "image_os_hash_value": sha,
        "configdrive": {"user_data": from_user_data,
                        "meta_data": {"coreos_append_karg": ["console=ttyS0,115200n8"]}}});

    // A cloud-init user data is refused before the disk is touched.
    let bad = step(
        json!({}),
        json!({"image_source": server.url("/fcos.raw"), "image_os_hash_algo": "sha256",
               "image_os_hash_value": sha, "configdrive": {"user_data": "#cloud-config\n"}}),
    );
    let r = api.run("deploy.execute_deploy_step", bad).await.unwrap();
    assert_eq!(r["command_status"], "FAILED", "{r}");
    assert!(
        r["command_error"]["details"]
            .as_str()
            .unwrap()
            .contains("not an Ignition config"),
        "{r}"
    );
    assert!(server.seen().is_empty(), "nothing was downloaded");

    // The step's arguments win.
    let ignition = json!({"ignition": {"version": "3.4.0"},
                          "passwd": {"users": [{"name": "core"}]}});
    let r = api
        .run(
            "deploy.execute_deploy_step",
            step(
                json!({"ignition": ignition, "append_karg": ["ip=dhcp6", "quiet"]}),
                instance_info.clone(),
            ),
        )
        .await
        .unwrap();
    assert_eq!(r["command_status"], "SUCCEEDED", "{r}");
    assert_eq!(r["command_result"]["deploy_step"]["step"], "install_coreos");
    let msg = r["command_result"]["deploy_result"]["result"]
        .as_str()
        .unwrap();
    assert!(
        msg.starts_with("install_coreos: prepare_image: image (fcos.raw) written to device"),
        "{msg}"
    );

    let boot = agent::ignition::boot_partition(&disk.path)
        .unwrap()
        .unwrap();
    let read = |rel: &str| {
        let m = Mounted::new(&disk.path, boot.start, boot.len, "ext4", true).unwrap();
        let out = std::fs::read_to_string(m.path().join(rel)).unwrap();
        m.unmount().unwrap();
        out
    };
    let written: Value = serde_json::from_str(&read("ignition/config.ign")).unwrap();
    assert_eq!(written, ignition);
    assert_eq!(
        read("ignition.firstboot"),
        STAMP,
        "the image's stamp is kept"
    );
    assert_eq!(
        read("loader/entries/ostree-1.conf"),
        BLS.replace("fedora-coreos/0\n", "fedora-coreos/0 ip=dhcp6 quiet\n")
    );
    // The root partition holds the image's bytes.
    let want = std::fs::read(&img).unwrap();
    let got = std::fs::read(&disk.path).unwrap();
    let root = (33 * MIB) as usize..(65 * MIB) as usize;
    assert!(got[root.clone()] == want[root], "root partition differs");

    // Without step arguments: the config drive's user data and
    // coreos_append_karg.
    let r = api
        .run("deploy.execute_deploy_step", step(json!({}), instance_info))
        .await
        .unwrap();
    assert_eq!(r["command_status"], "SUCCEEDED", "{r}");
    assert_eq!(read("ignition/config.ign"), from_user_data);
    assert!(read("loader/entries/ostree-1.conf")
        .contains("ostree=/ostree/boot.1/fedora-coreos/0 console=ttyS0,115200n8\n"));
    let uuids = api
        .run("standby.get_partition_uuids", json!({}))
        .await
        .unwrap();
    assert!(uuids["command_result"]["root uuid"].is_string(), "{uuids}");
}
