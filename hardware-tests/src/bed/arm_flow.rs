//! What the Arm Ironic flow ([`super::arm_server`], run by
//! `tests/qemu/arm_ironic_flow.rs` and `demo --arch aarch64`; issue 33) needs from
//! the bed besides the Arm domain: the files Ironic serves ([`ArmFiles`]),
//! Ironic's configuration with the per-architecture deploy files
//! (`[conductor] *_by_arch`) and x86_64 defaults for either boot interface
//! ([`ArmBoot`]; the `pxe` one's parts are in [`super::arm_pxe`]), and what
//! Ironic put on the ISO it inserted (checksums of its kernel and ESP, its
//! grub.cfg).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result};
use image_builder::arch::Arch;

use super::arm_pxe::{pxe_conf_lines, ArmBoot};
use super::redfish::{self, Bmc};
use super::{arm_domain, metal3};
use crate::file_sha256;
use crate::testimage;

/// Ironic's configuration for the Arm server booted as `files.boot` says,
/// loaded after `ci/ironic/ironic.conf`: redfish virtual media (or the
/// `pxe` interface with [`pxe_conf_lines`]) and agent inspection as
/// Metal3 sets them, fast track, and the per-architecture deploy files
/// under `http_url`: `x86_64/…` are the defaults, `aarch64/…` the
/// `*_by_arch` entries (the kernel as [`ArmBoot::kernel_file`]).
pub fn ironic_conf(files: &ArmFiles, http_url: &str) -> String {
    let pxe = match files.boot.loader() {
        Some(loader) => pxe_conf_lines(&files.tftp_root, &files.ramdisk, loader),
        None => String::new(),
    };
    format!(
        "[DEFAULT]\n\
         enabled_hardware_types = fake-hardware,redfish\n\
         enabled_boot_interfaces = fake,{boot}\n\
         enabled_power_interfaces = fake,redfish\n\
         enabled_management_interfaces = noop,fake,redfish\n\
         enabled_inspect_interfaces = agent,fake,no-inspect\n\
         default_boot_interface = {boot}\n\
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
         deploy_kernel_by_arch = aarch64:{http_url}/aarch64/{kernel}\n\
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
         kernel_append_params = console={console}\n\
         {pxe}",
        www = files.www.display(),
        console = Arch::Aarch64.serial_console(),
        boot = files.boot.interface(),
        kernel = files.boot.kernel_file(),
    )
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

/// Ironic's `http_root` for the Arm node and what it holds.
#[derive(Debug)]
pub struct ArmFiles {
    /// Scratch space: the ESPs, the raw image, the domain's disk and
    /// firmware variables.
    pub tmp: tempfile::TempDir,
    /// The `http_root`: `aarch64/` and `x86_64/` deploy files, `disk.qcow2`.
    pub www: PathBuf,
    /// The sha256 of the aarch64 deploy kernel Ironic serves.
    pub arm_kernel_sha256: String,
    /// The sha256 of the aarch64 ESP (`bootloader_by_arch`).
    pub arm_esp_sha256: String,
    /// The sha256 of `disk.qcow2`.
    pub qcow2_sha256: String,
    /// The qcow2 image's size.
    pub qcow2_size: u64,
    /// What the deployed system prints ([`testimage::marker_line`]).
    pub marker: String,
    /// How Ironic boots the deploy ramdisk.
    pub boot: ArmBoot,
    /// The aarch64 deploy ramdisk's directory (the loaders Ironic copies).
    pub ramdisk: PathBuf,
    /// Ironic's `[pxe] tftp_root`, made empty here for Ironic to fill
    /// (unused with virtual media).
    pub tftp_root: PathBuf,
}

impl ArmFiles {
    /// Fills the `http_root` from the aarch64 deploy ramdisk in `ramdisk`:
    /// its kernel and initramfs, an ESP of its `shimaa64.efi` with Debian's
    /// signed monolithic GRUB (the ramdisk's own `grubaa64.efi` is the
    /// network GRUB, which stops at a prompt on an ISO), the x86_64
    /// defaults (stand-in kernel and ramdisk: put on an ISO like real ones,
    /// never bootable here), and the aarch64 test image printing `marker`.
    pub fn prepare(ramdisk: &Path, marker: &str) -> Result<Self> {
        Self::prepare_for(
            ramdisk,
            marker,
            ArmBoot::VirtualMedia { secure_boot: false },
        )
    }

    /// [`ArmFiles::prepare`] for `boot`: with the `pxe` interface the
    /// aarch64 kernel Ironic serves is [`ArmBoot::kernel_file`] and an
    /// empty `tftp_root` is made; under Secure Boot the test image boots
    /// through shim with the signed kernel ([`testimage::Inputs::shim`]).
    pub fn prepare_for(ramdisk: &Path, marker: &str, boot: ArmBoot) -> Result<Self> {
        let tmp = tempfile::tempdir()?;
        let tftp_root = tmp.path().join("tftpboot");
        std::fs::create_dir_all(&tftp_root)?;
        let www = tmp.path().join("www");
        for d in ["aarch64", "x86_64"] {
            std::fs::create_dir_all(www.join(d))?;
        }
        for f in [boot.kernel_file(), "deploy.initramfs"] {
            std::fs::copy(ramdisk.join(f), www.join("aarch64").join(f))
                .with_context(|| format!("copying {}", ramdisk.join(f).display()))?;
        }
        let mut inputs = testimage::Inputs::fetch_for(Arch::Aarch64)?;
        let grub = inputs
            .loader
            .clone()
            .context("Debian's signed grubaa64.efi was not fetched")?;
        let arm_esp = arm_domain::esp_image(tmp.path(), &ramdisk.join("shimaa64.efi"), &grub)?;
        std::fs::copy(&arm_esp, www.join("aarch64/esp.img"))?;
        let x86_esp = redfish::esp_image(tmp.path())?;
        std::fs::copy(&x86_esp, www.join("x86_64/esp.img"))?;
        std::fs::write(www.join("x86_64/deploy.kernel"), b"x86_64 deploy kernel\n")?;
        std::fs::write(
            www.join("x86_64/deploy.initramfs"),
            b"x86_64 deploy ramdisk\n",
        )?;
        if boot.secure_boot() {
            inputs.shim = Some(ramdisk.join("shimaa64.efi"));
        }
        let image = testimage::build_from(&inputs, tmp.path(), marker)?;
        let qcow2 = www.join("disk.qcow2");
        testimage::to_qcow2(&image.raw, &qcow2, true)?;
        Ok(Self {
            arm_kernel_sha256: file_sha256(&ramdisk.join(boot.kernel_file()))?,
            arm_esp_sha256: file_sha256(&arm_esp)?,
            qcow2_sha256: file_sha256(&qcow2)?,
            qcow2_size: std::fs::metadata(&qcow2)?.len(),
            marker: marker.to_string(),
            boot,
            ramdisk: ramdisk.to_path_buf(),
            tftp_root,
            tmp,
            www,
        })
    }
}
