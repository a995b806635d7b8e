//! Interface configuration through the classic ioctls (no netlink crate):
//! link up/down, MTU, IPv4 address and netmask, IPv4 and IPv6 routes,
//! IPv6 addresses. Each `unsafe` block is
//! one ioctl on a zero-initialised, fully set-up request struct.
#![allow(unsafe_code)]

use std::net::Ipv4Addr;
use std::os::fd::{AsRawFd, OwnedFd};

use anyhow::{bail, Context, Result};
use nix::sys::socket::{socket, AddressFamily, SockFlag, SockType};

fn ctl_socket() -> Result<OwnedFd> {
    socket(
        AddressFamily::Inet,
        SockType::Datagram,
        SockFlag::SOCK_CLOEXEC,
        None,
    )
    .context("opening a control socket")
}

fn ifreq(name: &str) -> Result<libc::ifreq> {
    if name.len() >= libc::IFNAMSIZ {
        bail!("interface name {name:?} too long");
    }
    // SAFETY: ifreq is plain old data; all-zero is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, s) in req.ifr_name.iter_mut().zip(name.bytes()) {
        *d = s as libc::c_char;
    }
    Ok(req)
}

fn sockaddr_in(a: Ipv4Addr) -> libc::sockaddr {
    let sin = libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: 0,
        sin_addr: libc::in_addr {
            s_addr: u32::from_ne_bytes(a.octets()),
        },
        sin_zero: [0; 8],
    };
    // SAFETY: sockaddr_in and sockaddr have the same size (16 bytes) and
    // sockaddr is the generic view of it, as the kernel expects.
    unsafe { std::mem::transmute::<libc::sockaddr_in, libc::sockaddr>(sin) }
}

fn ioctl(fd: &OwnedFd, request: libc::Ioctl, arg: *mut libc::c_void, what: &str) -> Result<()> {
    // SAFETY: `arg` points to a live, initialised struct of the type
    // `request` expects (ifreq or rtentry), owned by the caller for the call.
    let r = unsafe { libc::ioctl(fd.as_raw_fd(), request, arg) };
    if r < 0 {
        return Err(std::io::Error::last_os_error()).context(what.to_string());
    }
    Ok(())
}

/// Sets IFF_UP on `name`.
pub(crate) fn set_up(name: &str) -> Result<()> {
    set_updown(name, true)
}

/// Clears IFF_UP on `name` (a NIC must be down to join a bond).
pub(crate) fn set_down(name: &str) -> Result<()> {
    set_updown(name, false)
}

fn set_updown(name: &str, up: bool) -> Result<()> {
    let fd = ctl_socket()?;
    let mut req = ifreq(name)?;
    ioctl(
        &fd,
        libc::SIOCGIFFLAGS,
        (&raw mut req).cast(),
        "reading interface flags",
    )?;
    // SAFETY: SIOCGIFFLAGS filled the flags member of the union.
    let flags = unsafe { req.ifr_ifru.ifru_flags };
    let bit = libc::IFF_UP as libc::c_short;
    req.ifr_ifru.ifru_flags = if up { flags | bit } else { flags & !bit };
    ioctl(
        &fd,
        libc::SIOCSIFFLAGS,
        (&raw mut req).cast(),
        if up {
            "setting the interface up"
        } else {
            "setting the interface down"
        },
    )
}

/// Sets the MTU of `name`.
pub(crate) fn set_mtu(name: &str, mtu: u32) -> Result<()> {
    let fd = ctl_socket()?;
    let mut req = ifreq(name)?;
    req.ifr_ifru.ifru_mtu =
        libc::c_int::try_from(mtu).with_context(|| format!("MTU {mtu} out of range"))?;
    ioctl(
        &fd,
        libc::SIOCSIFMTU,
        (&raw mut req).cast(),
        "setting the MTU",
    )
}

/// Assigns `addr/prefix` to `name` (replacing its IPv4 address).
pub(crate) fn set_ipv4(name: &str, addr: Ipv4Addr, prefix: u8) -> Result<()> {
    let fd = ctl_socket()?;
    let mut req = ifreq(name)?;
    req.ifr_ifru.ifru_addr = sockaddr_in(addr);
    ioctl(
        &fd,
        libc::SIOCSIFADDR,
        (&raw mut req).cast(),
        "setting the address",
    )?;
    let mask = Ipv4Addr::from(u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0));
    let mut req = ifreq(name)?;
    req.ifr_ifru.ifru_netmask = sockaddr_in(mask);
    ioctl(
        &fd,
        libc::SIOCSIFNETMASK,
        (&raw mut req).cast(),
        "setting the netmask",
    )
}

