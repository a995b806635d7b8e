//! Every key of the lookup answer's `config` that Ironic 39 sends
//! (`ironic/api/controllers/v1/ramdisk.py`, `config()`), and what this
//! agent does with it: honoured (where), or ignored on purpose (why).
//! Keys outside the table are logged once per lookup, so a newer
//! conductor's additions are seen rather than silently dropped.

use serde_json::Value;

/// What the agent does with one lookup `config` key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Handling {
    /// Acted on; the text says where.
    Honoured(&'static str),
    /// Read and deliberately not acted on; the text says why.
    Ignored(&'static str),
}

/// Ironic 39.0.0's lookup `config` keys.
pub const KEYS: &[(&str, Handling)] = &[
    (
        "heartbeat_timeout",
        Handling::Honoured("heartbeat interval 0.3–0.6 × this (agent.rs, conductor/lookup.rs)"),
    ),
    (
        "agent_token",
        Handling::Honoured("the command API's token, `******` keeps a known one (conductor/lookup.rs)"),
    ),
    (
        "agent_token_required",
        Handling::Honoured("always true since Victoria: every state-changing or revealing route needs the token (api/)"),
    ),
    (
        "agent_md5_checksum_enable",
        Handling::Honoured("MD5 image checksums refused unless true (image/checksum.rs, image/info.rs)"),
    ),
    (
        "disable_deep_image_inspection",
        Handling::Honoured("when false, the image's format must be permitted and match disk_format (image/policy.rs)"),
    ),
    (
        "permitted_image_formats",
        Handling::Honoured("the formats an image may be, after any compression (image/policy.rs)"),
    ),
    (
        "agent_skip_bmc_detect",
        Handling::Honoured("no BMC probe for inventories taken after the lookup (commands/logs.rs)"),
    ),
    (
        "enable_bios_bootloader_install",
        Handling::Honoured("image.install_bootloader refuses a BIOS GRUB install unless true (commands/bootloader.rs)"),
    ),
    (
        "tls_min_version",
        Handling::Honoured("the command API's lowest TLS version (tls/)"),
    ),
    (
        "tls_cipher_suites",
        Handling::Honoured("the command API's TLS 1.2 suites (tls/)"),
    ),
    (
        "metrics",
        Handling::Honoured("backend `statsd`: the command API's timers with IPA's names and prefixes (metrics.rs)"),
    ),
    (
        "metrics_statsd",
        Handling::Honoured("where a `statsd` backend sends (metrics.rs)"),
    ),
    (
        "agent_containers",
        Handling::Honoured("overlays the [container] settings option by option (container_steps/settings.rs)"),
    ),
];

/// How the agent handles `key`, if Ironic 39 sends it.
pub fn handling(key: &str) -> Option<Handling> {
    KEYS.iter().find(|(k, _)| *k == key).map(|(_, h)| *h)
}

/// The keys of `config` that are not in [`KEYS`].
pub fn unclassified(config: &Value) -> Vec<String> {
    config
        .as_object()
        .map(|o| {
            o.keys()
                .filter(|k| handling(k).is_none())
                .cloned()
                .collect()
        })
        .unwrap_or_default()
}

/// Logs the keys of `config` this agent does not know.
pub fn log_ignored(config: &Value) {
    for key in unclassified(config) {
        tracing::info!(key, "lookup config key unknown to this agent; ignored");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The `config` object of Ironic 39.0.0's lookup answer with its
    /// defaults, key for key.
    fn ironic_39_config() -> Value {
        json!({
            "metrics": {"backend": "noop", "prepend_host": false, "prepend_uuid": false,
                        "prepend_host_reverse": true, "global_prefix": null},
            "metrics_statsd": {"statsd_host": "localhost", "statsd_port": 8125},
            "heartbeat_timeout": 300,
            "agent_containers": {"allow_arbitrary_containers": false, "allowed_containers": [],
                                 "container_steps_file": "/etc/ironic-python-agent.d/mysteps.yaml",
                                 "runner": "podman", "pull_options": "--tls-verify=false",
                                 "run_options": "--rm --network=host --tls-verify=false"},
            "agent_token": "x",
            "agent_token_required": true,
            "agent_md5_checksum_enable": false,
            "disable_deep_image_inspection": false,
            "permitted_image_formats": ["raw", "gpt", "qcow2", "iso"],
            "agent_skip_bmc_detect": false,
            "enable_bios_bootloader_install": false,
            "tls_min_version": "1.2",
            "tls_cipher_suites": null
        })
    }

    #[test]
    fn every_ironic_39_key_is_classified() {
        assert_eq!(unclassified(&ironic_39_config()), Vec::<String>::new());
        assert_eq!(KEYS.len(), 13);
    }

    #[test]
    fn unknown_keys_are_named() {
        let mut c = ironic_39_config();
        c["agent_new_thing"] = json!(1);
        assert_eq!(unclassified(&c), ["agent_new_thing"]);
        assert_eq!(unclassified(&json!("not an object")), Vec::<String>::new());
    }

    #[test]
    fn every_reason_says_something() {
        for (key, h) in KEYS {
            let (Handling::Honoured(t) | Handling::Ignored(t)) = h;
            assert!(t.len() > 20, "{key}: {t}");
        }
    }
}
