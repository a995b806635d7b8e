//! The metrics configuration: a configuration file's `[metrics]` and
//! `[metrics_statsd]` groups (as `ironic-python-agent.conf` holds them),
//! the lookup answer's `config` laid over them, and the statsd settings
//! read from the result (pure: nothing is resolved or sent). What the
//! conductor sends wins over the file; accepted settings name a port in
//! 1–65535 and keep IPA's timer prefix.
#![no_main]

use agent_base::config::files;
use agent_base::config::groups::{metrics_defaults, overlay_metrics};
use agent_base::metrics::Settings;
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

// The input: `INI text \0 lookup config JSON \0 hostname`
fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let mut parts = text.splitn(3, '\0');
    let ini = parts.next().unwrap_or_default();
    let lookup: Value = match parts.next().map(serde_json::from_str) {
        Some(Ok(v)) => v,
        _ => Value::Null,
    };
    let hostname = parts.next().unwrap_or_default();

    let file = files::parse(ini, "fuzz.conf");
    let mut notes = Vec::new();
    let defaults = metrics_defaults(&file.groups, &mut notes);
    let merged = overlay_metrics(&defaults, &lookup);
    for group in ["metrics", "metrics_statsd"] {
        if let Some(theirs) = lookup.get(group).and_then(Value::as_object) {
            for (k, v) in theirs {
                assert_eq!(&merged[group][k], v, "the conductor's {group}.{k} lost");
            }
        }
    }
    if let Ok(Some(s)) = Settings::parse(&merged, hostname) {
        assert!(s.prefix.ends_with("ironic_python_agent.api.app"), "{s:?}");
        let port = s.target.rsplit_once(':').map(|(_, p)| p).unwrap_or_default();
        let port: u16 = port.parse().unwrap_or_else(|_| panic!("{s:?}"));
        assert!(port > 0, "{s:?}");
    }
});
