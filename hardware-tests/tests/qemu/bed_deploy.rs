//! Issue #7's deploy suites on the QEMU test bed: a VM PXE-boots the deploy
//! ramdisk, the test conductor deploys the bootable test image (raw,
//! sha256, a config drive with a random uuid) as Ironic 39's `direct`
//! deploy does, the node goes `active` and the agent powers the VM off;
//! then the same machine (same disk file, same OVMF NVRAM) boots from its
//! disk and the deployed system prints its marker and its config drive's
//! `meta_data.json`. Under UEFI the boot entry OVMF starts is the one the
//! agent's `install_bootloader` wrote (`ironic1`). Faults: the image server
//! drops the connection mid-image (the agent resumes), a wrong checksum
//! (`deploy failed`, nothing boots), the conductor restarting mid-deploy.
//! Each flow prints its wall times.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use agent::testconductor::{BootMode, DeployRequest, ImageInfo, Settings, TestConductor};
use agent_testkit::image_server::{Fault, ImageServer};
use hardware_tests::bed::deploy::{self, Event, Target};
use hardware_tests::bed::{self, Net, NetOptions, BRIDGE_IP};
use hardware_tests::require_root;
use hardware_tests::testimage::{self, TestImage};
use serde_json::json;

const ARGS: &str = "console=ttyS0 quiet panic=-1";

/// What goes wrong in a flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Trouble {
    None,
    /// The first GET of the image is cut after 24 MiB.
    DropMidImage,
    /// The conductor is told a wrong sha256.
    WrongChecksum,
    /// The conductor crashes once `write_image` was sent and is back 8 s later.
    ConductorRestart,
}

/// One image for the whole file (built once; each flow has its own disk).
fn image() -> &'static (TestImage, String) {
    static IMAGE: OnceLock<(TestImage, String)> = OnceLock::new();
    IMAGE.get_or_init(|| {
        let dir = hardware_tests::repo_root().join("target/bed-deploy-image");
        let marker = format!("deploy-{:016x}", fastrand::u64(..));
        let t = Instant::now();
        let img = testimage::build(&dir, &marker).expect("building the test image");
        let sha = deploy::sha256_file(&img.raw).unwrap();
        println!(
            "test image {} built in {:.1} s",
            img.raw.display(),
            t.elapsed().as_secs_f64()
        );
        (img, sha)
    })
}

