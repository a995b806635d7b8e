//! IPA's BMC rules replayed over recorded request/response bytes.

use std::collections::HashMap;

use super::*;

/// A BMC that answers Get LAN Configuration Parameters from a table keyed by
/// the request bytes, and records every request.
#[derive(Default)]
struct Replay {
    answers: HashMap<Vec<u8>, Result<Vec<u8>, IpmiError>>,
    sent: Vec<Vec<u8>>,
}

impl Replay {
    /// `channel`'s `param` (set 0) answers `data` with completion code 0 and
    /// parameter revision 0x11.
    fn ok(mut self, channel: u8, param: u8, set: u8, data: &[u8]) -> Self {
        let mut resp = vec![0x00, 0x11];
        resp.extend_from_slice(data);
        self.answers.insert(vec![channel, param, set, 0], Ok(resp));
        self
    }
}

impl Transport for Replay {
    fn request(&mut self, netfn: u8, cmd: u8, data: &[u8]) -> Result<Vec<u8>, IpmiError> {
        assert_eq!((netfn, cmd), (NETFN_TRANSPORT, CMD_GET_LAN_CONFIG));
        self.sent.push(data.to_vec());
        // Unknown parameters: 0x80 "parameter not supported", as BMCs do.
        self.answers.get(data).cloned().unwrap_or(Ok(vec![0x80]))
    }
}

fn v6_record(set: u8, source: u8, addr: &str, prefix: u8, status: u8) -> Vec<u8> {
    let a: Ipv6Addr = addr.parse().unwrap();
    let mut v = vec![set, source];
    v.extend_from_slice(&a.octets());
    v.extend_from_slice(&[prefix, status]);
    v
}

#[test]
fn first_configured_channel_wins_and_zero_addresses_are_skipped() {
    let mut bmc = Replay::default()
        .ok(1, param::IP, 0, &[0, 0, 0, 0])
        .ok(1, param::MAC, 0, &[0x52, 0x54, 0, 0xaa, 0xbb, 0x01])
        .ok(2, param::IP, 0, &[10, 0, 0, 7])
        .ok(2, param::MAC, 0, &[0x52, 0x54, 0, 0xaa, 0xbb, 0x02])
        .ok(3, param::IP, 0, &[10, 0, 0, 8]);
    let got = query(&mut bmc);
    assert_eq!(got.v4.as_deref(), Some("10.0.0.7"));
    // Channel 1 has 0.0.0.0 and no IPv6 address: its MAC does not count.
    assert_eq!(got.mac.as_deref(), Some("52:54:00:aa:bb:02"));
    assert_eq!(got.v6.as_deref(), Some("::/0"));
    // Each parameter is asked once, whichever rule needed it.
    let mut sent = bmc.sent.clone();
    sent.sort();
    sent.dedup();
    assert_eq!(sent.len(), bmc.sent.len());
    // The search stops at the winning channel; the IPv6 one goes on to 11.
    assert!(!bmc.sent.contains(&vec![3, param::IP, 0, 0]));
    assert!(bmc.sent.contains(&vec![11, param::IPV6_ENABLES, 0, 0]));
    assert!(!bmc.sent.iter().any(|r| r[0] == 12 || r[0] == 0));
}

#[test]
fn nothing_configured_gives_ipa_defaults() {
    let mut bmc =
        Replay::default()
            .ok(1, param::IP, 0, &[0, 0, 0, 0])
            .ok(1, param::MAC, 0, &[0; 6]);
    let got = query(&mut bmc);
    assert_eq!(
        got,
        BmcAddresses {
            v4: Some("0.0.0.0".into()),
            v6: Some("::/0".into()),
            mac: None
        }
    );
    // Every channel 1..=11 was asked for its IP address.
    for ch in CHANNELS {
        assert!(
            bmc.sent.contains(&vec![ch, param::IP, 0, 0]),
            "channel {ch}"
        );
    }
}

#[test]
fn ipv6_only_bmc() {
    let mut bmc = Replay::default()
        .ok(1, param::IP, 0, &[0, 0, 0, 0])
        .ok(1, param::MAC, 0, &[0x0c, 0xc4, 0x7a, 0x01, 0x02, 0x03])
        .ok(1, param::IPV6_ENABLES, 0, &[1])
        .ok(1, param::IPV6_STATUS, 0, &[2, 2, 0x03])
        // Static: a disabled one, then an enabled active one.
        .ok(
            1,
            param::IPV6_STATIC,
            0,
            &v6_record(0, 0x00, "2001:db8::5", 64, 0),
        )
        .ok(
            1,
            param::IPV6_STATIC,
            1,
            &v6_record(1, 0x80, "2001:db8::6", 64, 0),
        )
        // Dynamic: a link-local SLAAC one that is pending, a DHCPv6 active one.
        .ok(
            1,
            param::IPV6_DYNAMIC,
            0,
            &v6_record(0, 0x01, "2001:db8::99", 64, 2),
        )
        .ok(
            1,
            param::IPV6_DYNAMIC,
            1,
            &v6_record(1, 0x02, "2001:db8::100", 64, 0),
        );
    let got = query(&mut bmc);
    assert_eq!(got.v4.as_deref(), Some("0.0.0.0"));
    // Dynamic addresses first, only active ones.
    assert_eq!(got.v6.as_deref(), Some("2001:db8::100"));
    // IPv4 0.0.0.0 but a global IPv6 address: the MAC counts.
    assert_eq!(got.mac.as_deref(), Some("0c:c4:7a:01:02:03"));
}

