//! Router tests without sockets: every request goes through `oneshot`.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use serde_json::{json, Value};
use tower::ServiceExt;

use super::router;
use agent_base::config::Config;
use agent_core::command::history::{Mode, Ready};
use agent_core::commands::Outcome;
use agent_core::state::AgentState;

const TOKEN: &str = "0123456789abcdef0123456789abcdef0123456789a";

fn state_with(config: Config) -> Arc<AgentState> {
    let s = Arc::new(AgentState::new(config, None));
    s.set_token(Some(TOKEN.into()));
    s
}

fn state() -> Arc<AgentState> {
    state_with(Config::default())
}

async fn call(
    state: &Arc<AgentState>,
    method: Method,
    uri: &str,
    body: Option<&str>,
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
    let resp = router(state.clone()).oneshot(req).await.unwrap();
    let status = resp.status();
    let bytes = axum::body::to_bytes(resp.into_body(), 1 << 20)
        .await
        .unwrap();
    let v = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes).unwrap()
    };
    (status, v)
}

fn cmd_uri(extra: &str) -> String {
    format!("/v1/commands/?agent_token={TOKEN}{extra}")
}

async fn post(state: &Arc<AgentState>, uri: &str, body: Value) -> (StatusCode, Value) {
    call(state, Method::POST, uri, Some(&body.to_string())).await
}

fn assert_fault(v: &Value, needle: &str) {
    let f = v["faultstring"]
        .as_str()
        .unwrap_or_else(|| panic!("no faultstring in {v}"));
    assert!(f.contains(needle), "{f:?} does not contain {needle:?}");
    assert!(v["faultcode"] == "Client" || v["faultcode"] == "Server");
}

#[tokio::test]
async fn public_routes_need_no_token() {
    let s = state();
    let (st, v) = call(&s, Method::GET, "/", None).await;
    assert_eq!(st, StatusCode::OK);
    assert_eq!(v["default_version"]["id"], "v1");
    for path in ["/v1", "/v1/"] {
        let (st, v) = call(&s, Method::GET, path, None).await;
        assert_eq!(st, StatusCode::OK);
        assert_eq!(v["id"], "v1");
    }
    let (st, v) = call(&s, Method::GET, "/v1/status", None).await;
    assert_eq!(st, StatusCode::OK);
    assert!(v["started_at"].as_f64().unwrap() > 1.7e9);
    assert_eq!(v["version"], super::AGENT_VERSION);
}

#[tokio::test]
async fn commands_need_the_token() {
    let s = state();
    for uri in [
        "/v1/commands/",
        "/v1/commands",
        "/v1/commands/?agent_token=wrong",
        "/commands/",
    ] {
        let (st, v) = call(&s, Method::GET, uri, None).await;
        assert_eq!(st, StatusCode::UNAUTHORIZED, "{uri}");
        assert_fault(&v, "Token invalid");
    }
    let (st, v) = post(
        &s,
        "/v1/commands/?agent_token=nope",
        json!({"name": "clean.get_clean_steps", "params": {}}),
    )
    .await;
    assert_eq!(st, StatusCode::UNAUTHORIZED);
    assert_fault(&v, "401 Unauthorized");
    let (st, v) = call(&s, Method::GET, &cmd_uri(""), None).await;
    assert_eq!(st, StatusCode::OK);
    assert_eq!(v, json!({"commands": []}));
    let (st, _) = call(
        &s,
        Method::GET,
        &format!("/v1/commands?agent_token={TOKEN}"),
        None,
    )
    .await;
    assert_eq!(st, StatusCode::OK);
}

