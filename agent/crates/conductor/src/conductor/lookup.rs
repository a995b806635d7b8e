//! The lookup answer (PROTOCOL.md §2.2) and the rules for adopting it: node UUID,
//! heartbeat timeout, token (≥ 32 characters adopted; `******` keeps a
//! pre-shared token), TLS minimum version and the other settings Ironic sends.

use std::time::Duration;

use serde_json::Value;

use agent_contents::image::policy::IPA_DEFAULT_PERMITTED;

/// Largest `heartbeat_timeout` accepted, in seconds (a day; Ironic's
/// default is 300): anything larger, infinite or NaN is refused rather than
/// turned into a duration that cannot exist.
const MAX_HEARTBEAT_TIMEOUT: f64 = 86_400.0;

/// Settings from the lookup `config` that the agent honours.
#[derive(Debug, Clone, PartialEq)]
pub struct LookupConfig {
    /// `heartbeat_timeout`: heartbeats every 0.3–0.6 × this.
    pub heartbeat_timeout: Duration,
    /// `agent_token` as sent (may be `******`).
    pub agent_token: Option<String>,
    /// `tls_min_version` (`"1.2"`, `"1.3"`).
    pub tls_min_version: Option<String>,
    /// `tls_cipher_suites`: an OpenSSL cipher list for TLS 1.2 (Ironic's
    /// `[agent]tls_ciphers`, `null` by default).
    pub tls_cipher_suites: Option<String>,
    /// `agent_md5_checksum_enable`.
    pub md5_allowed: bool,
    /// `permitted_image_formats` (IPA's default `raw, gpt, qcow2` when
    /// absent).
    pub permitted_image_formats: Vec<String>,
    /// Not `disable_deep_image_inspection`: the image's format is checked
    /// against `permitted_image_formats` and the conductor's `disk_format`.
    pub deep_image_inspection: bool,
    /// `agent_skip_bmc_detect`: the BMC is not probed for the inventory.
    pub skip_bmc_detect: bool,
    /// `enable_bios_bootloader_install` (IPA's default: off).
    pub bios_bootloader_install: bool,
    /// The whole `config` object, for settings read later.
    pub raw: Value,
}

/// A successful lookup.
#[derive(Debug, Clone, PartialEq)]
pub struct LookupResult {
    /// The node's UUID.
    pub node_uuid: String,
    /// The node (masked).
    pub node: Value,
    /// The `config` part.
    pub config: LookupConfig,
}

/// Why a lookup answer is not usable.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LookupError {
    /// No `node`.
    #[error("no 'node' in the answer")]
    NoNode,
    /// No `node.uuid` string.
    #[error("no 'node.uuid' in the answer")]
    NoUuid,
    /// A missing or out-of-range heartbeat timeout (the value given).
    #[error(
        "no 'config.heartbeat_timeout' between 0 and {MAX_HEARTBEAT_TIMEOUT} s in the answer (got {0})"
    )]
    HeartbeatTimeout(Value),
}

/// Parses a lookup (or `continue_inspection` 1.84) answer.
pub fn parse_lookup(doc: &Value) -> Result<LookupResult, LookupError> {
    let node = doc.get("node").ok_or(LookupError::NoNode)?;
    let node_uuid = node
        .get("uuid")
        .and_then(Value::as_str)
        .ok_or(LookupError::NoUuid)?
        .to_string();
    // Old APIs put heartbeat_timeout at the top level.
    let config = doc.get("config").cloned().unwrap_or_else(|| doc.clone());
    let heartbeat_timeout = config
        .get("heartbeat_timeout")
        .and_then(Value::as_f64)
        .filter(|t| *t > 0.0 && *t <= MAX_HEARTBEAT_TIMEOUT)
        .ok_or_else(|| {
            LookupError::HeartbeatTimeout(
                config
                    .get("heartbeat_timeout")
                    .cloned()
                    .unwrap_or(Value::Null),
            )
        })?;
    Ok(LookupResult {
        node_uuid,
        node: node.clone(),
        config: LookupConfig {
            heartbeat_timeout: Duration::from_secs_f64(heartbeat_timeout),
            agent_token: config
                .get("agent_token")
                .and_then(Value::as_str)
                .map(String::from),
            tls_min_version: config
                .get("tls_min_version")
                .and_then(Value::as_str)
                .map(String::from),
            tls_cipher_suites: config
                .get("tls_cipher_suites")
                .and_then(Value::as_str)
                .map(String::from),
            md5_allowed: config
                .get("agent_md5_checksum_enable")
                .and_then(Value::as_bool)
                .unwrap_or(false),
            permitted_image_formats: config
                .get("permitted_image_formats")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(Value::as_str)
                        .map(String::from)
                        .collect()
                })
                .unwrap_or_else(|| IPA_DEFAULT_PERMITTED.map(String::from).to_vec()),
            deep_image_inspection: !flag(&config, "disable_deep_image_inspection"),
            skip_bmc_detect: flag(&config, "agent_skip_bmc_detect"),
            bios_bootloader_install: flag(&config, "enable_bios_bootloader_install"),
            raw: config,
        },
    })
}

