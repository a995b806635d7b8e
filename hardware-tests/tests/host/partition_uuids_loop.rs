//! `standby.get_partition_uuids` through the command API after
//! `standby.prepare_image` wrote whole-disk images to a loop device: exactly
//! the keys and values IPA reports (PROTOCOL.md §5.7): `{}` before any write,
//! `{"root uuid": "0x1a2b3c4d"}` for an MBR image whose disk signature
//! sfdisk set to 0x1a2b3c4d, `"0x00000000"` for a GPT image (whose
//! protective MBR has no signature), and `{}` again after a failed write.

use std::path::{Path, PathBuf};
use std::process::Command;

use agent_base::config::{Config, RunMode};
use agent_testkit::image_server::{Fault, ImageServer};
use hardware_tests::agentapi::AgentApi;
use hardware_tests::loopdev::LoopDevice;
use serde_json::{json, Value};

const MIB: u64 = 1 << 20;

/// A 16 MiB disk image partitioned by sfdisk with `script`, and its sha256.
fn image(dir: &Path, name: &str, script: &str) -> (PathBuf, String) {
    let path = dir.join(name);
    std::fs::File::create(&path)
        .unwrap()
        .set_len(16 * MIB)
        .unwrap();
    hardware_tests::run(Command::new("bash").args([
        "-c",
        &format!(
            "printf '{script}' | sfdisk --quiet --no-reread --no-tell-kernel {}",
            path.display()
        ),
    ]))
    .unwrap();
    let sha = ring::digest::digest(&ring::digest::SHA256, &std::fs::read(&path).unwrap());
    (
        path,
        sha.as_ref().iter().map(|b| format!("{b:02x}")).collect(),
    )
}

async fn prepare(api: &AgentApi, server: &ImageServer, name: &str, sha: &str) -> Value {
    api.run(
        "standby.prepare_image",
        json!({"image_info": {"id": name, "urls": [server.url(&format!("/{name}"))],
                              "os_hash_algo": "sha256", "os_hash_value": sha}}),
    )
    .await
    .unwrap()
}

async fn uuids(api: &AgentApi) -> Value {
    let r = api
        .run("standby.get_partition_uuids", json!({}))
        .await
        .unwrap();
    assert_eq!(r["command_status"], "SUCCEEDED", "{r}");
    r["command_result"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partition_uuids_match_the_written_disk() {
    hardware_tests::require_root("the partition UUID loop-device test");
    let dir = tempfile::tempdir().unwrap();
    let (mbr, mbr_sha) = image(
        dir.path(),
        "mbr.img",
        "label: dos\\nlabel-id: 0x1a2b3c4d\\n,4MiB,L\\n,,L\\n",
    );
    let (gpt, gpt_sha) = image(
        dir.path(),
        "gpt.img",
        "label: gpt\\nlabel-id: 6A1E0D6B-3C0B-4F4B-9A0D-2E5C1B7F8A90\\n,4MiB\\n,\\n",
    );
    let server = ImageServer::start().unwrap();
    server.route("/mbr.img", &mbr, &[], Fault::None);
    server.route("/gpt.img", &gpt, &[], Fault::None);
    let disk = LoopDevice::new(32 * MIB).unwrap();
    let api = AgentApi::start(Config {
        mode: RunMode::Host,
        allowed_devices: vec![disk.path.clone()],
        ..Config::default()
    })
    .await
    .unwrap();

    assert_eq!(uuids(&api).await, json!({}), "nothing written yet");

    let r = prepare(&api, &server, "mbr.img", &mbr_sha).await;
    assert_eq!(r["command_status"], "SUCCEEDED", "{r}");
    assert_eq!(uuids(&api).await, json!({"root uuid": "0x1a2b3c4d"}));
    // The same number as IPA's hexdump -s 440 -n 4 -e '"0x%08x"' prints.
    let hexdump = hardware_tests::run(
        Command::new("hexdump")
            .args(["-s", "440", "-n", "4", "-e", "\"0x%08x\""])
            .arg(&disk.path),
    )
    .unwrap();
    assert_eq!(hexdump, "0x1a2b3c4d");
    assert!(r["command_result"]["result"]
        .as_str()
        .unwrap()
        .ends_with("root_uuid=0x1a2b3c4d"));

    let r = prepare(&api, &server, "gpt.img", &gpt_sha).await;
    assert_eq!(r["command_status"], "SUCCEEDED", "{r}");
    assert_eq!(uuids(&api).await, json!({"root uuid": "0x00000000"}));

    // A failed write leaves nothing to report.
    let r = prepare(&api, &server, "mbr.img", &gpt_sha).await;
    assert_eq!(r["command_status"], "FAILED", "{r}");
    assert_eq!(uuids(&api).await, json!({}));
}
