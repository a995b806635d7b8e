//! The agent's life: find the conductor, look the node up, serve the command
//! API (HTTPS with a fresh certificate when the conductor supports it), and
//! heartbeat until the machine powers off.
//!
//! Design: one task owns the conductor session. Commands talk to it only
//! through [`AgentEvent`]s: an ended async command asks for an early
//! heartbeat; a power action is carried out (ramdisk) or simulated by forgetting
//! the token and command list and looking up again (host mode). The callback
//! URL and certificate never change within one process, as Ironic requires.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::{api, inspect, server};
use agent_base::config::{ApiUrls, Config, RunMode};
use agent_base::{net, tls};
use agent_conductor::conductor::lookup::{decide_token, TokenDecision};
use agent_conductor::conductor::{
    ApiVersion, Conductor, ConductorClient, ConductorError, Heartbeat, LookupResult,
};
use agent_core::power;
use agent_core::state::{AgentEvent, AgentState, PowerAction};

/// Gap after a failed heartbeat: `ERROR_RETRY × U(1, 2)` (PROTOCOL.md §2.4).
const ERROR_RETRY: Duration = Duration::from_secs(5);
/// Gap after a heartbeat answered 409 (node locked): `CONFLICT_RETRY × U(1, 2)`,
/// sooner than IPA's 5–10 s, as the lock is usually gone within a second.
const CONFLICT_RETRY: Duration = Duration::from_secs(1);
/// Repeated identical warnings are logged at most this often.
const LOG_REPEAT: Duration = Duration::from_secs(60);

/// A running agent, for callers (tests, the demo) that need its address.
#[derive(Debug)]
pub struct RunningAgent {
    /// Shared state.
    pub state: Arc<AgentState>,
    /// `http(s)://host:port` sent to the conductor.
    pub callback_url: String,
    /// The main loop; ends only on a fatal error.
    pub task: tokio::task::JoinHandle<Result<()>>,
}

/// Runs the agent until a fatal error. With an inspection callback but no
/// conductor URL, the agent inspects and then idles (as IPA does).
pub async fn run(config: Config) -> Result<()> {
    crate::startup::prepare(&config).await;
    agent_core::commands::managers::Managers::load(
        &agent_core::commands::dispatch::context::ManagerSources {
            config: std::sync::Arc::new(config.clone()),
            lookup: None,
        },
    )
    .log_summary();
    if config.api_urls == ApiUrls::None && inspect::callback_urls(&config).is_some() {
        let http = tls::http_client_with(
            config.insecure,
            config.cafile.as_deref(),
            config.client_certificate().as_ref(),
            config.http_request_timeout,
        )?;
        // No conductor URL: the client serves only the inspection callback.
        let client = ConductorClient::new(http, Vec::new(), config.global_request_id.clone());
        inspect::run_if_configured(&config, &client).await;
        tracing::info!("inspection done and no ipa-api-url is set: nothing more to do");
        std::future::pending::<()>().await;
    }
    start(config)
        .await?
        .task
        .await
        .context("the agent's main task panicked")?
}

/// Runs [`start`] and then the heartbeat loop in a background task (tests,
/// demos); the task ends only on a fatal error or when aborted.
pub fn start_detached(config: Config) -> tokio::task::JoinHandle<Result<()>> {
    tokio::spawn(async move {
        let running = start(config).await?;
        running
            .task
            .await
            .context("the agent's main task panicked")?
    })
}

