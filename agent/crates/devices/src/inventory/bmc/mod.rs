//! The BMC's network addresses (`bmc_address`, `bmc_v6address`, `bmc_mac`)
//! read over IPMI from the host side: Get LAN Configuration Parameters
//! (NetFn 0x0C, command 0x02) on LAN channels 1..=11, through the kernel's
//! IPMI device (`/dev/ipmi0`, see [`device`]). No ipmitool.
//!
//! Design: the rules are IPA's (`get_bmc_address`, `get_bmc_mac`,
//! `get_bmc_v6address` in `ironic_python_agent/hardware.py`), applied to the
//! parameters ipmitool's `lan print` / `lan6 print` would show:
//!
//! * `bmc_address`: the first channel whose IP address (parameter 3) is not
//!   `0.0.0.0`; else `"0.0.0.0"`.
//! * `bmc_mac`: the first channel with an IP address and a MAC (parameter 5)
//!   that is not all zeros; a channel whose IPv4 address is `0.0.0.0`
//!   counts only if it lists an IPv6 address (static 0x38 or dynamic 0x3B,
//!   counts from 0x37) that is neither `::…` nor `fe80…`. None found: no MAC
//!   (IPA then leaves the key out).
//! * `bmc_v6address`: the first channel whose addressing enables (0x33) are
//!   IPv6-only or both, with an active dynamic address from SLAAC/DHCPv6,
//!   else an active enabled static one, that is not `::`; else `"::/0"`.
//!
//! A channel that answers with an error completion code is skipped (ipmitool
//! prints nothing for it). No device: all three unknown (`null`). A device
//! that cannot be opened or stops answering: IPA's "nothing configured"
//! values (`0.0.0.0`, `::/0`, no MAC), with one warning; after the first
//! transport failure no further request is sent, so a dead BMC costs one
//! timeout, not 33.

pub(crate) mod device;

use std::collections::HashMap;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};

/// NetFn Transport (requests).
pub(crate) const NETFN_TRANSPORT: u8 = 0x0C;
/// Get LAN Configuration Parameters.
pub(crate) const CMD_GET_LAN_CONFIG: u8 = 0x02;

/// LAN configuration parameters used here (IPMI 2.0 table 23-4).
pub(crate) mod param {
    /// IP address (4 bytes).
    pub(crate) const IP: u8 = 3;
    /// MAC address (6 bytes).
    pub(crate) const MAC: u8 = 5;
    /// IPv6/IPv4 addressing enables (0 IPv4 only, 1 IPv6 only, 2 both).
    pub(crate) const IPV6_ENABLES: u8 = 0x33;
    /// IPv6 status: static address count, dynamic address count, flags.
    pub(crate) const IPV6_STATUS: u8 = 0x37;
    /// IPv6 static addresses (one per set selector).
    pub(crate) const IPV6_STATIC: u8 = 0x38;
    /// IPv6 dynamic (SLAAC/DHCPv6) addresses (one per set selector).
    pub(crate) const IPV6_DYNAMIC: u8 = 0x3B;
}

/// LAN channels IPA asks: of 0–15 only 1–11 can be LAN media.
pub(crate) const CHANNELS: std::ops::RangeInclusive<u8> = 1..=11;

/// Why a request got no usable answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum IpmiError {
    /// The device could not be used (open, ioctl, timeout, short answer).
    #[error("{0}")]
    Transport(String),
}

/// One request/response exchange with the BMC (system interface, LUN 0).
pub(crate) trait Transport {
    /// Sends `data` as (`netfn`, `cmd`); returns the response data with the
    /// completion code as its first byte.
    fn request(&mut self, netfn: u8, cmd: u8, data: &[u8]) -> Result<Vec<u8>, IpmiError>;
}

/// The three inventory fields.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct BmcAddresses {
    /// `bmc_address`.
    pub v4: Option<String>,
    /// `bmc_v6address`.
    pub v6: Option<String>,
    /// `bmc_mac`.
    pub mac: Option<String>,
}

