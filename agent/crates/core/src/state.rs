//! The agent's shared state for one boot: configuration, the agent token,
//! the command list, the node the conductor last sent, and the event channel
//! through which commands ask the main loop for a heartbeat or a power action.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::Value;
use tokio::sync::mpsc;

use crate::command::history::CommandHistory;
use agent_base::config::Config;
use agent_conductor::conductor::lookup::LookupConfig;
use ironic_types::node::Node;

/// A power action requested by a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PowerAction {
    /// `standby.power_off`.
    PowerOff,
    /// `standby.reboot` / `standby.run_image`.
    Reboot,
}

/// What commands tell the main loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AgentEvent {
    /// An async command ended: heartbeat soon so the conductor notices.
    AsyncCommandFinished,
    /// Power off or reboot (simulated in host mode).
    Power(PowerAction),
    /// `system.lockdown`: stop serving and heartbeating for good.
    Lockdown,
    /// `rescue.finalize_rescue` done: stop serving and heartbeating for
    /// good, the network left up (the ramdisk's agent exits for PID 1 to
    /// open the rescue logins).
    Rescued,
}

/// What the conductor session is doing, for `agent status`.
#[derive(Debug, Clone, Default)]
pub struct SessionInfo {
    /// The conductor URLs in use.
    pub conductor_urls: Vec<String>,
    /// `looking up`, `found`, or the last lookup problem.
    pub lookup: String,
    /// The node found.
    pub node_uuid: Option<String>,
    /// The callback URL sent in heartbeats.
    pub callback_url: Option<String>,
    /// When the last heartbeat was sent, and whether it was accepted
    /// (`None`) or why not.
    pub last_heartbeat: Option<(std::time::Instant, Option<String>)>,
    /// Heartbeats accepted so far.
    pub heartbeats_accepted: u64,
}

/// Shared state.
#[derive(Debug)]
pub struct AgentState {
    /// Configuration.
    pub config: Config,
    /// The command list of this boot.
    pub commands: CommandHistory,
    /// When the agent started (seconds since the epoch).
    pub started_at: f64,
    token: RwLock<Option<String>>,
    /// A random per-boot HMAC key: presented tokens are compared by their
    /// HMAC-SHA256 under it (ring's `hmac::verify`, constant time), so
    /// neither the token's bytes nor its length show in timing.
    token_key: ring::hmac::Key,
    /// The key of `GET /v1/local/status` (random per start, hex; `None`
    /// when the system's random source failed: then nobody is served).
    /// `agent::api::local_key` writes it to a root-only file.
    local_key: Option<String>,
    node: RwLock<Option<Node>>,
    partition_uuids: RwLock<Option<Value>>,
    /// The `is_root_volume` marks of the software RAID built in this boot.
    raid_root_marks: RwLock<Vec<agent_contents::raid::ops::RootMark>>,
    lookup_config: RwLock<Option<LookupConfig>>,
    metrics: RwLock<Option<Arc<agent_base::metrics::Metrics>>>,
    events: Mutex<Option<mpsc::UnboundedSender<AgentEvent>>>,
    abort: Mutex<Arc<AtomicBool>>,
    session: RwLock<SessionInfo>,
    /// A power command was answered and its action is on its way to the
    /// main loop (`standby.power_off` waits a moment before acting).
    power_pending: AtomicBool,
}

