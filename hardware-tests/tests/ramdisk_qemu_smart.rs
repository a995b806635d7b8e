//! `burnin_disk` with `agent_burnin_fio_disk_smart_test` in the deploy
//! ramdisk, driven by the stand-in conductor's manual clean: after the
//! burn-in the agent starts the extended SMART self-test on the SATA (AHCI)
//! disk through SG_IO and reads its result from the SMART data (QEMU's
//! IDE/AHCI emulation answers both, and reports the test completed without
//! error); the virtio disk has no ATA pass-through and is left out with the
//! reason, as IPA 13 drops a disk without a self-test status. The clean
//! must end `manageable` and the console name both outcomes.

use std::time::Duration;

use hardware_tests::bed::direct;
use hardware_tests::bed::{self, Bus, Disk, Net, NetOptions, Vm};
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
    ];
    let mut opts = NetOptions::pxe("smart", &ramdisk, "");
    opts.ramdisk = None;
    let net = Net::start(opts).unwrap();
    let spec = direct::ramdisk_spec(&ramdisk, MAC, &disks, "");
    let (cleaned, console, transcript) = net
        .block_on(async {
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
            let cleaned = conductor
                .wait_for_state(&uuid, "manageable", Duration::from_secs(240))
                .await;
            println!(
                "burn-in with SMART done {:?} after starting QEMU",
                vm.elapsed()
            );
            (cleaned, vm.console(), conductor.transcript())
        })
        .unwrap();
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
}