/// A boolean setting, false when absent or not a boolean.
fn flag(config: &Value, key: &str) -> bool {
    config.get(key).and_then(Value::as_bool).unwrap_or(false)
}

/// What to do with the token of a lookup answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenDecision {
    /// Use this new token.
    Adopt(String),
    /// The conductor already issued a token (`******`): keep the one we know.
    KeepKnown,
    /// The conductor says a token exists but we do not know it: locked out
    /// until the conductor wipes it.
    LockedOut,
    /// No usable token in the answer.
    Missing,
}

/// Applies IPA's token rules (PROTOCOL.md §2.2).
pub fn decide_token(offered: Option<&str>, known: Option<&str>) -> TokenDecision {
    match offered {
        Some(t) if t.len() >= 32 && t != "******" => TokenDecision::Adopt(t.to_string()),
        Some("******") if known.is_some() => TokenDecision::KeepKnown,
        Some("******") => TokenDecision::LockedOut,
        _ => TokenDecision::Missing,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn parses_ironic_39_answer() {
        let doc = json!({"node": {"uuid": "d0838b0d", "properties": {}},
            "config": {"heartbeat_timeout": 300, "agent_token": "x".repeat(43),
                       "tls_min_version": "1.3", "agent_md5_checksum_enable": true,
                       "tls_cipher_suites": "ECDHE-ECDSA-AES256-GCM-SHA384",
                       "permitted_image_formats": ["raw", "qcow2"]}});
        let r = parse_lookup(&doc).unwrap();
        assert_eq!(
            r.config.tls_cipher_suites.as_deref(),
            Some("ECDHE-ECDSA-AES256-GCM-SHA384")
        );
        assert_eq!(r.node_uuid, "d0838b0d");
        assert_eq!(r.config.heartbeat_timeout, Duration::from_secs(300));
        assert_eq!(r.config.tls_min_version.as_deref(), Some("1.3"));
        assert!(r.config.md5_allowed);
        assert_eq!(r.config.permitted_image_formats, ["raw", "qcow2"]);
        assert!(r.config.deep_image_inspection);
        assert!(!r.config.skip_bmc_detect);
        assert!(!r.config.bios_bootloader_install);
        let flags = json!({"node": {"uuid": "u"},
            "config": {"heartbeat_timeout": 300, "disable_deep_image_inspection": true,
                       "agent_skip_bmc_detect": true, "enable_bios_bootloader_install": true}});
        let r = parse_lookup(&flags).unwrap().config;
        assert!(!r.deep_image_inspection && r.skip_bmc_detect && r.bios_bootloader_install);
        assert_eq!(r.permitted_image_formats, ["raw", "gpt", "qcow2"]);
    }

    #[test]
    fn old_answers_and_missing_fields() {
        let r = parse_lookup(&json!({"node": {"uuid": "u"}, "heartbeat_timeout": 10})).unwrap();
        assert_eq!(r.config.heartbeat_timeout, Duration::from_secs(10));
        assert!(parse_lookup(&json!({"node": {}}))
            .unwrap_err()
            .to_string()
            .contains("node.uuid"));
        assert!(parse_lookup(&json!({"node": {"uuid": "u"}, "config": {}}))
            .unwrap_err()
            .to_string()
            .contains("heartbeat_timeout"));
        // Out of range: refused, never a panic on a duration that cannot exist.
        for t in [json!(1e300), json!(-5), json!(0), json!(86_401)] {
            let doc = json!({"node": {"uuid": "u"}, "config": {"heartbeat_timeout": t}});
            let e = parse_lookup(&doc).unwrap_err().to_string();
            assert!(e.contains("between 0 and 86400 s"), "{e}");
        }
    }

    #[test]
    fn token_rules() {
        let t = "a".repeat(43);
        assert_eq!(
            decide_token(Some(&t), None),
            TokenDecision::Adopt(t.clone())
        );
        assert_eq!(
            decide_token(Some("******"), Some(&t)),
            TokenDecision::KeepKnown
        );
        assert_eq!(decide_token(Some("******"), None), TokenDecision::LockedOut);
        assert_eq!(decide_token(Some("short"), None), TokenDecision::Missing);
        assert_eq!(decide_token(None, Some(&t)), TokenDecision::Missing);
    }
}
