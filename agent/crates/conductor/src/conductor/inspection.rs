//! The inspection callback's answer (PROTOCOL.md §4.4): Ironic ≥ 1.84
//! answers with a lookup-style document (node, config, a fresh token),
//! ironic-inspector and older Ironic with `{"uuid": ...}`.

use serde_json::Value;

use super::lookup::{parse_lookup, LookupResult};

/// What the answer to the inspection document told us.
#[derive(Debug, Clone, PartialEq)]
pub struct InspectionAnswer {
    /// The node's UUID, if the answer named it.
    pub node_uuid: Option<String>,
    /// The 1.84 lookup-style answer (node, config, token).
    pub lookup: Option<LookupResult>,
}

/// Whether a callback URL is Ironic's own endpoint (API versions apply).
pub fn is_ironic(url: &str) -> bool {
    url.trim_end_matches('/')
        .ends_with("/v1/continue_inspection")
}

/// `{"node": ..., "config": ...}` (Ironic ≥ 1.84) or `{"uuid": ...}`.
pub fn parse_answer(text: &str) -> InspectionAnswer {
    let doc: Value = serde_json::from_str(text).unwrap_or(Value::Null);
    if doc.get("node").is_some() {
        if let Ok(l) = parse_lookup(&doc) {
            return InspectionAnswer {
                node_uuid: Some(l.node_uuid.clone()),
                lookup: Some(l),
            };
        }
    }
    InspectionAnswer {
        node_uuid: doc
            .get("uuid")
            .or_else(|| doc.pointer("/node/uuid"))
            .and_then(Value::as_str)
            .map(String::from),
        lookup: None,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn answers_at_both_versions() {
        let o = parse_answer(r#"{"uuid": "abc"}"#);
        assert_eq!(o.node_uuid.as_deref(), Some("abc"));
        assert!(o.lookup.is_none());
        let t = "t".repeat(43);
        let o = parse_answer(
            &json!({"node": {"uuid": "u1"}, "config": {"heartbeat_timeout": 300, "agent_token": t}})
                .to_string(),
        );
        assert_eq!(o.node_uuid.as_deref(), Some("u1"));
        assert_eq!(
            o.lookup.unwrap().config.agent_token.as_deref(),
            Some(t.as_str())
        );
        assert_eq!(parse_answer("not json").node_uuid, None);
    }

    #[test]
    fn ironic_urls() {
        assert!(is_ironic("http://10.0.0.1:6385/v1/continue_inspection"));
        assert!(!is_ironic("http://10.0.0.1:5050/v1/continue"));
    }
}
