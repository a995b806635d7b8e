//! The conductor unreachable for a while, then back (issue 20, item 1):
//! real Ironic 39 deploys through one agent (its own process, host mode, a
//! loop device); as soon as the agent has started downloading the image,
//! every Ironic process is frozen (SIGSTOP to its process group: its
//! sockets still accept, nothing answers, as a hung or cut-off conductor)
//! for `CONDUCTOR_OUTAGE_SECS` (default 25; the agent's conductor requests
//! time out after 5 s here, so its heartbeats fail meanwhile), then thawed.
//! The agent must recover without a restart: its next heartbeat gets
//! through, the deploy completes `active` with the image on the disk, and
//! the agent is still running and logged the failed heartbeats.
//!
//! The conductor restarted (killed, then started again on the same
//! database and configuration, as after a crash or an upgrade): Ironic 39
//! on start fails the nodes it finds in transient states
//! (`ironic/conductor/base_manager.py`, `_correct_stuck_states`:
//! `deploying`, `cleaning`, … move to their fail state) but keeps the wait
//! states, where the agent is the one to call back. A deploy whose agent is
//! writing the image is in `wait call-back`: after the restart the node
//! must still be there, the agent's next heartbeat must reach the new
//! conductor, and the deploy must complete `active`, byte-identical, with
//! the same agent process.
//!
//! Stopping Ironic (ci/ironic/stop.sh, as every suite's Ironic ends) must
//! end all of it, also a process it forked that left its process group
//! (an Ironic left listening on the API port failed the next demo once).

use std::path::Path;
use std::time::{Duration, Instant};

use agent_testkit::image_server::{Fault, ImageServer};
use hardware_tests::agentproc::AgentProcess;
use hardware_tests::images;
use hardware_tests::ironic::Ironic;
use hardware_tests::loopdev::LoopDevice;
use serde_json::json;

const MAC: &str = "52:54:00:fa:17:02";
const MIB: u64 = 1 << 20;
const IMAGE: u64 = 24 * MIB;

