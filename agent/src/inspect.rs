//! In-band inspection (PROTOCOL.md §4.3–4.5): run the collectors, POST the
//! document to `ipa-inspection-callback-url` (Ironic's
//! `/v1/continue_inspection`, or ironic-inspector's `/v1/continue`), retry
//! as IPA does, and hand the node UUID and token of the answer to lookup.
//!
//! Design: Ironic URLs are called at API 1.84, so the answer carries the
//! lookup-style document with a fresh token (adopted, so the later lookup's
//! `******` is no lock-out); a 406 from an older Ironic is retried without
//! the version header (IPA's way, answer `{"uuid"}`). The HTTP side is the
//! [`Conductor`] trait's `continue_inspection` (one attempt); the retries
//! are here, so they are tested against a scripted conductor. Collector
//! failures go into `error`, which makes Ironic fail the inspection visibly; unknown or
//! unimplemented collectors are only logged. The optional collectors'
//! readers live in [`agent_devices::collectors`].

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{json, Map, Value};

use agent_base::config::{Config, RunMode};
pub use agent_conductor::conductor::inspection::parse_answer;
use agent_conductor::conductor::{Conductor, ConductorClient, ConductorError, InspectionAnswer};
use agent_core::commands::dispatch::context::ManagerSources;
use agent_core::commands::managers::{hooks, Managers};
use agent_devices::inventory::{self, Inventory, Options};
use agent_devices::{collectors, hints, lldp};

/// What Ironic's answer told us.
pub type Outcome = InspectionAnswer;

/// Why the document could not be delivered.
#[derive(Debug, thiserror::Error)]
pub enum InspectError {
    /// The callback URL cannot be used.
    #[error("inspection callback {0:?} is not usable: {1}")]
    BadUrl(String, String),
    /// Every attempt failed; the last error.
    #[error("posting inspection data to {url} failed after {attempts} attempt(s): {reason}")]
    Failed {
        /// URL of the last attempt.
        url: String,
        /// Attempts made.
        attempts: usize,
        /// Last failure.
        reason: String,
    },
    /// A non-retryable HTTP error.
    #[error("{url} refused the inspection data: HTTP {status}: {message}")]
    Refused {
        /// URL.
        url: String,
        /// Status.
        status: u16,
        /// Ironic's message.
        message: String,
    },
}

/// IPA's retry rules: connection errors, 5xx and 409 are retried this many
/// times with exponential back-off.
#[derive(Debug, Clone)]
pub struct RetryPolicy {
    /// Retries after the first attempt.
    pub retries: usize,
    /// First back-off.
    pub first_delay: Duration,
    /// Back-off cap.
    pub max_delay: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            retries: 5,
            first_delay: Duration::from_secs(5),
            max_delay: Duration::from_secs(30),
        }
    }
}

/// Collectors this agent implements (`ipa-inspection-collectors`).
pub const KNOWN_COLLECTORS: &[&str] = &[
    "default",
    "lldp",
    "pci-devices",
    "usb-devices",
    "numa-topology",
    "dmi-decode",
    "extra-hardware",
    "logs",
];

/// The hardware managers this agent has (`configuration.managers`, as
/// IPA lists its loaded ones): the generic one, an operator's executable
/// managers, the container manager when its runtime runs.
pub fn managers(config: &Config) -> Value {
    let sources = ManagerSources {
        config: std::sync::Arc::new(config.clone()),
        lookup: None,
    };
    Managers::load(&sources)
        .list()
        .iter()
        .map(|m| {
            let v = m.version();
            json!({"name": v.name, "version": v.version})
        })
        .collect()
}

/// Inventory options for the agent's own machine: `BOOTIF`, the allowed
/// devices (host mode) as extra disks.
pub fn live_options(config: &Config) -> Options {
    let mut o = Options::live(config.bootif.clone());
    o.extra_disks = agent_devices::disk::allowed_kernel_names(config);
    o.filter_usb_nics = config.host_root.is_some();
    o
}

