//! Real Ironic 39.0.0 with the `agent` inspect interface accepts the
//! inspection document of a host-mode agent (this machine's inventory) and
//! sets `cpus`, `memory_mb`, `local_gb` and `cpu_arch` on the node.

use std::time::{Duration, Instant};

use agent::config::Config;
use agent::inventory;
use agent::testconductor::demo::host_config;
use hardware_tests::ironic::Ironic;
use serde_json::json;

const MAC: &str = "52:54:00:1e:5c:01";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_ironic_inspection_sets_the_node_properties() {
    hardware_tests::require_root("the real-Ironic inspection test");
    let dir = tempfile::tempdir().unwrap();
    let scratch = dir.path().join("disk.img");
    std::fs::write(&scratch, [0u8; 4096]).unwrap();

    let ironic = Ironic::start().expect("starting Ironic 39.0.0");
    let uuid = ironic
        .enroll_ready("agent-inspect", MAC, false)
        .await
        .unwrap();

    let t = Instant::now();
    ironic
        .provision(&uuid, json!({"target": "inspect"}))
        .await
        .unwrap();
    ironic
        .wait_for_any_target(&uuid, "inspect wait", Duration::from_secs(60))
        .await
        .unwrap();
    let config = Config {
        inspection_callback_url: Some(format!("{}/v1/continue_inspection", ironic.url)),
        ..host_config(&ironic.url, MAC, &scratch)
    };
    let agent = agent::agent::start_detached(config);
    let node = ironic
        .wait_for(&uuid, "manageable", Duration::from_secs(120))
        .await
        .unwrap();
    println!("inspected in {:.1} s", t.elapsed().as_secs_f64());
    assert!(node["last_error"].is_null(), "{}", node["last_error"]);

    let live = inventory::collect(&inventory::Options::live(None)).unwrap();
    let root = agent::hints::choose(&live.disks, None).unwrap().disk;
    let p = &node["properties"];
    assert_eq!(p["cpus"], json!(live.cpu.count), "{p}");
    assert_eq!(
        p["memory_mb"],
        json!(live.memory.physical_mb.unwrap()),
        "{p}"
    );
    assert_eq!(p["local_gb"], json!(root.size / (1 << 30) - 1), "{p}");
    assert_eq!(p["cpu_arch"], json!(std::env::consts::ARCH), "{p}");

    let stored = ironic.inventory(&uuid).await.unwrap();
    assert_eq!(stored["inventory"]["cpu"]["count"], json!(live.cpu.count));
    assert_eq!(stored["inventory"]["boot"]["pxe_interface"], json!(MAC));
    assert_eq!(stored["plugin_data"]["root_disk"]["name"], json!(root.name));
    assert!(!agent.is_finished(), "the agent went on to lookup");
    agent.abort();
}