/// Inspects (when `ipa-inspection-callback-url` is set), looks up the
/// node, starts the API and returns once the heartbeat loop runs.
pub async fn start(mut config: Config) -> Result<RunningAgent> {
    server::raise_open_file_limit();
    let urls = match &config.api_urls {
        ApiUrls::Urls(u) => u.clone(),
        ApiUrls::Mdns => {
            let found = discover_conductor(&config).await?;
            // Before inspection, which an override may turn on.
            config.apply_mdns_overrides(&found.overrides);
            vec![found.url]
        }
        ApiUrls::None => bail!(
            "no conductor configured: set ipa-api-url on the kernel command line or --api-url"
        ),
    };
    let http = tls::http_client_with(
        config.insecure,
        config.cafile.as_deref(),
        config.client_certificate().as_ref(),
        config.http_request_timeout,
    )?;
    let client = ConductorClient::new(http, urls.clone(), config.global_request_id.clone());
    let inspected = inspect::run_if_configured(&config, &client).await;
    let (tx, events) = mpsc::unbounded_channel();
    let state = Arc::new(AgentState::new(config, Some(tx)));
    state.update_session(|s| s.conductor_urls = urls);
    let config = &state.config;
    let node_uuid = inspected.as_ref().and_then(|o| o.node_uuid.clone());
    if let Some(l) = inspected.as_ref().and_then(|o| o.lookup.as_ref()) {
        // The 1.84 answer issued a token: keep it, so the lookup's "******"
        // means "the token we already have".
        if let TokenDecision::Adopt(t) =
            decide_token(l.config.agent_token.as_deref(), state.token().as_deref())
        {
            tracing::info!(node = %l.node_uuid, "token received with the inspection answer");
            state.set_token(Some(t));
        }
    }

    let version = negotiate_version(&client, config).await?;
    let advertise = advertise_address(&client, config).await?;
    // The container form looks up as it inventories: without a BMC's USB
    // NIC (inspect::live_options).
    let skip: &[&str] = if config.host_root.is_some() {
        &agent_devices::inventory::nics::USB_NETWORK_DRIVERS
    } else {
        &[]
    };
    let mut macs = net::mac_addresses(std::path::Path::new("/sys"), skip);
    macs.extend(config.extra_macs.iter().map(|m| m.to_ascii_lowercase()));
    macs.sort();
    macs.dedup();
    tracing::info!(%version, %advertise, ?macs, "looking up the node");
    let session = lookup_until_found(&client, &state, version, &macs, node_uuid.as_deref()).await?;
    // A boot phase: the ramdisk's console shows its time.
    tracing::info!(node = %session.node_uuid, "lookup done: node found");
    if config.mode == RunMode::Ramdisk {
        agent_base::bootphases::record("lookup");
    }

    // The operator's own certificate (listen_tls) replaces auto-TLS, as in
    // IPA: nothing is sent as agent_verify_ca, Ironic verifies the agent
    // with its own [agent] verify_ca.
    let own = config.own_server_certificate()?;
    let cert = if own.is_some() {
        None
    } else if config.auto_tls && version >= ApiVersion::AUTO_TLS {
        Some(tls::generate_certificate(
            advertise,
            &hostname(),
            config.tls_certificate_curve,
        )?)
    } else {
        if config.require_tls {
            bail!(
                "ipa-advertise-protocol=https needs TLS on the command API, but auto-TLS is {} \
                 (conductor API {version}, auto-TLS needs 1.68)",
                if config.auto_tls {
                    "unavailable"
                } else {
                    "disabled"
                }
            );
        }
        if config.auto_tls {
            tracing::warn!(%version, "the conductor's API is older than 1.68: serving plain HTTP");
        }
        None
    };
    // The lookup's TLS settings win; the kernel's apply when it sends none.
    let min_version = session
        .config
        .tls_min_version
        .as_deref()
        .or(config.tls_min_version.as_deref());
    let suites = session
        .config
        .tls_cipher_suites
        .as_deref()
        .or(config.tls_cipher_suites.as_deref());
    let server_tls = match &own {
        Some(files) => Some(
            tls::server_config_from_files(files, min_version, suites)
                .context("listen_tls: the command API's certificate")?,
        ),
        None => cert
            .as_ref()
            .map(|c| tls::server_config(c, min_version, suites))
            .transpose()?,
    };
    let server_tls_used = server_tls.is_some();
    let listen = SocketAddr::new(config.listen_host, config.listen_port);
    let server = server::Server::start(listen, api::router(state.clone()), server_tls).await?;
    let port = if config.listen_port == 0 || config.advertise_port == 0 {
        server.local_addr.port()
    } else {
        config.advertise_port
    };
    let scheme = if server_tls_used { "https" } else { "http" };
    let callback_url = net::callback_url(scheme, advertise, port);
    tracing::info!(%callback_url, listen = %server.local_addr, "command API listening");
    let local_key = write_local_key(&state, server.local_addr.port());

    let session_loop = Session {
        client,
        state: state.clone(),
        version,
        macs,
        callback_url: callback_url.clone(),
        verify_ca: cert.map(|c| c.pem),
        lookup: session,
        server: Some(server),
        _local_key: local_key,
    };
    state.update_session(|s| s.callback_url = Some(callback_url.clone()));
    let task = tokio::spawn(session_loop.heartbeat_loop(events));
    Ok(RunningAgent {
        state,
        callback_url,
        task,
    })
}

