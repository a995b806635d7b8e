//! The option groups of IPA's configuration files besides `[DEFAULT]`
//! that this agent reads: `[mdns]` (whether to browse for Ironic at all,
//! which TXT overrides an advertisement may make, and the interfaces to
//! browse on) and `[metrics]` /
//! `[metrics_statsd]` (the agent's own statsd settings, which the
//! conductor's lookup answer overrides option by option, as in IPA 13);
//! `[container]` is kept as written for the container steps' settings;
//! `[disk_utils]` gives the boot partitions' sizes of partition images.
//! `[mdns] lookup_attempts` and `params` are noted and not used (the
//! browse runs until the lookup timeout; TXT overrides come from the
//! advertisement). Also the application of an advertisement's overrides
//! under `[mdns] allowed_overrides` (`Config::apply_mdns_overrides`).

use std::collections::BTreeMap;
use std::net::IpAddr;

use serde_json::{Map, Value};

use super::Config;

/// The groups read, by name: option → value as written.
pub type Groups = BTreeMap<String, BTreeMap<String, String>>;

/// The groups [`super::files`] keeps.
pub const READ: [&str; 5] = [
    "container",
    "disk_utils",
    "mdns",
    "metrics",
    "metrics_statsd",
];

/// IPA's `[disk_utils] efi_system_partition_size` default, MiB.
pub const EFI_SYSTEM_PARTITION_MB: u64 = 550;
/// IPA's `[disk_utils] bios_boot_partition_size` default, MiB.
pub const BIOS_BOOT_PARTITION_MB: u64 = 1;
/// Largest boot partition size taken, MiB (a typo's 550000 would leave no
/// room for the root partition on most disks).
const MAX_BOOT_PARTITION_MB: u64 = 64 * 1024;

/// `[disk_utils]`: the EFI system and BIOS boot partition sizes (MiB) of
/// partition images. A value that is not a whole number from 1 to 65536
/// keeps IPA's default with a note; the group's other options get the
/// parameter table's reason.
pub fn disk_utils(groups: &Groups, notes: &mut Vec<String>) -> (u64, u64) {
    let mut sizes = (EFI_SYSTEM_PARTITION_MB, BIOS_BOOT_PARTITION_MB);
    let Some(g) = groups.get("disk_utils") else {
        return sizes;
    };
    for (key, value) in g {
        let slot = match key.as_str() {
            "efi_system_partition_size" => &mut sizes.0,
            "bios_boot_partition_size" => &mut sizes.1,
            other => {
                let why =
                    super::ipa_params::file_option_refusal(other).unwrap_or("not an IPA 13 option");
                notes.push(format!("[disk_utils] {other} ignored: {why}"));
                continue;
            }
        };
        match value.trim().parse::<u64>() {
            Ok(mb) if (1..=MAX_BOOT_PARTITION_MB).contains(&mb) => *slot = mb,
            _ => notes.push(format!(
                "[disk_utils] {key} = {value:?} is not a size in MiB from 1 to {MAX_BOOT_PARTITION_MB}; IPA's default {} MiB applies",
                *slot
            )),
        }
    }
    sizes
}

/// IPA's default `[mdns] allowed_overrides`.
pub const MDNS_DEFAULT_OVERRIDES: [&str; 2] = ["inspection_callback_url", "ntp_server"];

/// What `[mdns]` sets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MdnsOptions {
    /// Options an advertisement's `ipa_<option>` TXT records may override
    /// (an empty list blocks them all).
    pub allowed_overrides: Vec<String>,
    /// Addresses of the interfaces to browse on; empty: every interface.
    pub interfaces: Vec<IpAddr>,
    /// `use_mdns` as a file sets it: IPA 13's switch for finding Ironic by
    /// mDNS when no `api_url` is given; its default is `ipa-use-mdns`,
    /// which a file's value overrides ([`super::load`]).
    pub use_mdns: Option<bool>,
}

impl Default for MdnsOptions {
    fn default() -> Self {
        MdnsOptions {
            allowed_overrides: MDNS_DEFAULT_OVERRIDES.map(String::from).to_vec(),
            interfaces: Vec::new(),
            use_mdns: None,
        }
    }
}

/// oslo.config's list: comma-separated, each item trimmed, empty ones
/// dropped.
fn list(v: &str) -> Vec<String> {
    v.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect()
}

