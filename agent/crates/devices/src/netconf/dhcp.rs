//! A DHCPv4 client for the ramdisk (RFC 2131 DISCOVER/OFFER/REQUEST/ACK
//! with dhcproto for the wire format): one UDP socket per interface bound
//! to port 68 with SO_BINDTODEVICE, answers asked for by broadcast, so it
//! works before the interface has an address. No renewals: the ramdisk
//! lives for one deploy, far shorter than any sane lease.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use dhcproto::v4::{DhcpOption, Flags, Message, MessageType, OptionCode};
use dhcproto::{Decodable, Decoder, Encodable, Encoder};
use nix::sys::socket::{self, sockopt, AddressFamily, SockFlag, SockType, SockaddrIn};

/// What the server gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// Our address.
    pub addr: Ipv4Addr,
    /// Netmask prefix length.
    pub prefix: u8,
    /// Default gateway.
    pub router: Option<Ipv4Addr>,
    /// DNS servers.
    pub dns: Vec<Ipv4Addr>,
    /// Search domain.
    pub domain: Option<String>,
    /// The DHCP server.
    pub server: Ipv4Addr,
    /// Lease time in seconds.
    pub lease_secs: Option<u32>,
}

/// Builds a DISCOVER (`offer` None) or a REQUEST for an offer.
pub fn request_message(xid: u32, mac: [u8; 6], offer: Option<&Lease>) -> Message {
    let z = Ipv4Addr::UNSPECIFIED;
    let mut m = Message::new_with_id(xid, z, z, z, z, &mac);
    m.set_flags(Flags::default().set_broadcast());
    let opts = m.opts_mut();
    match offer {
        None => opts.insert(DhcpOption::MessageType(MessageType::Discover)),
        Some(o) => {
            opts.insert(DhcpOption::MessageType(MessageType::Request));
            opts.insert(DhcpOption::RequestedIpAddress(o.addr));
            opts.insert(DhcpOption::ServerIdentifier(o.server))
        }
    };
    opts.insert(DhcpOption::ParameterRequestList(vec![
        OptionCode::SubnetMask,
        OptionCode::Router,
        OptionCode::DomainNameServer,
        OptionCode::DomainName,
    ]));
    m
}

/// Reads an OFFER or ACK meant for `xid`; anything else is `None`.
pub fn parse_reply(bytes: &[u8], xid: u32, want: MessageType) -> Option<Lease> {
    let m = Message::decode(&mut Decoder::new(bytes)).ok()?;
    if m.xid() != xid || m.opts().msg_type() != Some(want) {
        return None;
    }
    let o = m.opts();
    let mask = match o.get(OptionCode::SubnetMask) {
        Some(DhcpOption::SubnetMask(m)) => *m,
        _ => Ipv4Addr::new(255, 255, 255, 0),
    };
    let server = match o.get(OptionCode::ServerIdentifier) {
        Some(DhcpOption::ServerIdentifier(s)) => *s,
        _ => m.siaddr(),
    };
    Some(Lease {
        addr: m.yiaddr(),
        prefix: super::iface::prefix_len(mask),
        router: match o.get(OptionCode::Router) {
            Some(DhcpOption::Router(r)) => r.first().copied(),
            _ => None,
        },
        dns: match o.get(OptionCode::DomainNameServer) {
            Some(DhcpOption::DomainNameServer(d)) => d.clone(),
            _ => Vec::new(),
        },
        domain: match o.get(OptionCode::DomainName) {
            Some(DhcpOption::DomainName(d)) => Some(d.clone()),
            _ => None,
        },
        server,
        lease_secs: match o.get(OptionCode::AddressLeaseTime) {
            Some(DhcpOption::AddressLeaseTime(t)) => Some(*t),
            _ => None,
        },
    })
}

fn bound_socket(ifname: &str) -> Result<UdpSocket> {
    let fd = socket::socket(
        AddressFamily::Inet,
        SockType::Datagram,
        SockFlag::SOCK_CLOEXEC,
        None,
    )?;
    socket::setsockopt(&fd, sockopt::ReuseAddr, &true)?;
    socket::setsockopt(&fd, sockopt::Broadcast, &true)?;
    socket::setsockopt(
        &fd,
        sockopt::BindToDevice,
        &std::ffi::OsString::from(ifname),
    )
    .context("SO_BINDTODEVICE")?;
    socket::bind(
        std::os::fd::AsRawFd::as_raw_fd(&fd),
        &SockaddrIn::from(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 68)),
    )
    .context("binding UDP port 68")?;
    Ok(UdpSocket::from(fd))
}

/// Runs DISCOVER → OFFER → REQUEST → ACK on `ifname` within `timeout`
/// (retransmitting every second). Does not configure the interface.
pub fn obtain(ifname: &str, mac: [u8; 6], timeout: Duration) -> Result<Lease> {
    let sock = bound_socket(ifname).with_context(|| format!("DHCP socket on {ifname}"))?;
    let deadline = Instant::now() + timeout;
    let xid = fastrand::u32(..);
    let offer =
        exchange(&sock, xid, mac, None, MessageType::Offer, deadline).context("no DHCP offer")?;
    exchange(&sock, xid, mac, Some(&offer), MessageType::Ack, deadline)
        .context("no DHCP acknowledgement")
}

