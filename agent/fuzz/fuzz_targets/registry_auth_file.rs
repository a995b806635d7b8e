//! A registry auth file (`--authfile`, containers-auth.json) read for a
//! registry and repository: `registry\nrepository\nJSON`. No panic; a
//! credential found is the decoded `auth` of an entry whose key names
//! that registry, or a namespace of it the repository is in.
#![no_main]

use agent_contents::container_steps::pull::authfile_credentials;
use base64::Engine;
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

/// An `auths` key as the reader compares it.
fn bare(key: &str) -> &str {
    key.trim_start_matches("https://")
        .trim_start_matches("http://")
        .trim_end_matches('/')
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let mut parts = text.splitn(3, '\n');
    let (Some(registry), Some(repository), Some(json)) = (parts.next(), parts.next(), parts.next())
    else {
        return;
    };
    let Ok(Some((user, password))) = authfile_credentials(json, registry, repository) else {
        return;
    };
    let doc: Value = serde_json::from_str(json).expect("the reader parsed it");
    let full = format!("{registry}/{repository}");
    let found = doc["auths"].as_object().expect("auths").iter().any(|(key, entry)| {
        let k = bare(key);
        let names_it = k == registry
            || k == full
            || (k.contains('/') && full.starts_with(k) && full[k.len()..].starts_with('/'));
        let decoded = entry["auth"]
            .as_str()
            .and_then(|a| base64::engine::general_purpose::STANDARD.decode(a.trim()).ok());
        names_it && decoded.as_deref() == Some(format!("{user}:{password}").as_bytes())
    });
    assert!(found, "{user:?} for {full} from {json}");
    assert!(!user.contains(':'));
});
