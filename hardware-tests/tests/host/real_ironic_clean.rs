//! Real Ironic 39.0.0 (unmodified, `require_tls = true`) drives the agent in
//! host mode through two manual cleans with `erase_devices_metadata` on a loop
//! device this test creates. Each clean must take the node from `manageable`
//! through `clean wait` back to `manageable` and leave the device without a
//! partition table or signature.
//!
//! Also: every key of the `config` object real Ironic 39 sends in its lookup
//! answer is one the agent classifies (honoured or ignored on purpose,
//! `agent_conductor::conductor::lookup_keys`).

use std::time::{Duration, Instant};

use agent::testconductor::demo::host_config;
use hardware_tests::ironic::{reached, Ironic, POLL_ANY};
use hardware_tests::loopdev::LoopDevice;
use serde_json::json;

const MAC: &str = "52:54:00:c1:ea:01";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_ironic_manual_clean_twice_over_tls() {
    hardware_tests::require_root("the real-Ironic clean test");
    let disk = LoopDevice::new(64 << 20).expect("creating a loop device");
    disk.partition_and_format()
        .expect("partitioning the loop device");
    let before = disk.signatures().unwrap();
    assert!(before.iter().any(|s| s == "gpt"), "{before:?}");
    assert!(!disk.kernel_partitions().is_empty());

    let ironic = Ironic::start().expect("starting Ironic 39.0.0");
    let uuid = ironic
        .enroll_ready("agent-clean", MAC, false)
        .await
        .unwrap();

    let config = host_config(&ironic.url, MAC, &disk.path);
    let agent = agent::agent::start_detached(config);

    for round in 1..=2 {
        if round == 2 {
            disk.partition_and_format().expect("re-partitioning");
            assert!(!disk.signatures().unwrap().is_empty());
        }
        let t = Instant::now();
        ironic
            .provision(
                &uuid,
                json!({"target": "clean",
                       "clean_steps": [{"interface": "deploy", "step": "erase_devices_metadata"}]}),
            )
            .await
            .unwrap();
        let node = ironic
            .wait_for(&uuid, "manageable", Duration::from_secs(180))
            .await
            .unwrap_or_else(|e| panic!("clean #{round}: {e:#}"));
        println!(
            "clean #{round}: manageable again after {:.1} s",
            t.elapsed().as_secs_f64()
        );
        assert!(node["last_error"].is_null(), "{}", node["last_error"]);
        assert!(!agent.is_finished(), "the agent stopped");
        let left = disk.signatures().unwrap();
        assert!(left.is_empty(), "clean #{round} left signatures {left:?}");
        assert!(
            disk.kernel_partitions().is_empty(),
            "clean #{round} left partitions {:?}",
            disk.kernel_partitions()
        );
    }
    agent.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_lookup_config_key_of_ironic_39_is_classified() {
    hardware_tests::require_root("the real-Ironic lookup test");
    let ironic = Ironic::start().expect("starting Ironic 39.0.0");
    let mac = "52:54:00:c1:ea:02";
    let uuid = ironic
        .enroll_ready("lookup-keys", mac, false)
        .await
        .unwrap();
    // A manual clean with no agent running: Ironic waits in `clean wait`,
    // where it answers lookups.
    ironic
        .provision(
            &uuid,
            json!({"target": "clean",
                   "clean_steps": [{"interface": "deploy", "step": "erase_devices_metadata"}]}),
        )
        .await
        .unwrap();
    ironic
        .poll_node(
            &uuid,
            POLL_ANY,
            Duration::from_secs(60),
            &mut (),
            reached("clean wait"),
        )
        .await
        .unwrap();
    let answer = ironic.lookup(mac).await.unwrap();
    let config = &answer["config"];
    assert!(config.is_object(), "{answer}");
    assert_eq!(
        agent_conductor::conductor::lookup_keys::unclassified(config),
        Vec::<String>::new(),
        "keys in Ironic 39's lookup config the agent does not classify: {config}"
    );
    // Every classified key is there: the table is not stale either.
    for (key, _) in agent_conductor::conductor::lookup_keys::KEYS {
        assert!(
            config.get(key).is_some(),
            "Ironic 39 no longer sends {key}: {config}"
        );
    }
    let parsed = agent_conductor::conductor::lookup::parse_lookup(&answer)
        .unwrap()
        .config;
    assert!(parsed.deep_image_inspection);
    assert!(!parsed.bios_bootloader_install);
    assert_eq!(
        parsed.permitted_image_formats,
        ["raw", "gpt", "qcow2", "iso"]
    );
}
