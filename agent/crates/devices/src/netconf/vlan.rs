//! VLAN interfaces from `ipa-enable-vlan-interfaces`, IPA's syntax: a comma
//! list of `interface.vid` (that VLAN; the interface named or, as IPA 13
//! allows, given by its MAC), `interface` (every VLAN the switch
//! port names in LLDP) or `all` (the same on every NIC with link). As IPA
//! does, the VLANs learnt from LLDP are those of the IEEE 802.1 VLAN Name
//! TLVs. Created with the 8021q ioctl (SIOCSIFVLAN, ADD_VLAN_CMD) and named
//! `<parent>.<vid>` by the kernel.
#![allow(unsafe_code)]

use std::collections::BTreeMap;
use std::os::fd::AsRawFd;

use anyhow::{bail, Context, Result};
use nix::sys::socket::{socket, AddressFamily, SockFlag, SockType};

use crate::lldp::listen::Heard;
use crate::lldp::tlv::parse_neighbor;

/// `struct vlan_ioctl_args` of `<linux/if_vlan.h>`.
#[repr(C)]
struct VlanIoctlArgs {
    cmd: libc::c_int,
    device1: [libc::c_char; 24],
    /// The union `u`; `VID` is its first int.
    u: [libc::c_int; 6],
    vlan_qos: libc::c_short,
}

const ADD_VLAN_CMD: libc::c_int = 0;
const SIOCSIFVLAN: libc::Ioctl = 0x8983;

/// `eth0.100` → (`eth0`, 100); anything else is not an explicit VLAN.
pub fn parse_spec(spec: &str) -> Option<(String, u16)> {
    let (parent, vid) = spec.trim().rsplit_once('.')?;
    let vid: u16 = vid.parse().ok()?;
    (!parent.is_empty() && (1..=4094).contains(&vid)).then(|| (parent.to_string(), vid))
}

/// The NIC (name, MAC) that `parent` of `parent.vid` names among `nics`
/// (name, lower-case MAC): by interface name, else by MAC in any case, as
/// IPA 13's `bring_up_vlan_interfaces` matches.
pub fn find_parent(nics: &[(String, String)], parent: &str) -> Option<(String, String)> {
    nics.iter()
        .find(|(n, _)| n == parent)
        .or_else(|| nics.iter().find(|(_, m)| m.eq_ignore_ascii_case(parent)))
        .cloned()
}

/// What an `ipa-enable-vlan-interfaces` value asks for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VlanPlan {
    /// `eth0.100`: these VLANs.
    pub explicit: Vec<(String, u16)>,
    /// `all`: the LLDP VLANs of every NIC with link.
    pub lldp_all: bool,
    /// `eth0`: the LLDP VLANs of these NICs.
    pub lldp_on: Vec<String>,
}

impl VlanPlan {
    /// Parses the kernel argument's value.
    pub fn parse(raw: &str) -> Self {
        let mut plan = Self::default();
        for item in raw.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            if item == "all" {
                plan.lldp_all = true;
            } else if let Some(v) = parse_spec(item) {
                plan.explicit.push(v);
            } else if item.contains('.') {
                eprintln!(
                    "net: ipa-enable-vlan-interfaces: {item:?} is not interface.vid (1-4094)"
                );
            } else {
                plan.lldp_on.push(item.to_string());
            }
        }
        plan
    }

    /// Whether LLDP must be heard first.
    pub fn needs_lldp(&self) -> bool {
        self.lldp_all || !self.lldp_on.is_empty()
    }

    /// Whether VLANs learnt by LLDP on `nic` are wanted.
    pub fn wants_lldp_on(&self, nic: &str) -> bool {
        self.lldp_all || self.lldp_on.iter().any(|n| n == nic)
    }
}

/// The VLANs to create from what each NIC heard: the 802.1 VLAN Name TLVs.
pub fn from_lldp(heard: &BTreeMap<String, Heard>) -> Vec<(String, u16)> {
    let mut out = Vec::new();
    for (nic, h) in heard {
        if let Heard::Frame(f) = h {
            for v in parse_neighbor(f).vlans {
                if (1..=4094).contains(&v.id) && !out.contains(&(nic.clone(), v.id)) {
                    out.push((nic.clone(), v.id));
                }
            }
        }
    }
    out
}

