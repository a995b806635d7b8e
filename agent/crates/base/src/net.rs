//! Network facts the agent core needs before the full inventory exists: the
//! MAC addresses to look the node up by, and the local address that routes
//! to the conductor (the advertised callback address, PROTOCOL.md §2.6).

use std::fs;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;

use anyhow::{Context, Result};

/// MACs of the interfaces under `sys_root/class/net` that have one, lower
/// case, skipping loopback and all-zero addresses, sorted by interface name.
/// A bond member counts with its own (permanent) MAC, see [`nic_mac`].
/// An interface whose driver is one of `skip_drivers` is left out (the
/// container form leaves out a BMC's USB NIC, whose MAC several hosts
/// share, as OpenShift's `filter_device` does).
pub fn mac_addresses(sys_root: &Path, skip_drivers: &[&str]) -> Vec<String> {
    let dir = sys_root.join("class/net");
    let Ok(entries) = fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut found: Vec<(String, String)> = entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            if name == "lo" {
                return None;
            }
            let driver = fs::read_link(e.path().join("device/driver")).ok();
            let driver = driver.as_ref().and_then(|d| d.file_name());
            if let Some(d) = driver.and_then(|d| d.to_str()) {
                if skip_drivers.contains(&d) {
                    tracing::info!("{name} ({d}) left out of the lookup");
                    return None;
                }
            }
            let mac = nic_mac(&e.path())?;
            is_valid_mac(&mac).then_some((name, mac))
        })
        .collect();
    found.sort();
    let mut macs: Vec<String> = found.into_iter().map(|(_, m)| m).collect();
    macs.dedup();
    macs
}

/// The MAC of the interface whose sysfs directory is `dir`
/// (`/sys/class/net/<name>`), lower case: a bond member's own permanent
/// MAC (`bonding_slave/perm_hwaddr`), as its `address` is the bond's while
/// it is enslaved (active-backup, balance modes: every member takes the
/// bond's MAC); else `address`.
pub fn nic_mac(dir: &Path) -> Option<String> {
    ["bonding_slave/perm_hwaddr", "address"]
        .iter()
        .find_map(|f| {
            let mac = fs::read_to_string(dir.join(f)).ok()?;
            let mac = mac.trim().to_ascii_lowercase();
            (!mac.is_empty()).then_some(mac)
        })
}

/// A six-byte colon-separated MAC that is not all zeros.
pub fn is_valid_mac(mac: &str) -> bool {
    let parts: Vec<&str> = mac.split(':').collect();
    parts.len() == 6
        && parts
            .iter()
            .all(|p| p.len() == 2 && p.chars().all(|c| c.is_ascii_hexdigit()))
        && mac != "00:00:00:00:00:00"
}

/// The local address the kernel would use to reach `url`'s host: a UDP
/// socket is "connected" there (which sends nothing) and its local address
/// read back.
pub async fn route_source_for(url: &str) -> Result<IpAddr> {
    let parsed = reqwest::Url::parse(url).with_context(|| format!("parsing {url}"))?;
    let host = parsed
        .host_str()
        .with_context(|| format!("{url} has no host"))?
        .trim_matches(|c| c == '[' || c == ']')
        .to_string();
    let port = parsed.port_or_known_default().unwrap_or(80);
    let mut addrs = tokio::net::lookup_host((host.as_str(), port))
        .await
        .with_context(|| format!("resolving {host}"))?;
    let target: SocketAddr = addrs
        .next()
        .with_context(|| format!("{host} resolves to no address"))?;
    let bind: SocketAddr = if target.is_ipv6() {
        "[::]:0".parse()?
    } else {
        "0.0.0.0:0".parse()?
    };
    let sock = std::net::UdpSocket::bind(bind).context("opening a UDP socket")?;
    sock.connect(target)
        .with_context(|| format!("no route to {target}"))?;
    Ok(sock.local_addr()?.ip())
}

/// The address of NIC `name` to advertise (`ipa-network-interface`):
/// its first IPv4 address that is not link-local, else its first global
/// IPv6 address.
pub fn interface_address(name: &str) -> Result<IpAddr> {
    let addrs: Vec<IpAddr> = nix::ifaddrs::getifaddrs()
        .context("listing the NICs' addresses")?
        .filter(|i| i.interface_name == name)
        .filter_map(|i| i.address)
        .filter_map(|a| {
            a.as_sockaddr_in()
                .map(|s| IpAddr::V4(s.ip()))
                .or_else(|| a.as_sockaddr_in6().map(|s| IpAddr::V6(s.ip())))
        })
        .collect();
    pick_advertised(&addrs).with_context(|| format!("{name} has no usable address yet"))
}