/// In host mode the node's ports are not this machine's NICs: the MACs
/// given with `--mac` are added as interfaces (the first one as the PXE
/// interface when no `BOOTIF` is set) so the conductor can find the node.
pub fn add_host_mode_macs(inv: &mut Inventory, config: &Config) {
    if config.mode != RunMode::Host {
        return;
    }
    for (i, mac) in config.extra_macs.iter().enumerate() {
        let mac = mac.to_ascii_lowercase();
        if inv.interfaces.iter().any(|x| x.mac_address == mac) {
            continue;
        }
        inv.interfaces.push(inventory::Interface {
            name: format!("hostmode{i}"),
            mac_address: mac.clone(),
            ipv4_address: None,
            ipv6_address: None,
            has_carrier: true,
            lldp: None,
            vendor: None,
            product: None,
            client_id: None,
            biosdevname: None,
            speed_mbps: None,
            pci_address: None,
            driver: None,
        });
        if inv.boot.pxe_interface.is_none() {
            inv.boot.pxe_interface = Some(mac);
        }
    }
}

/// Runs the collectors and builds the document (PROTOCOL.md §4.3).
pub async fn collect(config: &Config, opts: &Options) -> Value {
    let collectors = &config.inspection_collectors;
    let wants = |c: &str| collectors.iter().any(|x| x == c);
    let mut errors: Vec<String> = Vec::new();
    let mut doc = Map::new();
    match inventory::collect(opts) {
        Ok(mut inv) => {
            add_host_mode_macs(&mut inv, config);
            if config.collect_lldp || wants("lldp") {
                // Only the deploy ramdisk changes NIC settings.
                if config.mode == RunMode::Ramdisk {
                    let plans = lldp::intel::plan(
                        inv.interfaces
                            .iter()
                            .map(|i| (i.name.as_str(), i.driver.as_deref())),
                    );
                    lldp::intel::stop_firmware_agents(std::path::Path::new("/"), &plans);
                }
                let data = lldp::collect(&inv, config.lldp_timeout).await;
                lldp::apply(&mut inv, &data);
                if wants("lldp") {
                    doc.insert("lldp_raw".into(), json!(data.raw));
                }
                doc.insert("lldp_parsed".into(), json!(data.parsed));
            }
            // Inspection reports the default guess, as IPA's collect_default.
            match hints::choose(&inv.disks, None) {
                Ok(c) => {
                    doc.insert("root_disk".into(), json!(c.disk));
                }
                Err(e) => tracing::warn!("no root disk to report: {e}"),
            }
            doc.insert("boot_interface".into(), json!(inv.boot.pxe_interface));
            if wants("extra-hardware") {
                doc.insert(
                    "data".into(),
                    json!(collectors::extra::data(&opts.root, &inv)),
                );
            }
            doc.insert("inventory".into(), json!(inv));
        }
        Err(e) => errors.push(format!("collecting the inventory failed: {e:#}")),
    }
    if wants("pci-devices") {
        doc.insert(
            "pci_devices".into(),
            json!(pci_devices(&opts.root.join("sys/bus/pci/devices"))),
        );
    }
    if wants("usb-devices") {
        doc.insert("usb_devices".into(), collectors::usb::devices(&opts.root));
    }
    if wants("numa-topology") {
        // IPA only logs a topology it cannot read; no `numa_topology` then.
        match collectors::numa::topology(&opts.root) {
            Ok(t) => {
                doc.insert("numa_topology".into(), t);
            }
            Err(e) => tracing::warn!("numa-topology collector: {e}"),
        }
    }
    if wants("dmi-decode") {
        match collectors::dmi::decode(&opts.root) {
            Some(d) => {
                doc.insert("dmi".into(), d);
            }
            None => errors.push("dmi-decode: no SMBIOS table to read".into()),
        }
    }
    for c in collectors {
        if !KNOWN_COLLECTORS.contains(&c.as_str()) {
            tracing::warn!(collector = %c, "inspection collector not available in this agent; skipped");
        }
    }
    // Last, as IPA asks of its `logs` collector, so the bundle holds the
    // log lines of everything above. Its failures are only logged (IPA).
    if wants("logs") {
        let host_root = config.host_root.clone();
        match tokio::task::spawn_blocking(move || {
            agent_devices::logs::bundle(
                false,
                host_root.as_deref(),
                &agent_contents::uefi::efivars::log_part(),
            )
        })
        .await
        {
            Ok(Ok(b64)) => {
                doc.insert("logs".into(), json!(b64));
            }
            Ok(Err(e)) => tracing::warn!("logs collector: {e}"),
            Err(e) => tracing::warn!("logs collector crashed: {e}"),
        }
    }
    // Beside `inventory`: Ironic 39 keeps it as plugin data.
    let phases = agent_base::bootphases::read_in(
        &opts
            .root
            .join(agent_base::bootphases::RAMDISK_PATH.trim_start_matches('/')),
    );
    if !phases.is_empty() {
        doc.insert(
            "boot_phases".into(),
            agent_base::bootphases::to_json(&phases),
        );
    }
    let reported = managers(config);
    doc.insert(
        "configuration".into(),
        json!({"collectors": collectors, "managers": reported}),
    );
    doc.insert(
        "error".into(),
        if errors.is_empty() {
            Value::Null
        } else {
            json!(errors.join("; "))
        },
    );
    // The operator's executable managers (agent/docs/own-steps.md): each
    // `inspect` hook's object under its manager's name, never over a key
    // of the agent's own (Ironic keeps unknown keys as plugin data).
    for (name, data) in hooks::inspection_data(config).await {
        if doc.contains_key(&name) {
            tracing::warn!(manager = %name, "inspection data of executable manager {name} left out: the document has a key {name} of its own");
            continue;
        }
        doc.insert(name, data);
    }
    Value::Object(doc)
}

