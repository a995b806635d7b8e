//! The IPA-compatible command API (PROTOCOL.md §1): routes, token check, body
//! limits, and the mapping of command outcomes to HTTP replies. Handlers only
//! parse and validate; running commands belongs to
//! [`agent_core::command::history::CommandHistory`].
//!
//! Both `/v1/commands` and `/v1/commands/` are served (Ironic always uses the
//! trailing slash), with and without the `/v1` prefix as IPA does.

pub(crate) mod error;
pub mod local_key;

use std::collections::HashMap;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, Query, Request, State};
use axum::http::{header, Uri};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{json, Value};

pub use error::ApiError;

use agent_core::command::history::OnAsyncEnd;
use agent_core::command::history::StartError;
use agent_core::command::ErrorKind;
use agent_core::commands::dispatch::context::Context;
use agent_core::commands::dispatch::registry::{self, LookupError};
use agent_core::state::{AgentEvent, AgentState};

/// The agent's version string, sent as `agent_version` and served on `/v1/status`.
pub use agent_base::AGENT_VERSION;

type Params = Query<HashMap<String, String>>;

/// Largest command body accepted (also bounded by the configured
/// `max_request_bytes`). The largest legitimate one is a `write_image` deploy
/// step: Ironic puts the config drive (gzip+base64, at most 64 MiB: Ironic's
/// own `[api]max_json_body_size_provision` bounds the body that brings it)
/// in it three times (`image_info.configdrive`, `configdrive` and the
/// unmasked `node.instance_info.configdrive`), so 3 × 64 MiB plus 8 MiB for
/// the rest of the node.
pub const MAX_BODY_BYTES: usize = 200 << 20;
/// Bytes of every body that need no share of the budget: what Ironic sends
/// besides config drives fits, and 64 connections (the server's cap) hold
/// at most 64 MiB of them.
pub const SMALL_BODY_BYTES: usize = 1 << 20;
/// Bytes above [`SMALL_BODY_BYTES`] that all requests being read may hold
/// together: one largest body fits, a second concurrent one is refused (413).
pub const BODY_BUDGET_BYTES: usize = 256 << 20;

/// Bounds on request bodies ([`router_with`]).
#[derive(Debug, Clone, Copy)]
pub struct BodyLimits {
    /// Largest body of one request.
    pub per_request: usize,
    /// Bytes of each body that are free of the budget.
    pub small: usize,
    /// Bytes above `small` that all bodies being read may hold together.
    pub budget: usize,
}

impl Default for BodyLimits {
    /// [`MAX_BODY_BYTES`], [`SMALL_BODY_BYTES`], [`BODY_BUDGET_BYTES`].
    fn default() -> Self {
        BodyLimits {
            per_request: MAX_BODY_BYTES,
            small: SMALL_BODY_BYTES,
            budget: BODY_BUDGET_BYTES,
        }
    }
}

/// The budget shared by the bodies of one router (and its clones).
#[derive(Debug, Clone)]
struct BodyBudget {
    limits: BodyLimits,
    free: Arc<tokio::sync::Semaphore>,
}

/// Builds the router. Tests call it with `tower::ServiceExt::oneshot`.
pub fn router(state: Arc<AgentState>) -> Router {
    router_with(state, BodyLimits::default())
}

/// [`router`] with other [`BodyLimits`].
pub fn router_with(state: Arc<AgentState>, limits: BodyLimits) -> Router {
    let budget = BodyBudget {
        limits,
        free: Arc::new(tokio::sync::Semaphore::new(
            limits
                .budget
                .min(tokio::sync::Semaphore::MAX_PERMITS)
                .min(u32::MAX as usize),
        )),
    };
    let commands = get(list_commands)
        .post(run_command)
        .fallback(method_not_allowed);
    let one = get(get_command).fallback(method_not_allowed);
    let status = get(status).fallback(method_not_allowed);
    Router::new()
        .route("/", get(root).fallback(method_not_allowed))
        .route("/v1", get(v1).fallback(method_not_allowed))
        .route("/v1/", get(v1).fallback(method_not_allowed))
        .route("/v1/status", status.clone())
        .route("/status", status)
        .route("/v1/commands", commands.clone())
        .route("/v1/commands/", commands.clone())
        .route("/commands", commands.clone())
        .route("/commands/", commands)
        .route(
            "/v1/local/status",
            get(local_status).fallback(method_not_allowed),
        )
        .route("/v1/commands/{id}", one.clone())
        .route("/commands/{id}", one)
        .fallback(not_found)
        .layer(axum::Extension(budget))
        .with_state(state)
}

async fn not_found(uri: Uri) -> ApiError {
    ApiError::NotFound(format!("no resource at {}", uri.path()))
}

async fn method_not_allowed() -> ApiError {
    ApiError::MethodNotAllowed
}

