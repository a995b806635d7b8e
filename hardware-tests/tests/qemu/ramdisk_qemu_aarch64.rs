//! The aarch64 deploy ramdisk (issue 33; `image-builder/build.sh --arch
//! aarch64`) in an emulated Arm server: QEMU's `virt` board with a
//! Cortex-A57 under TCG and AAVMF, Arm's UEFI, which starts the kernel QEMU
//! hands it. PID 1 loads the virtio drivers, DHCP gets the bed's lease, and
//! the agent is inspected by the stand-in conductor (the stored inventory
//! must say `aarch64`, the core's name decoded from cpuinfo, and the SMBIOS
//! identity AAVMF publishes), then looks the node up, heartbeats and runs a
//! manual clean (erase_devices_metadata of a virtual disk with a GPT).
//!
//! Secure Boot on Arm: the same machine with AAVMF's Microsoft-keyed NVRAM
//! (`AAVMF_VARS.ms.fd`, Secure Boot enforcing) network-boots the ramdisk
//! through Debian's signed arm64 chain (`shimaa64.efi` → `grubaa64.efi` →
//! `deploy.kernel.signed`, the signed uncompressed Image, over TFTP: shim
//! refuses the gzipped `deploy.kernel`, "bad shim signature"); the kernel
//! must say Secure Boot is on, the agent must report lockdown, and
//! inspection must complete.

use std::process::Command;
use std::time::Duration;

use hardware_tests::bed::{
    self, direct, Boot, Bus, Disk, Firmware, Net, NetOptions, Nic, Vm, VmSpec, BRIDGE_IP,
};
use hardware_tests::{require_root, run};

const MAC: &str = "52:54:00:12:34:a6";

#[test]
fn aarch64_ramdisk_is_inspected_looks_up_and_heartbeats_under_aavmf() {
    require_root("the aarch64 QEMU ramdisk test");
    let ramdisk = bed::aarch64_ramdisk_dir().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let disk = tmp.path().join("disk.img");
    hardware_tests::bed::dirty_disk::gpt(&disk, 64 << 20).unwrap();
    let mut opts = NetOptions::pxe("aarch64", &ramdisk, "");
    opts.ramdisk = None;
    let net = Net::start(opts).unwrap();
    let disks = [Disk {
        path: disk.clone(),
        size: 64 << 20,
        bus: Bus::Virtio,
        serial: "ARM64DISK1".into(),
        model: None,
    }];
    let inspect =
        format!("ipa-inspection-callback-url=http://{BRIDGE_IP}:6385/v1/continue_inspection");
    let spec = direct::aarch64_ramdisk_spec(
        &ramdisk,
        &tmp.path().join("AAVMF_VARS.fd"),
        MAC,
        &disks,
        &inspect,
    );
    let (inspected, cleaned, console, transcript, times) = net
        .block_on(async {
            let conductor = direct::conductor().await;
            let uuid = conductor.enroll(&[MAC]);
            conductor.start_inspect(&uuid).unwrap();
            let vm = Vm::start(&net, &spec).unwrap();
            let inspected = conductor
                .wait_for_state(&uuid, "manageable", Duration::from_secs(150))
                .await;
            let inspected_at = vm.elapsed();
            let erase = serde_json::json!(
                {"interface": "deploy", "step": "erase_devices_metadata", "args": {}});
            let cleaned = match conductor.start_clean(&uuid, Some(vec![erase])) {
                Ok(()) => {
                    conductor
                        .wait_for_state(&uuid, "manageable", Duration::from_secs(90))
                        .await
                }
                Err(e) => Err(e),
            };
            let times = format!(
                "aarch64 direct boot under AAVMF: inspected {inspected_at:?}, clean done {:?} after starting QEMU",
                vm.elapsed()
            );
            (inspected, cleaned, vm.console(), conductor.transcript(), times)
        })
        .unwrap();
    println!("{times}");
    let ctx = format!(
        "\n--- transcript ---\n{}\n--- console ({}) ---\n{console}",
        transcript.join("\n"),
        net.logs.display()
    );
    let node = inspected.unwrap_or_else(|e| panic!("inspection: {e:#}{ctx}"));
    let inv = node
        .inspection_data
        .as_ref()
        .map(|d| d["inventory"].clone())
        .unwrap_or_else(|| panic!("no inspection data{ctx}"));
    let ictx = format!("\ninventory: {inv:#}{ctx}");
    assert_eq!(inv["cpu"]["architecture"], "aarch64", "{ictx}");
    assert_eq!(inv["cpu"]["model_name"], "Cortex-A57", "{ictx}");
    assert_eq!(inv["cpu"]["count"], 1, "{ictx}");
    assert!(
        inv["cpu"]["flags"]
            .as_array()
            .is_some_and(|f| f.iter().any(|x| x == "asimd")),
        "the Arm feature flags are missing{ictx}"
    );
    assert_eq!(inv["boot"]["current_boot_mode"], "uefi", "{ictx}");
    assert_eq!(inv["system_vendor"]["manufacturer"], "QEMU", "{ictx}");
    let disk_seen = inv["disks"]
        .as_array()
        .is_some_and(|d| d.iter().any(|x| x["serial"] == "ARM64DISK1"));
    assert!(disk_seen, "the virtio disk is not in the inventory{ictx}");

    cleaned.unwrap_or_else(|e| panic!("clean: {e:#}{ctx}"));
    assert!(
        transcript
            .iter()
            .any(|l| l.contains("GET /v1/lookup") && l.ends_with("-> 200")),
        "no successful lookup{ctx}"
    );
    assert!(
        transcript.iter().any(|l| l.contains("heartbeat")),
        "no heartbeat{ctx}"
    );
    let left = run(Command::new("wipefs").arg("--no-act").arg(&disk)).unwrap_or_default();
    assert!(left.is_empty(), "the clean left signatures: {left}{ctx}");
}

