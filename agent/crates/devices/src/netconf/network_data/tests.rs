//! network_data.json plans against a machine's NICs.

use super::*;

fn nics() -> Vec<(String, String)> {
    vec![
        ("enp1s0".into(), "52:54:00:00:00:01".into()),
        ("enp2s0".into(), "52:54:00:00:00:02".into()),
        ("enp3s0".into(), "52:54:00:00:00:03".into()),
    ]
}

/// The shape Ironic writes for a node with a bond and a VLAN (and what
/// Metal3's preprovisioning network data looks like).
const BOND_VLAN: &str = r#"{
  "links": [
    {"id": "vlan0", "type": "vlan", "vlan_link": "bond0", "vlan_id": "100",
     "vlan_mac_address": "52:54:00:00:00:01"},
    {"id": "bond0", "type": "bond", "bond_links": ["nic1", "nic2"],
     "bond_mode": "802.3ad", "bond_miimon": 100, "bond_xmit_hash_policy": "layer3+4",
     "ethernet_mac_address": "52:54:00:00:00:01", "mtu": 9000},
    {"id": "nic1", "type": "phy", "ethernet_mac_address": "52:54:00:00:00:01", "mtu": 9000},
    {"id": "nic2", "type": "phy", "ethernet_mac_address": "52:54:00:00:00:02"}
  ],
  "networks": [
    {"id": "prov", "type": "ipv4", "link": "vlan0", "ip_address": "192.0.2.10",
     "netmask": "255.255.255.0",
     "routes": [{"network": "0.0.0.0", "netmask": "0.0.0.0", "gateway": "192.0.2.1"},
                {"network": "198.51.100.0", "netmask": "255.255.255.0", "gateway": "192.0.2.254"}],
     "dns_nameservers": ["192.0.2.53"]},
    {"id": "v6", "type": "ipv6", "link": "vlan0", "ip_address": "2001:db8::10/64",
     "routes": [{"network": "::", "netmask": "::", "gateway": "2001:db8::1"}]}
  ],
  "services": [{"type": "dns", "address": "192.0.2.54"}, {"type": "ntp", "address": "x"}]
}"#;

#[test]
fn bond_with_vlan_and_static_addresses() {
    let p = plan(BOND_VLAN.as_bytes(), &nics()).unwrap();
    let names: Vec<&str> = p.ifaces.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(names, ["enp1s0", "enp2s0", "bond0", "bond0.100"]);
    let bond = &p.ifaces[2];
    assert_eq!(
        bond.kind,
        LinkKind::Bond(Bond {
            members: vec!["enp1s0".into(), "enp2s0".into()],
            mode: "802.3ad".into(),
            miimon: 100,
            xmit_hash_policy: Some("layer3+4".into()),
            lacp_rate: None,
        })
    );
    assert_eq!(bond.mtu, Some(9000));
    let vlan = &p.ifaces[3];
    assert_eq!(
        vlan.kind,
        LinkKind::Vlan {
            parent: "bond0".into(),
            vid: 100
        }
    );
    assert_eq!(
        vlan.addrs,
        vec![
            ("192.0.2.10".parse().unwrap(), 24),
            ("2001:db8::10".parse().unwrap(), 64)
        ]
    );
    assert_eq!(vlan.routes.len(), 3);
    assert_eq!(
        vlan.routes[1],
        Route {
            network: "198.51.100.0".parse().unwrap(),
            prefix: 24,
            gateway: "192.0.2.254".parse().unwrap()
        }
    );
    assert_eq!(vlan.routes[2].prefix, 0);
    assert!(vlan.is_static() && !p.ifaces[0].is_static());
    assert_eq!(
        p.dns,
        vec![
            "192.0.2.54".parse::<IpAddr>().unwrap(),
            "192.0.2.53".parse().unwrap()
        ]
    );
    // enp3s0 is not in the file: left to DHCP.
    let claimed = p.claimed();
    assert!(claimed.contains(&"enp1s0".to_string()) && !claimed.contains(&"enp3s0".to_string()));
    assert!(p.has_bonds());
    let line = describe(vlan);
    assert!(
        line.contains("bond0.100 (VLAN 100 on bond0")
            && line.contains("192.0.2.10/24")
            && line.contains("route 0.0.0.0/0 via 192.0.2.1"),
        "{line}"
    );
}

#[test]
fn plain_nic_dhcp_and_ipv6_netmask_forms() {
    let json = r#"{"links": [
        {"id": "a", "type": "phy", "ethernet_mac_address": "52:54:00:00:00:03"},
        {"id": "b", "type": "ethernet", "ethernet_mac_address": "52:54:00:00:00:02"}],
      "networks": [
        {"id": "n", "type": "ipv6", "link": "a", "ip_address": "fd00::5",
         "netmask": "ffff:ffff:ffff:ffff::"},
        {"id": "m", "type": "ipv4_dhcp", "link": "b"},
        {"id": "o", "type": "ipv6_slaac", "link": "b"}]}"#;
    let p = plan(json.as_bytes(), &nics()).unwrap();
    assert_eq!(p.ifaces[0].name, "enp3s0");
    assert_eq!(p.ifaces[0].addrs, vec![("fd00::5".parse().unwrap(), 64)]);
    assert!(p.ifaces[1].dhcp4 && p.ifaces[1].dhcp6 && !p.ifaces[1].is_static());
    assert!(!p.has_bonds());
    // A file with no links at all plans nothing (all NICs keep DHCP).
    assert_eq!(plan(b"{}", &nics()).unwrap(), Plan::default());
}