fn base_url(req_headers: &axum::http::HeaderMap) -> String {
    let host = req_headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("localhost");
    format!("//{host}")
}

fn link(base: &str, path: &str, rel: &str) -> Value {
    json!({"href": format!("{base}{path}"), "rel": rel})
}

async fn root(headers: axum::http::HeaderMap) -> Json<Value> {
    let base = base_url(&headers);
    let version = json!({"id": "v1", "links": [link(&base, "/v1", "self"),
        {"href": "https://docs.openstack.org/ironic-python-agent/", "rel": "describedby", "type": "text/html"}]});
    Json(json!({
        "name": "OpenStack Ironic Python Agent API",
        "description": "Ironic Python Agent is a provisioning agent for OpenStack Ironic",
        "versions": [version.clone()],
        "default_version": version,
    }))
}

async fn v1(headers: axum::http::HeaderMap) -> Json<Value> {
    let base = base_url(&headers);
    Json(json!({
        "id": "v1",
        "links": [link(&base, "/v1", "self")],
        "commands": [link(&base, "/v1/commands", "self"), link(&base, "/commands", "bookmark")],
        "status": [link(&base, "/v1/status", "self"), link(&base, "/status", "bookmark")],
        "media_types": [{"base": "application/json",
                          "type": "application/vnd.openstack.ironic-python-agent.v1+json"}],
    }))
}

async fn status(State(state): State<Arc<AgentState>>) -> Json<Value> {
    let _timer = state.api_timer("get_status");
    Json(json!({"started_at": state.started_at, "version": AGENT_VERSION}))
}

/// The peer of a connection, added by [`crate::server`] to every request.
#[derive(Debug, Clone, Copy)]
pub struct PeerAddr(pub std::net::SocketAddr);

/// `GET /v1/local/status` (ours, for `agent status` in the debug shell):
/// the conductor session and the command list with progress. Served only
/// to clients on the loopback interface (root on the console, or the host
/// in host mode) that send this start's key ([`local_key`]: a root-only
/// file) in its header; read-only, so it needs no agent token. Any other
/// peer, or a request without a known peer, gets 404 as for an unknown
/// route; a loopback peer without the key (a container step sharing the
/// host's network) gets 401.
async fn local_status(
    State(state): State<Arc<AgentState>>,
    peer: Option<axum::Extension<PeerAddr>>,
    headers: axum::http::HeaderMap,
) -> Result<Json<Value>, ApiError> {
    let local =
        peer.is_some_and(|axum::Extension(PeerAddr(p))| p.ip().to_canonical().is_loopback());
    if !local {
        return Err(ApiError::NotFound("no resource at /v1/local/status".into()));
    }
    let key = headers.get(local_key::HEADER).and_then(|v| v.to_str().ok());
    if !state.local_key_matches(key) {
        return Err(ApiError::InvalidToken);
    }
    let s = state.session();
    let heartbeat = s.last_heartbeat.as_ref().map(|(at, problem)| {
        json!({"seconds_ago": (at.elapsed().as_secs_f64() * 10.0).round() / 10.0,
               "accepted": problem.is_none(), "error": problem})
    });
    Ok(Json(json!({
        "version": AGENT_VERSION,
        "started_at": state.started_at,
        "mode": format!("{:?}", state.config.mode).to_lowercase(),
        "conductor_urls": s.conductor_urls,
        "lookup": s.lookup,
        "node_uuid": s.node_uuid,
        "callback_url": s.callback_url,
        "has_token": state.token().is_some(),
        "last_heartbeat": heartbeat,
        "heartbeats_accepted": s.heartbeats_accepted,
        "commands": state.commands.all(),
    })))
}

fn check_token(state: &AgentState, q: &HashMap<String, String>) -> Result<(), ApiError> {
    if state.token_matches(q.get("agent_token").map(String::as_str)) {
        Ok(())
    } else {
        Err(ApiError::InvalidToken)
    }
}

async fn list_commands(
    State(state): State<Arc<AgentState>>,
    Query(q): Params,
) -> Result<Json<Value>, ApiError> {
    let _timer = state.api_timer("list_commands");
    check_token(&state, &q)?;
    Ok(Json(json!({"commands": state.commands.all()})))
}

async fn get_command(
    State(state): State<Arc<AgentState>>,
    id: Result<Path<String>, PathRejection>,
    Query(q): Params,
) -> Result<Json<Value>, ApiError> {
    let _timer = state.api_timer("get_command");
    check_token(&state, &q)?;
    // An id that does not decode (not UTF-8) names no command.
    let Path(id) = id.map_err(|e| ApiError::NotFound(format!("no command at this URL: {e}")))?;
    let cmd = state
        .commands
        .get(&id)
        .ok_or_else(|| ApiError::NotFound(format!("command {id} not found")))?;
    if wants_wait(&q) {
        cmd.wait().await;
    }
    Ok(Json(
        serde_json::to_value(cmd.snapshot()).map_err(internal)?,
    ))
}

