//! The node's `driver_internal_info` as the agent reads it: the erase
//! settings Ironic copies there from its `[deploy]` options before
//! cleaning (PROTOCOL.md §7.4), the guard of shared cluster filesystems,
//! the deploy's boot mode and the deploy steps under way; everything else
//! kept as sent.
//!
//! The erase settings are read as IPA reads them, by key with a default:
//! a value of the wrong type counts as absent (the default applies), so
//! it never fails a request or a step. The section itself must be a map
//! (the node's parse names it otherwise).

use serde::{Deserialize, Deserializer};
use serde_json::{Map, Value};

/// `driver_internal_info`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(expecting = "a map")]
pub struct DriverInternalInfo {
    /// `agent_erase_devices_iterations`: random overwrite passes.
    #[serde(default, deserialize_with = "lenient")]
    pub agent_erase_devices_iterations: Option<u64>,
    /// `agent_erase_devices_zeroize`: a final zero pass.
    #[serde(default, deserialize_with = "lenient")]
    pub agent_erase_devices_zeroize: Option<bool>,
    /// `agent_continue_if_secure_erase_failed`: overwrite when a secure
    /// erase fails.
    #[serde(default, deserialize_with = "lenient")]
    pub agent_continue_if_secure_erase_failed: Option<bool>,
    /// `agent_continue_if_ata_erase_failed`: the old name of the above.
    #[serde(default, deserialize_with = "lenient")]
    pub agent_continue_if_ata_erase_failed: Option<bool>,
    /// `agent_enable_nvme_secure_erase`: NVMe format allowed.
    #[serde(default, deserialize_with = "lenient")]
    pub agent_enable_nvme_secure_erase: Option<bool>,
    /// `agent_enable_ata_secure_erase`: ATA security erase allowed.
    #[serde(default, deserialize_with = "lenient")]
    pub agent_enable_ata_secure_erase: Option<bool>,
    /// `disk_erasure_concurrency`: disks erased at once.
    #[serde(default, deserialize_with = "lenient")]
    pub disk_erasure_concurrency: Option<u64>,
    /// `agent_erase_skip_read_only`: read-only disks are skipped.
    #[serde(default, deserialize_with = "lenient")]
    pub agent_erase_skip_read_only: Option<bool>,
    /// `agent_enable_discard_erase`: a discard read back as zeros counts as
    /// an erase.
    #[serde(default, deserialize_with = "lenient")]
    pub agent_enable_discard_erase: Option<bool>,
    /// `wipe_special_filesystems`: IPA 13 checks for shared cluster
    /// filesystems unless this is `false`.
    #[serde(default, deserialize_with = "lenient")]
    pub wipe_special_filesystems: Option<bool>,
    /// `deploy_boot_mode`: the boot mode the conductor deploys for.
    #[serde(default, deserialize_with = "lenient")]
    pub deploy_boot_mode: Option<String>,
    /// `deploy_steps`: the deploy's steps while a deploy is under way.
    #[serde(default, deserialize_with = "lenient")]
    pub deploy_steps: Option<Vec<Value>>,
    /// Every other field, as sent.
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

/// A value of the field's type, else absent.
fn lenient<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: serde::de::DeserializeOwned,
{
    let v = Value::deserialize(d)?;
    Ok(serde_json::from_value(v).ok())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn values_of_the_wrong_type_count_as_absent_and_the_rest_is_kept() {
        let info: DriverInternalInfo = serde_json::from_value(json!({
            "agent_erase_devices_iterations": 3,
            "agent_erase_devices_zeroize": "no",
            "disk_erasure_concurrency": -1,
            "wipe_special_filesystems": false,
            "deploy_steps": [{"step": "write_image"}],
            "clean_steps": null,
        }))
        .unwrap();
        assert_eq!(info.agent_erase_devices_iterations, Some(3));
        assert_eq!(info.agent_erase_devices_zeroize, None);
        assert_eq!(info.disk_erasure_concurrency, None);
        assert_eq!(info.wipe_special_filesystems, Some(false));
        assert_eq!(info.deploy_steps.map(|s| s.len()), Some(1));
        assert_eq!(info.other.get("clean_steps"), Some(&Value::Null));
        assert!(serde_json::from_value::<DriverInternalInfo>(json!([])).is_err());
    }
}