#[test]
fn mistakes_name_the_entry_and_the_reason() {
    let cases: &[(&str, &str)] = &[
        (
            r#"{"links": [{"id": "x", "type": "phy", "ethernet_mac_address": "52:54:00:00:00:09"}]}"#,
            "links[0] \"x\": no NIC has MAC 52:54:00:00:00:09",
        ),
        (
            r#"{"links": [{"id": "b", "type": "bond", "bond_links": ["nope"]}]}"#,
            "bond member \"nope\" is not a NIC link",
        ),
        (
            r#"{"links": [{"id": "v", "type": "vlan", "vlan_link": "q", "vlan_id": 5}]}"#,
            "vlan_link \"q\" is not a NIC or bond link",
        ),
        (
            r#"{"links": [{"id": "a", "type": "phy", "ethernet_mac_address": "52:54:00:00:00:01"},
                          {"id": "v", "type": "vlan", "vlan_link": "a", "vlan_id": 4095}]}"#,
            "vlan_id is not 1..=4094",
        ),
        (
            r#"{"links": [{"id": "a", "type": "phy", "ethernet_mac_address": "52:54:00:00:00:01", "mtu": 20}]}"#,
            "mtu is not 68..=65535",
        ),
        (
            r#"{"links": [{"id": "a", "type": "phy", "ethernet_mac_address": "52:54:00:00:00:01"}],
               "networks": [{"id": "n", "type": "ipv4", "link": "a", "ip_address": "10.0.0.300"}]}"#,
            "networks[0] \"n\": ip_address \"10.0.0.300\" is not an IP address",
        ),
        (
            r#"{"links": [{"id": "a", "type": "phy", "ethernet_mac_address": "52:54:00:00:00:01"}],
               "networks": [{"id": "n", "type": "ipv4", "link": "a", "ip_address": "10.0.0.3",
                             "netmask": "255.0.255.0"}]}"#,
            "netmask \"255.0.255.0\" is not a netmask",
        ),
        (
            r#"{"links": [{"id": "a", "type": "phy", "ethernet_mac_address": "52:54:00:00:00:01"}],
               "networks": [{"id": "n", "type": "ipv4", "link": "a", "ip_address": "10.0.0.3",
                 "routes": [{"network": "::", "netmask": "::", "gateway": "fd00::1"}]}]}"#,
            "route via fd00::1 on an ipv4 network",
        ),
        (
            r#"{"links": [{"id": "a", "type": "phy", "ethernet_mac_address": "52:54:00:00:00:01"}],
               "networks": [{"id": "n", "type": "ipv4", "link": "zz", "ip_address": "10.0.0.3"}]}"#,
            "link \"zz\" is not a link",
        ),
        (
            r#"{"links": [{"id": "b", "type": "bond", "bond_links": [], "bond_mode": "x; reboot"}]}"#,
            "bond without bond_links",
        ),
        (r#"{"links": 5}"#, "does not parse"),
    ];
    for (json, want) in cases {
        let e = plan(json.as_bytes(), &nics()).unwrap_err().to_string();
        assert!(e.contains(want), "{json}\n  got: {e}\n  want: {want}");
    }
    let bad_mode = r#"{"links": [{"id": "a", "type": "phy", "ethernet_mac_address": "52:54:00:00:00:01"},
        {"id": "b", "type": "bond", "bond_links": ["a"], "bond_mode": "x\nreboot"}]}"#;
    assert!(plan(bad_mode.as_bytes(), &nics())
        .unwrap_err()
        .to_string()
        .contains("is not a bonding driver value"));
    let big = vec![b' '; MAX_BYTES + 1];
    assert_eq!(
        plan(&big, &nics()).unwrap_err(),
        NetworkDataError::TooBig(MAX_BYTES + 1)
    );
}

#[test]
fn netmasks_and_prefixes() {
    assert_eq!(netmask_prefix("255.255.255.0"), Some(24));
    assert_eq!(netmask_prefix("0.0.0.0"), Some(0));
    assert_eq!(netmask_prefix("::"), Some(0));
    assert_eq!(netmask_prefix("ffff:ffff::"), Some(32));
    assert_eq!(netmask_prefix("255.0.255.0"), None);
    assert_eq!(
        address("10.1.2.3", Some("16")).unwrap(),
        ("10.1.2.3".parse().unwrap(), 16)
    );
    assert_eq!(address("10.1.2.3", None).unwrap().1, 32);
    assert!(address("10.1.2.3/33", None).is_err());
    assert!(address("fd00::1", Some("255.255.255.0")).is_err());
    assert!(valid_ifname("bond0") && !valid_ifname("a/b") && !valid_ifname("sixteen-chars-xx"));
}
