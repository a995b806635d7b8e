//! Secure Boot on the QEMU test bed: OVMF built with Secure Boot, its
//! NVRAM from `OVMF_VARS_4M.ms.fd` (Microsoft's keys enrolled, Secure Boot
//! enforced), PXE-boots the full-coverage ramdisk through Debian's signed
//! chain that image-builder writes: `shimx64.efi` (signed by Microsoft)
//! over TFTP, which loads `grubx64.efi` (signed by Debian), which reads
//! `grub/grub.cfg` and boots Debian's signed kernel with the initramfs.
//! Then the agent looks the node up, heartbeats and runs a manual clean
//! (`erase_devices_metadata` of a virtio disk that carries a GPT).
//!
//! Proof that Secure Boot was on: the kernel's own log line
//! (`Secure boot enabled`, printed when the firmware says so), its
//! lockdown notice, and init's reading of the `SecureBoot` EFI variable and
//! of the lockdown mode (`phase firmware: secure boot on, lockdown
//! integrity`). Every module loaded under lockdown, so Debian's signatures
//! were accepted (no module failure on the console).

use std::process::Command;
use std::time::Duration;

use agent::testconductor::{Settings, TestConductor};
use hardware_tests::bed::{self, Bus, Disk, Firmware, Net, NetOptions, Nic, Vm, VmSpec, BRIDGE_IP};
use hardware_tests::{require_root, run};

const MAC: &str = "52:54:00:5b:00:01";

#[test]
fn secure_boot_through_shim_and_grub_heartbeats_and_cleans() {
    require_root("the Secure Boot test");
    let ramdisk = bed::ramdisk_dir().unwrap();
    for f in ["shimx64.efi", "grubx64.efi"] {
        assert!(
            ramdisk.join(f).exists(),
            "{} lacks {f}: build it with image-builder/build.sh",
            ramdisk.display()
        );
    }
    let tmp = tempfile::tempdir().unwrap();
    let disk = tmp.path().join("disk.img");
    std::fs::File::create(&disk)
        .unwrap()
        .set_len(64 << 20)
        .unwrap();
    let script = tmp.path().join("gpt.sfdisk");
    std::fs::write(&script, "label: gpt\n,,L\n").unwrap();
    run(Command::new("sfdisk")
        .arg("-q")
        .arg(&disk)
        .stdin(std::fs::File::open(&script).unwrap()))
    .unwrap();
    // No `quiet`: the kernel's Secure Boot and lockdown lines are the proof.
    let args = format!("ipa-api-url=http://{BRIDGE_IP}:6385 agent.dhcp-timeout=10");
    let opts = NetOptions {
        secure_boot_chain: true,
        ..NetOptions::pxe("secureboot", &ramdisk, &args)
    };
    let net = Net::start(opts).unwrap();
    let mut spec = VmSpec::new("sb");
    spec.memory_mb = 1024;
    spec.firmware = Firmware::UefiSecureBoot {
        vars: tmp.path().join("OVMF_VARS.fd"),
    };
    spec.nics.push(Nic { mac: MAC.into() });
    spec.disks.push(Disk {
        path: disk.clone(),
        size: 64 << 20,
        bus: Bus::Virtio,
        serial: "SECBOOT1".into(),
        model: None,
    });
    let (outcome, console, transcript) = net
        .block_on(async {
            let conductor = TestConductor::start_on(
                Settings::default(),
                format!("{BRIDGE_IP}:6385").parse().unwrap(),
            )
            .await
            .unwrap();
            let uuid = conductor.enroll(&[MAC]);
            let erase = serde_json::json!(
                {"interface": "deploy", "step": "erase_devices_metadata", "args": {}});
            conductor.start_clean(&uuid, Some(vec![erase])).unwrap();
            let mut vm = Vm::start(&net, &spec).unwrap();
            let outcome = conductor
                .wait_for_state(&uuid, "manageable", Duration::from_secs(600))
                .await;
            println!(
                "secure boot: clean done {:?} after starting QEMU",
                vm.elapsed()
            );
            vm.kill();
            (outcome, vm.console(), conductor.transcript())
        })
        .unwrap();
    let ctx = format!(
        "\n--- transcript ---\n{}\n--- dnsmasq ---\n{}\n--- console ({}) ---\n{console}",
        transcript.join("\n"),
        net.dnsmasq_log(),
        net.logs.display()
    );
    outcome.unwrap_or_else(|e| panic!("{e:#}{ctx}"));
    let tftp = net.dnsmasq_log();
    for f in [
        "shimx64.efi",
        "grubx64.efi",
        "grub/grub.cfg",
        "deploy.kernel",
    ] {
        assert!(tftp.contains(f), "{f} was not fetched over TFTP{ctx}");
    }
    assert!(
        !tftp.contains("snponly.efi"),
        "iPXE was booted instead of shim{ctx}"
    );
    assert!(
        console.contains("Secure boot enabled"),
        "the kernel did not report Secure Boot{ctx}"
    );
    assert!(
        console.contains("Kernel is locked down from EFI Secure Boot"),
        "the kernel did not lock down{ctx}"
    );
    assert!(
        console.contains("phase firmware: secure boot on, lockdown integrity"),
        "init did not read Secure Boot on and lockdown{ctx}"
    );
    assert!(
        !console.contains("refused by the kernel's lockdown"),
        "a module was refused under lockdown{ctx}"
    );
    assert!(
        transcript.iter().any(|l| l.contains("heartbeat")),
        "no heartbeat{ctx}"
    );
    let left = run(Command::new("wipefs").arg("--no-act").arg(&disk)).unwrap_or_default();
    assert!(left.is_empty(), "the clean left signatures: {left}{ctx}");
}
