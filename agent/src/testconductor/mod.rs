//! A stand-in conductor that behaves like Ironic 39 towards the agent, for
//! tests, the `hardware-tests` bed and the demo: GET `/`, lookup (404 unless
//! the node waits, 409 while locked, token issued once then `******`),
//! heartbeat (token, version, TLS and callback-change checks, 409 while
//! locked before an agent URL is known), and on heartbeats in a wait state it
//! drives the agent's commands as Ironic does (PROTOCOL.md §1.8, §1.9).
//!
//! Design: the node table sits behind one mutex; every conductor action runs
//! in a task holding the node's lock flag, like Ironic's node lock. All calls
//! are appended to a transcript that tests and the demo read.

mod agent_client;
pub mod demo;
mod deploy;
mod driver;
mod inspection;
pub mod node;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Value};
use tokio::sync::watch;

pub use node::{BootMode, DeployRequest, ImageInfo, Node};

/// Highest API version the stand-in claims (Ironic 39 claims 1.115).
pub const MAX_VERSION: (u32, u32) = (1, 115);

/// Settings of the stand-in.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Refuse `http://` callback URLs (Ironic 39 default).
    pub require_tls: bool,
    /// `heartbeat_timeout` sent at lookup.
    pub heartbeat_timeout: u64,
    /// How long the node stays locked when an operation starts (Ironic's
    /// "cleaning"/"deploying" phase), during which lookups get 409.
    pub start_lock: Duration,
    /// How often a running `install_bootloader` is polled (Ironic's
    /// `[agent]command_wait_interval`, 6 s; the first poll is immediate).
    pub command_poll_interval: Duration,
    /// Serve HTTPS with this configuration (as Ironic with `[api]
    /// enable_ssl_api`); `None`: plain HTTP.
    pub tls: Option<Arc<rustls::ServerConfig>>,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            require_tls: true,
            heartbeat_timeout: 10,
            start_lock: Duration::from_millis(300),
            command_poll_interval: Duration::from_secs(6),
            tls: None,
        }
    }
}

#[derive(Debug)]
struct Inner {
    settings: Settings,
    nodes: Mutex<HashMap<String, Node>>,
    transcript: Mutex<Vec<String>>,
    changed: watch::Sender<u64>,
    /// Conductor actions in flight (aborted when the conductor "crashes").
    tasks: Mutex<Vec<tokio::task::AbortHandle>>,
}

/// The HTTP server task and its shutdown switch.
#[derive(Debug)]
struct Server {
    addr: std::net::SocketAddr,
    task: Mutex<Option<tokio::task::JoinHandle<()>>>,
    shutdown: Mutex<Option<tokio::sync::oneshot::Sender<()>>>,
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(t) = self.task.lock().unwrap_or_else(|p| p.into_inner()).take() {
            t.abort();
        }
    }
}

/// A running stand-in conductor.
#[derive(Debug, Clone)]
pub struct TestConductor {
    inner: Arc<Inner>,
    url: String,
    server: Arc<Server>,
}

impl TestConductor {
    /// Starts on 127.0.0.1 on a free port.
    pub async fn start(settings: Settings) -> Result<Self> {
        Self::start_on(settings, "127.0.0.1:0".parse()?).await
    }

    /// Starts on `addr` (port 0: a free one), e.g. a test network's address.
    pub async fn start_on(settings: Settings, addr: std::net::SocketAddr) -> Result<Self> {
        Self::serve(settings, addr, HashMap::new(), Vec::new()).await
    }

