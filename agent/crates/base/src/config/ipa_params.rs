//! Every option of ironic-python-agent 13.0.0 (`config.py`, its kernel
//! parameters and the few read elsewhere) and what this agent does with
//! it: supported (where), ignored on purpose (why), or not applicable
//! (why). The parameter table of `agent/docs/ipa-parameters.md` is this
//! table; a test (`tests/ipa_params.rs`) keeps the two equal and proves
//! each supported option is parsed. Configuration files ([`super::files`])
//! take supported options by their option name. One row is this agent's
//! own options, not IPA's (`container.require_tls_verify`,
//! `image_download_connections`).

/// What the agent does with one IPA option.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// Parsed and acted on; the text says where.
    Supported(&'static str),
    /// Understood and deliberately not acted on; the text says why.
    Ignored(&'static str),
    /// Has no meaning for this agent; the text says why.
    NotApplicable(&'static str),
}

impl Status {
    /// The parameter table's word for it (`agent/docs/ipa-parameters.md`).
    pub fn word(self) -> &'static str {
        match self {
            Self::Supported(_) => "supported",
            Self::Ignored(_) => "ignored",
            Self::NotApplicable(_) => "not applicable",
        }
    }

    /// Where or why.
    pub fn text(self) -> &'static str {
        match self {
            Self::Supported(t) | Self::Ignored(t) | Self::NotApplicable(t) => t,
        }
    }
}

/// One IPA option.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Param {
    /// The option's name in IPA's configuration files.
    pub option: &'static str,
    /// Its kernel parameter, if IPA has one.
    pub kernel: Option<&'static str>,
    /// What this agent does with it.
    pub status: Status,
    /// A valid value other than the default (tests set it and expect a
    /// different configuration).
    pub example: &'static str,
}

const fn p(
    option: &'static str,
    kernel: Option<&'static str>,
    status: Status,
    example: &'static str,
) -> Param {
    Param {
        option,
        kernel,
        status,
        example,
    }
}

use Status::{Ignored, NotApplicable, Supported};

const OWN_LOGS: &str =
    "logs go to the console and to the agent's log buffer (log.collect_system_logs)";
const CONTAINER: &str = "[container] of a configuration file; the conductor's lookup (agent_containers) overrides it option by option, as in IPA (container_steps/settings.rs)";
const IMAGE_SERVER_AUTH: &str = "[DEFAULT] of a configuration file: with http_basic and both a user and a password, HTTP basic authentication for image downloads whose image_info brings no credentials of its own (the conductor's win, as in IPA); http_basic without both is logged as an error and nothing is sent (config/image_server.rs, commands/dispatch/context.rs)";
const CONTAINER_OPTIONS: &str = "[container] of a configuration file, overridden by the conductor's lookup; podman's syntax, the subset the agent translates (container_steps/options.rs): --tls-verify, --authfile, --creds to pull; --rm, --network, --privileged, --volume, --device, --env to run; any other option fails the step naming it";
const NO_QEMU_IMG: &str =
    "images are converted by the agent's own streaming code, never by qemu-img or dd";

