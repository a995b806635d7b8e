//! The record of what the ramdisk's network ended up as: which interfaces
//! got a static address, which DHCP, which bonds and VLANs exist. The
//! ramdisk's init writes it (JSON, [`RAMDISK_PATH`]) after bring-up; the
//! agent reads it when a deploy asks to carry the ramdisk's network into
//! the installed system (`coreos_copy_network`, rendered by
//! [`super::nm_keyfile`]).
//!
//! Interfaces are described by what survives a reboot into another OS: a
//! NIC by its MAC (the installed system names it differently), a bond or
//! VLAN by its name and members/parent.

use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use super::network_data::{LinkKind, Plan};
use super::static_ip::StaticIp;
use super::NicResult;

/// Where the ramdisk's init writes the record.
pub const RAMDISK_PATH: &str = "/run/ironic-agent/network.json";

/// Largest record read back (a few KiB in practice).
const MAX_BYTES: u64 = 1 << 20;

/// How an address family is configured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Method {
    /// Static addresses only.
    Static,
    /// DHCP (IPv4) or DHCPv6/SLAAC (IPv6).
    Dhcp,
    /// Not configured.
    Off,
}

/// What kind of interface.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum Kind {
    /// A NIC, matched by MAC.
    Ethernet,
    /// A bond of other recorded interfaces (by name).
    Bond {
        /// Member interface names.
        members: Vec<String>,
        /// Bonding mode (`active-backup`, `802.3ad`, …).
        mode: String,
        /// Link monitoring interval in ms.
        miimon: u64,
        /// `xmit_hash_policy`, if set.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        xmit_hash_policy: Option<String>,
        /// `lacp_rate`, if set.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        lacp_rate: Option<String>,
    },
    /// A VLAN on another recorded interface (by name).
    Vlan {
        /// Parent interface name.
        parent: String,
        /// VLAN ID.
        vid: u16,
    },
}

/// A route other than the default one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Route {
    /// Destination network.
    pub network: IpAddr,
    /// Its prefix length.
    pub prefix: u8,
    /// Next hop.
    pub gateway: IpAddr,
}

/// One configured interface.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Iface {
    /// Name in the ramdisk.
    pub name: String,
    /// MAC, lower case (always for NICs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mac: Option<String>,
    /// NIC, bond or VLAN.
    #[serde(flatten)]
    pub kind: Kind,
    /// MTU, when set explicitly.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtu: Option<u32>,
    /// IPv4 method.
    pub ipv4: Method,
    /// IPv6 method.
    pub ipv6: Method,
    /// Static addresses with prefix lengths.
    #[serde(default)]
    pub addrs: Vec<(IpAddr, u8)>,
    /// Default IPv4 gateway.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway4: Option<Ipv4Addr>,
    /// Default IPv6 gateway.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway6: Option<IpAddr>,
    /// Other routes.
    #[serde(default)]
    pub routes: Vec<Route>,
    /// Enslaved to this bond (then it has no addresses of its own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bond_master: Option<String>,
}

/// The whole record.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetRecord {
    /// Interfaces in creation order (NICs, bonds, VLANs).
    pub ifaces: Vec<Iface>,
    /// DNS servers.
    #[serde(default)]
    pub dns: Vec<IpAddr>,
}

impl NetRecord {
    /// The record of a bring-up: the `network_data.json` plan as applied,
    /// the `ip=` static address, and every NIC DHCP configured.
    pub fn from_bringup(
        plan: Option<&Plan>,
        fixed: Option<&StaticIp>,
        results: &[NicResult],
    ) -> Self {
        let mut rec = NetRecord::default();
        if let Some(p) = plan {
            rec.dns.clone_from(&p.dns);
            for f in &p.ifaces {
                rec.ifaces.push(from_plan(f));
            }
            // Bond members the plan names only inside the bond.
            for f in &p.ifaces {
                if let LinkKind::Bond(b) = &f.kind {
                    for m in &b.members {
                        match rec.ifaces.iter_mut().find(|i| &i.name == m) {
                            Some(i) => {
                                i.bond_master = Some(f.name.clone());
                                i.ipv4 = Method::Off;
                                i.ipv6 = Method::Off;
                            }
                            None => rec.ifaces.push(Iface {
                                bond_master: Some(f.name.clone()),
                                ..blank(m, None, Kind::Ethernet, Method::Off)
                            }),
                        }
                    }
                }
            }
        }
        for r in results {
            let Ok(lease) = &r.outcome else { continue };
            if rec.ifaces.iter().any(|i| i.name == r.name) {
                continue;
            }
            let is_static =
                lease.server.is_unspecified() && fixed.is_some_and(|f| f.addr == lease.addr);
            let (kind, name) = match r.name.split_once('.') {
                Some((parent, vid)) if vid.parse::<u16>().is_ok() => (
                    Kind::Vlan {
                        parent: parent.to_string(),
                        vid: vid.parse().unwrap_or_default(),
                    },
                    r.name.clone(),
                ),
                _ => (Kind::Ethernet, r.name.clone()),
            };
            let mac = (!r.mac.is_empty()).then(|| r.mac.clone());
            let mut i = blank(&name, mac, kind, Method::Dhcp);
            i.ipv6 = Method::Dhcp;
            if is_static {
                i.ipv4 = Method::Static;
                i.addrs = vec![(IpAddr::V4(lease.addr), lease.prefix)];
                i.gateway4 = lease.router;
                for d in &lease.dns {
                    if !rec.dns.contains(&IpAddr::V4(*d)) {
                        rec.dns.push(IpAddr::V4(*d));
                    }
                }
            }
            rec.ifaces.push(i);
        }
        // A VLAN's parent NIC must be known by MAC in the target system.
        let parents: Vec<String> = rec
            .ifaces
            .iter()
            .filter_map(|i| match &i.kind {
                Kind::Vlan { parent, .. } => Some(parent.clone()),
                _ => None,
            })
            .collect();
        for p in parents {
            if !rec.ifaces.iter().any(|i| i.name == p) {
                let mac = results.iter().find(|r| r.name == p).map(|r| r.mac.clone());
                rec.ifaces
                    .insert(0, blank(&p, mac, Kind::Ethernet, Method::Off));
            }
        }
        rec
    }

