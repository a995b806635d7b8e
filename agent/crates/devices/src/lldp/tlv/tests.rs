//! LLDP frame parsing: a typical switch frame, IPA's raw form, and frames
//! cut or corrupted in every possible way (none may panic).

use super::*;

const CHASSIS: [u8; 6] = [0x52, 0x54, 0x00, 0xab, 0xcd, 0xef];

fn typical() -> Vec<u8> {
    build_frame(
        [2, 0, 0, 0, 0, 1],
        &switch_tlvs(CHASSIS, "Ethernet1/1", "leaf-1"),
    )
}

#[test]
fn a_switch_frame_parsed_and_raw() {
    let f = parse_frame(&typical()).unwrap();
    assert!(f.ended);
    assert_eq!(f.problem, None);
    let raw = raw_form(&f);
    assert_eq!(raw[0], (1, "04525400abcdef".to_string()));
    assert_eq!(raw[1], (2, format!("05{}", hex(b"Ethernet1/1"))));
    assert_eq!(raw[2], (3, "0078".to_string()));
    assert_eq!(raw.last().unwrap(), &(0, String::new()));
    assert_eq!(raw.len(), 9);
    // Serialized exactly as IPA sends it.
    assert_eq!(
        serde_json::to_string(&raw[..1]).unwrap(),
        r#"[[1,"04525400abcdef"]]"#
    );
    let n = parse_neighbor(&f);
    assert_eq!(n.chassis_id.as_deref(), Some("52:54:00:ab:cd:ef"));
    assert_eq!(n.chassis_id_subtype.as_deref(), Some("mac_address"));
    assert_eq!(n.port_id.as_deref(), Some("Ethernet1/1"));
    assert_eq!(n.port_id_subtype.as_deref(), Some("interface_name"));
    assert_eq!(n.ttl, Some(120));
    assert_eq!(n.port_description.as_deref(), Some("Ethernet1/1 to server"));
    assert_eq!(n.system_name.as_deref(), Some("leaf-1"));
    assert_eq!(n.port_vlan_id, Some(100));
    assert_eq!(
        n.vlans,
        vec![Vlan {
            id: 100,
            name: "prov".into()
        }]
    );
    assert_eq!(n.mtu, Some(9216));
    assert!(n.problems.is_empty(), "{:?}", n.problems);
}

#[test]
fn vlan_tagged_frames_and_management_addresses() {
    let mut mgmt = vec![5, 1, 10, 0, 0, 1, 2, 0, 0, 0, 1, 0];
    mgmt.truncate(12);
    let plain = build_frame([2; 6], &[(1, vec![7, b'x']), (2, vec![7, b'y']), (8, mgmt)]);
    let mut tagged = plain[..12].to_vec();
    tagged.extend_from_slice(&[0x81, 0x00, 0x00, 0x64]);
    tagged.extend_from_slice(&plain[12..]);
    let n = parse_neighbor(&parse_frame(&tagged).unwrap());
    assert_eq!(n.chassis_id.as_deref(), Some("x"));
    assert_eq!(n.management_addresses, ["10.0.0.1"]);
}

#[test]
fn management_address_tlvs_of_both_families_round_trip() {
    let mut tlvs = switch_tlvs(CHASSIS, "Ethernet1/1", "leaf-1");
    tlvs.push(management_address_tlv("fd99::2".parse().unwrap()));
    tlvs.push(management_address_tlv("10.0.0.1".parse().unwrap()));
    let f = parse_frame(&build_frame([2; 6], &tlvs)).unwrap();
    let n = parse_neighbor(&f);
    assert_eq!(n.management_addresses, ["fd99::2", "10.0.0.1"]);
    assert!(n.problems.is_empty(), "{:?}", n.problems);
    // IPA's raw form keeps the TLV's bytes: length 17, family 2, the
    // address, interface numbering 1 and number 0, no OID.
    let raw = raw_form(&f);
    assert!(
        raw.contains(&(
            8,
            format!("1102fd99{}0100000000", "0".repeat(24) + "0002") + "00"
        )),
        "{raw:?}"
    );
}

#[test]
fn not_lldp() {
    assert_eq!(parse_frame(&[0; 10]), Err(FrameError::TooShort(10)));
    let mut ip = typical();
    ip[12..14].copy_from_slice(&[0x08, 0x00]);
    assert_eq!(parse_frame(&ip), Err(FrameError::NotLldp(0x0800)));
    assert!(matches!(
        parse_frame(&typical()[..14]),
        Err(FrameError::Empty(_))
    ));
}

#[test]
fn truncated_and_over_long_tlvs_keep_what_came_before() {
    let frame = typical();
    // Cut inside the port description TLV (after chassis, port, TTL).
    let cut = 14 + 9 + 14 + 4 + 5;
    let f = parse_frame(&frame[..cut]).unwrap();
    assert_eq!(f.tlvs.len(), 3);
    assert!(!f.ended);
    assert!(
        f.problem.as_deref().unwrap().contains("declares"),
        "{:?}",
        f.problem
    );
    let n = parse_neighbor(&f);
    assert_eq!(n.ttl, Some(120));
    assert_eq!(n.problems.len(), 1);
    // A TLV declaring 511 bytes in a short frame.
    let mut bad = frame[..14].to_vec();
    bad.extend_from_slice(&[0x03, 0xff, 1, 2, 3]);
    assert!(matches!(parse_frame(&bad), Err(FrameError::Empty(_))));
    // Fields with the wrong inner length are reported, not trusted.
    let f = parse_frame(&build_frame(
        [2; 6],
        &[
            (1, vec![4]),
            (3, vec![1]),
            (127, vec![0, 0x80]),
            (127, vec![0, 0x80, 0xc2, 3, 0, 5, 200, b'a']),
        ],
    ))
    .unwrap();
    let n = parse_neighbor(&f);
    assert_eq!(n.chassis_id, None);
    assert_eq!(n.problems.len(), 4, "{:?}", n.problems);
}

#[test]
fn random_and_truncated_frames_never_panic() {
    let base = typical();
    for cut in 0..=base.len() {
        if let Ok(f) = parse_frame(&base[..cut]) {
            let _ = (raw_form(&f), parse_neighbor(&f));
        }
    }
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for round in 0..20_000 {
        let mut f = if round % 2 == 0 {
            base.clone()
        } else {
            let len = (next() % 200) as usize;
            let mut v: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            if v.len() >= 14 {
                v[12] = 0x88;
                v[13] = 0xcc;
            }
            v
        };
        for _ in 0..(next() % 6) {
            if f.is_empty() {
                break;
            }
            let i = (next() as usize) % f.len();
            f[i] = next() as u8;
        }
        let keep = if f.is_empty() {
            0
        } else {
            (next() as usize) % (f.len() + 1)
        };
        if let Ok(p) = parse_frame(&f[..keep]) {
            let _ = (raw_form(&p), parse_neighbor(&p));
        }
    }
}