/// IPA 13.0.0's options, in `config.py`'s order, then those read elsewhere.
pub const PARAMS: &[Param] = &[
    p("api_url", Some("ipa-api-url"), Supported("conductor URLs, or mdns (config/mod.rs)"), "https://192.0.2.1:6385"),
    p("global_request_id", Some("ipa-global-request-id"), Supported("sent as X-OpenStack-Request-ID (conductor/client.rs)"), "req-1"),
    p("listen_host", Some("ipa-listen-host"), Supported("address the command API binds (server.rs)"), "127.0.0.1"),
    p("listen_port", Some("ipa-listen-port"), Supported("port the command API binds (server.rs)"), "9998"),
    p("listen_tls", Some("ipa-listen-tls"), Supported("the command API serves the operator's certificate instead of auto-TLS (agent.rs); the kernel parameter is this agent's"), "true"),
    p("tls_cert_file", Some("ipa-tls-cert-file"), Supported("the command API's certificate with listen_tls (tls/); the kernel parameter is this agent's"), "/etc/cert.pem"),
    p("tls_key_file", Some("ipa-tls-key-file"), Supported("its private key (tls/); the kernel parameter is this agent's"), "/etc/key.pem"),
    p("enable_auto_tls", Some("ipa-enable-auto-tls"), Supported("auto-TLS on or off (agent.rs); the kernel parameter is this agent's"), "false"),
    p("auto_tls_allowed_clock_skew", None, Ignored("the certificate is valid from an hour before it was made, IPA's default skew"), "7200"),
    p("tls_min_version", Some("ipa-tls-min-version"), Supported("the command API's lowest TLS version until the lookup says (tls/)"), "1.3"),
    p("tls_cipher_suites", Some("ipa-tls-cipher-suites"), Supported("the command API's TLS 1.2 suites until the lookup says (tls/)"), "ECDHE-ECDSA-AES256-GCM-SHA384"),
    p("tls_certificate_curve", Some("ipa-tls-certificate-curve"), Supported("the auto-TLS key's curve: p256 or p384 (tls/)"), "p256"),
    p("advertise_host", Some("ipa-advertise-host"), Supported("address in the callback URL (agent.rs)"), "192.0.2.9"),
    p("advertise_port", Some("ipa-advertise-port"), Supported("port in the callback URL (agent.rs)"), "9998"),
    p("advertise_protocol", Some("ipa-advertise-protocol"), Supported("https demands TLS on the command API and fails clearly without it; http leaves auto-TLS to decide, as in IPA (agent.rs)"), "https"),
    p("ip_lookup_attempts", Some("ipa-ip-lookup-attempts"), Supported("tries to find the address to advertise (agent.rs)"), "3"),
    p("ip_lookup_sleep", Some("ipa-ip-lookup-timeout"), Supported("pause between those tries (agent.rs)"), "2"),
    p("network_interface", Some("ipa-network-interface"), Supported("the NIC whose address is advertised (agent.rs)"), "eth1"),
    p("lookup_timeout", Some("ipa-lookup-timeout"), Supported("lookup budget (agent.rs)"), "60"),
    p("lookup_interval", Some("ipa-lookup-interval"), Supported("first lookup back-off (agent.rs)"), "5"),
    p("lldp_timeout", Some("ipa-lldp-timeout"), Supported("LLDP listening time, 30 s by default as in IPA, all NICs at once, each done at its first frame (config/mod.rs)"), "35"),
    p("collect_lldp", Some("ipa-collect-lldp"), Supported("LLDP in the inventory (inspect.rs)"), "true"),
    p("inspection_callback_url", Some("ipa-inspection-callback-url"), Supported("inspection before lookup (inspect.rs)"), "https://192.0.2.1:6385/v1/continue_inspection"),
    p("inspection_collectors", Some("ipa-inspection-collectors"), Supported("collectors run for inspection (collectors/)"), "default,lldp"),
    p("inspection_dhcp_wait_timeout", Some("ipa-inspection-dhcp-wait-timeout"), Ignored("the ramdisk's init configures every NIC before the agent starts and reports each one's result"), "30"),
    p("inspection_dhcp_all_interfaces", Some("ipa-inspection-dhcp-all-interfaces"), Ignored("the ramdisk's init runs DHCP on every NIC with a link"), "true"),
    p("hardware_initialization_delay", Some("ipa-hardware-initialization-delay"), Supported("pause, logged, before the hardware is read (agent.rs)"), "5"),
    p("disk_wait_attempts", Some("ipa-disk-wait-attempts"), Supported("looks for a disk at start, each logged (agent.rs)"), "3"),
    p("disk_wait_delay", Some("ipa-disk-wait-delay"), Supported("pause between those looks (agent.rs)"), "1"),
    p("insecure", Some("ipa-insecure"), Supported("no TLS verification towards the conductor and image servers"), "true"),
    p("cafile", None, Supported("CA bundle for the conductor, image servers and inspection (config/files.rs)"), "/etc/ironic-python-agent/ironic.crt"),
    p("certfile", Some("ipa-certfile"), Supported("client certificate for the conductor and the inspection callback (tls/); the kernel parameter is this agent's"), "/etc/client.pem"),
    p("keyfile", Some("ipa-keyfile"), Supported("its private key (tls/); the kernel parameter is this agent's"), "/etc/client.key"),
    p("introspection_daemon", None, Ignored("inspection runs once per boot, before lookup"), "true"),
    p("introspection_daemon_post_interval", None, Ignored("inspection runs once per boot, before lookup"), "60"),
    p("ntp_server", Some("ipa-ntp-server"), Supported("clock set by SNTP before any TLS (clock/); in host mode only measured"), "192.0.2.1"),
    p("fail_if_clock_not_set", None, Supported("[DEFAULT] of a configuration file: when the clock cannot be set from ntp_server, the agent does not go on at start (it tries again every 10 s, as IPA's service restarts) and a power action fails with a command error; off, a failure is logged (startup.rs, commands/standby.rs)"), "true"),
    p("agent_token", Some("ipa-agent-token"), Supported("pre-shared token (state.rs)"), "x"),
    p("image_server_user", None, Supported(IMAGE_SERVER_AUTH), "u"),
    p("image_server_password", None, Supported(IMAGE_SERVER_AUTH), "p"),
    p("image_server_auth_strategy", None, Supported(IMAGE_SERVER_AUTH), "http_basic"),
    p("image_download_connection_timeout", Some("ipa-image-download-connection-timeout"), Supported("connect and stall timeout of image downloads (commands/image.rs)"), "30"),
    p("image_download_connection_retries", Some("ipa-image-download-connection-retries"), Supported("image download retries (commands/image.rs)"), "3"),
    p("image_download_connection_retry_interval", Some("ipa-image-download-connection-retry-interval"), Supported("longest pause between image download retries (commands/image.rs)"), "2"),
    p("image_download_connections", Some("ipa-image-download-connections"), Supported("this agent's option and kernel parameter, not IPA's: most connections one image download opens; a large image from a server that takes ranges comes in segments over up to this many (at most 8), added while the rate grows; 1 is a single stream, as IPA's (image/fetch/parallel.rs; default 8)"), "2"),
    p("image_download_max_duration", Some("ipa-image-download-max-duration"), Supported("limit on one image download (commands/image.rs)"), "3600"),
    p("ironic_api_version", Some("ipa-ironic-api-version"), Supported("forced conductor API version (agent.rs)"), "1.68"),
    p("enable_vlan_interfaces", Some("ipa-enable-vlan-interfaces"), Supported("VLAN interfaces made by the ramdisk's init (netconf/vlan.rs)"), "eth0.100"),
    p("ignore_bootloader_failure", Some("ipa-ignore-bootloader-failure"), Supported("default of install_bootloader's ignore_bootloader_failure (commands/bootloader.rs)"), "true"),
    p("inject_files_priority", Some("ipa-inject-files-priority"), Supported("priority of the inject_files deploy step (commands/managers/generic/mod.rs)"), "50"),
    p("guard-special-filesystems", Some("ipa-guard-special-filesystems"), Supported("off: disks holding VMFS, GPFS or gfs2 are erased and burnt in without asking the node (disk/fullerase/guard.rs)"), "false"),
    p("enable_discard_erase", Some("ipa-enable-discard-erase"), Supported("a verified discard counts as an erase; off by default as in IPA (disk/fullerase)"), "true"),
    p("md5_enabled", None, Ignored("the conductor's lookup decides (agent_md5_checksum_enable)"), "true"),
    p("http_request_timeout", Some("ipa-http-request-timeout"), Supported("timeout of one conductor request (conductor/client.rs)"), "10"),
    p("config_drive_rebuild", None, Ignored("config drives are always written as the conductor sends them"), "true"),
    p("disable_deep_image_inspection", None, Ignored("the conductor's lookup decides (image/policy.rs)"), "true"),
    p("permitted_image_formats", None, Ignored("the conductor's lookup decides (image/policy.rs)"), "raw"),
    p("disable_bootc_deploy", None, NotApplicable("execute_bootc_install is refused as not supported"), "true"),
    p("enable_bios_bootloader_install", None, Ignored("the conductor's lookup decides (commands/bootloader.rs)"), "true"),
    p("disk_utils.efi_system_partition_size", None, Supported("[disk_utils] of a configuration file: a partition image's EFI system partition, MiB (550 by default; 1 to 65536 taken); software RAID's ESP stays IPA's fixed 550 MiB, as in IPA (config/groups.rs, partimage/layout.rs)"), "1024"),
    p("disk_utils.bios_boot_partition_size", None, Supported("[disk_utils] of a configuration file: a partition image's BIOS boot partition on GPT, MiB (1 by default) (config/groups.rs, partimage/layout.rs)"), "2"),
    p("dd_block_size", None, Ignored(NO_QEMU_IMG), "4M"),
    p("partition_detection_attempts", None, Ignored("the partition table is read back from the device itself, not waited for through udev"), "5"),
    p("partprobe_attempts", None, Ignored("BLKRRPART is retried while the kernel answers EBUSY (udev probing), for up to 30 s, then its error reported (disk::busy)"), "5"),
    p("image_convert_memory_limit", None, Ignored(NO_QEMU_IMG), "4096"),
    p("image_convert_attempts", None, Ignored(NO_QEMU_IMG), "5"),
    p("check_device_interval", None, NotApplicable("the agent starts md arrays itself at ramdisk start (no udev to wait for)"), "2"),
    p("check_device_max_retries", None, NotApplicable("the agent starts md arrays itself at ramdisk start (no udev to wait for)"), "5"),
    p("container.allow_arbitrary_containers", None, Supported(CONTAINER), "true"),
    p("container.allowed_containers", None, Supported(CONTAINER), "registry.example/x:1"),
    p("container.container_steps_file", None, Supported(CONTAINER), "/etc/steps.yaml"),
    p("container.runner", None, Ignored("images always run with the ramdisk's crun; podman and docker are accepted as IPA's choices, another value is noted (container_steps/settings.rs)"), "docker"),
    p("container.pull_options", None, Supported(CONTAINER_OPTIONS), "--tls-verify=false"),
    p("container.run_options", None, Supported(CONTAINER_OPTIONS), "--privileged"),
    p("container.require_tls_verify", Some("ipa-container-require-tls-verify"), Supported("this agent's option and kernel parameter, not IPA's: a container pull with --tls-verify=false fails the step naming the image and the option, before any connection; the file, the kernel parameter or the lookup can turn it on, none can turn it off (container_steps/policy.rs)"), "true"),
    p("debug", Some("ipa-debug"), Supported("the agent's debug logging, its libraries at info as IPA's oslo.log defaults leave them (cli/mod.rs); in the ramdisk PID 1 starts the agent with --debug (init/access.rs); no console shell, which only agent.shell=1 opens"), "true"),
    p("log_file", None, Ignored(OWN_LOGS), "/var/log/ipa.log"),
    p("use_stderr", None, Ignored(OWN_LOGS), "false"),
    p("inspection_benchmarks", Some("ipa-inspection-benchmarks"), Ignored("no benchmark collectors: burn-in steps measure the hardware instead"), "cpu"),
    p("mdns.use_mdns", Some("ipa-use-mdns"), Supported("find Ironic by mDNS when no API URL is given, as ipa-api-url=mdns; [mdns] of a configuration file overrides the kernel parameter, but not ipa-api-url=mdns (config/mod.rs, config/groups.rs)"), "true"),
    p("container_auth", Some("ipa-container-auth-*"), NotApplicable("registry credentials are given in [container] pull_options as --creds or --authfile (container_steps/options.rs)"), "x"),
    p("standalone", Some("ipa-standalone"), NotApplicable("removed from IPA in 2021; refused with a message"), "true"),
    p("mdns.allowed_overrides", None, Supported("[mdns] of a configuration file; of the options listed, this agent takes inspection_callback_url and ntp_server from an advertisement (config/groups.rs, Config::apply_mdns_overrides)"), "ntp_server"),
    p("mdns.lookup_attempts", None, Ignored("the browse runs until the lookup timeout instead of IPA's 3 attempts (agent.rs); a file setting it gets a note (config/groups.rs)"), "5"),
    p("mdns.params", None, Ignored("TXT overrides come from the advertisement itself (discovery.rs)"), "ipa_debug:1"),
    p("mdns.interfaces", None, Supported("[mdns] of a configuration file: mDNS browses only on the interfaces with these addresses (config/groups.rs, discovery.rs)"), "10.0.0.2"),
    p("metrics.backend", None, Supported("[metrics] of a configuration file; the conductor's lookup overrides it option by option, as in IPA (config/groups.rs, metrics.rs)"), "statsd"),
    p("metrics.prepend_host", None, Supported("[metrics]; the lookup overrides it (config/groups.rs)"), "true"),
    p("metrics.prepend_host_reverse", None, Supported("[metrics]; the lookup overrides it (config/groups.rs)"), "false"),
    p("metrics.global_prefix", None, Supported("[metrics]; the lookup overrides it (config/groups.rs)"), "ironic"),
    p("metrics_statsd.statsd_host", None, Supported("[metrics_statsd]; the lookup overrides it (config/groups.rs)"), "192.0.2.5"),
    p("metrics_statsd.statsd_port", None, Supported("[metrics_statsd]; the lookup overrides it (config/groups.rs)"), "8126"),
];