/// Writes the local status key for `agent status` (root only); without
/// it the agent serves on, and `agent status` cannot read its state.
fn write_local_key(state: &AgentState, port: u16) -> Option<api::local_key::KeyFile> {
    let Some(key) = state.local_key() else {
        tracing::warn!("no local status key (the random source failed): `agent status` is refused");
        return None;
    };
    match api::local_key::write(&api::local_key::dir(), port, key) {
        Ok(f) => {
            tracing::debug!(file = %f.path().display(), "local status key written");
            Some(f)
        }
        Err(e) => {
            tracing::warn!("{e:#}: `agent status` cannot read this agent's state");
            None
        }
    }
}

/// Browses mDNS for the conductor until found or the lookup budget ends.
async fn discover_conductor(config: &Config) -> Result<agent_base::discovery::Found> {
    let deadline = deadline(config.lookup_timeout);
    loop {
        match agent_base::discovery::find(
            "baremetal",
            Duration::from_secs(10),
            &config.mdns.interfaces,
        )
        .await
        {
            Ok(found) => {
                tracing::info!(url = %found.url, "conductor found by mDNS");
                return Ok(found);
            }
            Err(e) if deadline.is_some_and(|d| Instant::now() >= d) => {
                return Err(e).context("ipa-api-url=mdns");
            }
            Err(e) => tracing::warn!("{e:#}; browsing again"),
        }
    }
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".into())
}

async fn negotiate_version(client: &impl Conductor, config: &Config) -> Result<ApiVersion> {
    if let Some((a, b)) = config.ironic_api_version {
        return Ok(ApiVersion(a, b));
    }
    let mut delay = config.lookup_interval.min(config.lookup_max_interval);
    let deadline = deadline(config.lookup_timeout);
    let mut throttle = LogThrottle::default();
    loop {
        match client.max_version().await {
            Ok(max) if max < ApiVersion::TOKEN => return Err(ConductorError::TooOld(max).into()),
            Ok(max) => return Ok(max.min(ApiVersion::AUTO_TLS)),
            Err(e) => {
                throttle.warn(&format!("cannot read the conductor's API version: {e}"));
                if deadline.is_some_and(|d| Instant::now() >= d) {
                    return Err(e).context("giving up on the conductor");
                }
            }
        }
        tokio::time::sleep(jitter(delay, 0.5, 1.5)).await;
        delay = delay.saturating_mul(2).min(config.lookup_max_interval);
    }
}

async fn advertise_address(client: &impl Conductor, config: &Config) -> Result<IpAddr> {
    if let Some(h) = config.advertise_host {
        return Ok(h);
    }
    let attempts = config.ip_lookup_attempts.max(1);
    let mut attempt = 1;
    loop {
        let found = match &config.network_interface {
            Some(nic) => {
                net::interface_address(nic).with_context(|| format!("ipa-network-interface={nic}"))
            }
            None => route_source(client).await,
        };
        match found {
            Ok(ip) => return Ok(ip),
            Err(e) if attempt >= attempts => {
                return Err(e).context(format!(
                    "finding the address to advertise ({attempts} attempts); set ipa-advertise-host"
                ))
            }
            Err(e) => tracing::warn!(
                attempt,
                attempts,
                "no address to advertise yet: {e:#}; trying again in {} s",
                config.ip_lookup_sleep.as_secs()
            ),
        }
        attempt += 1;
        tokio::time::sleep(config.ip_lookup_sleep).await;
    }
}

/// The local address that routes to the first conductor URL that has one.
async fn route_source(client: &impl Conductor) -> Result<IpAddr> {
    let mut last = None;
    for url in client.urls() {
        match net::route_source_for(url).await {
            Ok(ip) if !is_link_local(ip) => return Ok(ip),
            Ok(ip) => last = Some(anyhow::anyhow!("{ip} is link-local")),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| anyhow::anyhow!("no conductor URL")))
}

fn is_link_local(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(a) => a.is_link_local(),
        IpAddr::V6(a) => (a.segments()[0] & 0xffc0) == 0xfe80,
    }
}

/// When a budget of `timeout` ends (`None`: zero means no limit, and so
/// does a budget beyond what the clock can represent).
fn deadline(timeout: Duration) -> Option<Instant> {
    (!timeout.is_zero())
        .then(|| Instant::now().checked_add(timeout))
        .flatten()
}

/// `base × U(lo, hi)`, saturating instead of overflowing.
fn jitter(base: Duration, lo: f64, hi: f64) -> Duration {
    let factor = lo + fastrand::f64() * (hi - lo);
    Duration::try_from_secs_f64(base.as_secs_f64() * factor).unwrap_or(Duration::MAX)
}

