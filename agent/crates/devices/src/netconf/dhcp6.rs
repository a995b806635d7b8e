//! A DHCPv6 client for the ramdisk (RFC 8415 SOLICIT/ADVERTISE/REQUEST/REPLY
//! for one IA_NA address, with dhcproto for the wire format): a UDP socket
//! per interface on port 546 with SO_BINDTODEVICE, requests to the
//! All_DHCP_Relay_Agents_and_Servers group ff02::1:2 over the link-local
//! address. The address is set as a /128, as DHCPv6 gives no prefix; the
//! on-link prefix and default route come from router advertisements, which
//! the kernel handles (as it does SLAAC). No renewals (see `dhcp`).

use std::net::{Ipv6Addr, SocketAddrV6, UdpSocket};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use dhcproto::v6::{
    DhcpOption, DhcpOptions, IAAddr, Message, MessageType, OptionCode, Status, IANA, ORO,
};
use dhcproto::{Decodable, Decoder, Encodable, Encoder};
use nix::sys::socket::{self, sockopt, AddressFamily, SockFlag, SockType, SockaddrIn6};

/// What the server gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease6 {
    /// Our address.
    pub addr: Ipv6Addr,
    /// DNS servers.
    pub dns: Vec<Ipv6Addr>,
    /// The server's DUID (hex), to name it on the console.
    pub server: String,
    /// Valid lifetime in seconds.
    pub valid_secs: u32,
}

/// DUID-LL (type 3, Ethernet) of `mac`.
pub(crate) fn duid(mac: [u8; 6]) -> Vec<u8> {
    let mut d = vec![0, 3, 0, 1];
    d.extend_from_slice(&mac);
    d
}

/// The IA_NA identifier: the MAC's last four bytes (stable per NIC).
pub(crate) fn iaid(mac: [u8; 6]) -> u32 {
    u32::from_be_bytes([mac[2], mac[3], mac[4], mac[5]])
}

/// Builds a SOLICIT (`advert` None) or a REQUEST for an advertised lease.
pub(crate) fn request_message(
    xid: [u8; 3],
    mac: [u8; 6],
    advert: Option<&Lease6>,
    server_id: &[u8],
) -> Message {
    let kind = if advert.is_some() {
        MessageType::Request
    } else {
        MessageType::Solicit
    };
    let mut m = Message::new_with_id(kind, xid);
    let opts = m.opts_mut();
    opts.insert(DhcpOption::ClientId(duid(mac)));
    opts.insert(DhcpOption::ElapsedTime(0));
    opts.insert(DhcpOption::ORO(ORO {
        opts: vec![OptionCode::DomainNameServers, OptionCode::DomainSearchList],
    }));
    let mut ia = DhcpOptions::new();
    if let Some(a) = advert {
        opts.insert(DhcpOption::ServerId(server_id.to_vec()));
        ia.insert(DhcpOption::IAAddr(IAAddr {
            addr: a.addr,
            preferred_life: 0,
            valid_life: 0,
            opts: DhcpOptions::new(),
        }));
    }
    opts.insert(DhcpOption::IANA(IANA {
        id: iaid(mac),
        t1: 0,
        t2: 0,
        opts: ia,
    }));
    m
}

/// Why a DHCPv6 server gave no address.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// A status code other than success.
    #[error("{status}: {message}")]
    Status {
        /// The code's name.
        status: String,
        /// The server's text.
        message: String,
    },
    /// No IA_NA option.
    #[error("no IA_NA in the answer")]
    NoIaNa,
    /// An IA_NA without an address.
    #[error("no address in the IA_NA")]
    NoAddress,
}