/// The kernel parameter a configuration file's `option` sets, for the
/// options this agent supports and parses as a kernel parameter.
pub fn file_option_param(option: &str) -> Option<&'static str> {
    find(option)
        .filter(|p| matches!(p.status, Status::Supported(_)))
        .and_then(|p| p.kernel)
        .filter(|k| !k.ends_with('*'))
}

/// The table's name for a configuration file's `option` when it is
/// supported with no kernel parameter (read from files only).
pub fn file_only_option(option: &str) -> Option<&'static str> {
    find(option)
        .filter(|p| matches!(p.status, Status::Supported(_)) && p.kernel.is_none())
        .map(|p| p.option)
        .filter(|o| !o.contains('.'))
}

/// Why a configuration file's `option` is not used, for IPA options this
/// agent does not support.
pub fn file_option_refusal(option: &str) -> Option<&'static str> {
    find(option)
        .filter(|p| !matches!(p.status, Status::Supported(_)))
        .map(|p| p.status.text())
}

/// The table's row for `option`.
fn find(option: &str) -> Option<&'static Param> {
    PARAMS.iter().find(|p| same_option(p.option, option))
}

/// Option names compare with `-` and `_` alike, as oslo.config does.
fn same_option(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .all(|(x, y)| x == y || (matches!(x, b'-' | b'_') && matches!(y, b'-' | b'_')))
}

