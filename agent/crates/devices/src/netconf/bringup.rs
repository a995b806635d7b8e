//! The order of network bring-up in the ramdisk: links up and carrier,
//! VLANs (explicit, or learnt from LLDP), then DHCPv4 and DHCPv6 on every
//! interface with link at once. Returns as soon as the agent has an address
//! to advertise (the BOOTIF NIC's, or any); the rest report on the console
//! when they finish.

use std::net::{IpAddr, Ipv6Addr};
use std::path::Path;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::{
    bootif_mac, configure, configure_static, describe, dhcp6, has_carrier, iface, network_data,
    parse_mac, physical_nics, static_ip, vlan, write_resolv_conf, NicResult,
};

/// What IPv6 gave one interface.
#[derive(Debug, Clone)]
pub(crate) struct Nic6 {
    /// Interface name.
    pub name: String,
    /// MAC, lower case.
    pub mac: String,
    /// The DHCPv6 lease (set on the interface), or why there is none.
    pub dhcp: Result<dhcp6::Lease6, super::NicError>,
    /// Global addresses the kernel configured from router advertisements.
    pub slaac: Vec<iface::Addr6>,
}

/// One console line for IPv6 on a NIC.
pub(crate) fn describe6(r: &Nic6) -> String {
    let dhcp = match &r.dhcp {
        Ok(l) => format!(
            "{}/128 by DHCPv6 from {} dns [{}]",
            l.addr,
            l.server,
            l.dns
                .iter()
                .map(|d| d.to_string())
                .collect::<Vec<_>>()
                .join(" ")
        ),
        Err(e) => format!("no DHCPv6 ({e})"),
    };
    let slaac = if r.slaac.is_empty() {
        "no SLAAC address".to_string()
    } else {
        let a: Vec<String> = r
            .slaac
            .iter()
            .map(|a| format!("{}/{}", a.addr, a.prefix))
            .collect();
        format!("SLAAC {}", a.join(" "))
    };
    format!("{} {}: IPv6 {dhcp}; {slaac}", r.name, r.mac)
}

#[derive(Default)]
struct Resolv {
    /// From network_data.json: first.
    fixed: Vec<IpAddr>,
    v4: Vec<NicResult>,
    dns6: Vec<Ipv6Addr>,
}

impl Resolv {
    fn write(&self) {
        write_resolv_conf(&self.fixed, &self.v4, &self.dns6);
    }
}

/// Applies network_data.json's plan; prints one line per interface;
/// returns the address to advertise (an interface with a default route
/// first, IPv4 before IPv6) if any static address was set.
fn apply_network_data(plan: &network_data::Plan) -> Option<IpAddr> {
    let applied = network_data::apply::apply(plan, Path::new("/sys"));
    for a in &applied {
        match &a.outcome {
            Ok(()) => eprintln!("net: {}", network_data::describe(&a.iface)),
            Err(e) => eprintln!(
                "net: {} (link {:?}): network_data.json not applied: {e:#}",
                a.iface.name, a.iface.id
            ),
        }
    }
    let ok: Vec<&network_data::Iface> = applied
        .iter()
        .filter(|a| a.outcome.is_ok())
        .map(|a| &a.iface)
        .collect();
    let mut addrs: Vec<(bool, bool, IpAddr)> = ok
        .iter()
        .flat_map(|f| {
            let routed = f.routes.iter().any(|r| r.prefix == 0);
            f.addrs
                .iter()
                .map(move |(a, _)| (!(routed), !a.is_ipv4(), *a))
        })
        .collect();
    addrs.sort();
    addrs.first().map(|(_, _, a)| *a)
}

/// Asks for VLANs from LLDP where the plan says so; prints what was heard.
fn lldp_vlans(
    plan: &vlan::VlanPlan,
    nics: &[(String, String)],
    timeout: Duration,
) -> Vec<(String, u16)> {
    for n in &plan.lldp_on {
        if !nics.iter().any(|(name, _)| name == n) {
            eprintln!("net: VLANs from LLDP on {n}: no such interface");
        }
    }
    let names: Vec<String> = nics
        .iter()
        .map(|(n, _)| n.clone())
        .filter(|n| plan.wants_lldp_on(n) && has_carrier(n))
        .collect();
    if names.is_empty() {
        return Vec::new();
    }
    let heard = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt.block_on(crate::lldp::listen::listen(&names, timeout)),
        Err(e) => {
            eprintln!("net: LLDP for VLANs: {e}");
            return Vec::new();
        }
    };
    let found = vlan::from_lldp(&heard);
    for n in &names {
        let ids: Vec<String> = found
            .iter()
            .filter(|(p, _)| p == n)
            .map(|(_, v)| v.to_string())
            .collect();
        let what = match heard.get(n) {
            Some(crate::lldp::listen::Heard::Frame(_)) if ids.is_empty() => {
                "LLDP names no VLAN".to_string()
            }
            Some(crate::lldp::listen::Heard::Frame(_)) => {
                format!("VLANs {} from LLDP", ids.join(","))
            }
            Some(crate::lldp::listen::Heard::Failed(e)) => format!("no LLDP ({e})"),
            _ => format!("no LLDP frame within {timeout:?}"),
        };
        eprintln!("net: {n}: {what}");
    }
    found
}

