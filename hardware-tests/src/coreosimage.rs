//! A small CoreOS-like disk image for the `install_coreos` suites: GPT, an
//! ext4 filesystem labelled as asked (`boot` for a CoreOS image) holding a
//! BLS entry and the image's own first-boot stamp, and a root partition;
//! and where the real `coreos-installer` that `ci/install-deps` builds is.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result};

use crate::run;

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
