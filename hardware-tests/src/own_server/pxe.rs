//! `--boot pxe`: DHCP and TFTP for the operator's server from this
//! machine (dnsmasq), answering the server's MAC only, with the address
//! its `--network-data` gives it; nobody else on the network gets an
//! answer (`dhcp-ignore=tag:!known`, a `static` range). UEFI firmware gets
//! iPXE (`snponly.efi`) over TFTP, and iPXE gets Ironic's `boot.ipxe` from
//! `--http-address`, which boots the agent the node's iPXE config names.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use anyhow::{Context, Result};
use serde_json::Value;

use super::error::Problem;

/// The address the server's MAC is given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// The server's address.
    pub ip: Ipv4Addr,
    /// Its netmask, dotted.
    pub netmask: Ipv4Addr,
    /// The default route's gateway, if `network_data` has one.
    pub router: Option<Ipv4Addr>,
}

/// The IPv4 network of `network_data` on `mac`'s link (a `phy` link with
/// that `ethernet_mac_address`, or a bond or VLAN over it), as a lease.
pub fn lease_for(network_data: Option<&Value>, mac: &str) -> Result<Lease, Problem> {
    let why = |reason: &str| Problem::Flag {
        flag: "--boot pxe".into(),
        reason: format!(
            "{reason}: the demo's DHCP server answers --mac only, with the IPv4 address \
             --network-data gives it, and no other machine on your network"
        ),
    };
    let nd = network_data.ok_or_else(|| why("needs --network-data"))?;
    let links = nd["links"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    let phy = links
        .iter()
        .find(|l| {
            l["ethernet_mac_address"]
                .as_str()
                .is_some_and(|m| m.eq_ignore_ascii_case(mac))
        })
        .and_then(|l| l["id"].as_str())
        .ok_or_else(|| why(&format!("no link in --network-data has MAC {mac}")))?;
    // The link itself, or one built on it (bond_links, vlan_link).
    let on_it = |id: &str| {
        id == phy
            || links.iter().any(|l| {
                l["id"].as_str() == Some(id)
                    && (l["vlan_link"].as_str() == Some(phy)
                        || l["bond_links"]
                            .as_array()
                            .is_some_and(|b| b.iter().any(|x| x.as_str() == Some(phy))))
            })
    };
    let net = nd["networks"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|n| n["type"] == "ipv4" && n["link"].as_str().is_some_and(on_it))
        .ok_or_else(|| {
            why(&format!(
                "no ipv4 network in --network-data on the link of {mac}"
            ))
        })?;
    let addr = net["ip_address"].as_str().unwrap_or_default();
    let (ip, prefix) = match addr.split_once('/') {
        Some((ip, p)) => (ip, p.parse::<u32>().ok()),
        None => (addr, None),
    };
    let ip: Ipv4Addr = ip
        .parse()
        .map_err(|_| why(&format!("ip_address {addr:?} is not an IPv4 address")))?;
    let netmask = match (prefix, net["netmask"].as_str()) {
        (Some(p), _) if p <= 32 => Ipv4Addr::from(u32::MAX.checked_shl(32 - p).unwrap_or(0)),
        (None, Some(m)) => m
            .parse()
            .map_err(|_| why(&format!("netmask {m:?} is not an IPv4 netmask")))?,
        _ => return Err(why(&format!("{addr:?} has no netmask"))),
    };
    let router = net["routes"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|r| r["network"] == "0.0.0.0")
        .and_then(|r| r["gateway"].as_str()?.parse().ok());
    Ok(Lease {
        ip,
        netmask,
        router,
    })
}

/// The interface holding `addr` on this machine (`ip -o -4 addr`).
fn interface_of(addr: Ipv4Addr) -> Result<String> {
    let out = Command::new("ip")
        .args(["-o", "-4", "addr", "show"])
        .output()
        .context("running `ip -o -4 addr show`")?;
    let text = String::from_utf8_lossy(&out.stdout);
    interface_in(&text, addr)
        .with_context(|| format!("no interface of this machine has the address {addr}"))
}

/// `3: br0    inet 10.99.0.1/24 brd …` lines: the interface with `addr`.
fn interface_in(ip_addr_output: &str, addr: Ipv4Addr) -> Option<String> {
    ip_addr_output.lines().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        let i = f.iter().position(|w| *w == "inet")?;
        let a = f.get(i + 1)?.split('/').next()?;
        (a.parse::<Ipv4Addr>().ok()? == addr).then(|| f.get(1).map(|s| s.to_string()))?
    })
}

