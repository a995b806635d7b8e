//! mDNS discovery (PROTOCOL.md §3.2) in a network namespace the test creates: an
//! announcer (mdns-sd, as Ironic's zeroconf would) registers
//! `baremetal._openstack._tcp.local.` on one end of a veth pair, and the
//! agent's browser finds it and builds the URL from the TXT `protocol` and
//! `path`, and takes the `ipa_` TXT properties as configuration overrides
//! (IPA 13's default allowed list: `ntp_server` applies, `debug` does not).
//! No packet leaves the namespace; it is deleted on drop.

use std::collections::HashMap;
use std::time::Duration;

use hardware_tests::netns::NetNs;
use hardware_tests::require_root;

#[test]
fn agent_finds_the_conductor_by_mdns_in_a_namespace() {
    require_root("the mDNS namespace test");
    let ns = NetNs::new("mdns").unwrap();
    ns.veth("mda", "mdb").unwrap();
    ns.ip(&["addr", "add", "10.77.0.1/24", "dev", "mda"])
        .unwrap();
    ns.ip(&["addr", "add", "10.77.0.2/24", "dev", "mdb"])
        .unwrap();
    let found = ns
        .enter(|| {
            let announcer = mdns_sd::ServiceDaemon::new().unwrap();
            let props: HashMap<String, String> = [
                ("protocol", "http"),
                ("path", "/baremetal"),
                ("ipa_ntp_server", "10.77.0.1"),
                ("ipa_debug", "1"),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
            let info = mdns_sd::ServiceInfo::new(
                agent_base::discovery::SERVICE_TYPE,
                "baremetal",
                "conductor.local.",
                "10.77.0.1",
                6385,
                props,
            )
            .unwrap();
            announcer.register(info).unwrap();
            let r = agent_base::discovery::find_blocking("baremetal", Duration::from_secs(20), &[]);
            let _ = announcer.shutdown();
            r
        })
        .unwrap();
    let found = found.unwrap();
    assert_eq!(found.url, "http://10.77.0.1:6385/baremetal");
    let mut config = agent_base::config::Config::default();
    let notes = config.apply_mdns_overrides(&found.overrides);
    assert_eq!(config.ntp_server.as_deref(), Some("10.77.0.1"), "{notes:?}");
    assert!(!config.debug, "ipa_debug must not apply: {notes:?}");
}

/// `[mdns] interfaces` as IPA reads it: the browse uses only the
/// interfaces with the given addresses. In a namespace with two veth
/// pairs, the announcer answers over the first (both ends addressed) and
/// nothing answers over the second (its far end has no address): the
/// conductor is found through the first pair's address and not through
/// the second's, where an unrestricted browse would have found it.
#[test]
fn mdns_interfaces_restrict_the_browse() {
    require_root("the mDNS namespace test");
    let ns = NetNs::new("mdnsif").unwrap();
    ns.veth("mia", "mib").unwrap();
    ns.ip(&["addr", "add", "10.78.0.1/24", "dev", "mia"])
        .unwrap();
    ns.ip(&["addr", "add", "10.78.0.2/24", "dev", "mib"])
        .unwrap();
    // A second pair whose far end has no address: no answer comes back.
    ns.veth("miy", "miz").unwrap();
    ns.ip(&["addr", "add", "10.79.0.1/24", "dev", "miy"])
        .unwrap();
    let (through_veth, through_other) = ns
        .enter(|| {
            let announcer = mdns_sd::ServiceDaemon::new().unwrap();
            let info = mdns_sd::ServiceInfo::new(
                agent_base::discovery::SERVICE_TYPE,
                "baremetal",
                "conductor.local.",
                "10.78.0.1",
                6385,
                HashMap::<String, String>::new(),
            )
            .unwrap();
            announcer.register(info).unwrap();
            let other: std::net::IpAddr = "10.79.0.1".parse().unwrap();
            let veth: std::net::IpAddr = "10.78.0.2".parse().unwrap();
            let d =
                agent_base::discovery::find_blocking("baremetal", Duration::from_secs(6), &[other]);
            let v =
                agent_base::discovery::find_blocking("baremetal", Duration::from_secs(20), &[veth]);
            let _ = announcer.shutdown();
            (v, d)
        })
        .unwrap();
    assert_eq!(
        through_veth.expect("found through the veth").url,
        "https://10.78.0.1:6385"
    );
    let e = through_other.expect_err("nothing answers on the second pair");
    assert!(e.to_string().contains("no baremetal"), "{e:#}");
}