/// Looks the node up with capped, randomised exponential back-off until the
/// conductor answers with a usable token, or the lookup budget runs out.
async fn lookup_until_found(
    client: &impl Conductor,
    state: &AgentState,
    version: ApiVersion,
    macs: &[String],
    node_uuid: Option<&str>,
) -> Result<LookupResult> {
    lookup_loop(client, state, version, macs, node_uuid, None).await
}

/// [`lookup_until_found`], after a simulated power-off when `off` is set:
/// answers it holds back are not taken.
async fn lookup_loop(
    client: &impl Conductor,
    state: &AgentState,
    version: ApiVersion,
    macs: &[String],
    node_uuid: Option<&str>,
    mut off: Option<powered_off::PoweredOff>,
) -> Result<LookupResult> {
    let config = &state.config;
    let deadline = deadline(config.lookup_timeout);
    let mut delay = config.lookup_interval.min(config.lookup_max_interval);
    let mut conflicts = 0usize;
    let mut throttle = LogThrottle::default();
    state.update_session(|s| {
        s.lookup = "looking up".into();
        s.node_uuid = None;
    });
    loop {
        let answer = client.lookup(version, macs, node_uuid).await;
        let held = match (&answer, &off) {
            (Ok(found), Some(o)) => o.holds(found),
            _ => None,
        };
        if answer.is_ok() && held.is_none() {
            off = None;
        }
        let problem = match (answer, held) {
            (Ok(_), Some(why)) => why,
            (Ok(found), None) => {
                let uuid = found.node_uuid.clone();
                let set_found = |what: &str| {
                    state.update_session(|s| {
                        s.lookup = what.into();
                        s.node_uuid = Some(uuid.clone());
                    })
                };
                agent_conductor::conductor::lookup_keys::log_ignored(&found.config.raw);
                state.set_lookup_config(found.config.clone());
                match ironic_types::node::Node::parse(found.node.clone()) {
                    Ok(Some(node)) => state.cache_node(node),
                    Ok(None) => {}
                    Err(e) => tracing::warn!("the lookup's node is not cached: node.{e}"),
                }
                match decide_token(found.config.agent_token.as_deref(), state.token().as_deref()) {
                    TokenDecision::Adopt(t) => {
                        state.set_token(Some(t));
                        tracing::info!(node = %found.node_uuid, "node found; token received");
                        set_found("found; token received");
                        return Ok(found);
                    }
                    TokenDecision::KeepKnown => {
                        tracing::info!(node = %found.node_uuid, "node found; using the pre-shared token");
                        set_found("found; pre-shared token");
                        return Ok(found);
                    }
                    TokenDecision::LockedOut => format!(
                        "node {} already has a token this agent does not know; waiting until the conductor wipes it",
                        found.node_uuid
                    ),
                    TokenDecision::Missing => format!(
                        "the lookup answer for node {} carries no usable agent token",
                        found.node_uuid
                    ),
                }
            }
            (Err(e), _) => {
                if off.as_ref().is_some_and(|o| o.ended_by(&e)) {
                    off = None;
                }
                if e.status() == Some(409) {
                    // The node is locked: wait a little more each time (sticky).
                    const EXTRA: [u64; 3] = [5, 10, 30];
                    let extra = EXTRA[conflicts.min(EXTRA.len() - 1)];
                    conflicts += 1;
                    tokio::time::sleep(Duration::from_secs(extra).min(config.lookup_max_interval))
                        .await;
                }
                format!("lookup failed: {e}")
            }
        };
        throttle.warn(&problem);
        state.update_session(|s| s.lookup = format!("looking up; last problem: {problem}"));
        if deadline.is_some_and(|d| Instant::now() >= d) {
            bail!(
                "no node found within {} s; last problem: {problem}",
                config.lookup_timeout.as_secs()
            );
        }
        tokio::time::sleep(jitter(delay, 0.5, 1.5)).await;
        delay = delay.saturating_mul(2).min(config.lookup_max_interval);
    }
}

/// The conductor session after the first lookup: heartbeats, and the
/// reactions to the agent's events.
struct Session<C> {
    client: C,
    state: Arc<AgentState>,
    version: ApiVersion,
    macs: Vec<String>,
    callback_url: String,
    verify_ca: Option<String>,
    lookup: LookupResult,
    /// The command API (none in unit tests of the session).
    server: Option<server::Server>,
    /// The local status key's file, removed with the session.
    _local_key: Option<api::local_key::KeyFile>,
}