/// The IPMI device node, as IPA looks for it (`/dev/ipmi*`, `/dev/ipmi/*`,
/// `/dev/ipmidev/*`; character devices only).
pub(crate) fn find_device(root: &Path) -> Option<PathBuf> {
    use std::os::unix::fs::FileTypeExt;
    let dev = super::under(root, "/dev");
    let mut candidates: Vec<PathBuf> = Vec::new();
    for (dir, prefix) in [
        (dev.clone(), "ipmi"),
        (dev.join("ipmi"), ""),
        (dev.join("ipmidev"), ""),
    ] {
        if let Ok(entries) = std::fs::read_dir(&dir) {
            let mut names: Vec<PathBuf> = entries
                .flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with(prefix))
                .map(|e| e.path())
                .collect();
            names.sort();
            candidates.extend(names);
        }
    }
    candidates
        .into_iter()
        .find(|p| std::fs::metadata(p).is_ok_and(|m| m.file_type().is_char_device()))
}

/// What the running machine's BMC answered, kept for the life of the
/// process as IPA's `_bmc_cache` does: a real BMC answers 33 requests over
/// KCS in a second or more, and its LAN settings do not change under us.
static LIVE: std::sync::OnceLock<BmcAddresses> = std::sync::OnceLock::new();

/// Reads the BMC addresses of the machine under `root` (`skip`:
/// `agent_skip_bmc_detect`, all unknown). For the live system (`/`) the
/// first answer of a device is reused; a missing device is looked for again
/// each time, so a driver that binds late is still found.
pub(crate) fn read(root: &Path, skip: bool) -> BmcAddresses {
    if skip {
        return BmcAddresses::default();
    }
    let Some(path) = find_device(root) else {
        return BmcAddresses::default();
    };
    if root == Path::new("/") {
        return LIVE.get_or_init(|| read_device(&path)).clone();
    }
    read_device(&path)
}

fn read_device(path: &Path) -> BmcAddresses {
    match device::Device::open(path) {
        Ok(mut dev) => query(&mut dev),
        Err(e) => {
            tracing::warn!(device = %path.display(), "cannot use the IPMI device: {e}; reporting the BMC as unconfigured");
            unconfigured()
        }
    }
}

/// IPA's values for "IPMI present, nothing configured".
fn unconfigured() -> BmcAddresses {
    BmcAddresses {
        v4: Some("0.0.0.0".into()),
        v6: Some("::/0".into()),
        mac: None,
    }
}

/// Applies IPA's rules over `transport`.
pub(crate) fn query(transport: &mut dyn Transport) -> BmcAddresses {
    let mut lan = Lan {
        transport,
        cache: HashMap::new(),
        failed: None,
        refused: None,
    };
    let found = BmcAddresses {
        v4: Some(address(&mut lan)),
        v6: Some(v6address(&mut lan)),
        mac: mac(&mut lan),
    };
    if let Some(e) = lan.failed {
        tracing::warn!("the BMC did not answer over IPMI ({e}); reporting it as unconfigured");
        return unconfigured();
    }
    if found == unconfigured() {
        if let Some(cc) = lan.refused {
            tracing::info!("the BMC refused LAN configuration parameters (completion code {cc:#04x}); reporting it as unconfigured");
            return found;
        }
    }
    tracing::info!(bmc_address = ?found.v4, bmc_v6address = ?found.v6, bmc_mac = ?found.mac, "BMC addresses read over IPMI");
    found
}

/// Parameter reads with a cache, stopping at the first transport failure.
struct Lan<'a> {
    transport: &'a mut dyn Transport,
    cache: HashMap<(u8, u8, u8), Option<Vec<u8>>>,
    failed: Option<IpmiError>,
    /// The last error completion code (for the one log line).
    refused: Option<u8>,
}