/// The `pci-devices` collector: every device under `/sys/bus/pci/devices`.
pub fn pci_devices(dir: &std::path::Path) -> Vec<Value> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    let mut entries: Vec<_> = entries.flatten().collect();
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let attr = |n: &str| inventory::read_attr(&e.path().join(n));
        let hex = |n: &str| attr(n).map(|v| v.trim_start_matches("0x").to_string());
        out.push(json!({
            "vendor_id": hex("vendor"),
            "product_id": hex("device"),
            "class": hex("class"),
            "revision": hex("revision"),
            "bus": e.file_name().to_string_lossy(),
            "numa_node_id": attr("numa_node").and_then(|v| v.parse::<i64>().ok()).filter(|n| *n >= 0),
        }));
    }
    out
}

/// POSTs the document to each URL of `callback` (comma list) in turn, with
/// IPA's retries; parses the answer.
pub async fn post(
    http: &reqwest::Client,
    callback: &str,
    doc: &Value,
    request_id: Option<&str>,
    policy: &RetryPolicy,
) -> Result<Outcome, InspectError> {
    let client = ConductorClient::new(http.clone(), Vec::new(), request_id.map(String::from));
    post_via(&client, callback, doc, policy).await
}

/// [`post`] through `conductor`.
pub async fn post_via(
    conductor: &impl Conductor,
    callback: &str,
    doc: &Value,
    policy: &RetryPolicy,
) -> Result<Outcome, InspectError> {
    let urls: Vec<&str> = callback
        .split(',')
        .map(str::trim)
        .filter(|u| !u.is_empty())
        .collect();
    if urls.is_empty() || urls.iter().any(|u| reqwest::Url::parse(u).is_err()) {
        return Err(InspectError::BadUrl(
            callback.into(),
            "expected one or more http(s) URLs".into(),
        ));
    }
    let body = doc.to_string();
    let mut delay = policy.first_delay;
    let mut attempts = 0;
    let mut last = (String::new(), String::new());
    for round in 0..=policy.retries {
        if round > 0 {
            tracing::warn!(
                retry_in_s = delay.as_secs_f64(),
                "inspection data not delivered: {}",
                last.1
            );
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(policy.max_delay);
        }
        for url in &urls {
            attempts += 1;
            match conductor.continue_inspection(url, &body).await {
                Ok(outcome) => return Ok(outcome),
                Err(e) => match classify(e) {
                    Attempt::Retry(reason) => last = (url.to_string(), reason),
                    Attempt::Fatal(e) => return Err(e),
                },
            }
        }
    }
    Err(InspectError::Failed {
        url: last.0,
        attempts,
        reason: last.1,
    })
}

