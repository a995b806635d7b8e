//! Small CoreOS-like disk images for the `install_coreos` suites, and where
//! the real `coreos-installer` that `ci/install-deps` builds is:
//! - [`coreos_image`]: GPT, an ext4 filesystem labelled as asked (`boot`
//!   for a CoreOS image) holding a BLS entry and the image's own
//!   first-boot stamp, and a root partition; it does not boot.
//! - [`bootable_coreos_image`]: one that boots under UEFI the way CoreOS
//!   does, from its BLS entry, so the kernel arguments coreos-installer
//!   appends are the booted kernel's, and whose first boot shows the
//!   Ignition config where CoreOS's Ignition reads it.

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result};

use crate::{run, testimage};

const MIB: u64 = 1 << 20;
/// The image's own first-boot stamp (`ignition.firstboot`).
pub const STAMP: &str = "set ignition_network_kcmdline='ip=dhcp'\n";
/// The image's BLS entry (`loader/entries/ostree-1.conf`).
pub const BLS: &str = "title Fedora CoreOS 42\nversion 1\nlinux /ostree/fedora-coreos/vmlinuz\ninitrd /ostree/fedora-coreos/initramfs.img\noptions $ignition_firstboot root=UUID=abc rw ostree=/ostree/boot.1/fedora-coreos/0\n";

/// A 96 MiB CoreOS-like disk image in `dir` (`fcos.raw`) whose first
/// partition and filesystem are labelled `label`, and its sha256.
pub fn coreos_image(dir: &Path, label: &str) -> (PathBuf, String) {
    let tree = dir.join("bootfs");
    std::fs::create_dir_all(tree.join("loader/entries")).unwrap();
    std::fs::write(tree.join("loader/entries/ostree-1.conf"), BLS).unwrap();
    std::fs::write(tree.join("ignition.firstboot"), STAMP).unwrap();
    let img = dir.join("fcos.raw");
    std::fs::File::create(&img)
        .unwrap()
        .set_len(96 * MIB)
        .unwrap();
    run(Command::new("bash").args([
        "-c",
        &format!(
            "printf 'label: gpt\\nsize=32MiB, name={label}\\nsize=32MiB, name=root\\n' | sfdisk --quiet --no-reread --no-tell-kernel {}",
            img.display()
        ),
    ]))
    .unwrap();
    run(Command::new("mkfs.ext4")
        .args(["-q", "-F", "-L", label, "-E", "offset=1048576", "-d"])
        .arg(&tree)
        .arg(&img)
        .arg("32M"))
    .unwrap();
    let sha = ring::digest::digest(&ring::digest::SHA256, &std::fs::read(&img).unwrap());
    (
        img,
        sha.as_ref().iter().map(|b| format!("{b:02x}")).collect(),
    )
}

/// The directory holding the real `coreos-installer` (`target/tools/bin`,
/// built by `ci/install-deps`).
pub fn coreos_installer_dir() -> Result<PathBuf> {
    let dir = crate::repo_root().join("target/tools/bin");
    let bin = dir.join("coreos-installer");
    let out = Command::new(&bin)
        .arg("--version")
        .output()
        .with_context(|| format!("{} is missing: run ci/install-deps", bin.display()))?;
    anyhow::ensure!(
        String::from_utf8_lossy(&out.stdout).starts_with("coreos-installer 0.27."),
        "{} is not coreos-installer 0.27: run ci/install-deps",
        bin.display()
    );
    Ok(dir)
}

/// A CoreOS-like image that boots ([`bootable_coreos_image`]).
#[derive(Debug, Clone)]
pub struct BootableCoreos {
    /// The raw whole-disk image.
    pub raw: PathBuf,
    /// Its BLS entry (`loader/entries/ostree-1.conf`) as built.
    pub bls: String,
    /// Where its root partition lies (bytes), holding [`ROOT_PATTERN`]s.
    pub root: std::ops::Range<u64>,
}

/// What fills the bootable image's root partition, repeated: the deployed
/// disk must hold it there.
pub const ROOT_PATTERN: &[u8] = b"coreos-like root partition\n";

