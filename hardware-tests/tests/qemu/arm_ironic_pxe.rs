//! Unmodified Ironic 39 network-boots the emulated Arm server through its
//! own `pxe` boot interface (GRUB over TFTP; issue 33), with and without
//! Secure Boot. Run by `ci/test-aarch64` (not `ci/test`: the aarch64
//! ramdisk's cross build takes some 30 minutes here).
//!
//! Debian ships no arm64 iPXE, so on Arm Ironic's `pxe` interface is the
//! network path operators use. The machine is the aarch64 libvirt domain
//! of `arm_ironic_flow.rs` (`bed::arm_domain`: `virt`, Cortex-A57, TCG,
//! AAVMF, 2 vCPUs) behind sushy-tools, which Ironic powers and whose boot
//! device it sets over Redfish; the flow is `bed::arm_server::run` with
//! `ArmBoot::Pxe` (its `pxe` parts in `bed::arm_pxe`):
//!
//! * Ironic's `[pxe] tftp_root` is a directory the test made; Ironic fills
//!   it: the loaders of `[pxe] loader_file_paths` (the aarch64 ramdisk's
//!   Debian-signed network `grubaa64.efi`, its `shimaa64.efi` as
//!   `bootaa64.efi`) when the conductor starts, its master `grub/grub.cfg`
//!   (`source <tftp_root>/$net_default_mac.conf`), and per ramdisk boot
//!   the node's GRUB config `<uuid>/config` (its default UEFI template,
//!   `pxe_grub_config.template`) with the links `grub.cfg-01-<mac>` and
//!   `<mac>.conf`, and `<uuid>/deploy_kernel`/`deploy_ramdisk` from
//!   `[conductor] deploy_kernel_by_arch`/`deploy_ramdisk_by_arch` (the
//!   node names none; the defaults are x86_64 stand-ins);
//! * `[dhcp] dhcp_provider = none`: the bed's dnsmasq, in the test's
//!   namespace, serves that same directory over TFTP and hands Arm UEFI
//!   clients (client-arch 11) the loader `[pxe] pxe_bootfile_name_by_arch`
//!   names, as Metal3's dnsmasq does;
//! * AAVMF PXE-boots the loader, GRUB reads `grub/grub.cfg`, sources the
//!   node's config and boots the deploy kernel and ramdisk over TFTP.
//!
//! Tests:
//!
//! * `ironic_network_boots_an_arm_server_through_pxe_grub`: loader
//!   `grubaa64.efi`, the gzipped deploy kernel (GRUB unpacks it). Ironic
//!   inspects (the stored inventory says `aarch64`), cleans
//!   (`erase_devices_metadata`: the old GPT is gone) and reaches
//!   `available`, then deploys the aarch64 test image (qcow2, config
//!   drive) to `active` on the same ramdisk boot (fast track); Ironic sets
//!   the disk first over Redfish and the deployed system prints its marker
//!   and config drive under AAVMF.
//! * `ironic_network_boots_an_arm_server_under_secure_boot`: the same with
//!   AAVMF's Microsoft-keyed NVRAM (`AAVMF_VARS.ms.fd`) enforcing Secure
//!   Boot: the loader is `shimaa64.efi` (`bootaa64.efi`), which starts
//!   Debian's signed `grubaa64.efi`, and `deploy_kernel_by_arch` names
//!   `deploy.kernel.signed`, the signed arm64 Image shim verifies; the
//!   kernel says Secure Boot is on and the agent reports lockdown. The
//!   deployed test image boots through shim too: its ESP has shim as
//!   `BOOTAA64.EFI`, Debian's signed GRUB beside it and the signed kernel
//!   (`testimage::Inputs::shim`); its plain ESP (GRUB as `BOOTAA64.EFI`,
//!   signed by Debian's key only) would be refused by the firmware.
//!
//! Phase times are printed and kept in `target/bed-logs/<bed>/flow-times.txt`.

use std::sync::Mutex;

use hardware_tests::bed::arm_pxe::{ArmBoot, GRUB_LOADER, SB_LOADER};
use hardware_tests::bed::arm_server;
use hardware_tests::bed::arm_suite::{self, ArmSeen};
use hardware_tests::bed::BRIDGE_IP;
use hardware_tests::require_root;

/// One emulated Arm machine at a time: TCG on two cores.
static ONE_MACHINE: Mutex<()> = Mutex::new(());

/// The instance uuid the config drive carries.
const INSTANCE: &str = "arm-pxe-cd-41c7";