/// dnsmasq answering one MAC; stopped (by its PID) on drop.
#[derive(Debug)]
pub struct PxeServer {
    child: Child,
    log: PathBuf,
    _tftp: tempfile::TempDir,
}

impl PxeServer {
    /// Starts dnsmasq on the interface of `http_address`: `mac` gets
    /// `lease`, UEFI PXE gets `snponly.efi`, iPXE gets `boot_script`.
    pub fn start(
        http_address: Ipv4Addr,
        mac: &str,
        lease: &Lease,
        boot_script: &str,
        logs: &Path,
    ) -> Result<Self> {
        let iface = interface_of(http_address)?;
        let tftp = tempfile::Builder::new()
            .prefix("own-server-tftp-")
            .tempdir()?;
        std::fs::copy(crate::bed::ipxe_efi()?, tftp.path().join("snponly.efi"))
            .context("copying Debian's snponly.efi into the TFTP root")?;
        let log = logs.join("dnsmasq.log");
        let _ = std::fs::remove_file(&log);
        let mut cmd = Command::new("dnsmasq");
        cmd.args([
            "--keep-in-foreground",
            "--conf-file=/dev/null",
            "--no-resolv",
            "--no-hosts",
            "--port=0",
            "--bind-interfaces",
            "--except-interface=lo",
            "--log-dhcp",
            "--no-ping",
            "--pid-file=",
            "--dhcp-ignore=tag:!known",
            "--dhcp-match=set:ipxe,175",
            "--dhcp-match=set:efi64,option:client-arch,7",
            "--dhcp-match=set:efi64,option:client-arch,9",
            "--enable-tftp",
        ])
        .arg(format!("--interface={iface}"))
        .arg(format!("--log-facility={}", log.display()))
        .arg(format!(
            "--dhcp-range={},static,{},1h",
            lease.ip, lease.netmask
        ))
        .arg(format!("--dhcp-host={mac},{}", lease.ip))
        .arg(format!("--dhcp-boot=tag:ipxe,{boot_script}"))
        .arg("--dhcp-boot=tag:efi64,tag:!ipxe,snponly.efi")
        .arg(format!("--tftp-root={}", tftp.path().display()))
        .arg(format!(
            "--dhcp-leasefile={}",
            tftp.path().join("leases").display()
        ));
        if let Some(r) = lease.router {
            cmd.arg(format!("--dhcp-option=option:router,{r}"));
        }
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .context("starting dnsmasq (ci/install-deps installs dnsmasq-base)")?;
        // dnsmasq fails at once when it cannot bind (another DHCP server
        // on this machine, a missing interface).
        std::thread::sleep(std::time::Duration::from_millis(500));
        if let Some(status) = child.try_wait()? {
            let mut err = String::new();
            if let Some(mut e) = child.stderr.take() {
                let _ = std::io::Read::read_to_string(&mut e, &mut err);
            }
            anyhow::bail!(
                "dnsmasq (DHCP and TFTP for --boot pxe on {iface}) exited at once ({status}): {}. \
                 Fix: stop the DHCP or TFTP server already running on this machine, or use \
                 --boot vmedia",
                err.trim()
            );
        }
        Ok(Self {
            child,
            log,
            _tftp: tftp,
        })
    }

