//! The stand-in conductor deploys a whole-disk image through the agent in
//! host mode onto a file-backed disk, with the calls Ironic 39's `direct`
//! deploy makes: `active` with the image and config drive on the disk; a wrong checksum
//! ends `deploy failed` with the agent's error and its logs; a conductor
//! restart mid-deploy is survived.

use std::path::Path;
use std::time::Duration;

use agent::testconductor::demo::host_config;
use agent::testconductor::{BootMode, DeployRequest, ImageInfo, Settings, TestConductor};
use agent_base::config::Config;
use agent_testkit::image_server::{Fault, ImageServer};

const MIB: usize = 1 << 20;

fn settings() -> Settings {
    Settings {
        command_poll_interval: Duration::from_millis(500),
        ..Settings::default()
    }
}

fn config(conductor: &TestConductor, mac: &str, device: &Path) -> Config {
    Config {
        lookup_max_interval: Duration::from_secs(1),
        min_heartbeat_interval: Duration::from_millis(200),
        ..host_config(conductor.url(), mac, device)
    }
}

/// An 8 MiB whole-disk image: MBR (disk signature 0x5eed1234, one
/// partition) and 2 MiB of random data.
fn image(path: &Path) -> (Vec<u8>, String) {
    let mut img = vec![0u8; 8 * MIB];
    img[440..444].copy_from_slice(&0x5eed_1234u32.to_le_bytes());
    img[446 + 4] = 0x83;
    img[446 + 8..446 + 12].copy_from_slice(&2048u32.to_le_bytes());
    img[446 + 12..446 + 16].copy_from_slice(&8192u32.to_le_bytes());
    img[510] = 0x55;
    img[511] = 0xaa;
    let mut rng = fastrand::Rng::with_seed(7);
    for b in &mut img[MIB..3 * MIB] {
        *b = rng.u8(..);
    }
    std::fs::write(path, &img).unwrap();
    let sha = ring::digest::digest(&ring::digest::SHA256, &img);
    let hex = sha.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    (img, hex)
}

/// A config-2 ISO as Ironic renders it, gzip+base64.
fn config_drive(dir: &Path) -> String {
    let tree = dir.join("cd/openstack/latest");
    std::fs::create_dir_all(&tree).unwrap();
    std::fs::write(tree.join("meta_data.json"), r#"{"uuid": "deploy-test"}"#).unwrap();
    let iso = dir.join("cd.iso");
    let st = std::process::Command::new("genisoimage")
        .args(["-quiet", "-J", "-r", "-V", "config-2", "-o"])
        .arg(&iso)
        .arg(dir.join("cd"))
        .stderr(std::process::Stdio::null())
        .status()
        .expect("genisoimage is installed (ci/install-deps)");
    assert!(st.success());
    agent_contents::configdrive::source::encode(&std::fs::read(iso).unwrap())
}

struct Setup {
    dir: tempfile::TempDir,
    disk: std::path::PathBuf,
    img: Vec<u8>,
    sha: String,
    server: ImageServer,
    conductor: TestConductor,
    uuid: String,
    agent: tokio::task::JoinHandle<anyhow::Result<()>>,
}

async fn setup(mac: &str, script: &[Fault]) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let (img, sha) = image(&dir.path().join("test.raw"));
    let server = ImageServer::start().unwrap();
    server.route(
        "/images/test.raw",
        dir.path().join("test.raw"),
        script,
        Fault::None,
    );
    let disk = dir.path().join("disk");
    std::fs::File::create(&disk)
        .unwrap()
        .set_len(96 * MIB as u64)
        .unwrap();
    let conductor = TestConductor::start(settings()).await.unwrap();
    let uuid = conductor.enroll(&[mac]);
    conductor.make_available(&uuid).unwrap();
    let agent = agent::agent::start_detached(config(&conductor, mac, &disk));
    Setup {
        dir,
        disk,
        img,
        sha,
        server,
        conductor,
        uuid,
        agent,
    }
}

fn request(s: &Setup, sha: &str, boot_mode: BootMode) -> DeployRequest {
    DeployRequest {
        image_info: ImageInfo::raw_sha256(&s.server.url("/images/test.raw"), sha),
        configdrive: Some(config_drive(s.dir.path())),
        boot_mode,
        root_device: None,
    }
}

