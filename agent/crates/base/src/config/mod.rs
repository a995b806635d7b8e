//! The agent's one configuration type, filled from the kernel command line
//! (IPA's `ipa-*` parameters, PROTOCOL.md §3.1) and then from command-line flags.
//!
//! Rules for adding a setting: give it a field here with its IPA default,
//! read it in [`Config::from_kernel_params`] under IPA's parameter name, and,
//! if useful in host mode, a flag in `cli.rs` that overrides it. A malformed
//! value is logged once and the default kept.

pub(crate) mod cmdline;
pub mod container;
pub mod files;
mod from_params;
pub mod groups;
pub mod image_server;
pub mod ipa_params;
mod tls_files;

pub use groups::MDNS_OVERRIDABLE;
pub use tls_files::TlsFiles;

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

pub use cmdline::{KernelParams, ParamError};

/// How long the LLDP collector listens by default: 30 s, IPA's
/// `lldp_timeout`.
///
/// Switches repeat LLDP every 30 s (802.1AB `msgTxInterval`), so a switch
/// that sends only on that timer is heard within 30 s wherever its cycle
/// stands (`lldp_netns.rs` checks it against a real `lldpd`). The wait is
/// shared by all NICs and each NIC stops at its first frame, and every NIC
/// hearing one ends it: a machine whose switches answer at link-up pays
/// seconds; only a machine with a link and no LLDP on it pays the full 30 s
/// (`ipa-lldp-timeout` shortens it, as in IPA).
pub const LLDP_DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// Where the conductor's API is.

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum ApiUrls {
    /// No conductor configured (inspection only, or standalone debugging).
    #[default]
    None,
    /// Discover by mDNS (`ipa-api-url=mdns`).
    Mdns,
    /// Explicit base URLs, tried in order.
    Urls(Vec<String>),
}

/// Whether the agent owns the machine (booted ramdisk) or is a guest on an
/// ordinary host (development, tests, CI).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunMode {
    /// Running inside the deploy ramdisk: may write any disk, power off, reboot.
    Ramdisk,
    /// Running on an ordinary machine: only `--allow-device` devices may be
    /// written; power actions are simulated.
    Host,
    /// OpenShift's `ironic-agent` container on a CoreOS live system (the
    /// host root, [`Config::host_root`], carries [`container::LIVE_MARKER`]):
    /// may write any disk the host has not mounted, powers the host off or
    /// reboots it as IPA 13 does in that container (`agent/docs/container-form.md`).
    /// A container on any other host runs in [`RunMode::Host`].
    Container,
}

/// The default cap on one image download's connections.
pub const DEFAULT_IMAGE_DOWNLOAD_CONNECTIONS: u32 = 8;

