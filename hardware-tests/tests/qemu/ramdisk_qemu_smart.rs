//! `burnin_disk` with `agent_burnin_fio_disk_smart_test` in the deploy
//! ramdisk, driven by the stand-in conductor's manual clean: after the
//! burn-in the agent starts the extended SMART self-test on the SATA (AHCI)
//! disk through SG_IO and reads its result from the SMART data (QEMU's
//! IDE/AHCI emulation answers both, and reports the test completed without
//! error); the virtio disk has no ATA pass-through and is left out with the
//! reason, as IPA 13 drops a disk without a self-test status; the NVMe disk's
//! SMART / Health log page is read through the admin passthrough before and
//! after the burn-in (QEMU's controller counts the data units written, so
//! the burn-in's writes must show between the two). The clean must end
//! `manageable` and the console name every outcome.

use std::time::Duration;

use std::path::Path;

use hardware_tests::bed::direct;
use hardware_tests::bed::{self, qmp, Bus, Disk, Net, NetOptions, Vm};
use hardware_tests::require_root;
use serde_json::json;

const MAC: &str = "52:54:00:12:34:5d";
const MIB: u64 = 1 << 20;

#[test]
fn burnin_disk_runs_the_smart_self_test_on_a_sata_disk() {
    require_root("the QEMU SMART test");
    let ramdisk = bed::ramdisk_dir().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let disks = vec![
        Disk {
            path: tmp.path().join("sata.img"),
            size: 64 * MIB,
            bus: Bus::Sata,
            serial: "SMART0001".into(),
            model: None,
        },
        Disk {
            path: tmp.path().join("virtio.img"),
            size: 64 * MIB,
            bus: Bus::Virtio,
            serial: "SMART0002".into(),
            model: None,
        },
        Disk {
            path: tmp.path().join("nvme.img"),
            size: 64 * MIB,
            bus: Bus::Nvme,
            serial: "SMART0003".into(),
            model: None,
        },
    ];
    let (cleaned, console, transcript) = burn_in("smart", &ramdisk, &disks, None);
    let ctx = format!(
        "\n--- transcript ---\n{}\n--- console ---\n{console}",
        transcript.join("\n")
    );
    cleaned.unwrap_or_else(|e| panic!("the burn-in clean did not finish: {e:#}{ctx}"));
    let line = |needle: &str| console.lines().any(|l| l.contains(needle));
    assert!(
        line("SMART extended self-test started") && line("passed the SMART self-test"),
        "the SATA disk's self-test did not run and pass{ctx}"
    );
    assert!(
        line("no SMART self-test"),
        "the virtio disk was not left out with a reason{ctx}"
    );
    let written = |phase: &str| -> u64 {
        console
            .lines()
            .find(|l| l.contains(&format!("NVMe health {phase} the burn-in")))
            .and_then(|l| l.split("data_units_written: ").nth(1))
            .and_then(|r| r.split(|c: char| !c.is_ascii_digit()).next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no NVMe health {phase} the burn-in{ctx}"))
    };
    let (before, after) = (written("before"), written("after"));
    // One pass of 64 MiB: 131 units of 1000 × 512 bytes.
    assert!(
        after >= before + 131,
        "the NVMe log counted {before} then {after} data units written{ctx}"
    );
    assert!(
        line("NVMe health after the burn-in") && line("problems=[]"),
        "the NVMe disk's health was not found healthy{ctx}"
    );
}

/// The manual clean with `burnin_disk` and the SMART knob on a ramdisk
/// machine with `disks`, on a bed network `name` (logs under it); with `warn`, QMP sets the Critical Warning bits
/// of the NVMe controller at /machine/peripheral/`warn.0` to `warn.1` as
/// soon as the machine starts (QEMU's `smart_critical_warning`).
fn burn_in(
    name: &str,
    ramdisk: &Path,
    disks: &[Disk],
    warn: Option<(&str, u8)>,
) -> (
    anyhow::Result<agent::testconductor::Node>,
    String,
    Vec<String>,
) {
    let mut opts = NetOptions::pxe(name, ramdisk, "");
    opts.ramdisk = None;
    let net = Net::start(opts).unwrap();
    let mut spec = direct::ramdisk_spec(ramdisk, MAC, disks, "");
    spec.qmp = warn.is_some();
    net.block_on(async {
        let conductor = direct::conductor().await;
        let uuid = conductor.enroll(&[MAC]);
        conductor.update_node(&uuid, |n| {
            n.driver_info = json!({"agent_burnin_fio_disk_smart_test": true,
                                       "agent_burnin_fio_disk_loops": 1});
        });
        conductor
            .start_clean(
                &uuid,
                Some(vec![
                    json!({"interface": "deploy", "step": "burnin_disk", "args": {}}),
                ]),
            )
            .unwrap();
        let vm = Vm::start(&net, &spec).unwrap();
        if let (Some((device, bits)), Some(socket)) = (warn, vm.qmp_socket()) {
            let path = format!("/machine/peripheral/{device}");
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            while let Err(e) = qmp::command(
                socket,
                "qom-set",
                json!({"path": path, "property": "smart_critical_warning", "value": bits}),
            ) {
                assert!(std::time::Instant::now() < deadline, "QMP qom-set: {e:#}");
                std::thread::sleep(Duration::from_millis(200));
            }
        }
        let cleaned = conductor
            .wait_for_state(&uuid, "manageable", Duration::from_secs(240))
            .await;
        println!(
            "burn-in with SMART done {:?} after starting QEMU",
            vm.elapsed()
        );
        (cleaned, vm.console(), conductor.transcript())
    })
    .unwrap()
}

#[test]
fn burnin_disk_fails_on_an_nvme_critical_warning() {
    require_root("the QEMU SMART test");
    let ramdisk = bed::ramdisk_dir().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let disks = vec![Disk {
        path: tmp.path().join("nvme.img"),
        size: 64 * MIB,
        bus: Bus::Nvme,
        serial: "SMART0004".into(),
        model: None,
    }];
    // Bit 3: the media are read-only (QEMU lets bits 0-3 be set).
    let (cleaned, console, transcript) =
        burn_in("smart-warn", &ramdisk, &disks, Some(("nvme0", 0b1000)));
    let ctx = format!(
        "\n--- transcript ---\n{}\n--- console ---\n{console}",
        transcript.join("\n")
    );
    let e = match cleaned {
        Ok(node) => panic!("the clean ended {}{ctx}", node.provision_state),
        Err(e) => format!("{e:#}"),
    };
    assert!(
        e.contains("NVMe health")
            && e.contains("/dev/nvme0n1: critical warning: the media are read-only"),
        "{e}{ctx}"
    );
}