/// The checks both tests share: Ironic's TFTP files and GRUB config, the
/// TFTP transfers, inspection, cleaning, `active` and the deployed
/// system's boot with its config drive.
fn check_common(seen: &ArmSeen, loader: &str) {
    let done = &seen.done;
    let ctx = format!("\n{}\n--- dnsmasq ---\n{}", seen.logs(), seen.dnsmasq);
    let tftp = done
        .tftp
        .as_ref()
        .unwrap_or_else(|| panic!("never saw Ironic's GRUB config in its tftp_root{ctx}"));
    // Ironic's files: its master config, the node's, both MAC links.
    assert!(
        tftp.master.contains(&format!(
            "{}/$net_default_mac.conf",
            seen.files.tftp_root.display()
        )),
        "Ironic's grub/grub.cfg: {}{ctx}",
        tftp.master
    );
    assert_eq!(tftp.mac_config.as_deref(), Some(tftp.config.as_str()));
    assert_eq!(tftp.mac_conf.as_deref(), Some(tftp.config.as_str()));
    let uuid = done.active["uuid"].as_str().unwrap_or_default();
    for want in [
        format!("linux {uuid}/deploy_kernel"),
        format!("initrd {uuid}/deploy_ramdisk"),
        "console=ttyAMA0".to_string(),
        format!("ipa-api-url=http://{BRIDGE_IP}:{}", arm_server::IRONIC_PORT),
        "ipa-inspection-callback-url=".to_string(),
    ] {
        assert!(
            tftp.config.contains(&want),
            "{want:?} not in the node's GRUB config:\n{}\nlisting:\n{}",
            tftp.config,
            tftp.listing
        );
    }
    assert_eq!(
        tftp.kernel_sha256.as_deref(),
        Some(seen.files.arm_kernel_sha256.as_str()),
        "{uuid}/deploy_kernel is not the aarch64 {}",
        seen.files.boot.kernel_file()
    );
    for (name, sha) in &tftp.loaders {
        let src = match name.as_str() {
            GRUB_LOADER => "grubaa64.efi",
            _ => "shimaa64.efi",
        };
        let want = hardware_tests::file_sha256(&seen.files.ramdisk.join(src)).unwrap();
        assert_eq!(sha.as_deref(), Some(want.as_str()), "Ironic's {name}");
    }
    // The firmware and GRUB fetched Ironic's files from dnsmasq.
    let sent = |f: &str| {
        seen.dnsmasq
            .lines()
            .any(|l| l.contains("sent") && l.contains(f))
    };
    for f in [
        loader.to_string(),
        "grub/grub.cfg".to_string(),
        format!("{}.conf", arm_server::MAC),
        format!("{uuid}/deploy_kernel"),
        format!("{uuid}/deploy_ramdisk"),
    ] {
        assert!(sent(&f), "{f} was not sent over TFTP{ctx}");
    }
    assert!(
        seen.dnsmasq
            .lines()
            .any(|l| l.contains("option: 67 bootfile-name") && l.trim_end().ends_with(loader)),
        "dnsmasq never offered {loader}{ctx}"
    );

    let boot = seen.files.boot;
    arm_suite::check_flow(seen, boot, INSTANCE).unwrap_or_else(|e| panic!("{e:#}{ctx}"));
}

/// Runs the flow with `boot`, panicking with what failed and where to look.
fn run_pxe(name: &str, boot: ArmBoot, marker: &str) -> ArmSeen {
    arm_suite::run(name, boot, marker, INSTANCE).unwrap_or_else(|e| panic!("{e:#}"))
}

#[test]
fn ironic_network_boots_an_arm_server_through_pxe_grub() {
    require_root("the Arm PXE flow (namespaces, libvirtd, QEMU)");
    let _one = ONE_MACHINE.lock().unwrap_or_else(|e| e.into_inner());
    let seen = run_pxe(
        "armpxe",
        ArmBoot::Pxe { secure_boot: false },
        "arm-pxe-deployed-3b9e",
    );
    check_common(&seen, GRUB_LOADER);
    arm_suite::check_no_secure_boot(&seen).unwrap_or_else(|e| panic!("{e:#}"));
}

#[test]
fn ironic_network_boots_an_arm_server_under_secure_boot() {
    require_root("the Arm PXE flow under Secure Boot (namespaces, libvirtd, QEMU)");
    let _one = ONE_MACHINE.lock().unwrap_or_else(|e| e.into_inner());
    let seen = run_pxe(
        "armpxesb",
        ArmBoot::Pxe { secure_boot: true },
        "arm-pxe-sb-deployed-8d21",
    );
    check_common(&seen, SB_LOADER);
    // shim fetched Debian's signed GRUB from beside itself.
    assert!(
        seen.dnsmasq
            .lines()
            .any(|l| l.contains("sent") && l.contains(&format!("/{GRUB_LOADER}"))),
        "shim never fetched {GRUB_LOADER} over TFTP:\n{}",
        seen.dnsmasq
    );
    arm_suite::check_secure_boot(&seen).unwrap_or_else(|e| panic!("{e:#}"));
}
