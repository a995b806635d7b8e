//! Real Ironic 39.0.0 (unmodified, `require_tls = true`) drives the
//! agent's burn-in steps in host mode: servicing an `active` node with
//! `burnin_cpu` and `burnin_memory` (short knobs in `driver_info`) brings
//! it back to `active`, and so does re-imaging it by servicing with
//! `write_image` (the new image in the step's arguments), a manual clean with `burnin_disk` writes and
//! verifies a loop device this test creates, and two nodes paired
//! statically (`agent_burnin_fio_network_config`), or dynamically through
//! a real etcd (`agent_burnin_fio_network_pairing_backend_url`), run
//! `burnin_network` against each other over loopback in both directions. The agent's
//! reports reach Ironic as the steps' results (Ironic logs them).

use std::time::{Duration, Instant};

use agent::testconductor::demo::host_config;
use agent_testkit::image_server::{Fault, ImageServer};
use hardware_tests::ironic::Ironic;
use hardware_tests::loopdev::LoopDevice;
use serde_json::json;

const MIB: u64 = 1 << 20;

/// An 8 MiB GPT disk image with one partition; its sha256.
fn make_image(path: &std::path::Path) -> String {
    hardware_tests::images::sfdisk_image(path, 8 * MIB, "label: gpt\nname=root\n").unwrap();
    hardware_tests::images::sha256_hex(&std::fs::read(path).unwrap())
}