enum Attempt {
    Retry(String),
    Fatal(InspectError),
}

/// IPA's rules: no answer, 5xx and 409 are retried, other errors are final.
fn classify(e: ConductorError) -> Attempt {
    match e {
        ConductorError::Unreachable { url, reason } => {
            Attempt::Retry(format!("cannot reach {url}: {reason}"))
        }
        ConductorError::Http {
            url,
            status,
            message,
        } => match StatusCode::from_u16(status) {
            Ok(s) if s.is_server_error() || s == StatusCode::CONFLICT => {
                Attempt::Retry(format!("{url} answered HTTP {s}: {message}"))
            }
            _ => Attempt::Fatal(InspectError::Refused {
                url,
                status,
                message,
            }),
        },
        other => Attempt::Retry(other.to_string()),
    }
}

/// Where inspection data goes, as IPA 13 decides (`inspector.is_enabled`,
/// `_get_urls`): the `ipa-inspection-callback-url` (a comma-separated list
/// of URLs, or `mdns`); else, when `ipa-inspection-collectors` was given
/// with `ipa-api-url`, each API URL's `/v1/continue_inspection` (how
/// Ironic's own `agent` inspect interface may boot the ramdisk); else
/// `None`: no inspection.
pub fn callback_urls(config: &Config) -> Option<String> {
    if let Some(url) = &config.inspection_callback_url {
        return Some(url.clone());
    }
    match &config.api_urls {
        agent_base::config::ApiUrls::Urls(urls) if config.inspection_collectors_given => Some(
            urls.iter()
                .map(|u| format!("{}/v1/continue_inspection", u.trim_end_matches('/')))
                .collect::<Vec<_>>()
                .join(","),
        ),
        _ => None,
    }
}

/// Collects and posts when [`callback_urls`] names somewhere. Failures
/// are logged; the agent then continues to lookup, as IPA does.
pub async fn run_if_configured(config: &Config, conductor: &impl Conductor) -> Option<Outcome> {
    let configured = callback_urls(config)?;
    // IPA: `mdns` looks up the inspector's advertisement and appends /v1/continue.
    let url = if configured == "mdns" {
        match agent_base::discovery::discover(
            "baremetal-introspection",
            std::time::Duration::from_secs(10),
            &config.mdns.interfaces,
        )
        .await
        {
            Ok(base) => format!("{}/v1/continue", base.trim_end_matches('/')),
            Err(e) => {
                tracing::error!("ipa-inspection-callback-url=mdns: {e:#}; skipping inspection");
                return None;
            }
        }
    } else {
        configured
    };
    let started = std::time::Instant::now();
    if config.mode == RunMode::Ramdisk {
        agent_base::bootphases::record("inspection");
    }
    let doc = collect(config, &live_options(config)).await;
    tracing::info!(collected_in_s = started.elapsed().as_secs_f64(), %url, "posting inspection data");
    match post_via(conductor, &url, &doc, &RetryPolicy::default()).await {
        Ok(o) => {
            tracing::info!(node = ?o.node_uuid, token = o.lookup.is_some(), "inspection data accepted");
            Some(o)
        }
        Err(e) => {
            tracing::error!("{e}");
            None
        }
    }
}

#[cfg(test)]
mod tests;
