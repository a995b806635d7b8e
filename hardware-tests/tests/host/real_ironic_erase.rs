//! Real Ironic 39.0.0 runs `erase_devices` (manual clean) through the agent
//! in host mode on a loop device this test fills: the node returns to
//! `manageable` and the whole device reads as zeros.

use std::time::Duration;

use agent::testconductor::demo::host_config;
use hardware_tests::ironic::Ironic;
use hardware_tests::loopdev::LoopDevice;
use serde_json::json;

const MAC: &str = "52:54:00:c1:ea:05";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_ironic_manual_clean_with_erase_devices_zeroes_the_disk() {
    hardware_tests::require_root("the real-Ironic erase_devices test");
    let disk = LoopDevice::new(48 << 20).expect("creating a loop device");
    let mut data = vec![0u8; 48 << 20];
    fastrand::Rng::with_seed(5).fill(&mut data);
    std::fs::write(&disk.path, &data).unwrap();

    let ironic = Ironic::start().expect("starting Ironic 39.0.0");
    let uuid = ironic
        .enroll_ready("agent-erase", MAC, false)
        .await
        .unwrap();
    let agent = agent::agent::start_detached(host_config(&ironic.url, MAC, &disk.path));
    ironic
        .provision(
            &uuid,
            json!({"target": "clean",
                   "clean_steps": [{"interface": "deploy", "step": "erase_devices"}]}),
        )
        .await
        .unwrap();
    let node = ironic
        .wait_for(&uuid, "manageable", Duration::from_secs(180))
        .await
        .unwrap_or_else(|e| panic!("erase_devices clean: {e:#}"));
    assert!(node["last_error"].is_null(), "{}", node["last_error"]);
    let after = std::fs::read(&disk.path).unwrap();
    assert!(after.iter().all(|b| *b == 0), "the device still holds data");
    agent.abort();
}
