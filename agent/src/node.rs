//! The node as the conductor sends it with a command (`node` of
//! `get_*_steps` and `execute_*_step`, the lookup's node): checked once
//! where the request arrives, so a handler receives a [`Node`], never loose
//! JSON. The sections IPA reads (`properties`, `instance_info`,
//! `driver_info`, `driver_internal_info`) must be objects and the UUID a
//! string; a bad one is named by its path (`node.properties: invalid type:
//! string "x", expected a map`). Lower layers that read keys of their own
//! (root-device hints, `skip_block_devices`, erase and burn-in knobs, the
//! partition-image boot mode) read them from [`Node::document`].

use serde::Deserialize;
use serde_json::{Map, Value};

/// The node's sections, for the shape check (the values are read from
/// the document, so the sections themselves are only deserialised).
#[derive(Debug, Deserialize)]
#[allow(dead_code)]
struct Sections {
    #[serde(default)]
    uuid: Option<String>,
    #[serde(default)]
    properties: Option<Map<String, Value>>,
    #[serde(default)]
    instance_info: Option<Map<String, Value>>,
    #[serde(default)]
    driver_info: Option<Map<String, Value>>,
    #[serde(default)]
    driver_internal_info: Option<Map<String, Value>>,
}

/// A node document whose sections have the shapes IPA relies on.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    doc: Value,
}

/// A node whose section has the wrong type.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {reason}")]
pub struct NodeError {
    /// The JSON path below the node (`properties`).
    pub path: String,
    /// What is wrong.
    pub reason: String,
}

impl Node {
    /// The node in `doc`; `None` when `doc` is not an object (IPA ignores
    /// such a node: nothing is cached or read from it).
    pub fn parse(doc: Value) -> Result<Option<Node>, NodeError> {
        if !doc.is_object() {
            return Ok(None);
        }
        serde_path_to_error::deserialize::<_, Sections>(&doc).map_err(|e| NodeError {
            path: e.path().to_string(),
            reason: e.into_inner().to_string(),
        })?;
        Ok(Some(Node { doc }))
    }

    /// A node from a document known to be one (the tests' step calls):
    /// `None` when it is not an object or a section has the wrong type.
    pub fn from_document(doc: Value) -> Option<Node> {
        Node::parse(doc).ok().flatten()
    }

    /// The node's UUID, when it has one.
    pub fn uuid(&self) -> Option<&str> {
        self.doc.get("uuid").and_then(Value::as_str)
    }

    /// The whole document, an object.
    pub fn document(&self) -> &Value {
        &self.doc
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn sections_must_be_objects_and_are_named_when_not() {
        let n = Node::parse(json!({"uuid": "u1", "properties": {"a": 1}, "instance_info": null}))
            .unwrap()
            .unwrap();
        assert_eq!(n.uuid(), Some("u1"));
        assert_eq!(n.document()["properties"]["a"], 1);
        assert!(n.document()["instance_info"].is_null());
        assert_eq!(Node::parse(json!("x")).unwrap(), None);
        assert_eq!(Node::parse(Value::Null).unwrap(), None);
        let e = Node::parse(json!({"properties": "x"})).unwrap_err();
        assert_eq!(e.path, "properties");
        assert!(e.reason.contains("expected a map"), "{e}");
        let e = Node::parse(json!({"uuid": 5})).unwrap_err();
        assert_eq!(e.path, "uuid");
        assert_eq!(Node::from_document(json!({"driver_info": []})), None);
    }
}
