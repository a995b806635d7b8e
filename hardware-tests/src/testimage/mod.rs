//! A small bootable whole-disk image for the end-to-end deploy tests: after
//! the agent wrote it, a VM rebooted from its disk proves the deployed
//! system boots (BIOS or UEFI) and sees its config drive.
//!
//! Layout of the raw image (64 MiB, mostly zeros, sparse on disk):
//!
//! ```text
//! LBA 0        protective MBR; boot code = syslinux gptmbr.bin (first 440 bytes)
//! LBA 1–33     primary GPT (fixed disk and partition GUIDs)
//! 1 MiB–63 MiB partition 1 "ESP": EFI System type, attribute LegacyBIOSBootable,
//!              FAT32 labelled TESTIMAGE (fixed volume id), holding
//!                /vmlinuz             Debian's kernel, the one the deploy ramdisk boots
//!                /initrd.img          busybox /init + disk and filesystem modules (zstd cpio)
//!                /syslinux.cfg, /ldlinux.sys, /ldlinux.c32   BIOS: gptmbr → VBR → syslinux
//!                /EFI/BOOT/BOOTX64.EFI  UEFI: a grub core image (grub-mkimage) with embedded config
//! last 33 LBAs backup GPT
//! ```
//!
//! Both loaders start the kernel with `console=ttyS0 panic=-1 no_timer_check` (x86_64).
//!
//! The aarch64 variant (issue 33; [`build_for`] with `Arch::Aarch64`) has
//! the same layout from Debian's arm64 packages: the arm64 kernel (gzipped,
//! as the aarch64 ramdisk ships it), the arm64 busybox and modules, and
//! `/EFI/BOOT/BOOTAA64.EFI`, Debian's signed monolithic `grubaa64.efi`
//! (`grub-efi-arm64-signed`, fetched by `image-builder/fetch-bootchain.sh`)
//! with `/EFI/BOOT/grub.cfg` beside it, which that grub reads from the
//! directory it was started from; the console is `ttyAMA0` and there is no
//! syslinux (Arm machines have no BIOS). For Secure Boot ([`Inputs::shim`])
//! `BOOTAA64.EFI` is shim, that GRUB is `/EFI/BOOT/grubaa64.efi` beside it
//! and `/vmlinuz` the signed arm64 Image, uncompressed.
//!
//! The init
//! ([`initramfs`]) mounts proc/sys/devtmpfs, loads virtio-blk, virtio-scsi,
//! NVMe, AHCI/ata_piix, sd_mod, isofs and vfat, prints [`marker_line`]
//! and the kernel command line ([`CMDLINE`]),
//! finds the filesystem labelled `config-2` (busybox `findfs`; up to 2 s
//! after the image's own ESP is visible, 30 s at most),
//! mounts it read-only and prints its `openstack/latest/meta_data.json`
//! between [`CONFIG_DRIVE_BEGIN`] and [`CONFIG_DRIVE_END`] (or prints
//! [`NO_CONFIG_DRIVE`]); on a CoreOS-like image's first boot
//! (`crate::coreosimage::bootable_coreos_image`: a `boot` filesystem
//! holding `ignition.firstboot`) it prints `ignition/config.ign` between
//! [`IGNITION_BEGIN`] and [`IGNITION_END`]; then it powers off.
//! Nothing depends on the disk's size
//! or on partitions after the ESP, so the image still boots after the
//! agent moved the backup GPT to the end of a larger disk and added a
//! `config-2` partition.
//!
//! Built from files only (sfdisk, mkfs.vfat, mtools, `syslinux --install`
//! on the FAT image, grub-mkimage): no loop devices, no mounts. The
//! kernel and busybox come from `image-builder/fetch-kernel.sh`, the same
//! fetch the ramdisk build uses, into the cache next to `$RAMDISK_DIR`.
//! Module closures come from `image_builder::kernel`, the load order from
//! the agent's own `modules.dep` reader, the archive from
//! `image_builder::cpio` (sorted, mtime 0). With fixed GUIDs, the FAT's
//! fixed volume id, source mtimes kept by mcopy, root entries re-stamped
//! after the syslinux install (`fat_times`) and
//! grub-mkimage's fixed PE timestamp, the same inputs give the same image
//! bytes (tested).

mod disk;
mod fat_times;
pub mod ignition;
pub mod initramfs;

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

use image_builder::arch::Arch;

use crate::{repo_root, run};