/// Creates `<parent>.<vid>` (already existing is fine); returns its name.
pub fn create(parent: &str, vid: u16) -> Result<String> {
    let name = format!("{parent}.{vid}");
    if parent.len() >= 24 || name.len() >= libc::IFNAMSIZ {
        bail!("VLAN interface name {name:?} too long");
    }
    let mut args = VlanIoctlArgs {
        cmd: ADD_VLAN_CMD,
        device1: [0; 24],
        u: [0; 6],
        vlan_qos: 0,
    };
    for (d, s) in args.device1.iter_mut().zip(parent.bytes()) {
        *d = s as libc::c_char;
    }
    args.u[0] = libc::c_int::from(vid);
    let fd = socket(
        AddressFamily::Inet,
        SockType::Datagram,
        SockFlag::SOCK_CLOEXEC,
        None,
    )?;
    // SAFETY: `args` is a live, fully initialised vlan_ioctl_args, the
    // struct SIOCSIFVLAN expects, borrowed for the call only.
    let r = unsafe { libc::ioctl(fd.as_raw_fd(), SIOCSIFVLAN, &raw mut args) };
    if r < 0 {
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EEXIST) {
            return Err(e).with_context(|| format!("creating VLAN {name} (is 8021q loaded?)"));
        }
    }
    Ok(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs() {
        assert_eq!(parse_spec("eth0.100"), Some(("eth0".into(), 100)));
        assert_eq!(parse_spec("enp1s0f0.4094"), Some(("enp1s0f0".into(), 4094)));
        assert_eq!(parse_spec("eth0.4095"), None, "reserved");
        assert_eq!(parse_spec("eth0"), None);
        assert_eq!(parse_spec("all"), None);
        assert_eq!(parse_spec(".5"), None);
        let plan = VlanPlan::parse("eth0.10, eth1.20,all,eth2,eth3.x");
        assert_eq!(
            plan.explicit,
            vec![("eth0".into(), 10), ("eth1".into(), 20)]
        );
        assert!(plan.lldp_all && plan.needs_lldp());
        assert_eq!(plan.lldp_on, vec!["eth2".to_string()]);
        let plan = VlanPlan::parse("eth2");
        assert!(plan.wants_lldp_on("eth2") && !plan.wants_lldp_on("eth0"));
        assert!(!VlanPlan::parse("eth0.5").needs_lldp());
        assert_eq!(VlanPlan::parse(""), VlanPlan::default());
    }

    #[test]
    fn a_vlans_parent_is_named_or_given_by_its_mac() {
        let nics = vec![
            ("eth0".to_string(), "52:54:00:30:00:01".to_string()),
            ("eth1".to_string(), "52:54:00:30:00:02".to_string()),
        ];
        let plan = VlanPlan::parse("52:54:00:30:00:02.300,eth0.100");
        assert_eq!(plan.explicit[0], ("52:54:00:30:00:02".into(), 300));
        assert_eq!(
            find_parent(&nics, "52:54:00:30:00:02").map(|p| p.0),
            Some("eth1".to_string())
        );
        assert_eq!(
            find_parent(&nics, "52:54:00:30:00:0A".trim_end_matches('A')).map(|p| p.0),
            None,
            "a partial MAC names nothing"
        );
        assert_eq!(
            find_parent(&nics, "52:54:00:30:00:02".to_uppercase().as_str()).map(|p| p.0),
            Some("eth1".to_string()),
            "any case"
        );
        assert_eq!(
            find_parent(&nics, "eth0").map(|p| p.1),
            Some("52:54:00:30:00:01".to_string())
        );
        assert_eq!(find_parent(&nics, "eth9"), None);
    }

    #[test]
    fn vlans_come_from_vlan_name_tlvs() {
        use crate::lldp::tlv::{build_frame, parse_frame, switch_tlvs};
        let chassis = [2, 0, 0, 0, 0, 1];
        // switch_tlvs names VLAN 100 ("prov") and sets port VLAN 100.
        let mut tlvs = switch_tlvs(chassis, "Ethernet1", "leaf");
        let mut named = vec![0x00, 0x80, 0xc2, 3, 0x00, 0xc8, 3];
        named.extend_from_slice(b"ext");
        tlvs.insert(5, (127, named));
        // A port VLAN ID TLV alone (no name) does not create a VLAN, as in IPA.
        let only_pvid = switch_tlvs(chassis, "Ethernet2", "leaf")
            .into_iter()
            .filter(|(t, v)| !(*t == 127 && v.get(3) == Some(&3)))
            .collect::<Vec<_>>();
        let heard: BTreeMap<String, Heard> = [
            (
                "eth0".to_string(),
                Heard::Frame(parse_frame(&build_frame(chassis, &tlvs)).unwrap()),
            ),
            (
                "eth1".to_string(),
                Heard::Frame(parse_frame(&build_frame(chassis, &only_pvid)).unwrap()),
            ),
            ("eth2".to_string(), Heard::Nothing { malformed: 1 }),
        ]
        .into();
        let mut got = from_lldp(&heard);
        got.sort();
        assert_eq!(got, vec![("eth0".into(), 100), ("eth0".into(), 200)]);
    }
}
