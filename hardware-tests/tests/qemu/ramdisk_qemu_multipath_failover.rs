//! A SAN LUN whose paths go away in the middle of a deploy (issue 50): one
//! LUN (a 1 GiB file) on two virtio-scsi paths, the deploy ramdisk driven by
//! the stand-in conductor in one boot, paths removed and added over QMP
//! (`device_del`, `blockdev-add` + `device_add`) while the image is being
//! written (48 MiB, which the server sends at 2 MiB/s on one connection:
//! below the size the agent splits over several, the write lasts ~24 s):
//! - at boot, the LUN's MBR partitions are mapped as kpartx maps them: its
//!   primary, its extended partition (1 KiB) and the two logical ones in it;
//! - a second LUN zoned to the machine after boot (two paths hot-added) is
//!   assembled as `mpathb` by the agent's watch;
//! - every path gone for longer than the bound (`agent.multipath-queue=15`):
//!   the deploy fails with an error that names the multipath device and the
//!   bound, and the LUN holds nothing bootable (no partition table);
//! - both paths given back: the agent's multipath watch puts them in the
//!   table again;
//! - `erase_devices` loses one path halfway: the erase completes (the agent
//!   verifies what it wrote) and the LUN reads back zero; the path comes back;
//! - the next deploy loses one path (failover), then the other (no path:
//!   the I/O waits), and gets one back within the bound: the write goes on,
//!   the deploy ends `active` and the LUN holds the image byte for byte.
//!
//! Not covered here (QEMU's `scsi-hd` reports no ALUA states): an
//! active/passive LUN's standby path left idle; the table's priority groups
//! are tested on sysfs fixtures (`disk::multipath` unit tests).

use std::os::unix::fs::FileExt;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use agent::testconductor::{BootMode, DeployRequest, ImageInfo, Settings, TestConductor};
use agent_testkit::image_server::{Fault, ImageServer};
use hardware_tests::bed::{self, deploy, direct, dirty_disk, qmp, MultipathDisk, Vm, BRIDGE_IP};
use hardware_tests::{require_root, run};

const MAC: &str = "52:54:00:12:34:5d";
const MIB: u64 = 1 << 20;
const LUN_SIZE: u64 = 1 << 30;
const IMAGE_SIZE: u64 = 48 * MIB;
/// What the image server sends per second.
const RATE: u64 = 2 * MIB;
/// The kernel argument's bound on queueing with no path, in seconds.
const QUEUE_SECS: u64 = 15;

fn signatures(disk: &Path) -> String {
    dirty_disk::signatures(disk).unwrap()
}

/// A GPT disk image of `size` with random bytes between its tables.
fn image(path: &Path, size: u64) {
    dirty_disk::gpt(path, size).unwrap();
    let f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    let mut chunk = vec![0u8; MIB as usize];
    for mib in 1..size / MIB - 1 {
        fastrand::fill(&mut chunk);
        f.write_all_at(&chunk, mib * MIB).unwrap();
    }
}

/// The LUN before the test: an MBR with a primary partition and an
/// extended one holding two logical partitions (5: 8 MiB, 6: 16 MiB).
fn mbr_with_logical_partitions(path: &Path) {
    std::fs::File::create(path)
        .unwrap()
        .set_len(LUN_SIZE)
        .unwrap();
    let script = path.with_extension("sfdisk");
    std::fs::write(
        &script,
        "label: dos\nsize=16MiB, type=83\ntype=5\nsize=8MiB, type=83\nsize=16MiB, type=82\n",
    )
    .unwrap();
    run(Command::new("sfdisk")
        .arg("-q")
        .arg(path)
        .stdin(std::fs::File::open(&script).unwrap()))
    .unwrap();
}

/// The size PID 1 said it mapped partition `n` of `mpatha` with.
fn mapped(console: &str, n: u32) -> Option<u64> {
    let line = console
        .lines()
        .find(|l| l.contains(&format!("mpatha partition {n} mapped at /dev/dm-")))?;
    let bytes = line.rsplit_once('(')?.1.strip_suffix(" bytes)")?;
    bytes.trim().parse().ok()
}