/// Brings every NIC up and runs DHCPv4 and DHCPv6 on those with link, in
/// parallel. Returns once the preferred NIC (BOOTIF's, else any) has an
/// IPv4 address, or, when no NIC gets one, an IPv6 address; with the IPv4
/// results so far and the address to advertise.
pub fn bring_up(
    bootif: Option<&str>,
    fixed: Option<&static_ip::StaticIp>,
    network_data: Option<&network_data::Plan>,
    vlans: &vlan::VlanPlan,
    lldp_timeout: Duration,
    link_wait: Duration,
    dhcp_timeout: Duration,
) -> (Vec<NicResult>, Option<IpAddr>) {
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
    // network_data.json first: NICs it names get no DHCP unless it says so.
    let static_advertise = network_data.and_then(apply_network_data);
    let claimed: Vec<String> = network_data.map(|p| p.claimed()).unwrap_or_default();
    let planned = |name: &str| network_data.and_then(|p| p.ifaces.iter().find(|f| f.name == name));
    // Planned bonds and VLANs that ask for DHCP join the NICs for it.
    let mut extra: Vec<(String, String)> = Vec::new();
    for f in network_data
        .map(|p| p.ifaces.as_slice())
        .unwrap_or_default()
    {
        if !matches!(f.kind, network_data::LinkKind::Phy) && (f.dhcp4 || f.dhcp6) {
            let mac = std::fs::read_to_string(format!("/sys/class/net/{}/address", f.name))
                .map(|m| m.trim().to_ascii_lowercase())
                .unwrap_or_default();
            extra.push((f.name.clone(), mac));
        }
    }
    let nics: Vec<(String, String)> = nics
        .into_iter()
        .filter(|(n, _)| !claimed.contains(n) || planned(n).is_some_and(|f| f.dhcp4 || f.dhcp6))
        .chain(extra)
        .collect();
    let mut wanted = vlans.explicit.clone();
    if vlans.needs_lldp() {
        for v in lldp_vlans(vlans, &nics, lldp_timeout) {
            if !wanted.contains(&v) {
                wanted.push(v);
            }
        }
    }
    let mut nics = nics;
    for (parent, vid) in &wanted {
        let Some((parent, mac)) = vlan::find_parent(&nics, parent) else {
            eprintln!("net: VLAN {parent}.{vid}: no interface {parent}");
            continue;
        };
        match vlan::create(&parent, *vid).and_then(|name| iface::set_up(&name).map(|()| name)) {
            Ok(name) => nics.push((name, mac)),
            Err(e) => eprintln!("net: VLAN {parent}.{vid}: {e:#}"),
        }
    }
    // New VLAN interfaces take their parent's carrier a moment later.
    let until = Instant::now() + Duration::from_secs(if wanted.is_empty() { 0 } else { 2 });
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
    let resolv = Arc::new(Mutex::new(Resolv::default()));
    let (tx, rx) = mpsc::channel::<NicResult>();
    let (tx6, rx6) = mpsc::channel::<Nic6>();
    let mut with_link = 0;
    for (name, mac) in nics.iter().cloned() {
        let carrier = has_carrier(&name);
        let (want4, want6) = planned(&name).map_or((true, true), |f| (f.dhcp4, f.dhcp6));
        // The default route goes through the PXE NIC when it is known.
        let route = boot_mac.as_deref().is_none_or(|b| b == mac);
        let fixed = fixed
            .filter(|_| fixed_nic.as_deref() == Some(name.as_str()))
            .cloned();
        let tx = tx.clone();
        let (name4, mac4) = (name.clone(), mac.clone());
        std::thread::spawn(move || {
            let outcome = match (fixed, carrier) {
                (Some(f), _) => configure_static(&name4, &f),
                (None, true) if want4 => configure(&name4, &mac4, dhcp_timeout, route),
                (None, true) => Err(super::NicError::LeftAlone),
                (None, false) => Err(super::NicError::NoLink),
            };
            let _ = tx.send(NicResult {
                name: name4,
                mac: mac4,
                outcome,
            });
        });
        if carrier && want6 {
            with_link += 1;
            let tx6 = tx6.clone();
            std::thread::spawn(move || {
                let _ = tx6.send(configure6(&name, &mac, dhcp_timeout));
            });
        }
    }
    drop((tx, tx6));

    // IPv4 first: stop waiting once the PXE NIC (without BOOTIF: any NIC,
    // VLANs aside) has an address.
    let mut results = Vec::new();
    let mut advertise = static_advertise;
    if let Some(p) = network_data {
        resolv.lock().unwrap_or_else(|p| p.into_inner()).fixed = p.dns.clone();
    }
    // With a static address from network_data.json, nothing waits for DHCP.
    while let (None, Ok(r)) = (advertise, rx.recv()) {
        let is_vlan = r.name.contains('.');
        let enough =
            r.outcome.is_ok() && !is_vlan && boot_mac.as_deref().is_none_or(|b| b == r.mac);
        results.push(r);
        if enough {
            break;
        }
    }
    if let (None, Some(r)) = (
        advertise,
        results
            .iter()
            .filter(|r| r.outcome.is_ok())
            .max_by_key(|r| boot_mac.as_deref() == Some(r.mac.as_str())),
    ) {
        advertise = r.outcome.as_ref().ok().map(|l| IpAddr::V4(l.addr));
    }
    {
        let mut s = resolv.lock().unwrap_or_else(|p| p.into_inner());
        s.v4 = results.clone();
        s.write();
    }
    let mut v6 = Vec::new();
    if advertise.is_none() {
        // No IPv4 anywhere: an IPv6-only network. Wait for IPv6.
        for _ in 0..with_link {
            let Ok(r) = rx6.recv() else { break };
            eprintln!("net: {}", describe6(&r));
            add_dns6(&resolv, &r);
            v6.push(r);
        }
        advertise = pick6(&v6, boot_mac.as_deref()).map(IpAddr::V6);
    }
    // The rest report when they finish.
    let res4 = resolv.clone();
    std::thread::spawn(move || {
        for r in rx {
            eprintln!("net: {} (after the agent started)", describe(&r));
            let mut s = res4.lock().unwrap_or_else(|p| p.into_inner());
            s.v4.push(r);
            s.write();
        }
    });
    std::thread::spawn(move || {
        for r in rx6 {
            eprintln!("net: {}", describe6(&r));
            add_dns6(&resolv, &r);
        }
    });
    (results, advertise)
}