#[tokio::test]
async fn no_token_known_yet_means_every_command_is_refused() {
    let s = Arc::new(AgentState::new(Config::default(), None));
    let (st, _) = call(&s, Method::GET, "/v1/commands/?agent_token=", None).await;
    assert_eq!(st, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn get_clean_steps_returns_five_keys_and_ipa_steps() {
    let s = state();
    let (st, v) = post(
        &s,
        &cmd_uri("&wait=true"),
        json!({"name": "clean.get_clean_steps", "params": {"node": {"uuid": "n1"}, "ports": []}}),
    )
    .await;
    assert_eq!(st, StatusCode::OK);
    let keys: Vec<&String> = v.as_object().unwrap().keys().collect();
    assert_eq!(keys.len(), 5, "{v}");
    assert_eq!(v["command_name"], "get_clean_steps");
    assert_eq!(v["command_status"], "SUCCEEDED");
    assert_eq!(v["command_error"], Value::Null);
    let steps = v["command_result"]["clean_steps"]["GenericHardwareManager"]
        .as_array()
        .unwrap();
    let meta = steps
        .iter()
        .find(|x| x["step"] == "erase_devices_metadata")
        .unwrap();
    assert_eq!(meta["priority"], 99);
    assert_eq!(meta["interface"], "deploy");
    assert_eq!(
        v["command_result"]["hardware_manager_version"],
        json!({"generic_hardware_manager": "1.2"})
    );
    assert_eq!(s.node().unwrap().uuid(), Some("n1"), "the node is cached");

    let (_, v) = post(
        &s,
        &cmd_uri("&wait=true"),
        json!({"name": "deploy.get_deploy_steps", "params": {}}),
    )
    .await;
    let steps = v["command_result"]["deploy_steps"]["GenericHardwareManager"]
        .as_array()
        .unwrap();
    assert!(
        steps.iter().all(|x| x["priority"] == 0),
        "deploy steps all have priority 0"
    );
    let coreos = steps
        .iter()
        .find(|x| x["step"] == "install_coreos")
        .expect("install_coreos is offered");
    assert_eq!(coreos["interface"], "deploy");
    assert_eq!(coreos["reboot_requested"], false);
    for arg in ["image_info", "ignition", "append_karg"] {
        assert_eq!(coreos["argsinfo"][arg]["required"], false, "{arg}");
    }
    // OpenShift's manager lists its second step beside it.
    let assisted = steps
        .iter()
        .find(|x| x["step"] == "start_assisted_install")
        .expect("start_assisted_install is offered");
    assert_eq!(assisted["interface"], "deploy");
    assert_eq!(assisted["priority"], 0);
    assert_eq!(assisted["reboot_requested"], false);
    assert!(
        assisted["argsinfo"]
            .as_object()
            .is_none_or(|m| m.is_empty()),
        "no arguments: {assisted}"
    );
}

#[tokio::test]
async fn malformed_requests_get_400_404_405_with_faultstring() {
    let s = state();
    let (st, v) = call(&s, Method::POST, &cmd_uri(""), Some("{not json")).await;
    assert_eq!(st, StatusCode::BAD_REQUEST);
    assert_fault(&v, "not valid JSON");
    let (st, v) = post(&s, &cmd_uri(""), json!({"params": {}})).await;
    assert_eq!(st, StatusCode::BAD_REQUEST);
    assert_fault(&v, "'name'");
    let (st, v) = post(&s, &cmd_uri(""), json!({"name": "clean.get_clean_steps"})).await;
    assert_eq!(st, StatusCode::BAD_REQUEST);
    assert_fault(&v, "'params' is required");
    let (st, v) = post(
        &s,
        &cmd_uri(""),
        json!({"name": "clean.get_clean_steps", "params": []}),
    )
    .await;
    assert_eq!(st, StatusCode::BAD_REQUEST);
    assert_fault(&v, "must be an object");
    let (st, v) = post(&s, &cmd_uri(""), json!({"name": "nodot", "params": {}})).await;
    assert_eq!(st, StatusCode::BAD_REQUEST);
    assert_fault(&v, "<extension>.<name>");
    let (st, v) = post(&s, &cmd_uri(""), json!({"name": "bogus.cmd", "params": {}})).await;
    assert_eq!(st, StatusCode::NOT_FOUND);
    assert_fault(&v, "Extension with id bogus not found");
    let (st, v) = post(
        &s,
        &cmd_uri(""),
        json!({"name": "clean.bogus", "params": {}}),
    )
    .await;
    assert_eq!(st, StatusCode::BAD_REQUEST);
    assert_fault(&v, "Unknown command: clean.bogus");
    let (st, v) = post(
        &s,
        &cmd_uri(""),
        json!({"name": "clean.execute_clean_step", "params": {"node": {}}}),
    )
    .await;
    assert_eq!(st, StatusCode::BAD_REQUEST);
    assert_fault(&v, "Invalid command parameters");
    let (st, v) = post(
        &s,
        &cmd_uri(""),
        json!({"name": "deploy.execute_deploy_step", "params": {"step": {"step": ""}}}),
    )
    .await;
    assert_eq!(st, StatusCode::BAD_REQUEST);
    assert_fault(&v, "step.step: the step name is empty");
    let (st, v) = call(&s, Method::DELETE, &cmd_uri(""), None).await;
    assert_eq!(st, StatusCode::METHOD_NOT_ALLOWED);
    assert_fault(&v, "405");
    let (st, v) = call(&s, Method::GET, "/v2/nothing", None).await;
    assert_eq!(st, StatusCode::NOT_FOUND);
    assert_fault(&v, "/v2/nothing");
    let (st, v) = call(
        &s,
        Method::GET,
        &format!("/v1/commands/nope?agent_token={TOKEN}"),
        None,
    )
    .await;
    assert_eq!(st, StatusCode::NOT_FOUND);
    assert_fault(&v, "command nope not found");
    assert_eq!(
        s.commands.all().len(),
        0,
        "refused requests are not recorded"
    );
}

#[tokio::test]
async fn oversized_bodies_are_refused_with_413() {
    let s = state_with(Config {
        max_request_bytes: 1024,
        ..Config::default()
    });
    let big =
        json!({"name": "clean.get_clean_steps", "params": {"x": "a".repeat(4096)}}).to_string();
    let (st, v) = call(&s, Method::POST, &cmd_uri(""), Some(&big)).await;
    assert_eq!(st, StatusCode::PAYLOAD_TOO_LARGE);
    assert_fault(&v, "larger than 1024 bytes");
    // Declared length over the limit: refused before reading.
    let req = Request::builder()
        .method(Method::POST)
        .uri(cmd_uri(""))
        .header("content-length", "999999999")
        .body(Body::from("{}"))
        .unwrap();
    let resp = router(s.clone()).oneshot(req).await.unwrap();
    assert_eq!(resp.status(), StatusCode::PAYLOAD_TOO_LARGE);
    // Streamed body without a length that crosses the limit.
    let req = Request::builder()
        .method(Method::POST)
        .uri(cmd_uri(""))
        .body(Body::new(Chunks { left: 8, size: 512 }))
        .unwrap();
    let resp = router(s.clone()).oneshot(req).await.unwrap();
    assert_eq!(resp.status(), StatusCode::PAYLOAD_TOO_LARGE);
}

/// A body of `left` chunks of `size` spaces, with no declared length.
struct Chunks {
    left: usize,
    size: usize,
}

impl http_body::Body for Chunks {
    type Data = axum::body::Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        if self.left == 0 {
            return std::task::Poll::Ready(None);
        }
        self.left -= 1;
        let chunk = axum::body::Bytes::from(vec![b' '; self.size]);
        std::task::Poll::Ready(Some(Ok(http_body::Frame::data(chunk))))
    }
}

static RELEASE: tokio::sync::Notify = tokio::sync::Notify::const_new();

/// An async command that runs until [`RELEASE`] is notified.
fn slow() -> Ready {
    Ready {
        full_name: "test.slow".into(),
        method: "slow",
        mode: Mode::Async,
        work: Box::pin(async {
            RELEASE.notified().await;
            Outcome::Done(json!({"done": true}))
        }),
    }
}

#[tokio::test]
async fn busy_while_an_async_command_runs_then_free() {
    let s = state();
    let running = s
        .commands
        .execute(slow(), false, Box::new(|| {}))
        .await
        .unwrap();
    assert_eq!(
        running.command_status,
        agent_core::commands::CommandStatus::Running
    );
    let (st, v) = post(
        &s,
        &cmd_uri("&wait=true"),
        json!({"name": "clean.get_clean_steps", "params": {}}),
    )
    .await;
    assert_eq!(st, StatusCode::CONFLICT);
    assert_fault(&v, "Agent is busy: executing command slow");
    assert!(v["faultstring"]
        .as_str()
        .unwrap()
        .to_lowercase()
        .contains("agent is busy"));
    let (_, list) = call(&s, Method::GET, &cmd_uri(""), None).await;
    assert_eq!(list["commands"][0]["command_status"], "RUNNING");
    assert_eq!(list["commands"][0]["command_result"], Value::Null);

    // GET with wait=true blocks until the command ends.
    let id = running.id.clone();
    let s2 = s.clone();
    let waiter = tokio::spawn(async move {
        call(
            &s2,
            Method::GET,
            &format!("/v1/commands/{id}?wait=true&agent_token={TOKEN}"),
            None,
        )
        .await
    });
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    assert!(!waiter.is_finished());
    RELEASE.notify_one();
    let (st, v) = waiter.await.unwrap();
    assert_eq!(st, StatusCode::OK);
    assert_eq!(v["command_status"], "SUCCEEDED");
    assert_eq!(v["command_result"], json!({"done": true}));
    let (st, _) = post(
        &s,
        &cmd_uri("&wait=true"),
        json!({"name": "clean.get_clean_steps", "params": {}}),
    )
    .await;
    assert_eq!(
        st,
        StatusCode::OK,
        "free again once the async command ended"
    );
    let (_, list) = call(&s, Method::GET, &cmd_uri(""), None).await;
    let names: Vec<&str> = list["commands"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["command_name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["slow", "get_clean_steps"], "history is ordered");
}

#[tokio::test]
async fn execute_clean_step_echoes_the_step_and_checks_versions() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("d.img");
    agent_testkit::write_demo_image(&img).unwrap();
    let s = state_with(Config {
        allowed_devices: vec![img.clone()],
        ..Config::default()
    });
    let step = json!({"interface": "deploy", "step": "erase_devices_metadata", "priority": 10, "abortable": true});
    let (st, v) = post(&s, &cmd_uri("&wait=true"), json!({"name": "clean.execute_clean_step",
        "params": {"step": step, "node": {"uuid": "n"}, "ports": [], "clean_version": {"generic_hardware_manager": "1.2"}}})).await;
    assert_eq!(st, StatusCode::OK);
    assert_eq!(v["command_status"], "SUCCEEDED", "{v}");
    assert_eq!(v["command_result"]["clean_step"], step);
    assert_eq!(v["command_result"]["clean_result"], Value::Null);
    let f = std::fs::File::open(&img).unwrap();
    assert!(agent_devices::disk::erase::probe_signatures(&f)
        .unwrap()
        .is_empty());

    let (_, v) = post(&s, &cmd_uri("&wait=true"), json!({"name": "clean.execute_clean_step",
        "params": {"step": step, "node": {}, "ports": [], "clean_version": {"generic_hardware_manager": "1.1"}}})).await;
    assert_eq!(v["command_status"], "CLEAN_VERSION_MISMATCH");
    assert_eq!(v["command_error"]["type"], "VersionMismatch");

    let (_, v) = post(&s, &cmd_uri("&wait=true"), json!({"name": "deploy.execute_deploy_step",
        "params": {"step": {"interface": "deploy", "step": "no_such_step"}, "node": {}, "ports": []}})).await;
    assert_eq!(v["command_status"], "FAILED");
    assert_eq!(v["command_name"], "execute_deploy_step");
    assert_eq!(
        v["command_error"]["type"],
        "IncompatibleHardwareMethodError"
    );
    assert!(v["command_error"]["details"]
        .as_str()
        .unwrap()
        .contains("no_such_step"));
}

#[tokio::test]
async fn a_refused_device_fails_the_step_with_a_precise_error() {
    let dir = tempfile::tempdir().unwrap();
    let ok = dir.path().join("ok.img");
    agent_testkit::write_demo_image(&ok).unwrap();
    let s = state_with(Config {
        allowed_devices: vec![ok.clone(), std::path::PathBuf::from("/dev/null")],
        ..Config::default()
    });
    let (_, v) = post(&s, &cmd_uri("&wait=true"), json!({"name": "clean.execute_clean_step",
        "params": {"step": {"interface": "deploy", "step": "erase_devices_metadata"}, "node": {}, "ports": []}})).await;
    assert_eq!(v["command_status"], "FAILED", "{v}");
    assert_eq!(v["command_error"]["type"], "BlockDeviceEraseError");
    assert!(
        v["command_error"]["details"]
            .as_str()
            .unwrap()
            .contains("/dev/null"),
        "{v}"
    );
}

#[tokio::test]
async fn local_status_is_served_to_loopback_peers_with_the_key_only() {
    let s = state();
    let key = s.local_key().expect("a key").to_string();
    assert_eq!(key.len(), 64);
    // Through oneshot there is no connection, so no known peer: refused.
    let (st, _) = call(&s, Method::GET, "/v1/local/status", None).await;
    assert_eq!(st, StatusCode::NOT_FOUND);
    let peer = |ip: &str, key: Option<&str>| {
        let mut req = Request::builder().uri("/v1/local/status");
        if let Some(k) = key {
            req = req.header(super::local_key::HEADER, k);
        }
        let req = req.body(Body::empty()).unwrap();
        let addr: std::net::SocketAddr = format!("{ip}:4000").parse().unwrap();
        router(s.clone())
            .layer(axum::Extension(super::PeerAddr(addr)))
            .oneshot(req)
    };
    // Another host, even with the key: as if there were no such route.
    assert_eq!(
        peer("192.0.2.7", Some(&key)).await.unwrap().status(),
        StatusCode::NOT_FOUND
    );
    // Loopback without the key, or with another: 401 (a container step
    // with --network=host).
    assert_eq!(
        peer("127.0.0.1", None).await.unwrap().status(),
        StatusCode::UNAUTHORIZED
    );
    let wrong = "0".repeat(64);
    assert_eq!(
        peer("127.0.0.1", Some(&wrong)).await.unwrap().status(),
        StatusCode::UNAUTHORIZED
    );
    let resp = peer("[::ffff:127.0.0.1]", Some(&key)).await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let body = axum::body::to_bytes(resp.into_body(), 1 << 20)
        .await
        .unwrap();
    let v: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["lookup"], "not started");
    assert!(v["commands"].is_array());
    assert!(v.get("token").is_none() && v["has_token"] == true);
    assert!(!String::from_utf8_lossy(&body).contains(&key));
    // Another start has another key.
    assert_ne!(state().local_key(), s.local_key());
}

/// A body that sends `first` bytes, tells `sent`, then never ends.
struct Stalled {
    first: Option<usize>,
    sent: Arc<tokio::sync::Notify>,
}

impl http_body::Body for Stalled {
    type Data = axum::body::Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        match self.first.take() {
            Some(n) => {
                let chunk = axum::body::Bytes::from(vec![b' '; n]);
                std::task::Poll::Ready(Some(Ok(http_body::Frame::data(chunk))))
            }
            None => {
                self.sent.notify_one();
                std::task::Poll::Pending
            }
        }
    }
}