    /// Writes the record to `path` (directories made as needed).
    pub fn save(&self, path: &Path) -> Result<()> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        let text = serde_json::to_vec_pretty(self)?;
        std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
    }

    /// Reads a record; `Ok(None)` when there is none at `path`.
    pub fn load(path: &Path) -> Result<Option<Self>> {
        use std::io::Read;
        let file = match std::fs::File::open(path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e).with_context(|| format!("opening {}", path.display())),
        };
        let mut bytes = Vec::new();
        file.take(MAX_BYTES + 1)
            .read_to_end(&mut bytes)
            .with_context(|| format!("reading {}", path.display()))?;
        if bytes.len() as u64 > MAX_BYTES {
            anyhow::bail!("{} is larger than {MAX_BYTES} bytes", path.display());
        }
        serde_json::from_slice(&bytes)
            .map(Some)
            .with_context(|| format!("{} is not a network record", path.display()))
    }
}

fn blank(name: &str, mac: Option<String>, kind: Kind, ipv4: Method) -> Iface {
    Iface {
        name: name.to_string(),
        mac,
        kind,
        mtu: None,
        ipv4,
        ipv6: Method::Off,
        addrs: Vec::new(),
        gateway4: None,
        gateway6: None,
        routes: Vec::new(),
        bond_master: None,
    }
}

/// One planned interface, as configured.
fn from_plan(f: &super::network_data::Iface) -> Iface {
    let kind = match &f.kind {
        LinkKind::Phy => Kind::Ethernet,
        LinkKind::Bond(b) => Kind::Bond {
            members: b.members.clone(),
            mode: b.mode.clone(),
            miimon: b.miimon,
            xmit_hash_policy: b.xmit_hash_policy.clone(),
            lacp_rate: b.lacp_rate.clone(),
        },
        LinkKind::Vlan { parent, vid } => Kind::Vlan {
            parent: parent.clone(),
            vid: *vid,
        },
    };
    let has4 = f.addrs.iter().any(|(a, _)| a.is_ipv4());
    let has6 = f.addrs.iter().any(|(a, _)| a.is_ipv6());
    let method = |has: bool, dhcp: bool| match (has, dhcp) {
        (true, _) => Method::Static,
        (false, true) => Method::Dhcp,
        (false, false) => Method::Off,
    };
    let mut i = blank(&f.name, f.mac.clone(), kind, method(has4, f.dhcp4));
    i.ipv6 = method(has6, f.dhcp6);
    i.mtu = f.mtu;
    i.addrs.clone_from(&f.addrs);
    for r in &f.routes {
        match (r.prefix, r.gateway) {
            (0, IpAddr::V4(gw)) => i.gateway4 = Some(gw),
            (0, gw @ IpAddr::V6(_)) => i.gateway6 = Some(gw),
            _ => i.routes.push(Route {
                network: r.network,
                prefix: r.prefix,
                gateway: r.gateway,
            }),
        }
    }
    i
}

#[cfg(test)]
mod tests {
    use super::super::dhcp::Lease;
    use super::super::network_data;
    use super::*;

    fn lease(addr: &str, server: &str) -> Lease {
        Lease {
            addr: addr.parse().unwrap(),
            prefix: 24,
            router: Some("10.0.0.1".parse().unwrap()),
            dns: vec!["10.0.0.53".parse().unwrap()],
            domain: None,
            server: server.parse().unwrap(),
            lease_secs: Some(600),
        }
    }

    fn nic(name: &str, mac: &str, outcome: Result<Lease, super::super::NicError>) -> NicResult {
        NicResult {
            name: name.into(),
            mac: mac.into(),
            outcome,
        }
    }

