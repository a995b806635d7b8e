//! Real Ironic 39.0.0 (unmodified, `require_tls = true`, its `agent` rescue
//! interface enabled) rescues an `active` node whose agent runs in host
//! mode: in `rescue wait` the agent's heartbeat brings
//! `rescue.finalize_rescue` with the password's crypt hash, the node
//! reaches `rescue`, the agent's API closes and its heartbeats stop, and no
//! account of this machine changes (host mode simulates the login). Then
//! `unrescue` brings the node back to `active`.

use std::time::Duration;

use agent::testconductor::demo::host_config;
use agent_testkit::image_server::{Fault, ImageServer};
use hardware_tests::ironic::Ironic;
use hardware_tests::loopdev::LoopDevice;
use serde_json::json;

const MIB: u64 = 1 << 20;

/// `[agent] manage_agent_boot = false`: the fake boot interface has no
/// rescue support to validate, and there is no ramdisk to boot here.
const CONF: &str = "[DEFAULT]\nenabled_rescue_interfaces = no-rescue,fake,agent\n\n[agent]\nmanage_agent_boot = false\n";

/// An 8 MiB GPT disk image with one partition; its sha256.
fn make_image(path: &std::path::Path) -> String {
    hardware_tests::images::sfdisk_image(path, 8 * MIB, "label: gpt\nname=root\n").unwrap();
    hardware_tests::images::sha256_hex(&std::fs::read(path).unwrap())
}

fn machine_accounts() -> (Vec<u8>, Vec<u8>, bool) {
    (
        std::fs::read("/etc/passwd").unwrap_or_default(),
        std::fs::read("/etc/shadow").unwrap_or_default(),
        std::path::Path::new("/etc/.rescued").exists(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_ironic_rescues_and_unrescues_a_host_mode_agent() {
    hardware_tests::require_root("the real-Ironic rescue test");
    let accounts = machine_accounts();
    let dir = tempfile::tempdir().unwrap();
    let image = dir.path().join("test.raw");
    let sha = make_image(&image);
    let server = ImageServer::start().unwrap();
    server.route("/images/test.raw", &image, &[], Fault::None);
    let disk = LoopDevice::new(64 * MIB).expect("creating a loop device");

    let ironic = Ironic::start_with(CONF).expect("starting Ironic 39.0.0");
    let mac = "52:54:00:c1:ea:13";
    let uuid = ironic
        .enroll_ready("agent-rescue", mac, true)
        .await
        .unwrap();
    ironic
        .patch(
            &uuid,
            Ironic::image_patch(
                &server.url("/images/test.raw"),
                &sha,
                json!([{"op": "replace", "path": "/rescue_interface", "value": "agent"}]),
            ),
        )
        .await
        .unwrap();
    let agent = agent::agent::start_detached(host_config(&ironic.url, mac, &disk.path));
    ironic
        .provision(&uuid, json!({"target": "active"}))
        .await
        .unwrap();
    ironic
        .wait_for(&uuid, "active", Duration::from_secs(240))
        .await
        .unwrap_or_else(|e| panic!("deploy: {e:#}"));

    ironic
        .provision(
            &uuid,
            json!({"target": "rescue", "rescue_password": "rescue-Pw-42"}),
        )
        .await
        .unwrap();
    let node = ironic
        .wait_for(&uuid, "rescue", Duration::from_secs(120))
        .await
        .unwrap_or_else(|e| panic!("rescue: {e:#}"));
    assert!(node["last_error"].is_null(), "{}", node["last_error"]);
    let log = std::fs::read_to_string(ironic.log_path()).unwrap();
    let call = log
        .lines()
        .find(|l| l.contains("rescue.finalize_rescue"))
        .expect("Ironic never called rescue.finalize_rescue");
    println!("{call}");
    // The agent's API is gone (it stopped after answering).
    let url = node["driver_internal_info"]["agent_url"]
        .as_str()
        .expect("Ironic keeps the rescued agent's URL")
        .to_string();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let hostport = url.trim_start_matches("https://").trim_end_matches('/');
    assert!(
        std::net::TcpStream::connect(hostport).is_err(),
        "the agent still listens on {hostport} after the rescue"
    );
    let heartbeats = |log: &str| log.matches("POST /v1/heartbeat/").count();
    let before = heartbeats(&std::fs::read_to_string(ironic.log_path()).unwrap());
    tokio::time::sleep(Duration::from_secs(8)).await;
    let after = heartbeats(&std::fs::read_to_string(ironic.log_path()).unwrap());
    assert_eq!(before, after, "the rescued agent still heartbeats");
    assert!(
        !agent.is_finished(),
        "the rescued agent idles, it does not exit"
    );
    assert_eq!(
        machine_accounts(),
        accounts,
        "host mode changed this machine's accounts"
    );

    ironic
        .provision(&uuid, json!({"target": "unrescue"}))
        .await
        .unwrap();
    let node = ironic
        .wait_for(&uuid, "active", Duration::from_secs(120))
        .await
        .unwrap_or_else(|e| panic!("unrescue: {e:#}"));
    assert!(node["last_error"].is_null(), "{}", node["last_error"]);
    agent.abort();
}