fn add_dns6(resolv: &Mutex<Resolv>, r: &Nic6) {
    if let Ok(l) = &r.dhcp {
        let mut s = resolv.lock().unwrap_or_else(|p| p.into_inner());
        for d in &l.dns {
            if !s.dns6.contains(d) {
                s.dns6.push(*d);
            }
        }
        s.write();
    }
}

/// The IPv6 address to advertise: the BOOTIF NIC's before others; on a
/// NIC, DHCPv6's before SLAAC's.
pub(crate) fn pick6(v6: &[Nic6], boot_mac: Option<&str>) -> Option<Ipv6Addr> {
    let mut order: Vec<&Nic6> = v6.iter().collect();
    order.sort_by_key(|r| boot_mac != Some(r.mac.as_str()));
    order.iter().find_map(|r| {
        r.dhcp
            .as_ref()
            .ok()
            .map(|l| l.addr)
            .or_else(|| r.slaac.first().map(|a| a.addr))
    })
}

/// DHCPv6 on `name`, then the SLAAC addresses the kernel made meanwhile.
fn configure6(name: &str, mac: &str, timeout: Duration) -> Nic6 {
    let dhcp = match parse_mac(mac) {
        None => Err(super::NicError::BadMac(mac.to_string())),
        Some(m) => dhcp6::obtain(name, m, timeout)
            .and_then(|l| iface::add_ipv6(name, l.addr, 128).map(|()| l))
            .map_err(|e| super::NicError::from_chain(&e)),
    };
    let dhcp_addr = dhcp.as_ref().ok().map(|l| l.addr);
    let slaac = iface::ipv6_addrs(name)
        .into_iter()
        .filter(|a| a.global && Some(a.addr) != dhcp_addr)
        .collect();
    Nic6 {
        name: name.to_string(),
        mac: mac.to_string(),
        dhcp,
        slaac,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nic(mac: &str, dhcp: Option<&str>, slaac: Option<&str>) -> Nic6 {
        Nic6 {
            name: "eth".into(),
            mac: mac.into(),
            dhcp: dhcp
                .map(|a| dhcp6::Lease6 {
                    addr: a.parse().unwrap(),
                    dns: vec![],
                    server: "00".into(),
                    valid_secs: 1,
                })
                .ok_or_else(|| super::super::NicError::Failed("timed out".into())),
            slaac: slaac
                .map(|a| iface::Addr6 {
                    addr: a.parse().unwrap(),
                    prefix: 64,
                    global: true,
                    tentative: false,
                    dad_failed: false,
                })
                .into_iter()
                .collect(),
        }
    }

    #[test]
    fn advertised_ipv6_prefers_bootif_then_dhcpv6() {
        let v6 = [
            nic("a", Some("fd99::10"), None),
            nic("b", None, Some("fd99::b")),
        ];
        assert_eq!(pick6(&v6, Some("b")), Some("fd99::b".parse().unwrap()));
        assert_eq!(pick6(&v6, None), Some("fd99::10".parse().unwrap()));
        assert_eq!(pick6(&[nic("a", None, None)], None), None);
        let line = describe6(&v6[1]);
        assert!(
            line.contains("no DHCPv6 (timed out)") && line.contains("SLAAC fd99::b/64"),
            "{line}"
        );
    }
}