/// Adds a default route via `gateway` on `name`; an existing one is kept.
pub(crate) fn add_default_route(name: &str, gateway: Ipv4Addr) -> Result<()> {
    add_route4(name, Ipv4Addr::UNSPECIFIED, 0, gateway)
}

/// Adds a route to `dst/prefix` via `gateway` on `name`; an existing one is kept.
pub(crate) fn add_route4(name: &str, dst: Ipv4Addr, prefix: u8, gateway: Ipv4Addr) -> Result<()> {
    let fd = ctl_socket()?;
    let mut dev: Vec<u8> = name.bytes().chain([0]).collect();
    let mask = Ipv4Addr::from(
        u32::MAX
            .checked_shl(32 - u32::from(prefix.min(32)))
            .unwrap_or(0),
    );
    // SAFETY: rtentry is plain old data; all-zero is a valid value.
    let mut rt: libc::rtentry = unsafe { std::mem::zeroed() };
    rt.rt_dst = sockaddr_in(dst);
    rt.rt_genmask = sockaddr_in(mask);
    rt.rt_gateway = sockaddr_in(gateway);
    rt.rt_flags = libc::RTF_UP | libc::RTF_GATEWAY;
    rt.rt_dev = dev.as_mut_ptr().cast();
    let what = if prefix == 0 {
        "adding the default route".to_string()
    } else {
        format!("adding the route to {dst}/{prefix} via {gateway}")
    };
    exists_is_fine(ioctl(&fd, libc::SIOCADDRT, (&raw mut rt).cast(), &what))
}

/// `struct in6_rtmsg` (linux/ipv6_route.h); libc's has private fields.
#[repr(C)]
struct In6Rtmsg {
    dst: libc::in6_addr,
    src: libc::in6_addr,
    gateway: libc::in6_addr,
    kind: u32,
    dst_len: u16,
    src_len: u16,
    metric: u32,
    info: libc::c_ulong,
    flags: u32,
    ifindex: libc::c_int,
}

/// Adds an IPv6 route to `dst/prefix` via `gateway` on `name`.
pub(crate) fn add_route6(
    name: &str,
    dst: std::net::Ipv6Addr,
    prefix: u8,
    gateway: std::net::Ipv6Addr,
) -> Result<()> {
    let fd = socket(
        AddressFamily::Inet6,
        SockType::Datagram,
        SockFlag::SOCK_CLOEXEC,
        None,
    )
    .context("opening an IPv6 control socket")?;
    let index = nix::net::if_::if_nametoindex(name).context("interface index")?;
    let mut rt = In6Rtmsg {
        dst: libc::in6_addr {
            s6_addr: dst.octets(),
        },
        src: libc::in6_addr { s6_addr: [0; 16] },
        gateway: libc::in6_addr {
            s6_addr: gateway.octets(),
        },
        kind: 0,
        dst_len: u16::from(prefix.min(128)),
        src_len: 0,
        metric: 1,
        info: 0,
        flags: (libc::RTF_UP | libc::RTF_GATEWAY) as u32,
        ifindex: index as libc::c_int,
    };
    exists_is_fine(ioctl(
        &fd,
        libc::SIOCADDRT,
        (&raw mut rt).cast(),
        &format!("adding the IPv6 route to {dst}/{prefix} via {gateway}"),
    ))
}

/// EEXIST (the address or route is already there) counts as success.
fn exists_is_fine(r: Result<()>) -> Result<()> {
    match r {
        Err(e)
            if e.downcast_ref::<std::io::Error>()
                .and_then(|e| e.raw_os_error())
                == Some(libc::EEXIST) =>
        {
            Ok(())
        }
        r => r,
    }
}

/// Prefix length of a netmask.
pub(crate) fn prefix_len(mask: Ipv4Addr) -> u8 {
    u32::from(mask).leading_ones() as u8
}

/// Adds `addr/prefix` to `name` (SIOCSIFADDR on an IPv6 socket).
pub(crate) fn add_ipv6(name: &str, addr: std::net::Ipv6Addr, prefix: u8) -> Result<()> {
    let fd = socket(
        AddressFamily::Inet6,
        SockType::Datagram,
        SockFlag::SOCK_CLOEXEC,
        None,
    )
    .context("opening an IPv6 control socket")?;
    let index = nix::net::if_::if_nametoindex(name).context("interface index")?;
    let mut req = libc::in6_ifreq {
        ifr6_addr: libc::in6_addr {
            s6_addr: addr.octets(),
        },
        ifr6_prefixlen: u32::from(prefix),
        ifr6_ifindex: index as libc::c_int,
    };
    exists_is_fine(ioctl(
        &fd,
        libc::SIOCSIFADDR,
        (&raw mut req).cast(),
        "adding the IPv6 address",
    ))
}