/// Everything the agent needs to know at start.
#[derive(Debug, Clone)]
pub struct Config {
    /// Conductor API base URLs (`ipa-api-url`).
    pub api_urls: ApiUrls,
    /// Inspection callback (`ipa-inspection-callback-url`); `Some("mdns")` means discover.
    pub inspection_callback_url: Option<String>,
    /// Inspection collectors (`ipa-inspection-collectors`).
    pub inspection_collectors: Vec<String>,
    /// `ipa-inspection-collectors` was given: with `ipa-api-url` and no
    /// callback URL, IPA 13 inspects through Ironic's
    /// `/v1/continue_inspection` (`agent::inspect::callback_urls`).
    pub inspection_collectors_given: bool,
    /// Skip TLS verification of the conductor and image servers (`ipa-insecure`).
    pub insecure: bool,
    /// CA bundle for outbound TLS (`[DEFAULT] cafile` in IPA's config dir).
    pub cafile: Option<PathBuf>,
    /// The EFI system partition a partition image gets, MiB (`[disk_utils]
    /// efi_system_partition_size`, IPA's 550 by default).
    pub efi_system_partition_mb: u64,
    /// The BIOS boot partition a partition image gets on GPT, MiB
    /// (`[disk_utils] bios_boot_partition_size`, IPA's 1 by default).
    pub bios_boot_partition_mb: u64,
    /// A clock that cannot be set from `ntp_server` stops the agent's start
    /// and fails power actions (`[DEFAULT] fail_if_clock_not_set`).
    pub fail_if_clock_not_set: bool,
    /// The image server's credentials from the files, for downloads whose
    /// `image_info` brings none (`[DEFAULT] image_server_*`).
    pub image_server_auth: image_server::ImageServerAuth,
    /// Pre-shared agent token (`ipa-agent-token`, virtual media boots).
    pub agent_token: Option<String>,
    /// MAC of the PXE NIC, raw as given (`BOOTIF`).
    pub bootif: Option<String>,
    /// Address put in `callback_url` (`ipa-advertise-host`); found by routing when unset.
    pub advertise_host: Option<IpAddr>,
    /// Port put in `callback_url` (`ipa-advertise-port`); 0 = the port actually bound.
    pub advertise_port: u16,
    /// Address the command API binds (`ipa-listen-host`).
    pub listen_host: IpAddr,
    /// Port the command API binds (`ipa-listen-port`); 0 picks a free port.
    pub listen_port: u16,
    /// `X-OpenStack-Request-ID` sent to the conductor (`ipa-global-request-id`).
    pub global_request_id: Option<String>,
    /// Debug logging (`ipa-debug`).
    pub debug: bool,
    /// Collect LLDP for the inventory (`ipa-collect-lldp`).
    pub collect_lldp: bool,
    /// How long to listen for LLDP on all NICs at once (`ipa-lldp-timeout`;
    /// default 30 s as IPA's, see [`LLDP_DEFAULT_TIMEOUT`]).
    pub lldp_timeout: Duration,
    /// Total lookup budget (`ipa-lookup-timeout`); zero means no limit.
    pub lookup_timeout: Duration,
    /// Limit on one image download (`ipa-image-download-max-duration`);
    /// stalls are limited separately.
    pub image_download_max_duration: Option<Duration>,
    /// Largest gap between two lookup attempts.
    pub lookup_max_interval: Duration,
    /// MACs to look the node up by in addition to the NICs' own (host mode,
    /// where the machine's NICs are not the node's ports).
    pub extra_macs: Vec<String>,
    /// First lookup back-off (`ipa-lookup-interval`).
    pub lookup_interval: Duration,
    /// Timeout of one conductor HTTP request (`ipa-http-request-timeout`).
    pub http_request_timeout: Duration,
    /// Forced conductor API version (`ipa-ironic-api-version`).
    pub ironic_api_version: Option<(u32, u32)>,
    /// Serve HTTPS with a self-signed certificate when the conductor supports it
    /// (`ipa-enable-auto-tls`, default true).
    pub auto_tls: bool,
    /// Minimum gap between a forced heartbeat and the previous one.
    pub min_heartbeat_interval: Duration,
    /// Largest command request body accepted, in bytes.
    pub max_request_bytes: usize,
    /// Devices the agent may write in host mode (`--allow-device`).
    pub allowed_devices: Vec<PathBuf>,
    /// The record of the ramdisk's network (`coreos_copy_network`): in the
    /// ramdisk what init wrote, in host mode `--network-record`.
    pub network_record: Option<PathBuf>,
    /// The directory of executable hardware managers' manifests
    /// (`agent/docs/own-steps.md`): in the ramdisk
    /// `/etc/ironic-python-agent/managers`, in host mode `--managers-dir`;
    /// `None`: no such managers.
    pub exec_managers_dir: Option<PathBuf>,
    /// Ramdisk or host mode.
    pub mode: RunMode,
    /// The host's root filesystem when the agent runs as OpenShift's
    /// `ironic-agent` container on a live system (`/mnt/coreos`, where the
    /// unit binds `/`): host tools (`coreos-installer`, `journalctl`,
    /// `hostnamectl`) run chrooted there. `None` in the ramdisk and in
    /// plain host mode.
    pub host_root: Option<PathBuf>,
    /// NTP server the clock is set from before any TLS (`ipa-ntp-server`).
    pub ntp_server: Option<String>,
    /// The configuration files' `[mdns]` group.
    pub mdns: groups::MdnsOptions,
    /// The configuration files' `[metrics]` and `[metrics_statsd]`, which
    /// the lookup answer overrides ([`groups::overlay_metrics`]).
    pub metrics_defaults: serde_json::Value,
    /// The configuration files' `[container]` group as written (option →
    /// value), read into typed settings by the container steps module,
    /// where the lookup answer's `agent_containers` overlays it.
    pub container_group: std::collections::BTreeMap<String, String>,
    /// Refuse container pulls without TLS verification
    /// (`ipa-container-require-tls-verify`, this agent's; the same as
    /// `[container] require_tls_verify`, either turns it on).
    pub container_require_tls_verify: bool,
    /// Pause before the hardware is read, for slow controllers
    /// (`ipa-hardware-initialization-delay`).
    pub hardware_initialization_delay: Duration,
    /// Looks for a disk at start (`ipa-disk-wait-attempts`).
    pub disk_wait_attempts: u32,
    /// Pause between those looks (`ipa-disk-wait-delay`).
    pub disk_wait_delay: Duration,
    /// Image download connect and stall timeout
    /// (`ipa-image-download-connection-timeout`).
    pub image_download_connection_timeout: Duration,
    /// Image download retries (`ipa-image-download-connection-retries`).
    pub image_download_connection_retries: u32,
    /// Most connections one image download opens
    /// (`ipa-image-download-connections`, this agent's own; 1: one stream).
    pub image_download_connections: u32,
    /// Longest pause between image download retries
    /// (`ipa-image-download-connection-retry-interval`).
    pub image_download_connection_retry_interval: Duration,
    /// The command API's lowest TLS version until the lookup says
    /// (`ipa-tls-min-version`, `1.2` or `1.3`).
    pub tls_min_version: Option<String>,
    /// The command API's TLS 1.2 suites until the lookup says
    /// (`ipa-tls-cipher-suites`, an OpenSSL cipher list).
    pub tls_cipher_suites: Option<String>,
    /// Curve of the auto-TLS key (`ipa-tls-certificate-curve`).
    pub tls_certificate_curve: TlsCurve,
    /// `ipa-advertise-protocol=https` demands TLS on the command API.
    pub require_tls: bool,
    /// The NIC whose address is advertised (`ipa-network-interface`).
    pub network_interface: Option<String>,
    /// Tries to find the address to advertise (`ipa-ip-lookup-attempts`).
    pub ip_lookup_attempts: u32,
    /// Pause between those tries (`ipa-ip-lookup-timeout`).
    pub ip_lookup_sleep: Duration,
    /// Priority of the `inject_files` deploy step (`ipa-inject-files-priority`).
    pub inject_files_priority: u32,
    /// Default of `install_bootloader`'s `ignore_bootloader_failure`
    /// (`ipa-ignore-bootloader-failure`).
    pub ignore_bootloader_failure: Option<bool>,
    /// A verified discard counts as an erase (`ipa-enable-discard-erase`;
    /// the node's `agent_enable_discard_erase` overrides it).
    pub enable_discard_erase: bool,
    /// Refuse to erase or burn in a disk holding a shared cluster
    /// filesystem (VMFS, GPFS, gfs2) unless the node allows it
    /// (`ipa-guard-special-filesystems`, default on as in IPA 13; off
    /// turns the guard off for every clean).
    pub guard_special_filesystems: bool,
    /// Serve the operator's own certificate on the command API instead of
    /// auto-TLS (IPA's `listen_tls`; [`Config::own_server_certificate`]).
    pub listen_tls: bool,
    /// Its certificate (chain), PEM (`tls_cert_file`).
    pub tls_cert_file: Option<PathBuf>,
    /// Its private key, PEM (`tls_key_file`).
    pub tls_key_file: Option<PathBuf>,
    /// A client certificate presented to the conductor and the inspection
    /// callback (IPA's `certfile`; [`Config::client_certificate`]).
    pub certfile: Option<PathBuf>,
    /// Its private key (IPA's `keyfile`).
    pub keyfile: Option<PathBuf>,
}