/// The lines of Ironic's log that mention `needle` (for failure messages).
fn lines_with(log: &str, needle: &str) -> String {
    let lines: Vec<&str> = log.lines().filter(|l| l.contains(needle)).collect();
    lines[lines.len().saturating_sub(8)..].join("\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_ironic_services_an_active_node_with_cpu_and_memory_burn_in() {
    hardware_tests::require_root("the real-Ironic servicing test");
    let dir = tempfile::tempdir().unwrap();
    let image = dir.path().join("test.raw");
    let sha = make_image(&image);
    let server = ImageServer::start().unwrap();
    server.route("/images/test.raw", &image, &[], Fault::None);
    let disk = LoopDevice::new(64 * MIB).expect("creating a loop device");

    let ironic = Ironic::start().expect("starting Ironic 39.0.0");
    let mac = "52:54:00:c1:ea:11";
    let uuid = ironic
        .enroll_ready("agent-service", mac, true)
        .await
        .unwrap();
    ironic
        .patch(
            &uuid,
            Ironic::image_patch(
                &server.url("/images/test.raw"),
                &sha,
                Ironic::short_burnin_patch(),
            ),
        )
        .await
        .unwrap();
    let agent = agent::agent::start_detached(host_config(&ironic.url, mac, &disk.path));
    ironic
        .provision(&uuid, json!({"target": "active"}))
        .await
        .unwrap();
    ironic
        .wait_for(&uuid, "active", Duration::from_secs(240))
        .await
        .unwrap_or_else(|e| panic!("deploy: {e:#}"));

    let t = Instant::now();
    ironic
        .provision(
            &uuid,
            json!({"target": "service", "service_steps": [
                {"interface": "deploy", "step": "burnin_cpu", "args": {}},
                {"interface": "deploy", "step": "burnin_memory", "args": {}},
            ]}),
        )
        .await
        .unwrap();
    ironic
        .wait_for_any_target(&uuid, "service wait", Duration::from_secs(60))
        .await
        .unwrap_or_else(|e| panic!("servicing never waited for the agent: {e:#}"));
    let node = ironic
        .wait_for(&uuid, "active", Duration::from_secs(240))
        .await
        .unwrap_or_else(|e| panic!("servicing: {e:#}"));
    let took = t.elapsed();
    println!("service: active again after {:.1} s", took.as_secs_f64());
    assert!(node["last_error"].is_null(), "{}", node["last_error"]);
    assert!(
        took >= Duration::from_secs(6),
        "two 3 s burn-ins ran in {took:?}"
    );
    let log = std::fs::read_to_string(ironic.log_path()).unwrap();
    assert!(
        log.contains("service.get_service_steps"),
        "no get_service_steps call:\n{}",
        lines_with(&log, "service")
    );
    // The agent's reports, as Ironic logged the finished commands.
    assert!(
        log.contains("'service_result': {'rounds_per_second': ")
            && log.contains("'step': 'burnin_cpu'}}, 'command_status': 'SUCCEEDED'"),
        "no burnin_cpu report in Ironic's log:\n{}",
        lines_with(&log, "burnin_cpu")
    );
    assert!(
        log.contains(&format!(
            "'service_result': {{'bytes': {}, 'passes': [",
            32 * MIB
        )),
        "no burnin_memory report of 32 MiB in Ironic's log:\n{}",
        lines_with(&log, "burnin_memory")
    );

    // Re-imaging by servicing: the agent's write_image service step with
    // the new image in its arguments (IPA's image_info shape).
    let image_b = dir.path().join("other.raw");
    hardware_tests::images::sfdisk_image(&image_b, 8 * MIB, "label: gpt\nname=reimaged\n").unwrap();
    let bytes_b = std::fs::read(&image_b).unwrap();
    let sha_b = hardware_tests::images::sha256_hex(&bytes_b);
    server.route("/images/other.raw", &image_b, &[], Fault::None);
    ironic
        .provision(
            &uuid,
            json!({"target": "service", "service_steps": [
                {"interface": "deploy", "step": "write_image", "args": {"image_info": {
                    "id": "other.raw", "urls": [server.url("/images/other.raw")],
                    "disk_format": "raw", "os_hash_algo": "sha256", "os_hash_value": sha_b}}},
            ]}),
        )
        .await
        .unwrap();
    let node = ironic
        .wait_for(&uuid, "active", Duration::from_secs(240))
        .await
        .unwrap_or_else(|e| panic!("servicing with write_image: {e:#}"));
    assert!(node["last_error"].is_null(), "{}", node["last_error"]);
    // The partition entries (LBA 2 on) name the new image's partition;
    // the headers differ from the image's as the backup GPT moved to the
    // end of the larger device.
    let on_disk = std::fs::read(&disk.path).unwrap();
    let utf16 = |s: &str| -> Vec<u8> { s.encode_utf16().flat_map(u16::to_le_bytes).collect() };
    let entries = &on_disk[1024..1024 + 128];
    assert!(
        entries == &bytes_b[1024..1024 + 128]
            && entries
                .windows(16)
                .any(|w| w == utf16("reimaged").as_slice()),
        "the device does not hold the re-imaged disk's partition table"
    );
    let log = std::fs::read_to_string(ironic.log_path()).unwrap();
    assert!(
        log.contains("'step': 'write_image'") && log.contains("service.execute_service_step"),
        "no write_image service step in Ironic's log:\n{}",
        lines_with(&log, "write_image")
    );
    assert!(!agent.is_finished(), "the agent stopped");
    agent.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_ironic_manual_clean_burns_in_a_loop_device() {
    hardware_tests::require_root("the real-Ironic disk burn-in test");
    let disk = LoopDevice::new(32 * MIB).expect("creating a loop device");
    let ironic = Ironic::start().expect("starting Ironic 39.0.0");
    let mac = "52:54:00:c1:ea:12";
    let uuid = ironic
        .enroll_ready("agent-burnin-disk", mac, false)
        .await
        .unwrap();
    ironic
        .patch(
            &uuid,
            json!([{"op": "add", "path": "/driver_info/agent_burnin_fio_disk_loops", "value": 2}]),
        )
        .await
        .unwrap();
    let agent = agent::agent::start_detached(host_config(&ironic.url, mac, &disk.path));
    let t = Instant::now();
    ironic
        .provision(
            &uuid,
            json!({"target": "clean",
                   "clean_steps": [{"interface": "deploy", "step": "burnin_disk", "args": {}}]}),
        )
        .await
        .unwrap();
    let node = ironic
        .wait_for(&uuid, "manageable", Duration::from_secs(240))
        .await
        .unwrap_or_else(|e| panic!("clean with burnin_disk: {e:#}"));
    println!(
        "burnin_disk: manageable again after {:.1} s",
        t.elapsed().as_secs_f64()
    );
    assert!(node["last_error"].is_null(), "{}", node["last_error"]);
    let log = std::fs::read_to_string(ironic.log_path()).unwrap();
    let dev = disk.path.display().to_string();
    let two = 64 * MIB;
    assert!(
        log.contains(&format!(
            "'clean_result': [{{'bytes_verified': {two}, 'bytes_written': {two}, 'device': '{dev}', 'passes': 2, "
        )) && log.contains(&format!("'size': {}", 32 * MIB)),
        "no burnin_disk report of two passes over {dev} in Ironic's log:\n{}",
        lines_with(&log, "burnin_disk")
    );
    let data = std::fs::read(&disk.path).unwrap();
    assert!(
        data.iter().filter(|b| **b == 0).count() < data.len() / 100,
        "the device was not written"
    );
    assert!(!agent.is_finished(), "the agent stopped");
    agent.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_ironic_pairs_two_nodes_for_the_network_burn_in() {
    two_nodes_burn_in_the_network(None).await;
}

/// The same with dynamic pairing through a real etcd (tooz's etcd3
/// gateway layout, `agent_burnin_fio_network_pairing_backend_url`): each
/// agent advertises its own loopback address, which is its member id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_ironic_pairs_two_nodes_through_etcd_for_the_network_burn_in() {
    let etcd = hardware_tests::debs::Etcd::start(23794).unwrap();
    two_nodes_burn_in_the_network(Some(&etcd.tooz_url())).await;
}

/// Two nodes cleaned with `burnin_network`, paired statically (`None`)
/// or through the tooz backend at `backend`.
async fn two_nodes_burn_in_the_network(backend: Option<&str>) {
    hardware_tests::require_root("the real-Ironic network burn-in test");
    let (disk_a, disk_b) = (
        LoopDevice::new(16 * MIB).expect("creating a loop device"),
        LoopDevice::new(16 * MIB).expect("creating a loop device"),
    );
    let ironic = Ironic::start().expect("starting Ironic 39.0.0");
    let nodes = [
        (
            "agent-net-a",
            "52:54:00:c1:ea:14",
            "writer",
            &disk_a,
            [127, 0, 0, 2],
        ),
        (
            "agent-net-b",
            "52:54:00:c1:ea:15",
            "reader",
            &disk_b,
            [127, 0, 0, 3],
        ),
    ];
    let mut uuids = Vec::new();
    let mut agents = Vec::new();
    for (name, mac, role, disk, addr) in nodes {
        let uuid = ironic.enroll_ready(name, mac, false).await.unwrap();
        let pairing = match backend {
            None => json!({"op": "add", "path": "/driver_info/agent_burnin_fio_network_config",
                           "value": {"role": role, "partner": "127.0.0.1"}}),
            Some(url) => json!({"op": "add",
                "path": "/driver_info/agent_burnin_fio_network_pairing_backend_url", "value": url}),
        };
        ironic
            .patch(
                &uuid,
                json!([
                    pairing,
                    {"op": "add", "path": "/driver_info/agent_burnin_fio_network_runtime", "value": 2},
                    {"op": "add", "path": "/driver_info/agent_burnin_fio_network_pairing_timeout", "value": 120},
                ]),
            )
            .await
            .unwrap();
        let mut config = host_config(&ironic.url, mac, &disk.path);
        if backend.is_some() {
            // Distinct member ids, each the address the other connects to.
            config.advertise_host = Some(std::net::IpAddr::from(addr));
            config.listen_host = std::net::IpAddr::from(addr);
        }
        agents.push(agent::agent::start_detached(config));
        uuids.push(uuid);
    }
    let t = Instant::now();
    for uuid in &uuids {
        ironic
            .provision(
                uuid,
                json!({"target": "clean",
                       "clean_steps": [{"interface": "deploy", "step": "burnin_network", "args": {}}]}),
            )
            .await
            .unwrap();
    }
    for uuid in &uuids {
        let node = ironic
            .wait_for(uuid, "manageable", Duration::from_secs(240))
            .await
            .unwrap_or_else(|e| panic!("clean with burnin_network: {e:#}"));
        assert!(node["last_error"].is_null(), "{}", node["last_error"]);
    }
    println!(
        "burnin_network: both nodes manageable again after {:.1} s",
        t.elapsed().as_secs_f64()
    );
    let log = std::fs::read_to_string(ironic.log_path()).unwrap();
    // Each node's report as Ironic logged the finished step: its roles in
    // order and the bytes of each direction.
    let finished: std::collections::BTreeMap<&str, &str> = log
        .lines()
        .filter_map(|l| {
            let node = l.split("clean command status for node ").nth(1)?;
            let node = node.split(' ').next()?;
            Some((node, l.split("'clean_result': {'directions': [").nth(1)?))
        })
        .collect();
    let reports: Vec<(Vec<&str>, Vec<u64>)> = finished
        .values()
        .map(|r| {
            let r = r.split("], 'partner'").next().unwrap_or_default();
            let roles = r
                .split("'role': '")
                .skip(1)
                .filter_map(|x| x.split('\'').next())
                .collect();
            let bytes = r
                .split("{'bytes': ")
                .skip(1)
                .filter_map(|x| x.split(',').next()?.parse().ok())
                .collect();
            (roles, bytes)
        })
        .collect();
    assert_eq!(
        reports.len(),
        2,
        "two burnin_network reports expected:\n{}",
        lines_with(&log, "'directions'")
    );
    let (a, b) = (&reports[0], &reports[1]);
    let mut firsts = [a.0[0], b.0[0]];
    firsts.sort_unstable();
    assert_eq!(firsts, ["reader", "writer"], "{reports:?}");
    assert_ne!(a.0[0], a.0[1], "the roles swap: {reports:?}");
    // What one node sent, the other received, in both directions.
    assert_eq!(a.1, b.1, "{reports:?}");
    assert!(a.1.iter().all(|n| *n > 0), "{reports:?}");
    for a in agents {
        assert!(!a.is_finished(), "an agent stopped");
        a.abort();
    }
}
