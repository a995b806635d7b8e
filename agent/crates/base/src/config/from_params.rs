//! [`Config::from_kernel_params`]: the kernel parameters (IPA's `ipa-*`
//! names, PROTOCOL.md §3.1) read into a [`Config`] over its defaults, each
//! malformed value returned beside it so the caller logs it once.

use super::*;

impl Config {
    /// Builds a configuration from kernel parameters. Every malformed value is
    /// returned (and the default kept) so the caller can log it once.
    pub fn from_kernel_params(p: &KernelParams) -> (Self, Vec<ParamError>) {
        let mut c = Config::default();
        let mut errors = Vec::new();

        if let Some(raw) = p.get("ipa-api-url") {
            c.api_urls = parse_api_urls(raw).unwrap_or_else(|e| {
                errors.push(ParamError {
                    key: "ipa-api-url".into(),
                    value: raw.into(),
                    reason: e.to_string(),
                });
                ApiUrls::None
            });
        }
        if c.api_urls == ApiUrls::None && take(&mut errors, p.bool("ipa-use-mdns")) == Some(true) {
            c.api_urls = ApiUrls::Mdns;
        }
        if let Some(raw) = p.get("ipa-inspection-callback-url") {
            if raw == "mdns" || raw.starts_with("http://") || raw.starts_with("https://") {
                c.inspection_callback_url = Some(raw.to_string());
            } else {
                errors.push(bad(
                    "ipa-inspection-callback-url",
                    raw,
                    "expected an http(s) URL or mdns",
                ));
            }
        }
        if let Some(raw) = p.get("ipa-inspection-collectors") {
            c.inspection_collectors_given = true;
            c.inspection_collectors = raw
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(String::from)
                .collect();
        }
        if let Some(v) = take(&mut errors, p.bool("ipa-insecure")) {
            c.insecure = v;
        }
        if let Some(raw) = p.get("ipa-agent-token").filter(|v| !v.is_empty()) {
            c.agent_token = Some(raw.to_string());
        }
        c.bootif = p.get("BOOTIF").filter(|v| !v.is_empty()).map(String::from);
        if let Some(raw) = p.get("ipa-advertise-host").filter(|v| !v.is_empty()) {
            match raw.trim_matches(|c| c == '[' || c == ']').parse() {
                Ok(ip) => c.advertise_host = Some(ip),
                Err(_) => {
                    errors.push(bad(
                        "ipa-advertise-host",
                        raw,
                        "expected an IPv4 or IPv6 address",
                    ));
                }
            }
        }
        if let Some(v) = take(&mut errors, p.number("ipa-advertise-port")) {
            c.advertise_port = v;
        }
        if let Some(raw) = p.get("ipa-listen-host").filter(|v| !v.is_empty()) {
            match raw.trim_matches(|c| c == '[' || c == ']').parse() {
                Ok(ip) => c.listen_host = ip,
                Err(_) => {
                    errors.push(bad(
                        "ipa-listen-host",
                        raw,
                        "expected an IPv4 or IPv6 address",
                    ));
                }
            }
        }
        if let Some(v) = take(&mut errors, p.number("ipa-listen-port")) {
            c.listen_port = v;
        }
        c.global_request_id = p
            .get("ipa-global-request-id")
            .filter(|v| !v.is_empty())
            .map(String::from);
        if let Some(v) = take(&mut errors, p.bool("ipa-debug")) {
            c.debug = v;
        }
        if let Some(v) = take(&mut errors, p.bool("ipa-collect-lldp")) {
            c.collect_lldp = v;
        }
        if let Some(v) = take(&mut errors, p.number::<u64>("ipa-lldp-timeout")) {
            c.lldp_timeout = Duration::from_secs(v);
        }
        if let Some(v) = take(
            &mut errors,
            p.number::<u64>("ipa-image-download-max-duration"),
        ) {
            c.image_download_max_duration = (v > 0).then(|| Duration::from_secs(v));
        }
        if let Some(v) = take(&mut errors, p.number::<u64>("ipa-lookup-timeout")) {
            c.lookup_timeout = Duration::from_secs(v);
        }
        if let Some(v) = take(&mut errors, p.number::<u64>("ipa-lookup-interval")) {
            c.lookup_interval = Duration::from_secs(v.max(1));
        }
        if let Some(v) = take(&mut errors, p.number::<u64>("ipa-http-request-timeout")) {
            c.http_request_timeout = Duration::from_secs(v.max(1));
        }
        if let Some(raw) = p.get("ipa-ironic-api-version").filter(|v| !v.is_empty()) {
            match parse_version(raw) {
                Some(v) => c.ironic_api_version = Some(v),
                None => {
                    errors.push(bad("ipa-ironic-api-version", raw, "expected MAJOR.MINOR"));
                }
            }
        }
        if let Some(v) = take(&mut errors, p.bool("ipa-enable-auto-tls")) {
            c.auto_tls = v;
        }
        more_params(p, &mut c, &mut errors);
        if p.contains("ipa-standalone") {
            errors.push(bad(
                "ipa-standalone",
                p.get("ipa-standalone").unwrap_or_default(),
                "standalone mode is no longer supported (as in IPA since 2021)",
            ));
        }
        (c, errors)
    }
}