/// oslo.config's boolean: the kernel parameters' words, any case, but an
/// empty value is no value.
pub(super) fn oslo_bool(v: &str) -> Option<bool> {
    if v.trim().is_empty() {
        return None;
    }
    super::cmdline::parse_bool(v)
}

/// `[mdns]` from `groups`; a value that does not parse keeps IPA's
/// default and adds a note naming it.
pub fn mdns(groups: &Groups, notes: &mut Vec<String>) -> MdnsOptions {
    let mut out = MdnsOptions::default();
    let Some(g) = groups.get("mdns") else {
        return out;
    };
    for (key, value) in g {
        match key.as_str() {
            "allowed_overrides" => out.allowed_overrides = list(value),
            "interfaces" => {
                let mut ips = Vec::new();
                for item in list(value) {
                    match item.parse::<IpAddr>() {
                        Ok(ip) => ips.push(ip),
                        Err(_) => notes.push(format!(
                            "[mdns] interfaces: {item:?} is not an IP address; ignored"
                        )),
                    }
                }
                out.interfaces = ips;
            }
            "use_mdns" => match oslo_bool(value) {
                Some(b) => out.use_mdns = Some(b),
                None => notes.push(format!(
                    "[mdns] use_mdns = {value:?} does not parse; ipa-use-mdns (or false) applies"
                )),
            },
            "lookup_attempts" | "params" => notes.push(format!(
                "[mdns] {key} is not used: the browse runs until the lookup timeout, TXT overrides come from the advertisement"
            )),
            other => notes.push(format!("[mdns] {other} is not an IPA 13 option; ignored")),
        }
    }
    out
}

/// The options of `[metrics]` and `[metrics_statsd]` and their types.
const METRICS_OPTIONS: [(&str, &str, Kind); 6] = [
    ("metrics", "backend", Kind::Text),
    ("metrics", "prepend_host", Kind::Bool),
    ("metrics", "prepend_host_reverse", Kind::Bool),
    ("metrics", "global_prefix", Kind::Text),
    ("metrics_statsd", "statsd_host", Kind::Text),
    ("metrics_statsd", "statsd_port", Kind::Port),
];

#[derive(Debug, Clone, Copy)]
enum Kind {
    Text,
    Bool,
    Port,
}

/// `[metrics]` and `[metrics_statsd]` as the lookup answer's `metrics` and
/// `metrics_statsd` objects (what [`crate::metrics::Metrics`] reads); a
/// value that does not parse is left out with a note.
pub fn metrics_defaults(groups: &Groups, notes: &mut Vec<String>) -> Value {
    let mut doc = Map::new();
    for group in ["metrics", "metrics_statsd"] {
        let Some(g) = groups.get(group) else { continue };
        let mut obj = Map::new();
        for (key, value) in g {
            let Some((_, _, kind)) = METRICS_OPTIONS
                .iter()
                .find(|(gr, k, _)| *gr == group && k == key)
            else {
                notes.push(format!("[{group}] {key} is not an IPA 13 option; ignored"));
                continue;
            };
            let parsed = match kind {
                Kind::Text => Some(Value::String(value.clone())),
                Kind::Bool => oslo_bool(value).map(Value::Bool),
                Kind::Port => value
                    .parse::<u16>()
                    .ok()
                    .filter(|p| *p > 0)
                    .map(Value::from),
            };
            match parsed {
                Some(v) => {
                    obj.insert(key.clone(), v);
                }
                None => notes.push(format!(
                    "[{group}] {key} = {value:?} does not parse; IPA's default applies"
                )),
            }
        }
        doc.insert(group.to_string(), Value::Object(obj));
    }
    Value::Object(doc)
}

/// The lookup answer's `config` with `defaults` ([`metrics_defaults`])
/// under its `metrics` and `metrics_statsd` objects: an option the
/// conductor sends wins, one it leaves out comes from the files.
pub fn overlay_metrics(defaults: &Value, lookup: &Value) -> Value {
    let mut out = lookup.clone();
    if !out.is_object() {
        out = Value::Object(Map::new());
    }
    for group in ["metrics", "metrics_statsd"] {
        let Some(base) = defaults.get(group).and_then(Value::as_object) else {
            continue;
        };
        let mut merged = base.clone();
        if let Some(theirs) = lookup.get(group).and_then(Value::as_object) {
            for (k, v) in theirs {
                merged.insert(k.clone(), v.clone());
            }
        }
        out[group] = Value::Object(merged);
    }
    out
}