    async fn serve(
        settings: Settings,
        addr: std::net::SocketAddr,
        nodes: HashMap<String, Node>,
        transcript: Vec<String>,
    ) -> Result<Self> {
        let inner = Arc::new(Inner {
            settings,
            nodes: Mutex::new(nodes),
            transcript: Mutex::new(transcript),
            changed: watch::channel(0).0,
            tasks: Mutex::new(Vec::new()),
        });
        let app = Router::new()
            .route("/", get(root))
            .route("/v1/lookup", get(lookup))
            .route("/v1/heartbeat/{uuid}", post(heartbeat))
            .route(
                "/v1/continue_inspection",
                post(inspection::continue_inspection),
            )
            .with_state(inner.clone());
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let (addr, url, task) = match inner.settings.tls.clone() {
            None => {
                let listener = tokio::net::TcpListener::bind(addr)
                    .await
                    .with_context(|| format!("binding the test conductor to {addr}"))?;
                let addr = listener.local_addr()?;
                let task = tokio::spawn(async move {
                    let _ = axum::serve(listener, app)
                        .with_graceful_shutdown(async move {
                            let _ = rx.await;
                        })
                        .await;
                });
                (addr, format!("http://{addr}"), task)
            }
            Some(tls) => {
                let server = crate::server::Server::start(addr, app, Some((*tls).clone()))
                    .await
                    .with_context(|| format!("binding the test conductor to {addr}"))?;
                let addr = server.local_addr;
                let task = tokio::spawn(async move {
                    let _ = rx.await;
                    server.stop();
                });
                (addr, format!("https://{addr}"), task)
            }
        };
        Ok(Self {
            inner,
            url,
            server: Arc::new(Server {
                addr,
                task: Mutex::new(Some(task)),
                shutdown: Mutex::new(Some(tx)),
            }),
        })
    }

    /// A crash and restart of the conductor: it stops answering (its
    /// listener and connections close, actions in flight are lost), stays
    /// down for `down_for`, then serves again on the same address with the
    /// node table as its database kept it. As Ironic at start-up, node
    /// locks are released and nodes caught in an active `*ing` state fail
    /// (`deploying` → `deploy failed`, `cleaning` → `clean failed`); nodes
    /// in a wait state go on with the next heartbeat.
    pub async fn restart(self, down_for: Duration) -> Result<TestConductor> {
        self.inner.log("C: conductor stopped".into());
        for t in self
            .inner
            .tasks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .drain(..)
        {
            t.abort();
        }
        let tx = self
            .server
            .shutdown
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(tx) = tx {
            let _ = tx.send(());
        }
        let task = self
            .server
            .task
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(mut task) = task {
            if tokio::time::timeout(Duration::from_secs(5), &mut task)
                .await
                .is_err()
            {
                task.abort();
            }
        }
        tokio::time::sleep(down_for).await;
        let mut nodes = self.inner.nodes().clone();
        for n in nodes.values_mut() {
            n.locked = false;
            let failed = match n.provision_state.as_str() {
                "deploying" => "deploy failed",
                "cleaning" => "clean failed",
                "inspecting" => "inspect failed",
                _ => continue,
            };
            n.last_error = Some(format!(
                "The {} can't be resumed by conductor test-conductor. Moving to {failed} state.",
                n.provision_state
            ));
            n.provision_state = failed.into();
            n.operation = None;
            n.target_state = None;
        }
        let mut transcript = self.transcript();
        transcript.push("C: conductor started again".into());
        Self::serve(
            self.inner.settings.clone(),
            self.server.addr,
            nodes,
            transcript,
        )
        .await
    }

    /// Base URL (`http://ADDR:PORT`).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Enrolls a node with these port MACs; it starts `manageable`.
    pub fn enroll(&self, macs: &[&str]) -> String {
        let node = Node::new(macs.iter().map(|m| m.to_string()).collect());
        let uuid = node.uuid.clone();
        self.inner.nodes().insert(uuid.clone(), node);
        uuid
    }

    /// Changes a node as an operator would through the API (its
    /// `properties`, `target_raid_config`); `false` if there is no such node.
    pub fn update_node(&self, uuid: &str, f: impl FnOnce(&mut Node)) -> bool {
        match self.inner.nodes().get_mut(uuid) {
            Some(n) => {
                f(n);
                true
            }
            None => false,
        }
    }

    /// A copy of a node.
    pub fn node(&self, uuid: &str) -> Option<Node> {
        self.inner.nodes().get(uuid).cloned()
    }