fn make_image(path: &Path) -> (Vec<u8>, String) {
    images::sfdisk_image(path, IMAGE, "label: gpt\nname=root\n").unwrap();
    let mut img = std::fs::read(path).unwrap();
    let mut rng = fastrand::Rng::with_seed(78);
    for b in &mut img[MIB as usize..(IMAGE - MIB) as usize] {
        *b = rng.u8(..);
    }
    std::fs::write(path, &img).unwrap();
    let hex = images::sha256_hex(&img);
    (img, hex)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deploy_completes_after_the_conductor_was_unreachable() {
    hardware_tests::require_root("the conductor outage test");
    let outage = Duration::from_secs(
        std::env::var("CONDUCTOR_OUTAGE_SECS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(25),
    );
    let dir = tempfile::tempdir().unwrap();
    let image_path = dir.path().join("image.raw");
    let (img, sha) = make_image(&image_path);
    let server = ImageServer::start().unwrap();
    server.route_gets("/image.raw", &image_path, &[], Fault::None);
    let disk = LoopDevice::new(64 * MIB).expect("creating a loop device");
    let ironic = Ironic::start().expect("starting Ironic 39.0.0");
    let uuid = ironic.enroll_ready("outage", MAC, true).await.unwrap();
    ironic
        .patch(
            &uuid,
            Ironic::image_patch(
                &server.url("/image.raw"),
                &sha,
                json!([{"op": "add", "path": "/instance_info/image_disk_format", "value": "raw"}]),
            ),
        )
        .await
        .unwrap();
    let cmdline = dir.path().join("cmdline");
    std::fs::write(&cmdline, "ipa-http-request-timeout=5\n").unwrap();
    let args =
        hardware_tests::agentproc::loopback_args(&ironic.url, MAC, &disk.path, Some(&cmdline));
    let mut agent = AgentProcess::serve(&args, &dir.path().join("agent.log"), None).unwrap();

    let t = Instant::now();
    ironic
        .provision(&uuid, json!({"target": "active"}))
        .await
        .unwrap();
    // The agent's download is the moment: it then writes, finishes and
    // heartbeats into the frozen conductor.
    while server.bytes_sent() == 0 {
        assert!(
            t.elapsed() < Duration::from_secs(240),
            "the agent never fetched the image:\n{}",
            agent.log()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    ironic.freeze().unwrap();
    let frozen_at = t.elapsed();
    tokio::time::sleep(outage).await;
    assert!(
        agent.running(),
        "the agent exited during the outage:\n{}",
        agent.log()
    );
    ironic.thaw().unwrap();
    // This test's own connections to Ironic may have died with the outage
    // too: a failed poll is retried, a failed deploy is not.
    let thawed = Instant::now();
    loop {
        match ironic.node(&uuid).await {
            Ok(node) => {
                let state = node["provision_state"].as_str().unwrap_or_default();
                if state == "active" {
                    assert!(node["last_error"].is_null(), "{}", node["last_error"]);
                    break;
                }
                assert!(
                    !state.ends_with("failed"),
                    "after the outage: {state}: {}\n{}",
                    node["last_error"],
                    agent.log()
                );
            }
            Err(e) => eprintln!("polling Ironic after the outage: {e:#}"),
        }
        assert!(
            thawed.elapsed() < Duration::from_secs(240),
            "not active 240 s after the outage:\n{}",
            agent.log()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let on_disk = {
        use std::io::Read;
        let mut buf = vec![0u8; IMAGE as usize];
        std::fs::File::open(&disk.path)
            .unwrap()
            .read_exact(&mut buf)
            .unwrap();
        buf
    };
    let body = MIB as usize..(IMAGE - MIB) as usize;
    assert!(
        on_disk[body.clone()] == img[body],
        "the disk differs from the image"
    );
    assert!(agent.running(), "the agent exited:\n{}", agent.log());
    let log = agent.log();
    let failed = log
        .lines()
        .filter(|l| l.contains("heartbeat failed"))
        .count();
    assert!(failed > 0, "no heartbeat failed during the outage:\n{log}");
    println!(
        "faults conductor: frozen {:.0} s from t+{:.1} s ({failed} heartbeat failures logged by the agent); active at t+{:.1} s, image byte-identical",
        outage.as_secs_f64(),
        frozen_at.as_secs_f64(),
        t.elapsed().as_secs_f64()
    );
}

/// Waits until the node is `active` (a failed state fails the test), polling
/// through transient connection errors.
async fn wait_active(ironic: &Ironic, uuid: &str, agent: &AgentProcess) -> Instant {
    let since = Instant::now();
    loop {
        match ironic.node(uuid).await {
            Ok(node) => {
                let state = node["provision_state"].as_str().unwrap_or_default();
                if state == "active" {
                    assert!(node["last_error"].is_null(), "{}", node["last_error"]);
                    return Instant::now();
                }
                assert!(
                    !state.ends_with("failed"),
                    "{state}: {}\n{}",
                    node["last_error"],
                    agent.log()
                );
            }
            Err(e) => eprintln!("polling Ironic: {e:#}"),
        }
        assert!(
            since.elapsed() < Duration::from_secs(240),
            "not active after 240 s:\n{}",
            agent.log()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deploy_completes_after_the_conductor_was_killed_and_restarted() {
    hardware_tests::require_root("the conductor restart test");
    let dir = tempfile::tempdir().unwrap();
    let image_path = dir.path().join("image.raw");
    let (img, sha) = make_image(&image_path);
    let server = ImageServer::start().unwrap();
    server.route_gets("/image.raw", &image_path, &[], Fault::None);
    let disk = LoopDevice::new(64 * MIB).expect("creating a loop device");
    let ironic = Ironic::start().expect("starting Ironic 39.0.0");
    let uuid = ironic
        .enroll_ready("restart", "52:54:00:fa:17:03", true)
        .await
        .unwrap();
    ironic
        .patch(
            &uuid,
            Ironic::image_patch(
                &server.url("/image.raw"),
                &sha,
                json!([{"op": "add", "path": "/instance_info/image_disk_format", "value": "raw"}]),
            ),
        )
        .await
        .unwrap();
    let cmdline = dir.path().join("cmdline");
    std::fs::write(&cmdline, "ipa-http-request-timeout=5\n").unwrap();
    let args = hardware_tests::agentproc::loopback_args(
        &ironic.url,
        "52:54:00:fa:17:03",
        &disk.path,
        Some(&cmdline),
    );
    let mut agent = AgentProcess::serve(&args, &dir.path().join("agent.log"), None).unwrap();
    let agent_pid = agent.pid();

    let t = Instant::now();
    ironic
        .provision(&uuid, json!({"target": "active"}))
        .await
        .unwrap();
    while server.bytes_sent() == 0 {
        assert!(
            t.elapsed() < Duration::from_secs(240),
            "the agent never fetched the image:\n{}",
            agent.log()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let before = ironic.node(&uuid).await.unwrap();
    assert_eq!(
        before["provision_state"],
        json!("wait call-back"),
        "{before}"
    );
    ironic.kill().unwrap();
    let killed_at = t.elapsed();
    // Down long enough for the agent to meet it (its heartbeat interval
    // here is a few seconds).
    tokio::time::sleep(Duration::from_secs(10)).await;
    let down = Instant::now();
    tokio::task::block_in_place(|| ironic.restart()).expect("starting Ironic again");
    let restart_took = down.elapsed();
    let after = ironic.node(&uuid).await.unwrap();
    // Ironic kept the wait state (only transient states are failed on
    // start) and nothing failed it.
    let state = after["provision_state"].as_str().unwrap_or_default();
    assert!(
        state == "wait call-back" || state == "deploying" || state == "active",
        "after the restart: {state}: {}",
        after["last_error"]
    );
    let active = wait_active(&ironic, &uuid, &agent).await;
    let on_disk = {
        use std::io::Read;
        let mut buf = vec![0u8; IMAGE as usize];
        std::fs::File::open(&disk.path)
            .unwrap()
            .read_exact(&mut buf)
            .unwrap();
        buf
    };
    let body = MIB as usize..(IMAGE - MIB) as usize;
    assert!(
        on_disk[body.clone()] == img[body],
        "the disk differs from the image"
    );
    assert!(agent.running(), "the agent exited:\n{}", agent.log());
    assert_eq!(agent.pid(), agent_pid, "the same agent process");
    let log = agent.log();
    let failed = log
        .lines()
        .filter(|l| l.contains("heartbeat failed"))
        .count();
    assert!(
        failed > 0,
        "no heartbeat failed while Ironic was down:\n{log}"
    );
    println!(
        "faults conductor restart: killed at t+{:.1} s in wait call-back, down 10 s, up again in {:.1} s ({state}), active {:.1} s after the restart ({failed} heartbeat failures logged by the agent), image byte-identical",
        killed_at.as_secs_f64(),
        restart_took.as_secs_f64(),
        (active - down).saturating_sub(restart_took).as_secs_f64()
    );
}

/// stop.sh ends a process of Ironic's that is outside its process group
/// (`setsid`, here a `sleep` with Ironic's console log as its stdout, as
/// every process Ironic forks has), and Ironic itself.
#[test]
fn stopping_ironic_ends_a_process_of_it_that_left_its_group() {
    use std::os::unix::process::ExitStatusExt;
    let ironic = Ironic::start().unwrap();
    let main = ironic.pid().unwrap();
    let console = std::fs::OpenOptions::new()
        .append(true)
        .open(ironic.console_log_path())
        .unwrap();
    let mut stray = std::process::Command::new("setsid")
        .args(["sleep", "600"])
        .stdout(console)
        .stdin(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Until setsid has exec'd sleep (the stdout is inherited either way).
    std::thread::sleep(Duration::from_millis(300));
    drop(ironic);
    let status = stray.try_wait().unwrap();
    let _ = stray.kill();
    let _ = stray.wait();
    assert_eq!(
        status.and_then(|s| s.signal()),
        Some(15),
        "the process outside Ironic's group was not ended by SIGTERM: {status:?}"
    );
    assert_ended(main);
}

/// Ironic's main process `main` is gone, or a zombie its new parent has
/// not reaped yet.
fn assert_ended(main: i32) {
    let state = std::fs::read_to_string(format!("/proc/{main}/status")).unwrap_or_default();
    assert!(
        state.is_empty() || state.contains("State:\tZ"),
        "Ironic's main process {main} outlived stop.sh: {state}"
    );
}

/// A SIGINT meant for stop.sh's caller (a Ctrl-C, `timeout` passing one on
/// to its group) reaches stop.sh's own group while it waits for Ironic to
/// end: it must still finish, leaving no Ironic behind.
#[test]
fn a_sigint_does_not_cut_a_stop_short() {
    use std::os::unix::process::CommandExt;
    let ironic = Ironic::start().unwrap();
    let main = ironic.pid().unwrap();
    let mut stop =
        std::process::Command::new(hardware_tests::repo_root().join("ci/ironic/stop.sh"))
            .arg(ironic.console_log_path().parent().unwrap())
            .process_group(0)
            .spawn()
            .unwrap();
    // Until stop.sh has sent TERM and waits for Ironic's processes to end.
    std::thread::sleep(Duration::from_millis(300));
    let group = nix::unistd::Pid::from_raw(-(stop.id() as i32));
    let _ = nix::sys::signal::kill(group, nix::sys::signal::SIGINT);
    let status = stop.wait().unwrap();
    assert!(status.success(), "stop.sh: {status:?}");
    assert_ended(main);
    drop(ironic);
}