/// The options this agent takes from an mDNS advertisement when `[mdns]
/// allowed_overrides` lists them (IPA's default list).
pub const MDNS_OVERRIDABLE: [&str; 2] = MDNS_DEFAULT_OVERRIDES;

impl Config {
    /// A file's `[mdns] use_mdns`, over `ipa-use-mdns` as an oslo.config
    /// file is over the kernel parameters that make IPA's defaults: `true`
    /// browses for Ironic when no API URL is given; `false` turns off a
    /// browse `ipa-use-mdns` asked for, not one `ipa-api-url=mdns` names
    /// (IPA 13 treats that value as its own opt-in). Adds a note on a
    /// change.
    pub fn apply_file_use_mdns(&mut self, params: &super::KernelParams, notes: &mut Vec<String>) {
        let explicit = params
            .get("ipa-api-url")
            .is_some_and(|v| v.trim().eq_ignore_ascii_case("mdns"));
        match self.mdns.use_mdns {
            Some(true) if self.api_urls == super::ApiUrls::None => {
                self.api_urls = super::ApiUrls::Mdns;
                notes.push("[mdns] use_mdns = true: Ironic's API is found by mDNS".into());
            }
            Some(false) if self.api_urls == super::ApiUrls::Mdns && !explicit => {
                self.api_urls = super::ApiUrls::None;
                notes.push(
                    "[mdns] use_mdns = false: no mDNS browse for Ironic (ipa-use-mdns overridden); no heartbeats without an API URL".into(),
                );
            }
            _ => {}
        }
    }