/// The curve of the auto-TLS certificate's key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TlsCurve {
    /// NIST P-256.
    P256,
    /// NIST P-384 (IPA's default).
    #[default]
    P384,
}

/// Shortest gap between a heartbeat and the one forced by an async command's
/// end (`min_heartbeat_interval`). IPA waits 5 s (a constant in its
/// `agent.py`): after a step that ended within 5 s of the last heartbeat
/// the conductor learned of it up to 5 s late, 3.5-4.7 s per deploy and
/// per cleaning on the bed (`ironic_drives_ramdisk`'s split). One second
/// still keeps a busy agent from heartbeating in a loop; if the conductor
/// holds the node's lock then, the 409 retry (1-2 s) covers it.
pub const DEFAULT_MIN_HEARTBEAT_INTERVAL: Duration = Duration::from_secs(1);
/// Default limit of a command request body. Ironic sends the node (with an
/// unmasked config drive of up to 64 MiB uncompressed, gzip+base64) in a
/// `write_image` request, up to three times.
pub const DEFAULT_MAX_REQUEST_BYTES: usize = 256 << 20;

impl Default for Config {
    fn default() -> Self {
        Self {
            api_urls: ApiUrls::None,
            inspection_callback_url: None,
            inspection_collectors: vec!["default".into(), "logs".into()],
            inspection_collectors_given: false,
            insecure: false,
            cafile: None,
            image_server_auth: image_server::ImageServerAuth::None,
            fail_if_clock_not_set: false,
            efi_system_partition_mb: groups::EFI_SYSTEM_PARTITION_MB,
            bios_boot_partition_mb: groups::BIOS_BOOT_PARTITION_MB,
            agent_token: None,
            bootif: None,
            advertise_host: None,
            advertise_port: 9999,
            listen_host: IpAddr::from([0u16; 8]),
            listen_port: 9999,
            global_request_id: None,
            debug: false,
            collect_lldp: false,
            lldp_timeout: LLDP_DEFAULT_TIMEOUT,
            lookup_timeout: Duration::from_secs(600),
            image_download_max_duration: None,
            lookup_interval: Duration::from_secs(1),
            lookup_max_interval: Duration::from_secs(60),
            extra_macs: Vec::new(),
            http_request_timeout: Duration::from_secs(30),
            ironic_api_version: None,
            auto_tls: true,
            min_heartbeat_interval: DEFAULT_MIN_HEARTBEAT_INTERVAL,
            max_request_bytes: DEFAULT_MAX_REQUEST_BYTES,
            allowed_devices: Vec::new(),
            network_record: None,
            exec_managers_dir: None,
            mode: RunMode::Host,
            host_root: None,
            ntp_server: None,
            mdns: groups::MdnsOptions::default(),
            metrics_defaults: serde_json::Value::Null,
            container_group: std::collections::BTreeMap::new(),
            container_require_tls_verify: false,
            hardware_initialization_delay: Duration::ZERO,
            disk_wait_attempts: 10,
            disk_wait_delay: Duration::from_secs(3),
            image_download_connection_timeout: Duration::from_secs(60),
            image_download_connection_retries: 9,
            image_download_connections: DEFAULT_IMAGE_DOWNLOAD_CONNECTIONS,
            image_download_connection_retry_interval: Duration::from_secs(10),
            tls_min_version: None,
            tls_cipher_suites: None,
            tls_certificate_curve: TlsCurve::P384,
            require_tls: false,
            network_interface: None,
            ip_lookup_attempts: 6,
            ip_lookup_sleep: Duration::from_secs(10),
            inject_files_priority: 0,
            ignore_bootloader_failure: None,
            enable_discard_erase: false,
            guard_special_filesystems: true,
            listen_tls: false,
            tls_cert_file: None,
            tls_key_file: None,
            certfile: None,
            keyfile: None,
        }
    }
}

