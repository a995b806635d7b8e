//! Network interfaces: name, MAC, first IPv4/IPv6 address, carrier, speed,
//! driver and PCI identity, from `/sys/class/net` and the kernel's address
//! list (getifaddrs, i.e. netlink; a captured file for fixtures).
//!
//! InfiniBand ports (`type` 32) have a 20-byte hardware address; they are
//! reported as IPA reports them: the six-byte MAC Ironic's ports take,
//! derived from the port GUID (its upper three and lower three bytes), and
//! the DHCP client identifier of RFC 4390 in `client_id`, which Ironic's
//! inspection hook keeps as the port's `extra.client-id` for DHCP and PXE.

use std::collections::HashMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::{read_attr, under};

/// One entry of `inventory.interfaces`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Interface {
    /// Kernel name.
    pub name: String,
    /// Lower-case `aa:bb:cc:dd:ee:ff`.
    pub mac_address: String,
    /// First IPv4 address.
    pub ipv4_address: Option<String>,
    /// First IPv6 address (`%name` appended to link-local ones).
    pub ipv6_address: Option<String>,
    /// Link detected.
    pub has_carrier: bool,
    /// Raw LLDP TLVs `[[type, "hex"], ...]` when collected, else null.
    pub lldp: Option<Vec<(u8, String)>>,
    /// Device vendor id (`0x8086`).
    pub vendor: Option<String>,
    /// Device id (`0x1572`).
    pub product: Option<String>,
    /// InfiniBand DHCP client id (RFC 4390; null for Ethernet).
    pub client_id: Option<String>,
    /// biosdevname (not used by this agent: always null).
    pub biosdevname: Option<String>,
    /// Link speed in Mbit/s.
    pub speed_mbps: Option<u64>,
    /// PCI address of the device (`0000:00:03.0`).
    pub pci_address: Option<String>,
    /// Kernel driver.
    pub driver: Option<String>,
}

/// Interface name → its addresses, in the kernel's order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Addresses {
    v4: HashMap<String, Vec<String>>,
    v6: HashMap<String, Vec<String>>,
}

impl Addresses {
    /// The running system's addresses (getifaddrs). Empty on failure.
    pub fn live() -> Self {
        let mut a = Self::default();
        let Ok(list) = nix::ifaddrs::getifaddrs() else {
            tracing::debug!("getifaddrs failed: no interface addresses");
            return a;
        };
        for ifa in list {
            let Some(addr) = ifa.address else { continue };
            if let Some(v4) = addr.as_sockaddr_in() {
                a.add(&ifa.interface_name, &v4.ip().to_string());
            } else if let Some(v6) = addr.as_sockaddr_in6() {
                a.add(&ifa.interface_name, &v6.ip().to_string());
            }
        }
        a
    }

    /// Addresses from a capture file: lines `<ifname> <address>[/prefix]`
    /// (what `ip -o addr` prints, reduced by the capture script).
    pub fn from_file(path: &Path) -> Self {
        let mut a = Self::default();
        for line in std::fs::read_to_string(path).unwrap_or_default().lines() {
            let mut f = line.split_whitespace();
            if let (Some(name), Some(addr)) = (f.next(), f.next()) {
                a.add(name, addr.split('/').next().unwrap_or(addr));
            }
        }
        a
    }

    /// Records one address.
    pub fn add(&mut self, ifname: &str, addr: &str) {
        let map = if addr.contains(':') {
            &mut self.v6
        } else {
            &mut self.v4
        };
        map.entry(ifname.to_string())
            .or_default()
            .push(addr.to_string());
    }

    fn first_v4(&self, ifname: &str) -> Option<String> {
        self.v4.get(ifname)?.first().cloned()
    }

    fn first_v6(&self, ifname: &str) -> Option<String> {
        let a = self.v6.get(ifname)?.first()?;
        let link_local = a
            .split(':')
            .next()
            .and_then(|s| u16::from_str_radix(s, 16).ok())
            .is_some_and(|s| s & 0xffc0 == 0xfe80);
        Some(if link_local {
            format!("{a}%{ifname}")
        } else {
            a.clone()
        })
    }
}

