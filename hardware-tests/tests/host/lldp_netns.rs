//! LLDP listening over veth pairs in a network namespace this test creates:
//! a raw socket on one end plays the switch, the agent's listener runs on
//! the other ends. Needs root (namespaces, raw sockets).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use agent_devices::lldp::listen::{listen, Heard};
use agent_devices::lldp::socket::PacketSocket;
use agent_devices::lldp::tlv::{self, build_frame, switch_tlvs, ETHERTYPE};
use hardware_tests::netns::NetNs;

const CHASSIS: [u8; 6] = [0x52, 0x54, 0x00, 0x5e, 0x1f, 0x01];

/// Sends, on `ifname`, a malformed LLDP frame 300 ms after the start (so
/// the listener is up), then a valid one (unless `port` is empty: more
/// malformed ones) every 100 ms until `stop`, from a thread. Must be called
/// inside the namespace.
fn switch(ifname: &str, port: &str, stop: Arc<AtomicBool>) -> thread::JoinHandle<usize> {
    let idx = nix::net::if_::if_nametoindex(ifname).expect("sender interface");
    let sock = PacketSocket::open(idx, ETHERTYPE).expect("sender socket");
    let good = build_frame(CHASSIS, &switch_tlvs(CHASSIS, port, "leaf-1"));
    // Same header, then a TLV that claims 511 bytes.
    let mut bad = good[..14].to_vec();
    bad.extend_from_slice(&[0x03, 0xff, 0, 1]);
    bad.resize(60, 0);
    let frame = if port.is_empty() { bad.clone() } else { good };
    thread::spawn(move || {
        let mut sent = 0;
        thread::sleep(Duration::from_millis(300));
        sock.send(&bad).expect("sending a malformed frame");
        thread::sleep(Duration::from_millis(100));
        while !stop.load(Ordering::Relaxed) {
            sock.send(&frame).expect("sending a frame");
            sent += 1;
            thread::sleep(Duration::from_millis(100));
        }
        sent
    })
}

fn listen_in(
    ns: &NetNs,
    ifaces: &[&str],
    timeout: Duration,
    send_on: &[(&str, &str)],
) -> (BTreeMap<String, Heard>, Duration) {
    ns.enter(|| {
        let stop = Arc::new(AtomicBool::new(false));
        let senders: Vec<_> = send_on
            .iter()
            .map(|(i, port)| switch(i, port, stop.clone()))
            .collect();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let names: Vec<String> = ifaces.iter().map(|s| s.to_string()).collect();
        let start = Instant::now();
        let heard = rt.block_on(listen(&names, timeout));
        let elapsed = start.elapsed();
        stop.store(true, Ordering::Relaxed);
        for s in senders {
            assert!(s.join().unwrap() > 0);
        }
        (heard, elapsed)
    })
    .unwrap()
}

#[test]
fn each_nic_ends_at_its_first_frame_and_all_at_one_deadline() {
    hardware_tests::require_root("the LLDP namespace test");
    let ns = NetNs::new("agent-lldp").unwrap();
    ns.veth("srv0", "sw0").unwrap();
    ns.veth("srv1", "sw1").unwrap();
    ns.veth("srv2", "sw2").unwrap();
    ns.veth("srv3", "sw3").unwrap();

    // srv0 and srv1 hear a switch (after one malformed frame), srv2 only
    // malformed frames, srv3 nothing; nope0 does not exist.
    let timeout = Duration::from_secs(2);
    let (heard, elapsed) = listen_in(
        &ns,
        &["srv0", "srv1", "srv2", "srv3", "nope0"],
        timeout,
        &[("sw0", "Ethernet1/1"), ("sw1", "Ethernet1/2"), ("sw2", "")],
    );
    println!("listened {elapsed:?}: {heard:?}");
    assert!(
        elapsed >= timeout && elapsed < timeout + Duration::from_millis(800),
        "{elapsed:?}"
    );
    for (nic, port) in [("srv0", "Ethernet1/1"), ("srv1", "Ethernet1/2")] {
        let Heard::Frame(f) = &heard[nic] else {
            panic!("{nic}: {:?}", heard[nic])
        };
        let n = tlv::parse_neighbor(f);
        assert_eq!(n.port_id.as_deref(), Some(port));
        assert_eq!(n.chassis_id.as_deref(), Some("52:54:00:5e:1f:01"));
        assert_eq!(n.system_name.as_deref(), Some("leaf-1"));
        assert_eq!(n.mtu, Some(9216));
        let raw = tlv::raw_form(f);
        assert_eq!(raw[0], (1, "045254005e1f01".to_string()));
    }
    assert!(
        matches!(heard["srv2"], Heard::Nothing { malformed } if malformed >= 5),
        "{:?}",
        heard["srv2"]
    );
    assert_eq!(heard["srv3"], Heard::Nothing { malformed: 0 });
    assert!(matches!(&heard["nope0"], Heard::Failed(e) if e.contains("no interface")));
}