fn wants_wait(q: &HashMap<String, String>) -> bool {
    q.get("wait")
        .is_some_and(|w| w.eq_ignore_ascii_case("true"))
}

fn internal(e: impl std::fmt::Display) -> ApiError {
    ApiError::Internal(e.to_string())
}

async fn run_command(
    State(state): State<Arc<AgentState>>,
    Query(q): Params,
    axum::Extension(budget): axum::Extension<BodyBudget>,
    req: Request,
) -> Result<impl IntoResponse, ApiError> {
    let _timer = state.api_timer("run_command");
    check_token(&state, &q)?;
    let limit = state
        .config
        .max_request_bytes
        .min(budget.limits.per_request);
    // The share of the budget is held until the body is parsed and dropped.
    let (body, _share) = read_body(req, limit, &budget).await?;
    let doc: Value = serde_json::from_slice(&body)
        .map_err(|e| ApiError::InvalidCommand(format!("request body is not valid JSON: {e}")))?;
    let name = doc
        .get("name")
        .and_then(Value::as_str)
        .ok_or_else(|| ApiError::InvalidCommand("'name' (a string) is required".into()))?;
    let params = match doc.get("params") {
        Some(p @ Value::Object(_)) => p.clone(),
        Some(_) => {
            return Err(ApiError::InvalidCommand(
                "'params' must be an object".into(),
            ))
        }
        None => return Err(ApiError::InvalidCommand("'params' is required".into())),
    };
    let spec = registry::lookup(name).map_err(|e| match e {
        LookupError::NoExtension(_) => ApiError::NotFound(e.to_string()),
        LookupError::Malformed | LookupError::NoCommand(_) => {
            ApiError::InvalidCommand(e.to_string())
        }
    })?;
    let request = (spec.parse)(params, &Context::of(&state))
        .map_err(|e| ApiError::InvalidParams(e.to_string()))?;
    let ready = request.ready(state.clone(), spec.extension, spec.method, spec.mode);
    let on_async_end: OnAsyncEnd = {
        let state = state.clone();
        Box::new(move || state.notify(AgentEvent::AsyncCommandFinished))
    };
    let result = state
        .commands
        .execute(ready, wants_wait(&q), on_async_end)
        .await
        .map_err(|StartError::Busy(name)| ApiError::Busy(name))?;
    // A command refused because a hardware manager is misconfigured (an
    // operator's manager shadowing a step, a bad manifest) is answered 500
    // with the reason as `faultstring`: Ironic 39's `refresh_steps` reads
    // only `command_result` of a failed `get_*_steps` (null: its
    // `last_error` would say "'NoneType' object is not iterable"), while an
    // HTTP error becomes an `AgentAPIError` carrying the faultstring into
    // `last_error`. The command stays in the list as failed.
    if let Some(e) = result
        .command_error
        .as_ref()
        .filter(|e| e.kind == ErrorKind::HardwareManagerConfiguration)
    {
        return Err(ApiError::ManagerConfiguration(e.to_string()));
    }
    Ok(Json(serde_json::to_value(result).map_err(internal)?))
}

/// Reads a request body of at most `limit` bytes. A declared length above the
/// limit is refused before reading anything; an undeclared one is refused as
/// soon as the limit is crossed, so an oversized body is never buffered.
/// Bytes past the budget's small part are taken from the shared budget as
/// they arrive (not as declared, so an idle client holds none); a body that
/// finds the budget spent is refused. Returns the body and its share.
async fn read_body(
    req: Request,
    limit: usize,
    budget: &BodyBudget,
) -> Result<(Bytes, Option<tokio::sync::OwnedSemaphorePermit>), ApiError> {
    use http_body_util::BodyExt as _;
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(ApiError::TooLarge(limit));
    }
    let mut body = req.into_body();
    let mut buf: Vec<u8> = Vec::new();
    let mut share: Option<tokio::sync::OwnedSemaphorePermit> = None;
    let mut held = 0usize;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| {
            ApiError::InvalidCommand(format!("could not read the request body: {e}"))
        })?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        let len = buf.len().saturating_add(data.len());
        if len > limit {
            return Err(ApiError::TooLarge(limit));
        }
        let need = len.saturating_sub(budget.limits.small).saturating_sub(held);
        if need > 0 {
            let more = u32::try_from(need)
                .ok()
                .and_then(|n| budget.free.clone().try_acquire_many_owned(n).ok())
                .ok_or(ApiError::BodyBudget(budget.limits.budget))?;
            held += need;
            match &mut share {
                Some(s) => s.merge(more),
                None => share = Some(more),
            }
        }
        buf.extend_from_slice(&data);
    }
    Ok((Bytes::from(buf), share))
}

#[cfg(test)]
mod tests;