    /// Applies an mDNS advertisement's `ipa_<option>` TXT overrides
    /// ([`crate::discovery::Found::overrides`]) as IPA 13 does: only the
    /// options `[mdns] allowed_overrides` lists (IPA's default: those of
    /// [`MDNS_OVERRIDABLE`]; mDNS is not authenticated); every other one,
    /// one this agent does not take over mDNS, and a value that does not
    /// parse, is skipped. Returns one line per override saying what was
    /// done.
    pub fn apply_mdns_overrides(&mut self, overrides: &[(String, String)]) -> Vec<String> {
        let mut out = Vec::new();
        for (key, value) in overrides {
            if !self.mdns.allowed_overrides.contains(key) {
                out.push(format!(
                    "mDNS override ipa_{key} skipped: not in the [mdns] allowed_overrides ({})",
                    self.mdns.allowed_overrides.join(", ")
                ));
                continue;
            }
            if !MDNS_OVERRIDABLE.contains(&key.as_str()) {
                out.push(format!(
                    "mDNS override ipa_{key} skipped: this agent takes only {} from mDNS",
                    MDNS_OVERRIDABLE.join(" and ")
                ));
                continue;
            }
            let v = value.trim();
            match key.as_str() {
                "inspection_callback_url"
                    if v == "mdns" || v.starts_with("http://") || v.starts_with("https://") =>
                {
                    self.inspection_callback_url = Some(v.to_string());
                }
                "ntp_server" if !v.is_empty() && !v.contains(char::is_whitespace) => {
                    self.ntp_server = Some(v.to_string());
                }
                _ => {
                    out.push(format!(
                        "mDNS override ipa_{key}={value:?} skipped: not a usable value"
                    ));
                    continue;
                }
            }
            out.push(format!("mDNS override: {key} = {v}"));
        }
        for line in &out {
            tracing::info!("{line}");
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn groups(text: &[(&str, &str, &str)]) -> Groups {
        let mut g = Groups::new();
        for (group, k, v) in text {
            g.entry(group.to_string())
                .or_default()
                .insert(k.to_string(), v.to_string());
        }
        g
    }

    #[test]
    fn mdns_group_as_ipa_reads_it() {
        let mut notes = Vec::new();
        assert_eq!(mdns(&Groups::new(), &mut notes), MdnsOptions::default());
        let o = mdns(
            &groups(&[
                ("mdns", "allowed_overrides", "ntp_server, ,"),
                ("mdns", "interfaces", "10.0.0.2, fd00::2,eth0"),
                ("mdns", "lookup_attempts", "5"),
            ]),
            &mut notes,
        );
        assert_eq!(o.allowed_overrides, ["ntp_server"]);
        assert_eq!(
            o.interfaces,
            [
                "10.0.0.2".parse::<IpAddr>().unwrap(),
                "fd00::2".parse().unwrap()
            ]
        );
        assert!(
            notes.iter().any(|n| n.contains("\"eth0\" is not an IP")),
            "{notes:?}"
        );
        assert!(notes
            .iter()
            .any(|n| n.contains("lookup_attempts is not used")));
        let o = mdns(&groups(&[("mdns", "allowed_overrides", "")]), &mut notes);
        assert!(o.allowed_overrides.is_empty(), "an empty list blocks all");
    }

    #[test]
    fn use_mdns_in_a_file_overrides_ipa_use_mdns_but_not_an_explicit_api_url() {
        use crate::config::{ApiUrls, KernelParams};
        let run = |cmdline: &str, value: &str| {
            let params = KernelParams::parse(cmdline);
            let (mut c, _) = Config::from_kernel_params(&params);
            let mut notes = Vec::new();
            c.mdns = mdns(&groups(&[("mdns", "use_mdns", value)]), &mut notes);
            c.apply_file_use_mdns(&params, &mut notes);
            (c.api_urls, notes)
        };
        assert_eq!(run("quiet", "True").0, ApiUrls::Mdns);
        assert_eq!(run("ipa-use-mdns=1", "false").0, ApiUrls::None);
        assert_eq!(
            run("ipa-api-url=mdns", "no").0,
            ApiUrls::Mdns,
            "IPA's own opt-in"
        );
        assert_eq!(
            run("ipa-api-url=http://10.0.0.1:6385", "yes").0,
            ApiUrls::Urls(vec!["http://10.0.0.1:6385".into()]),
            "an API URL wins"
        );
        let (urls, notes) = run("ipa-use-mdns=1", "perhaps");
        assert_eq!(urls, ApiUrls::Mdns, "a bad value leaves ipa-use-mdns");
        assert!(
            notes.iter().any(|n| n.contains("does not parse")),
            "{notes:?}"
        );
    }

    #[test]
    fn disk_utils_sizes_with_defaults_and_bounds() {
        let mut notes = Vec::new();
        assert_eq!(disk_utils(&Groups::new(), &mut notes), (550, 1));
        let g = groups(&[
            ("disk_utils", "efi_system_partition_size", "1024"),
            ("disk_utils", "bios_boot_partition_size", "2"),
        ]);
        assert_eq!(disk_utils(&g, &mut notes), (1024, 2));
        assert!(notes.is_empty(), "{notes:?}");
        let g = groups(&[
            ("disk_utils", "efi_system_partition_size", "0"),
            ("disk_utils", "bios_boot_partition_size", "1M"),
            ("disk_utils", "dd_block_size", "4M"),
        ]);
        assert_eq!(disk_utils(&g, &mut notes), (550, 1));
        assert_eq!(notes.len(), 3, "{notes:?}");
        assert!(notes.iter().any(|n| n.contains("\"0\" is not a size")));
        assert!(notes
            .iter()
            .any(|n| n.starts_with("[disk_utils] dd_block_size ignored:")));
    }

    #[test]
    fn metrics_groups_are_defaults_the_lookup_overrides() {
        let mut notes = Vec::new();
        let d = metrics_defaults(
            &groups(&[
                ("metrics", "backend", "statsd"),
                ("metrics", "prepend_host", "True"),
                ("metrics", "global_prefix", "site"),
                ("metrics", "prepend_host_reverse", "maybe"),
                ("metrics_statsd", "statsd_host", "192.0.2.5"),
                ("metrics_statsd", "statsd_port", "8126"),
                ("metrics_statsd", "statsd_colour", "blue"),
            ]),
            &mut notes,
        );
        assert_eq!(
            d,
            json!({"metrics": {"backend": "statsd", "prepend_host": true, "global_prefix": "site"},
                   "metrics_statsd": {"statsd_host": "192.0.2.5", "statsd_port": 8126}})
        );
        assert_eq!(notes.len(), 2, "{notes:?}");
        let merged = overlay_metrics(
            &d,
            &json!({"metrics": {"global_prefix": "ironic"}, "agent_token": "t"}),
        );
        assert_eq!(
            merged["metrics"]["global_prefix"], "ironic",
            "the conductor wins"
        );
        assert_eq!(merged["metrics"]["backend"], "statsd", "the file fills in");
        assert_eq!(merged["metrics_statsd"]["statsd_port"], 8126);
        assert_eq!(merged["agent_token"], "t");
        assert_eq!(
            overlay_metrics(&json!({}), &json!({"x": 1})),
            json!({"x": 1})
        );
    }
}
