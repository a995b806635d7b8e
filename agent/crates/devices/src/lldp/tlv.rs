//! LLDP frames (IEEE 802.1AB): splitting a received Ethernet frame into
//! TLVs, IPA's raw form (`[[type, "hex"], ...]`, what Ironic's `parse-lldp`
//! hook reads) and a parsed form (chassis, port, names, VLANs, MTU).
//!
//! Every read is bounds-checked: a truncated or over-long TLV ends the walk
//! (the TLVs before it are kept and the problem is recorded), it never
//! panics.

use std::fmt::Write;
use std::net::{Ipv4Addr, Ipv6Addr};

use serde::Serialize;

/// LLDP's ethertype.
pub const ETHERTYPE: u16 = 0x88cc;
/// The three LLDP destination groups (nearest bridge, non-TPMR, customer bridge).
pub const MULTICAST: [[u8; 6]; 3] = [
    [0x01, 0x80, 0xc2, 0x00, 0x00, 0x0e],
    [0x01, 0x80, 0xc2, 0x00, 0x00, 0x03],
    [0x01, 0x80, 0xc2, 0x00, 0x00, 0x00],
];

/// A frame split into TLVs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// `(type, value)` in order, up to and excluding the End TLV.
    pub tlvs: Vec<(u8, Vec<u8>)>,
    /// Whether an End TLV was seen.
    pub ended: bool,
    /// What was wrong with the rest of the frame, if anything.
    pub problem: Option<String>,
}

/// Why a frame is not LLDP at all.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// Shorter than an Ethernet header.
    #[error("frame of {0} bytes is shorter than an Ethernet header")]
    TooShort(usize),
    /// Another ethertype.
    #[error("ethertype {0:#06x} is not LLDP")]
    NotLldp(u16),
    /// No TLV could be read.
    #[error("no TLV in the frame: {0}")]
    Empty(String),
}

/// Splits an Ethernet frame (header included; an 802.1Q tag is skipped).
pub fn parse_frame(frame: &[u8]) -> Result<Frame, FrameError> {
    if frame.len() < 14 {
        return Err(FrameError::TooShort(frame.len()));
    }
    let mut ethertype = u16::from_be_bytes([frame[12], frame[13]]);
    let mut pos = 14;
    if ethertype == 0x8100 && frame.len() >= 18 {
        ethertype = u16::from_be_bytes([frame[16], frame[17]]);
        pos = 18;
    }
    if ethertype != ETHERTYPE {
        return Err(FrameError::NotLldp(ethertype));
    }
    let f = parse_tlvs(&frame[pos..]);
    if f.tlvs.is_empty() && !f.ended {
        return Err(FrameError::Empty(
            f.problem
                .unwrap_or_else(|| "nothing after the header".into()),
        ));
    }
    Ok(f)
}

/// Splits an LLDPDU (the bytes after the Ethernet header) into TLVs.
pub fn parse_tlvs(mut buf: &[u8]) -> Frame {
    let mut out = Frame {
        tlvs: Vec::new(),
        ended: false,
        problem: None,
    };
    while !buf.is_empty() {
        if buf.len() < 2 {
            out.problem = Some("a lone byte where a TLV header should be".into());
            break;
        }
        let header = u16::from_be_bytes([buf[0], buf[1]]);
        let kind = (header >> 9) as u8;
        let len = usize::from(header & 0x01ff);
        let Some(value) = buf.get(2..2 + len) else {
            out.problem = Some(format!(
                "TLV type {kind} declares {len} bytes but only {} remain",
                buf.len() - 2
            ));
            break;
        };
        if kind == 0 {
            out.ended = true;
            break;
        }
        out.tlvs.push((kind, value.to_vec()));
        buf = &buf[2 + len..];
    }
    out
}

/// IPA's raw form: each TLV as `[type, "hex"]`, then `[0, ""]` for the End
/// TLV when the frame had one.
pub fn raw_form(frame: &Frame) -> Vec<(u8, String)> {
    let mut v: Vec<(u8, String)> = frame.tlvs.iter().map(|(t, d)| (*t, hex(d))).collect();
    if frame.ended {
        v.push((0, String::new()));
    }
    v
}

/// Lower-case hex.
pub fn hex(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

/// A VLAN the switch port carries (802.1 VLAN Name TLV).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Vlan {
    /// VLAN id.
    pub id: u16,
    /// Name.
    pub name: String,
}