/// Size of the raw image.
pub const IMAGE_SIZE: u64 = 64 << 20;
/// Printed before the config drive's `meta_data.json`.
pub const CONFIG_DRIVE_BEGIN: &str = "testimage: config drive meta_data.json begin";
/// Printed after it.
pub const CONFIG_DRIVE_END: &str = "testimage: config drive meta_data.json end";
/// Printed when no filesystem labelled `config-2` appeared.
pub const NO_CONFIG_DRIVE: &str = "testimage: no config drive";
/// Printed before the kernel command line.
pub const CMDLINE: &str = "testimage: cmdline";
/// Printed before the Ignition config of a CoreOS-like image's first boot.
pub const IGNITION_BEGIN: &str = "testimage: ignition config begin";
/// Printed after it.
pub const IGNITION_END: &str = "testimage: ignition config end";
/// Printed when `config-2` was found but could not be mounted.
pub const CONFIG_DRIVE_UNMOUNTABLE: &str = "testimage: config drive not mountable";

/// A built image.
#[derive(Debug, Clone)]
pub struct TestImage {
    /// The raw whole-disk image.
    pub raw: PathBuf,
    /// What its system prints on boot (inside [`marker_line`]).
    pub marker: String,
    /// Size of `raw` in bytes.
    pub size: u64,
}

/// The console line the booted system prints for `marker`.
pub fn marker_line(marker: &str) -> String {
    format!("testimage: booted from disk, marker {marker}")
}

/// Console text that proves the firmware found nothing to boot:
/// SeaBIOS (`-nographic` puts its messages on the serial console) after
/// every boot device failed, and OVMF when it fell back to its built-in
/// UEFI shell or, on builds without one, gave up. SeaBIOS's per-device
/// `Boot failed: not a bootable disk` is left out on purpose: another
/// device may still boot after it.
pub fn no_boot_lines() -> &'static [&'static str] {
    &[
        "No bootable device.",
        "UEFI Interactive Shell",
        "BdsDxe: No bootable option or device was found.",
    ]
}

/// The `meta_data.json` text the booted system printed, if it printed one.
pub fn meta_data(console: &str) -> Option<String> {
    between(console, CONFIG_DRIVE_BEGIN, CONFIG_DRIVE_END)
}

/// The Ignition config a CoreOS-like image's first boot printed, if any.
pub fn ignition_config(console: &str) -> Option<String> {
    between(console, IGNITION_BEGIN, IGNITION_END)
}

/// The kernel command line the booted system printed, if it printed one.
pub fn kernel_cmdline(console: &str) -> Option<String> {
    let start = console.find(CMDLINE)? + CMDLINE.len();
    let line = console[start..].lines().next()?;
    Some(line.trim().to_string())
}

/// The lines between the `begin` line (which carries the device name) and
/// the `end` line, trimmed.
fn between(console: &str, begin: &str, end: &str) -> Option<String> {
    let start = console.find(begin)? + begin.len();
    let len = console[start..].find(end)?;
    let body = &console[start..start + len];
    let body = body.split_once('\n').map_or("", |(_, rest)| rest);
    Some(body.replace('\r', "").trim().to_string())
}

/// The kernel and busybox the image is built from.
#[derive(Debug, Clone)]
pub struct Inputs {
    /// Debian's kernel, unpacked and depmod'ed.
    pub kernel: image_builder::kernel::Kernel,
    /// A static busybox.
    pub busybox: PathBuf,
    /// The architecture of both.
    pub arch: Arch,
    /// A ready UEFI loader that reads `grub.cfg` beside it (aarch64:
    /// Debian's signed `grubaa64.efi`); `None` builds one with
    /// grub-mkimage (x86_64).
    pub loader: Option<PathBuf>,
    /// aarch64 under Secure Boot: `shim` (`shimaa64.efi`, signed with
    /// Microsoft's key) as `BOOTAA64.EFI`, `loader` beside it as the
    /// `grubaa64.efi` shim starts, and the kernel as Debian's signed,
    /// uncompressed arm64 Image (shim verifies it; its signature covers
    /// the Image, not a gzip of it). `None`: the loader is `BOOTAA64.EFI`
    /// and the kernel gzipped, which AAVMF refuses under Secure Boot with
    /// Microsoft's keys (the loader is signed by Debian's key, which only
    /// shim trusts).
    pub shim: Option<PathBuf>,
}

impl Inputs {
    /// Fetches (or finds in the cache) the deploy ramdisk's kernel and
    /// busybox with `image-builder/fetch-kernel.sh`. The cache is
    /// `ramdisk-cache` next to `$RAMDISK_DIR` (default `target/ramdisk`),
    /// where `image-builder/build.sh` keeps it.
    pub fn fetch() -> Result<Self> {
        Self::fetch_for(Arch::X86_64)
    }