const SB_MAC: &str = "52:54:00:12:34:a7";

#[test]
fn aarch64_ramdisk_network_boots_through_the_signed_chain_with_secure_boot_on() {
    require_root("the aarch64 Secure Boot test");
    let ramdisk = bed::aarch64_ramdisk_dir().unwrap();
    for f in ["shimaa64.efi", "grubaa64.efi", "deploy.kernel.signed"] {
        assert!(
            ramdisk.join(f).exists(),
            "{} lacks {f}: build it with image-builder/build.sh --arch aarch64",
            ramdisk.display()
        );
    }
    let tmp = tempfile::tempdir().unwrap();
    // No `quiet`: the kernel's Secure Boot and lockdown lines are the proof.
    let args = format!(
        "ipa-api-url=http://{BRIDGE_IP}:6385 agent.dhcp-timeout=10 \
         ipa-inspection-callback-url=http://{BRIDGE_IP}:6385/v1/continue_inspection"
    );
    let net = Net::start(NetOptions {
        secure_boot_chain: true,
        ..NetOptions::pxe("arm64sb", &ramdisk, &args)
    })
    .unwrap();
    let mut spec = VmSpec::new("arm64sb");
    spec.arch = image_builder::arch::Arch::Aarch64;
    spec.firmware = Firmware::UefiSecureBoot {
        vars: tmp.path().join("AAVMF_VARS.fd"),
    };
    spec.boot = Boot::Network;
    spec.nics.push(Nic { mac: SB_MAC.into() });
    let (inspected, console, transcript, times) = net
        .block_on(async {
            let conductor = direct::conductor().await;
            let uuid = conductor.enroll(&[SB_MAC]);
            conductor.start_inspect(&uuid).unwrap();
            let vm = Vm::start(&net, &spec).unwrap();
            let inspected = conductor
                .wait_for_state(&uuid, "manageable", Duration::from_secs(300))
                .await;
            let times = format!(
                "aarch64 Secure Boot network boot under AAVMF: inspected {:?} after starting QEMU",
                vm.elapsed()
            );
            (inspected, vm.console(), conductor.transcript(), times)
        })
        .unwrap();
    println!("{times}");
    let ctx = format!(
        "\n--- transcript ---\n{}\n--- dnsmasq ---\n{}\n--- console ({}) ---\n{console}",
        transcript.join("\n"),
        net.dnsmasq_log(),
        net.logs.display()
    );
    let tftp = net.dnsmasq_log();
    for f in [
        "shimaa64.efi",
        "grubaa64.efi",
        "deploy.kernel",
        "deploy.initramfs",
    ] {
        assert!(
            tftp.lines().any(|l| l.contains("sent") && l.contains(f)),
            "{f} was not sent over TFTP{ctx}"
        );
    }
    assert!(
        console.contains("Secure boot enabled"),
        "the kernel does not say Secure Boot is on{ctx}"
    );
    assert!(
        console.contains("phase firmware: secure boot on, lockdown integrity"),
        "the agent does not report Secure Boot and lockdown{ctx}"
    );
    let node = inspected.unwrap_or_else(|e| panic!("inspection: {e:#}{ctx}"));
    let inv = node
        .inspection_data
        .as_ref()
        .map(|d| d["inventory"].clone())
        .unwrap_or_else(|| panic!("no inspection data{ctx}"));
    assert_eq!(inv["cpu"]["architecture"], "aarch64", "{inv:#}{ctx}");
    assert_eq!(inv["boot"]["current_boot_mode"], "uefi", "{inv:#}{ctx}");
}
