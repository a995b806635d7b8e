//! Soak (issue 20, item 2): real Ironic 39 drives one agent (its own
//! process, host mode, a loop device) through `SOAK_CYCLES` (default 5;
//! `ci/soak N` for long runs) consecutive deploy → undeploy-with-cleaning
//! cycles. Every cycle deploys a different image (its own random bytes and
//! checksum), which must be on the disk byte for byte at `active`, and the
//! cleaning must leave no signature at `available`. After each cycle, with
//! the agent idle, its resident memory and open file descriptors are
//! sampled; they must not grow ([`steady`] says how that is judged).

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use agent_testkit::image_server::{Fault, ImageServer};
use hardware_tests::agentproc::AgentProcess;
use hardware_tests::images;
use hardware_tests::ironic::Ironic;
use hardware_tests::loopdev::LoopDevice;
use serde_json::json;

const MAC: &str = "52:54:00:50:a4:01";
const MIB: u64 = 1 << 20;
/// Image size; the random part is what each cycle checks.
const IMAGE: u64 = 24 * MIB;
const RANDOM: std::ops::Range<usize> = (2 * MIB) as usize..(6 * MIB) as usize;

/// One sample, at the end of a cycle.
#[derive(Debug, Clone, Copy)]
struct Sample {
    rss_kib: u64,
    fds: usize,
}

/// Cycles whose samples are the baseline (allocator arenas, connection
/// pools and caches fill during the first cycles).
fn warm_up(cycles: usize) -> usize {
    (cycles / 10).max(2).min(cycles.saturating_sub(1))
}

/// RSS allowed above the baseline, KiB.
const RSS_SLACK_KIB: u64 = 4096;
/// Open descriptors allowed above the baseline (a keep-alive connection
/// to the conductor or the image server may or may not be open).
const FD_SLACK: usize = 2;
/// For runs of at least 20 cycles: how much the mean RSS of the last
/// quarter may exceed that of the first quarter after warm-up, KiB (a leak
/// of 50 KiB per cycle shows over 50 cycles).
const TREND_SLACK_KIB: u64 = 1024;

/// Whether the samples show no growth: after the warm-up, every cycle's
/// RSS ≤ the warm-up's highest + [`RSS_SLACK_KIB`], and its descriptors ≤
/// the warm-up's most + [`FD_SLACK`]; with 20 cycles or more, also no
/// trend: the last quarter's mean RSS ≤ the first post-warm-up quarter's
/// mean + [`TREND_SLACK_KIB`]. `Err` says which sample broke which bound.
fn steady(samples: &[Sample]) -> Result<(), String> {
    let w = warm_up(samples.len());
    let (base, rest) = samples.split_at(w);
    let rss0 = base.iter().map(|s| s.rss_kib).max().unwrap_or(0);
    let fds0 = base.iter().map(|s| s.fds).max().unwrap_or(0);
    for (i, s) in rest.iter().enumerate() {
        let cycle = w + i + 1;
        if s.rss_kib > rss0 + RSS_SLACK_KIB {
            return Err(format!(
                "cycle {cycle}: RSS {} KiB > warm-up {rss0} KiB + {RSS_SLACK_KIB}",
                s.rss_kib
            ));
        }
        if s.fds > fds0 + FD_SLACK {
            return Err(format!(
                "cycle {cycle}: {} open fds > warm-up {fds0} + {FD_SLACK}",
                s.fds
            ));
        }
    }
    if samples.len() >= 20 {
        let q = (rest.len() / 4).max(1);
        let mean = |s: &[Sample]| s.iter().map(|s| s.rss_kib).sum::<u64>() / s.len() as u64;
        let (first, last) = (mean(&rest[..q]), mean(&rest[rest.len() - q..]));
        if last > first + TREND_SLACK_KIB {
            return Err(format!(
                "RSS trend: last {q} cycles' mean {last} KiB > first {q} post-warm-up cycles' {first} KiB + {TREND_SLACK_KIB}"
            ));
        }
    }
    Ok(())
}

#[test]
fn steady_accepts_a_plateau_and_refuses_growth() {
    let flat: Vec<Sample> = [9000, 12000, 12500, 12300, 12600, 12400]
        .iter()
        .map(|&r| Sample {
            rss_kib: r,
            fds: 12,
        })
        .collect();
    assert!(steady(&flat).is_ok());
    let mut fd_leak = flat.clone();
    fd_leak[5].fds = 15;
    assert!(steady(&fd_leak)
        .unwrap_err()
        .contains("cycle 6: 15 open fds"));
    let mut jump = flat.clone();
    jump[4].rss_kib = 12000 + RSS_SLACK_KIB + 1;
    assert!(steady(&jump).unwrap_err().contains("cycle 5: RSS"));
    // 50 cycles, 60 KiB more each: within the absolute slack at the end
    // only for the first cycles, caught by the trend.
    let creep: Vec<Sample> = (0..50u64)
        .map(|i| Sample {
            rss_kib: 12000 + i * 60,
            fds: 12,
        })
        .collect();
    assert!(steady(&creep).is_err());
    let noisy: Vec<Sample> = (0..50u64)
        .map(|i| Sample {
            rss_kib: 12000 + (i * 7919 % 13) * 100,
            fds: 12 + (i % 2) as usize,
        })
        .collect();
    assert!(steady(&noisy).is_ok(), "{:?}", steady(&noisy));
}

