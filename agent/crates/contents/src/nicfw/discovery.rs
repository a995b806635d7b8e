//! Finding NVIDIA (Mellanox) NICs. Presence is IPA's rule
//! (`mlnx._detect_hardware`): some interface in `class/net` whose
//! `device/vendor` reads `0x15b3`. The NICs the steps act on are IPA's
//! `NvidiaNics.discover`: the network-class functions `lspci -Dn -d 15b3:`
//! lists, each queried with `mstflint -d PCI -qq query`.

use std::path::Path;

use super::query::{parse_flint_query, parse_lspci, FwQuery};
use super::tools::{run, Tools};
use super::NicFwError;

/// Mellanox's PCI vendor ID as sysfs shows it.
pub const VENDOR: &str = "0x15b3";

/// Whether an interface under `sysfs` (`/sys` in the ramdisk) is on a
/// Mellanox device.
pub fn nic_present(sysfs: &Path) -> bool {
    let Ok(entries) = std::fs::read_dir(sysfs.join("class/net")) else {
        return false;
    };
    entries.flatten().any(|e| {
        std::fs::read_to_string(e.path().join("device/vendor")).is_ok_and(|v| v.trim() == VENDOR)
    })
}

/// One NVIDIA NIC function.
#[derive(Debug, Clone)]
pub struct Nic {
    /// PCI address with domain (`0000:06:00.0`).
    pub pci: String,
    /// PCI device ID (`101b`).
    pub device_id: String,
    /// Its firmware as `mstflint` reported it at discovery.
    pub fw: FwQuery,
}

impl Nic {
    /// The address without the function number: one card's functions
    /// share it (IPA burns and configures each card once through its
    /// first function).
    pub fn card(&self) -> &str {
        let end = self.pci.char_indices().last().map_or(0, |(i, _)| i);
        &self.pci[..end]
    }

    /// Whether it is function 0 of its card (IPA: the address ends in 0).
    pub fn is_function0(&self) -> bool {
        self.pci.ends_with('0')
    }
}

/// `mstflint -d PCI -qq query`, parsed.
pub fn query_device(tools: &Tools, pci: &str) -> Result<FwQuery, NicFwError> {
    let out = run(
        &tools.mstflint,
        &["-d", pci, "-qq", "query"],
        &format!("querying the firmware of device {pci}"),
    )?;
    Ok(parse_flint_query(&out))
}

/// The NVIDIA NIC functions in this machine, in `lspci` order.
pub fn discover(tools: &Tools) -> Result<Vec<Nic>, NicFwError> {
    let out = run(
        &tools.lspci,
        &["-Dn", "-d", "15b3:"],
        "discovering NVIDIA NICs",
    )?;
    let functions = parse_lspci(&out).map_err(NicFwError::Output)?;
    let mut nics = Vec::new();
    for f in functions {
        let fw = query_device(tools, &f.pci)?;
        tracing::info!(device = f.pci, id = f.device_id, psid = ?fw.psid, fw = ?fw.fw_ver, "NVIDIA NIC found");
        nics.push(Nic {
            pci: f.pci,
            device_id: f.device_id,
            fw,
        });
    }
    Ok(nics)
}
