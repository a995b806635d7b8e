//! The erase settings Ironic puts in `node.driver_internal_info` before
//! cleaning (PROTOCOL.md §7.4), with Ironic's defaults when absent.

use ironic_types::node::DriverInternalInfo;

/// Settings of `erase_devices`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Knobs {
    /// Random overwrite passes (`agent_erase_devices_iterations`).
    pub iterations: u32,
    /// A final zero pass (`agent_erase_devices_zeroize`).
    pub zeroize: bool,
    /// Overwrite when a secure erase fails
    /// (`agent_continue_if_secure_erase_failed`, old name `..._ata_erase_failed`).
    pub continue_if_secure_erase_failed: bool,
    /// NVMe format allowed (`agent_enable_nvme_secure_erase`).
    pub enable_nvme_secure_erase: bool,
    /// ATA security erase allowed (`agent_enable_ata_secure_erase`).
    pub enable_ata_secure_erase: bool,
    /// Disks erased at once (`disk_erasure_concurrency`).
    pub concurrency: usize,
    /// Read-only disks are skipped instead of failing (`agent_erase_skip_read_only`).
    pub skip_read_only: bool,
    /// Disks with shared cluster filesystems may be erased
    /// (`wipe_special_filesystems`, see [`super::guard`]).
    pub wipe_special: bool,
    /// A discard proven by reading back zeros counts as an erase
    /// (`agent_enable_discard_erase`, else the agent's
    /// `ipa-enable-discard-erase`; off by default, as in IPA 13).
    pub enable_discard: bool,
}

impl Default for Knobs {
    fn default() -> Self {
        Self {
            iterations: 1,
            zeroize: true,
            continue_if_secure_erase_failed: false,
            enable_nvme_secure_erase: true,
            enable_ata_secure_erase: true,
            concurrency: 4,
            skip_read_only: false,
            wipe_special: false,
            enable_discard: false,
        }
    }
}

impl Knobs {
    /// From the node's `driver_internal_info`; missing or malformed values
    /// keep the default. `discard_default` is the agent's own
    /// `ipa-enable-discard-erase`, which the node's knob overrides.
    pub fn from_info(info: &DriverInternalInfo, discard_default: bool) -> Self {
        let d = Self::default();
        Self {
            iterations: info
                .agent_erase_devices_iterations
                .and_then(|n| u32::try_from(n).ok())
                .unwrap_or(d.iterations),
            zeroize: info.agent_erase_devices_zeroize.unwrap_or(d.zeroize),
            continue_if_secure_erase_failed: info
                .agent_continue_if_secure_erase_failed
                .or(info.agent_continue_if_ata_erase_failed)
                .unwrap_or(false),
            enable_nvme_secure_erase: info.agent_enable_nvme_secure_erase.unwrap_or(true),
            enable_ata_secure_erase: info.agent_enable_ata_secure_erase.unwrap_or(true),
            concurrency: info
                .disk_erasure_concurrency
                .map(|n| usize::try_from(n).unwrap_or(usize::MAX).max(1))
                .unwrap_or(d.concurrency),
            skip_read_only: info.agent_erase_skip_read_only.unwrap_or(false),
            wipe_special: super::guard::wipe_special_allowed(info),
            enable_discard: info.agent_enable_discard_erase.unwrap_or(discard_default),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn from_node(node: &Value, discard_default: bool) -> Knobs {
        let info = serde_json::from_value(node["driver_internal_info"].clone()).unwrap_or_default();
        Knobs::from_info(&info, discard_default)
    }

    #[test]
    fn reads_ironic_values_and_keeps_defaults() {
        assert_eq!(from_node(&json!({}), false), Knobs::default());
        assert!(from_node(&json!({}), true).enable_discard);
        let off = json!({"driver_internal_info": {"agent_enable_discard_erase": false}});
        assert!(!from_node(&off, true).enable_discard);
        let on = json!({"driver_internal_info": {"agent_enable_discard_erase": true}});
        assert!(from_node(&on, false).enable_discard);
        let node = json!({"driver_internal_info": {
            "agent_erase_devices_iterations": 3, "agent_erase_devices_zeroize": false,
            "agent_continue_if_ata_erase_failed": true, "disk_erasure_concurrency": 0,
            "agent_erase_skip_read_only": true, "agent_enable_nvme_secure_erase": "bogus"}});
        let k = from_node(&node, false);
        assert_eq!((k.iterations, k.zeroize), (3, false));
        assert!(k.continue_if_secure_erase_failed && k.skip_read_only);
        assert_eq!(k.concurrency, 1);
        assert!(k.enable_nvme_secure_erase);
    }
}