fn cycles() -> usize {
    std::env::var("SOAK_CYCLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5)
}

/// Cycle `c`'s image: a GPT disk with one partition, random bytes from seed `c`.
fn make_image(path: &Path, c: u64) -> (Vec<u8>, String) {
    images::sfdisk_image(path, IMAGE, "label: gpt\nname=root\n").unwrap();
    let mut img = std::fs::read(path).unwrap();
    let mut rng = fastrand::Rng::with_seed(1000 + c);
    for b in &mut img[RANDOM] {
        *b = rng.u8(..);
    }
    std::fs::write(path, &img).unwrap();
    let hex = images::sha256_hex(&img);
    (img, hex)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deploy_undeploy_cycles_keep_the_agent_correct_and_steady() {
    hardware_tests::require_root("the soak test");
    let n = cycles();
    let dir = tempfile::tempdir().unwrap();
    let server = ImageServer::start().unwrap();
    let disk = LoopDevice::new(96 * MIB).expect("creating a loop device");
    let ironic = Ironic::start().expect("starting Ironic 39.0.0");
    let uuid = ironic.enroll_ready("soak", MAC, true).await.unwrap();
    ironic.enable_automated_clean(&uuid).await.unwrap();
    let args = hardware_tests::agentproc::loopback_args(&ironic.url, MAC, &disk.path, None);
    // Measuring the agent's own memory through glibc: with its defaults,
    // RSS also counts what malloc keeps after a free. Each new thread (the
    // image write and the erase run on short-lived blocking threads) gets
    // its own arena, up to 8 per core, each keeping what it once held (a
    // 50-cycle run stepped by 2 MiB at cycles 21, 24 and 37), and freed
    // image buffers stay in an arena until it is trimmed (with two arenas,
    // the end-of-cycle RSS swung between 29 and 62 MiB). Two arenas, and
    // blocks from 64 KiB up mapped and unmapped on their own, make RSS
    // follow live allocations; the ramdisk's static musl build returns
    // freed memory by itself.
    let mut agent = AgentProcess::serve_env(
        &args,
        &dir.path().join("agent.log"),
        None,
        &[
            ("MALLOC_ARENA_MAX", "2"),
            ("MALLOC_MMAP_THRESHOLD_", "65536"),
            ("MALLOC_TRIM_THRESHOLD_", "65536"),
        ],
    )
    .unwrap();

    let started = Instant::now();
    let mut samples = Vec::new();
    for c in 0..n {
        let path = dir.path().join(format!("cycle-{c}.raw"));
        let (img, sha) = make_image(&path, c as u64);
        let route = format!("/images/cycle-{c}.raw");
        server.route(&route, &path, &[], Fault::None);
        ironic
            .patch(
                &uuid,
                Ironic::image_patch(
                    &server.url(&route),
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
        let node = ironic
            .wait_for(&uuid, "active", Duration::from_secs(240))
            .await
            .unwrap_or_else(|e| panic!("cycle {}: deploy: {e:#}\n{}", c + 1, agent.log()));
        let deploy = t.elapsed();
        assert!(node["last_error"].is_null(), "{}", node["last_error"]);
        let on_disk = {
            use std::io::Read;
            let mut buf = vec![0u8; IMAGE as usize];
            std::fs::File::open(&disk.path)
                .unwrap()
                .read_exact(&mut buf)
                .unwrap();
            buf
        };
        assert!(
            on_disk[RANDOM] == img[RANDOM],
            "cycle {}: the disk does not hold this cycle's image",
            c + 1
        );

        hardware_tests::run(Command::new("partx").arg("--delete").arg(&disk.path)).ok();
        let t = Instant::now();
        ironic
            .provision(&uuid, json!({"target": "deleted"}))
            .await
            .unwrap();
        let node = ironic
            .wait_for(&uuid, "available", Duration::from_secs(240))
            .await
            .unwrap_or_else(|e| panic!("cycle {}: undeploy: {e:#}\n{}", c + 1, agent.log()));
        let undeploy = t.elapsed();
        assert!(node["last_error"].is_null(), "{}", node["last_error"]);
        let left = disk.signatures().unwrap();
        assert!(left.is_empty(), "cycle {}: cleaning left {left:?}", c + 1);
        std::fs::remove_file(&path).unwrap();

        // Idle: the agent only heartbeats now.
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(agent.running(), "the agent exited:\n{}", agent.log());
        let s = Sample {
            rss_kib: agent.rss_kib().unwrap(),
            fds: agent.open_fds().unwrap(),
        };
        println!(
            "soak cycle {}/{n}: deploy {:.1} s, undeploy+clean {:.1} s, agent RSS {} KiB, {} fds, {} threads",
            c + 1,
            deploy.as_secs_f64(),
            undeploy.as_secs_f64(),
            s.rss_kib,
            s.fds,
            agent.threads().unwrap_or(0)
        );
        samples.push(s);
    }
    let rss: Vec<u64> = samples.iter().map(|s| s.rss_kib).collect();
    let fds: Vec<usize> = samples.iter().map(|s| s.fds).collect();
    println!(
        "soak: {n} cycles in {:.0} s; RSS KiB {rss:?}; fds {fds:?}; warm-up {} cycles",
        started.elapsed().as_secs_f64(),
        warm_up(n)
    );
    if let Err(e) = steady(&samples) {
        panic!("the agent grew: {e}");
    }
}