/// Reads an ADVERTISE or REPLY for `xid` and our client ID: the lease and
/// the server ID, or why the server gave no address. Anything else: `None`.
pub fn parse_reply(
    bytes: &[u8],
    xid: [u8; 3],
    mac: [u8; 6],
    want: MessageType,
) -> Option<Result<(Lease6, Vec<u8>), Refusal>> {
    let m = Message::decode(&mut Decoder::new(bytes)).ok()?;
    if m.xid() != xid || m.msg_type() != want {
        return None;
    }
    let o = m.opts();
    match o.get(OptionCode::ClientId) {
        Some(DhcpOption::ClientId(c)) if *c == duid(mac) => {}
        _ => return None,
    }
    let server_id = match o.get(OptionCode::ServerId) {
        Some(DhcpOption::ServerId(s)) => s.clone(),
        _ => return None,
    };
    let failure = |opts: &DhcpOptions| match opts.get(OptionCode::StatusCode) {
        Some(DhcpOption::StatusCode(s)) if s.status != Status::Success => Some(Refusal::Status {
            status: format!("{:?}", s.status),
            message: s.msg.clone(),
        }),
        _ => None,
    };
    if let Some(f) = failure(o) {
        return Some(Err(f));
    }
    let Some(DhcpOption::IANA(ia)) = o.get(OptionCode::IANA) else {
        return Some(Err(Refusal::NoIaNa));
    };
    if let Some(f) = failure(&ia.opts) {
        return Some(Err(f));
    }
    let Some(DhcpOption::IAAddr(a)) = ia.opts.get(OptionCode::IAAddr) else {
        return Some(Err(Refusal::NoAddress));
    };
    Some(Ok((
        Lease6 {
            addr: a.addr,
            dns: match o.get(OptionCode::DomainNameServers) {
                Some(DhcpOption::DomainNameServers(d)) => d.clone(),
                _ => Vec::new(),
            },
            server: server_id.iter().map(|b| format!("{b:02x}")).collect(),
            valid_secs: a.valid_life,
        },
        server_id,
    )))
}

fn bound_socket(ifname: &str) -> Result<UdpSocket> {
    let fd = socket::socket(
        AddressFamily::Inet6,
        SockType::Datagram,
        SockFlag::SOCK_CLOEXEC,
        None,
    )?;
    socket::setsockopt(&fd, sockopt::ReuseAddr, &true)?;
    socket::setsockopt(
        &fd,
        sockopt::BindToDevice,
        &std::ffi::OsString::from(ifname),
    )
    .context("SO_BINDTODEVICE")?;
    socket::bind(
        std::os::fd::AsRawFd::as_raw_fd(&fd),
        &SockaddrIn6::from(SocketAddrV6::new(Ipv6Addr::UNSPECIFIED, 546, 0, 0)),
    )
    .context("binding UDP port 546")?;
    Ok(UdpSocket::from(fd))
}

/// Runs SOLICIT → ADVERTISE → REQUEST → REPLY on `ifname` within `timeout`
/// (retransmitting every second; sends fail while the link-local address
/// is still tentative, which only delays the next try). Does not configure
/// the interface.
pub(crate) fn obtain(ifname: &str, mac: [u8; 6], timeout: Duration) -> Result<Lease6> {
    let sock = bound_socket(ifname).with_context(|| format!("DHCPv6 socket on {ifname}"))?;
    let index = nix::net::if_::if_nametoindex(ifname).context("interface index")?;
    let to = SocketAddrV6::new(Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 1, 2), 547, 0, index);
    let deadline = Instant::now() + timeout;
    let xid = {
        let r = fastrand::u32(..).to_be_bytes();
        [r[1], r[2], r[3]]
    };
    let (advert, server_id) = exchange(
        &sock,
        to,
        xid,
        mac,
        None,
        &[],
        MessageType::Advertise,
        deadline,
    )
    .context("no DHCPv6 advertise")?;
    let (lease, _) = exchange(
        &sock,
        to,
        xid,
        mac,
        Some(&advert),
        &server_id,
        MessageType::Reply,
        deadline,
    )
    .context("no DHCPv6 reply")?;
    Ok(lease)
}

