//! OpenStack `network_data.json` (what Ironic puts on the virtual-media ISO
//! at `openstack/latest/network_data.json`, from the node's `network_data`
//! or Metal3's `preprovisioningNetworkData`) turned into a plan for this
//! machine: which interface gets which static addresses, routes, MTU, bond
//! or VLAN, and which NICs it leaves to DHCP.
//!
//! Parsing is lenient where the producers differ (numbers as strings, IPv6
//! prefixes inside `ip_address` or as a `netmask`) and strict where a
//! mistake would misconfigure the machine: a link whose MAC matches no NIC,
//! a bond member or VLAN parent that is not a link, an address that does
//! not parse. Those are errors naming the entry; the caller logs them and
//! falls back to DHCP for the NICs involved.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};

use serde::Deserialize;

pub(crate) mod apply;

/// Where Ironic puts the file on the ISO.
pub const PATH_ON_MEDIA: &str = "openstack/latest/network_data.json";

/// Largest file accepted (Ironic writes a few KiB).
pub const MAX_BYTES: usize = 1 << 20;

/// Why a `network_data.json` cannot be used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum NetworkDataError {
    /// Not JSON of the expected shape.
    #[error("network_data.json does not parse: {0}")]
    Parse(String),
    /// Bigger than [`MAX_BYTES`].
    #[error("network_data.json is {0} bytes, more than the {MAX_BYTES} accepted")]
    TooBig(usize),
    /// One entry is wrong.
    #[error("network_data.json {entry}: {reason}")]
    Entry {
        /// Which entry (`links[1] "bond0"`).
        entry: String,
        /// What is wrong with it.
        reason: String,
    },
}

fn entry(kind: &str, i: usize, id: &str, reason: impl Into<String>) -> NetworkDataError {
    NetworkDataError::Entry {
        entry: format!("{kind}[{i}] {id:?}"),
        reason: reason.into(),
    }
}

/// A number that some producers write as a string.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
enum Num {
    N(u64),
    S(String),
}

impl Num {
    fn get(&self) -> Option<u64> {
        match self {
            Num::N(n) => Some(*n),
            Num::S(s) => s.trim().parse().ok(),
        }
    }
}

#[derive(Debug, Deserialize)]
struct RawFile {
    #[serde(default)]
    links: Vec<RawLink>,
    #[serde(default)]
    networks: Vec<RawNetwork>,
    #[serde(default)]
    services: Vec<RawService>,
}

#[derive(Debug, Deserialize)]
struct RawLink {
    #[serde(default)]
    id: String,
    #[serde(rename = "type", default)]
    kind: String,
    ethernet_mac_address: Option<String>,
    mtu: Option<Num>,
    #[serde(default)]
    bond_links: Vec<String>,
    bond_mode: Option<String>,
    bond_miimon: Option<Num>,
    bond_xmit_hash_policy: Option<String>,
    bond_lacp_rate: Option<String>,
    vlan_link: Option<String>,
    vlan_id: Option<Num>,
}

#[derive(Debug, Deserialize)]
struct RawNetwork {
    #[serde(default)]
    id: String,
    #[serde(rename = "type", default)]
    kind: String,
    #[serde(default)]
    link: String,
    ip_address: Option<String>,
    netmask: Option<String>,
    #[serde(default)]
    routes: Vec<RawRoute>,
    #[serde(default)]
    dns_nameservers: Vec<String>,
}

#[derive(Debug, Deserialize)]
struct RawRoute {
    network: String,
    netmask: String,
    gateway: String,
}

#[derive(Debug, Deserialize)]
struct RawService {
    #[serde(rename = "type", default)]
    kind: String,
    #[serde(default)]
    address: String,
}

/// What kind of interface a link is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LinkKind {
    /// A NIC, found by its MAC.
    Phy,
    /// A bond of NICs (by their interface names).
    Bond(Bond),
    /// A VLAN on another planned interface (by its name).
    Vlan {
        /// The parent interface's name.
        parent: String,
        /// The VLAN ID.
        vid: u16,
    },
}

/// Bonding settings, as the kernel's bonding driver names them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bond {
    /// Member interface names.
    pub members: Vec<String>,
    /// `active-backup`, `802.3ad`, `balance-rr`, … (default `active-backup`).
    pub mode: String,
    /// Link monitoring interval in ms (default 100).
    pub miimon: u64,
    /// `xmit_hash_policy`, if given.
    pub xmit_hash_policy: Option<String>,
    /// `lacp_rate`, if given.
    pub lacp_rate: Option<String>,
}

/// A static route.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    /// Destination network.
    pub network: IpAddr,
    /// Destination prefix length (0: default route).
    pub prefix: u8,
    /// Next hop.
    pub gateway: IpAddr,
}