/// `clean.get_clean_steps` padded with spaces to `len` bytes.
fn padded_steps(len: usize) -> String {
    let doc =
        json!({"name": "clean.get_clean_steps", "params": {"node": {"uuid": "n1"}, "ports": []}})
            .to_string();
    format!("{doc}{}", " ".repeat(len - doc.len()))
}

async fn send(app: &axum::Router, body: String) -> (StatusCode, Value) {
    let req = Request::builder()
        .method(Method::POST)
        .uri(cmd_uri("&wait=true"))
        .body(Body::from(body))
        .unwrap();
    let resp = app.clone().oneshot(req).await.unwrap();
    let status = resp.status();
    let bytes = axum::body::to_bytes(resp.into_body(), 1 << 20)
        .await
        .unwrap();
    (status, serde_json::from_slice(&bytes).unwrap())
}

#[tokio::test]
async fn bodies_share_a_budget_beyond_their_small_part() {
    let s = state();
    let app = super::router_with(
        s.clone(),
        super::BodyLimits {
            per_request: 8192,
            small: 1024,
            budget: 4096,
        },
    );
    // Alone, a 5000-byte body fits (3976 bytes of the budget).
    let (st, _) = send(&app, padded_steps(5000)).await;
    assert_eq!(st, StatusCode::OK);
    // A request stalled after 3000 bytes holds 1976 of them...
    let sent = Arc::new(tokio::sync::Notify::new());
    let stalled = Request::builder()
        .method(Method::POST)
        .uri(cmd_uri(""))
        .body(Body::new(Stalled {
            first: Some(3000),
            sent: sent.clone(),
        }))
        .unwrap();
    let held = tokio::spawn(app.clone().oneshot(stalled));
    sent.notified().await;
    // ...so a concurrent 5000-byte body finds the budget spent: 413, and why.
    let (st, v) = send(&app, padded_steps(5000)).await;
    assert_eq!(st, StatusCode::PAYLOAD_TOO_LARGE);
    assert_fault(&v, "413 Request Entity Too Large");
    assert_fault(&v, "4096 bytes that request bodies may buffer together");
    // Small bodies never need the budget.
    let (st, _) = send(&app, padded_steps(1000)).await;
    assert_eq!(st, StatusCode::OK);
    // Once the stalled request is gone, its share is free again.
    held.abort();
    let _ = held.await;
    let (st, _) = send(&app, padded_steps(5000)).await;
    assert_eq!(st, StatusCode::OK);
}

