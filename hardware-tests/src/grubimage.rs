//! A Debian root filesystem that installs its own GRUB for BIOS boot, for
//! the agent's `install_bootloader` under BIOS (`agent/crates/contents/src/grub.rs`): the
//! programs come from Debian's packages (`grub-pc-bin`, `grub-common`,
//! `grub2-common` and what they run and link: dash, coreutils, sed, grep,
//! their libraries), unpacked by `ci/unpack-debs`, not installed; what
//! boots is the test image's kernel and initramfs
//! ([`crate::testimage`]), as `/boot/vmlinuz-VERSION` and
//! `/boot/initrd.img-VERSION`, which Debian's `grub-mkconfig` (its
//! `10_linux`) finds as it finds any installed kernel, with
//! `/etc/default/grub` putting the console on the serial port. The image
//! has no GRUB of its own installed anywhere: only its `grub-install`
//! run by the agent makes a disk boot. (GRUB cannot install onto a loop
//! device: it asks a partition for its start with `HDIO_GETGEO`, which
//! loop devices do not answer; a virtio disk does.)

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result};

use crate::{repo_root, run, testimage};

/// The Debian packages unpacked into the root.
pub const PACKAGES: &[&str] = &[
    "grub-pc-bin",
    "grub-common",
    "grub2-common",
    "libc6",
    "libgcc-s1",
    "libdevmapper1.02.1",
    "libselinux1",
    "libpcre2-8-0",
    "libudev1",
    "libefiboot1",
    "libefivar1",
    "liblzma5",
    "libfuse3-3",
    "libfreetype6",
    "libpng16-16",
    "zlib1g",
    "libbrotli1",
    "libbz2-1.0",
    "dash",
    "coreutils",
    "sed",
    "grep",
    "libacl1",
    "libattr1",
    "libgmp10",
    // grub-probe asks mdadm for the UUID of a version-1 array.
    "mdadm",
];

/// `/etc/default/grub`: no menu wait, the kernel's console on ttyS0, no
/// IO-APIC timer check (it can fail under TCG on a loaded machine:
/// testimage/disk.rs).
const DEFAULT_GRUB: &str = "GRUB_DEFAULT=0\n\
GRUB_TIMEOUT=0\n\
GRUB_DISTRIBUTOR=Debian\n\
GRUB_CMDLINE_LINUX_DEFAULT=\"\"\n\
GRUB_CMDLINE_LINUX=\"console=ttyS0 panic=-1 no_timer_check\"\n\
GRUB_TERMINAL=console\n\
GRUB_DISABLE_RECOVERY=true\n";

/// Builds the root tree in `dir/tree` for a system printing `marker`
/// whose root filesystem has `root_uuid`; returns the tree.
pub fn tree(dir: &Path, marker: &str, root_uuid: &str) -> Result<PathBuf> {
    let debs = run(Command::new(repo_root().join("ci/unpack-debs"))
        .arg("grub-root")
        .args(PACKAGES))
    .context("unpacking Debian's GRUB packages (ci/unpack-debs)")?;
    let tree = dir.join("tree");
    run(Command::new("cp")
        .arg("-a")
        .arg(format!("{}/.", debs.trim()))
        .arg(&tree))?;
    let inputs = testimage::Inputs::fetch()?;
    let version = &inputs.kernel.version;
    let initrd = testimage::initramfs::build(&inputs.kernel, &inputs.busybox, marker)?;
    for d in [
        "boot/grub",
        "dev",
        "proc",
        "sys",
        "run",
        "tmp",
        "etc/default",
    ] {
        std::fs::create_dir_all(tree.join(d))?;
    }
    std::fs::copy(
        &inputs.kernel.image,
        tree.join(format!("boot/vmlinuz-{version}")),
    )?;
    std::fs::write(tree.join(format!("boot/initrd.img-{version}")), initrd)?;
    std::fs::write(tree.join("etc/default/grub"), DEFAULT_GRUB)?;
    std::fs::write(
        tree.join("etc/fstab"),
        format!("UUID={root_uuid} / ext4 defaults 0 1\n"),
    )?;
    Ok(tree)
}

/// The root as an ext4 partition image of `mib` MiB with `root_uuid`
/// (label `cloudimg-rootfs`), in `dir`; returns its path.
pub fn ext4_image(dir: &Path, marker: &str, root_uuid: &str, mib: u64) -> Result<PathBuf> {
    let tree = tree(dir, marker, root_uuid)?;
    let img = dir.join("grub-root.img");
    std::fs::File::create(&img)?.set_len(mib << 20)?;
    run(Command::new("mkfs.ext4")
        .args(["-q", "-F", "-L", "cloudimg-rootfs", "-U", root_uuid, "-d"])
        .arg(&tree)
        .arg(&img))?;
    Ok(img)
}

/// The root as a whole-disk image in `dir`: a GPT with one Linux
/// partition from 1 MiB holding [`ext4_image`] (`mib` MiB); returns its
/// path. Its boot code is empty: GRUB comes only from the agent running
/// the image's `grub-install` (`image_rootfs_uuid` = `root_uuid`).
pub fn whole_disk_image(dir: &Path, marker: &str, root_uuid: &str, mib: u64) -> Result<PathBuf> {
    let root = ext4_image(dir, marker, root_uuid, mib)?;
    let disk = dir.join("grub-disk.img");
    // 1 MiB before, the backup GPT after.
    std::fs::File::create(&disk)?.set_len((mib + 2) << 20)?;
    let mut child = Command::new("sfdisk")
        .args(["--quiet", "--no-reread", "--no-tell-kernel"])
        .arg(&disk)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .context("sfdisk")?;
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().context("sfdisk stdin")?;
        writeln!(
            stdin,
            "label: gpt\nstart=2048,size={},type=0FC63DAF-8483-4772-8E79-3D69D8477DE4,name=root",
            mib * 2048
        )?;
    }
    anyhow::ensure!(
        child.wait()?.success(),
        "sfdisk failed on {}",
        disk.display()
    );
    run(Command::new("dd")
        .arg(format!("if={}", root.display()))
        .arg(format!("of={}", disk.display()))
        .args(["bs=1M", "seek=1", "conv=notrunc,sparse", "status=none"]))?;
    Ok(disk)
}