/// IPv4 that is not link-local first, then IPv6 that is not link-local.
fn pick_advertised(addrs: &[IpAddr]) -> Option<IpAddr> {
    let usable = |ip: &&IpAddr| match ip {
        IpAddr::V4(a) => !a.is_link_local() && !a.is_unspecified(),
        IpAddr::V6(a) => (a.segments()[0] & 0xffc0) != 0xfe80 && !a.is_unspecified(),
    };
    addrs
        .iter()
        .filter(usable)
        .find(|a| a.is_ipv4())
        .or_else(|| addrs.iter().find(usable))
        .copied()
}

/// Formats `scheme://host:port`, bracketing IPv6 hosts.
pub fn callback_url(scheme: &str, host: IpAddr, port: u16) -> String {
    match host {
        IpAddr::V4(a) => format!("{scheme}://{a}:{port}"),
        IpAddr::V6(a) => format!("{scheme}://[{a}]:{port}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn macs_from_a_sysfs_tree() {
        let dir = tempfile::tempdir().unwrap();
        for (name, mac) in [
            ("lo", "00:00:00:00:00:00"),
            ("eth1", "52:54:00:AA:BB:02\n"),
            ("eth0", "52:54:00:aa:bb:01\n"),
            ("tun0", ""),
        ] {
            let d = dir.path().join("class/net").join(name);
            fs::create_dir_all(&d).unwrap();
            fs::write(d.join("address"), mac).unwrap();
        }
        assert_eq!(
            mac_addresses(dir.path(), &[]),
            ["52:54:00:aa:bb:01", "52:54:00:aa:bb:02"]
        );
    }

    #[test]
    fn interfaces_on_a_skipped_driver_are_left_out() {
        let dir = tempfile::tempdir().unwrap();
        for (name, mac, driver) in [
            ("enp1s0", "52:54:00:aa:bb:01\n", "virtio_net"),
            ("enp0s20u1", "52:54:00:aa:bb:02\n", "cdc_ether"),
        ] {
            let d = dir.path().join("class/net").join(name);
            let drv = dir.path().join("bus/drivers").join(driver);
            fs::create_dir_all(d.join("device")).unwrap();
            fs::create_dir_all(&drv).unwrap();
            fs::write(d.join("address"), mac).unwrap();
            std::os::unix::fs::symlink(&drv, d.join("device/driver")).unwrap();
        }
        assert_eq!(
            mac_addresses(dir.path(), &["cdc_ether", "cdc_ncm"]),
            ["52:54:00:aa:bb:01"]
        );
        assert_eq!(mac_addresses(dir.path(), &[]).len(), 2);
    }

    #[test]
    fn bond_members_count_with_their_own_mac() {
        let dir = tempfile::tempdir().unwrap();
        let bond_mac = "52:54:00:3a:11:01\n";
        for (name, address, perm) in [
            ("bond0", bond_mac, None),
            ("eth0", bond_mac, Some("52:54:00:3a:11:01\n")),
            ("eth1", bond_mac, Some("52:54:00:3A:11:02\n")),
        ] {
            let d = dir.path().join("class/net").join(name);
            fs::create_dir_all(&d).unwrap();
            fs::write(d.join("address"), address).unwrap();
            if let Some(perm) = perm {
                fs::create_dir_all(d.join("bonding_slave")).unwrap();
                fs::write(d.join("bonding_slave/perm_hwaddr"), perm).unwrap();
            }
        }
        assert_eq!(
            nic_mac(&dir.path().join("class/net/eth1")).as_deref(),
            Some("52:54:00:3a:11:02")
        );
        assert_eq!(
            nic_mac(&dir.path().join("class/net/bond0")).as_deref(),
            Some("52:54:00:3a:11:01")
        );
        assert_eq!(
            mac_addresses(dir.path(), &[]),
            ["52:54:00:3a:11:01", "52:54:00:3a:11:02"]
        );
    }

    #[test]
    fn callback_urls_bracket_ipv6() {
        assert_eq!(
            callback_url("https", "10.0.0.5".parse().unwrap(), 9999),
            "https://10.0.0.5:9999"
        );
        assert_eq!(
            callback_url("https", "fd00::5".parse().unwrap(), 9999),
            "https://[fd00::5]:9999"
        );
    }

    #[tokio::test]
    async fn loopback_routes_from_loopback() {
        let ip = route_source_for("http://127.0.0.1:6385").await.unwrap();
        assert_eq!(ip, "127.0.0.1".parse::<IpAddr>().unwrap());
    }

    #[test]
    fn the_advertised_address_prefers_routable_ipv4() {
        let ips: Vec<IpAddr> = ["fe80::1", "169.254.3.4", "2001:db8::5", "192.0.2.7"]
            .iter()
            .map(|s| s.parse().unwrap())
            .collect();
        assert_eq!(pick_advertised(&ips), Some("192.0.2.7".parse().unwrap()));
        assert_eq!(
            pick_advertised(&ips[..3]),
            Some("2001:db8::5".parse().unwrap())
        );
        assert_eq!(pick_advertised(&ips[..2]), None);
        assert!(interface_address("lo").unwrap().is_loopback());
        assert!(interface_address("no-such-nic0").is_err());
    }
}
