//! In-band inspection against the stand-in conductor: the agent (host mode)
//! posts this machine's inventory to `/v1/continue_inspection` at API 1.84,
//! adopts the token of the answer, and the node gets `cpus`, `memory_mb`,
//! `local_gb` and `cpu_arch`; plus the retry and refusal rules.

use std::time::Duration;

use agent::inspect::{self, InspectError, RetryPolicy};
use agent::testconductor::demo::host_config;
use agent::testconductor::{Settings, TestConductor};
use agent_base::config::Config;
use agent_devices::inventory;
use serde_json::json;

const MAC: &str = "52:54:00:1a:5b:01";

fn quick() -> RetryPolicy {
    RetryPolicy {
        retries: 2,
        first_delay: Duration::from_millis(20),
        max_delay: Duration::from_millis(40),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_inspects_then_looks_up_and_the_node_gets_its_properties() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("disk.img");
    std::fs::write(&img, [0u8; 4096]).unwrap();
    let conductor = TestConductor::start(Settings::default()).await.unwrap();
    let uuid = conductor.enroll(&[MAC]);
    conductor.start_inspect(&uuid).unwrap();
    conductor
        .wait_for_state(&uuid, "inspect wait", Duration::from_secs(5))
        .await
        .unwrap();

    let config = Config {
        inspection_callback_url: Some(format!("{}/v1/continue_inspection", conductor.url())),
        ..host_config(conductor.url(), MAC, &img)
    };
    let agent = agent::agent::start_detached(config);
    let node = conductor
        .wait_for_state(&uuid, "manageable", Duration::from_secs(30))
        .await
        .unwrap();

    // What the node learned is what this machine is.
    let live = inventory::collect(&inventory::Options::live(None)).unwrap();
    let root = agent_devices::hints::choose(&live.disks, None)
        .unwrap()
        .disk;
    assert_eq!(node.properties["cpus"], json!(live.cpu.count));
    assert_eq!(node.properties["cpu_arch"], json!(std::env::consts::ARCH));
    assert_eq!(
        node.properties["memory_mb"],
        json!(live.memory.physical_mb.unwrap())
    );
    assert_eq!(
        node.properties["local_gb"],
        json!(root.size / (1 << 30) - 1)
    );
    assert_eq!(node.tokens_issued, 1, "the 1.84 answer carried a token");

    let doc = node.inspection_data.unwrap();
    assert_eq!(doc["error"], json!(null));
    assert_eq!(
        doc["boot_interface"],
        json!(MAC),
        "host mode: --mac is the PXE NIC"
    );
    assert_eq!(doc["inventory"]["boot"]["pxe_interface"], json!(MAC));
    assert_eq!(doc["root_disk"]["name"], json!(root.name));
    assert_eq!(
        doc["configuration"],
        json!({"collectors": ["default", "logs"],
               "managers": [{"name": "generic_hardware_manager", "version": "1.2"}]})
    );
    let macs: Vec<&str> = doc["inventory"]["interfaces"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|i| i["mac_address"].as_str())
        .collect();
    assert!(macs.contains(&MAC), "{macs:?}");

    let t = conductor.transcript();
    let posted = t
        .iter()
        .position(|l| l == "A->C POST /v1/continue_inspection [API 1.84] -> 202")
        .unwrap_or_else(|| panic!("{t:#?}"));
    let looked_up = t
        .iter()
        .position(|l| l.starts_with("A->C GET /v1/lookup"))
        .unwrap_or_else(|| panic!("{t:#?}"));
    assert!(posted < looked_up, "inspection comes before lookup: {t:#?}");
    assert!(!agent.is_finished());
    agent.abort();
}

#[tokio::test]
async fn refusals_are_not_retried_and_unreachable_urls_are() {
    let conductor = TestConductor::start(Settings::default()).await.unwrap();
    let uuid = conductor.enroll(&[MAC]);
    let http = agent_base::tls::http_client(false, None, Duration::from_secs(5)).unwrap();
    let url = format!("{}/v1/continue_inspection", conductor.url());
    let doc = json!({"inventory": {"interfaces": [{"mac_address": MAC}]}, "error": null});

    // The node is not waiting for inspection: 404, given up at once.
    let e = inspect::post(&http, &url, &doc, None, &quick())
        .await
        .unwrap_err();
    assert!(
        matches!(e, InspectError::Refused { status: 404, .. }),
        "{e}"
    );
    // A malformed document: 400.
    let e = inspect::post(
        &http,
        &url,
        &json!({"inventory": {"interfaces": []}}),
        None,
        &quick(),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(e, InspectError::Refused { status: 400, .. }),
        "{e}"
    );

    // Nothing listens on port 1: retried, then failed.
    let dead = "http://127.0.0.1:1/v1/continue_inspection";
    let e = inspect::post(&http, dead, &doc, None, &quick())
        .await
        .unwrap_err();
    assert!(matches!(e, InspectError::Failed { attempts: 3, .. }), "{e}");

    // A comma list falls through to the URL that answers.
    conductor.start_inspect(&uuid).unwrap();
    conductor
        .wait_for_state(&uuid, "inspect wait", Duration::from_secs(5))
        .await
        .unwrap();
    let o = inspect::post(
        &http,
        &format!("{dead},{url}"),
        &doc,
        Some("req-1"),
        &quick(),
    )
    .await
    .unwrap();
    assert_eq!(o.node_uuid.as_deref(), Some(uuid.as_str()));
    let token = o.lookup.unwrap().config.agent_token.unwrap();
    assert_eq!(token.len(), 43);
}

#[tokio::test]
async fn the_document_has_the_shape_of_spec_4_3() {
    let config = Config {
        inspection_collectors: vec!["default".into(), "pci-devices".into(), "logs".into()],
        ..Config::default()
    };
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/dev-vm");
    let doc = inspect::collect(&config, &inventory::Options::fixture(&root)).await;
    let mut keys: Vec<&str> = doc
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort();
    assert_eq!(
        keys,
        [
            "boot_interface",
            "configuration",
            "error",
            "inventory",
            "logs",
            "pci_devices",
            "root_disk"
        ]
    );
    assert_eq!(doc["root_disk"]["name"], json!("/dev/vda"));
    assert_eq!(doc["root_disk"]["size"], json!(274_877_906_944u64));
    assert_eq!(doc["boot_interface"], json!(null));
    assert_eq!(doc["error"], json!(null));
}

#[tokio::test]
async fn the_ramdisks_boot_phases_go_beside_the_inventory() {
    // The dev-vm tree plus the phases PID 1 and the agent recorded.
    let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/dev-vm");
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    let out = std::process::Command::new("cp")
        .arg("-a")
        .arg(&fixture)
        .arg(&root)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let config = Config::default();
    let plain = inspect::collect(&config, &inventory::Options::fixture(&root)).await;
    assert!(
        plain.get("boot_phases").is_none(),
        "no phases recorded (host mode): no key"
    );
    let file = root.join(agent_base::bootphases::RAMDISK_PATH.trim_start_matches('/'));
    for (phase, secs) in [("init", 2.91), ("modules", 6.31), ("network", 6.44)] {
        agent_base::bootphases::record_in(&file, phase, secs).unwrap();
    }
    let doc = inspect::collect(&config, &inventory::Options::fixture(&root)).await;
    assert_eq!(
        doc["boot_phases"],
        json!([{"phase": "init", "seconds": 2.91}, {"phase": "modules", "seconds": 6.31},
               {"phase": "network", "seconds": 6.44}])
    );
    // Ironic 39 validates only `inventory` (interfaces with MACs) and keeps
    // the other top-level keys as plugin data.
    assert!(doc["inventory"]["interfaces"][0]["mac_address"].is_string());
}

#[tokio::test]
async fn executable_managers_add_their_inspection_data_under_their_names() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let hook = dir.path().join("inv.sh");
    std::fs::write(
        &hook,
        "#!/bin/sh\ncat >/dev/null\necho collecting >&2\necho '{\"controller\": \"acme 9000\", \"cache_mib\": 4096}'\n",
    )
    .unwrap();
    std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(
        dir.path().join("acme.yaml"),
        "name: acme\nversion: '3.1'\ninspect: {executable: inv.sh}\n",
    )
    .unwrap();
    // A manager named like a key of the agent's own does not replace it.
    std::fs::write(
        dir.path().join("inventory.yaml"),
        "name: inventory\nversion: '1'\ninspect: {executable: inv.sh}\n",
    )
    .unwrap();
    let config = Config {
        inspection_collectors: vec!["default".into()],
        exec_managers_dir: Some(dir.path().to_path_buf()),
        ..Config::default()
    };
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/dev-vm");
    let doc = inspect::collect(&config, &inventory::Options::fixture(&root)).await;
    assert_eq!(
        doc["acme"],
        json!({"controller": "acme 9000", "cache_mib": 4096})
    );
    assert!(
        doc["inventory"]["interfaces"].is_array(),
        "{}",
        doc["inventory"]
    );
    // IPA's order (get_managers_detail): highest support first.
    assert_eq!(
        doc["configuration"]["managers"],
        json!([{"name": "acme", "version": "3.1"},
               {"name": "inventory", "version": "1"},
               {"name": "generic_hardware_manager", "version": "1.2"}])
    );
}