/// The neighbour (switch port) a frame describes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Neighbor {
    /// Chassis ID (a MAC as `aa:bb:..`, an address, or text).
    pub chassis_id: Option<String>,
    /// Chassis ID subtype name (`mac_address`, `network_address`, ...).
    pub chassis_id_subtype: Option<String>,
    /// Port ID.
    pub port_id: Option<String>,
    /// Port ID subtype name.
    pub port_id_subtype: Option<String>,
    /// Time to live, seconds.
    pub ttl: Option<u16>,
    /// Port description.
    pub port_description: Option<String>,
    /// System name.
    pub system_name: Option<String>,
    /// System description.
    pub system_description: Option<String>,
    /// Management addresses.
    pub management_addresses: Vec<String>,
    /// Untagged (port) VLAN id (802.1).
    pub port_vlan_id: Option<u16>,
    /// VLANs with names (802.1).
    pub vlans: Vec<Vlan>,
    /// Maximum frame size (802.3), reported as the port MTU.
    pub mtu: Option<u16>,
    /// TLVs that could not be decoded, and frame-level problems.
    pub problems: Vec<String>,
}

const CHASSIS_SUBTYPES: [&str; 8] = [
    "reserved",
    "chassis_component",
    "interface_alias",
    "port_component",
    "mac_address",
    "network_address",
    "interface_name",
    "local",
];
const PORT_SUBTYPES: [&str; 8] = [
    "reserved",
    "interface_alias",
    "port_component",
    "mac_address",
    "network_address",
    "interface_name",
    "agent_circuit_id",
    "local",
];
const OUI_8021: [u8; 3] = [0x00, 0x80, 0xc2];
const OUI_8023: [u8; 3] = [0x00, 0x12, 0x0f];

/// Decodes the TLVs this agent reports in parsed form.
pub fn parse_neighbor(frame: &Frame) -> Neighbor {
    let mut n = Neighbor::default();
    if let Some(p) = &frame.problem {
        n.problems.push(p.clone());
    }
    for (kind, v) in &frame.tlvs {
        match kind {
            1 | 2 => {
                let (subtypes, mac_subtype, addr_subtype) = if *kind == 1 {
                    (&CHASSIS_SUBTYPES, 4, 5)
                } else {
                    (&PORT_SUBTYPES, 3, 4)
                };
                let Some((&sub, id)) = v.split_first().filter(|(_, id)| !id.is_empty()) else {
                    n.problems.push(format!("TLV {kind} is too short"));
                    continue;
                };
                let value = if sub == mac_subtype && id.len() == 6 {
                    mac(id)
                } else if sub == addr_subtype {
                    address(id).unwrap_or_else(|| hex(id))
                } else {
                    text(id)
                };
                let name = subtypes
                    .get(usize::from(sub))
                    .copied()
                    .unwrap_or("reserved");
                if *kind == 1 {
                    n.chassis_id = Some(value);
                    n.chassis_id_subtype = Some(name.into());
                } else {
                    n.port_id = Some(value);
                    n.port_id_subtype = Some(name.into());
                }
            }
            3 => match v.as_slice() {
                [a, b] => n.ttl = Some(u16::from_be_bytes([*a, *b])),
                _ => n.problems.push("TTL TLV is not 2 bytes".into()),
            },
            4 => n.port_description = Some(text(v)),
            5 => n.system_name = Some(text(v)),
            6 => n.system_description = Some(text(v)),
            8 => match management_address(v) {
                Some(a) => n.management_addresses.push(a),
                None => n.problems.push("malformed management address TLV".into()),
            },
            127 => organizational(&mut n, v),
            _ => {}
        }
    }
    n
}

fn organizational(n: &mut Neighbor, v: &[u8]) {
    if v.len() < 4 {
        n.problems
            .push("organizational TLV shorter than its OUI".into());
        return;
    }
    let (oui, sub, body) = ([v[0], v[1], v[2]], v[3], &v[4..]);
    match (oui, sub) {
        (OUI_8021, 1) => match body {
            [a, b] => n.port_vlan_id = Some(u16::from_be_bytes([*a, *b])),
            _ => n.problems.push("802.1 port VLAN TLV is not 2 bytes".into()),
        },
        (OUI_8021, 3) => {
            let parsed = (|| {
                let id = u16::from_be_bytes([*body.first()?, *body.get(1)?]);
                let len = usize::from(*body.get(2)?);
                let name = body.get(3..3 + len)?;
                Some(Vlan {
                    id,
                    name: text(name),
                })
            })();
            match parsed {
                Some(vlan) => n.vlans.push(vlan),
                None => n.problems.push("malformed 802.1 VLAN name TLV".into()),
            }
        }
        (OUI_8023, 4) => match body {
            [a, b] => n.mtu = Some(u16::from_be_bytes([*a, *b])),
            _ => n
                .problems
                .push("802.3 maximum frame size TLV is not 2 bytes".into()),
        },
        _ => {}
    }
}

