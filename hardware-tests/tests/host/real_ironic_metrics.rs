//! Real Ironic 39.0.0 (`require_tls = true`) with `[metrics] agent_backend
//! = statsd` and `[metrics_statsd] agent_statsd_host/port` pointing at a
//! statsd receiver this test runs on loopback: through a manual clean, the
//! agent (host mode, a loop device) sends IPA's command-API timers, named
//! `ironic_python_agent.api.app.<call>` and counted per call.

use std::collections::BTreeMap;
use std::net::UdpSocket;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent::testconductor::demo::host_config;
use hardware_tests::ironic::Ironic;
use hardware_tests::loopdev::LoopDevice;
use serde_json::json;

const MAC: &str = "52:54:00:c1:ea:61";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manual_clean_sends_ipas_statsd_timers() {
    hardware_tests::require_root("the real-Ironic metrics test");
    let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
    rx.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let port = rx.local_addr().unwrap().port();
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let receiver = {
        let (seen, stop) = (seen.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut buf = [0u8; 2048];
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                if let Ok(n) = rx.recv(&mut buf) {
                    let line = String::from_utf8_lossy(&buf[..n]).into_owned();
                    seen.lock().unwrap().push(line);
                }
            }
        })
    };
    let disk = LoopDevice::new(64 << 20).unwrap();
    disk.partition_and_format().unwrap();
    let ironic = Ironic::start_with(&format!(
        "[metrics]\nagent_backend = statsd\n[metrics_statsd]\nagent_statsd_host = 127.0.0.1\nagent_statsd_port = {port}\n"
    ))
    .expect("starting Ironic 39.0.0");
    let uuid = ironic.enroll_ready("metrics", MAC, false).await.unwrap();
    let agent = agent::agent::start_detached(host_config(&ironic.url, MAC, &disk.path));
    ironic
        .manual_clean(
            &uuid,
            json!([{"interface": "deploy", "step": "erase_devices_metadata"}]),
            Duration::from_secs(180),
        )
        .await
        .unwrap_or_else(|e| panic!("{e:#}"));
    agent.abort();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    receiver.join().unwrap();

    let lines = seen.lock().unwrap().clone();
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for l in &lines {
        let (name, rest) = l
            .split_once(':')
            .unwrap_or_else(|| panic!("not statsd: {l:?}"));
        let (value, kind) = rest
            .split_once('|')
            .unwrap_or_else(|| panic!("not statsd: {l:?}"));
        assert_eq!(kind, "ms", "{l}");
        assert!(value.parse::<f64>().is_ok_and(|v| v >= 0.0), "{l}");
        *counts.entry(name.to_string()).or_default() += 1;
    }
    println!("statsd timers received: {counts:?}");
    let count = |call: &str| {
        counts
            .get(&format!("ironic_python_agent.api.app.{call}"))
            .copied()
            .unwrap_or(0)
    };
    // Ironic ran get_clean_steps, execute_clean_step (and more) and polled
    // the command list.
    assert!(count("run_command") >= 2, "{counts:?}");
    assert!(count("list_commands") >= 1, "{counts:?}");
    assert!(
        counts
            .keys()
            .all(|k| k.starts_with("ironic_python_agent.api.app.")),
        "{counts:?}"
    );
}
