//! The image commands through the agent's HTTP API, as Ironic calls them:
//! the `write_image` deploy step and `standby.prepare_image` write with the
//! streaming pipeline; `get_partition_uuids` then reports the MBR disk
//! signature; failures are precise `command_error`s.

use std::path::Path;
use std::sync::Arc;

use agent_base::config::{Config, RunMode};
use agent_core::state::AgentState;
use agent_testkit::image_server::{Fault, ImageServer};
use axum::body::Body;
use axum::http::{Request, StatusCode};
use serde_json::{json, Value};
use tower::ServiceExt;

const TOKEN: &str = "0123456789abcdef0123456789abcdef0123456789a";
const MIB: usize = 1 << 20;

fn state(device: &Path) -> Arc<AgentState> {
    let config = Config {
        mode: RunMode::Host,
        allowed_devices: vec![device.to_path_buf()],
        ..Config::default()
    };
    let s = Arc::new(AgentState::new(config, None));
    s.set_token(Some(TOKEN.into()));
    s
}

async fn call(
    state: &Arc<AgentState>,
    method: &str,
    uri: &str,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let req = Request::builder()
        .method(method)
        .uri(uri)
        .header("content-type", "application/json")
        .body(
            body.map(|b| Body::from(b.to_string()))
                .unwrap_or_else(Body::empty),
        )
        .unwrap();
    let resp = agent::api::router(state.clone())
        .oneshot(req)
        .await
        .unwrap();
    let status = resp.status();
    let bytes = axum::body::to_bytes(resp.into_body(), 1 << 20)
        .await
        .unwrap();
    (
        status,
        if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).unwrap()
        },
    )
}

/// An 8 MiB "disk image" with an MBR (disk signature 0x1a2b3c4d) and data.
fn image() -> (Vec<u8>, String) {
    let mut img = vec![0u8; 8 * MIB];
    img[440..444].copy_from_slice(&0x1a2b_3c4du32.to_le_bytes());
    img[446 + 4] = 0x83;
    img[446 + 8..446 + 12].copy_from_slice(&2048u32.to_le_bytes());
    img[446 + 12..446 + 16].copy_from_slice(&8192u32.to_le_bytes());
    img[510] = 0x55;
    img[511] = 0xaa;
    let mut rng = fastrand::Rng::with_seed(3);
    for b in &mut img[MIB..3 * MIB] {
        *b = rng.u8(..);
    }
    let sha = ring::digest::digest(&ring::digest::SHA256, &img);
    (
        img,
        sha.as_ref().iter().map(|b| format!("{b:02x}")).collect(),
    )
}