    /// [`Inputs::fetch`] for `arch`. aarch64 (issue 33): Debian's arm64
    /// kernel and busybox (`DEB_ARCH=arm64`) in `ramdisk-cache-aarch64`
    /// next to `$RAMDISK_AARCH64_DIR` (default `target/ramdisk-aarch64`),
    /// where `image-builder/build.sh --arch aarch64` keeps them, and the
    /// signed `grubaa64.efi` from `image-builder/fetch-bootchain.sh`.
    pub fn fetch_for(arch: Arch) -> Result<Self> {
        let (var, default, cache, deb) = match arch {
            Arch::X86_64 => ("RAMDISK_DIR", "target/ramdisk", "ramdisk-cache", "amd64"),
            Arch::Aarch64 => (
                "RAMDISK_AARCH64_DIR",
                "target/ramdisk-aarch64",
                "ramdisk-cache-aarch64",
                "arm64",
            ),
        };
        let ramdisk = std::env::var_os(var)
            .map(PathBuf::from)
            .unwrap_or_else(|| repo_root().join(default));
        let cache = ramdisk
            .parent()
            .with_context(|| format!("{var} has no parent directory"))?
            .join(cache);
        std::fs::create_dir_all(&cache).with_context(|| format!("creating {}", cache.display()))?;
        let fetch = |script: &str| {
            run(Command::new(repo_root().join("image-builder").join(script))
                .env("DEB_ARCH", deb)
                .arg(&cache))
        };
        let out = fetch("fetch-kernel.sh")?;
        let mut lines = out.lines().map(str::trim).filter(|l| !l.is_empty());
        let (Some(kroot), Some(busybox)) = (lines.next(), lines.next()) else {
            bail!("fetch-kernel.sh printed {out:?}, not the kernel root and busybox paths");
        };
        let loader = match arch {
            Arch::X86_64 => None,
            Arch::Aarch64 => {
                let root = fetch("fetch-bootchain.sh")?;
                let grub = Path::new(root.trim())
                    .join("usr/lib/grub/arm64-efi-signed/grubaa64.efi.signed");
                anyhow::ensure!(
                    grub.exists(),
                    "fetch-bootchain.sh left no {}",
                    grub.display()
                );
                Some(grub)
            }
        };
        Ok(Self {
            kernel: image_builder::kernel::Kernel::find(Path::new(kroot))?,
            busybox: PathBuf::from(busybox),
            arch,
            loader,
            shim: None,
        })
    }
}

/// Builds a whole-disk image in `dir` whose system prints `marker` and its
/// config drive on ttyS0. `marker` may hold letters, digits, `.`, `_`, `-`.
pub fn build(dir: &Path, marker: &str) -> Result<TestImage> {
    build_from(&Inputs::fetch()?, dir, marker)
}

/// [`build`] for `arch`: the aarch64 image's system prints on `ttyAMA0`.
pub fn build_for(dir: &Path, marker: &str, arch: Arch) -> Result<TestImage> {
    build_from(&Inputs::fetch_for(arch)?, dir, marker)
}

/// Refuses a marker the init script would have to quote.
pub fn check_marker(marker: &str) -> Result<()> {
    if marker.is_empty()
        || !marker
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
    {
        bail!("marker {marker:?} must be non-empty and hold only letters, digits, '.', '_', '-'");
    }
    Ok(())
}

/// [`build`] with given inputs.
pub fn build_from(inputs: &Inputs, dir: &Path, marker: &str) -> Result<TestImage> {
    check_marker(marker)?;
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let work = tempfile::tempdir_in(dir)?;
    let initrd = initramfs::build(&inputs.kernel, &inputs.busybox, marker)?;
    let raw = dir.join("testimage.raw");
    disk::assemble(work.path(), inputs, &initrd, &raw)?;
    tracing::info!(raw = %raw.display(), marker, "test image built");
    Ok(TestImage {
        size: std::fs::metadata(&raw)?.len(),
        raw,
        marker: marker.to_string(),
    })
}

/// `qemu-img convert` of the raw image to qcow2, with compressed clusters
/// when `compressed`.
pub fn to_qcow2(raw: &Path, out: &Path, compressed: bool) -> Result<()> {
    let mut cmd = Command::new("qemu-img");
    cmd.args(["convert", "-f", "raw", "-O", "qcow2"]);
    if compressed {
        cmd.arg("-c");
    }
    run(cmd.arg(raw).arg(out))?;
    Ok(())
}