/// Why an `ipa-api-url` value is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApiUrlError {
    /// Nothing but commas and spaces.
    #[error("no URL given")]
    Empty,
    /// Not http(s).
    #[error("{0:?} does not start with http:// or https://")]
    Scheme(String),
    /// Not a URL.
    #[error("{0:?} is not a valid URL: {1}")]
    Invalid(String, String),
}

/// Where the kernel command line is read from unless a file is named.
pub const CMDLINE: &str = "/proc/cmdline";

/// The kernel command line from `path` (default [`CMDLINE`]): the one
/// reader of it. An unreadable file is an error naming it.
pub fn read_cmdline(path: Option<&std::path::Path>) -> anyhow::Result<String> {
    let path = path.unwrap_or(std::path::Path::new(CMDLINE));
    std::fs::read_to_string(path)
        .map_err(|e| anyhow::anyhow!("reading kernel parameters from {}: {e}", path.display()))
}

/// The kernel parameters from `path` (see [`read_cmdline`]).
pub fn read_kernel_params(path: Option<&std::path::Path>) -> anyhow::Result<KernelParams> {
    Ok(KernelParams::parse(&read_cmdline(path)?))
}

/// The configuration the kernel parameters at `path` give (see
/// [`read_kernel_params`]); parameters that do not parse are logged and
/// left at their defaults, as IPA does.
pub fn from_cmdline(path: Option<&std::path::Path>) -> anyhow::Result<Config> {
    load(path, None)
}