/// A 66 MiB CoreOS-like image in `dir` (`fcos-boot.raw`) that boots under
/// UEFI as CoreOS does, from its BLS entry, with the test image's system
/// (`testimage`), which prints `marker`'s line, the kernel command line
/// and, on a first boot, the Ignition config:
///
/// ```text
/// 1 MiB–49 MiB  partition 1 "boot", EFI System type, FAT16 labelled `boot`:
///                 /EFI/BOOT/BOOTX64.EFI   Debian's systemd-boot (systemd-boot-efi)
///                 /loader/loader.conf     timeout 0
///                 /loader/entries/ostree-1.conf   the BLS entry systemd-boot boots
///                 /vmlinuz, /initrd.img   the test image's kernel and system
///                 /ignition.firstboot     the image's first-boot stamp
/// 49 MiB–65 MiB partition 2 "root": ROOT_PATTERN repeated
/// ```
///
/// CoreOS keeps `boot` as ext4 and has GRUB read BLS entries (a Fedora
/// patch Debian's GRUB lacks); systemd-boot reads them from the ESP, so the
/// ESP is the `boot` filesystem here. coreos-installer finds and mounts it
/// by its label whatever its type, and edits the entry's `options` line.
/// Ignition itself does not run (Debian has none): the image's system
/// shows the config it would apply (`testimage::ignition_config`).
pub fn bootable_coreos_image(dir: &Path, marker: &str) -> Result<BootableCoreos> {
    testimage::check_marker(marker)?;
    let inputs = testimage::Inputs::fetch()?;
    let initrd = testimage::initramfs::build(&inputs.kernel, &inputs.busybox, marker)?;
    let sdboot = crate::debs::unpacked("systemd-boot", &["systemd-boot-efi"])?
        .join("usr/lib/systemd/boot/efi/systemd-bootx64.efi");
    let bls = "title CoreOS-like (the bed's)\nversion 1\nlinux /vmlinuz\ninitrd /initrd.img\noptions console=ttyS0 panic=-1 no_timer_check\n".to_string();

    let tree = dir.join("fcos-boot");
    for d in ["EFI/BOOT", "loader/entries"] {
        std::fs::create_dir_all(tree.join(d))?;
    }
    let copy = |from: &Path, to: &str| {
        std::fs::copy(from, tree.join(to))
            .with_context(|| format!("copying {}", from.display()))
            .map(|_| ())
    };
    copy(&sdboot, "EFI/BOOT/BOOTX64.EFI")?;
    copy(&inputs.kernel.image, "vmlinuz")?;
    std::fs::write(tree.join("initrd.img"), initrd)?;
    std::fs::write(tree.join("loader/loader.conf"), "timeout 0\n")?;
    std::fs::write(tree.join("loader/entries/ostree-1.conf"), &bls)?;
    std::fs::write(tree.join("ignition.firstboot"), STAMP)?;

    let esp = dir.join("fcos-boot.fat");
    std::fs::File::create(&esp)?.set_len(48 * MIB)?;
    run(Command::new("mkfs.vfat")
        .args(["-F", "16", "-n", "boot"])
        .arg(&esp))
    .context("mkfs.vfat (ci/install-deps installs dosfstools)")?;
    let mut mcopy = crate::mtools("mcopy", &esp);
    mcopy.arg("-s");
    for top in [
        "EFI",
        "loader",
        "vmlinuz",
        "initrd.img",
        "ignition.firstboot",
    ] {
        mcopy.arg(tree.join(top));
    }
    run(mcopy.arg("::")).context("mcopy (ci/install-deps installs mtools)")?;

    let raw = dir.join("fcos-boot.raw");
    let disk = std::fs::File::create(&raw)?;
    disk.set_len(66 * MIB)?;
    run(Command::new("bash").args([
        "-c",
        &format!(
            "printf 'label: gpt\\nstart=1MiB, size=48MiB, type=uefi, name=boot\\nsize=16MiB, name=root\\n' | sfdisk --quiet --no-reread --no-tell-kernel {}",
            raw.display()
        ),
    ]))?;
    disk.write_all_at(&std::fs::read(&esp)?, MIB)?;
    let root = 49 * MIB..65 * MIB;
    let fill: Vec<u8> = ROOT_PATTERN
        .iter()
        .copied()
        .cycle()
        .take((root.end - root.start) as usize)
        .collect();
    disk.write_all_at(&fill, root.start)?;
    disk.sync_all()?;
    Ok(BootableCoreos { raw, bls, root })
}