/// Where [`big_qcow2`] puts its random data.
pub const BIG_DATA_OFFSET: u64 = 1 << 30;

/// A qcow2 of `virtual_size` holding the test image (compressed clusters,
/// as cloud images ship) and `data` bytes of random data from
/// [`BIG_DATA_OFFSET`] on (plain clusters: random data does not compress),
/// for the small-RAM deploys: the image really carries `data` bytes, which
/// the agent must stream to the disk rather than hold. The random part is
/// written into the qcow2 by `qemu-io` in 64 MiB chunks of fresh bytes
/// from `/dev/urandom`, so no raw file of the whole size is made and only
/// the small image is compressed. Returns the sha256 of the random part,
/// to compare with the deployed disk's bytes there ([`crate::sha256_range`]).
pub fn big_qcow2(img: &TestImage, out: &Path, virtual_size: u64, data: u64) -> Result<String> {
    const CHUNK: u64 = 64 << 20;
    if img.size > BIG_DATA_OFFSET || BIG_DATA_OFFSET + data > virtual_size || data % CHUNK != 0 {
        bail!(
            "{} bytes of data from {BIG_DATA_OFFSET} after a {}-byte image do not fit a \
             {virtual_size}-byte qcow2 in 64 MiB chunks",
            data,
            img.size
        );
    }
    let dir = out.parent().context("the qcow2 path has no directory")?;
    let work = tempfile::tempdir_in(dir)?;
    let raw = work.path().join("image.raw");
    std::fs::copy(&img.raw, &raw).with_context(|| format!("copying {}", img.raw.display()))?;
    std::fs::OpenOptions::new()
        .write(true)
        .open(&raw)?
        .set_len(virtual_size)?;
    to_qcow2(&raw, out, true)?;
    std::fs::remove_file(&raw)?;
    let chunk_file = work.path().join("chunk");
    let mut chunk = vec![0u8; CHUNK as usize];
    let mut urandom = std::fs::File::open("/dev/urandom")?;
    let mut hash = ring::digest::Context::new(&ring::digest::SHA256);
    for i in 0..data / CHUNK {
        std::io::Read::read_exact(&mut urandom, &mut chunk)?;
        hash.update(&chunk);
        std::fs::write(&chunk_file, &chunk)?;
        let offset = BIG_DATA_OFFSET + i * CHUNK;
        run(Command::new("qemu-io")
            .args(["-f", "qcow2", "-c"])
            .arg(format!(
                "write -q -s {} {offset} {CHUNK}",
                chunk_file.display()
            ))
            .arg(out))?;
    }
    Ok(crate::hex(hash.finish().as_ref()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meta_data_is_read_between_the_lines() {
        let console = format!(
            "noise\r\n{CONFIG_DRIVE_BEGIN} /dev/vda2 iso9660\r\n{{\"uuid\": \"u-1\"}}\r\n{CONFIG_DRIVE_END}\r\n"
        );
        assert_eq!(meta_data(&console).as_deref(), Some("{\"uuid\": \"u-1\"}"));
        assert_eq!(meta_data(&format!("{NO_CONFIG_DRIVE}\n")), None);
    }

    #[test]
    fn the_ignition_config_and_the_command_line_are_read_back() {
        let console = format!(
            "{CMDLINE} console=ttyS0 panic=-1 x=1\r\n{IGNITION_BEGIN} /dev/vda1\r\n{{\"ignition\": {{}}}}\r\n{IGNITION_END}\r\n"
        );
        assert_eq!(
            kernel_cmdline(&console).as_deref(),
            Some("console=ttyS0 panic=-1 x=1")
        );
        assert_eq!(
            ignition_config(&console).as_deref(),
            Some("{\"ignition\": {}}")
        );
        assert_eq!(ignition_config("no config"), None);
        assert_eq!(kernel_cmdline("nothing"), None);
    }

    #[test]
    fn markers_that_need_quoting_are_refused() {
        let inputs = Inputs {
            kernel: image_builder::kernel::Kernel {
                image: PathBuf::new(),
                modules: PathBuf::new(),
                version: String::new(),
            },
            busybox: PathBuf::new(),
            arch: Arch::X86_64,
            loader: None,
            shim: None,
        };
        let dir = tempfile::tempdir().unwrap();
        for bad in ["", "a b", "x;poweroff", "$(id)"] {
            let err = build_from(&inputs, dir.path(), bad).unwrap_err();
            assert!(err.to_string().contains("marker"), "{err}");
        }
    }
}