#[tokio::test]
async fn bodies_are_bounded_below_the_configured_limit() {
    // Config allows 256 MiB; the router's bound is what a write_image needs.
    let s = state();
    assert!(s.config.max_request_bytes > super::MAX_BODY_BYTES);
    let req = Request::builder()
        .method(Method::POST)
        .uri(cmd_uri(""))
        .header("content-length", (super::MAX_BODY_BYTES + 1).to_string())
        .body(Body::from("{}"))
        .unwrap();
    let resp = router(s.clone()).oneshot(req).await.unwrap();
    assert_eq!(resp.status(), StatusCode::PAYLOAD_TOO_LARGE);
    let bytes = axum::body::to_bytes(resp.into_body(), 1 << 20)
        .await
        .unwrap();
    let v: Value = serde_json::from_slice(&bytes).unwrap();
    assert_fault(&v, &format!("larger than {} bytes", super::MAX_BODY_BYTES));
    // A streamed body one byte over the per-request bound is refused too.
    let app = super::router_with(
        s,
        super::BodyLimits {
            per_request: 2048,
            ..super::BodyLimits::default()
        },
    );
    let (st, v) = send(&app, padded_steps(2049)).await;
    assert_eq!(st, StatusCode::PAYLOAD_TOO_LARGE);
    assert_fault(&v, "larger than 2048 bytes");
    let (st, _) = send(&app, padded_steps(2048)).await;
    assert_eq!(st, StatusCode::OK);
}

