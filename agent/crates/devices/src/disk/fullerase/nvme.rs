//! NVMe secure erase through the admin passthrough ioctl (as `nvme format
//! -s 1|2`, PROTOCOL.md §7.2): Identify Controller says whether Format NVM is
//! supported (OACS bit 1) and whether it can erase cryptographically (FNA
//! bit 2); the namespace of the block device is formatted keeping its
//! current LBA format and protection settings. Parsing is pure and tested;
//! the commands go through [`crate::disk::nvme_admin`].

use std::fs::File;

use anyhow::{bail, Result};

use crate::disk::nvme_admin::{format_nvm, identify, namespace_id};

/// Generous: a user-data erase of a large drive can take long.
const FORMAT_TIMEOUT_MS: u32 = 3_600_000;

/// What the controller offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Caps {
    /// Format NVM supported (OACS bit 1).
    pub format: bool,
    /// Cryptographic erase supported (FNA bit 2).
    pub crypto: bool,
}

impl Caps {
    /// From an Identify Controller page.
    pub(crate) fn from_identify(ctrl: &[u8]) -> Self {
        let oacs = u16::from_le_bytes([ctrl[256], ctrl[257]]);
        Self {
            format: oacs & 0x2 != 0,
            crypto: ctrl[524] & 0x4 != 0,
        }
    }

    /// Secure erase setting: 2 (crypto) when possible, else 1 (user data).
    pub(crate) fn ses(self) -> u32 {
        if self.crypto {
            2
        } else {
            1
        }
    }
}

/// CDW10 of Format NVM that keeps the namespace's current LBA format,
/// metadata setting and protection information (Identify Namespace page).
pub(crate) fn format_cdw10(ns: &[u8], ses: u32) -> u32 {
    let flbas = u32::from(ns[26]);
    let dps = u32::from(ns[29]);
    let lbaf_low = flbas & 0xf;
    let lbaf_high = (flbas >> 5) & 0x3;
    let mset = (flbas >> 4) & 1;
    let pi = dps & 0x7;
    let pil = (dps >> 3) & 1;
    lbaf_low | (mset << 4) | (pi << 5) | (pil << 8) | (ses << 9) | (lbaf_high << 12)
}

/// The controller's capabilities (Identify Controller).
pub(crate) fn caps(f: &File) -> Result<Caps> {
    Ok(Caps::from_identify(&identify(f, 0, 1)?))
}

/// Formats the namespace behind `f` with a secure erase; returns the SES
/// used (1 user data, 2 cryptographic).
pub(crate) fn secure_format(f: &File, caps: Caps) -> Result<u32> {
    if !caps.format {
        bail!("the controller does not support Format NVM");
    }
    let nsid = namespace_id(f)?;
    let ns = identify(f, nsid, 0)?;
    let ses = caps.ses();
    format_nvm(f, nsid, format_cdw10(&ns, ses), FORMAT_TIMEOUT_MS)?;
    Ok(ses)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capabilities_and_format_command_from_identify_pages() {
        let mut ctrl = vec![0u8; 4096];
        assert_eq!(
            Caps::from_identify(&ctrl),
            Caps {
                format: false,
                crypto: false
            }
        );
        ctrl[256] = 0x2;
        ctrl[524] = 0x4;
        let caps = Caps::from_identify(&ctrl);
        assert!(caps.format && caps.crypto);
        assert_eq!(caps.ses(), 2);

        let mut ns = vec![0u8; 4096];
        assert_eq!(format_cdw10(&ns, 1), 1 << 9);
        // LBA format 18 (low 2, high 1), extended metadata, PI type 1 first.
        ns[26] = 0x2 | 0x10 | (1 << 5);
        ns[29] = 0x1 | 0x8;
        assert_eq!(
            format_cdw10(&ns, 2),
            0x2 | (1 << 4) | (1 << 5) | (1 << 8) | (2 << 9) | (1 << 12)
        );
    }
}
