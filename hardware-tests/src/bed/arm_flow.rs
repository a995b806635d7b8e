//! What the Arm Ironic flow ([`super::arm_server`], run by
//! `tests/arm_ironic_flow.rs` and `demo --arch aarch64`; issue 33) needs from
//! the bed besides the Arm domain: Ironic's configuration with the
//! per-architecture deploy files (`[conductor] *_by_arch`) and x86_64
//! defaults, and what Ironic put on the ISO it inserted (checksums of its
//! kernel and ESP, its grub.cfg).

use std::path::Path;
use std::process::Command;

use image_builder::arch::Arch;

use super::metal3;
use super::redfish::Bmc;

/// Ironic's configuration for the Arm server, loaded after
/// `ci/ironic/ironic.conf`: redfish virtual media and agent inspection as
/// Metal3 sets them, fast track, and the per-architecture deploy files
/// under `http_url`: `x86_64/…` are the defaults, `aarch64/…` the
/// `*_by_arch` entries.
pub fn ironic_conf(www: &Path, http_url: &str) -> String {
    format!(
        "[DEFAULT]\n\
         enabled_hardware_types = fake-hardware,redfish\n\
         enabled_boot_interfaces = fake,redfish-virtual-media\n\
         enabled_power_interfaces = fake,redfish\n\
         enabled_management_interfaces = noop,fake,redfish\n\
         enabled_inspect_interfaces = agent,fake,no-inspect\n\
         default_boot_interface = redfish-virtual-media\n\
         default_power_interface = redfish\n\
         default_management_interface = redfish\n\
         default_inspect_interface = agent\n\
         [agent]\n\
         deploy_logs_collect = always\n\
         max_command_attempts = 30\n\
         [conductor]\n\
         automated_clean = true\n\
         power_state_change_timeout = 120\n\
         deploy_callback_timeout = 900\n\
         clean_callback_timeout = 900\n\
         inspect_wait_timeout = 900\n\
         deploy_kernel = {http_url}/x86_64/deploy.kernel\n\
         deploy_ramdisk = {http_url}/x86_64/deploy.initramfs\n\
         bootloader = {http_url}/x86_64/esp.img\n\
         deploy_kernel_by_arch = aarch64:{http_url}/aarch64/deploy.kernel\n\
         deploy_ramdisk_by_arch = aarch64:{http_url}/aarch64/deploy.initramfs\n\
         bootloader_by_arch = aarch64:{http_url}/aarch64/esp.img\n\
         [deploy]\n\
         fast_track = true\n\
         erase_devices_metadata_priority = 10\n\
         erase_devices_priority = 0\n\
         http_root = {www}\n\
         http_url = {http_url}\n\
         [inspector]\n\
         require_managed_boot = false\n\
         power_off = false\n\
         extra_kernel_params = ipa-inspection-dhcp-all-interfaces=1\n\
         hooks = $default_hooks\n\
         add_ports = all\n\
         keep_ports = present\n\
         [redfish]\n\
         use_swift = false\n\
         kernel_append_params = console={console}\n",
        www = www.display(),
        console = Arch::Aarch64.serial_console(),
    )
}

/// A whole file's sha256.
pub fn file_sha256(path: &Path) -> std::io::Result<String> {
    crate::sha256_prefix(path, u64::MAX)
}

/// The sha256 of `path` on the ISO `iso` (`isoinfo -x`), `None` when it
/// cannot be read.
fn iso_file_sha256(iso: &str, path: &str, dir: &Path) -> Option<String> {
    let out = Command::new("isoinfo")
        .args(["-R", "-x", path, "-i", iso])
        .output()
        .ok()?;
    if !out.status.success() || out.stdout.is_empty() {
        return None;
    }
    let file = dir.join("iso-extract");
    std::fs::write(&file, &out.stdout).ok()?;
    file_sha256(&file).ok()
}

/// What Ironic put on the ISO it inserted into the Arm domain.
#[derive(Debug, Clone)]
pub struct ArmIso {
    /// Every path on the ISO, one a line.
    pub listing: String,
    /// Its `EFI/BOOT/grub.cfg` (the kernel command line).
    pub grub: String,
    /// The sha256 of its `/vmlinuz`.
    pub kernel_sha256: Option<String>,
    /// The sha256 of its El Torito ESP (`/boot/grub/efiboot.img`).
    pub esp_sha256: Option<String>,
}

/// The ISO in domain `name`'s drive, read with `dir` for a scratch file;
/// `None` while none is inserted.
pub fn read_arm_iso(bmc: &Bmc<'_>, name: &str, dir: &Path) -> Option<ArmIso> {
    let seen = metal3::read_inserted_iso(bmc, name)?;
    let iso = metal3::inserted_iso(bmc, name)?;
    Some(ArmIso {
        kernel_sha256: iso_file_sha256(&iso, "/vmlinuz", dir),
        esp_sha256: iso_file_sha256(&iso, "/boot/grub/efiboot.img", dir),
        listing: seen.listing,
        grub: seen.grub,
    })
}
