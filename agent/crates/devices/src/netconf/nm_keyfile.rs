//! NetworkManager keyfiles (`*.nmconnection`, NM's native format) for a
//! [`NetRecord`]: what `coreos-installer install --copy-network` puts into
//! the installed system's boot filesystem (`coreos-firstboot-network/`),
//! where CoreOS's initramfs picks it up on first boot.
//!
//! The installed system names NICs its own way, so a NIC's connection
//! matches by MAC (no `interface-name`); bonds and VLANs keep their names
//! and refer to their members/parent by connection UUID, which is derived
//! from the interface name so the same record gives the same files.

use std::fmt::Write as _;
use std::net::IpAddr;

use super::record::{Iface, Kind, Method, NetRecord};

/// The directory `coreos-installer --copy-network` fills in the boot
/// filesystem.
pub const FIRSTBOOT_DIR: &str = "coreos-firstboot-network";

/// One keyfile: its file name and text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Keyfile {
    /// `<id>.nmconnection`.
    pub name: String,
    /// The keyfile.
    pub text: String,
}

/// The connection UUID of interface `name`.
fn uuid(name: &str) -> String {
    let d = ring::digest::digest(
        &ring::digest::SHA256,
        format!("ironic-agent nmconnection {name}").as_bytes(),
    );
    let mut b = [0u8; 16];
    b.copy_from_slice(&d.as_ref()[..16]);
    b[6] = (b[6] & 0x0f) | 0x50; // name-based
    b[8] = (b[8] & 0x3f) | 0x80; // RFC 4122 variant
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

/// A file-name-safe connection id.
fn conn_id(name: &str) -> String {
    let safe: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_') {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("ironic-{safe}")
}

/// The keyfiles for `rec`, one per interface.
pub fn render(rec: &NetRecord) -> Vec<Keyfile> {
    rec.ifaces
        .iter()
        .map(|i| Keyfile {
            name: format!("{}.nmconnection", conn_id(&i.name)),
            text: render_one(rec, i),
        })
        .collect()
}

fn is_ethernet(rec: &NetRecord, name: &str) -> bool {
    rec.ifaces
        .iter()
        .any(|i| i.name == name && i.kind == Kind::Ethernet)
}

fn render_one(rec: &NetRecord, i: &Iface) -> String {
    let mut t = String::new();
    let _ = writeln!(t, "[connection]");
    let _ = writeln!(t, "id={}", conn_id(&i.name));
    let _ = writeln!(t, "uuid={}", uuid(&i.name));
    match &i.kind {
        Kind::Ethernet => {
            let _ = writeln!(t, "type=ethernet");
        }
        Kind::Bond { .. } => {
            let _ = writeln!(t, "type=bond\ninterface-name={}", i.name);
        }
        Kind::Vlan { parent, vid } => {
            // A VLAN named after a NIC (`eth1.100`) would carry a name
            // that does not exist after the reboot.
            let name = if is_ethernet(rec, parent) {
                format!("vlan{vid}")
            } else {
                i.name.clone()
            };
            let _ = writeln!(t, "type=vlan\ninterface-name={name}");
        }
    }
    let _ = writeln!(t, "autoconnect=true");
    if let Some(m) = &i.bond_master {
        let _ = writeln!(t, "master={}\nslave-type=bond", uuid(m));
    }
    match &i.kind {
        Kind::Ethernet => {
            let _ = writeln!(t, "\n[ethernet]");
            if let Some(mac) = &i.mac {
                let _ = writeln!(t, "mac-address={}", mac.to_ascii_uppercase());
            }
            if let Some(mtu) = i.mtu {
                let _ = writeln!(t, "mtu={mtu}");
            }
        }
        Kind::Bond {
            mode,
            miimon,
            xmit_hash_policy,
            lacp_rate,
            ..
        } => {
            let _ = writeln!(t, "\n[bond]\nmode={mode}\nmiimon={miimon}");
            if let Some(x) = xmit_hash_policy {
                let _ = writeln!(t, "xmit_hash_policy={x}");
            }
            if let Some(x) = lacp_rate {
                let _ = writeln!(t, "lacp_rate={x}");
            }
            if let Some(mtu) = i.mtu {
                let _ = writeln!(t, "\n[ethernet]\nmtu={mtu}");
            }
        }
        Kind::Vlan { parent, vid } => {
            let _ = writeln!(t, "\n[vlan]\nid={vid}\nparent={}", uuid(parent));
            if let Some(mtu) = i.mtu {
                let _ = writeln!(t, "\n[ethernet]\nmtu={mtu}");
            }
        }
    }
    if i.bond_master.is_none() {
        family(&mut t, rec, i, false);
        family(&mut t, rec, i, true);
    }
    t
}

/// The `[ipv4]` or `[ipv6]` section.
fn family(t: &mut String, rec: &NetRecord, i: &Iface, v6: bool) {
    let (section, method) = if v6 {
        ("ipv6", i.ipv6)
    } else {
        ("ipv4", i.ipv4)
    };
    let _ = writeln!(t, "\n[{section}]");
    let of_family = |a: &IpAddr| a.is_ipv6() == v6;
    match method {
        Method::Off => {
            let _ = writeln!(t, "method=disabled");
        }
        Method::Dhcp => {
            let _ = writeln!(t, "method=auto");
        }
        Method::Static => {
            let _ = writeln!(t, "method=manual");
            for (n, (a, p)) in i.addrs.iter().filter(|(a, _)| of_family(a)).enumerate() {
                let _ = writeln!(t, "address{}={a}/{p}", n + 1);
            }
            let gw = if v6 {
                i.gateway6
            } else {
                i.gateway4.map(IpAddr::V4)
            };
            if let Some(gw) = gw {
                let _ = writeln!(t, "gateway={gw}");
            }
            let dns: Vec<String> = rec
                .dns
                .iter()
                .filter(|a| of_family(a))
                .map(|a| format!("{a};"))
                .collect();
            if !dns.is_empty() {
                let _ = writeln!(t, "dns={}", dns.concat());
            }
        }
    }
    for (n, r) in i
        .routes
        .iter()
        .filter(|r| of_family(&r.network))
        .enumerate()
    {
        let _ = writeln!(t, "route{}={}/{},{}", n + 1, r.network, r.prefix, r.gateway);
    }
}

#[cfg(test)]
mod tests {
    use super::super::record::Route;
    use super::*;

    fn iface(name: &str, kind: Kind) -> Iface {
        Iface {
            name: name.into(),
            mac: None,
            kind,
            mtu: None,
            ipv4: Method::Off,
            ipv6: Method::Off,
            addrs: vec![],
            gateway4: None,
            gateway6: None,
            routes: vec![],
            bond_master: None,
        }
    }

    #[test]
    fn bond_of_two_nics_with_static_address_and_a_vlan_on_a_nic() {
        let mut nic1 = iface("eth0", Kind::Ethernet);
        nic1.mac = Some("52:54:00:aa:00:01".into());
        nic1.bond_master = Some("bond0".into());
        let mut nic2 = nic1.clone();
        nic2.name = "eth1".into();
        nic2.mac = Some("52:54:00:aa:00:02".into());
        let mut bond = iface(
            "bond0",
            Kind::Bond {
                members: vec!["eth0".into(), "eth1".into()],
                mode: "active-backup".into(),
                miimon: 100,
                xmit_hash_policy: None,
                lacp_rate: None,
            },
        );
        bond.ipv4 = Method::Static;
        bond.ipv6 = Method::Dhcp;
        bond.addrs = vec![("10.9.0.5".parse().unwrap(), 24)];
        bond.gateway4 = Some("10.9.0.1".parse().unwrap());
        bond.routes = vec![Route {
            network: "10.50.0.0".parse().unwrap(),
            prefix: 16,
            gateway: "10.9.0.254".parse().unwrap(),
        }];
        let mut nic3 = iface("eth2", Kind::Ethernet);
        nic3.mac = Some("52:54:00:aa:00:03".into());
        let mut vlan = iface(
            "eth2.42",
            Kind::Vlan {
                parent: "eth2".into(),
                vid: 42,
            },
        );
        vlan.ipv4 = Method::Dhcp;
        let rec = NetRecord {
            ifaces: vec![nic1, nic2, bond, nic3, vlan],
            dns: vec!["10.9.0.53".parse().unwrap(), "fd00::53".parse().unwrap()],
        };
        let files = render(&rec);
        let names: Vec<&str> = files.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "ironic-eth0.nmconnection",
                "ironic-eth1.nmconnection",
                "ironic-bond0.nmconnection",
                "ironic-eth2.nmconnection",
                "ironic-eth2.42.nmconnection"
            ]
        );
        let bond_uuid = uuid("bond0");
        let eth0 = &files[0].text;
        assert!(eth0.contains("type=ethernet\n"), "{eth0}");
        assert!(eth0.contains("mac-address=52:54:00:AA:00:01\n"), "{eth0}");
        assert!(eth0.contains(&format!("master={bond_uuid}\nslave-type=bond\n")));
        assert!(!eth0.contains("[ipv4]"), "a bond member has no addresses");
        assert!(!eth0.contains("interface-name"), "a NIC matches by MAC");
        let b = &files[2].text;
        assert!(b.contains(&format!("uuid={bond_uuid}\n")), "{b}");
        assert!(b.contains("type=bond\ninterface-name=bond0\n"), "{b}");
        assert!(
            b.contains("[bond]\nmode=active-backup\nmiimon=100\n"),
            "{b}"
        );
        assert!(
            b.contains("[ipv4]\nmethod=manual\naddress1=10.9.0.5/24\ngateway=10.9.0.1\ndns=10.9.0.53;\nroute1=10.50.0.0/16,10.9.0.254\n"),
            "{b}"
        );
        assert!(b.contains("[ipv6]\nmethod=auto\n"), "{b}");
        let v = &files[4].text;
        assert!(v.contains("type=vlan\ninterface-name=vlan42\n"), "{v}");
        assert!(v.contains(&format!("[vlan]\nid=42\nparent={}\n", uuid("eth2"))));
        assert!(
            v.contains("[ipv4]\nmethod=auto\n[ipv6]")
                || v.contains("[ipv4]\nmethod=auto\n\n[ipv6]\nmethod=disabled"),
            "{v}"
        );
        // Same record, same files.
        assert_eq!(render(&rec), files);
    }

    #[test]
    fn uuids_are_well_formed_and_distinct() {
        let a = uuid("bond0");
        assert_eq!(a.len(), 36);
        assert_eq!(&a[14..15], "5");
        assert!(matches!(&a[19..20], "8" | "9" | "a" | "b"));
        assert_ne!(a, uuid("bond1"));
        assert_eq!(conn_id("a/b c"), "ironic-a_b_c");
    }
}
