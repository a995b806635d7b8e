//! Image-server faults during real deploys (issue 20, item 1): real Ironic
//! 39 deploys a whole-disk image through one agent (its own process, host
//! mode, a loop device) `FAULT_RUNS` times (default 4, one of each kind; `ci/faults N`), the
//! image server failing each GET in turn at a random offset (seed
//! `FAULT_SEED`, printed): the connection dropped (FIN), reset (RST) or
//! stalled (no byte more until the agent's stall timeout), each once and
//! then served normally, or dropped once and then refused for good (503).
//! A transient fault must end `active` with the image byte for byte on the
//! disk (the agent resumes with Range); the refused one must end `deploy
//! failed` with the agent's precise error (the URL and the 503) in Ironic's
//! `last_error` and no partition table or filesystem signature left on the
//! disk (nothing that could boot a partial image). After each run the node
//! goes back to `available` through cleaning, and the same agent serves the
//! next run. Last, a second node whose disk is smaller than the image must
//! end `deploy failed` naming the disk, with no signature left on it.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use agent_testkit::image_server::{Fault, ImageServer};
use hardware_tests::agentproc::AgentProcess;
use hardware_tests::images;
use hardware_tests::ironic::Ironic;
use hardware_tests::loopdev::LoopDevice;
use serde_json::json;

const MAC: &str = "52:54:00:fa:17:01";
const MIB: u64 = 1 << 20;
const IMAGE: u64 = 24 * MIB;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Drop,
    Reset,
    Stall,
    Refused,
}

