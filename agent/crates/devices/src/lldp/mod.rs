//! LLDP: which switch port each NIC is plugged into (PROTOCOL.md §3.1
//! `ipa-collect-lldp`, §4.4 `lldp` collector).
//!
//! Design: all NICs with link are listened on at the same time, each done
//! at its first frame, all done at one deadline ([`DEFAULT_TIMEOUT`] unless
//! `ipa-lldp-timeout` says otherwise), so a machine with many ports waits at
//! most once. Results go into `interfaces[].lldp` in IPA's raw form (what
//! Ironic parses); the parsed form is for people and the `lldp_parsed` key.

pub(crate) mod ethtool;
pub mod intel;
pub mod listen;
pub mod socket;
pub mod tlv;

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;

use crate::inventory::Inventory;
pub use agent_base::config::LLDP_DEFAULT_TIMEOUT as DEFAULT_TIMEOUT;
pub use listen::Heard;
pub use tlv::Neighbor;

/// LLDP results per interface.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct LldpData {
    /// IPA's raw form per interface (`[]` when nothing was heard).
    pub raw: BTreeMap<String, Vec<(u8, String)>>,
    /// Parsed neighbour per interface that heard a frame.
    pub parsed: BTreeMap<String, Neighbor>,
}

/// Listens on every interface of the inventory that has a carrier.
pub async fn collect(inv: &Inventory, timeout: Duration) -> LldpData {
    let names: Vec<String> = inv
        .interfaces
        .iter()
        .filter(|i| i.has_carrier)
        .map(|i| i.name.clone())
        .collect();
    let skipped: Vec<&str> = inv
        .interfaces
        .iter()
        .filter(|i| !i.has_carrier)
        .map(|i| i.name.as_str())
        .collect();
    if !skipped.is_empty() {
        tracing::info!(?skipped, "no LLDP on interfaces without link");
    }
    tracing::info!(interfaces = ?names, timeout_s = timeout.as_secs_f64(), "listening for LLDP");
    from_heard(&listen::listen(&names, timeout).await)
}

/// Converts listener results into raw and parsed forms.
pub fn from_heard(heard: &BTreeMap<String, Heard>) -> LldpData {
    let mut d = LldpData::default();
    for (name, h) in heard {
        match h {
            Heard::Frame(f) => {
                d.raw.insert(name.clone(), tlv::raw_form(f));
                d.parsed.insert(name.clone(), tlv::parse_neighbor(f));
            }
            _ => {
                d.raw.insert(name.clone(), Vec::new());
            }
        }
    }
    d
}

/// Fills `interfaces[].lldp`: the raw TLVs, or `[]` for interfaces that
/// heard nothing (as IPA does once LLDP collection is on).
pub fn apply(inv: &mut Inventory, data: &LldpData) {
    for i in &mut inv.interfaces {
        i.lldp = Some(data.raw.get(&i.name).cloned().unwrap_or_default());
    }
}