/// One interface the plan configures.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Iface {
    /// The link's `id` in the file.
    pub id: String,
    /// The kernel interface name (found by MAC, or the one created).
    pub name: String,
    /// The MAC the file names, lower case (bonds and VLANs may have none).
    pub mac: Option<String>,
    /// Phy, bond or VLAN.
    pub kind: LinkKind,
    /// MTU to set.
    pub mtu: Option<u32>,
    /// Static addresses with prefix lengths.
    pub addrs: Vec<(IpAddr, u8)>,
    /// Static routes.
    pub routes: Vec<Route>,
    /// Run DHCPv4 on it (`ipv4_dhcp`).
    pub dhcp4: bool,
    /// Leave IPv6 to DHCPv6 / SLAAC (`ipv6_dhcp*`, `ipv6_slaac`).
    pub dhcp6: bool,
}

impl Iface {
    /// Has a static address (no DHCP wait needed).
    pub fn is_static(&self) -> bool {
        !self.addrs.is_empty()
    }
}

/// What the file asks of this machine.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// Interfaces in creation order: NICs, then bonds, then VLANs.
    pub ifaces: Vec<Iface>,
    /// DNS servers (`services` of type `dns`, then per-network ones).
    pub dns: Vec<IpAddr>,
}

impl Plan {
    /// Names of NICs the plan takes over (configured, or enslaved to a bond).
    pub fn claimed(&self) -> Vec<String> {
        let mut out: Vec<String> = self.ifaces.iter().map(|i| i.name.clone()).collect();
        for i in &self.ifaces {
            if let LinkKind::Bond(b) = &i.kind {
                out.extend(b.members.iter().cloned());
            }
        }
        out
    }

    /// Whether any bond is planned (the bonding driver must be loaded).
    pub fn has_bonds(&self) -> bool {
        self.ifaces
            .iter()
            .any(|i| matches!(i.kind, LinkKind::Bond(_)))
    }
}