impl AgentState {
    /// New state; events go to `events` (or nowhere if `None`).
    pub fn new(config: Config, events: Option<mpsc::UnboundedSender<AgentEvent>>) -> Self {
        let token = config.agent_token.clone();
        Self {
            config,
            commands: CommandHistory::default(),
            started_at: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_secs_f64())
                .unwrap_or_default(),
            token: RwLock::new(token),
            token_key: token_key(),
            local_key: random_hex(32),
            node: RwLock::new(None),
            partition_uuids: RwLock::new(None),
            raid_root_marks: RwLock::new(Vec::new()),
            lookup_config: RwLock::new(None),
            metrics: RwLock::new(None),
            events: Mutex::new(events),
            abort: Mutex::new(Arc::new(AtomicBool::new(false))),
            session: RwLock::new(SessionInfo {
                lookup: "not started".into(),
                ..SessionInfo::default()
            }),
            power_pending: AtomicBool::new(false),
        }
    }

    /// Marks a power action as ordered: the main loop must wait for it
    /// rather than look the node up again when the conductor drops the
    /// token meanwhile.
    pub fn set_power_pending(&self) {
        self.power_pending
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// Withdraws [`Self::set_power_pending`]: the power action failed
    /// before it was carried out.
    pub fn clear_power_pending(&self) {
        self.power_pending
            .store(false, std::sync::atomic::Ordering::SeqCst);
    }

    /// Whether a power action was ordered and not carried out yet.
    pub fn power_pending(&self) -> bool {
        self.power_pending.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// The conductor session as last recorded.
    pub fn session(&self) -> SessionInfo {
        self.session
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Records a change of the conductor session.
    pub fn update_session(&self, f: impl FnOnce(&mut SessionInfo)) {
        f(&mut self.session.write().unwrap_or_else(|p| p.into_inner()));
    }

    /// The agent token, once known.
    pub fn token(&self) -> Option<String> {
        self.token.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Sets or clears the token.
    pub fn set_token(&self, token: Option<String>) {
        *self.token.write().unwrap_or_else(|p| p.into_inner()) = token;
    }

    /// The local status endpoint's key.
    pub fn local_key(&self) -> Option<&str> {
        self.local_key.as_deref()
    }

    /// Checks a key presented to the local status endpoint in constant time.
    pub fn local_key_matches(&self, presented: Option<&str>) -> bool {
        self.secret_matches(self.local_key(), presented)
    }

    /// Checks a token presented on the command API in constant time.
    pub fn token_matches(&self, presented: Option<&str>) -> bool {
        self.secret_matches(self.token().as_deref(), presented)
    }

    /// Whether `presented` is `ours`, compared by their HMAC under this
    /// start's key (constant time, length hidden); nothing matches a
    /// missing secret.
    fn secret_matches(&self, ours: Option<&str>, presented: Option<&str>) -> bool {
        match (ours, presented) {
            (Some(ours), Some(theirs)) => {
                let tag = ring::hmac::sign(&self.token_key, ours.as_bytes());
                ring::hmac::verify(&self.token_key, theirs.as_bytes(), tag.as_ref()).is_ok()
            }
            _ => false,
        }
    }

    /// Remembers the node the conductor sent (root device hints, erase knobs).
    pub fn cache_node(&self, node: Node) {
        *self.node.write().unwrap_or_else(|p| p.into_inner()) = Some(node);
    }

    /// The node last sent by the conductor.
    pub fn node(&self) -> Option<Node> {
        self.node.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Remembers the settings of the last lookup, and the metrics sink
    /// they ask for ([`agent_base::metrics`]).
    pub fn set_lookup_config(&self, c: LookupConfig) {
        let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .unwrap_or_default();
        let metrics = match agent_base::metrics::Metrics::from_lookup(
            &agent_base::config::groups::overlay_metrics(&self.config.metrics_defaults, &c.raw),
            &hostname,
        ) {
            Ok(m) => m.map(Arc::new),
            Err(e) => {
                tracing::warn!("lookup: {e}; no metrics are sent");
                None
            }
        };
        *self.metrics.write().unwrap_or_else(|p| p.into_inner()) = metrics;
        *self
            .lookup_config
            .write()
            .unwrap_or_else(|p| p.into_inner()) = Some(c);
    }

    /// A timer of the command API's call `name`, sent when dropped, if the
    /// conductor asked for metrics.
    pub fn api_timer(&self, name: &'static str) -> Option<agent_base::metrics::Timer> {
        self.metrics
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .map(|m| m.time(name))
    }

    /// The settings of the last lookup.
    pub fn lookup_config(&self) -> Option<LookupConfig> {
        self.lookup_config
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The partition UUIDs of the last written image.
    pub fn partition_uuids(&self) -> Option<Value> {
        self.partition_uuids
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Records the partition UUIDs of a written image.
    pub fn set_partition_uuids(&self, v: Option<Value>) {
        *self
            .partition_uuids
            .write()
            .unwrap_or_else(|p| p.into_inner()) = v;
    }

    /// The `is_root_volume` marks of the software RAID built in this boot
    /// (IPA 13 keeps them in memory too: a reboot forgets them).
    pub fn raid_root_marks(&self) -> Vec<agent_contents::raid::ops::RootMark> {
        self.raid_root_marks
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Records the marks of the software RAID just built (empty: none, or
    /// the RAID deleted).
    pub fn set_raid_root_marks(&self, marks: Vec<agent_contents::raid::ops::RootMark>) {
        *self
            .raid_root_marks
            .write()
            .unwrap_or_else(|p| p.into_inner()) = marks;
    }

    /// Sends an event to the main loop (dropped if nobody listens).
    pub fn notify(&self, event: AgentEvent) {
        if let Some(tx) = self
            .events
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
        {
            let _ = tx.send(event);
        }
    }

    /// The abort flag of this operation: long steps (disk erase) check it
    /// and stop when the operation ends under them (reboot, token wiped).
    pub fn abort_flag(&self) -> Arc<AtomicBool> {
        self.abort.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Raises the current abort flag and starts a fresh one.
    pub fn abort_running(&self) {
        let mut flag = self.abort.lock().unwrap_or_else(|p| p.into_inner());
        flag.store(true, Ordering::Relaxed);
        *flag = Arc::new(AtomicBool::new(false));
    }

    /// Forgets everything a reboot forgets: commands, token (unless
    /// pre-shared), node and written-image facts.
    pub fn reset_as_after_reboot(&self) {
        self.power_pending
            .store(false, std::sync::atomic::Ordering::SeqCst);
        self.abort_running();
        self.commands.reset();
        self.set_token(self.config.agent_token.clone());
        *self.node.write().unwrap_or_else(|p| p.into_inner()) = None;
        self.set_partition_uuids(None);
        self.set_raid_root_marks(Vec::new());
    }
}

/// `bytes` from the system's random source, hex (`None` if it fails: no
/// predictable stand-in).
fn random_hex(bytes: usize) -> Option<String> {
    use ring::rand::SecureRandom;
    let mut buf = vec![0u8; bytes];
    ring::rand::SystemRandom::new().fill(&mut buf).ok()?;
    Some(buf.iter().map(|b| format!("{b:02x}")).collect())
}

/// A fresh HMAC-SHA256 key from the system's random source.
fn token_key() -> ring::hmac::Key {
    let rng = ring::rand::SystemRandom::new();
    // getrandom(2) cannot fail on the kernels the agent runs on; should it,
    // a key from the clock still keeps the comparison constant-time (the
    // key only hides timing, it guards no secret of its own).
    ring::hmac::Key::generate(ring::hmac::HMAC_SHA256, &rng).unwrap_or_else(|_| {
        let seed = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default();
        ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &seed.to_le_bytes())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state_with(token: Option<&str>) -> AgentState {
        let config = Config {
            agent_token: token.map(str::to_string),
            ..Config::default()
        };
        AgentState::new(config, None)
    }

    #[test]
    fn only_the_exact_token_matches() {
        let s = state_with(Some("abcdefghijklmnopqrstuvwxyz0123456789ABCDEFG"));
        assert!(s.token_matches(Some("abcdefghijklmnopqrstuvwxyz0123456789ABCDEFG")));
        for wrong in [
            "",
            "abcdefghijklmnopqrstuvwxyz0123456789ABCDEF",
            "abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGH",
            "Abcdefghijklmnopqrstuvwxyz0123456789ABCDEFG",
            "abcdefghijklmnopqrstuvwxyz0123456789ABCDEFg",
        ] {
            assert!(!s.token_matches(Some(wrong)), "{wrong:?} matched");
        }
        assert!(!s.token_matches(None));
    }

    #[test]
    fn no_token_yet_matches_nothing() {
        let s = state_with(None);
        assert!(!s.token_matches(Some("")));
        assert!(!s.token_matches(Some("anything")));
        s.set_token(Some("t0k".into()));
        assert!(s.token_matches(Some("t0k")));
        s.set_token(None);
        assert!(!s.token_matches(Some("t0k")));
    }

    /// The files' `[metrics]` send timers even when the lookup has no
    /// `metrics` (IPA's own configuration), and the lookup's values win.
    #[test]
    fn metrics_from_the_files_unless_the_lookup_says_otherwise() {
        let receiver = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        receiver
            .set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .unwrap();
        let port = receiver.local_addr().unwrap().port();
        let config = Config {
            metrics_defaults: serde_json::json!({
                "metrics": {"backend": "statsd", "global_prefix": "site"},
                "metrics_statsd": {"statsd_host": "127.0.0.1", "statsd_port": port},
            }),
            ..Config::default()
        };
        let s = AgentState::new(config, None);
        let lookup = |config: serde_json::Value| {
            agent_conductor::conductor::lookup::parse_lookup(&serde_json::json!({
                "node": {"uuid": "n"}, "config": config}))
            .unwrap()
            .config
        };
        s.set_lookup_config(lookup(serde_json::json!({"heartbeat_timeout": 30})));
        drop(s.api_timer("get_status").expect("metrics from the files"));
        let mut buf = [0u8; 256];
        let n = receiver.recv(&mut buf).unwrap();
        let line = String::from_utf8_lossy(&buf[..n]).into_owned();
        assert!(
            line.starts_with("site.ironic_python_agent.api.app.get_status:"),
            "{line}"
        );
        s.set_lookup_config(lookup(serde_json::json!({"heartbeat_timeout": 30,
            "metrics": {"backend": "noop"}})));
        assert!(s.api_timer("get_status").is_none(), "the lookup wins");
    }
}
