//! The conductor's lookup answer (node, config: agent token, heartbeat
//! timeout, TLS settings...) and the token decision.
#![no_main]

use agent_conductor::conductor::lookup::{decide_token, parse_lookup};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(doc) = serde_json::from_slice::<serde_json::Value>(data) else {
        return;
    };
    if let Ok(r) = parse_lookup(&doc) {
        let token = r.config.agent_token.as_deref();
        let _ = decide_token(token, None);
        let _ = decide_token(token, Some("known"));
    }
});
