//! Network bring-up in the ramdisk: every physical NIC up, wait for
//! carrier, DHCPv4 on all NICs with link at once, addresses and default
//! route set, `/etc/resolv.conf` written, one console line per NIC. The
//! PXE NIC (`BOOTIF`) is preferred for the callback address.
//!
//! A static address from the kernel's `ip=` goes to its device (or the
//! BOOTIF NIC, or the first NIC with link) instead of DHCP.
//!
//! VLANs of `ipa-enable-vlan-interfaces` (explicit `eth0.100`, or learnt
//! from LLDP for `all` and bare NIC names) are created and get DHCP like
//! the NICs. IPv6: the kernel does SLAAC from router advertisements; DHCPv6
//! runs on every NIC with link beside DHCPv4 and reports on its own console
//! line; with no IPv4 address anywhere, the agent advertises an IPv6 one.
//! The orchestration is in [`bringup`].

pub(crate) mod bond;
pub(crate) mod bringup;
pub mod dhcp;
pub mod dhcp6;
pub(crate) mod iface;
pub mod network_data;
pub mod nm_keyfile;
pub mod record;
pub mod static_ip;
pub mod vlan;

pub use bringup::bring_up;

use std::net::Ipv4Addr;
use std::path::Path;
use std::time::Duration;

/// Why a NIC has no address.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NicError {
    /// No carrier.
    #[error("no link")]
    NoLink,
    /// network_data.json names the NIC and asks for no DHCP on it.
    #[error("IPv4 left alone (network_data.json)")]
    LeftAlone,
    /// The MAC in sysfs does not parse.
    #[error("bad MAC {0:?}")]
    BadMac(String),
    /// DHCP or applying its answer failed (the error chain, rendered).
    #[error("{0}")]
    Failed(String),
}

impl NicError {
    fn from_chain(e: &anyhow::Error) -> Self {
        Self::Failed(format!("{e:#}"))
    }
}

/// How one NIC ended up.
#[derive(Debug, Clone)]
pub struct NicResult {
    /// Interface name.
    pub name: String,
    /// MAC, lower case.
    pub mac: String,
    /// The lease, or why there is none.
    pub outcome: Result<dhcp::Lease, NicError>,
}

/// `BOOTIF=01-52-54-00-12-34-56` → `52:54:00:12:34:56`.
pub fn bootif_mac(raw: &str) -> String {
    let raw = raw.trim().to_ascii_lowercase();
    let raw = match raw.strip_prefix("01-") {
        Some(r) if r.len() == 17 => r,
        _ => &raw,
    };
    raw.replace('-', ":")
}

fn parse_mac(mac: &str) -> Option<[u8; 6]> {
    let mut out = [0u8; 6];
    let mut parts = mac.split(':');
    for b in &mut out {
        *b = u8::from_str_radix(parts.next()?, 16).ok()?;
    }
    parts.next().is_none().then_some(out)
}

/// Physical NICs (those with a `device` link) under `sys/class/net`, sorted.
pub fn physical_nics(sys: &Path) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = std::fs::read_dir(sys.join("class/net"))
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.path().join("device").exists())
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            Some((name, agent_base::net::nic_mac(&e.path())?))
        })
        .collect();
    out.sort();
    out
}

fn has_carrier(name: &str) -> bool {
    std::fs::read_to_string(format!("/sys/class/net/{name}/carrier")).is_ok_and(|c| c.trim() == "1")
}

/// Asks for a lease on `name` and applies it (address, netmask, default
/// route when `route` and the lease names a router).
pub fn configure(
    name: &str,
    mac: &str,
    timeout: Duration,
    route: bool,
) -> Result<dhcp::Lease, NicError> {
    let mac_bytes = parse_mac(mac).ok_or_else(|| NicError::BadMac(mac.to_string()))?;
    let lease = dhcp::obtain(name, mac_bytes, timeout).map_err(|e| NicError::from_chain(&e))?;
    iface::set_ipv4(name, lease.addr, lease.prefix).map_err(|e| NicError::from_chain(&e))?;
    if let (true, Some(gw)) = (route, lease.router) {
        iface::add_default_route(name, gw).map_err(|e| NicError::from_chain(&e))?;
    }
    Ok(lease)
}

/// Applies a static address from `ip=`; reported like a lease.
pub fn configure_static(name: &str, f: &static_ip::StaticIp) -> Result<dhcp::Lease, NicError> {
    iface::set_ipv4(name, f.addr, f.prefix).map_err(|e| NicError::from_chain(&e))?;
    if let Some(gw) = f.gateway {
        iface::add_default_route(name, gw).map_err(|e| NicError::from_chain(&e))?;
    }
    Ok(dhcp::Lease {
        addr: f.addr,
        prefix: f.prefix,
        router: f.gateway,
        dns: f.dns.clone(),
        domain: None,
        server: Ipv4Addr::UNSPECIFIED,
        lease_secs: None,
    })
}

