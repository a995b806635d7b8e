//! The node's `driver_info` as the agent reads it: IPA's burn-in settings
//! (`agent_burnin_*`, [`DriverInfo::burnin`]); everything else kept as
//! sent.
//!
//! A burn-in setting is kept as the operator wrote it: IPA hands these to
//! stress-ng and fio as they are (`10m`, `98%`, a number or a string), so
//! their forms are the burn-in step's to check, and a bad one fails that
//! step naming the setting. A typo in one never refuses a request that does
//! not run it. `null` counts as absent. The section itself must be a map
//! (the node's parse names it otherwise).

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer};
use serde_json::{Map, Value};

/// The prefix of IPA's burn-in settings.
const BURNIN_PREFIX: &str = "agent_burnin_";

/// `driver_info`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DriverInfo {
    burnin: BTreeMap<String, Value>,
    other: Map<String, Value>,
}

impl DriverInfo {
    /// The burn-in setting `key` (`agent_burnin_cpu_timeout`) as sent,
    /// when set and not `null`.
    pub fn burnin(&self, key: &str) -> Option<&Value> {
        self.burnin.get(key)
    }

    /// Every other field, as sent.
    pub fn other(&self) -> &Map<String, Value> {
        &self.other
    }
}

impl<'de> Deserialize<'de> for DriverInfo {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(transparent, expecting = "a map")]
        struct Raw(Map<String, Value>);
        let Raw(fields) = Raw::deserialize(d)?;
        let mut info = DriverInfo::default();
        for (k, v) in fields {
            if k.starts_with(BURNIN_PREFIX) {
                if !v.is_null() {
                    info.burnin.insert(k, v);
                }
            } else {
                info.other.insert(k, v);
            }
        }
        Ok(info)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn burnin_settings_are_kept_as_sent_and_null_is_absent() {
        let info: DriverInfo = serde_json::from_value(json!({
            "agent_burnin_cpu_timeout": "10m",
            "agent_burnin_vm_vm-bytes": 98,
            "agent_burnin_gpu_count": null,
            "redfish_address": "https://bmc",
        }))
        .unwrap();
        assert_eq!(info.burnin("agent_burnin_cpu_timeout"), Some(&json!("10m")));
        assert_eq!(info.burnin("agent_burnin_vm_vm-bytes"), Some(&json!(98)));
        assert_eq!(info.burnin("agent_burnin_gpu_count"), None);
        assert_eq!(info.burnin("redfish_address"), None);
        assert_eq!(
            info.other().get("redfish_address"),
            Some(&json!("https://bmc"))
        );
        let e = serde_json::from_value::<DriverInfo>(json!("x")).unwrap_err();
        assert!(e.to_string().contains("a map"), "{e}");
    }
}