/// The parameters added for IPA 13's full set (see [`ipa_params`]).
fn more_params(p: &KernelParams, c: &mut Config, errors: &mut Vec<ParamError>) {
    let text = |k: &str| p.get(k).map(str::trim).filter(|v| !v.is_empty());
    let secs = |errors: &mut Vec<ParamError>, k: &str| {
        take(errors, p.number::<u64>(k)).map(Duration::from_secs)
    };
    c.ntp_server = text("ipa-ntp-server").map(String::from);
    tls_files::tls_files(p, c, errors);
    if let Some(v) = secs(errors, "ipa-hardware-initialization-delay") {
        c.hardware_initialization_delay = v;
    }
    if let Some(v) = take(errors, p.number::<u32>("ipa-disk-wait-attempts")) {
        c.disk_wait_attempts = v;
    }
    if let Some(v) = secs(errors, "ipa-disk-wait-delay") {
        c.disk_wait_delay = v;
    }
    if let Some(v) = secs(errors, "ipa-image-download-connection-timeout") {
        c.image_download_connection_timeout = v.max(Duration::from_secs(1));
    }
    if let Some(v) = take(
        errors,
        p.number::<u32>("ipa-image-download-connection-retries"),
    ) {
        c.image_download_connection_retries = v;
    }
    if let Some(v) = take(errors, p.number::<u32>("ipa-image-download-connections")) {
        c.image_download_connections = v.clamp(1, 8);
    }
    if let Some(v) = secs(errors, "ipa-image-download-connection-retry-interval") {
        c.image_download_connection_retry_interval = v;
    }
    if let Some(v) = text("ipa-tls-min-version") {
        if matches!(v, "1.2" | "1.3") {
            c.tls_min_version = Some(v.to_string());
        } else {
            errors.push(bad("ipa-tls-min-version", v, "expected 1.2 or 1.3"));
        }
    }
    c.tls_cipher_suites = text("ipa-tls-cipher-suites").map(String::from);
    if let Some(v) = text("ipa-tls-certificate-curve") {
        match v.to_ascii_lowercase().as_str() {
            "p256" | "p-256" | "secp256r1" | "prime256v1" => {
                c.tls_certificate_curve = TlsCurve::P256
            }
            "p384" | "p-384" | "secp384r1" => c.tls_certificate_curve = TlsCurve::P384,
            _ => errors.push(bad(
                "ipa-tls-certificate-curve",
                v,
                "expected p256 or p384 (P-521 keys are not available here)",
            )),
        }
    }
    if let Some(v) = text("ipa-advertise-protocol") {
        match v.to_ascii_lowercase().as_str() {
            "http" => c.require_tls = false,
            "https" => c.require_tls = true,
            _ => errors.push(bad("ipa-advertise-protocol", v, "expected http or https")),
        }
    }
    c.network_interface = text("ipa-network-interface").map(String::from);
    if let Some(v) = take(errors, p.bool("ipa-container-require-tls-verify")) {
        c.container_require_tls_verify = v;
    }
    if let Some(v) = take(errors, p.number::<u32>("ipa-ip-lookup-attempts")) {
        c.ip_lookup_attempts = v.max(1);
    }
    if let Some(v) = secs(errors, "ipa-ip-lookup-timeout") {
        c.ip_lookup_sleep = v;
    }
    if let Some(v) = take(errors, p.number::<u32>("ipa-inject-files-priority")) {
        c.inject_files_priority = v;
    }
    if let Some(v) = take(errors, p.bool("ipa-ignore-bootloader-failure")) {
        c.ignore_bootloader_failure = Some(v);
    }
    if let Some(v) = take(errors, p.bool("ipa-enable-discard-erase")) {
        c.enable_discard_erase = v;
    }
    if let Some(v) = take(errors, p.bool("ipa-guard-special-filesystems")) {
        c.guard_special_filesystems = v;
    }
}

pub(super) fn take<T>(errors: &mut Vec<ParamError>, r: Result<Option<T>, ParamError>) -> Option<T> {
    r.unwrap_or_else(|e| {
        errors.push(e);
        None
    })
}

fn bad(key: &str, value: &str, reason: &str) -> ParamError {
    ParamError {
        key: key.into(),
        value: value.into(),
        reason: reason.into(),
    }
}