/// One console line per NIC.
pub fn describe(r: &NicResult) -> String {
    match &r.outcome {
        Ok(l) => format!(
            "{} {}: {}/{} router {} dns [{}] {}",
            r.name,
            r.mac,
            l.addr,
            l.prefix,
            l.router.map_or("none".into(), |g| g.to_string()),
            l.dns
                .iter()
                .map(|d| d.to_string())
                .collect::<Vec<_>>()
                .join(" "),
            if l.server.is_unspecified() {
                "static (ip=)".to_string()
            } else {
                format!("by DHCP from {}", l.server)
            }
        ),
        Err(e) => format!("{} {}: no address ({e})", r.name, r.mac),
    }
}

/// The resolv.conf text for static servers (network_data.json), these
/// leases and DHCPv6 servers (deduplicated, static first, then IPv4 in NIC
/// order; at most three, as the resolver reads).
pub fn resolv_conf(
    fixed: &[std::net::IpAddr],
    results: &[NicResult],
    dns6: &[std::net::Ipv6Addr],
) -> String {
    let mut servers: Vec<std::net::IpAddr> = fixed.to_vec();
    let mut search: Vec<String> = Vec::new();
    for l in results.iter().filter_map(|r| r.outcome.as_ref().ok()) {
        for d in &l.dns {
            if !servers.contains(&(*d).into()) {
                servers.push((*d).into());
            }
        }
        if let Some(d) = &l.domain {
            if !search.contains(d) {
                search.push(d.clone());
            }
        }
    }
    for d in dns6 {
        if !servers.contains(&(*d).into()) {
            servers.push((*d).into());
        }
    }
    let mut out = String::new();
    if !search.is_empty() {
        out.push_str(&format!("search {}\n", search.join(" ")));
    }
    for s in servers.iter().take(3) {
        out.push_str(&format!("nameserver {s}\n"));
    }
    out
}

fn write_resolv_conf(
    fixed: &[std::net::IpAddr],
    results: &[NicResult],
    dns6: &[std::net::Ipv6Addr],
) {
    let text = resolv_conf(fixed, results, dns6);
    if !text.is_empty() {
        let _ = std::fs::create_dir_all("/etc");
        if let Err(e) = std::fs::write("/etc/resolv.conf", text) {
            eprintln!("net: writing /etc/resolv.conf: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bootif_forms() {
        assert_eq!(bootif_mac("01-52-54-00-12-34-AB"), "52:54:00:12:34:ab");
        assert_eq!(bootif_mac("52:54:00:12:34:ab"), "52:54:00:12:34:ab");
        assert_eq!(
            parse_mac("52:54:00:12:34:ab"),
            Some([0x52, 0x54, 0, 0x12, 0x34, 0xab])
        );
        assert_eq!(parse_mac("52:54:00"), None);
    }

    #[test]
    fn resolv_conf_merges_leases() {
        let lease = |dns: [u8; 4], domain: Option<&str>| dhcp::Lease {
            addr: Ipv4Addr::new(10, 0, 0, 5),
            prefix: 24,
            router: None,
            dns: vec![dns.into()],
            domain: domain.map(String::from),
            server: Ipv4Addr::new(10, 0, 0, 1),
            lease_secs: None,
        };
        let r = |n: &str, l| NicResult {
            name: n.into(),
            mac: String::new(),
            outcome: l,
        };
        let text = resolv_conf(
            &[],
            &[
                r("eth0", Ok(lease([10, 0, 0, 1], Some("rd.test")))),
                r("eth1", Err(NicError::NoLink)),
                r("eth2", Ok(lease([10, 0, 0, 1], None))),
            ],
            &["fd99::1".parse().unwrap()],
        );
        assert_eq!(
            text,
            "search rd.test\nnameserver 10.0.0.1\nnameserver fd99::1\n"
        );
        // network_data.json's servers come first; three at most.
        let text = resolv_conf(
            &["192.0.2.53".parse().unwrap(), "10.0.0.1".parse().unwrap()],
            &[r("eth0", Ok(lease([10, 0, 0, 1], None)))],
            &["fd99::1".parse().unwrap(), "fd99::2".parse().unwrap()],
        );
        assert_eq!(
            text,
            "nameserver 192.0.2.53\nnameserver 10.0.0.1\nnameserver fd99::1\n"
        );
    }
}