/// Lists physical NICs, VLANs and bonds (no loopback, no other virtual
/// devices), sorted by name; interfaces without a usable MAC are dropped.
pub fn read(root: &Path, addrs: &Addresses) -> Vec<Interface> {
    let dir = under(root, "/sys/class/net");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut names: Vec<String> = entries
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n != "lo")
        .collect();
    names.sort();
    names
        .into_iter()
        .filter_map(|name| {
            let d = dir.join(&name);
            let is_vlan = under(root, "/proc/net/vlan").join(&name).exists();
            let wanted = d.join("device").exists() || d.join("bonding").is_dir() || is_vlan;
            if !wanted {
                return None;
            }
            let raw = agent_base::net::nic_mac(&d)?;
            let (mac, client_id) = match read_attr(&d.join("type")).as_deref() {
                Some(ARPHRD_INFINIBAND) => match infiniband(&raw) {
                    Some(ib) => ib,
                    None => {
                        tracing::warn!(interface = %name, address = %raw, "InfiniBand address without a port GUID; left out");
                        return None;
                    }
                },
                _ => (raw, None),
            };
            if !agent_base::net::is_valid_mac(&mac) || mac.starts_with("fa:") {
                return None;
            }
            let dev = d.join("device");
            let link_name = |p: &Path| {
                std::fs::read_link(p)
                    .ok()
                    .and_then(|t| t.file_name().map(|n| n.to_string_lossy().into_owned()))
            };
            Some(Interface {
                ipv4_address: addrs.first_v4(&name),
                ipv6_address: addrs.first_v6(&name),
                mac_address: mac,
                has_carrier: read_attr(&d.join("carrier")).as_deref() == Some("1"),
                lldp: None,
                vendor: read_attr(&dev.join("vendor")),
                product: read_attr(&dev.join("device")),
                client_id,
                biosdevname: None,
                speed_mbps: read_attr(&d.join("speed"))
                    .and_then(|s| s.parse::<i64>().ok())
                    .filter(|s| *s > 0)
                    .map(|s| s as u64),
                pci_address: pci_address(&dev),
                driver: link_name(&dev.join("driver")),
                name,
            })
        })
        .collect()
}

/// USB network drivers OpenShift's manager filters out (`filter_device`).
pub const USB_NETWORK_DRIVERS: [&str; 2] = ["cdc_ether", "cdc_ncm"];

/// Whether `i` is a USB network device to leave out of the container
/// form's inventory (logged as upstream logs it).
pub fn is_usb_network_device(i: &Interface) -> bool {
    let usb = i
        .driver
        .as_deref()
        .is_some_and(|d| USB_NETWORK_DRIVERS.contains(&d));
    if usb {
        tracing::warn!(
            "Filtering out USB network device {} ({}, driver {})",
            i.name,
            i.mac_address,
            i.driver.as_deref().unwrap_or_default()
        );
    }
    usb
}

/// `/sys/class/net/*/type` of an InfiniBand port (ARPHRD_INFINIBAND).
const ARPHRD_INFINIBAND: &str = "32";

/// An InfiniBand port's 20-byte address (4 bytes of flags and QPN, the
/// 8-byte subnet prefix, the 8-byte port GUID) → `(mac, client_id)`: the
/// MAC is the GUID's upper and lower three bytes (the middle `03:00` or
/// `ff:fe` dropped, as Mellanox derives it), the client id RFC 4390's
/// `ff:00:00:00:00:00:02:00:00:02:c9:00:` followed by the GUID.
pub fn infiniband(address: &str) -> Option<(String, Option<String>)> {
    let bytes: Vec<&str> = address.trim().split(':').collect();
    let ok = bytes.len() == 20
        && bytes
            .iter()
            .all(|b| b.len() == 2 && b.bytes().all(|c| c.is_ascii_hexdigit()));
    if !ok {
        return None;
    }
    let guid = &bytes[12..20];
    if guid.iter().all(|b| *b == "00") {
        return None;
    }
    let mac = [&guid[..3], &guid[5..]]
        .concat()
        .join(":")
        .to_ascii_lowercase();
    let client_id =
        format!("ff:00:00:00:00:00:02:00:00:02:c9:00:{}", guid.join(":")).to_ascii_lowercase();
    Some((mac, Some(client_id)))
}

