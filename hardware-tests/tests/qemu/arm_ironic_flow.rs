//! Unmodified Ironic 39 drives an emulated Arm server through the aarch64
//! deploy ramdisk (issue 33), and the aarch64 test image it deploys boots
//! under AAVMF. Run by `ci/test-aarch64` (not `ci/test`: the aarch64
//! ramdisk's cross build takes some 30 minutes here).
//!
//! * `aarch64_test_image_boots_under_aavmf`: the aarch64 test disk image
//!   (`testimage::build_for(.., Arch::Aarch64)`: Debian's arm64 kernel,
//!   busybox and signed GRUB) as the only disk of QEMU's `virt` board
//!   (Cortex-A57, TCG) under AAVMF: the firmware starts its
//!   `BOOTAA64.EFI`, the system prints the image's marker on the PL011
//!   console and says it found no config drive.
//! * `ironic_inspects_cleans_and_deploys_an_arm_server`: unmodified Ironic
//!   39.0.0 with the `redfish` hardware type and `redfish-virtual-media`
//!   boot (what Metal3 runs on Arm) in front of an aarch64 libvirt domain
//!   (`bed::arm_domain`: `virt`, Cortex-A57, TCG, AAVMF, 2 vCPUs) behind
//!   sushy-tools, whose libvirt driver inserts the ISO on the domain's
//!   SCSI CD-ROM drive. The node says only `properties.cpu_arch =
//!   aarch64`: its `driver_info` names no deploy kernel, ramdisk or
//!   bootloader, so Ironic picks them from `[conductor]
//!   deploy_kernel_by_arch`, `deploy_ramdisk_by_arch` and
//!   `bootloader_by_arch` (an ESP of the aarch64 ramdisk's `shimaa64.efi`
//!   as `BOOTAA64.EFI` with Debian's signed monolithic GRUB beside it: the
//!   ramdisk's own `grubaa64.efi` is the network GRUB, which stops at a
//!   prompt on an ISO), while the defaults
//!   (`deploy_kernel`, `deploy_ramdisk`, `bootloader`) name x86_64 files
//!   that cannot boot this machine. The ISO Ironic inserted must hold the
//!   aarch64 kernel and ESP. Ironic inspects (the inventory it stores says
//!   `cpu.architecture == "aarch64"`), cleans (automated clean,
//!   `erase_devices_metadata`: the GPT put on the disk is gone) and deploys
//!   the aarch64 test image (qcow2, with a config drive) in one ramdisk
//!   boot (fast track); the node is `active`, Ironic boots the domain from
//!   its disk and the deployed system prints its marker and config drive.
//!   Phase times are printed and kept in
//!   `target/bed-logs/armironic/flow-times.txt`. The flow itself is
//!   `hardware_tests::bed::arm_server`, which the demo (`ci/demo --arch
//!   aarch64`) runs too; this test checks what it saw.
//! * `ironic_deploys_an_arm_server_by_virtual_media_under_secure_boot`:
//!   the same flow with AAVMF's Microsoft-keyed NVRAM enforcing Secure
//!   Boot and `deploy_kernel_by_arch` naming `deploy.kernel.signed` (the
//!   signed arm64 Image; shim refuses the gzipped `deploy.kernel`): the
//!   ISO's ESP starts shim, shim Debian's signed GRUB, GRUB the signed
//!   kernel; that kernel says Secure Boot is on, the agent reports
//!   lockdown, and the deployed test image (shim, signed GRUB and kernel
//!   on its ESP) boots under the same firmware. Times in
//!   `target/bed-logs/armironicsb/flow-times.txt`.
//!
//! The bed offers DHCP with a fixed lease for the machine's MAC (the
//! Metal3 flows cover DHCP-less `network_data`). Ironic's API is plain
//! HTTP on the bed's bridge; the agent still serves TLS (`require_tls`
//! keeps Ironic's default).

use std::sync::Mutex;
use std::time::{Duration, Instant};

use hardware_tests::bed::arm_pxe::ArmBoot;
use hardware_tests::bed::arm_server;
use hardware_tests::bed::arm_suite::{self, ArmSeen};
use hardware_tests::bed::{Boot, Bus, Disk, Firmware, Net, NetOptions, Vm, VmSpec, BRIDGE_IP};
use hardware_tests::{require_root, testimage};
use image_builder::arch::Arch;

/// One emulated Arm machine at a time: TCG on two cores.
static ONE_MACHINE: Mutex<()> = Mutex::new(());

