//! The debug-shell tools as a person types them, through the built binary:
//! `agent lookup` against the stand-in conductor (the node is printed, no
//! token is issued or changed), and `agent status` against an agent
//! started in this process (lookup state, node, heartbeat age, commands).

use std::process::Command;
use std::time::Duration;

use agent::testconductor::demo::host_config;
use agent::testconductor::{Settings, TestConductor};

fn agent_cli(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_agent"))
        .args(args)
        .output()
        .expect("running the agent binary");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Runs the binary off the async runtime's threads.
async fn agent_cli_async(args: Vec<String>) -> (bool, String, String) {
    tokio::task::spawn_blocking(move || {
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        agent_cli(&a)
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lookup_prints_the_node_and_never_takes_a_token() {
    let conductor = TestConductor::start(Settings::default()).await.unwrap();
    let mac = "52:54:00:aa:07:01";
    let uuid = conductor.enroll(&[mac]);
    let no_cmdline = tempfile::NamedTempFile::new().unwrap();
    let args = |url: &str| -> Vec<String> {
        [
            "lookup",
            "--api-url",
            url,
            "--mac",
            mac,
            "--cmdline-file",
            no_cmdline.path().to_str().unwrap(),
        ]
        .map(String::from)
        .to_vec()
    };

    // Not in a state Ironic answers lookups in: a clear failure.
    let (ok, _, err) = agent_cli_async(args(conductor.url())).await;
    assert!(!ok);
    assert!(err.contains("looking up MACs"), "{err}");
    // No conductor at all.
    let (ok, _, err) = agent_cli_async(
        [
            "lookup",
            "--cmdline-file",
            no_cmdline.path().to_str().unwrap(),
        ]
        .map(String::from)
        .to_vec(),
    )
    .await;
    assert!(!ok);
    assert!(err.contains("no conductor configured"), "{err}");

    conductor.start_inspect(&uuid).unwrap();
    let (ok, out, err) = agent_cli_async(args(conductor.url())).await;
    assert!(ok, "{err}");
    assert!(out.starts_with(&format!("node {uuid}\n")), "{out}");
    assert!(
        out.contains(&format!("conductor: {}", conductor.url())),
        "{out}"
    );
    let node = conductor.node(&uuid).unwrap();
    assert_eq!(node.tokens_issued, 0, "the lookup took no token");
    assert!(node.token.is_none());

    // With an agent running (it holds the token), a lookup changes nothing.
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("disk.img");
    std::fs::File::create(&img)
        .unwrap()
        .set_len(1 << 20)
        .unwrap();
    let running = agent::agent::start(host_config(conductor.url(), mac, &img))
        .await
        .unwrap();
    let token = running.state.token().expect("the agent has its token");
    let (ok, out, err) = agent_cli_async(args(conductor.url())).await;
    assert!(ok, "{err}");
    assert!(out.contains(&uuid));
    let node = conductor.node(&uuid).unwrap();
    assert_eq!(node.tokens_issued, 1);
    assert_eq!(node.token.as_deref(), Some(token.as_str()));
    assert!(!out.contains(&token) && !err.contains(&token));
    running.task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_shows_lookup_heartbeats_and_commands() {
    let conductor = TestConductor::start(Settings::default()).await.unwrap();
    let mac = "52:54:00:aa:07:02";
    let uuid = conductor.enroll(&[mac]);
    conductor.start_inspect(&uuid).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("disk.img");
    std::fs::File::create(&img)
        .unwrap()
        .set_len(1 << 20)
        .unwrap();
    let running = agent::agent::start(host_config(conductor.url(), mac, &img))
        .await
        .unwrap();
    // Wait for the first heartbeat.
    for _ in 0..100 {
        if running.state.session().heartbeats_accepted > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(running.state.session().heartbeats_accepted > 0);
    // A command for the list.
    let http = agent_base::tls::http_client(true, None, Duration::from_secs(10)).unwrap();
    let token = running.state.token().unwrap();
    let r = http
        .post(format!(
            "{}/v1/commands/?wait=true&agent_token={token}",
            running.callback_url
        ))
        .json(&serde_json::json!({"name": "standby.sync", "params": {}}))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success());

    let (ok, out, err) = agent_cli_async(
        ["status", "--url", &running.callback_url]
            .map(String::from)
            .to_vec(),
    )
    .await;
    assert!(ok, "{err}");
    assert!(out.contains(&format!("node: {uuid}")), "{out}");
    assert!(out.contains("lookup: found; token received"), "{out}");
    assert!(
        out.contains(&format!("conductor: {}", conductor.url())),
        "{out}"
    );
    assert!(
        out.contains(&format!("callback: {}", running.callback_url)),
        "{out}"
    );
    assert!(out.contains("s ago, accepted"), "{out}");
    assert!(out.contains("SUCCEEDED  sync"), "{out}");
    assert!(!out.contains(&token));

    // Nothing listening: a clear error.
    let (ok, _, err) = agent_cli_async(
        ["status", "--url", "http://127.0.0.1:9"]
            .map(String::from)
            .to_vec(),
    )
    .await;
    assert!(!ok);
    assert!(err.contains("is the agent running?"), "{err}");
    running.task.abort();
}