    /// Calls seen and made so far.
    pub fn transcript(&self) -> Vec<String> {
        self.inner
            .transcript
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Starts cleaning: manual with `steps`, automated (`provide`) with `None`.
    pub fn start_clean(&self, uuid: &str, steps: Option<Vec<Value>>) -> Result<()> {
        let target = if steps.is_some() {
            "manageable"
        } else {
            "available"
        };
        self.inner.begin(
            uuid,
            "cleaning",
            "clean wait",
            target,
            node::Operation::Clean {
                requested: steps,
                queue: Vec::new(),
                started: false,
            },
        )
    }

    /// `provide` with `automated_clean = false`: `manageable` → `available`
    /// without booting the agent.
    pub fn make_available(&self, uuid: &str) -> Result<()> {
        let mut nodes = self.inner.nodes();
        let node = nodes
            .get_mut(uuid)
            .ok_or_else(|| anyhow::anyhow!("no node {uuid}"))?;
        if node.provision_state != "manageable" || node.locked {
            bail!("node {uuid} is {}, not manageable", node.provision_state);
        }
        node.provision_state = "available".into();
        drop(nodes);
        self.inner.log(format!(
            "C: node {uuid} -> available (automated_clean = false)"
        ));
        self.inner.bump();
        Ok(())
    }

    /// `PUT .../states/provision {"target": "active", "configdrive": …}`
    /// on an `available` node: Ironic's `direct` deploy of a whole-disk
    /// image (see `deploy.rs`), ending `active` or `deploy failed`.
    pub fn start_deploy(&self, uuid: &str, request: DeployRequest) -> Result<()> {
        let i = &request.image_info;
        if !(i.url.starts_with("http://") || i.url.starts_with("https://")) {
            bail!("image_source {:?} is not an HTTP(S) URL", i.url);
        }
        if i.checksum.is_none() && (i.os_hash_algo.is_none() || i.os_hash_value.is_none()) {
            bail!(
                "instance_info needs image_checksum or image_os_hash_algo and image_os_hash_value"
            );
        }
        {
            let mut nodes = self.inner.nodes();
            let node = nodes
                .get_mut(uuid)
                .ok_or_else(|| anyhow::anyhow!("no node {uuid}"))?;
            if node.provision_state != "available" {
                bail!("node {uuid} is {}, not available", node.provision_state);
            }
            node.deploy = Some(request);
            node.partition_uuids = None;
        }
        self.inner.begin(
            uuid,
            "deploying",
            "wait call-back",
            "active",
            node::Operation::Deploy(node::DeployPhase::Boot),
        )
    }

    /// `PUT .../states/provision {"target": "deleted"}` on an `active`
    /// node: tear down (power off, no agent call), then automated cleaning
    /// → `available`.
    pub fn start_undeploy(&self, uuid: &str) -> Result<()> {
        {
            let mut nodes = self.inner.nodes();
            let node = nodes
                .get_mut(uuid)
                .ok_or_else(|| anyhow::anyhow!("no node {uuid}"))?;
            if node.provision_state != "active" {
                bail!("node {uuid} is {}, not active", node.provision_state);
            }
            node.deploy = None;
            node.partition_uuids = None;
        }
        self.inner.log(format!(
            "C: node {uuid} -> deleting (powered off, instance_info cleared)"
        ));
        self.start_clean(uuid, None)
    }

    /// The agent's command list as the conductor can read it (token and
    /// certificate from the last heartbeat), without logging: for
    /// progress displays. `None` while no agent is known.
    pub async fn agent_commands(&self, uuid: &str) -> Result<Option<Vec<Value>>> {
        let Some(node) = self.node(uuid) else {
            bail!("no node {uuid}");
        };
        if node.agent_url.is_none() || node.token.is_none() {
            return Ok(None);
        }
        agent_client::AgentClient::new(&node)?
            .commands()
            .await
            .map(Some)
    }

    /// Sends one command to the node's agent as Ironic does (token and
    /// certificate from the last heartbeat) and waits for its answer, e.g.
    /// `standby.power_off` as Ironic sends it at a deploy's end.
    pub async fn agent_command(&self, uuid: &str, name: &str, params: Value) -> Result<Value> {
        let Some(node) = self.node(uuid) else {
            bail!("no node {uuid}");
        };
        agent_client::AgentClient::new(&node)?
            .run(&self.inner, name, params, true)
            .await
    }

    /// Starts a rescue (Ironic's `agent` rescue interface): the node powers
    /// on into the ramdisk and waits (`rescue wait`); the agent's first
    /// heartbeat brings `rescue.finalize_rescue` with `password_hash` (a
    /// crypt hash, as Ironic sends `hashed_rescue_password`), and the node
    /// is `rescue`.
    pub fn start_rescue(&self, uuid: &str, password_hash: &str) -> Result<()> {
        self.inner.begin(
            uuid,
            "rescuing",
            "rescue wait",
            "rescue",
            node::Operation::Rescue(password_hash.to_string()),
        )
    }

    /// Starts in-band inspection: the node powers on into the ramdisk and
    /// waits (`inspect wait`) for the agent's `continue_inspection`.
    pub fn start_inspect(&self, uuid: &str) -> Result<()> {
        self.inner.begin(
            uuid,
            "inspecting",
            "inspect wait",
            "manageable",
            node::Operation::Inspect,
        )
    }

    /// Waits until the node is in `state` (or fails on a `* failed` state).
    pub async fn wait_for_state(&self, uuid: &str, state: &str, timeout: Duration) -> Result<Node> {
        let mut rx = self.inner.changed.subscribe();
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let node = self
                .node(uuid)
                .ok_or_else(|| anyhow::anyhow!("no node {uuid}"))?;
            if node.provision_state == state {
                return Ok(node);
            }
            if node.provision_state.ends_with("failed") && !state.ends_with("failed") {
                bail!(
                    "node {uuid} went to {:?} instead of {state:?}: {}",
                    node.provision_state,
                    node.last_error.unwrap_or_default()
                );
            }
            if tokio::time::timeout_at(deadline, rx.changed())
                .await
                .is_err()
            {
                bail!(
                    "node {uuid} still in {:?} after {:?} waiting for {state:?}",
                    node.provision_state,
                    timeout
                );
            }
        }
    }
}

