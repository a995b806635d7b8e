//! The node's `instance_info` and `properties` as the agent reads them:
//! the fields with a meaning here get their types (image location and
//! checksums, boot mode, capabilities, root-device hints, config drive),
//! everything else is kept as sent. Parsed with the node, so a field of
//! the wrong type is named by its path (`node.instance_info.root_device`)
//! where the request arrives, not found later by a step.

use serde::{Deserialize, Deserializer};
use serde_json::{Map, Value};

/// `instance_info`: what Ironic (or Nova, or the baremetal-operator) set
/// for the instance being deployed.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(expecting = "a map")]
pub struct InstanceInfo {
    /// The image's URL (or Glance id): `image_source`.
    #[serde(default)]
    pub image_source: Option<String>,
    /// The image's URL as Ironic resolved it (`image_url`), when set.
    #[serde(default)]
    pub image_url: Option<String>,
    /// The legacy checksum (`image_checksum`): a digest or a URL of one.
    #[serde(default)]
    pub image_checksum: Option<String>,
    /// `image_os_hash_algo` (`sha256`, `sha512`, …).
    #[serde(default)]
    pub image_os_hash_algo: Option<String>,
    /// `image_os_hash_value`: the digest in that algorithm.
    #[serde(default)]
    pub image_os_hash_value: Option<String>,
    /// `image_disk_format` (`raw`, `qcow2`, …).
    #[serde(default)]
    pub image_disk_format: Option<String>,
    /// `deploy_boot_mode`: `uefi` or `bios` when set by the conductor.
    #[serde(default)]
    pub deploy_boot_mode: Option<String>,
    /// The instance's capabilities (`secure_boot`, `disk_label`, …).
    #[serde(default)]
    pub capabilities: Capabilities,
    /// Root-device hints for this instance.
    #[serde(default)]
    pub root_device: Option<Map<String, Value>>,
    /// The config drive: its contents as a dict, or rendered (gzip +
    /// base64, or a URL).
    #[serde(default)]
    pub configdrive: Option<ConfigDrive>,
    /// Every other field, as sent.
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

impl InstanceInfo {
    /// The image's URL: `image_url`, else `image_source`, the first that
    /// is not empty.
    pub fn image_location(&self) -> Option<&str> {
        [&self.image_url, &self.image_source]
            .into_iter()
            .find_map(|s| s.as_deref().filter(|s| !s.is_empty()))
    }
}

/// `properties`: the node's own description.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(expecting = "a map")]
pub struct Properties {
    /// The node's capabilities (`boot_mode`, `secure_boot`, `disk_label`).
    #[serde(default)]
    pub capabilities: Capabilities,
    /// The node's root-device hints.
    #[serde(default)]
    pub root_device: Option<Map<String, Value>>,
    /// Every other field, as sent.
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

/// A config drive as Ironic passes it in `instance_info.configdrive`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum ConfigDrive {
    /// Its contents (`meta_data`, `user_data`, `network_data`, …), for the
    /// agent to render.
    Data(Map<String, Value>),
    /// Rendered already: gzip + base64 of the ISO, or a URL to it.
    Rendered(String),
}

impl ConfigDrive {
    /// The config drive as JSON, for the code that renders or decodes it.
    pub fn to_value(&self) -> Value {
        match self {
            ConfigDrive::Data(m) => Value::Object(m.clone()),
            ConfigDrive::Rendered(s) => Value::String(s.clone()),
        }
    }