#[test]
fn aarch64_test_image_boots_under_aavmf() {
    require_root("the aarch64 test image boot (a namespace, QEMU)");
    let _one = ONE_MACHINE.lock().unwrap_or_else(|e| e.into_inner());
    let tmp = tempfile::tempdir().unwrap();
    let marker = format!("arm{:012x}", fastrand::u64(..) >> 16);
    let t = Instant::now();
    let img = testimage::build_for(tmp.path(), &marker, Arch::Aarch64).unwrap();
    println!(
        "aarch64 test image ({} MiB) built in {:.1} s",
        img.size >> 20,
        t.elapsed().as_secs_f64()
    );
    let net = Net::start(NetOptions::no_dhcp("armimage")).unwrap();
    let spec = VmSpec {
        arch: Arch::Aarch64,
        firmware: Firmware::Uefi {
            vars: tmp.path().join("AAVMF_VARS.fd"),
        },
        memory_mb: 512,
        boot: Boot::Disk,
        disks: vec![Disk {
            path: img.raw.clone(),
            size: img.size,
            bus: Bus::Virtio,
            serial: "armimage0".into(),
            model: None,
        }],
        ..VmSpec::new("armimage")
    };
    let mut vm = Vm::start(&net, &spec).unwrap();
    let line = testimage::marker_line(&marker);
    let booted = vm
        .wait_console(&line, Duration::from_secs(300))
        .unwrap_or_else(|e| panic!("{e:#}"));
    vm.wait_console(testimage::NO_CONFIG_DRIVE, Duration::from_secs(60))
        .unwrap_or_else(|e| panic!("{e:#}"));
    let console = vm.console();
    println!(
        "aarch64 test image: marker after {:.1} s under AAVMF",
        booted.as_secs_f64()
    );
    // arm64's first kernel line, and the PL011 as the console.
    for want in ["Booting Linux on physical CPU", "ttyAMA0"] {
        assert!(
            console.contains(want),
            "{want:?} not on the console: {}",
            vm.console_path().display()
        );
    }
}

/// The instance uuid the config drive carries.
const INSTANCE: &str = "arm-cd-5f3a";

/// The virtual-media flow on bed `name` with `boot`, the deployed image
/// printing `marker`: runs it and checks what both tests share (the ISO's
/// kernel and ESP, inspection, cleaning, `active`, the disk's boot with
/// its config drive in one ramdisk boot).
fn vmedia_flow(name: &str, boot: ArmBoot, marker: &str) -> ArmSeen {
    let seen = arm_suite::run(name, boot, marker, INSTANCE).unwrap_or_else(|e| panic!("{e:#}"));
    let (done, files) = (&seen.done, &seen.files);
    arm_suite::check_flow(&seen, boot, INSTANCE).unwrap_or_else(|e| panic!("{e:#}"));

    // The ISO Ironic built for the Arm node: the aarch64 kernel and ESP,
    // not the x86_64 defaults.
    let iso = done
        .iso
        .as_ref()
        .expect("never saw Ironic's ISO in the Arm domain's CD-ROM drive");
    assert_eq!(
        iso.kernel_sha256.as_deref(),
        Some(files.arm_kernel_sha256.as_str()),
        "the ISO's /vmlinuz is not the aarch64 deploy kernel; listing:\n{}",
        iso.listing
    );
    assert_eq!(
        iso.esp_sha256.as_deref(),
        Some(files.arm_esp_sha256.as_str()),
        "the ISO's ESP is not bootloader_by_arch's aarch64 one"
    );
    for want in [
        "boot_method=vmedia".to_string(),
        format!("ipa-api-url=http://{BRIDGE_IP}:{}", arm_server::IRONIC_PORT),
        "console=ttyAMA0".to_string(),
    ] {
        assert!(
            iso.grub.contains(&want),
            "{want:?} not in the ISO's grub.cfg:\n{}",
            iso.grub
        );
    }
    let inv = &done.inventory["inventory"];
    println!(
        "inventory cpu: {}; system: {}",
        inv["cpu"], inv["system_vendor"]
    );

    seen
}

#[test]
fn ironic_inspects_cleans_and_deploys_an_arm_server() {
    require_root("the Arm Ironic flow (namespaces, libvirtd, QEMU)");
    let _one = ONE_MACHINE.lock().unwrap_or_else(|e| e.into_inner());
    let seen = vmedia_flow(
        "armironic",
        ArmBoot::VirtualMedia { secure_boot: false },
        "arm-deployed-7e1d",
    );
    arm_suite::check_no_secure_boot(&seen).unwrap_or_else(|e| panic!("{e:#}"));
}

#[test]
fn ironic_deploys_an_arm_server_by_virtual_media_under_secure_boot() {
    require_root("the Arm Ironic flow under Secure Boot (namespaces, libvirtd, QEMU)");
    let _one = ONE_MACHINE.lock().unwrap_or_else(|e| e.into_inner());
    let seen = vmedia_flow(
        "armironicsb",
        ArmBoot::VirtualMedia { secure_boot: true },
        "arm-sb-deployed-41c7",
    );
    arm_suite::check_secure_boot(&seen).unwrap_or_else(|e| panic!("{e:#}"));
}
