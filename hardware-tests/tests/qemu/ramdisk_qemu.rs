//! The built deploy ramdisk booted directly (QEMU `-kernel`/`-initrd`, no
//! firmware or PXE: the fastest path, whose phase times
//! image-builder/README.md quotes) on the QEMU test bed: PID 1 loads the
//! virtio drivers, DHCP gets the bed's fixed lease, the agent finds the
//! test conductor by `ipa-api-url`, looks
//! the node up and heartbeats, and a manual clean (erase_devices_metadata
//! of a virtual disk that carries a GPT) runs end to end. The boot has
//! `agent.shell=1` (a command typed on the serial console must run) and
//! `ipa-enable-vlan-interfaces=eth0.42` (the explicit VLAN interface is
//! created in the guest and asks for DHCP: this machine's kernel has no
//! 8021q, so the guest is the only place to test the ioctl, and nothing
//! answers on VLAN 42).

use std::process::Command;
use std::time::Duration;

use hardware_tests::bed::{self, direct, Bus, Disk, Net, NetOptions, Vm};
use hardware_tests::{require_root, run};

const MAC: &str = "52:54:00:12:34:56";

#[test]
fn ramdisk_boots_looks_up_and_heartbeats_in_qemu() {
    require_root("the QEMU ramdisk test");
    let ramdisk = bed::ramdisk_dir().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let disk = tmp.path().join("disk.img");
    hardware_tests::bed::dirty_disk::gpt(&disk, 64 << 20).unwrap();
    assert!(
        run(Command::new("wipefs").arg("--no-act").arg(&disk))
            .unwrap()
            .contains("gpt"),
        "the test disk has no GPT"
    );
    let mut opts = NetOptions::pxe("direct", &ramdisk, "");
    opts.ramdisk = None;
    let net = Net::start(opts).unwrap();
    let disks = [Disk {
        path: disk.clone(),
        size: 64 << 20,
        bus: Bus::Virtio,
        serial: "DIRECT01".into(),
        model: None,
    }];
    let spec = direct::ramdisk_spec(
        &ramdisk,
        MAC,
        &disks,
        "agent.shell=1 ipa-enable-vlan-interfaces=eth0.42 agent.dhcp-timeout=4",
    );
    let (outcome, shell, console, transcript, heartbeat_at) = net
        .block_on(async {
            let conductor = direct::conductor().await;
            let uuid = conductor.enroll(&[MAC]);
            let erase = serde_json::json!(
                {"interface": "deploy", "step": "erase_devices_metadata", "args": {}});
            conductor.start_clean(&uuid, Some(vec![erase])).unwrap();
            let mut vm = Vm::start(&net, &spec).unwrap();
            let mut heartbeat_at = None;
            let deadline = tokio::time::Instant::now() + Duration::from_secs(240);
            while heartbeat_at.is_none() && tokio::time::Instant::now() < deadline {
                if conductor.transcript().iter().any(|l| l.contains("heartbeat")) {
                    heartbeat_at = Some(vm.elapsed());
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            let outcome = conductor
                .wait_for_state(&uuid, "manageable", Duration::from_secs(120))
                .await;
            println!("direct boot: first heartbeat {heartbeat_at:?}, clean done {:?} after starting QEMU", vm.elapsed());
            vm.type_line("echo shell-ok-$((6*7)); agent --version").unwrap();
            let shell = tokio::task::block_in_place(|| {
                vm.wait_console("shell-ok-42", Duration::from_secs(30))
            });
            // The VLAN's DHCP gives up in the background (agent.dhcp-timeout)
            // and may report after the clean is done: wait for its line
            // (the assertion below fails if it never comes).
            let _ = tokio::task::block_in_place(|| {
                vm.wait_console(&format!("eth0.42 {MAC}: no address"), Duration::from_secs(30))
            });
            (outcome, shell, vm.console(), conductor.transcript(), heartbeat_at)
        })
        .unwrap();
    let ctx = format!(
        "\n--- transcript ---\n{}\n--- console ({}) ---\n{console}",
        transcript.join("\n"),
        net.logs.display()
    );
    outcome.unwrap_or_else(|e| panic!("{e:#}{ctx}"));
    assert!(heartbeat_at.is_some(), "no heartbeat{ctx}");
    assert!(
        transcript
            .iter()
            .any(|l| l.contains("GET /v1/lookup") && l.ends_with("-> 200")),
        "no successful lookup{ctx}"
    );
    assert!(
        console.contains("phase modules done") && console.contains("phase network done"),
        "no init phases on the console{ctx}"
    );
    assert!(
        console.contains(&format!("eth0.42 {MAC}: no address (no DHCP offer")),
        "the explicit VLAN eth0.42 did not ask for DHCP{ctx}"
    );
    shell.unwrap_or_else(|e| panic!("the debug shell did not answer: {e:#}{ctx}"));
    let left = run(Command::new("wipefs").arg("--no-act").arg(&disk)).unwrap_or_default();
    assert!(left.is_empty(), "the clean left signatures: {left}{ctx}");
}