fn flow(name: &str, mac: &str, uefi: bool, trouble: Trouble) {
    require_root("the deploy suite on the QEMU test bed");
    let started = Instant::now();
    let ramdisk = bed::ramdisk_dir().unwrap();
    let (img, sha) = image();
    let net = Net::start(NetOptions::pxe(
        name,
        &ramdisk,
        &format!("{ARGS} ipa-api-url=http://{BRIDGE_IP}:6385"),
    ))
    .unwrap();
    let target = Target::new(&net.logs, "vm", uefi, mac).unwrap();
    let meta_uuid = deploy::random_uuid();
    let work = tempfile::tempdir().unwrap();
    let configdrive =
        deploy::config_drive(work.path(), &json!({"uuid": meta_uuid, "name": name})).unwrap();
    let checksum = if trouble == Trouble::WrongChecksum {
        // Same length, one digit changed: a believable but wrong digest.
        let flipped = if sha.starts_with('0') { "1" } else { "0" };
        format!("{flipped}{}", &sha[1..])
    } else {
        sha.clone()
    };
    let outcome = net
        .block_on(async {
            let settings = Settings {
                command_poll_interval: Duration::from_secs(2),
                ..Settings::default()
            };
            let mut conductor =
                TestConductor::start_on(settings, format!("{BRIDGE_IP}:6385").parse()?).await?;
            let server = ImageServer::start_on(format!("{BRIDGE_IP}:0").parse()?)?;
            // Ironic's HEAD of the image comes first and takes the first entry.
            let script: &[Fault] = match trouble {
                Trouble::DropMidImage => &[Fault::None, Fault::DropAfter(24 << 20)],
                _ => &[],
            };
            server.route("/images/testimage.raw", &img.raw, script, Fault::None);
            let uuid = conductor.enroll(&[mac]);
            conductor.make_available(&uuid)?;
            conductor.start_deploy(
                &uuid,
                DeployRequest {
                    image_info: ImageInfo::raw_sha256(
                        &server.url("/images/testimage.raw"),
                        &checksum,
                    ),
                    configdrive: Some(configdrive),
                    boot_mode: if uefi { BootMode::Uefi } else { BootMode::Bios },
                    root_device: None,
                },
            )?;
            let mut vm = target.pxe(&net)?;
            if trouble == Trouble::ConductorRestart {
                let deadline = Instant::now() + Duration::from_secs(300);
                while !conductor
                    .transcript()
                    .iter()
                    .any(|l| l.contains("deploy.execute_deploy_step"))
                {
                    anyhow::ensure!(Instant::now() < deadline, "write_image was never sent");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                conductor = conductor.restart(Duration::from_secs(8)).await?;
            }
            let want = if trouble == Trouble::WrongChecksum {
                "deploy failed"
            } else {
                "active"
            };
            let node =
                deploy::watch_deploy(&conductor, &uuid, &[want], Duration::from_secs(420), |e| {
                    match e {
                        Event::State(s) => println!("{name}: {:>5.1} s node {s}", vm_secs(started)),
                        Event::Progress(p) => {
                            println!(
                                "{name}: {:>5.1} s {}",
                                vm_secs(started),
                                deploy::progress_line(&p)
                            )
                        }
                    }
                })
                .await?;
            let deployed_at = started.elapsed();
            if node.provision_state == "active" {
                // The agent's standby.power_off ends QEMU (-no-reboot).
                tokio::task::block_in_place(|| vm.wait_exit(Duration::from_secs(120)))?;
            }
            // Ironic powers a failed node off through its BMC.
            vm.kill();
            let pxe_console = vm.console();
            drop(vm);
            let off_at = started.elapsed();
            let mut disk = target.disk_boot(&net)?;
            let boot = tokio::task::block_in_place(|| {
                if node.provision_state == "active" {
                    deploy::wait_booted(
                        &mut disk,
                        &testimage::marker_line(&img.marker),
                        Duration::from_secs(300),
                    )
                    .map(Some)
                } else {
                    wait_any(
                        &mut disk,
                        testimage::no_boot_lines(),
                        Duration::from_secs(180),
                    )
                    .map(|_| None)
                }
            });
            let disk_console = disk.console();
            drop(disk);
            anyhow::Ok((
                node,
                conductor.transcript(),
                server.seen(),
                pxe_console,
                disk_console,
                boot,
                deployed_at,
                off_at,
            ))
        })
        .unwrap();
    let (node, transcript, seen, pxe_console, disk_console, boot, deployed_at, off_at) =
        outcome.unwrap_or_else(|e| panic!("{name}: {e:#} (consoles in {})", net.logs.display()));
    let ctx = format!(
        "\n--- transcript ---\n{}\n--- logs: {} ---",
        transcript.join("\n"),
        net.logs.display()
    );
    let _ = pxe_console;
    println!(
        "{name}: {} after {:.1} s, machine off at {:.1} s, total {:.1} s",
        node.provision_state,
        deployed_at.as_secs_f64(),
        off_at.as_secs_f64(),
        started.elapsed().as_secs_f64()
    );

    if trouble == Trouble::WrongChecksum {
        let err = node.last_error.clone().unwrap_or_default();
        assert!(
            err.contains("deploy.write_image failed") && err.contains(&checksum),
            "last_error: {err}{ctx}"
        );
        assert_eq!(
            node.agent_logs.len(),
            1,
            "the agent's logs were collected{ctx}"
        );
        boot.unwrap_or_else(|e| panic!("{e:#}{ctx}"));
        assert!(
            !disk_console.contains(&testimage::marker_line(&img.marker)),
            "the disk still booted after a failed deploy{ctx}"
        );
        return;
    }

    assert_eq!(node.provision_state, "active", "{ctx}");
    let booted = boot
        .unwrap_or_else(|e| panic!("booting from disk: {e:#}{ctx}"))
        .expect("active");
    println!(
        "{name}: deployed system printed its marker {:.1} s after power-on",
        booted.as_secs_f64()
    );
    let meta = testimage::meta_data(&disk_console)
        .unwrap_or_else(|| panic!("no meta_data.json on the console{ctx}"));
    let meta: serde_json::Value =
        serde_json::from_str(&meta).unwrap_or_else(|e| panic!("{e}: {meta}{ctx}"));
    assert_eq!(meta["uuid"], meta_uuid.as_str(), "{ctx}");

    let calls: Vec<&String> = transcript
        .iter()
        .filter(|l| l.starts_with("C->A POST"))
        .collect();
    let bootloader = calls.iter().any(|l| l.contains("image.install_bootloader"));
    assert_eq!(
        bootloader, uefi,
        "install_bootloader only under UEFI: {calls:#?}"
    );
    if uefi {
        let entry = deploy::uefi_boot_entry(&disk_console)
            .unwrap_or_else(|| panic!("OVMF named no boot entry{ctx}"));
        println!("{name}: OVMF: {entry}");
        assert!(
            entry.contains("\"ironic1\""),
            "OVMF did not start the agent's entry: {entry}{ctx}"
        );
    }
    match trouble {
        Trouble::DropMidImage => {
            let ranged: Vec<_> = seen.iter().filter(|r| r.range.is_some()).collect();
            assert!(
                !ranged.is_empty(),
                "no resumed (Range) request: {seen:?}{ctx}"
            );
        }
        Trouble::ConductorRestart => {
            let i = transcript
                .iter()
                .position(|l| l == "C: conductor started again")
                .unwrap();
            assert!(
                transcript[i..]
                    .iter()
                    .any(|l| l.contains("/v1/heartbeat/") && l.ends_with("-> 202")),
                "no heartbeat reached the restarted conductor{ctx}"
            );
        }
        _ => {}
    }
}

fn vm_secs(started: Instant) -> f64 {
    started.elapsed().as_secs_f64()
}

/// Waits until one of `needles` is on the console.
fn wait_any(vm: &mut bed::Vm<'_>, needles: &[&str], timeout: Duration) -> anyhow::Result<String> {
    let deadline = Instant::now() + timeout;
    loop {
        let console = vm.console();
        if let Some(n) = needles.iter().find(|n| console.contains(**n)) {
            return Ok(n.to_string());
        }
        if let Some(status) = vm.exited()? {
            anyhow::bail!(
                "QEMU exited ({status}) before the firmware gave up; console: {}",
                vm.console_path().display()
            );
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "none of {needles:?} within {timeout:?}; console: {}",
            vm.console_path().display()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn bios_deploy_then_boot_from_disk() {
    flow("deploy-bios", "52:54:00:d0:00:01", false, Trouble::None);
}

#[test]
fn uefi_deploy_then_boot_the_agents_nvram_entry() {
    flow("deploy-uefi", "52:54:00:d0:00:02", true, Trouble::None);
}

#[test]
fn image_download_dropped_mid_image_is_resumed() {
    flow(
        "deploy-drop",
        "52:54:00:d0:00:03",
        false,
        Trouble::DropMidImage,
    );
}

#[test]
fn wrong_checksum_fails_and_nothing_boots() {
    flow(
        "deploy-badsum",
        "52:54:00:d0:00:04",
        false,
        Trouble::WrongChecksum,
    );
}

#[test]
fn conductor_restart_mid_deploy_is_survived() {
    flow(
        "deploy-restart",
        "52:54:00:d0:00:05",
        false,
        Trouble::ConductorRestart,
    );
}