    #[test]
    fn dhcp_static_and_failed_nics() {
        let fixed = StaticIp {
            addr: "10.0.0.7".parse().unwrap(),
            prefix: 24,
            gateway: Some("10.0.0.1".parse().unwrap()),
            device: None,
            dns: vec!["10.0.0.53".parse().unwrap()],
        };
        let results = [
            nic(
                "eth0",
                "52:54:00:00:00:01",
                Ok(lease("10.0.0.7", "0.0.0.0")),
            ),
            nic(
                "eth1",
                "52:54:00:00:00:02",
                Ok(lease("10.1.0.9", "10.1.0.1")),
            ),
            nic(
                "eth2",
                "52:54:00:00:00:03",
                Err(super::super::NicError::NoLink),
            ),
            nic(
                "eth1.100",
                "52:54:00:00:00:02",
                Ok(lease("10.2.0.9", "10.2.0.1")),
            ),
        ];
        let rec = NetRecord::from_bringup(None, Some(&fixed), &results);
        let names: Vec<&str> = rec.ifaces.iter().map(|i| i.name.as_str()).collect();
        assert_eq!(
            names,
            ["eth0", "eth1", "eth1.100"],
            "no record of a NIC without link"
        );
        let eth0 = &rec.ifaces[0];
        assert_eq!(eth0.ipv4, Method::Static);
        assert_eq!(eth0.addrs, vec![("10.0.0.7".parse().unwrap(), 24)]);
        assert_eq!(eth0.gateway4, Some("10.0.0.1".parse().unwrap()));
        assert_eq!(rec.dns, vec!["10.0.0.53".parse::<IpAddr>().unwrap()]);
        let eth1 = &rec.ifaces[1];
        assert_eq!((eth1.ipv4, eth1.ipv6), (Method::Dhcp, Method::Dhcp));
        assert!(eth1.addrs.is_empty(), "a DHCP lease is not made static");
        assert_eq!(
            rec.ifaces[2].kind,
            Kind::Vlan {
                parent: "eth1".into(),
                vid: 100
            }
        );
        let back = serde_json::from_slice::<NetRecord>(&serde_json::to_vec(&rec).unwrap());
        assert_eq!(back.unwrap(), rec);
    }

    #[test]
    fn network_data_bond_vlan_and_routes() {
        let nd = serde_json::json!({
            "links": [
                {"id": "nic1", "type": "phy", "ethernet_mac_address": "52:54:00:00:00:01"},
                {"id": "nic2", "type": "phy", "ethernet_mac_address": "52:54:00:00:00:02"},
                {"id": "bond0", "type": "bond", "bond_links": ["nic1", "nic2"],
                 "bond_mode": "802.3ad", "bond_xmit_hash_policy": "layer3+4"},
                {"id": "v", "type": "vlan", "vlan_link": "bond0", "vlan_id": 42}
            ],
            "networks": [
                {"id": "a", "type": "ipv4", "link": "bond0", "ip_address": "10.9.0.5",
                 "netmask": "255.255.255.0",
                 "routes": [{"network": "0.0.0.0", "netmask": "0.0.0.0", "gateway": "10.9.0.1"},
                            {"network": "10.50.0.0", "netmask": "255.255.0.0", "gateway": "10.9.0.254"}]},
                {"id": "b", "type": "ipv4_dhcp", "link": "v"}
            ],
            "services": [{"type": "dns", "address": "10.9.0.53"}]
        });
        let nics = [
            ("eth0".to_string(), "52:54:00:00:00:01".to_string()),
            ("eth1".to_string(), "52:54:00:00:00:02".to_string()),
        ];
        let plan = network_data::plan(nd.to_string().as_bytes(), &nics).unwrap();
        let rec = NetRecord::from_bringup(Some(&plan), None, &[]);
        let by = |n: &str| rec.ifaces.iter().find(|i| i.name == n).unwrap();
        assert_eq!(by("eth0").bond_master.as_deref(), Some("bond0"));
        assert_eq!(by("eth1").ipv4, Method::Off);
        let bond = by("bond0");
        assert_eq!(bond.ipv4, Method::Static);
        assert_eq!(bond.gateway4, Some("10.9.0.1".parse().unwrap()));
        assert_eq!(bond.routes.len(), 1);
        assert!(
            matches!(&bond.kind, Kind::Bond { mode, xmit_hash_policy: Some(x), .. }
            if mode == "802.3ad" && x == "layer3+4")
        );
        let vlan = rec
            .ifaces
            .iter()
            .find(|i| matches!(i.kind, Kind::Vlan { vid: 42, .. }))
            .unwrap();
        assert_eq!(vlan.ipv4, Method::Dhcp);
        assert_eq!(rec.dns, vec!["10.9.0.53".parse::<IpAddr>().unwrap()]);
    }

    #[test]
    fn load_says_what_is_wrong() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("sub/network.json");
        assert!(NetRecord::load(&p).unwrap().is_none());
        let rec = NetRecord::default();
        rec.save(&p).unwrap();
        assert_eq!(NetRecord::load(&p).unwrap(), Some(rec));
        std::fs::write(&p, b"{\"ifaces\": 3}").unwrap();
        let e = format!("{:#}", NetRecord::load(&p).unwrap_err());
        assert!(e.contains("is not a network record"), "{e}");
    }
}
