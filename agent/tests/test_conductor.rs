//! The agent in host mode, over real sockets and TLS, driven by the stand-in
//! conductor that behaves like Ironic 39.

use std::time::Duration;

use agent::testconductor::demo::host_config;
use agent::testconductor::{Settings, TestConductor};
use agent_base::config::Config;
use agent_devices::disk::erase::probe_signatures;
use agent_testkit::write_demo_image;
use serde_json::json;

fn config(conductor: &TestConductor, mac: &str, device: &std::path::Path) -> Config {
    Config {
        lookup_max_interval: Duration::from_secs(1),
        min_heartbeat_interval: Duration::from_millis(200),
        ..host_config(conductor.url(), mac, device)
    }
}

fn signatures(p: &std::path::Path) -> Vec<String> {
    probe_signatures(&std::fs::File::open(p).unwrap()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn manual_clean_twice_then_automated_clean_over_tls() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("disk.img");
    write_demo_image(&img).unwrap();
    let conductor = TestConductor::start(Settings::default()).await.unwrap();
    let mac = "52:54:00:aa:00:01";
    let uuid = conductor.enroll(&[mac]);

    // The agent starts before the node waits: lookups get 404 meanwhile.
    let agent = agent::agent::start_detached(config(&conductor, mac, &img));
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let step = json!({"interface": "deploy", "step": "erase_devices_metadata"});
    conductor
        .start_clean(&uuid, Some(vec![step.clone()]))
        .unwrap();
    let node = conductor
        .wait_for_state(&uuid, "manageable", Duration::from_secs(60))
        .await
        .unwrap();
    assert!(signatures(&img).is_empty(), "first clean wiped the disk");
    assert!(
        node.token.is_none(),
        "the conductor wiped the token at power off"
    );
    let t = conductor.transcript();
    assert!(
        t.iter()
            .any(|l| l.contains("GET /v1/lookup") && l.ends_with("-> 404")),
        "{t:#?}"
    );
    assert!(
        t.iter()
            .any(|l| l.contains("callback_url=https://127.0.0.1:")),
        "{t:#?}"
    );

    // Second manual clean: the old token is refused, the agent looks up again
    // and the conductor sees a fresh command list.
    write_demo_image(&img).unwrap();
    conductor.start_clean(&uuid, Some(vec![step])).unwrap();
    let node = conductor
        .wait_for_state(&uuid, "manageable", Duration::from_secs(60))
        .await
        .unwrap();
    assert!(signatures(&img).is_empty(), "second clean wiped the disk");
    assert_eq!(node.tokens_issued, 2);
    let t = conductor.transcript();
    assert!(
        t.iter()
            .any(|l| l.contains("/v1/heartbeat/") && l.ends_with("-> 400")),
        "{t:#?}"
    );
    let lists: Vec<&String> = t
        .iter()
        .filter(|l| l.contains("GET /v1/commands/"))
        .collect();
    assert!(
        lists
            .last()
            .unwrap()
            .contains("[get_clean_steps:SUCCEEDED, execute_clean_step:SUCCEEDED]"),
        "fresh list after re-lookup: {lists:#?}"
    );

    // Automated cleaning runs the steps with priority > 0, highest first:
    // erase_devices_metadata (99), then erase_devices (10).
    write_demo_image(&img).unwrap();
    conductor.start_clean(&uuid, None).unwrap();
    conductor
        .wait_for_state(&uuid, "available", Duration::from_secs(60))
        .await
        .unwrap();
    assert!(signatures(&img).is_empty());
    agent.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_http_agent_is_refused_when_tls_is_required() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("disk.img");
    write_demo_image(&img).unwrap();
    let conductor = TestConductor::start(Settings::default()).await.unwrap();
    let mac = "52:54:00:aa:00:02";
    let uuid = conductor.enroll(&[mac]);
    conductor
        .start_clean(
            &uuid,
            Some(vec![
                json!({"interface": "deploy", "step": "erase_devices_metadata"}),
            ]),
        )
        .unwrap();
    let mut cfg = config(&conductor, mac, &img);
    cfg.auto_tls = false;
    let agent = agent::agent::start_detached(cfg);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let t = conductor.transcript();
        if t.iter()
            .any(|l| l.contains("callback_url=http://") && l.ends_with("-> 400"))
        {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no refused heartbeat: {t:#?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let node = conductor.node(&uuid).unwrap();
    assert_eq!(
        node.provision_state, "clean wait",
        "nothing happened to the node"
    );
    assert!(!signatures(&img).is_empty(), "the disk was not touched");
    agent.abort();
}

#[tokio::test]
async fn several_api_urls_are_tried_in_order_and_the_answering_one_is_kept() {
    let conductor = TestConductor::start(Settings::default()).await.unwrap();
    // A port nobody listens on: bind, read the port, close.
    let dead = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let http = agent_base::tls::http_client(false, None, Duration::from_secs(5)).unwrap();
    let client = agent_conductor::conductor::ConductorClient::new(
        http,
        vec![format!("http://{dead}"), conductor.url().to_string()],
        Some("req-1234".into()),
    );
    let v = client.max_version().await.unwrap();
    assert_eq!(v, agent_conductor::conductor::ApiVersion(1, 115));
    assert_eq!(client.current_url(), conductor.url());
    // Lookup for a node that is not waiting: a typed 404.
    conductor.enroll(&["52:54:00:aa:00:03"]);
    let err = client
        .lookup(
            agent_conductor::conductor::ApiVersion(1, 68),
            &["52:54:00:aa:00:03".into()],
            None,
        )
        .await
        .unwrap_err();
    assert_eq!(err.status(), Some(404), "{err}");
    assert!(
        err.to_string().contains("Resource could not be found"),
        "{err}"
    );
}

/// An executable manager's step under the stand-in conductor: it sends
/// back the manager versions `get_clean_steps` reported (the executable
/// manager's among them, else the agent refuses the step as a version
/// mismatch) and logs the step's result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_executable_manager_step_runs_with_the_reported_versions() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("disk.img");
    write_demo_image(&img).unwrap();
    let managers = dir.path().join("managers");
    std::fs::create_dir(&managers).unwrap();
    let script = managers.join("hello.sh");
    std::fs::write(
        &script,
        "#!/bin/sh\ncat >/dev/null\necho '{\"hello\": 1}'\n",
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(
        managers.join("kit.yaml"),
        "name: kit\nversion: '7'\nsteps:\n  - {name: hello, executable: hello.sh, interface: deploy, clean_priority: 0}\n",
    )
    .unwrap();
    let conductor = TestConductor::start(Settings::default()).await.unwrap();
    let mac = "52:54:00:aa:00:07";
    let uuid = conductor.enroll(&[mac]);
    let mut config = config(&conductor, mac, &img);
    config.exec_managers_dir = Some(managers);
    let agent = agent::agent::start_detached(config);
    conductor
        .start_clean(
            &uuid,
            Some(vec![json!({"interface": "deploy", "step": "hello"})]),
        )
        .unwrap();
    let done = conductor
        .wait_for_state(&uuid, "manageable", Duration::from_secs(60))
        .await;
    let t = conductor.transcript();
    done.unwrap_or_else(|e| panic!("{e:#}\n{t:#?}"));
    assert!(
        t.iter()
            .any(|l| l == "C: clean step deploy.hello done, result {\"hello\":1}"),
        "{t:#?}"
    );
    let node = conductor.node(&uuid).unwrap();
    assert_eq!(
        node.driver_internal_info["hardware_manager_version"]["kit"],
        "7"
    );
    agent.abort();
}