impl<C: Conductor> Session<C> {
    async fn heartbeat_loop(
        mut self,
        mut events: mpsc::UnboundedReceiver<AgentEvent>,
    ) -> Result<()> {
        let mut clock = BeatClock {
            next: Instant::now(),
            last_beat: None,
            accepted: 0,
            throttle: LogThrottle::default(),
        };
        loop {
            // Events first: a power action the conductor asked for must not
            // wait behind a heartbeat that is due at the same moment.
            let event = tokio::select! {
                biased;
                Some(event) = events.recv() => event,
                // Not while a power action is under way: the machine is
                // going down (a real one never beats again), and the
                // conductor may have moved the node on (to `active` after
                // a deploy's power-off, where Ironic logs a heartbeat as an
                // error). The action's event follows within a second.
                _ = tokio::time::sleep_until(clock.next), if !self.state.power_pending() => {
                    // The guard was read when the wait began: a power
                    // command answered during the wait shows only now.
                    let due = if self.state.power_pending() {
                        events.recv().await
                    } else {
                        match self.heartbeat_due(&mut events, &mut clock).await? {
                            Some(event) => Some(event),
                            None => continue,
                        }
                    };
                    match due {
                        Some(event) => event,
                        None => return Ok(()),
                    }
                }
                // Only with a power action pending and the event channel
                // closed (the agent shutting down): nothing is left to do.
                else => return Ok(()),
            };
            match event {
                AgentEvent::AsyncCommandFinished => {
                    let now = Instant::now();
                    let earliest = clock
                        .last_beat
                        .map(|t| t + self.state.config.min_heartbeat_interval)
                        .unwrap_or(now)
                        .max(now);
                    clock.next = clock.next.min(earliest);
                }
                AgentEvent::Power(action) => {
                    let mut simulated = false;
                    match (self.state.config.mode, &self.state.config.host_root) {
                        (RunMode::Ramdisk, _) => {
                            if let Some(server) = &self.server {
                                server.stop();
                            }
                            power::act(action);
                        }
                        (RunMode::Container, Some(host)) => {
                            if let Some(server) = &self.server {
                                server.stop();
                            }
                            power::act_from_container(action, host);
                        }
                        _ => simulated = true,
                    }
                    self.state.reset_as_after_reboot();
                    tracing::info!("agent reset as after a reboot; looking the node up again");
                    // A machine that was powered off stays off while the
                    // conductor finishes what it powered it off in.
                    let off = (simulated && action == PowerAction::PowerOff)
                        .then(powered_off::PoweredOff::new);
                    self.lookup = lookup_loop(
                        &self.client,
                        &self.state,
                        self.version,
                        &self.macs,
                        None,
                        off,
                    )
                    .await?;
                    clock.next = Instant::now();
                }
                AgentEvent::Rescued => {
                    if let Some(server) = &self.server {
                        server.stop();
                    }
                    tracing::warn!(
                        "rescued: API stopped, no more heartbeats; the network stays up"
                    );
                    match self.state.config.mode {
                        RunMode::Ramdisk => {
                            // PID 1 sees the marker and opens the logins.
                            tokio::time::sleep(Duration::from_millis(200)).await;
                            std::process::exit(0);
                        }
                        RunMode::Host | RunMode::Container => std::future::pending::<()>().await,
                    }
                }
                AgentEvent::Lockdown => {
                    if let Some(server) = &self.server {
                        server.stop();
                    }
                    tracing::warn!("locked down: API stopped, no more heartbeats");
                    agent_core::commands::system::lock_down_and_idle(self.state.config.mode).await;
                }
            }
        }
    }

