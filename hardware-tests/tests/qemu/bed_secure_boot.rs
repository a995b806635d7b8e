//! Secure Boot on the QEMU test bed: OVMF built with Secure Boot, its
//! NVRAM from `OVMF_VARS_4M.ms.fd` (Microsoft's keys enrolled, Secure Boot
//! enforced), PXE-boots the full-coverage ramdisk through Debian's signed
//! chain that image-builder writes: `shimx64.efi` (signed by Microsoft)
//! over TFTP, which loads `grubx64.efi` (signed by Debian), which reads
//! `grub/grub.cfg` and boots Debian's signed kernel with the initramfs.
//!
//! Then, in that one boot and under the kernel's lockdown, the agent does
//! everything it touches hardware with (`agent/crates/devices/src/lockdown.rs` lists what
//! lockdown refuses and what the agent calls):
//!
//! * **IPMI**: the machine has a BMC (QEMU's `ipmi-bmc-sim` behind KCS);
//!   inspection loads `ipmi_si` (found by ACPI, no `ports=` parameter,
//!   which lockdown forbids) and asks the BMC over `/dev/ipmi0`: the BMC's
//!   answer (completion code 0xC1, QEMU's simulator has no LAN commands) is
//!   on the console and the inventory has IPA's "IPMI present" `0.0.0.0`.
//!   The inspection data carries the boot phases (`boot_phases`).
//! * **Erase ioctls**: a manual clean `erase_devices` of an NVMe disk
//!   (Format NVM with secure erase through the admin passthrough ioctl), a
//!   SATA disk on q35's AHCI (IDENTIFY DEVICE through SG_IO ATA
//!   PASS-THROUGH; QEMU's drive has no security feature set, so the agent
//!   says so and overwrites it) and a virtio disk; both small disks carried
//!   a GPT and have no signature left.
//! * **efivarfs**: a UEFI deploy of the test image onto the NVMe disk, whose
//!   `install_bootloader` writes `Boot####` and `BootOrder`; the machine's
//!   NVRAM file then holds the agent's `ironic1` entry, and the agent powers
//!   the machine off (`reboot(2)`).
//!
//! No error on the console names lockdown.
//!
//! Proof that Secure Boot was on: the kernel's own log line
//! (`Secure boot enabled`, printed when the firmware says so), its
//! lockdown notice, and init's reading of the `SecureBoot` EFI variable and
//! of the lockdown mode (`phase firmware: secure boot on, lockdown
//! integrity`). Every module loaded under lockdown, so Debian's signatures
//! were accepted (no module failure on the console).

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use agent::testconductor::{BootMode, DeployRequest, ImageInfo, Settings, TestConductor};
use agent_testkit::image_server::{Fault, ImageServer};
use hardware_tests::bed::deploy;
use hardware_tests::bed::{self, Bus, Disk, Firmware, Net, NetOptions, Nic, Vm, VmSpec, BRIDGE_IP};
use hardware_tests::{require_root, run, testimage};

const MAC: &str = "52:54:00:5b:00:01";
const MIB: u64 = 1 << 20;

/// A file of `size` bytes with a GPT and one Linux partition.
fn gpt_disk(path: &Path, size: u64) {
    std::fs::File::create(path).unwrap().set_len(size).unwrap();
    let script = path.with_extension("sfdisk");
    std::fs::write(&script, "label: gpt\n,,L\n").unwrap();
    run(Command::new("sfdisk")
        .arg("-q")
        .arg(path)
        .stdin(std::fs::File::open(&script).unwrap()))
    .unwrap();
}

/// `s` as UTF-16LE bytes (how UEFI stores a boot entry's description).
fn utf16(s: &str) -> Vec<u8> {
    s.encode_utf16().flat_map(u16::to_le_bytes).collect()
}