#[tokio::test]
async fn an_undecodable_command_id_gets_a_json_404() {
    // Found by the api_router fuzz target: axum's own rejection of a path
    // parameter that is not UTF-8 was plain text, where every error reply
    // must be the JSON fault.
    let s = state();
    let (st, v) = call(
        &s,
        Method::GET,
        &format!("/v1/commands/%bc?agent_token={TOKEN}"),
        None,
    )
    .await;
    assert_eq!(st, StatusCode::NOT_FOUND);
    assert_fault(&v, "no command at this URL");
}

/// Each request is parsed once where it arrives: a wrong shape is HTTP 400
/// naming its JSON path; what only the agent's settings refuse, or a bad
/// step argument, is the command's failure, as with IPA.
#[tokio::test]
async fn requests_are_typed_where_they_arrive() {
    let s = state();
    let (st, v) = post(
        &s,
        &cmd_uri(""),
        json!({"name": "deploy.execute_deploy_step", "params": {
            "step": {"step": "write_image", "args": {}}, "node": {"properties": "x"}}}),
    )
    .await;
    assert_eq!(st, StatusCode::BAD_REQUEST);
    assert_fault(
        &v,
        "node.properties: invalid type: string \"x\", expected a map",
    );
    // A typed field of instance_info, named by its path.
    let (st, v) = post(
        &s,
        &cmd_uri(""),
        json!({"name": "deploy.execute_deploy_step", "params": {
            "step": {"step": "write_image", "args": {}},
            "node": {"instance_info": {"root_device": "/dev/sda"}}}}),
    )
    .await;
    assert_eq!(st, StatusCode::BAD_REQUEST);
    assert_fault(&v, "node.instance_info.root_device: invalid type: string");
    // What a step reads later is checked here too: the skip list's entry
    // with a bad hint, named down to the hint, on the step listing.
    let (st, v) = post(
        &s,
        &cmd_uri(""),
        json!({"name": "clean.get_clean_steps", "params": {
            "node": {"properties": {"skip_block_devices": [{"size": "five"}]}}, "ports": []}}),
    )
    .await;
    assert_eq!(st, StatusCode::BAD_REQUEST);
    assert_fault(&v, "node.properties.skip_block_devices[0].size: ");
    let (st, v) = post(
        &s,
        &cmd_uri(""),
        json!({"name": "standby.prepare_image", "params": {"image_info": {"id": "i"}}}),
    )
    .await;
    assert_eq!(st, StatusCode::BAD_REQUEST);
    assert_fault(&v, "image_info");

    // MD5 is refused by the conductor's settings (no lookup: IPA's default).
    let md5 = "0123456789abcdef0123456789abcdef";
    let (st, v) = post(
        &s,
        &cmd_uri("&wait=true"),
        json!({"name": "standby.prepare_image", "params": {"image_info": {
            "id": "i", "urls": ["http://127.0.0.1:9/i"], "checksum": md5}}}),
    )
    .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    assert_eq!(v["command_status"], "FAILED", "{v}");
    let details = v["command_error"]["details"].as_str().unwrap();
    assert!(details.contains("agent_md5_checksum_enable"), "{v}");

    // A bad argument of a known step fails the command, naming it.
    let (st, v) = post(
        &s,
        &cmd_uri("&wait=true"),
        json!({"name": "deploy.execute_deploy_step", "params": {
            "step": {"step": "inject_files", "args": {"verify_ca": "yes"}},
            "node": {"uuid": "n1"}}}),
    )
    .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    assert_eq!(v["command_status"], "FAILED", "{v}");
    assert_eq!(
        v["command_error"]["type"], "InvalidCommandParamsError",
        "{v}"
    );
    assert!(
        v["command_error"]["details"]
            .as_str()
            .unwrap()
            .starts_with("verify_ca: invalid type: string \"yes\", expected a boolean"),
        "{v}"
    );
    assert_eq!(s.node().unwrap().uuid(), Some("n1"), "the node is cached");
}