/// The calls to the agent, in order, without their results.
fn agent_calls(t: &[String]) -> Vec<String> {
    t.iter()
        .filter_map(|l| l.strip_prefix("C->A POST "))
        .map(|l| l.split(" wait=").next().unwrap().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uefi_deploy_with_config_drive() {
    let s = setup("52:54:00:dd:00:01", &[]).await;
    s.conductor
        .start_deploy(&s.uuid, request(&s, &s.sha, BootMode::Uefi))
        .unwrap();
    let node = s
        .conductor
        .wait_for_state(&s.uuid, "active", Duration::from_secs(60))
        .await
        .unwrap_or_else(|e| panic!("{e:#}\n{:#?}", s.conductor.transcript()));
    let t = s.conductor.transcript();
    assert_eq!(
        agent_calls(&t),
        [
            "deploy.get_deploy_steps",
            "deploy.execute_deploy_step",
            "standby.get_partition_uuids",
            "image.install_bootloader",
            "standby.power_off"
        ],
        "{t:#?}"
    );
    // The command list is read between get_deploy_steps and write_image
    // ("freshly booted"), and polled until write_image and then
    // install_bootloader finished.
    let i = t
        .iter()
        .position(|l| l.contains("get_deploy_steps"))
        .unwrap();
    assert!(t[i + 1].contains("GET /v1/commands/ -> 200 [get_deploy_steps:SUCCEEDED]"));
    assert!(t
        .iter()
        .any(|l| l.contains("execute_deploy_step:SUCCEEDED]")));
    assert!(t
        .iter()
        .any(|l| l.contains("install_bootloader:SUCCEEDED]")));
    assert_eq!(node.partition_uuids.unwrap()["root uuid"], "0x5eed1234");
    assert!(node.token.is_none(), "token wiped at the end");
    assert!(node.last_error.is_none());
    // Ironic's HEAD of the image, then the agent's GET.
    let seen = s.server.seen();
    assert!(seen.len() >= 2, "{seen:?}");

    let data = std::fs::read(&s.disk).unwrap();
    // The image, apart from the new MBR entry 2 (the config drive).
    assert!(data[..462] == s.img[..462] && data[478..8 * MIB] == s.img[478..]);
    let e = &data[446 + 16..446 + 32];
    let start = u32::from_le_bytes(e[8..12].try_into().unwrap()) as u64 * 512;
    let file = std::fs::File::open(&s.disk).unwrap();
    assert_eq!(
        agent_contents::configdrive::probe_label(&file, start, 64 << 20).as_deref(),
        Some("config-2")
    );

    s.agent.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_checksum_fails_the_deploy_with_the_agents_error_and_logs() {
    let s = setup("52:54:00:dd:00:02", &[]).await;
    let wrong = "0".repeat(64);
    s.conductor
        .start_deploy(&s.uuid, request(&s, &wrong, BootMode::Bios))
        .unwrap();
    let node = s
        .conductor
        .wait_for_state(&s.uuid, "deploy failed", Duration::from_secs(60))
        .await
        .unwrap();
    let err = node.last_error.unwrap();
    assert!(
        err.starts_with(&format!(
            "Deploy step deploy.write_image failed on node {}.",
            s.uuid
        )) && err.contains(&wrong)
            && err.contains(&s.sha),
        "{err}"
    );
    assert_eq!(node.agent_logs.len(), 1, "logs collected once");
    let t = s.conductor.transcript();
    let calls = agent_calls(&t);
    assert_eq!(
        calls,
        [
            "deploy.get_deploy_steps",
            "deploy.execute_deploy_step",
            "log.collect_system_logs"
        ],
        "{t:#?}"
    );
    // Nothing bootable is left on the disk.
    let data = std::fs::read(&s.disk).unwrap();
    assert!(data[..MIB].iter().all(|b| *b == 0));
    s.agent.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bios_deploy_survives_a_conductor_restart_and_a_dropped_download() {
    // The first GET of the image is cut after 3 MiB: the agent resumes.
    // (Ironic's HEAD comes first and takes the first script entry.)
    let s = setup(
        "52:54:00:dd:00:03",
        &[Fault::None, Fault::DropAfter(3 << 20)],
    )
    .await;
    s.conductor
        .start_deploy(&s.uuid, request(&s, &s.sha, BootMode::Bios))
        .unwrap();
    // Crash the conductor once write_image was sent; it stays down for
    // two heartbeat intervals.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !s
        .conductor
        .transcript()
        .iter()
        .any(|l| l.contains("deploy.execute_deploy_step"))
    {
        assert!(tokio::time::Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let conductor = s
        .conductor
        .clone()
        .restart(Duration::from_secs(3))
        .await
        .unwrap();
    let node = conductor
        .wait_for_state(&s.uuid, "active", Duration::from_secs(60))
        .await
        .unwrap_or_else(|e| panic!("{e:#}\n{:#?}", conductor.transcript()));
    let t = conductor.transcript();
    let restart = t
        .iter()
        .position(|l| l == "C: conductor started again")
        .unwrap();
    assert!(
        t[restart..]
            .iter()
            .any(|l| l.contains("/v1/heartbeat/") && l.ends_with("-> 202")),
        "the agent heartbeats the restarted conductor: {t:#?}"
    );
    assert!(agent_calls(&t[restart..]).contains(&"standby.get_partition_uuids".to_string()));
    assert!(
        !agent_calls(&t).contains(&"image.install_bootloader".to_string()),
        "BIOS: no install_bootloader"
    );
    assert_eq!(node.partition_uuids.unwrap()["root uuid"], "0x5eed1234");
    let ranged = s.server.seen().iter().any(|r| r.range.is_some());
    assert!(ranged, "the agent resumed with a Range request");
    let data = std::fs::read(&s.disk).unwrap();
    assert!(data[..462] == s.img[..462] && data[478..8 * MIB] == s.img[478..]);
    s.agent.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_while_deploying_fails_the_deploy_and_a_bad_request_is_refused() {
    let s = setup("52:54:00:dd:00:04", &[]).await;
    let mut bad = request(&s, &s.sha, BootMode::Uefi);
    bad.image_info.os_hash_value = None;
    assert!(s.conductor.start_deploy(&s.uuid, bad).is_err());
    s.conductor
        .start_deploy(&s.uuid, request(&s, &s.sha, BootMode::Uefi))
        .unwrap();
    // Still `deploying` (locked for start_lock): the restart fails it.
    let conductor = s
        .conductor
        .clone()
        .restart(Duration::from_millis(10))
        .await
        .unwrap();
    let node = conductor.node(&s.uuid).unwrap();
    assert_eq!(node.provision_state, "deploy failed");
    assert!(node.last_error.unwrap().contains("can't be resumed"));
    s.agent.abort();
}