/// A valid kernel interface name (below IFNAMSIZ, no `/`, spaces or `:`).
fn valid_ifname(s: &str) -> bool {
    !s.is_empty()
        && s.len() < 16
        && s != "."
        && s != ".."
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// Prefix length of a dotted IPv4 or an IPv6 netmask.
fn netmask_prefix(mask: &str) -> Option<u8> {
    let bits: u128 = match mask.trim().parse::<IpAddr>().ok()? {
        IpAddr::V4(m) => u128::from(u32::from(m)) << 96,
        IpAddr::V6(m) => u128::from(m),
    };
    let ones = bits.leading_ones();
    // A netmask is contiguous ones.
    (bits.checked_shl(ones).unwrap_or(0) == 0).then_some(ones as u8)
}

/// `ip_address` (maybe `addr/prefix`) plus `netmask` → address and prefix.
fn address(ip: &str, netmask: Option<&str>) -> anyhow::Result<(IpAddr, u8)> {
    let (ip, inline) = match ip.split_once('/') {
        Some((a, p)) => (a, Some(p)),
        None => (ip, None),
    };
    let addr: IpAddr = ip
        .trim()
        .parse()
        .map_err(|_| anyhow::anyhow!("ip_address {ip:?} is not an IP address"))?;
    let max = if addr.is_ipv4() { 32 } else { 128 };
    let prefix = match (inline, netmask) {
        (Some(p), _) => p
            .trim()
            .parse::<u8>()
            .ok()
            .filter(|p| *p <= max)
            .ok_or_else(|| anyhow::anyhow!("prefix {p:?} is not 0..={max}"))?,
        (None, Some(m)) if m.trim().parse::<u8>().is_ok() => m
            .trim()
            .parse::<u8>()
            .ok()
            .filter(|p| *p <= max)
            .ok_or_else(|| anyhow::anyhow!("netmask {m:?} is not 0..={max}"))?,
        (None, Some(m)) => {
            let p = netmask_prefix(m)
                .ok_or_else(|| anyhow::anyhow!("netmask {m:?} is not a netmask"))?;
            // An IPv4 mask for an IPv6 address (or the reverse) is a mistake.
            if m.trim().parse::<Ipv4Addr>().is_ok() != addr.is_ipv4() {
                return Err(anyhow::anyhow!(
                    "netmask {m:?} is not of the address's family"
                ));
            }
            p
        }
        (None, None) => max,
    };
    Ok((addr, prefix))
}

fn route(r: &RawRoute) -> anyhow::Result<Route> {
    let (network, prefix) = address(&r.network, Some(&r.netmask))?;
    let gateway: IpAddr = r
        .gateway
        .trim()
        .parse()
        .map_err(|_| anyhow::anyhow!("route gateway {:?} is not an IP address", r.gateway))?;
    if gateway.is_ipv4() != network.is_ipv4() {
        return Err(anyhow::anyhow!(
            "route to {}/{prefix} via {gateway}: mixed address families",
            network
        ));
    }
    Ok(Route {
        network,
        prefix,
        gateway,
    })
}

/// Parses `bytes` and resolves it against this machine's NICs (`(name,
/// MAC)` pairs, MACs lower case).
pub fn plan(bytes: &[u8], nics: &[(String, String)]) -> Result<Plan, NetworkDataError> {
    if bytes.len() > MAX_BYTES {
        return Err(NetworkDataError::TooBig(bytes.len()));
    }
    let raw: RawFile =
        serde_json::from_slice(bytes).map_err(|e| NetworkDataError::Parse(e.to_string()))?;
    let mut names: BTreeMap<String, String> = BTreeMap::new();
    let mut ifaces: Vec<Iface> = Vec::new();
    // Links in dependency order: NICs first, bonds, then VLANs (which may
    // sit on either). VLANs on VLANs are refused (no switch does that for a
    // deploy network).
    let order = |k: &str| match k {
        "bond" => 1,
        "vlan" => 2,
        _ => 0,
    };
    let mut links: Vec<(usize, &RawLink)> = raw.links.iter().enumerate().collect();
    links.sort_by_key(|(i, l)| (order(&l.kind), *i));
    let mut bond_no = 0;
    for (i, l) in links {
        let mac = l
            .ethernet_mac_address
            .as_deref()
            .map(|m| m.trim().to_ascii_lowercase())
            .filter(|m| !m.is_empty());
        if let Some(m) = &mac {
            if !agent_base::net::is_valid_mac(m) {
                return Err(entry("links", i, &l.id, format!("MAC {m:?} is not valid")));
            }
        }
        let mtu = match &l.mtu {
            None => None,
            Some(n) => Some(
                n.get()
                    .filter(|m| (68..=65535).contains(m))
                    .map(|m| m as u32)
                    .ok_or_else(|| entry("links", i, &l.id, "mtu is not 68..=65535"))?,
            ),
        };
        let (name, kind) = match l.kind.as_str() {
            "bond" => {
                let mut members = Vec::new();
                for m in &l.bond_links {
                    let n = names.get(m).ok_or_else(|| {
                        entry(
                            "links",
                            i,
                            &l.id,
                            format!("bond member {m:?} is not a NIC link"),
                        )
                    })?;
                    members.push(n.clone());
                }
                if members.is_empty() {
                    return Err(entry("links", i, &l.id, "bond without bond_links"));
                }
                let name = if valid_ifname(&l.id) && !nics.iter().any(|(n, _)| *n == l.id) {
                    l.id.clone()
                } else {
                    format!("bond{bond_no}")
                };
                bond_no += 1;
                let miimon = match &l.bond_miimon {
                    None => 100,
                    Some(n) => n
                        .get()
                        .ok_or_else(|| entry("links", i, &l.id, "bond_miimon is not a number"))?,
                };
                let bond = Bond {
                    members,
                    mode: l
                        .bond_mode
                        .clone()
                        .unwrap_or_else(|| "active-backup".into()),
                    miimon,
                    xmit_hash_policy: l.bond_xmit_hash_policy.clone(),
                    lacp_rate: l.bond_lacp_rate.clone(),
                };
                for field in [
                    Some(&bond.mode),
                    bond.xmit_hash_policy.as_ref(),
                    bond.lacp_rate.as_ref(),
                ]
                .into_iter()
                .flatten()
                {
                    if field.is_empty()
                        || !field
                            .bytes()
                            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'+'))
                    {
                        return Err(entry(
                            "links",
                            i,
                            &l.id,
                            format!("bond setting {field:?} is not a bonding driver value"),
                        ));
                    }
                }
                (name, LinkKind::Bond(bond))
            }
            "vlan" => {
                let parent_id = l
                    .vlan_link
                    .as_deref()
                    .ok_or_else(|| entry("links", i, &l.id, "vlan without vlan_link"))?;
                let parent = names.get(parent_id).cloned().ok_or_else(|| {
                    entry(
                        "links",
                        i,
                        &l.id,
                        format!("vlan_link {parent_id:?} is not a NIC or bond link"),
                    )
                })?;
                let vid = l
                    .vlan_id
                    .as_ref()
                    .and_then(Num::get)
                    .filter(|v| (1..4095).contains(v))
                    .ok_or_else(|| entry("links", i, &l.id, "vlan_id is not 1..=4094"))?
                    as u16;
                let name = format!("{parent}.{vid}");
                if !valid_ifname(&name) {
                    return Err(entry(
                        "links",
                        i,
                        &l.id,
                        format!("interface name {name:?} too long"),
                    ));
                }
                (name, LinkKind::Vlan { parent, vid })
            }
            _ => {
                // phy, ethernet, vif, … : a NIC of this machine.
                let m = mac.as_deref().ok_or_else(|| {
                    entry("links", i, &l.id, "a NIC link without ethernet_mac_address")
                })?;
                let name = nics
                    .iter()
                    .find(|(_, nm)| nm == m)
                    .map(|(n, _)| n.clone())
                    .ok_or_else(|| entry("links", i, &l.id, format!("no NIC has MAC {m}")))?;
                (name, LinkKind::Phy)
            }
        };
        if names.insert(l.id.clone(), name.clone()).is_some() {
            return Err(entry("links", i, &l.id, "duplicate link id"));
        }
        ifaces.push(Iface {
            id: l.id.clone(),
            name,
            mac,
            kind,
            mtu,
            addrs: Vec::new(),
            routes: Vec::new(),
            dhcp4: false,
            dhcp6: false,
        });
    }

    let mut dns: Vec<IpAddr> = Vec::new();
    let add_dns = |dns: &mut Vec<IpAddr>, s: &str| match s.trim().parse::<IpAddr>() {
        Ok(a) if !dns.contains(&a) => dns.push(a),
        Ok(_) => {}
        Err(_) => tracing::warn!("network_data.json: DNS server {s:?} is not an address; ignored"),
    };
    for s in raw.services.iter().filter(|s| s.kind == "dns") {
        add_dns(&mut dns, &s.address);
    }
    for (i, n) in raw.networks.iter().enumerate() {
        let iface = ifaces.iter_mut().find(|f| f.id == n.link).ok_or_else(|| {
            entry(
                "networks",
                i,
                &n.id,
                format!("link {:?} is not a link", n.link),
            )
        })?;
        match n.kind.as_str() {
            "ipv4" | "ipv6" => {
                let ip = n
                    .ip_address
                    .as_deref()
                    .ok_or_else(|| entry("networks", i, &n.id, "no ip_address"))?;
                let (addr, prefix) = address(ip, n.netmask.as_deref())
                    .map_err(|e| entry("networks", i, &n.id, e.to_string()))?;
                if addr.is_ipv4() != (n.kind == "ipv4") {
                    return Err(entry(
                        "networks",
                        i,
                        &n.id,
                        format!("{addr} is not an {} address", n.kind),
                    ));
                }
                iface.addrs.push((addr, prefix));
                for r in &n.routes {
                    let r = route(r).map_err(|e| entry("networks", i, &n.id, e.to_string()))?;
                    if r.gateway.is_ipv4() != addr.is_ipv4() {
                        return Err(entry(
                            "networks",
                            i,
                            &n.id,
                            format!("route via {} on an {} network", r.gateway, n.kind),
                        ));
                    }
                    iface.routes.push(r);
                }
                for d in &n.dns_nameservers {
                    add_dns(&mut dns, d);
                }
            }
            "ipv4_dhcp" => iface.dhcp4 = true,
            k if k.starts_with("ipv6_") => iface.dhcp6 = true,
            other => tracing::warn!(
                "network_data.json networks[{i}] {:?}: type {other:?} not understood; ignored",
                n.id
            ),
        }
    }
    Ok(Plan { ifaces, dns })
}

/// One console line for a planned interface.
pub fn describe(f: &Iface) -> String {
    let kind = match &f.kind {
        LinkKind::Phy => "NIC".to_string(),
        LinkKind::Bond(b) => format!("bond {} of {}", b.mode, b.members.join("+")),
        LinkKind::Vlan { parent, vid } => format!("VLAN {vid} on {parent}"),
    };
    let mut parts = vec![format!("{} ({kind}, link {:?})", f.name, f.id)];
    if let Some(m) = f.mtu {
        parts.push(format!("mtu {m}"));
    }
    for (a, p) in &f.addrs {
        parts.push(format!("{a}/{p}"));
    }
    for r in &f.routes {
        parts.push(format!(
            "route {}/{} via {}",
            r.network, r.prefix, r.gateway
        ));
    }
    if f.dhcp4 {
        parts.push("DHCPv4".into());
    }
    if f.dhcp6 {
        parts.push("IPv6 autoconf".into());
    }
    if f.addrs.is_empty() && !f.dhcp4 && !f.dhcp6 {
        parts.push("no address".into());
    }
    format!("{} from network_data.json", parts.join(" "))
}

#[cfg(test)]
mod tests;