const KINDS: [Kind; 4] = [Kind::Drop, Kind::Reset, Kind::Stall, Kind::Refused];

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// An image whose every MiB differs (random bytes after the GPT), so a
/// misplaced resume shows.
fn make_image(path: &Path) -> (Vec<u8>, String) {
    images::sfdisk_image(path, IMAGE, "label: gpt\nname=root\n").unwrap();
    let mut img = std::fs::read(path).unwrap();
    let mut rng = fastrand::Rng::with_seed(77);
    for b in &mut img[MIB as usize..(IMAGE - MIB) as usize] {
        *b = rng.u8(..);
    }
    std::fs::write(path, &img).unwrap();
    let hex = images::sha256_hex(&img);
    (img, hex)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn image_server_faults_end_byte_identical_or_failed_closed() {
    hardware_tests::require_root("the image-server fault test");
    let runs = env_or("FAULT_RUNS", 4) as usize;
    let seed = env_or("FAULT_SEED", fastrand::u64(..));
    println!("faults: {runs} runs, FAULT_SEED={seed}");
    let mut rng = fastrand::Rng::with_seed(seed);

    let dir = tempfile::tempdir().unwrap();
    let image_path = dir.path().join("image.raw");
    let (img, sha) = make_image(&image_path);
    let server = ImageServer::start().unwrap();
    let disk = LoopDevice::new(64 * MIB).expect("creating a loop device");
    let ironic = Ironic::start().expect("starting Ironic 39.0.0");
    let uuid = ironic.enroll_ready("faults", MAC, true).await.unwrap();
    ironic.enable_automated_clean(&uuid).await.unwrap();
    // Short download timeouts (IPA's kernel parameters), so a stall costs
    // seconds and a refused server fails the deploy quickly.
    let cmdline = dir.path().join("cmdline");
    std::fs::write(
        &cmdline,
        "ipa-image-download-connection-timeout=3 ipa-image-download-connection-retries=2 \
         ipa-image-download-connection-retry-interval=1\n",
    )
    .unwrap();
    let args =
        hardware_tests::agentproc::loopback_args(&ironic.url, MAC, &disk.path, Some(&cmdline));
    let mut agent = AgentProcess::serve(&args, &dir.path().join("agent.log"), None).unwrap();

    let mut tally = [0usize; 4];
    for run in 0..runs {
        let kind = KINDS[run % KINDS.len()];
        let offset = rng.u64(..IMAGE);
        let route = format!("/images/run-{run}.raw");
        let (script, then) = match kind {
            Kind::Drop => (vec![Fault::DropAfter(offset)], Fault::None),
            Kind::Reset => (vec![Fault::ResetAfter(offset)], Fault::None),
            Kind::Stall => (vec![Fault::StallAt(offset)], Fault::None),
            Kind::Refused => (vec![Fault::DropAfter(offset)], Fault::Status(503)),
        };
        server.route_gets(&route, &image_path, &script, then);
        let url = server.url(&route);
        ironic
            .patch(
                &uuid,
                Ironic::image_patch(
                    &url,
                    &sha,
                    json!([{"op": "add", "path": "/instance_info/image_disk_format", "value": "raw"}]),
                ),
            )
            .await
            .unwrap();
        let t = Instant::now();
        ironic
            .provision(&uuid, json!({"target": "active"}))
            .await
            .unwrap();
        let what = format!("run {} ({kind:?} at byte {offset})", run + 1);
        if kind == Kind::Refused {
            let node = ironic
                .wait_for_any_target(&uuid, "deploy failed", Duration::from_secs(240))
                .await
                .unwrap_or_else(|e| panic!("{what}: {e:#}\n{}", agent.log()));
            let err = node["last_error"].as_str().unwrap_or_default();
            assert!(
                err.contains("write_image") && err.contains(&url) && err.contains("503"),
                "{what}: last_error {err}"
            );
            let left = disk.signatures().unwrap();
            assert!(left.is_empty(), "{what}: failed deploy left {left:?}");
            println!(
                "faults {what}: deploy failed closed in {:.1} s: {err}",
                t.elapsed().as_secs_f64()
            );
        } else {
            let node = ironic
                .wait_for(&uuid, "active", Duration::from_secs(240))
                .await
                .unwrap_or_else(|e| panic!("{what}: {e:#}\n{}", agent.log()));
            assert!(
                node["last_error"].is_null(),
                "{what}: {}",
                node["last_error"]
            );
            let on_disk = {
                use std::io::Read;
                let mut buf = vec![0u8; IMAGE as usize];
                std::fs::File::open(&disk.path)
                    .unwrap()
                    .read_exact(&mut buf)
                    .unwrap();
                buf
            };
            // Past the primary GPT (rewritten to move the backup table to
            // the disk's end) every byte is the image's.
            let body = MIB as usize..(IMAGE - MIB) as usize;
            assert!(
                on_disk[body.clone()] == img[body],
                "{what}: the disk differs from the image"
            );
            println!(
                "faults {what}: active, byte-identical, in {:.1} s",
                t.elapsed().as_secs_f64()
            );
        }
        tally[run % KINDS.len()] += 1;

        // Back to available through cleaning; the agent serves on.
        hardware_tests::run(Command::new("partx").arg("--delete").arg(&disk.path)).ok();
        ironic
            .provision(&uuid, json!({"target": "deleted"}))
            .await
            .unwrap();
        ironic
            .wait_for(&uuid, "available", Duration::from_secs(240))
            .await
            .unwrap_or_else(|e| panic!("{what}: undeploy: {e:#}\n{}", agent.log()));
        assert!(
            agent.running(),
            "{what}: the agent exited:\n{}",
            agent.log()
        );
    }
    println!(
        "faults: image server faults survived: {} drop, {} reset, {} stall (all byte-identical), {} refused (all failed closed)",
        tally[0], tally[1], tally[2], tally[3]
    );

    // A disk too small for the image: a second node whose agent may write
    // only a 16 MiB disk, the same 24 MiB image.
    let small = LoopDevice::new(16 * MIB).expect("creating a loop device");
    std::fs::write(&small.path, vec![0x5a; MIB as usize]).unwrap();
    let small_mac = "52:54:00:fa:17:03";
    let small_uuid = ironic
        .enroll_ready("too-small", small_mac, true)
        .await
        .unwrap();
    let route = "/images/small.raw";
    server.route_gets(route, &image_path, &[], Fault::None);
    let url = server.url(route);
    ironic
        .patch(
            &small_uuid,
            Ironic::image_patch(
                &url,
                &sha,
                json!([{"op": "add", "path": "/instance_info/image_disk_format", "value": "raw"}]),
            ),
        )
        .await
        .unwrap();
    let mut small_args = args.clone();
    for (i, a) in args.iter().enumerate() {
        if a == "--mac" {
            small_args[i + 1] = small_mac.to_string();
        }
        if a == "--allow-device" {
            small_args[i + 1] = small.path.to_str().unwrap().to_string();
        }
    }
    let mut small_agent =
        AgentProcess::serve(&small_args, &dir.path().join("small-agent.log"), None).unwrap();
    ironic
        .provision(&small_uuid, json!({"target": "active"}))
        .await
        .unwrap();
    let node = ironic
        .wait_for_any_target(&small_uuid, "deploy failed", Duration::from_secs(240))
        .await
        .unwrap_or_else(|e| panic!("too-small disk: {e:#}\n{}", small_agent.log()));
    let err = node["last_error"].as_str().unwrap_or_default();
    assert!(
        err.contains("write_image") && err.contains(small.path.to_str().unwrap()),
        "too-small disk: last_error {err}"
    );
    let left = small.signatures().unwrap();
    assert!(left.is_empty(), "too-small disk: left {left:?}");
    assert!(small_agent.running(), "{}", small_agent.log());
    assert!(agent.running(), "{}", agent.log());
    println!("faults disk too small: deploy failed closed: {err}");
}