/// An IPv6 address of an interface, from `/proc/net/if_inet6`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Addr6 {
    /// The address.
    pub addr: std::net::Ipv6Addr,
    /// Prefix length.
    pub prefix: u8,
    /// Global scope (not link-local or host).
    pub global: bool,
    /// Still undergoing duplicate address detection.
    pub tentative: bool,
    /// Duplicate address detection found another host using it.
    pub dad_failed: bool,
}

/// Where duplicate address detection of some addresses stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Dad {
    /// Every address is usable.
    Done,
    /// Some are still tentative (or not listed yet).
    Pending(Vec<std::net::Ipv6Addr>),
    /// Another host on the link uses this one.
    Failed(std::net::Ipv6Addr),
}

/// The DAD state of `wanted` among `addrs` (an interface's addresses).
pub(crate) fn dad_state(addrs: &[Addr6], wanted: &[std::net::Ipv6Addr]) -> Dad {
    let mut pending = Vec::new();
    for w in wanted {
        match addrs.iter().find(|a| a.addr == *w) {
            Some(a) if a.dad_failed => return Dad::Failed(*w),
            Some(a) if !a.tentative => {}
            _ => pending.push(*w),
        }
    }
    if pending.is_empty() {
        Dad::Done
    } else {
        Dad::Pending(pending)
    }
}

/// Parses `/proc/net/if_inet6` text for interface `name`.
pub(crate) fn parse_if_inet6(text: &str, name: &str) -> Vec<Addr6> {
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            if f.len() != 6 || f[5] != name || f[0].len() != 32 {
                return None;
            }
            let bits = u128::from_str_radix(f[0], 16).ok()?;
            let prefix = u8::from_str_radix(f[2], 16).ok()?;
            let scope = u8::from_str_radix(f[3], 16).ok()?;
            let flags = u8::from_str_radix(f[4], 16).ok()?;
            Some(Addr6 {
                addr: std::net::Ipv6Addr::from(bits),
                prefix,
                global: scope == 0,
                tentative: flags & 0x40 != 0,
                dad_failed: flags & 0x08 != 0,
            })
        })
        .collect()
}

/// The IPv6 addresses of `name` now.
pub(crate) fn ipv6_addrs(name: &str) -> Vec<Addr6> {
    parse_if_inet6(
        &std::fs::read_to_string("/proc/net/if_inet6").unwrap_or_default(),
        name,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn if_inet6_lines() {
        let text = "fd990000000000005054fffe12345601 02 40 00 00     eth0\n\
                    fe800000000000005054fffe12345601 02 40 20 40     eth0\n\
                    00000000000000000000000000000001 01 80 10 80       lo\n";
        let a = parse_if_inet6(text, "eth0");
        assert_eq!(a.len(), 2);
        assert_eq!(
            a[0].addr,
            "fd99::5054:fffe:1234:5601"
                .parse::<std::net::Ipv6Addr>()
                .unwrap()
        );
        assert_eq!(
            (a[0].prefix, a[0].global, a[0].tentative),
            (64, true, false)
        );
        assert_eq!((a[1].global, a[1].tentative), (false, true));
        assert!(parse_if_inet6(text, "eth1").is_empty());
    }

    #[test]
    fn dad_is_done_pending_or_failed_per_address() {
        // fd99::60 usable, fd99::61 tentative, fd99::62 tentative and
        // failed (the kernel keeps both flags), fd99::63 not listed yet.
        let text = "fd990000000000000000000000000060 02 40 00 80     eth0
                    fd990000000000000000000000000061 02 40 00 c0     eth0
                    fd990000000000000000000000000062 02 40 00 c8     eth0
";
        let a = parse_if_inet6(text, "eth0");
        let ip = |s: &str| s.parse::<std::net::Ipv6Addr>().unwrap();
        assert_eq!(dad_state(&a, &[ip("fd99::60")]), Dad::Done);
        assert_eq!(
            dad_state(&a, &[ip("fd99::60"), ip("fd99::61"), ip("fd99::63")]),
            Dad::Pending(vec![ip("fd99::61"), ip("fd99::63")])
        );
        assert_eq!(
            dad_state(&a, &[ip("fd99::61"), ip("fd99::62")]),
            Dad::Failed(ip("fd99::62"))
        );
    }
}