impl Inner {
    fn nodes(&self) -> std::sync::MutexGuard<'_, HashMap<String, Node>> {
        self.nodes.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn log(&self, line: String) {
        tracing::debug!(target: "testconductor", "{line}");
        self.transcript
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(line);
    }

    fn bump(&self) {
        self.changed.send_modify(|n| *n += 1);
    }

    /// Remembers a conductor action so a restart can abort it.
    fn track(&self, task: tokio::task::AbortHandle) {
        let mut tasks = self.tasks.lock().unwrap_or_else(|p| p.into_inner());
        tasks.retain(|t| !t.is_finished());
        tasks.push(task);
    }

    /// Ironic's start of an operation: power cycle (token wiped), a locked
    /// `*ing` phase, then the wait state.
    fn begin(
        self: &Arc<Self>,
        uuid: &str,
        busy_state: &str,
        wait_state: &str,
        target: &str,
        op: node::Operation,
    ) -> Result<()> {
        {
            let mut nodes = self.nodes();
            let node = nodes
                .get_mut(uuid)
                .ok_or_else(|| anyhow::anyhow!("no node {uuid}"))?;
            if node.locked || node.operation.is_some() {
                bail!("node {uuid} is busy in {}", node.provision_state);
            }
            node.wipe_token();
            node.provision_state = busy_state.into();
            node.target_state = Some(target.into());
            node.operation = Some(op);
            node.last_error = None;
            node.locked = true;
        }
        self.bump();
        let (me, uuid, wait_state) = (self.clone(), uuid.to_string(), wait_state.to_string());
        let handle = tokio::spawn(async move {
            tokio::time::sleep(me.settings.start_lock).await;
            let image = me
                .nodes()
                .get(&uuid)
                .and_then(|n| n.deploy.as_ref().map(|d| d.image_info.url.clone()))
                .filter(|_| busy_is_deploy(&wait_state));
            let check = match image {
                Some(url) => deploy::validate_image_href(&url).await,
                None => Ok(()),
            };
            if let Some(n) = me.nodes().get_mut(&uuid) {
                n.locked = false;
                match check {
                    Ok(()) => n.provision_state = wait_state,
                    Err(e) => {
                        me.log(format!("C: node {uuid} -> deploy failed: {e}"));
                        n.provision_state = "deploy failed".into();
                        n.operation = None;
                        n.target_state = None;
                        n.last_error = Some(e.to_string());
                    }
                }
            }
            me.bump();
        });
        self.track(handle.abort_handle());
        Ok(())
    }
}