fn exchange(
    sock: &UdpSocket,
    xid: u32,
    mac: [u8; 6],
    offer: Option<&Lease>,
    want: MessageType,
    deadline: Instant,
) -> Result<Lease> {
    let mut out = Vec::new();
    request_message(xid, mac, offer).encode(&mut Encoder::new(&mut out))?;
    let to = SocketAddr::from((Ipv4Addr::BROADCAST, 67));
    retransmit(
        sock,
        deadline,
        || sock.send_to(&out, to).map(drop),
        |bytes| parse_reply(bytes, xid, want).map(Ok),
    )
}

/// Sends with `send` every second until `accept` takes an answer (its
/// `Some(Err)` ends the exchange) or `deadline` passes. Send errors (e.g.
/// an IPv6 source address still tentative) only wait for the next try;
/// the last one is named on timeout. Shared by DHCPv4 and DHCPv6.
pub(super) fn retransmit<T>(
    sock: &UdpSocket,
    deadline: Instant,
    mut send: impl FnMut() -> std::io::Result<()>,
    mut accept: impl FnMut(&[u8]) -> Option<Result<T>>,
) -> Result<T> {
    let mut buf = [0u8; 1500];
    let mut last_send_error = None;
    loop {
        let now = Instant::now();
        if now >= deadline {
            match last_send_error {
                Some(e) => bail!("timed out (last send error: {e})"),
                None => bail!("timed out"),
            }
        }
        if let Err(e) = send() {
            last_send_error = Some(e);
        }
        let resend = (now + Duration::from_secs(1)).min(deadline);
        while let Some(left) = resend.checked_duration_since(Instant::now()) {
            if left.is_zero() {
                break;
            }
            sock.set_read_timeout(Some(left))?;
            match sock.recv_from(&mut buf) {
                Ok((n, _)) => {
                    if let Some(r) = accept(&buf[..n]) {
                        return r;
                    }
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) => {}
                Err(e) => return Err(e).context("receiving"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(xid: u32, kind: MessageType) -> Vec<u8> {
        let z = Ipv4Addr::UNSPECIFIED;
        let mut m = Message::new_with_id(xid, z, Ipv4Addr::new(10, 0, 2, 15), z, z, &[2; 6]);
        m.set_opcode(dhcproto::v4::Opcode::BootReply);
        let o = m.opts_mut();
        o.insert(DhcpOption::MessageType(kind));
        o.insert(DhcpOption::SubnetMask(Ipv4Addr::new(255, 255, 255, 0)));
        o.insert(DhcpOption::Router(vec![Ipv4Addr::new(10, 0, 2, 2)]));
        o.insert(DhcpOption::DomainNameServer(vec![Ipv4Addr::new(
            10, 0, 2, 3,
        )]));
        o.insert(DhcpOption::ServerIdentifier(Ipv4Addr::new(10, 0, 2, 2)));
        o.insert(DhcpOption::AddressLeaseTime(86400));
        let mut b = Vec::new();
        m.encode(&mut Encoder::new(&mut b)).unwrap();
        b
    }

    #[test]
    fn reads_offers_for_our_transaction_only() {
        let l = parse_reply(&reply(7, MessageType::Offer), 7, MessageType::Offer).unwrap();
        assert_eq!(l.addr, Ipv4Addr::new(10, 0, 2, 15));
        assert_eq!(l.prefix, 24);
        assert_eq!(l.router, Some(Ipv4Addr::new(10, 0, 2, 2)));
        assert_eq!(l.dns, vec![Ipv4Addr::new(10, 0, 2, 3)]);
        assert_eq!(l.lease_secs, Some(86400));
        assert!(parse_reply(&reply(8, MessageType::Offer), 7, MessageType::Offer).is_none());
        assert!(parse_reply(&reply(7, MessageType::Nak), 7, MessageType::Ack).is_none());
        assert!(parse_reply(b"garbage", 7, MessageType::Ack).is_none());
    }

    #[test]
    fn request_names_the_offer() {
        let offer = parse_reply(&reply(7, MessageType::Offer), 7, MessageType::Offer).unwrap();
        let m = request_message(7, [2; 6], Some(&offer));
        assert_eq!(m.opts().msg_type(), Some(MessageType::Request));
        assert!(matches!(
            m.opts().get(OptionCode::RequestedIpAddress),
            Some(DhcpOption::RequestedIpAddress(a)) if *a == offer.addr
        ));
        assert!(m.flags().broadcast());
    }

    /// Bulk-leasequery options of the wrong length trip dhcproto's
    /// `debug_assert!(len == 4)` in a debug build unless the workspace's
    /// profile exempts it; the reply is dropped or read, never a panic.
    #[test]
    fn malformed_bulk_leasequery_options_are_not_a_panic() {
        for code in 152u8..=155 {
            let mut b = vec![0u8; 236];
            b[0] = 2; // BOOTREPLY
            b[1] = 1;
            b[2] = 6;
            b[4..8].copy_from_slice(&0x1234_5678u32.to_be_bytes());
            b.extend_from_slice(&[99, 130, 83, 99]);
            b.extend_from_slice(&[53, 1, 2]); // OFFER
            b.extend_from_slice(&[code, 6, 0, 0, 0, 1, 0, 0]);
            b.push(255);
            let _ = parse_reply(&b, 0x1234_5678, MessageType::Offer);
        }
    }
}
