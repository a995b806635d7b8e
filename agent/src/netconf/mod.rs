//! Network bring-up in the ramdisk: every physical NIC up, wait for
//! carrier, DHCPv4 on all NICs with link at once, addresses and default
//! route set, `/etc/resolv.conf` written, one console line per NIC. The
//! PXE NIC (`BOOTIF`) is preferred for the callback address.
//!
//! A static address from the kernel's `ip=` goes to its device (or the
//! BOOTIF NIC, or the first NIC with link) instead of DHCP.
//!
//! Explicit VLANs of `ipa-enable-vlan-interfaces` (`eth0.100`) are created
//! and get DHCP like the NICs.
//!
//! Not yet: IPv6 (SLAAC happens in the kernel once the link is up, but
//! DHCPv6 is not asked for), VLANs learnt from LLDP (`all`, bare names).

pub mod dhcp;
pub mod iface;
pub mod static_ip;
pub mod vlan;

use std::net::Ipv4Addr;
use std::path::Path;
use std::time::{Duration, Instant};

/// How one NIC ended up.
#[derive(Debug, Clone)]
pub struct NicResult {
    /// Interface name.
    pub name: String,
    /// MAC, lower case.
    pub mac: String,
    /// The lease, or why there is none.
    pub outcome: Result<dhcp::Lease, String>,
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
            let mac = std::fs::read_to_string(e.path().join("address")).ok()?;
            Some((name, mac.trim().to_ascii_lowercase()))
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
) -> Result<dhcp::Lease, String> {
    let mac_bytes = parse_mac(mac).ok_or_else(|| format!("bad MAC {mac:?}"))?;
    let lease = dhcp::obtain(name, mac_bytes, timeout).map_err(|e| format!("{e:#}"))?;
    iface::set_ipv4(name, lease.addr, lease.prefix).map_err(|e| format!("{e:#}"))?;
    if let (true, Some(gw)) = (route, lease.router) {
        iface::add_default_route(name, gw).map_err(|e| format!("{e:#}"))?;
    }
    Ok(lease)
}

/// Applies a static address from `ip=`; reported like a lease.
pub fn configure_static(name: &str, f: &static_ip::StaticIp) -> Result<dhcp::Lease, String> {
    iface::set_ipv4(name, f.addr, f.prefix).map_err(|e| format!("{e:#}"))?;
    if let Some(gw) = f.gateway {
        iface::add_default_route(name, gw).map_err(|e| format!("{e:#}"))?;
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

/// Brings every NIC up and runs DHCP on those with link, in parallel.
/// Returns once every NIC is done or the preferred one has an address,
/// with the results so far and the address to advertise.
pub fn bring_up(
    bootif: Option<&str>,
    fixed: Option<&static_ip::StaticIp>,
    vlans: &[(String, u16)],
    link_wait: Duration,
    dhcp_timeout: Duration,
) -> (Vec<NicResult>, Option<Ipv4Addr>) {
    let _ = iface::set_up("lo");
    let nics = physical_nics(Path::new("/sys"));
    for (name, _) in &nics {
        if let Err(e) = iface::set_up(name) {
            eprintln!("net: {name}: cannot set up: {e:#}");
        }
    }
    let until = Instant::now() + link_wait;
    while Instant::now() < until && !nics.iter().all(|(n, _)| has_carrier(n)) {
        std::thread::sleep(Duration::from_millis(100));
    }
    let mut nics = nics;
    for (parent, vid) in vlans {
        let Some(mac) = nics
            .iter()
            .find(|(n, _)| n == parent)
            .map(|(_, m)| m.clone())
        else {
            eprintln!("net: VLAN {parent}.{vid}: no interface {parent}");
            continue;
        };
        match vlan::create(parent, *vid).and_then(|name| iface::set_up(&name).map(|()| name)) {
            Ok(name) => nics.push((name, mac)),
            Err(e) => eprintln!("net: VLAN {parent}.{vid}: {e:#}"),
        }
    }
    // New VLAN interfaces take their parent's carrier a moment later.
    let until = Instant::now() + Duration::from_secs(if vlans.is_empty() { 0 } else { 2 });
    while Instant::now() < until && !nics.iter().all(|(n, _)| has_carrier(n)) {
        std::thread::sleep(Duration::from_millis(100));
    }
    let boot_mac = bootif.map(bootif_mac);
    // Which NIC takes the static address, if any.
    let fixed_nic = fixed.and_then(|f| match &f.device {
        Some(d) => Some(d.clone()),
        None => nics
            .iter()
            .find(|(_, m)| boot_mac.as_deref() == Some(m.as_str()))
            .or_else(|| nics.iter().find(|(n, _)| has_carrier(n)))
            .map(|(n, _)| n.clone()),
    });
    let (tx, rx) = std::sync::mpsc::channel::<NicResult>();
    for (name, mac) in nics.iter().cloned() {
        let carrier = has_carrier(&name);
        // The default route goes through the PXE NIC when it is known.
        let route = boot_mac.as_deref().is_none_or(|b| b == mac);
        let fixed = fixed
            .filter(|_| fixed_nic.as_deref() == Some(name.as_str()))
            .cloned();
        let tx = tx.clone();
        std::thread::spawn(move || {
            let outcome = match (fixed, carrier) {
                (Some(f), _) => configure_static(&name, &f),
                (None, true) => configure(&name, &mac, dhcp_timeout, route),
                (None, false) => Err("no link".to_string()),
            };
            let _ = tx.send(NicResult { name, mac, outcome });
        });
    }
    drop(tx);
    // The agent needs one address: stop waiting once the PXE NIC (without
    // BOOTIF: any NIC) has one. The others report when they finish.
    let mut results = Vec::new();
    while let Ok(r) = rx.recv() {
        let is_vlan = r.name.contains('.');
        let enough =
            r.outcome.is_ok() && !is_vlan && boot_mac.as_deref().is_none_or(|b| b == r.mac);
        results.push(r);
        if enough && results.len() < nics.len() {
            let mut all = results.clone();
            std::thread::spawn(move || {
                for r in rx {
                    eprintln!("net: {} (after the agent started)", describe(&r));
                    all.push(r);
                    write_resolv_conf(&all);
                }
            });
            break;
        }
    }
    write_resolv_conf(&results);
    let preferred = results
        .iter()
        .filter(|r| r.outcome.is_ok())
        .max_by_key(|r| boot_mac.as_deref() == Some(r.mac.as_str()))
        .and_then(|r| r.outcome.as_ref().ok().map(|l| l.addr));
    (results, preferred)
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

/// The resolv.conf text for these leases (servers deduplicated, in NIC order).
pub fn resolv_conf(results: &[NicResult]) -> String {
    let mut servers: Vec<Ipv4Addr> = Vec::new();
    let mut search: Vec<String> = Vec::new();
    for l in results.iter().filter_map(|r| r.outcome.as_ref().ok()) {
        for d in &l.dns {
            if !servers.contains(d) {
                servers.push(*d);
            }
        }
        if let Some(d) = &l.domain {
            if !search.contains(d) {
                search.push(d.clone());
            }
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

fn write_resolv_conf(results: &[NicResult]) {
    let text = resolv_conf(results);
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
        let text = resolv_conf(&[
            r("eth0", Ok(lease([10, 0, 0, 1], Some("rd.test")))),
            r("eth1", Err("no link".into())),
            r("eth2", Ok(lease([10, 0, 0, 1], None))),
        ]);
        assert_eq!(text, "search rd.test\nnameserver 10.0.0.1\n");
    }
}
