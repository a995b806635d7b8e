//! The network burn-in's dynamic pairing (IPA's
//! `agent_burnin_fio_network_pairing_backend_url`) through a real etcd
//! (Debian's, on loopback) with tooz's etcd3 gateway layout:
//!
//! * our agent pairs with **IPA 13.0.0's own pairing function**
//!   (`burnin._find_network_burnin_partner_and_role`, through tooz, from
//!   the pinned venv of `ci/ipa/install.sh`; see [`ipa_pairing`] for the
//!   one shim IPA needs on this backend), in both orders: whoever
//!   comes first is the writer, each learns the other's member id;
//! * four of ours pair off two by two, each pair writer + reader, no node
//!   left over, and the group is empty afterwards;
//! * a lone node times out with a precise error and leaves the group.
//!
//! Needs no root: etcd and IPA run as the test's own processes.

use std::process::{Command, Stdio};
use std::time::Duration;

use agent_devices::burnin::network::Role;
use agent_devices::burnin::pairing::find_partner;
use hardware_tests::debs::Etcd;
use hardware_tests::repo_root;

/// IPA's pairing in a child process; prints `partner role`. One shim:
/// IPA passes its member id (the host name) and lock name as `str`, and
/// tooz 9.1's etcd3 gateway driver joins them to `bytes` prefixes
/// (`b'/tooz/locks' + name`): a TypeError, so IPA 13's dynamic pairing
/// cannot run on this backend as released. The shim encodes both; the
/// keys are the ones tooz means.
fn ipa_pairing(url: &str, group: &str) -> std::process::Child {
    let venv = repo_root().join("target/ipa-venv");
    hardware_tests::run(Command::new(repo_root().join("ci/ipa/install.sh")).arg(&venv))
        .expect("installing IPA 13.0.0");
    Command::new(venv.join("bin/python"))
        .args([
            "-c",
            "import sys\n\
             import ironic_python_agent.config\n\
             from ironic_python_agent import burnin\n\
             from tooz import coordination\n\
             from tooz.drivers import etcd3gw\n\
             enc = lambda s: s.encode() if isinstance(s, str) else s\n\
             get_lock = etcd3gw.Etcd3Driver.get_lock\n\
             etcd3gw.Etcd3Driver.get_lock = lambda self, n: get_lock(self, enc(n))\n\
             get_coord = coordination.get_coordinator\n\
             burnin.coordination.get_coordinator = lambda url, m: get_coord(url, enc(m))\n\
             p, r = burnin._find_network_burnin_partner_and_role(\n\
                 backend_url=sys.argv[1], group_name=sys.argv[2], timeout=60)\n\
             print(p, r)\n",
            url,
            group,
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("running IPA's pairing")
}

fn hostname() -> String {
    hardware_tests::run(&mut Command::new("hostname"))
        .unwrap()
        .trim()
        .to_string()
}

fn client() -> reqwest::Client {
    agent_base::tls::http_client(false, None, Duration::from_secs(30)).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn our_agent_pairs_with_ipa_13_through_etcd_in_both_orders() {
    let etcd = Etcd::start(23790).unwrap();
    let url = etcd.tooz_url();
    let ipa_id = hostname();
    for ipa_first in [true, false] {
        let group = format!("ironic.network-burnin-{ipa_first}");
        let ours = "127.0.0.42";
        let (child, mine) = if ipa_first {
            let child = ipa_pairing(&url, &group);
            // IPA imports for a second or two before it joins.
            tokio::time::sleep(Duration::from_secs(4)).await;
            let mine = find_partner(client(), &url, &group, ours, Duration::from_secs(60)).await;
            (child, mine)
        } else {
            let task = tokio::spawn({
                let (url, group) = (url.clone(), group.clone());
                async move { find_partner(client(), &url, &group, ours, Duration::from_secs(60)).await }
            });
            tokio::time::sleep(Duration::from_secs(1)).await;
            let child = ipa_pairing(&url, &group);
            (child, task.await.unwrap())
        };
        let out = tokio::task::block_in_place(|| child.wait_with_output()).unwrap();
        let ipa_said = String::from_utf8_lossy(&out.stdout).trim().to_string();
        assert!(
            out.status.success(),
            "IPA's pairing failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let (partner, role) = mine.unwrap_or_else(|e| panic!("our pairing: {e:#}"));
        assert_eq!(
            partner, ipa_id,
            "we pair with IPA's member id (its host name)"
        );
        let (ipa_role, our_role) = if ipa_first {
            ("writer", Role::Reader)
        } else {
            ("reader", Role::Writer)
        };
        assert_eq!(role, our_role, "IPA first: {ipa_first}");
        assert_eq!(
            ipa_said,
            format!("{ours} {ipa_role}"),
            "IPA first: {ipa_first}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_nodes_pair_off_and_a_lone_one_times_out() {
    let etcd = Etcd::start(23792).unwrap();
    let url = etcd.tooz_url();
    const IDS: [&str; 4] = ["127.0.0.11", "127.0.0.12", "127.0.0.13", "127.0.0.14"];
    let ids = IDS;
    let tasks: Vec<_> = IDS
        .iter()
        .map(|id| {
            let url = url.clone();
            tokio::spawn(async move {
                find_partner(client(), &url, "g4", id, Duration::from_secs(60)).await
            })
        })
        .collect();
    let mut got = Vec::new();
    for (id, t) in ids.iter().zip(tasks) {
        let (partner, role) = t.await.unwrap().unwrap_or_else(|e| panic!("{id}: {e:#}"));
        got.push((id.to_string(), partner, role));
    }
    for (id, partner, role) in &got {
        let (_, back, other) = got
            .iter()
            .find(|(i, _, _)| i == partner)
            .unwrap_or_else(|| panic!("{id} paired with {partner}, no such node: {got:?}"));
        assert_eq!(back, id, "pairs are mutual: {got:?}");
        assert_ne!(role, other, "one writer and one reader per pair: {got:?}");
    }
    // A lone node waits, gives up and leaves nothing behind.
    let t = std::time::Instant::now();
    let e = find_partner(client(), &url, "g4", "127.0.0.15", Duration::from_secs(3))
        .await
        .unwrap_err();
    assert!(
        format!("{e:#}").contains("timed out to find partner"),
        "{e:#}"
    );
    assert!(t.elapsed() < Duration::from_secs(10));
    // The group is empty: the next two pair at once.
    let a = tokio::spawn({
        let url = url.clone();
        async move { find_partner(client(), &url, "g4", "127.0.0.16", Duration::from_secs(30)).await }
    });
    let b = find_partner(client(), &url, "g4", "127.0.0.17", Duration::from_secs(30))
        .await
        .unwrap();
    let a = a.await.unwrap().unwrap();
    assert_eq!((a.0.as_str(), b.0.as_str()), ("127.0.0.17", "127.0.0.16"));
}