/// The PCI address of a NIC's device: the device itself, or its nearest PCI
/// ancestor (virtio NICs sit on a `virtioN` device below the PCI function).
fn pci_address(dev: &Path) -> Option<String> {
    let canon = std::fs::canonicalize(dev).ok()?;
    canon
        .ancestors()
        .filter_map(|p| p.file_name())
        .map(|n| n.to_string_lossy().into_owned())
        .find(|n| {
            let b = n.as_bytes();
            b.len() == 12 && b[4] == b':' && b[7] == b':' && b[10] == b'.'
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_first_of_each_family() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("ifaddrs");
        std::fs::write(
            &f,
            "eth0 10.0.0.5/24\neth0 10.0.0.6/24\neth0 fe80::1/64\neth1 fd00::2/64\n",
        )
        .unwrap();
        let a = Addresses::from_file(&f);
        assert_eq!(a.first_v4("eth0").as_deref(), Some("10.0.0.5"));
        assert_eq!(a.first_v6("eth0").as_deref(), Some("fe80::1%eth0"));
        assert_eq!(a.first_v6("eth1").as_deref(), Some("fd00::2"));
        assert_eq!(a.first_v4("eth1"), None);
    }

    #[test]
    fn bond_members_are_reported_with_their_own_mac() {
        let root = tempfile::tempdir().unwrap();
        let net = root.path().join("sys/class/net");
        let bond_mac = "52:54:00:3a:11:01\n";
        for (name, perm) in [
            ("bond0", None),
            ("eth0", Some("52:54:00:3a:11:01\n")),
            ("eth1", Some("52:54:00:3a:11:02\n")),
        ] {
            let d = net.join(name);
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join("address"), bond_mac).unwrap();
            match perm {
                Some(perm) => {
                    std::fs::create_dir_all(d.join("device")).unwrap();
                    std::fs::create_dir_all(d.join("bonding_slave")).unwrap();
                    std::fs::write(d.join("bonding_slave/perm_hwaddr"), perm).unwrap();
                }
                None => std::fs::create_dir_all(d.join("bonding")).unwrap(),
            }
        }
        let found: Vec<(String, String)> = read(root.path(), &Addresses::default())
            .into_iter()
            .map(|i| (i.name, i.mac_address))
            .collect();
        assert_eq!(
            found,
            [
                ("bond0".to_string(), "52:54:00:3a:11:01".to_string()),
                ("eth0".to_string(), "52:54:00:3a:11:01".to_string()),
                ("eth1".to_string(), "52:54:00:3a:11:02".to_string()),
            ]
        );
    }

    #[test]
    fn usb_network_devices_are_recognised_by_driver() {
        let root = tempfile::tempdir().unwrap();
        let drivers = root.path().join("sys/bus/drivers");
        for (name, mac, driver) in [
            ("enp1s0", "52:54:00:3a:11:01\n", "e1000e"),
            ("usb0", "52:54:00:3a:11:02\n", "cdc_ether"),
            ("usb1", "52:54:00:3a:11:03\n", "cdc_ncm"),
            ("enx0", "52:54:00:3a:11:04\n", "r8152"),
        ] {
            let d = root.path().join("sys/class/net").join(name);
            std::fs::create_dir_all(d.join("device")).unwrap();
            std::fs::write(d.join("address"), mac).unwrap();
            std::fs::create_dir_all(drivers.join(driver)).unwrap();
            std::os::unix::fs::symlink(drivers.join(driver), d.join("device/driver")).unwrap();
        }
        let kept: Vec<String> = read(root.path(), &Addresses::default())
            .into_iter()
            .filter(|i| !is_usb_network_device(i))
            .map(|i| i.name)
            .collect();
        assert_eq!(kept, ["enp1s0", "enx0"]);
    }

    #[test]
    fn infiniband_ports_get_the_guid_mac_and_a_client_id() {
        let root = tempfile::tempdir().unwrap();
        let ib = root.path().join("sys/class/net/ib0");
        std::fs::create_dir_all(ib.join("device")).unwrap();
        std::fs::write(
            ib.join("address"),
            "a0:00:02:20:fe:80:00:00:00:00:00:00:7c:fe:90:03:00:29:26:52\n",
        )
        .unwrap();
        std::fs::write(ib.join("type"), "32\n").unwrap();
        // An IPoIB child without a GUID is left out, not reported broken.
        let bad = root.path().join("sys/class/net/ib1");
        std::fs::create_dir_all(bad.join("device")).unwrap();
        std::fs::write(
            bad.join("address"),
            "00:00:00:00:00:00:00:00:00:00:00:00:00:00:00:00:00:00:00:00\n",
        )
        .unwrap();
        std::fs::write(bad.join("type"), "32\n").unwrap();
        let found = read(root.path(), &Addresses::default());
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].mac_address, "7c:fe:90:29:26:52");
        assert_eq!(
            found[0].client_id.as_deref(),
            Some("ff:00:00:00:00:00:02:00:00:02:c9:00:7c:fe:90:03:00:29:26:52")
        );
        assert_eq!(infiniband("7c:fe:90:29:26:52"), None);
        assert_eq!(
            infiniband("zz:00:02:20:fe:80:00:00:00:00:00:00:7c:fe:90:03:00:29:26:52"),
            None
        );
    }

    #[test]
    fn live_addresses_include_loopback() {
        let a = Addresses::live();
        assert_eq!(a.first_v4("lo").as_deref(), Some("127.0.0.1"));
    }
}