fn busy_is_deploy(wait_state: &str) -> bool {
    wait_state == "wait call-back"
}

/// Ironic's error body: a JSON string holding `faultstring`.
fn ironic_error(status: StatusCode, msg: &str) -> Response {
    let inner = json!({"faultcode": if status.is_server_error() {"Server"} else {"Client"},
                       "faultstring": msg, "debuginfo": null});
    (status, Json(json!({"error_message": inner.to_string()}))).into_response()
}

fn api_version(headers: &HeaderMap) -> (u32, u32) {
    headers
        .get("X-OpenStack-Ironic-API-Version")
        .and_then(|v| v.to_str().ok())
        .and_then(agent_base::config::parse_version)
        .unwrap_or((1, 1))
}

async fn root() -> Json<Value> {
    let (a, b) = MAX_VERSION;
    Json(json!({"name": "OpenStack Ironic API (test conductor)",
        "default_version": {"id": "v1", "version": format!("{a}.{b}"), "min_version": "1.1", "status": "CURRENT"},
        "versions": [{"id": "v1", "version": format!("{a}.{b}"), "min_version": "1.1"}]}))
}

async fn lookup(
    State(c): State<Arc<Inner>>,
    headers: HeaderMap,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let version = api_version(&headers);
    let addresses: Vec<String> = q
        .get("addresses")
        .map(|a| {
            a.split(',')
                .map(|m| m.trim().to_ascii_lowercase())
                .collect()
        })
        .unwrap_or_default();
    let line = format!("A->C GET /v1/lookup addresses={}", addresses.join(","));
    let resp = (|| {
        if version < (1, 22) {
            return ironic_error(StatusCode::NOT_FOUND, "Resource could not be found.");
        }
        if addresses.is_empty() && !q.contains_key("node_uuid") {
            return ironic_error(
                StatusCode::BAD_REQUEST,
                "At least one of 'addresses' and 'node_uuid' parameters is required",
            );
        }
        let mut nodes = c.nodes();
        let Some(node) = nodes.values_mut().find(|n| {
            q.get("node_uuid") == Some(&n.uuid) || n.macs.iter().any(|m| addresses.contains(m))
        }) else {
            return ironic_error(StatusCode::NOT_FOUND, "Resource could not be found.");
        };
        if !node.lookup_allowed() {
            return ironic_error(StatusCode::NOT_FOUND, "Resource could not be found.");
        }
        if node.locked {
            return ironic_error(
                StatusCode::CONFLICT,
                &format!("Node {} is locked by host test-conductor, please retry after the current operation is completed.", node.uuid),
            );
        }
        let token = if version >= (1, 62) {
            match &node.token {
                Some(_) => json!("******"),
                None => {
                    let t = new_token();
                    node.token = Some(t.clone());
                    node.tokens_issued += 1;
                    json!(t)
                }
            }
        } else {
            Value::Null
        };
        Json(json!({
            "node": {"uuid": node.uuid, "properties": node.properties, "instance_info": node.instance_info_masked(),
                     "driver_internal_info": node.as_agent_dict()["driver_internal_info"].clone(),
                     "links": []},
            "config": {"heartbeat_timeout": c.settings.heartbeat_timeout, "agent_token": token,
                       "agent_token_required": true, "agent_md5_checksum_enable": false,
                       "permitted_image_formats": ["raw", "gpt", "qcow2", "iso"],
                       "tls_min_version": "1.3", "tls_cipher_suites": null},
        }))
        .into_response()
    })();
    c.log(format!("{line} -> {}", resp.status().as_u16()));
    resp
}