#[test]
fn secure_boot_through_shim_and_grub_with_ipmi_erase_ioctls_and_boot_entries() {
    require_root("the Secure Boot test");
    let started = Instant::now();
    let ramdisk = bed::ramdisk_dir().unwrap();
    for f in ["shimx64.efi", "grubx64.efi"] {
        assert!(
            ramdisk.join(f).exists(),
            "{} lacks {f}: build it with image-builder/build.sh",
            ramdisk.display()
        );
    }
    let tmp = tempfile::tempdir().unwrap();
    let img = testimage::build(&tmp.path().join("image"), "secureboot-deployed").unwrap();
    let sha = deploy::sha256_file(&img.raw).unwrap();
    let sata = tmp.path().join("sata.img");
    let virtio = tmp.path().join("virtio.img");
    gpt_disk(&sata, 32 * MIB);
    gpt_disk(&virtio, 32 * MIB);
    // No `quiet`: the kernel's Secure Boot and lockdown lines are the proof.
    let args = format!(
        "ipa-api-url=http://{BRIDGE_IP}:6385 agent.dhcp-timeout=10 \
         ipa-inspection-callback-url=http://{BRIDGE_IP}:6385/v1/continue_inspection"
    );
    let opts = NetOptions {
        secure_boot_chain: true,
        ..NetOptions::pxe("secureboot", &ramdisk, &args)
    };
    let net = Net::start(opts).unwrap();
    let vars = tmp.path().join("OVMF_VARS.fd");
    let mut spec = VmSpec::new("sb");
    spec.memory_mb = 1024;
    spec.firmware = Firmware::UefiSecureBoot { vars: vars.clone() };
    spec.ipmi = true;
    spec.nics.push(Nic { mac: MAC.into() });
    spec.disks = vec![
        Disk {
            path: tmp.path().join("nvme.img"),
            // The only disk of at least 4 GiB: the deploy's root device.
            size: 5 << 30,
            bus: Bus::Nvme,
            serial: "SBNVME01".into(),
            model: None,
        },
        Disk {
            path: sata.clone(),
            size: 32 * MIB,
            bus: Bus::Sata,
            serial: "SBSATA01".into(),
            model: Some("BED SATA DISK".into()),
        },
        Disk {
            path: virtio.clone(),
            size: 32 * MIB,
            bus: Bus::Virtio,
            serial: "SBVIRT01".into(),
            model: None,
        },
    ];
    println!(
        "image and disks ready after {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let outcome = net
        .block_on(async {
            let settings = Settings {
                command_poll_interval: Duration::from_secs(2),
                ..Settings::default()
            };
            let conductor =
                TestConductor::start_on(settings, format!("{BRIDGE_IP}:6385").parse()?).await?;
            let server = ImageServer::start_on(format!("{BRIDGE_IP}:0").parse()?)?;
            server.route("/images/testimage.raw", &img.raw, &[], Fault::None);
            let uuid = conductor.enroll(&[MAC]);
            conductor.start_inspect(&uuid)?;
            let mut vm = Vm::start(&net, &spec)?;
            let step = |what: &str, vm: &Vm<'_>| {
                println!(
                    "secure boot: {what} {:.1} s after starting QEMU",
                    vm.elapsed().as_secs_f64()
                )
            };
            let result = async {
                let inspected = conductor
                    .wait_for_state(&uuid, "manageable", Duration::from_secs(600))
                    .await?;
                step("inspected", &vm);
                let erase = serde_json::json!(
                    {"interface": "deploy", "step": "erase_devices", "args": {}});
                conductor.start_clean(&uuid, Some(vec![erase]))?;
                conductor
                    .wait_for_state(&uuid, "manageable", Duration::from_secs(300))
                    .await?;
                step("cleaned", &vm);
                conductor.make_available(&uuid)?;
                conductor.start_deploy(
                    &uuid,
                    DeployRequest {
                        image_info: ImageInfo::raw_sha256(
                            &server.url("/images/testimage.raw"),
                            &sha,
                        ),
                        configdrive: None,
                        boot_mode: BootMode::Uefi,
                        root_device: None,
                    },
                )?;
                let deployed = conductor
                    .wait_for_state(&uuid, "active", Duration::from_secs(300))
                    .await?;
                step("deployed", &vm);
                // The agent's standby.power_off ends QEMU (-no-reboot).
                tokio::task::block_in_place(|| vm.wait_exit(Duration::from_secs(120)))?;
                step("powered off by the agent", &vm);
                anyhow::Ok((inspected, deployed))
            }
            .await;
            vm.kill();
            anyhow::Ok((result, vm.console(), conductor.transcript()))
        })
        .unwrap();
    let (result, console, transcript) = outcome.unwrap_or_else(|e| panic!("{e:#}"));
    let ctx = format!(
        "\n--- transcript ---\n{}\n--- dnsmasq ---\n{}\n--- console ({}) ---\n{console}",
        transcript.join("\n"),
        net.dnsmasq_log(),
        net.logs.display()
    );
    let (inspected, deployed) = result.unwrap_or_else(|e| panic!("{e:#}{ctx}"));
    println!(
        "secure boot: whole test {:.1} s",
        started.elapsed().as_secs_f64()
    );

    // The signed chain, Secure Boot on, the kernel locked down.
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
    // The kernel's own notice of a refusal (`Lockdown: <process>: <what>
    // is restricted`; the kernel's own threads, e.g. `swapper/0:
    // hibernation`, are not the agent), and the agent's wording of one.
    let refused: Vec<&str> = console
        .lines()
        .filter(|l| l.contains("Lockdown: ") && !l.contains("Lockdown: swapper/"))
        .collect();
    assert!(
        refused.is_empty() && !console.contains("refused by the kernel's lockdown"),
        "the kernel's lockdown refused something the ramdisk did: {refused:#?}{ctx}"
    );
    assert!(
        transcript.iter().any(|l| l.contains("heartbeat")),
        "no heartbeat{ctx}"
    );

    // IPMI through /dev/ipmi0.
    let doc = inspected
        .inspection_data
        .unwrap_or_else(|| panic!("no inspection data{ctx}"));
    assert!(
        console.contains("completion code 0xc1"),
        "the BMC's answer is not on the console{ctx}"
    );
    assert!(
        !console.contains("cannot use the IPMI device") && !console.contains("did not answer"),
        "the IPMI device failed{ctx}"
    );
    assert_eq!(
        doc["inventory"]["bmc_address"], "0.0.0.0",
        "IPMI present: IPA's unconfigured address{ctx}"
    );
    let phases: Vec<&str> = doc["boot_phases"]
        .as_array()
        .unwrap_or_else(|| panic!("no boot_phases in {doc:#}"))
        .iter()
        .filter_map(|p| p["phase"].as_str())
        .collect();
    for p in ["init", "modules", "firmware", "network", "inspection"] {
        assert!(phases.contains(&p), "phase {p} missing: {phases:?}");
    }

    // NVMe and ATA ioctls.
    assert!(
        console.contains("NVMe format, secure erase setting"),
        "the NVMe disk was not erased by Format NVM{ctx}"
    );
    assert!(
        console.contains("BED SATA DISK: the security feature set is not supported"),
        "IDENTIFY DEVICE through SG_IO did not reach the SATA disk{ctx}"
    );
    for disk in [&sata, &virtio] {
        let left = run(Command::new("wipefs").arg("--no-act").arg(disk)).unwrap_or_default();
        assert!(left.is_empty(), "{} still has: {left}{ctx}", disk.display());
    }

    // efivarfs boot entries.
    assert_eq!(deployed.provision_state, "active");
    assert!(
        transcript
            .iter()
            .any(|l| l.starts_with("C->A POST") && l.contains("image.install_bootloader")),
        "install_bootloader was not called{ctx}"
    );
    let nvram = std::fs::read(&vars).unwrap();
    let entry = utf16("ironic1");
    assert!(
        nvram.windows(entry.len()).any(|w| w == entry.as_slice()),
        "the NVRAM holds no \"ironic1\" boot entry{ctx}"
    );
}
