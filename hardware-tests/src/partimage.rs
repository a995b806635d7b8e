//! A partition image as distributions ship them for Nova (one ext4
//! filesystem, no partition table) with a marker, an fstab and UEFI
//! loaders under `/boot/efi/EFI`, made by `mkfs.ext4 -d` with a known UUID.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::Result;

use crate::run;

/// The root filesystem's UUID.
pub const ROOT_UUID: &str = "3f8c2b1a-5d6e-4f70-8a9b-0c1d2e3f4a5b";
/// `/boot/efi/EFI/BOOT/BOOTX64.EFI`.
pub const BOOTX64: &[u8] = b"MZ pretend removable-path loader\n";
/// `/boot/efi/EFI/debian/grubx64.efi`.
pub const GRUBX64: &[u8] = b"MZ pretend vendor grub\n";
/// `/boot/grub2/grub.cfg`.
pub const GRUB_CFG: &str = "set default=0\nmenuentry test { linux /vmlinuz }\n";
/// `/marker`.
pub const MARKER: &str = "partition image marker\n";

/// Builds the image (48 MiB, 4 KiB blocks, so it also mounts on 4Kn disks)
/// in `dir`; returns its path.
pub fn ext4_image(dir: &Path) -> Result<PathBuf> {
    let tree = dir.join("tree");
    for d in [
        "etc",
        "boot/efi/EFI/BOOT",
        "boot/efi/EFI/debian",
        "boot/grub2",
    ] {
        std::fs::create_dir_all(tree.join(d))?;
    }
    std::fs::write(tree.join("marker"), MARKER)?;
    std::fs::write(
        tree.join("etc/fstab"),
        format!("UUID={ROOT_UUID} / ext4 defaults 0 1\n"),
    )?;
    std::fs::write(tree.join("boot/efi/EFI/BOOT/BOOTX64.EFI"), BOOTX64)?;
    std::fs::write(tree.join("boot/efi/EFI/debian/grubx64.efi"), GRUBX64)?;
    std::fs::write(tree.join("boot/grub2/grub.cfg"), GRUB_CFG)?;
    let img = dir.join("root.img");
    std::fs::File::create(&img)?.set_len(48 << 20)?;
    run(Command::new("mkfs.ext4")
        .args([
            "-q",
            "-F",
            "-b",
            "4096",
            "-L",
            "cloudimg-rootfs",
            "-U",
            ROOT_UUID,
            "-d",
        ])
        .arg(&tree)
        .arg(&img))?;
    Ok(img)
}

/// The contents of `path` in the ext4 filesystem on `dev` (debugfs, no
/// mount).
pub fn ext4_cat(dev: &Path, path: &str) -> Result<String> {
    run(Command::new("debugfs")
        .args(["-R", &format!("cat {path}")])
        .arg(dev))
}

/// The contents of `path` on the FAT filesystem on `dev` (mtools, no mount).
pub fn fat_cat(dev: &Path, path: &str) -> Result<Vec<u8>> {
    let out = Command::new("mtype")
        .arg("-i")
        .arg(dev)
        .arg(format!("::{path}"))
        .output()?;
    anyhow::ensure!(out.status.success(), "mtype {path}: {out:?}");
    Ok(out.stdout)
}