/// Where the ramdisk keeps the parameters a virtual floppy (`ir-vfd-dev`,
/// `parameters.txt`) gave, relative to the root.
pub const VMEDIA_PARAMS: &str = "etc/ironic-python-agent/vmedia-parameters.txt";

/// Lays over `params` what lives under `root`: parameters from a virtual
/// floppy (they win over the kernel's, as in IPA), then IPA's configuration
/// files ([`files`]), which win over both.
pub fn merge_local(params: &mut KernelParams, root: &std::path::Path) -> files::FileOptions {
    merge_local_with(params, root, files::read)
}

/// [`merge_local`] with the files `read_files` reads under `root`.
fn merge_local_with(
    params: &mut KernelParams,
    root: &std::path::Path,
    read_files: fn(&std::path::Path) -> files::FileOptions,
) -> files::FileOptions {
    if let Ok(text) = std::fs::read_to_string(root.join(VMEDIA_PARAMS)) {
        for (k, v) in KernelParams::parse(&text).iter() {
            params.set(k, v);
        }
    }
    let f = read_files(root);
    f.apply_to(params);
    f
}

/// The configuration: kernel parameters at `cmdline` (see
/// [`read_kernel_params`]), then, with a `root` (`/` in the ramdisk), the
/// virtual-media parameters and configuration files under it
/// ([`merge_local`]). Values that do not parse are logged and left at
/// their defaults, as IPA does.
pub fn load(
    cmdline: Option<&std::path::Path>,
    root: Option<&std::path::Path>,
) -> anyhow::Result<Config> {
    load_with(cmdline, root, files::read)
}

/// [`load`] with the configuration files `read_files` reads under `root`.
fn load_with(
    cmdline: Option<&std::path::Path>,
    root: Option<&std::path::Path>,
    read_files: fn(&std::path::Path) -> files::FileOptions,
) -> anyhow::Result<Config> {
    let mut params = read_kernel_params(cmdline)?;
    let files = root.map(|r| merge_local_with(&mut params, r, read_files));
    let (mut config, errors) = Config::from_kernel_params(&params);
    for e in errors {
        tracing::warn!("{e}");
    }
    for n in ipa_params::kernel_param_notes(params.iter().map(|(k, _)| k)) {
        tracing::warn!("{n}");
    }
    if let Some(f) = files {
        for n in f.configure(&mut config, &params) {
            if n.starts_with("ERROR") {
                tracing::error!("configuration: {n}");
            } else {
                tracing::info!("configuration: {n}");
            }
        }
    }
    Ok(config)
}

/// Parses `ipa-api-url`: `mdns`, or a comma list of `http(s)://` URLs.
/// Entries with another scheme are an error for the whole value, as silently
/// dropping one would hide a typo that sends the agent to the wrong place.
pub fn parse_api_urls(raw: &str) -> Result<ApiUrls, ApiUrlError> {
    let raw = raw.trim();
    if raw.eq_ignore_ascii_case("mdns") {
        return Ok(ApiUrls::Mdns);
    }
    let urls: Vec<String> = raw
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.trim_end_matches('/').to_string())
        .collect();
    if urls.is_empty() {
        return Err(ApiUrlError::Empty);
    }
    for u in &urls {
        if !(u.starts_with("http://") || u.starts_with("https://")) {
            return Err(ApiUrlError::Scheme(u.clone()));
        }
        reqwest::Url::parse(u).map_err(|e| ApiUrlError::Invalid(u.clone(), e.to_string()))?;
    }
    Ok(ApiUrls::Urls(urls))
}

/// Parses `MAJOR.MINOR`.
pub fn parse_version(raw: &str) -> Option<(u32, u32)> {
    let (a, b) = raw.trim().split_once('.')?;
    Some((a.parse().ok()?, b.parse().ok()?))
}

#[cfg(test)]
mod tests;