/// 32 random bytes, URL-safe base64 without padding (43 characters), as Ironic.
fn new_token() -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let bytes: Vec<u8> = uuid::Uuid::new_v4()
        .as_bytes()
        .iter()
        .chain(uuid::Uuid::new_v4().as_bytes())
        .copied()
        .collect();
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n =
            chunk.iter().fold(0u32, |acc, b| (acc << 8) | u32::from(*b)) << (8 * (3 - chunk.len()));
        for i in 0..=chunk.len() {
            out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
        }
    }
    out
}

async fn heartbeat(
    State(c): State<Arc<Inner>>,
    Path(uuid): Path<String>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    let version = api_version(&headers);
    let callback = body
        .get("callback_url")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let resp = check_heartbeat(&c, &uuid, version, &body, &callback);
    c.log(format!(
        "A->C POST /v1/heartbeat/{uuid} callback_url={callback} -> {}",
        resp.status().as_u16()
    ));
    if resp.status() == StatusCode::ACCEPTED {
        c.bump();
        driver::on_heartbeat(c.clone(), uuid);
    }
    resp
}

fn check_heartbeat(
    c: &Inner,
    uuid: &str,
    version: (u32, u32),
    body: &Value,
    callback: &str,
) -> Response {
    let mut nodes = c.nodes();
    let Some(node) = nodes.get_mut(uuid) else {
        return ironic_error(
            StatusCode::NOT_FOUND,
            &format!("Node {uuid} could not be found."),
        );
    };
    if body.get("agent_verify_ca").is_some() && version < (1, 68) {
        return ironic_error(
            StatusCode::BAD_REQUEST,
            "Field \"agent_verify_ca\" not recognised in this version.",
        );
    }
    if body.get("agent_version").and_then(Value::as_str).is_none() {
        return ironic_error(
            StatusCode::BAD_REQUEST,
            "Agent did not transmit a version, and a version is required.",
        );
    }
    let Some(token) = body.get("agent_token").and_then(Value::as_str) else {
        return ironic_error(
            StatusCode::BAD_REQUEST,
            "Agent token is required for heartbeat processing.",
        );
    };
    if node.token.as_deref() != Some(token) {
        return ironic_error(
            StatusCode::BAD_REQUEST,
            "Invalid or missing agent token received.",
        );
    }
    if !(callback.starts_with("http://") || callback.starts_with("https://")) {
        return ironic_error(
            StatusCode::BAD_REQUEST,
            "An issue with the supplied \"callback_url\" has been detected.",
        );
    }
    if c.settings.require_tls && !callback.starts_with("https://") {
        return ironic_error(StatusCode::BAD_REQUEST, "TLS is required by configuration");
    }
    let ca = body
        .get("agent_verify_ca")
        .and_then(Value::as_str)
        .map(String::from);
    if let Some(known) = &node.agent_url {
        if known != callback {
            return ironic_error(
                StatusCode::BAD_REQUEST,
                "Detected change in ramdisk provided \"callback_url\"",
            );
        }
        if node.agent_verify_ca != ca {
            return ironic_error(
                StatusCode::BAD_REQUEST,
                "Detected change in ramdisk provided \"agent_verify_ca\"",
            );
        }
    } else if node.locked {
        return ironic_error(StatusCode::CONFLICT, &format!("Node {uuid} is locked by host test-conductor, please retry after the current operation is completed."));
    }
    node.agent_url = Some(callback.to_string());
    node.agent_verify_ca = ca;
    node.heartbeats += 1;
    StatusCode::ACCEPTED.into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_look_like_ironics() {
        let t = new_token();
        assert_eq!(t.len(), 43, "{t}");
        assert!(t
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'));
        assert_ne!(t, new_token());
    }
}
