//! The node as the conductor sends it with a command (`node` of
//! `get_*_steps` and `execute_*_step`, the lookup's node): checked once
//! where the request arrives, so a handler receives a [`Node`], never loose
//! JSON. The sections IPA reads (`properties`, `instance_info`,
//! `driver_info`, `driver_internal_info`) must be objects and the UUID a
//! string; a bad one is named by its path (`node.properties: invalid type:
//! string "x", expected a map`).
//!
//! `instance_info` and `properties` are typed where the agent reads them
//! ([`InstanceInfo`], [`Properties`]: image location and checksums, boot
//! mode, capabilities, root-device hints, config drive), so a field of the
//! wrong type is named too (`node.instance_info.root_device`);
//! `driver_internal_info` too ([`DriverInternalInfo`]: the erase settings,
//! read leniently as IPA reads them). Keys with
//! errors of their own (`skip_block_devices`) are still read from
//! [`Node::document`] by the code that owns them (issue 48); `driver_info`'s
//! burn-in settings are kept as sent ([`DriverInfo`]) for the burn-in steps
//! to check; the commands' edge (`commands::node_check`) runs
//! those parsers on the skip list, the root-device hints, `inject_files`
//! and a software `target_raid_config` as the request arrives. The node's
//! [`Ports`] (sent beside it with the step commands) are typed the same
//! way: a list of port objects whose fields IPA's
//! managers read have their types, the rest kept as sent.

mod driver_info;
mod driver_internal_info;
mod instance_info;

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};

pub use driver_info::DriverInfo;
pub use driver_internal_info::DriverInternalInfo;
pub use instance_info::{Capabilities, ConfigDrive, InstanceInfo, Properties};

/// The node's sections: `instance_info` and `properties` typed where the
/// agent reads them, the other two only checked to be objects.
#[derive(Debug, Deserialize)]
#[allow(dead_code)]
struct Sections {
    #[serde(default)]
    uuid: Option<String>,
    #[serde(default)]
    properties: Option<Properties>,
    #[serde(default)]
    instance_info: Option<InstanceInfo>,
    #[serde(default)]
    driver_info: Option<DriverInfo>,
    #[serde(default)]
    driver_internal_info: Option<DriverInternalInfo>,
}

/// A node document whose sections have the shapes IPA relies on.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    doc: Value,
    instance_info: InstanceInfo,
    properties: Properties,
    driver_info: DriverInfo,
    driver_internal_info: DriverInternalInfo,
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

impl Default for Node {
    /// A node with no fields (`{}`): what a step sees when the conductor
    /// sent none.
    fn default() -> Self {
        Node {
            doc: Value::Object(Map::new()),
            instance_info: InstanceInfo::default(),
            properties: Properties::default(),
            driver_info: DriverInfo::default(),
            driver_internal_info: DriverInternalInfo::default(),
        }
    }
}

impl Node {
    /// The node in `doc`; `None` when `doc` is not an object (IPA ignores
    /// such a node: nothing is cached or read from it).
    pub fn parse(doc: Value) -> Result<Option<Node>, NodeError> {
        if !doc.is_object() {
            return Ok(None);
        }
        let sections =
            serde_path_to_error::deserialize::<_, Sections>(&doc).map_err(|e| NodeError {
                path: e.path().to_string(),
                reason: e.into_inner().to_string(),
            })?;
        Ok(Some(Node {
            doc,
            instance_info: sections.instance_info.unwrap_or_default(),
            properties: sections.properties.unwrap_or_default(),
            driver_info: sections.driver_info.unwrap_or_default(),
            driver_internal_info: sections.driver_internal_info.unwrap_or_default(),
        }))
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

    /// Its `instance_info` (empty when it has none).
    pub fn instance_info(&self) -> &InstanceInfo {
        &self.instance_info
    }

    /// Its `properties` (empty when it has none).
    pub fn properties(&self) -> &Properties {
        &self.properties
    }

    /// Its `driver_info` (empty when it has none).
    pub fn driver_info(&self) -> &DriverInfo {
        &self.driver_info
    }

    /// Its `driver_internal_info` (empty when it has none).
    pub fn driver_internal_info(&self) -> &DriverInternalInfo {
        &self.driver_internal_info
    }

    /// The capability `key`: the instance's, else the node's (IPA reads
    /// `secure_boot` and `disk_label` so).
    pub fn capability(&self, key: &str) -> Option<String> {
        self.instance_info
            .capabilities
            .get(key)
            .or_else(|| self.properties.capabilities.get(key))
    }

    /// Whether a deploy is under way: `driver_internal_info.deploy_steps`
    /// is a non-empty list (Ironic sets it as a deploy starts and wipes it
    /// when the deploy ends).
    pub fn deploy_under_way(&self) -> bool {
        self.driver_internal_info
            .deploy_steps
            .as_ref()
            .is_some_and(|steps| !steps.is_empty())
    }

    /// The root-device hints it asks for: `instance_info.root_device`,
    /// else `properties.root_device` (as IPA's `get_os_install_device`);
    /// an empty dict is no hints.
    pub fn root_device_hints(&self) -> Option<&Map<String, Value>> {
        [
            &self.instance_info.root_device,
            &self.properties.root_device,
        ]
        .into_iter()
        .find_map(|h| h.as_ref().filter(|h| !h.is_empty()))
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
    fn hints_come_from_instance_info_then_properties() {
        let node = |v: Value| Node::from_document(v).unwrap();
        let n = node(
            json!({"instance_info": {"root_device": {"name": "/dev/sdb"}},
                          "properties": {"root_device": {"name": "/dev/sda"}}}),
        );
        assert_eq!(n.root_device_hints().unwrap()["name"], "/dev/sdb");
        let n = node(json!({"instance_info": {"root_device": {}},
                          "properties": {"root_device": {"name": "/dev/sda"}}}));
        assert_eq!(n.root_device_hints().unwrap()["name"], "/dev/sda");
        assert_eq!(node(json!({"properties": {}})).root_device_hints(), None);
        let e = Node::parse(json!({"instance_info": {"root_device": "/dev/sda"}})).unwrap_err();
        assert_eq!(e.path, "instance_info.root_device");
    }

    #[test]
    fn capabilities_of_the_instance_come_before_the_nodes() {
        let n = Node::from_document(json!({
            "instance_info": {"capabilities": {"disk_label": "gpt"}},
            "properties": {"capabilities": "disk_label:msdos,boot_mode:bios"}}))
        .unwrap();
        assert_eq!(n.capability("disk_label").as_deref(), Some("gpt"));
        assert_eq!(n.capability("boot_mode").as_deref(), Some("bios"));
        assert_eq!(n.capability("secure_boot"), None);
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