impl Lan<'_> {
    /// Parameter data (after completion code and revision); `None` when the
    /// channel refused it or the transport has failed.
    fn get(&mut self, channel: u8, param: u8, set: u8) -> Option<Vec<u8>> {
        if let Some(v) = self.cache.get(&(channel, param, set)) {
            return v.clone();
        }
        if self.failed.is_some() {
            return None;
        }
        let got = match self.transport.request(
            NETFN_TRANSPORT,
            CMD_GET_LAN_CONFIG,
            &[channel & 0x0F, param, set, 0],
        ) {
            Ok(resp) => match resp.first() {
                Some(0) if resp.len() >= 2 => Some(resp[2..].to_vec()),
                Some(0) => {
                    self.failed = Some(IpmiError::Transport("response without data".into()));
                    None
                }
                Some(&cc) => {
                    tracing::debug!(
                        channel,
                        param,
                        "LAN parameter refused: completion code {cc:#04x}"
                    );
                    self.refused = Some(cc);
                    None
                }
                None => {
                    self.failed = Some(IpmiError::Transport("empty response".into()));
                    None
                }
            },
            Err(e) => {
                self.failed = Some(e);
                None
            }
        };
        self.cache.insert((channel, param, set), got.clone());
        got
    }

    fn ipv4(&mut self, channel: u8) -> Option<Ipv4Addr> {
        let d = self.get(channel, param::IP, 0)?;
        let b: [u8; 4] = d.get(..4)?.try_into().ok()?;
        Some(Ipv4Addr::from(b))
    }

    fn mac(&mut self, channel: u8) -> Option<[u8; 6]> {
        let d = self.get(channel, param::MAC, 0)?;
        d.get(..6)?.try_into().ok()
    }

    /// Static and dynamic IPv6 address records of a channel (what
    /// `lan6 print` lists), static first.
    fn ipv6_records(&mut self, channel: u8) -> (Vec<V6Record>, Vec<V6Record>) {
        let Some(status) = self.get(channel, param::IPV6_STATUS, 0) else {
            return (Vec::new(), Vec::new());
        };
        let (n_static, n_dynamic) = (
            status.first().copied().unwrap_or(0),
            status.get(1).copied().unwrap_or(0),
        );
        let mut read = |p: u8, n: u8| -> Vec<V6Record> {
            (0..n)
                .filter_map(|set| self.get(channel, p, set).and_then(|d| V6Record::parse(&d)))
                .collect()
        };
        let stat = read(param::IPV6_STATIC, n_static);
        let dynamic = read(param::IPV6_DYNAMIC, n_dynamic);
        (stat, dynamic)
    }
}

/// One IPv6 address record (parameters 0x38 / 0x3B).
#[derive(Debug, Clone, PartialEq, Eq)]
struct V6Record {
    /// Bit 7: enabled (static records); bits 3..0: source (0 static,
    /// 1 SLAAC, 2 DHCPv6).
    source: u8,
    address: Ipv6Addr,
    /// 0 active, 1 disabled, 2 pending, 3 failed, 4 deprecated, 5 invalid.
    status: u8,
}

impl V6Record {
    /// `set selector, source/type, address[16], prefix length, status`.
    fn parse(d: &[u8]) -> Option<Self> {
        let addr: [u8; 16] = d.get(2..18)?.try_into().ok()?;
        Some(Self {
            source: *d.get(1)?,
            address: Ipv6Addr::from(addr),
            status: *d.get(19)?,
        })
    }
}

fn address(lan: &mut Lan<'_>) -> String {
    for ch in CHANNELS {
        if let Some(ip) = lan.ipv4(ch) {
            if !ip.is_unspecified() {
                return ip.to_string();
            }
        }
    }
    "0.0.0.0".into()
}

fn mac(lan: &mut Lan<'_>) -> Option<String> {
    for ch in CHANNELS {
        let (Some(ip), Some(mac)) = (lan.ipv4(ch), lan.mac(ch)) else {
            continue;
        };
        if ip.is_unspecified() {
            let (stat, dynamic) = lan.ipv6_records(ch);
            let usable = stat.iter().chain(&dynamic).any(|r| {
                let text = r.address.to_string();
                !text.starts_with("::") && !text.starts_with("fe80")
            });
            if !usable {
                continue;
            }
        }
        if mac != [0; 6] {
            return Some(
                mac.iter()
                    .map(|b| format!("{b:02x}"))
                    .collect::<Vec<_>>()
                    .join(":"),
            );
        }
    }
    None
}

fn v6address(lan: &mut Lan<'_>) -> String {
    for ch in CHANNELS {
        let enables = lan.get(ch, param::IPV6_ENABLES, 0);
        if !matches!(enables.as_deref().and_then(|d| d.first()), Some(1 | 2)) {
            continue;
        }
        let (stat, dynamic) = lan.ipv6_records(ch);
        let active = |r: &&V6Record| r.status == 0 && !r.address.is_unspecified();
        let found = dynamic
            .iter()
            .filter(active)
            .find(|r| matches!(r.source & 0x0F, 1 | 2))
            .or_else(|| stat.iter().filter(active).find(|r| r.source & 0x80 != 0));
        if let Some(r) = found {
            return r.address.to_string();
        }
    }
    "::/0".into()
}

#[cfg(test)]
mod tests;
