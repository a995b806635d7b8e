//! The kernel's `ip=` argument (Documentation/admin-guide/nfs/nfsroot.rst):
//! `ip=<client>:<server>:<gateway>:<netmask>:<hostname>:<device>:<autoconf>:<dns0>:<dns1>`.
//! Only a static client address is taken from it; `ip=dhcp`, `ip=off` and
//! an empty client address leave the NICs to DHCP.

use std::net::Ipv4Addr;

/// A static IPv4 configuration for one NIC.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StaticIp {
    /// Our address.
    pub addr: Ipv4Addr,
    /// Netmask prefix length (24 when not given).
    pub prefix: u8,
    /// Default gateway.
    pub gateway: Option<Ipv4Addr>,
    /// Interface name; `None`: the BOOTIF NIC, else the first with link.
    pub device: Option<String>,
    /// DNS servers.
    pub dns: Vec<Ipv4Addr>,
}

/// Parses `ip=`; `None` when it asks for no static address.
pub fn parse(raw: &str) -> Option<StaticIp> {
    let f: Vec<&str> = raw.split(':').collect();
    let addr: Ipv4Addr = f.first()?.parse().ok()?;
    let ip = |i: usize| f.get(i).and_then(|s| s.parse::<Ipv4Addr>().ok());
    let prefix = ip(3).map_or(24, super::iface::prefix_len);
    let device = f.get(5).filter(|d| !d.is_empty()).map(|d| d.to_string());
    Some(StaticIp {
        addr,
        prefix,
        gateway: ip(2),
        device,
        dns: [ip(7), ip(8)].into_iter().flatten().collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn static_forms() {
        let s = parse("192.0.2.10::192.0.2.1:255.255.255.0:node1:eth1:off:192.0.2.53").unwrap();
        assert_eq!(s.addr, Ipv4Addr::new(192, 0, 2, 10));
        assert_eq!(s.prefix, 24);
        assert_eq!(s.gateway, Some(Ipv4Addr::new(192, 0, 2, 1)));
        assert_eq!(s.device.as_deref(), Some("eth1"));
        assert_eq!(s.dns, vec![Ipv4Addr::new(192, 0, 2, 53)]);
        let s = parse("10.1.2.3:::255.255.0.0").unwrap();
        assert_eq!((s.prefix, s.gateway, s.device), (16, None, None));
        assert_eq!(parse("10.1.2.3").unwrap().prefix, 24);
    }

    #[test]
    fn dynamic_forms_are_not_static() {
        for raw in ["dhcp", "off", "on", "any", "::::node::dhcp", ""] {
            assert_eq!(parse(raw), None, "{raw}");
        }
    }
}