    /// Sends the heartbeat that is due and schedules the next. Returns an
    /// event to handle before anything else (a power action that took the
    /// token away), or `None` to wait again.
    async fn heartbeat_due(
        &mut self,
        events: &mut mpsc::UnboundedReceiver<AgentEvent>,
        clock: &mut BeatClock,
    ) -> Result<Option<AgentEvent>> {
        let result = self.beat().await;
        let now = Instant::now();
        clock.last_beat = Some(now);
        match result {
            Ok(()) => {
                if clock.accepted == 0 {
                    // A boot phase: the ramdisk's console shows its time.
                    tracing::info!("first heartbeat accepted");
                    self.first_heartbeat_phase();
                }
                clock.accepted += 1;
                clock.throttle.reset();
                clock.next = now + jitter(self.lookup.config.heartbeat_timeout, 0.3, 0.6);
                Ok(None)
            }
            Err(e) if e.is_invalid_token() => {
                // The conductor wipes the token right after it orders a
                // power action: that action (queued, or still in the power
                // command's short delay) comes first; looking up again
                // would never see it.
                let pending = match events.try_recv() {
                    Ok(event) => Some(event),
                    // The power command was answered; its action follows
                    // within a second.
                    Err(_) if self.state.power_pending() => events.recv().await,
                    Err(_) => None,
                };
                if pending.is_some() {
                    tracing::info!(
                        "token gone with a power action or event pending: handling it first"
                    );
                    return Ok(pending);
                }
                tracing::warn!(error = %e, "the conductor no longer accepts our token; looking up again");
                self.relookup().await?;
                clock.next = Instant::now();
                Ok(None)
            }
            Err(e) if e.status() == Some(409) => {
                // The node is locked for a moment (a conductor is acting on
                // it, e.g. moving a fast-track node on): try again within
                // seconds.
                clock
                    .throttle
                    .warn(&format!("heartbeat refused, node locked: {e}"));
                clock.next = now + jitter(CONFLICT_RETRY, 1.0, 2.0);
                Ok(None)
            }
            Err(e) => {
                clock.throttle.warn(&format!("heartbeat failed: {e}"));
                clock.next = now + jitter(ERROR_RETRY, 1.0, 2.0);
                Ok(None)
            }
        }
    }

    async fn beat(&self) -> Result<(), ConductorError> {
        let token = self.state.token().unwrap_or_default();
        let hb = Heartbeat {
            callback_url: &self.callback_url,
            agent_token: &token,
            agent_verify_ca: self.verify_ca.as_deref(),
        };
        let r = self
            .client
            .heartbeat(self.version, &self.lookup.node_uuid, &hb)
            .await;
        if r.is_ok() {
            tracing::debug!(node = %self.lookup.node_uuid, "heartbeat accepted");
        }
        let problem = r.as_ref().err().map(ToString::to_string);
        self.state.update_session(|s| {
            s.heartbeats_accepted += u64::from(problem.is_none());
            s.last_heartbeat = Some((std::time::Instant::now(), problem));
        });
        r
    }

    /// Records the `first_heartbeat` boot phase (once per boot, in the
    /// ramdisk) and logs all phases in one line: the logs Ironic collects
    /// carry it.
    fn first_heartbeat_phase(&self) {
        if self.state.config.mode != RunMode::Ramdisk {
            return;
        }
        let path = std::path::Path::new(agent_base::bootphases::RAMDISK_PATH);
        if agent_base::bootphases::read_in(path)
            .iter()
            .any(|p| p.name == "first_heartbeat")
        {
            return;
        }
        agent_base::bootphases::record("first_heartbeat");
        let phases = agent_base::bootphases::read_in(path);
        tracing::info!(
            "boot phases (seconds since the kernel started): {}",
            agent_base::bootphases::summary(&phases)
        );
    }

    /// The token was wiped: a new operation starts with a fresh command list.
    async fn relookup(&mut self) -> Result<()> {
        self.state.abort_running();
        self.state.commands.reset();
        self.state.set_token(self.state.config.agent_token.clone());
        self.lookup_again().await
    }

    async fn lookup_again(&mut self) -> Result<()> {
        self.lookup =
            lookup_until_found(&self.client, &self.state, self.version, &self.macs, None).await?;
        Ok(())
    }
}

/// When the session heartbeats next, and what its heartbeats did so far.
struct BeatClock {
    next: Instant,
    last_beat: Option<Instant>,
    accepted: u64,
    throttle: LogThrottle,
}

/// Logs a repeated warning once, then again only when it changes or every
/// [`LOG_REPEAT`], with the number of repeats in between.
#[derive(Debug, Default)]
struct LogThrottle {
    last: Option<(String, Instant)>,
    repeats: u64,
}

impl LogThrottle {
    fn warn(&mut self, msg: &str) {
        let now = Instant::now();
        match &self.last {
            Some((m, at)) if m == msg && now.duration_since(*at) < LOG_REPEAT => {
                self.repeats += 1;
                tracing::debug!("{msg}");
            }
            _ => {
                if self.repeats > 0 {
                    tracing::warn!(repeats = self.repeats, "{msg}");
                } else {
                    tracing::warn!("{msg}");
                }
                self.last = Some((msg.to_string(), now));
                self.repeats = 0;
            }
        }
    }

    fn reset(&mut self) {
        self.last = None;
        self.repeats = 0;
    }
}

mod powered_off;
#[cfg(test)]
mod tests;
