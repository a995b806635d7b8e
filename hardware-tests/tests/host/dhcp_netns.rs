//! The ramdisk's DHCPv4 client against dnsmasq, in two network namespaces
//! the test creates joined by a veth pair (dnsmasq in one, the client in
//! the other: in one namespace the kernel would drop the server's replies
//! as martians, their source being a local address). Checks the lease and that the address and default route were
//! applied. dnsmasq is killed by PID and the namespace deleted on drop.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use hardware_tests::netns::NetNs;
use hardware_tests::require_root;

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn dhcp_client_gets_and_applies_a_lease_from_dnsmasq() {
    require_root("the DHCP namespace test");
    let ns = NetNs::new("dhcp").unwrap();
    let server = NetNs::new("dhcpd").unwrap();
    ns.veth("dhs", "dhc").unwrap();
    ns.ip(&["link", "set", "dhs", "netns", &server.name])
        .unwrap();
    server
        .ip(&["addr", "add", "10.78.0.1/24", "dev", "dhs"])
        .unwrap();
    server.ip(&["link", "set", "dhs", "up"]).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let _dnsmasq = Killed(
        Command::new("ip")
            .args([
                "netns",
                "exec",
                &server.name,
                "dnsmasq",
                "--keep-in-foreground",
            ])
            .args([
                "--conf-file=/dev/null",
                "--no-resolv",
                "--no-hosts",
                "--port=0",
            ])
            .args(["--interface=dhs", "--bind-interfaces"])
            .args(["--dhcp-range=10.78.0.100,10.78.0.150,255.255.255.0,1h"])
            .args(["--dhcp-option=option:router,10.78.0.1"])
            .args(["--dhcp-option=option:dns-server,10.78.0.1"])
            .args(["--dhcp-option=option:domain-name,rd.test"])
            .arg(format!(
                "--dhcp-leasefile={}",
                tmp.path().join("leases").display()
            ))
            .arg("--pid-file=")
            .stdout(Stdio::null())
            .spawn()
            .expect("dnsmasq (ci/install-deps installs dnsmasq-base)"),
    );
    let mac = ns.ip(&["-br", "link", "show", "dhc"]).unwrap();
    let mac = mac.split_whitespace().nth(2).unwrap().to_string();
    let lease = ns
        .enter(|| agent_devices::netconf::configure("dhc", &mac, Duration::from_secs(15), true))
        .unwrap()
        .unwrap();
    let last = lease.addr.octets()[3];
    assert!((100..=150).contains(&last), "{lease:?}");
    assert_eq!(lease.prefix, 24);
    assert_eq!(lease.router, Some("10.78.0.1".parse().unwrap()));
    assert_eq!(
        lease.dns,
        vec!["10.78.0.1".parse::<std::net::Ipv4Addr>().unwrap()]
    );
    assert_eq!(lease.domain.as_deref(), Some("rd.test"));
    let addrs = ns.ip(&["-4", "addr", "show", "dhc"]).unwrap();
    assert!(addrs.contains(&format!("{}/24", lease.addr)), "{addrs}");
    let routes = ns.ip(&["route"]).unwrap();
    assert!(routes.contains("default via 10.78.0.1 dev dhc"), "{routes}");
}