/// The table's row whose kernel parameter is `key` (`ipa-container-auth-*`
/// stands for every key with that prefix).
fn find_kernel(key: &str) -> Option<&'static Param> {
    PARAMS.iter().find(|p| {
        p.kernel.is_some_and(|k| match k.strip_suffix('*') {
            Some(prefix) => key.starts_with(prefix),
            None => k == key,
        })
    })
}

/// One line for each `ipa-*` kernel parameter in `keys` that this agent
/// does not act on: an IPA 13 parameter the table ignores or finds not
/// applicable (with its reason), or one IPA 13 does not have. The agent
/// logs them at start, so nothing an operator sets is silently dropped.
pub fn kernel_param_notes<'a>(keys: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    keys.into_iter()
        .filter(|k| k.starts_with("ipa-"))
        .filter_map(|k| match find_kernel(k) {
            Some(p) if matches!(p.status, Status::Supported(_)) => None,
            Some(p) => Some(format!(
                "kernel parameter {k} is not acted on ({}): {}",
                p.status.word(),
                p.status.text()
            )),
            None => Some(format!(
                "kernel parameter {k} is not an IPA 13 parameter; ignored"
            )),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_parameters_not_acted_on_are_named_with_the_reason() {
        let notes = kernel_param_notes([
            "ipa-api-url",
            "console",
            "ipa-inspection-benchmarks",
            "ipa-container-auth-registry",
            "ipa-frobnicate",
        ]);
        assert_eq!(notes.len(), 3, "{notes:?}");
        assert!(notes[0].starts_with(
            "kernel parameter ipa-inspection-benchmarks is not acted on (ignored): no benchmark"
        ));
        assert!(notes[1].starts_with(
            "kernel parameter ipa-container-auth-registry is not acted on (not applicable)"
        ));
        assert_eq!(
            notes[2],
            "kernel parameter ipa-frobnicate is not an IPA 13 parameter; ignored"
        );
        // Every supported one passes silently.
        let supported: Vec<&str> = PARAMS
            .iter()
            .filter(|p| matches!(p.status, Status::Supported(_)))
            .filter_map(|p| p.kernel)
            .filter(|k| !k.ends_with('*'))
            .collect();
        assert!(kernel_param_notes(supported).is_empty());
    }
}
