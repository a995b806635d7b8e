//! Fleet (issue 20, item 3): `FLEET_NODES` agents (default 8; `ci/fleet N`
//! for more), each its own process in host mode with its own loop device
//! and its own address inside a network namespace this test creates, are
//! deployed at once by one real Ironic 39 with the same image from one
//! image server. All must reach `active` with the image on their disk.
//! Reported (and checked where a bound is sound): total time, per-node
//! times, errors and retries in the conductor's and the agents' logs,
//! heartbeat spread (the most heartbeats in any one second, against the
//! number of agents: agents that synchronised would all beat together),
//! and bytes served (each node fetches the image exactly once: no resume,
//! so the server sends N × the image's size).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use agent_testkit::image_server::{Fault, ImageServer};
use hardware_tests::agentproc::AgentProcess;
use hardware_tests::images;
use hardware_tests::ironic::Ironic;
use hardware_tests::loopdev::LoopDevice;
use hardware_tests::netns::NetNs;
use serde_json::json;

const MIB: u64 = 1 << 20;
const IMAGE: u64 = 32 * MIB;
const RANDOM: std::ops::Range<usize> = (2 * MIB) as usize..(10 * MIB) as usize;
const IRONIC_IP: &str = "10.201.0.1";
const IRONIC_PORT: u16 = 6385;
const IMAGES: &str = "10.201.0.1:8080";

