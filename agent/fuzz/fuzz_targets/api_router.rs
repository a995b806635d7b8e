//! Any method, URI, headers and body through the command API's router
//! (`tower::ServiceExt::oneshot`, current-thread runtime). Oracle: never a
//! 5xx, and every error is the JSON fault document.
//!
//! Nothing is ever run: when the body names a command that exists with
//! parameters its parser takes, the agent has no token, so
//! every token is refused (running `standby.power_off` or an erase from a
//! fuzzer would be bad).
#![no_main]

use std::sync::{Arc, OnceLock};

use agent::api::router;
use agent_core::commands::dispatch::context::Context;
use agent_core::commands::dispatch::registry;
use agent_base::config::Config;
use agent_core::state::AgentState;
use axum::body::Body;
use axum::http::Request;
use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use tower::ServiceExt;

const TOKEN: &str = "fuzz-token-0123456789abcdef0123456789abcdef";

fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime")
    })
}

/// Whether the API would start a command for this body.
fn would_run(body: &[u8]) -> bool {
    let Ok(doc) = serde_json::from_slice::<Value>(body) else {
        return false;
    };
    let Some(name) = doc.get("name").and_then(Value::as_str) else {
        return false;
    };
    let Ok(spec) = registry::lookup(name) else {
        return false;
    };
    match doc.get("params") {
        Some(p @ Value::Object(_)) => (spec.parse)(p.clone(), &Context::default()).is_ok(),
        _ => false,
    }
}

fuzz_target!(|data: &[u8]| {
    // [flags] METHOD \n URI \n (Header: value \n)* \n BODY
    let Some((&flags, rest)) = data.split_first() else {
        return;
    };
    let (method, rest) = agent_fuzz::split(rest, b"\n");
    let (uri, mut rest) = agent_fuzz::split(rest, b"\n");
    let mut headers = Vec::new();
    loop {
        let (line, after) = agent_fuzz::split(rest, b"\n");
        rest = after;
        if line.is_empty() {
            break;
        }
        headers.push(agent_fuzz::split(line, b": "));
    }
    let runs = would_run(rest);
    let mut uri = String::from_utf8_lossy(uri).into_owned();
    if flags & 1 != 0 {
        let sep = if uri.contains('?') { '&' } else { '?' };
        uri = format!("{uri}{sep}agent_token={TOKEN}");
    }
    let mut req = Request::builder().method(method).uri(uri);
    for (name, value) in headers {
        req = req.header(name, value);
    }
    let Ok(req) = req.body(Body::from(rest.to_vec())) else {
        return;
    };
    // HEAD replies have no body.
    let head = req.method() == axum::http::Method::HEAD;
    let state = Arc::new(AgentState::new(Config::default(), None));
    state.set_token((!runs).then(|| TOKEN.into()));
    runtime().block_on(async move {
        let resp = router(state).oneshot(req).await.expect("infallible");
        let status = resp.status();
        assert!(!status.is_server_error(), "{status}");
        let body = axum::body::to_bytes(resp.into_body(), 1 << 20)
            .await
            .expect("a bounded reply");
        if !status.is_success() && !head {
            let v: Value = serde_json::from_slice(&body).expect("a JSON error");
            assert!(v["faultstring"].is_string(), "{v}");
        }
    });
});
