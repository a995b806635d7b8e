//! The node as the conductor sends it with a command (`node` of
//! `get_*_steps` and `execute_*_step`, the lookup's node): checked once
//! where the request arrives, so a handler receives a [`Node`], never loose
//! JSON. The sections IPA reads (`properties`, `instance_info`,
//! `driver_info`, `driver_internal_info`) must be objects and the UUID a
//! string; a bad one is named by its path (`node.properties: invalid type:
//! string "x", expected a map`). Lower layers that read keys of their own
//! (root-device hints, `skip_block_devices`, erase and burn-in knobs, the
//! partition-image boot mode) read them from [`Node::document`].
//!
//! The node's [`Ports`] (sent beside it with the step commands) are typed
//! the same way: a list of port objects whose fields IPA's managers read
//! have their types, the rest kept as sent.

use serde::{Deserialize, Deserializer, Serialize};
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

/// One of the node's ports as the conductor sends it: Ironic's port
/// document (`address`, `uuid`, `pxe_enabled`, `physical_network`,
/// `local_link_connection`, …); fields not named here are kept as sent.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Port {
    /// The NIC's MAC address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// The port's UUID.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
    /// Whether the node boots from it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pxe_enabled: Option<bool>,
    /// The physical network it is on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub physical_network: Option<String>,
    /// The switch port it is cabled to (`switch_id`, `port_id`,
    /// `switch_info`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_link_connection: Option<Map<String, Value>>,
    /// Every other field, as sent.
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

/// The node's ports: a list, empty when the conductor sent none (`null`
/// or no `ports` at all, as IPA takes it).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(transparent)]
pub struct Ports(pub Vec<Port>);

impl<'de> Deserialize<'de> for Ports {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(Ports(
            Option::<Vec<Port>>::deserialize(d)?.unwrap_or_default(),
        ))
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

    #[test]
    fn ports_are_typed_where_read_and_kept_whole() {
        let sent = json!([{"address": "52:54:00:12:34:56", "pxe_enabled": true,
            "local_link_connection": {"switch_id": "aa:bb:cc:dd:ee:ff", "port_id": "Eth1/1"},
            "physical_network": null, "extra": {"rack": 4}, "node_uuid": "n1"}]);
        let ports: Ports = serde_json::from_value(sent.clone()).unwrap();
        assert_eq!(ports.0[0].address.as_deref(), Some("52:54:00:12:34:56"));
        assert_eq!(ports.0[0].pxe_enabled, Some(true));
        assert_eq!(ports.0[0].other["extra"]["rack"], 4);
        // Back to JSON as sent, but for the null it had.
        let mut back = sent;
        back[0].as_object_mut().unwrap().remove("physical_network");
        assert_eq!(serde_json::to_value(&ports).unwrap(), back);
        let none: Ports = serde_json::from_value(Value::Null).unwrap();
        assert_eq!(none, Ports::default());
        // A wrong type is named by its path.
        let e = serde_path_to_error::deserialize::<_, Ports>(json!([{"pxe_enabled": "yes"}]))
            .unwrap_err();
        assert_eq!(e.path().to_string(), "[0].pxe_enabled");
        assert!(serde_json::from_value::<Ports>(json!({"address": "x"})).is_err());
    }
}