fn nodes() -> usize {
    std::env::var("FLEET_NODES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(8)
}

fn agent_ip(i: usize) -> String {
    format!("10.201.{}.{}", 1 + i / 200, 10 + i % 200)
}

fn mac(i: usize) -> String {
    format!("52:54:00:f1:{:02x}:{:02x}", i / 256, i % 256)
}

fn make_image(path: &Path) -> (Vec<u8>, String) {
    images::sfdisk_image(path, IMAGE, "label: gpt\nname=root\n").unwrap();
    let mut img = std::fs::read(path).unwrap();
    let mut rng = fastrand::Rng::with_seed(40);
    for b in &mut img[RANDOM] {
        *b = rng.u8(..);
    }
    std::fs::write(path, &img).unwrap();
    let hex = images::sha256_hex(&img);
    (img, hex)
}

/// Seconds since midnight UTC of a log line that starts with an RFC 3339
/// time (`2026-11-25T01:02:03.456789Z`), as the agent's logs do.
fn line_time(line: &str) -> Option<f64> {
    let t = line.get(11..)?.split(['Z', ' ', '+']).next()?;
    let mut parts = t.split(':');
    let h: f64 = parts.next()?.parse().ok()?;
    let m: f64 = parts.next()?.parse().ok()?;
    let s: f64 = parts.next()?.parse().ok()?;
    Some(h * 3600.0 + m * 60.0 + s)
}

/// `text` without ANSI colour sequences (`ESC [ … m`).
fn plain(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for d in chars.by_ref() {
                if d.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The most events of `times` (seconds) inside any window of `width` seconds.
fn densest(times: &[f64], width: f64) -> usize {
    let mut t = times.to_vec();
    t.sort_by(f64::total_cmp);
    let mut best = 0;
    let mut lo = 0;
    for hi in 0..t.len() {
        while t[hi] - t[lo] > width {
            lo += 1;
        }
        best = best.max(hi - lo + 1);
    }
    best
}

#[test]
fn densest_window_counts_events_within_the_width() {
    assert_eq!(densest(&[0.0, 0.1, 0.5, 3.0, 3.2], 1.0), 3);
    assert_eq!(densest(&[5.0, 1.0, 2.5], 1.0), 1);
    assert_eq!(densest(&[], 1.0), 0);
    assert_eq!(
        plain("\u{1b}[2m2026\u{1b}[0m \u{1b}[33m WARN\u{1b}[0m x"),
        "2026  WARN x"
    );
    assert_eq!(
        line_time("2026-11-25T01:02:03.500000Z  INFO agent::agent: first heartbeat accepted"),
        Some(3723.5)
    );
}

#[test]
fn a_fleet_deploys_at_once_from_one_image_server() {
    hardware_tests::require_root("the fleet test");
    let n = nodes();
    assert!((1..=400).contains(&n), "FLEET_NODES {n}: 1 to 400");
    let ns = NetNs::new("fleet").unwrap();
    // Every address on the namespace's loopback (this kernel has no dummy
    // links): the conductor and image server on one, each agent on its own.
    ns.ip(&["addr", "add", &format!("{IRONIC_IP}/32"), "dev", "lo"])
        .unwrap();
    for i in 0..n {
        ns.ip(&["addr", "add", &format!("{}/32", agent_ip(i)), "dev", "lo"])
            .unwrap();
    }
    let dir = tempfile::tempdir().unwrap();
    let image_path = dir.path().join("fleet.raw");
    let (img, sha) = make_image(&image_path);
    let disks: Vec<LoopDevice> = (0..n)
        .map(|_| LoopDevice::new(64 * MIB).expect("creating a loop device"))
        .collect();
    let ironic = Ironic::start_in(&ns, IRONIC_IP, IRONIC_PORT, None).expect("starting Ironic");

    let report = ns
        .enter(|| {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(fleet(
                n,
                &ns,
                &ironic,
                dir.path(),
                &image_path,
                &img,
                &sha,
                &disks,
            ))
        })
        .unwrap();
    println!("{report}");
}

#[allow(clippy::too_many_arguments)]
async fn fleet(
    n: usize,
    ns: &NetNs,
    ironic: &Ironic,
    dir: &Path,
    image_path: &Path,
    img: &[u8],
    sha: &str,
    disks: &[LoopDevice],
) -> String {
    let server = ImageServer::start_on(IMAGES.parse().unwrap()).unwrap();
    server.route("/fleet.raw", image_path, &[], Fault::None);
    let image_url = server.url("/fleet.raw");

    let t = Instant::now();
    let mut uuids = Vec::new();
    for i in 0..n {
        let uuid = ironic
            .enroll_ready(&format!("fleet-{i}"), &mac(i), true)
            .await
            .unwrap();
        ironic
            .patch(
                &uuid,
                Ironic::image_patch(
                    &image_url,
                    sha,
                    json!([{"op": "add", "path": "/instance_info/image_disk_format", "value": "raw"}]),
                ),
            )
            .await
            .unwrap();
        uuids.push(uuid);
    }
    println!(
        "fleet: {n} nodes enrolled in {:.1} s",
        t.elapsed().as_secs_f64()
    );

    let mut agents = Vec::new();
    for (i, disk) in disks.iter().enumerate() {
        let args: Vec<String> = [
            "--api-url",
            &format!("http://{IRONIC_IP}:{IRONIC_PORT}"),
            "--mac",
            &mac(i),
            "--advertise-host",
            &agent_ip(i),
            "--listen-host",
            &agent_ip(i),
            "--listen-port",
            "9999",
            "--advertise-port",
            "9999",
            "--allow-device",
            disk.path.to_str().unwrap(),
            "--lookup-timeout",
            "0",
            "--lookup-max-interval",
            "2",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        agents.push(
            AgentProcess::serve_env(
                &args,
                &dir.join(format!("agent-{i}.log")),
                Some(&ns.name),
                &[("RUST_LOG", "info,agent::agent=debug"), ("NO_COLOR", "1")],
            )
            .unwrap(),
        );
    }

    let t0 = Instant::now();
    for uuid in &uuids {
        ironic
            .provision(uuid, json!({"target": "active"}))
            .await
            .unwrap();
    }
    let mut done: BTreeMap<usize, f64> = BTreeMap::new();
    let deadline = Duration::from_secs(120 + 15 * n as u64);
    while done.len() < n {
        for (i, uuid) in uuids.iter().enumerate() {
            if done.contains_key(&i) {
                continue;
            }
            let node = ironic.node(uuid).await.unwrap();
            let state = node["provision_state"].as_str().unwrap_or_default();
            if state == "active" {
                done.insert(i, t0.elapsed().as_secs_f64());
            } else if state.ends_with("failed") {
                panic!(
                    "node {i} {state}: {}\nagent log:\n{}",
                    node["last_error"],
                    agents[i].log()
                );
            }
        }
        assert!(
            t0.elapsed() < deadline,
            "{} of {n} active after {deadline:?}; Ironic log {}",
            done.len(),
            ironic.log_path().display()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let total = t0.elapsed().as_secs_f64();

    // Every disk holds the image.
    for (i, d) in disks.iter().enumerate() {
        use std::io::Read;
        let mut buf = vec![0u8; IMAGE as usize];
        std::fs::File::open(&d.path)
            .unwrap()
            .read_exact(&mut buf)
            .unwrap();
        assert!(
            buf[RANDOM] == img[RANDOM],
            "node {i}: the disk does not hold the image"
        );
    }
    for (i, a) in agents.iter_mut().enumerate() {
        assert!(a.running(), "agent {i} exited:\n{}", a.log());
    }

    // Bytes served: each node fetched the image once, whole.
    let seen = server.seen();
    let gets = seen.iter().filter(|s| s.path == "/fleet.raw").count();
    let ranged = seen.iter().filter(|s| s.range.is_some()).count();
    let bytes = server.bytes_sent();
    assert_eq!(
        bytes,
        n as u64 * IMAGE,
        "the server sent {bytes} bytes for {n} nodes of {IMAGE}; {gets} requests, {ranged} with Range"
    );
    assert_eq!(ranged, 0, "resumes without a fault: {seen:?}");

    // Errors and retries.
    let logs: Vec<String> = agents.iter().map(|a| plain(&a.log())).collect();
    let mut kinds: BTreeMap<String, usize> = BTreeMap::new();
    for l in logs.iter().flat_map(|l| l.lines()) {
        if let Some(at) = l.find(" WARN ").or_else(|| l.find(" ERROR ")) {
            // The message's first words name the kind; words with digits
            // (node UUIDs, URLs with MACs) are elided.
            let kind: String = l[at..]
                .split_whitespace()
                .take(5)
                .map(|w| {
                    if w.chars().any(|c| c.is_ascii_digit()) {
                        "…"
                    } else {
                        w
                    }
                })
                .collect::<Vec<_>>()
                .join(" ");
            *kinds.entry(kind).or_default() += 1;
        }
    }
    let agent_warn: usize = kinds.values().sum();
    let agent_retries: usize = logs
        .iter()
        .map(|l| {
            l.lines()
                .filter(|l| l.contains("retry") || l.contains("resum") || l.contains("failed"))
                .count()
        })
        .sum();
    let ironic_log = std::fs::read_to_string(ironic.log_path()).unwrap_or_default();
    // Host-mode agents look their node up again after the deploy (as after
    // a reboot); Ironic logs each refused lookup of an `active` node as an
    // ERROR. Those are expected; any other ERROR is not.
    let level = |l: &str| l.split_whitespace().nth(3).unwrap_or_default().to_string();
    let lookups_refused = ironic_log
        .lines()
        .filter(|l| level(l) == "ERROR" && l.contains("Lookup is not allowed"))
        .count();
    let ironic_errors: Vec<&str> = ironic_log
        .lines()
        .filter(|l| level(l) == "ERROR" && !l.contains("Lookup is not allowed"))
        .collect();
    let ironic_warnings = ironic_log.lines().filter(|l| level(l) == "WARNING").count();

    // Heartbeat spread: all of them, and each agent's first (which follows
    // its first successful lookup, so agents that did not jitter their
    // lookups would all beat within milliseconds of each other).
    let mut beats = Vec::new();
    let mut firsts = Vec::new();
    for l in &logs {
        let times: Vec<f64> = l
            .lines()
            .filter(|l| l.contains("heartbeat accepted"))
            .filter_map(line_time)
            .collect();
        if let Some(f) = times.first() {
            firsts.push(*f);
        }
        beats.extend(times);
    }
    assert_eq!(firsts.len(), n, "agents without a heartbeat");
    let burst = densest(&beats, 1.0);
    let first_spread = firsts.iter().copied().fold(f64::MIN, f64::max)
        - firsts.iter().copied().fold(f64::MAX, f64::min);
    let times: Vec<f64> = done.values().copied().collect();
    let first = times.iter().copied().fold(f64::MAX, f64::min);
    let report = format!(
        "fleet: {n} agents active in {total:.1} s (first {first:.1} s, last {total:.1} s); \
         image server: {gets} requests (GET and Ironic's HEAD), {ranged} ranged, {bytes} body bytes = {n} × {IMAGE}; \
         agents: {agent_warn} warning/error lines, {agent_retries} retry/failure lines; \
         Ironic: {} ERROR lines besides {lookups_refused} refused lookups of active nodes, {ironic_warnings} WARNING lines; \
         heartbeats: {} accepted, at most {burst} in any 1 s window, first heartbeats spread over {first_spread:.2} s; \
         agents' warnings by kind: {kinds:?}",
        ironic_errors.len(),
        beats.len()
    );
    if n >= 8 {
        assert!(
            first_spread > 0.2,
            "the agents' first heartbeats came within {first_spread:.3} s: {report}"
        );
    }
    assert!(
        ironic_errors.is_empty(),
        "Ironic logged errors: {report}\n{}",
        ironic_errors
            .iter()
            .take(5)
            .copied()
            .collect::<Vec<_>>()
            .join("\n")
    );
    report
}