#[test]
fn listening_ends_early_when_every_nic_has_heard_a_frame() {
    hardware_tests::require_root("the LLDP namespace test");
    let ns = NetNs::new("agent-lldp").unwrap();
    ns.veth("srv0", "sw0").unwrap();
    ns.veth("srv1", "sw1").unwrap();
    let (heard, elapsed) = listen_in(
        &ns,
        &["srv0", "srv1"],
        Duration::from_secs(20),
        &[("sw0", "xe-0/0/1"), ("sw1", "xe-0/0/2")],
    );
    assert!(elapsed < Duration::from_secs(3), "took {elapsed:?}");
    assert!(
        heard.values().all(|h| matches!(h, Heard::Frame(_))),
        "{heard:?}"
    );
    let data = agent_devices::lldp::from_heard(&heard);
    assert_eq!(data.parsed["srv1"].port_id.as_deref(), Some("xe-0/0/2"));
    assert_eq!(data.raw["srv0"].last(), Some(&(0, String::new())));
}

/// A real LLDP sender on the 802.1AB timer: Debian's lldpd (unpacked, not
/// installed: `debs::Lldpd`) sends on one end of a veth pair every 30 s.
/// After its first frame the next comes only on that timer (30.03 s
/// later here): a 5 s wait begun right after the first frame (this agent's
/// default before issue 49) hears nothing; the default wait (IPA's 30 s),
/// begun where that one ended, hears the timer's frame 25 s into it,
/// parsed as lldpd sent it. A sender's phase is anyone's: only a wait
/// begun within the last few tens of milliseconds before a tick misses it,
/// as IPA's does.
#[test]
fn a_real_lldpd_on_its_30_s_timer_is_heard_within_the_default_wait() {
    hardware_tests::require_root("the LLDP namespace test");
    assert_eq!(
        agent_devices::lldp::DEFAULT_TIMEOUT,
        Duration::from_secs(30)
    );
    let ns = NetNs::new("agent-lldp").unwrap();
    // No IPv6 on the pair: an address lldpd sees appear makes it send at
    // once, off its timer.
    ns.enter(|| {
        std::fs::write("/proc/sys/net/ipv6/conf/default/disable_ipv6", "1").unwrap();
        std::fs::write("/proc/sys/net/ipv6/conf/all/disable_ipv6", "1").unwrap();
    })
    .unwrap();
    ns.veth("srv0", "sw0").unwrap();
    let lldpd = hardware_tests::debs::Lldpd::start(&ns.name, "sw0", "leaf-30s").unwrap();
    let names = vec!["srv0".to_string()];
    let (first, quiet, timer) = ns
        .enter(|| {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            let first = rt.block_on(listen(&names, Duration::from_secs(20)));
            let t0 = Instant::now();
            let quiet = rt.block_on(listen(&names, Duration::from_secs(5)));
            let t1 = Instant::now();
            let timer = rt.block_on(listen(&names, agent_devices::lldp::DEFAULT_TIMEOUT));
            (first, quiet, (timer, t0.elapsed(), t1.elapsed()))
        })
        .unwrap();
    let log = lldpd.log();
    let Heard::Frame(f) = &first["srv0"] else {
        panic!("lldpd's first frame never came: {first:?}; its log:\n{log}")
    };
    assert_eq!(
        tlv::parse_neighbor(f).system_description.as_deref(),
        Some("leaf-30s")
    );
    assert_eq!(
        quiet["srv0"],
        Heard::Nothing { malformed: 0 },
        "lldpd sent again within 5 s of its first frame: not its 30 s timer; log:\n{log}"
    );
    let (timer, after, into_wait) = timer;
    let Heard::Frame(f) = &timer["srv0"] else {
        panic!("nothing within the default wait: {timer:?}; lldpd's log:\n{log}")
    };
    println!(
        "lldpd's timer frame came {after:?} after its first, {into_wait:?} into the default wait"
    );
    assert!(
        after > Duration::from_secs(25),
        "{after:?}: not the timer's"
    );
    let n = tlv::parse_neighbor(f);
    assert_eq!(n.system_description.as_deref(), Some("leaf-30s"));
    assert_eq!(n.ttl, Some(120), "{n:?}");
    println!("{n:?}");
}
