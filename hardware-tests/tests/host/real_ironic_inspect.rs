//! Real Ironic 39.0.0 with the `agent` inspect interface accepts the
//! inspection document of a host-mode agent (this machine's inventory) and
//! sets `cpus`, `memory_mb`, `local_gb` and `cpu_arch` on the node — with
//! the agent told where to post by `ipa-inspection-callback-url`, and, as
//! IPA 13 also inspects, by `ipa-inspection-collectors` with `ipa-api-url`
//! alone (the data goes to the API's `/v1/continue_inspection`).

use std::time::{Duration, Instant};

use agent::testconductor::demo::host_config;
use agent_base::config::Config;
use agent_devices::inventory;
use hardware_tests::ironic::Ironic;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_ironic_inspection_sets_the_node_properties() {
    inspect_with("52:54:00:1e:5c:01", |ironic_url| Config {
        inspection_callback_url: Some(format!("{ironic_url}/v1/continue_inspection")),
        ..Config::default()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn collectors_with_the_api_url_inspect_too() {
    inspect_with("52:54:00:1e:5c:02", |_| Config {
        inspection_collectors: vec!["default".into()],
        inspection_collectors_given: true,
        ..Config::default()
    })
    .await;
}

/// Inspects a node with the agent configured by `how` (its inspection
/// settings; the rest is the host-mode configuration).
async fn inspect_with(mac: &str, how: impl Fn(&str) -> Config) {
    hardware_tests::require_root("the real-Ironic inspection test");
    let dir = tempfile::tempdir().unwrap();
    let scratch = dir.path().join("disk.img");
    std::fs::write(&scratch, [0u8; 4096]).unwrap();

    let ironic = Ironic::start().expect("starting Ironic 39.0.0");
    let uuid = ironic
        .enroll_ready(&format!("agent-inspect-{}", &mac[15..]), mac, false)
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
    let wanted = how(&ironic.url);
    let config = Config {
        inspection_callback_url: wanted.inspection_callback_url,
        inspection_collectors: wanted.inspection_collectors,
        inspection_collectors_given: wanted.inspection_collectors_given,
        ..host_config(&ironic.url, mac, &scratch)
    };
    let agent = agent::agent::start_detached(config);
    let node = ironic
        .wait_for(&uuid, "manageable", Duration::from_secs(120))
        .await
        .unwrap();
    println!("inspected in {:.1} s", t.elapsed().as_secs_f64());
    assert!(node["last_error"].is_null(), "{}", node["last_error"]);

    let live = inventory::collect(&inventory::Options::live(None)).unwrap();
    let root = agent_devices::hints::choose(&live.disks, None)
        .unwrap()
        .disk;
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
    assert_eq!(stored["inventory"]["boot"]["pxe_interface"], json!(mac));
    assert_eq!(stored["plugin_data"]["root_disk"]["name"], json!(root.name));
    assert!(!agent.is_finished(), "the agent went on to lookup");
    agent.abort();
}