#[allow(clippy::too_many_arguments)]
fn exchange(
    sock: &UdpSocket,
    to: SocketAddrV6,
    xid: [u8; 3],
    mac: [u8; 6],
    advert: Option<&Lease6>,
    server_id: &[u8],
    want: MessageType,
    deadline: Instant,
) -> Result<(Lease6, Vec<u8>)> {
    let mut out = Vec::new();
    request_message(xid, mac, advert, server_id).encode(&mut Encoder::new(&mut out))?;
    super::dhcp::retransmit(
        sock,
        deadline,
        || sock.send_to(&out, to).map(drop),
        |bytes| {
            parse_reply(bytes, xid, mac, want)
                .map(|r| r.map_err(|why| anyhow::anyhow!("the server gave no address: {why}")))
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use dhcproto::v6::StatusCode;

    const MAC: [u8; 6] = [0x52, 0x54, 0, 0x12, 0x34, 0x56];

    fn answer(
        kind: MessageType,
        xid: [u8; 3],
        client: Vec<u8>,
        ia_status: Option<Status>,
    ) -> Vec<u8> {
        let mut m = Message::new_with_id(kind, xid);
        let o = m.opts_mut();
        o.insert(DhcpOption::ClientId(client));
        o.insert(DhcpOption::ServerId(vec![0, 1, 0, 1, 9, 9]));
        o.insert(DhcpOption::DomainNameServers(vec!["fd99::1"
            .parse()
            .unwrap()]));
        let mut ia = DhcpOptions::new();
        match ia_status {
            Some(status) => {
                ia.insert(DhcpOption::StatusCode(StatusCode {
                    status,
                    msg: "no addresses left".into(),
                }));
            }
            None => {
                ia.insert(DhcpOption::IAAddr(IAAddr {
                    addr: "fd99::150".parse().unwrap(),
                    preferred_life: 1800,
                    valid_life: 3600,
                    opts: DhcpOptions::new(),
                }));
            }
        }
        o.insert(DhcpOption::IANA(IANA {
            id: iaid(MAC),
            t1: 0,
            t2: 0,
            opts: ia,
        }));
        let mut b = Vec::new();
        m.encode(&mut Encoder::new(&mut b)).unwrap();
        b
    }

    #[test]
    fn reads_answers_for_us_only() {
        let xid = [1, 2, 3];
        let a = answer(MessageType::Advertise, xid, duid(MAC), None);
        let (l, server) = parse_reply(&a, xid, MAC, MessageType::Advertise)
            .unwrap()
            .unwrap();
        assert_eq!(l.addr, "fd99::150".parse::<Ipv6Addr>().unwrap());
        assert_eq!(l.dns, vec!["fd99::1".parse::<Ipv6Addr>().unwrap()]);
        assert_eq!(l.valid_secs, 3600);
        assert_eq!(server, vec![0, 1, 0, 1, 9, 9]);
        assert_eq!(l.server, "000100010909");
        assert!(
            parse_reply(&a, [9, 9, 9], MAC, MessageType::Advertise).is_none(),
            "other xid"
        );
        assert!(
            parse_reply(&a, xid, MAC, MessageType::Reply).is_none(),
            "other type"
        );
        let other = answer(MessageType::Advertise, xid, duid([2; 6]), None);
        assert!(
            parse_reply(&other, xid, MAC, MessageType::Advertise).is_none(),
            "other client"
        );
        assert!(parse_reply(b"junk", xid, MAC, MessageType::Reply).is_none());
        let none = answer(
            MessageType::Reply,
            xid,
            duid(MAC),
            Some(Status::NoAddrsAvail),
        );
        let err = parse_reply(&none, xid, MAC, MessageType::Reply)
            .unwrap()
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("NoAddrsAvail") && err.contains("no addresses left"),
            "{err}"
        );
    }

    #[test]
    fn request_names_the_server_and_address() {
        let xid = [1, 2, 3];
        let a = answer(MessageType::Advertise, xid, duid(MAC), None);
        let (l, server) = parse_reply(&a, xid, MAC, MessageType::Advertise)
            .unwrap()
            .unwrap();
        let m = request_message(xid, MAC, Some(&l), &server);
        assert_eq!(m.msg_type(), MessageType::Request);
        assert!(
            matches!(m.opts().get(OptionCode::ServerId), Some(DhcpOption::ServerId(s)) if *s == server)
        );
        let Some(DhcpOption::IANA(ia)) = m.opts().get(OptionCode::IANA) else {
            panic!("no IA_NA")
        };
        assert_eq!(ia.id, 0x0012_3456);
        assert!(
            matches!(ia.opts.get(OptionCode::IAAddr), Some(DhcpOption::IAAddr(x)) if x.addr == l.addr)
        );
        let s = request_message(xid, MAC, None, &[]);
        assert_eq!(s.msg_type(), MessageType::Solicit);
        assert!(s.opts().get(OptionCode::ServerId).is_none());
        // Round trip through the wire format.
        let mut b = Vec::new();
        m.encode(&mut Encoder::new(&mut b)).unwrap();
        assert_eq!(Message::decode(&mut Decoder::new(&b)).unwrap().xid(), xid);
    }

    /// A vendor option shorter than its 4-byte enterprise number: dhcproto
    /// computes `len - 4` (an overflow panic in a debug build before the
    /// workspace's profile exempted it); the reply is dropped, nothing panics.
    #[test]
    fn a_short_vendor_option_is_dropped_not_a_panic() {
        let xid = [7, 8, 9];
        for code in [16u16, 17] {
            let mut b = vec![7, xid[0], xid[1], xid[2]];
            b.extend_from_slice(&code.to_be_bytes());
            b.extend_from_slice(&2u16.to_be_bytes());
            b.extend_from_slice(&[0xaa, 0xbb]);
            // Another option after it, so the 4-byte read succeeds.
            b.extend_from_slice(&[0, 14, 0, 0, 0, 1, 0, 4, 1, 2, 3, 4]);
            assert!(parse_reply(&b, xid, MAC, MessageType::Reply).is_none());
        }
    }
}