#[tokio::test]
async fn a_misconfigured_hardware_manager_fails_the_step_listing_with_http_500() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("shadow.yaml"),
        "name: shadow\nversion: '1'\nsupport: 1\nsteps:\n  - {name: erase_devices, executable: /bin/true, interface: deploy, clean_priority: 1}\n",
    )
    .unwrap();
    let s = state_with(Config {
        exec_managers_dir: Some(dir.path().to_path_buf()),
        ..Config::default()
    });
    let body = json!({"name": "clean.get_clean_steps", "params": {"node": {}, "ports": []}});
    let (st, v) = post(&s, &cmd_uri("&wait=true"), body.clone()).await;
    // Ironic 39 shows an HTTP error's faultstring in last_error, and not a
    // failed sync command's error.
    assert_eq!(st, StatusCode::INTERNAL_SERVER_ERROR);
    assert_fault(
        &v,
        "Hardware manager configuration error: hardware manager \"shadow\"",
    );
    assert_fault(&v, &dir.path().join("shadow.yaml").display().to_string());
    assert_fault(&v, "\"erase_devices\"");
    std::fs::remove_file(dir.path().join("shadow.yaml")).unwrap();
    let (st, v) = post(&s, &cmd_uri("&wait=true"), body).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    assert_eq!(v["command_status"], "SUCCEEDED");
}