fn management_address(v: &[u8]) -> Option<String> {
    let len = usize::from(*v.first()?);
    let addr = v.get(1..1 + len)?;
    address(addr)
}

/// An IANA address-family-prefixed address (1 = IPv4, 2 = IPv6).
fn address(v: &[u8]) -> Option<String> {
    match v {
        [1, a, b, c, d] => Some(Ipv4Addr::new(*a, *b, *c, *d).to_string()),
        [2, rest @ ..] if rest.len() == 16 => {
            let mut o = [0u8; 16];
            o.copy_from_slice(rest);
            Some(Ipv6Addr::from(o).to_string())
        }
        _ => None,
    }
}

fn mac(b: &[u8]) -> String {
    b.iter()
        .map(|x| format!("{x:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// Text TLVs: UTF-8 (lossy), trailing NULs and whitespace removed.
fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b)
        .trim_end_matches(|c: char| c == '\0' || c.is_whitespace())
        .to_string()
}

/// Builds an LLDP frame to the nearest-bridge group from `src` with these
/// TLVs and an End TLV, padded to Ethernet's 60-byte minimum (tests and the
/// test switch).
pub fn build_frame(src: [u8; 6], tlvs: &[(u8, Vec<u8>)]) -> Vec<u8> {
    let mut f = Vec::with_capacity(64);
    f.extend_from_slice(&MULTICAST[0]);
    f.extend_from_slice(&src);
    f.extend_from_slice(&ETHERTYPE.to_be_bytes());
    for (kind, value) in tlvs {
        let header = (u16::from(*kind) << 9) | (value.len() as u16 & 0x01ff);
        f.extend_from_slice(&header.to_be_bytes());
        f.extend_from_slice(value);
    }
    f.extend_from_slice(&[0, 0]);
    if f.len() < 60 {
        f.resize(60, 0);
    }
    f
}

/// The TLVs a typical switch port sends: chassis MAC, port name, TTL 120,
/// port description, system name, port VLAN, one named VLAN and a maximum
/// frame size of 9216.
pub fn switch_tlvs(chassis: [u8; 6], port: &str, system_name: &str) -> Vec<(u8, Vec<u8>)> {
    let mut chassis_id = vec![4];
    chassis_id.extend_from_slice(&chassis);
    let mut port_id = vec![5];
    port_id.extend_from_slice(port.as_bytes());
    let mut vlan_name = vec![0x00, 0x80, 0xc2, 3, 0x00, 0x64, 4];
    vlan_name.extend_from_slice(b"prov");
    vec![
        (1, chassis_id),
        (2, port_id),
        (3, vec![0, 120]),
        (4, format!("{port} to server").into_bytes()),
        (5, system_name.as_bytes().to_vec()),
        (127, vec![0x00, 0x80, 0xc2, 1, 0x00, 0x64]),
        (127, vlan_name),
        (127, vec![0x00, 0x12, 0x0f, 4, 0x24, 0x00]),
    ]
}

/// A management address TLV (type 8) for `ip`: the address with its IANA
/// family (1 = IPv4, 2 = IPv6), interface numbering "unknown" (1) with
/// number 0, and no OID (tests and the test switch).
pub fn management_address_tlv(ip: std::net::IpAddr) -> (u8, Vec<u8>) {
    let addr: Vec<u8> = match ip {
        std::net::IpAddr::V4(a) => std::iter::once(1).chain(a.octets()).collect(),
        std::net::IpAddr::V6(a) => std::iter::once(2).chain(a.octets()).collect(),
    };
    // At most 17 bytes, so the length always fits.
    let mut v = vec![addr.len() as u8];
    v.extend_from_slice(&addr);
    v.extend_from_slice(&[1, 0, 0, 0, 0, 0]);
    (8, v)
}

#[cfg(test)]
mod tests;