/// Bytes `[from, to)` of a file.
fn bytes(path: &Path, from: u64, to: u64) -> Vec<u8> {
    let mut b = vec![0u8; (to - from) as usize];
    std::fs::File::open(path)
        .unwrap()
        .read_exact_at(&mut b, from)
        .unwrap();
    b
}

/// Waits until the image server has sent `n` bytes more than `base`.
async fn sent(server: &ImageServer, base: u64, n: u64) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(180);
    while server.bytes_sent() < base + n {
        anyhow::ensure!(
            Instant::now() < deadline,
            "the image server sent {} of {n} bytes in 180 s",
            server.bytes_sent() - base
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(())
}

/// Whether a file reads back zero throughout.
fn zero(path: &Path) -> bool {
    let f = std::fs::File::open(path).unwrap();
    let len = f.metadata().unwrap().len();
    let mut b = vec![0u8; MIB as usize];
    (0..len.div_ceil(MIB)).all(|i| {
        let n = (len - i * MIB).min(MIB) as usize;
        f.read_exact_at(&mut b[..n], i * MIB).unwrap();
        b[..n].iter().all(|&x| x == 0)
    })
}

/// Waits until the agent runs a clean step (its command list, as the
/// conductor reads it, ends with a running `execute_clean_step`).
async fn running_step(conductor: &TestConductor, uuid: &str) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(Some(commands)) = conductor.agent_commands(uuid).await {
            let running = commands.last().is_some_and(|c| {
                c["command_name"] == "execute_clean_step" && c["command_status"] == "RUNNING"
            });
            if running {
                return Ok(());
            }
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "no clean step running after 60 s"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// Waits until the console has `needle` at least `count` times.
async fn console_has(vm: &Vm<'_>, needle: &str, count: usize) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    while vm.console().matches(needle).count() < count {
        anyhow::ensure!(
            Instant::now() < deadline,
            "no {needle:?} (×{count}) on the console in 60 s"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Ok(())
}

#[test]
fn a_deploy_survives_lost_paths_and_fails_closed_past_the_queueing_bound() {
    require_root("the QEMU multipath failover test");
    let started = Instant::now();
    let at = || format!("{:>5.1} s", started.elapsed().as_secs_f64());
    let ramdisk = bed::ramdisk_dir().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let lun = tmp.path().join("lun.img");
    let plain = tmp.path().join("PLAIN0002.img");
    let img = tmp.path().join("image.raw");
    image(&img, IMAGE_SIZE);
    mbr_with_logical_partitions(&lun);
    let late_lun = tmp.path().join("late.img");
    std::fs::File::create(&late_lun)
        .unwrap()
        .set_len(256 * MIB)
        .unwrap();
    let sha = deploy::sha256_file(&img).unwrap();

    let disks = direct::virtio_disks(tmp.path(), &["PLAIN0002"], 256 * MIB);
    assert_eq!(disks[0].path, plain);
    let lun_disk = MultipathDisk {
        path: lun.clone(),
        size: LUN_SIZE,
        serial: "MPATH0002".into(),
        wwn: "0x5000c50015ea71ae".into(),
        paths: 2,
    };
    let (net, mut spec) = direct::multipath_machine(
        "mpfailover",
        &ramdisk,
        MAC,
        &disks,
        lun_disk.clone(),
        &format!("agent.multipath-queue={QUEUE_SECS}"),
    )
    .unwrap();
    spec.qmp = true;

    let outcome: anyhow::Result<(String, Option<String>, bool, String)> = net
        .block_on(async {
            let conductor = TestConductor::start_on(
                Settings {
                    command_poll_interval: Duration::from_secs(2),
                    ..Settings::default()
                },
                format!("{BRIDGE_IP}:6385").parse()?,
            )
            .await?;
            let server = ImageServer::start_on(format!("{BRIDGE_IP}:0").parse()?)?;
            server.route("/image.raw", &img, &[], Fault::None);
            server.limit_rate(RATE);
            let uuid = conductor.enroll(&[MAC]);
            conductor.start_inspect(&uuid)?;
            let vm = Vm::start(&net, &spec)?;
            let socket = vm.qmp_socket().expect("qmp").to_path_buf();
            let ctx = |vm: &Vm<'_>, c: &TestConductor| {
                format!(
                    "\n--- transcript ---\n{}\n--- console {} ---\n{}",
                    c.transcript().join("\n"),
                    vm.console_path().display(),
                    vm.console()
                )
            };
            conductor
                .wait_for_state(&uuid, "manageable", Duration::from_secs(240))
                .await
                .map_err(|e| anyhow::anyhow!("inspection: {e:#}{}", ctx(&vm, &conductor)))?;
            println!("{} inspected", at());
            let console = vm.console();
            let maps: Vec<Option<u64>> =
                [1, 2, 5, 6].iter().map(|&n| mapped(&console, n)).collect();
            anyhow::ensure!(
                maps == [Some(16 * MIB), Some(1024), Some(8 * MIB), Some(16 * MIB)],
                "the LUN's MBR partitions (1, 2 extended, 5, 6) mapped as {maps:?}{}",
                ctx(&vm, &conductor)
            );
            anyhow::ensure!(
                console.contains("multipath: watching paths"),
                "the multipath watch did not start{}",
                ctx(&vm, &conductor)
            );
            // A LUN that appears after boot.
            let late = MultipathDisk {
                path: late_lun.clone(),
                size: 256 * MIB,
                serial: "MPATH0003".into(),
                wwn: "0x5000c50015ea71af".into(),
                paths: 2,
            };
            qmp::add_path(&socket, 0, &late, 8)?;
            qmp::add_path(&socket, 0, &late, 9)?;
            console_has(&vm, "(mpathb) assembled from", 1).await?;
            println!("{} a LUN added after boot assembled", at());
            let request = || DeployRequest {
                image_info: ImageInfo::raw_sha256(&server.url("/image.raw"), &sha),
                configdrive: None,
                boot_mode: BootMode::Bios,
                root_device: Some(serde_json::json!({"wwn": lun_disk.wwn})),
            };

            // Every path gone for longer than the bound: the deploy fails.
            conductor.make_available(&uuid)?;
            let base = server.bytes_sent();
            conductor.start_deploy(&uuid, request())?;
            sent(&server, base, 16 * MIB).await?;
            qmp::remove_path(&socket, 0, 0)?;
            qmp::remove_path(&socket, 0, 1)?;
            println!("{} both paths removed", at());
            let node =
                deploy::watch_deploy(&conductor, &uuid, &[], Duration::from_secs(180), |_| {})
                    .await
                    .map_err(|e| {
                        anyhow::anyhow!("deploy with no path: {e:#}{}", ctx(&vm, &conductor))
                    })?;
            println!("{} deploy ended {}", at(), node.provision_state);
            anyhow::ensure!(
                node.provision_state == "deploy failed",
                "the deploy with no path for {QUEUE_SECS} s ended {}{}",
                node.provision_state,
                ctx(&vm, &conductor)
            );
            let failed_with = node.last_error.clone();
            let lun_after_failure = signatures(&lun);

            // Both paths back (new SCSI targets of the controller).
            qmp::add_path(&socket, 0, &lun_disk, 2)?;
            qmp::add_path(&socket, 0, &lun_disk, 3)?;
            console_has(&vm, "a path is up again", 1).await?;

            // A full erase that loses a path halfway.
            conductor.update_node(&uuid, |n| n.provision_state = "manageable".into());
            let erase =
                serde_json::json!({"interface": "deploy", "step": "erase_devices", "args": {}});
            conductor.start_clean(&uuid, Some(vec![erase]))?;
            running_step(&conductor, &uuid).await?;
            tokio::time::sleep(Duration::from_secs(3)).await;
            qmp::remove_path(&socket, 0, 2)?;
            println!("{} a path removed during the erase", at());
            let node = conductor
                .wait_for_state(&uuid, "manageable", Duration::from_secs(300))
                .await
                .map_err(|e| {
                    anyhow::anyhow!("erase over a lost path: {e:#}{}", ctx(&vm, &conductor))
                })?;
            println!("{} erased", at());
            anyhow::ensure!(node.last_error.is_none(), "erase: {:?}", node.last_error);
            let lun_zero = zero(&lun);
            let reloads = vm.console().matches("table reloaded over").count();
            qmp::add_path(&socket, 0, &lun_disk, 4)?;
            console_has(&vm, "table reloaded over", reloads + 1).await?;
            let reloads = reloads + 1;

            // Failover, then no path for less than the bound.
            conductor.make_available(&uuid)?;
            let base = server.bytes_sent();
            conductor.start_deploy(&uuid, request())?;
            sent(&server, base, 10 * MIB).await?;
            qmp::remove_path(&socket, 0, 3)?;
            println!("{} one path removed", at());
            sent(&server, base, 20 * MIB).await?;
            qmp::remove_path(&socket, 0, 4)?;
            println!("{} the other path removed", at());
            tokio::time::sleep(Duration::from_secs(QUEUE_SECS / 2)).await;
            let state = conductor.node(&uuid).map(|n| n.provision_state);
            anyhow::ensure!(
                matches!(state.as_deref(), Some("wait call-back" | "deploying")),
                "the deploy did not wait for a path: {state:?}{}",
                ctx(&vm, &conductor)
            );
            qmp::add_path(&socket, 0, &lun_disk, 5)?;
            println!("{} a path added", at());
            let node = deploy::watch_deploy(
                &conductor,
                &uuid,
                &["active"],
                Duration::from_secs(240),
                |_| {},
            )
            .await
            .map_err(|e| {
                anyhow::anyhow!("deploy over lost paths: {e:#}{}", ctx(&vm, &conductor))
            })?;
            anyhow::ensure!(
                node.provision_state == "active",
                "the deploy over lost paths ended {}: {:?}{}",
                node.provision_state,
                node.last_error,
                ctx(&vm, &conductor)
            );
            println!("{} deployed", at());
            let console = vm.console();
            anyhow::ensure!(
                console.matches("table reloaded over").count() > reloads,
                "the path added back was not put in the table{}",
                ctx(&vm, &conductor)
            );
            anyhow::ensure!(
                console.matches("its I/O now fails").count() == 1,
                "the second deploy's outage was failed too{}",
                ctx(&vm, &conductor)
            );
            Ok((lun_after_failure, failed_with, lun_zero, console))
        })
        .and_then(|r| r);
    let (lun_after_failure, failed_with, lun_zero, console) =
        outcome.unwrap_or_else(|e| panic!("{e:#}"));
    let ctx = format!("\n--- console ({}) ---\n{console}", net.logs.display());

    let error = failed_with.unwrap_or_else(|| panic!("no last_error{ctx}"));
    assert!(
        error.contains("mpatha") && error.contains(&format!("no usable path for {QUEUE_SECS} s")),
        "the error does not say the LUN had no path: {error}{ctx}"
    );
    assert!(
        lun_after_failure.is_empty(),
        "the failed deploy left signatures on the LUN: {lun_after_failure}{ctx}"
    );
    assert!(lun_zero, "the erase left data on the LUN{ctx}");
    // The image on the LUN, byte for byte between its partition tables
    // (the agent moves the backup GPT to the disk's end).
    assert!(
        bytes(&lun, MIB, IMAGE_SIZE - MIB) == bytes(&img, MIB, IMAGE_SIZE - MIB),
        "the LUN does not hold the image{ctx}"
    );
    assert!(
        direct::partitions(&lun).len() == 1,
        "the LUN's partition table: {:?}{ctx}",
        direct::partitions(&lun)
    );
    assert!(
        signatures(&plain).is_empty(),
        "the other disk was written{ctx}"
    );
    println!("{} all checked", at());
}