    /// Its `meta_data.KEY`, when it is given as data and has one.
    pub fn meta_data(&self, key: &str) -> Option<&Value> {
        match self {
            ConfigDrive::Data(m) => m
                .get("meta_data")
                .and_then(|md| md.get(key))
                .filter(|v| !v.is_null()),
            ConfigDrive::Rendered(_) => None,
        }
    }
}

/// Capabilities in any of the forms Ironic stores them: a dict, a JSON
/// object in a string, or `key:value,key:value` (what `properties
/// capabilities` holds when set from the CLI); `null` or absent is none.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Capabilities(pub Map<String, Value>);

impl Capabilities {
    /// The capability `key` as text (`true`, `uefi`, `gpt`).
    pub fn get(&self, key: &str) -> Option<String> {
        self.0.get(key).map(|v| match v {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        })
    }
}

impl<'de> Deserialize<'de> for Capabilities {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Form {
            Dict(Map<String, Value>),
            Text(String),
        }
        Ok(
            match Option::<Form>::deserialize(d).map_err(|_| {
                serde::de::Error::custom(
                    "expected a dict, a JSON object in a string, or \"key:value,key:value\"",
                )
            })? {
                None => Capabilities::default(),
                Some(Form::Dict(m)) => Capabilities(m),
                Some(Form::Text(s)) => Capabilities(match serde_json::from_str::<Value>(&s) {
                    Ok(Value::Object(m)) => m,
                    Ok(_) => Map::new(),
                    Err(_) => s
                        .split(',')
                        .filter_map(|kv| kv.split_once(':'))
                        .map(|(k, v)| (k.trim().to_string(), Value::String(v.trim().to_string())))
                        .collect(),
                }),
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn ironics_fields_are_typed_and_the_rest_kept() {
        let ii: InstanceInfo = serde_json::from_value(json!({
            "image_source": "http://h/img.raw", "image_url": "",
            "image_os_hash_algo": "sha512", "image_os_hash_value": "ab", "image_checksum": null,
            "deploy_boot_mode": "uefi", "capabilities": "{\"secure_boot\": \"true\"}",
            "root_device": {"serial": "S1"}, "configdrive": {"meta_data": {"k": 1}},
            "root_gb": "10", "nova_host_id": "x"}))
        .unwrap();
        assert_eq!(ii.image_location(), Some("http://h/img.raw"));
        assert_eq!(ii.image_checksum, None);
        assert_eq!(ii.capabilities.get("secure_boot").as_deref(), Some("true"));
        assert_eq!(ii.root_device.unwrap()["serial"], "S1");
        assert_eq!(
            ii.configdrive.as_ref().unwrap().meta_data("k"),
            Some(&json!(1))
        );
        assert_eq!(ii.other["root_gb"], "10");
        assert_eq!(ii.other["nova_host_id"], "x");
        let rendered: InstanceInfo =
            serde_json::from_value(json!({"configdrive": "H4sI"})).unwrap();
        assert_eq!(
            rendered.configdrive,
            Some(ConfigDrive::Rendered("H4sI".into()))
        );
        assert_eq!(rendered.configdrive.unwrap().meta_data("k"), None);
    }

    #[test]
    fn capabilities_come_as_a_dict_json_text_or_key_value_pairs() {
        let caps = |v: Value| serde_json::from_value::<Properties>(json!({"capabilities": v}));
        assert_eq!(
            caps(json!({"boot_mode": "uefi"}))
                .unwrap()
                .capabilities
                .get("boot_mode")
                .as_deref(),
            Some("uefi")
        );
        let kv = caps(json!("boot_mode:bios, disk_label:gpt"))
            .unwrap()
            .capabilities;
        assert_eq!(kv.get("boot_mode").as_deref(), Some("bios"));
        assert_eq!(kv.get("disk_label").as_deref(), Some("gpt"));
        assert_eq!(
            caps(Value::Null).unwrap().capabilities,
            Capabilities::default()
        );
        assert_eq!(
            caps(json!("[1]")).unwrap().capabilities,
            Capabilities::default()
        );
        let e = caps(json!(5)).unwrap_err().to_string();
        assert!(e.contains("key:value"), "{e}");
    }

    #[test]
    fn a_field_of_the_wrong_type_is_named_by_its_path() {
        for (doc, path) in [
            (json!({"root_device": "sda"}), "root_device"),
            (json!({"image_source": 5}), "image_source"),
            (json!({"configdrive": 5}), "configdrive"),
            (json!({"capabilities": []}), "capabilities"),
        ] {
            let e = serde_path_to_error::deserialize::<_, InstanceInfo>(doc).unwrap_err();
            assert_eq!(e.path().to_string(), path);
        }
    }
}