#[test]
fn static_ipv6_needs_enabled_and_active_and_not_null() {
    let mut bmc = Replay::default()
        .ok(4, param::IPV6_ENABLES, 0, &[0]) // IPv4 only: skipped
        .ok(4, param::IPV6_STATUS, 0, &[1, 0, 0])
        .ok(
            4,
            param::IPV6_STATIC,
            0,
            &v6_record(0, 0x80, "2001:db8::4", 64, 0),
        )
        .ok(5, param::IPV6_ENABLES, 0, &[2])
        .ok(5, param::IPV6_STATUS, 0, &[3, 0, 0])
        .ok(5, param::IPV6_STATIC, 0, &v6_record(0, 0x80, "::", 0, 0))
        .ok(
            5,
            param::IPV6_STATIC,
            1,
            &v6_record(1, 0x80, "2001:db8::51", 64, 4),
        )
        .ok(
            5,
            param::IPV6_STATIC,
            2,
            &v6_record(2, 0x80, "2001:db8::52", 64, 0),
        );
    let got = query(&mut bmc);
    assert_eq!(got.v6.as_deref(), Some("2001:db8::52"));
    assert_eq!(got.mac, None);
}

#[test]
fn link_local_ipv6_does_not_make_a_mac_usable() {
    let mut bmc = Replay::default()
        .ok(1, param::IP, 0, &[0, 0, 0, 0])
        .ok(1, param::MAC, 0, &[0x0c, 0xc4, 0x7a, 0x01, 0x02, 0x03])
        .ok(1, param::IPV6_STATUS, 0, &[1, 1, 0])
        .ok(1, param::IPV6_STATIC, 0, &v6_record(0, 0x80, "::", 0, 5))
        .ok(
            1,
            param::IPV6_DYNAMIC,
            0,
            &v6_record(0, 0x01, "fe80::ec4:7aff:fe01:203", 64, 0),
        );
    assert_eq!(query(&mut bmc).mac, None);
}

/// A device that fails every request the same way.
struct Broken(IpmiError, usize);

impl Transport for Broken {
    fn request(&mut self, _: u8, _: u8, _: &[u8]) -> Result<Vec<u8>, IpmiError> {
        self.1 += 1;
        Err(self.0.clone())
    }
}

/// A BMC that answers every request with this error completion code.
struct Refusing(u8, usize);

impl Transport for Refusing {
    fn request(&mut self, _: u8, _: u8, _: &[u8]) -> Result<Vec<u8>, IpmiError> {
        self.1 += 1;
        Ok(vec![self.0])
    }
}

#[test]
fn a_dead_device_costs_one_request_and_reports_unconfigured() {
    let mut dead = Broken(IpmiError::Transport("no answer within 10 s".into()), 0);
    assert_eq!(query(&mut dead), unconfigured());
    assert_eq!(dead.1, 1, "no request after the first transport failure");
    // Error completion codes on every channel: all channels tried, defaults.
    let mut refusing = Refusing(0xcc, 0);
    assert_eq!(query(&mut refusing), unconfigured());
    assert!(refusing.1 >= CHANNELS.count());
}

#[test]
fn truncated_answers_never_panic() {
    for len in 0..24 {
        let mut resp = vec![0u8, 0x11];
        resp.extend(std::iter::repeat_n(0x20, len));
        let mut bmc = Replay::default();
        for p in [
            param::IP,
            param::MAC,
            param::IPV6_ENABLES,
            param::IPV6_STATUS,
            param::IPV6_STATIC,
            param::IPV6_DYNAMIC,
        ] {
            bmc.answers.insert(vec![1, p, 0, 0], Ok(resp.clone()));
        }
        let _ = query(&mut bmc);
    }
}

#[test]
fn device_nodes_as_ipa_finds_them() {
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(read(dir.path(), false), BmcAddresses::default());
    std::fs::create_dir_all(dir.path().join("dev")).unwrap();
    // A regular file is not an IPMI device (IPA checks for a char device).
    std::fs::write(dir.path().join("dev/ipmi0"), "").unwrap();
    assert_eq!(find_device(dir.path()), None);
    assert_eq!(read(dir.path(), false), BmcAddresses::default());
    // /dev/null is a character device: found, and the ioctl fails cleanly.
    let sub = dir.path().join("dev/ipmidev");
    std::fs::create_dir_all(&sub).unwrap();
    std::os::unix::fs::symlink("/dev/null", sub.join("0")).unwrap();
    assert_eq!(find_device(dir.path()), Some(sub.join("0")));
    assert_eq!(read(dir.path(), false), unconfigured());
    assert_eq!(read(dir.path(), true), BmcAddresses::default());
}