fn deploy_step(url: &str, sha: &str) -> Value {
    json!({"name": "deploy.execute_deploy_step", "params": {
        "step": {"interface": "deploy", "step": "write_image", "args": {
            "image_info": {"id": "test.raw", "urls": [url], "disk_format": "raw", "container_format": null,
                           "stream_raw_images": true, "os_hash_algo": "sha256", "os_hash_value": sha,
                           "node_uuid": "d0838b0d-0000-4000-8000-000000000001"},
            "configdrive": null}},
        "node": {"uuid": "d0838b0d-0000-4000-8000-000000000001", "properties": {}},
        "ports": [], "deploy_version": {"generic_hardware_manager": "1.2"}}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_image_step_writes_verifies_and_reports_the_root_uuid() {
    let dir = tempfile::tempdir().unwrap();
    let (img, sha) = image();
    std::fs::write(dir.path().join("test.raw"), &img).unwrap();
    let server = ImageServer::start().unwrap();
    server.route(
        "/images/test.raw",
        dir.path().join("test.raw"),
        &[],
        Fault::None,
    );
    let disk = dir.path().join("disk");
    std::fs::File::create(&disk)
        .unwrap()
        .set_len(16 * MIB as u64)
        .unwrap();
    let st = state(&disk);

    let (code, steps) = call(
        &st,
        "POST",
        &format!("/v1/commands/?wait=true&agent_token={TOKEN}"),
        Some(json!({"name": "deploy.get_deploy_steps", "params": {"node": {}, "ports": []}})),
    )
    .await;
    assert_eq!(code, StatusCode::OK);
    let list = &steps["command_result"]["deploy_steps"]["GenericHardwareManager"];
    let write = list
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["step"] == "write_image")
        .expect("write_image listed");
    assert_eq!(write["priority"], 0);
    assert_eq!(write["interface"], "deploy");
    // Not listed (this agent installs no bootc images). Ironic 39's `bootc`
    // deploy interface, which `autodetect` picks for an `oci://` bootc image
    // without asking the agent, calls it anyway: it fails saying so.
    assert!(!list.to_string().contains("execute_bootc_install"));
    let (_, v) = call(
        &st,
        "POST",
        &format!("/v1/commands/?wait=true&agent_token={TOKEN}"),
        Some(json!({"name": "deploy.execute_deploy_step", "params": {
            "step": {"interface": "deploy", "step": "execute_bootc_install", "args": {}},
            "node": {}, "ports": []}})),
    )
    .await;
    assert_eq!(
        v["command_error"]["type"], "IncompatibleHardwareMethodError",
        "{v}"
    );
    assert!(
        v["command_error"]["details"]
            .as_str()
            .unwrap()
            .contains("not supported by this agent"),
        "{v}"
    );

    let (code, v) = call(
        &st,
        "POST",
        &format!("/v1/commands/?wait=true&agent_token={TOKEN}"),
        Some(deploy_step(&server.url("/images/test.raw"), &sha)),
    )
    .await;
    assert_eq!(code, StatusCode::OK, "{v}");
    assert_eq!(v["command_status"], "SUCCEEDED", "{v}");
    let result = v["command_result"]["deploy_result"]["result"]
        .as_str()
        .unwrap();
    assert_eq!(
        result,
        format!(
            "prepare_image: image (test.raw) written to device {} root_uuid=0x1a2b3c4d",
            disk.display()
        )
    );
    assert_eq!(std::fs::read(&disk).unwrap()[..8 * MIB], img[..]);

    let (_, v) = call(
        &st,
        "POST",
        &format!("/v1/commands/?wait=true&agent_token={TOKEN}"),
        Some(json!({"name": "standby.get_partition_uuids", "params": {}})),
    )
    .await;
    assert_eq!(v["command_result"], json!({"root uuid": "0x1a2b3c4d"}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_are_precise_command_errors_and_bad_params_are_400() {
    let dir = tempfile::tempdir().unwrap();
    let (img, _) = image();
    std::fs::write(dir.path().join("test.raw"), &img).unwrap();
    let server = ImageServer::start().unwrap();
    server.route(
        "/images/test.raw",
        dir.path().join("test.raw"),
        &[],
        Fault::None,
    );
    let disk = dir.path().join("disk");
    std::fs::write(&disk, &img).unwrap();
    let st = state(&disk);

    let wrong = "f".repeat(64);
    let (_, v) = call(
        &st,
        "POST",
        &format!("/v1/commands/?wait=true&agent_token={TOKEN}"),
        Some(deploy_step(&server.url("/images/test.raw"), &wrong)),
    )
    .await;
    assert_eq!(v["command_status"], "FAILED", "{v}");
    assert_eq!(v["command_error"]["type"], "ImageChecksumError");
    let details = v["command_error"]["details"].as_str().unwrap();
    assert!(
        details.contains(&format!("expected sha256 {wrong}")),
        "{details}"
    );
    // The old disk content no longer boots: its MBR is gone.
    assert!(std::fs::read(&disk).unwrap()[..MIB].iter().all(|b| *b == 0));

    let (code, v) = call(&st, "POST", &format!("/v1/commands/?agent_token={TOKEN}"),
        Some(json!({"name": "standby.prepare_image", "params": {"image_info": {"id": "x", "urls": []}}}))).await;
    assert_eq!(code, StatusCode::BAD_REQUEST, "{v}");
    assert!(
        v["faultstring"]
            .as_str()
            .unwrap()
            .contains("urls must be a non-empty list"),
        "{v}"
    );

    let (_, v) = call(&st, "POST", &format!("/v1/commands/?wait=true&agent_token={TOKEN}"),
        Some(json!({"name": "standby.prepare_image", "params": {
            "image_info": {"id": "x", "urls": [server.url("/images/missing")], "os_hash_algo": "sha256", "os_hash_value": "a".repeat(64)},
            "configdrive": null}}))).await;
    assert_eq!(v["command_status"], "FAILED", "{v}");
    assert_eq!(v["command_error"]["type"], "ImageDownloadError");
    assert!(
        v["command_error"]["details"]
            .as_str()
            .unwrap()
            .contains("HTTP 404"),
        "{v}"
    );
}

/// A config-2 ISO as Ironic renders it.
fn config_iso(dir: &Path) -> Vec<u8> {
    let tree = dir.join("cd/openstack/latest");
    std::fs::create_dir_all(&tree).unwrap();
    std::fs::write(tree.join("meta_data.json"), r#"{"uuid": "x"}"#).unwrap();
    let iso = dir.join("cd.iso");
    let st = std::process::Command::new("genisoimage")
        .args(["-quiet", "-J", "-r", "-V", "config-2", "-o"])
        .arg(&iso)
        .arg(dir.join("cd"))
        .stderr(std::process::Stdio::null())
        .status()
        .expect("genisoimage is installed");
    assert!(st.success());
    std::fs::read(iso).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_drive_gets_a_partition_and_bad_ones_fail_before_the_disk_is_touched() {
    let dir = tempfile::tempdir().unwrap();
    let (img, sha) = image();
    std::fs::write(dir.path().join("test.raw"), &img).unwrap();
    let cd = agent_contents::configdrive::source::encode(&config_iso(dir.path()));
    std::fs::write(dir.path().join("cd.gz.b64"), &cd).unwrap();
    let server = ImageServer::start().unwrap();
    server.route(
        "/images/test.raw",
        dir.path().join("test.raw"),
        &[],
        Fault::None,
    );
    server.route("/cd.gz.b64", dir.path().join("cd.gz.b64"), &[], Fault::None);
    let disk = dir.path().join("disk");
    std::fs::File::create(&disk)
        .unwrap()
        .set_len(96 * MIB as u64)
        .unwrap();
    let st = state(&disk);
    let url = server.url("/images/test.raw");

    for drive in [json!(cd), json!(server.url("/cd.gz.b64"))] {
        let mut step = deploy_step(&url, &sha);
        step["params"]["step"]["args"]["configdrive"] = drive;
        let (_, v) = call(
            &st,
            "POST",
            &format!("/v1/commands/?wait=true&agent_token={TOKEN}"),
            Some(step),
        )
        .await;
        assert_eq!(v["command_status"], "SUCCEEDED", "{v}");
        let data = std::fs::read(&disk).unwrap();
        // The image, apart from the new MBR entry 2.
        assert!(data[..462] == img[..462] && data[478..8 * MIB] == img[478..]);
        // Partition 2 (type 0x0c) in the last 64 MiB, holding the ISO.
        let e = &data[446 + 16..446 + 32];
        assert_eq!(e[4], 0x0c);
        let start = u32::from_le_bytes(e[8..12].try_into().unwrap()) as usize * 512;
        assert_eq!(start, 32 * MIB);
        let file = std::fs::File::open(&disk).unwrap();
        let label = agent_contents::configdrive::probe_label(&file, start as u64, 64 << 20);
        assert_eq!(label.as_deref(), Some("config-2"));
    }

    // A config drive that is not gzip fails before anything is written.
    std::fs::write(&disk, b"old content").unwrap();
    let mut step = deploy_step(&url, &sha);
    step["params"]["step"]["args"]["configdrive"] = json!("bm90IGd6aXA=");
    let (_, v) = call(
        &st,
        "POST",
        &format!("/v1/commands/?wait=true&agent_token={TOKEN}"),
        Some(step),
    )
    .await;
    assert_eq!(v["command_status"], "FAILED", "{v}");
    assert_eq!(v["command_error"]["type"], "InvalidCommandParamsError");
    assert!(v["command_error"]["details"]
        .as_str()
        .unwrap()
        .contains("not gzip"));
    assert_eq!(std::fs::read(&disk).unwrap(), b"old content");

    // An image without a partition table fails IPA's partition check.
    std::fs::File::create(&disk)
        .unwrap()
        .set_len(96 * MIB as u64)
        .unwrap();
    let blank = vec![7u8; 2 * MIB];
    std::fs::write(dir.path().join("test.raw"), &blank).unwrap();
    let sha = ring::digest::digest(&ring::digest::SHA256, &blank);
    let sha: String = sha.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    let (_, v) = call(
        &st,
        "POST",
        &format!("/v1/commands/?wait=true&agent_token={TOKEN}"),
        Some(deploy_step(&url, &sha)),
    )
    .await;
    assert_eq!(v["command_status"], "FAILED", "{v}");
    let details = v["command_error"]["details"].as_str().unwrap();
    assert!(details.contains("no partition found"), "{details}");
}