    /// Its log (`--log-dhcp`).
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// Whether `mac` asked for an address so far.
    pub fn saw_dhcp(&self, mac: &str) -> bool {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        log.lines()
            .any(|l| l.contains("DHCPDISCOVER") && l.to_lowercase().contains(mac))
    }

    /// Whether `mac` fetched `snponly.efi` over TFTP.
    pub fn sent_ipxe(&self) -> bool {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        log.lines()
            .any(|l| l.contains("sent") && l.contains("snponly.efi"))
    }
}

impl Drop for PxeServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const MAC: &str = "52:54:00:35:00:01";

    fn nd(ip: &str, extra: Value) -> Value {
        let mut net = json!({"id": "lab", "type": "ipv4", "link": "nic0", "ip_address": ip,
            "routes": [{"network": "0.0.0.0", "netmask": "0.0.0.0", "gateway": "10.99.0.1"}]});
        if let (Some(n), Some(e)) = (net.as_object_mut(), extra.as_object()) {
            n.extend(e.clone());
        }
        json!({"links": [{"id": "nic0", "type": "phy", "ethernet_mac_address": "52:54:00:35:00:01"}],
               "networks": [net]})
    }

    #[test]
    fn the_lease_is_the_macs_ipv4_network() {
        let l = lease_for(
            Some(&nd("10.99.0.61", json!({"netmask": "255.255.255.0"}))),
            MAC,
        )
        .unwrap();
        assert_eq!(l.ip, Ipv4Addr::new(10, 99, 0, 61));
        assert_eq!(l.netmask, Ipv4Addr::new(255, 255, 255, 0));
        assert_eq!(l.router, Some(Ipv4Addr::new(10, 99, 0, 1)));
        let l = lease_for(Some(&nd("10.99.0.61/20", json!({}))), MAC).unwrap();
        assert_eq!(l.netmask, Ipv4Addr::new(255, 255, 240, 0));
    }

    #[test]
    fn a_bond_over_the_mac_counts_and_a_missing_address_is_refused_by_name() {
        let bonded = json!({
            "links": [{"id": "nic0", "type": "phy", "ethernet_mac_address": MAC},
                      {"id": "bond0", "type": "bond", "bond_links": ["nic0"]}],
            "networks": [{"type": "ipv4", "link": "bond0", "ip_address": "10.0.0.5", "netmask": "255.0.0.0"}]
        });
        let l = lease_for(Some(&bonded), MAC).unwrap();
        assert_eq!((l.ip, l.router), (Ipv4Addr::new(10, 0, 0, 5), None));
        let e = lease_for(None, MAC).unwrap_err().to_string();
        assert!(e.starts_with("--boot pxe: needs --network-data"), "{e}");
        let e = lease_for(Some(&nd("10.99.0.61", json!({}))), "52:54:00:00:00:09")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("no link in --network-data has MAC 52:54:00:00:00:09"),
            "{e}"
        );
        let e = lease_for(Some(&nd("fd00::5", json!({"netmask": "x"}))), MAC)
            .unwrap_err()
            .to_string();
        assert!(e.contains("\"fd00::5\" is not an IPv4 address"), "{e}");
        let e = lease_for(Some(&nd("10.1.1.1", json!({}))), MAC)
            .unwrap_err()
            .to_string();
        assert!(e.contains("has no netmask"), "{e}");
    }

    #[test]
    fn the_interface_is_found_by_its_address() {
        let out = "1: lo    inet 127.0.0.1/8 scope host lo\\       valid_lft forever\n\
                   5: br0    inet 10.99.0.1/24 brd 10.99.0.255 scope global br0\\ x\n";
        assert_eq!(
            interface_in(out, Ipv4Addr::new(10, 99, 0, 1)).as_deref(),
            Some("br0")
        );
        assert_eq!(interface_in(out, Ipv4Addr::new(10, 99, 0, 2)), None);
        assert_eq!(interface_in("garbage", Ipv4Addr::LOCALHOST), None);
    }
}
