//! GRUB for BIOS boot installed from the deployed image itself
//! (`image.install_bootloader` under BIOS, PROTOCOL.md §5.8), as IPA 13's
//! `_install_grub2`: the image's root filesystem (found by its UUID) is
//! mounted read-write, the ramdisk's `/dev`, `/proc` and `/run` are
//! bind-mounted into it and sysfs mounted on its `/sys`, then, chrooted
//! into it, the image's own `grub-install --target=i386-pc DISK` runs for
//! each disk (every member disk when the root is on a software RAID array:
//! GRUB's core image goes into each member's MBR and BIOS boot partition,
//! so either disk boots alone) and its `grub-mkconfig -o
//! /boot/grub/grub.cfg` (`grub2-install`/`grub2-mkconfig` and
//! `/boot/grub2` when the image has `grub2-install`, as IPA decides),
//! with `GRUB_DISABLE_OS_PROBER=true`. Everything mounted is unmounted
//! again in reverse order, also when a step fails.
//!
//! This runs the tenant's programs as root in the ramdisk, which is why
//! Ironic turned it off by default (CVE-2026-43003): the caller
//! (`commands::bootloader`) runs it only when the conductor's lookup
//! allowed it (`enable_bios_bootloader_install`). Unlike IPA, the image's
//! vfat filesystems are not mounted from its fstab first (`mount -a -t
//! vfat`): a BIOS install needs none, and an fstab naming a partition the
//! deploy did not make would fail the install.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

use crate::ignition::mount::Mounted;

/// `PATH` inside the chroot (IPA's `_get_path_variable` plus the usual
/// directories).
const CHROOT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// What was installed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Installed {
    /// The disks whose boot code GRUB now is.
    pub disks: Vec<PathBuf>,
    /// `grub` or `grub2`: the image's program names.
    pub binary: String,
    /// The configuration written, inside the image (`/boot/grub/grub.cfg`).
    pub config: String,
}

/// Mounts made inside the image's root, unmounted in reverse on drop.
struct Stack {
    root: Option<Mounted>,
    inner: Vec<PathBuf>,
}

impl Stack {
    fn push(&mut self, args: &[&str], source: &str, target: &Path) -> Result<()> {
        std::fs::create_dir_all(target)
            .with_context(|| format!("creating {} in the image", target.display()))?;
        agent_base::tool::run(Command::new("mount").args(args).arg(source).arg(target))
            .with_context(|| format!("mounting {source} on {}", target.display()))?;
        self.inner.push(target.to_path_buf());
        Ok(())
    }

    /// Unmounts everything, the root last; the first failure is returned
    /// after trying all.
    fn release(mut self) -> Result<()> {
        let mut first = None;
        while let Some(dir) = self.inner.pop() {
            if let Err(e) = umount(&dir) {
                first.get_or_insert(e);
            }
        }
        if let Some(root) = self.root.take() {
            if let Err(e) = root.unmount() {
                first.get_or_insert(anyhow::Error::from(e).context("unmounting the image's root"));
            }
        }
        first.map_or(Ok(()), Err)
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        while let Some(dir) = self.inner.pop() {
            if let Err(e) = umount(&dir) {
                tracing::error!("{e:#}");
            }
        }
    }
}

/// Unmounts `dir` ([`crate::ignition::mount::umount`]: retried, detached
/// lazily when it stays busy).
fn umount(dir: &Path) -> Result<()> {
    crate::ignition::mount::umount(dir).with_context(|| format!("unmounting {}", dir.display()))
}

/// `grub2` when the image has `usr/sbin/grub2-install`, else `grub`.
pub fn binary_name(root: &Path) -> &'static str {
    if root.join("usr/sbin/grub2-install").exists() {
        "grub2"
    } else {
        "grub"
    }
}

/// Runs `program args…` chrooted into `root`, with [`CHROOT_PATH`] and
/// `env`.
fn in_chroot(root: &Path, program: &str, args: &[&str], env: &[(&str, &str)]) -> Result<()> {
    let mut cmd = Command::new("chroot");
    cmd.arg(root)
        .arg(program)
        .args(args)
        .env("PATH", CHROOT_PATH);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = agent_base::tool::run(&mut cmd)
        .with_context(|| format!("running the image's {program} {}", args.join(" ")))?;
    let text = String::from_utf8_lossy(&out.stderr);
    if !text.trim().is_empty() {
        tracing::info!(program, output = %text.trim(), "image's program finished");
    }
    Ok(())
}

/// Installs the image's GRUB for BIOS on each of `disks` from the root
/// filesystem with UUID `root_uuid` on `device` (a disk or an md array
/// holding a partition table), then writes its configuration.
pub fn install_bios(device: &Path, root_uuid: &str, disks: &[PathBuf]) -> Result<Installed> {
    if disks.is_empty() {
        bail!("no disk to install GRUB on");
    }
    let (part, fstype) = crate::partimage::efi::find_root(device, root_uuid)?;
    let root = Mounted::with_options(device, part.start, part.len, &fstype, "rw")
        .with_context(|| format!("mounting the image's root filesystem {root_uuid}"))?;
    let dir = root.path();
    let mut stack = Stack {
        root: Some(root),
        inner: Vec::new(),
    };
    let binary = binary_name(&dir);
    let install = format!("{binary}-install");
    if !dir.join("usr/sbin").join(&install).exists() && !dir.join("sbin").join(&install).exists() {
        bail!(
            "the image's root filesystem {root_uuid} has no {install} (usr/sbin or sbin): \
             the image cannot install GRUB for BIOS boot (Debian: package grub-pc)"
        );
    }
    for fs in ["/dev", "/proc", "/run"] {
        stack.push(&["-o", "bind"], fs, &dir.join(&fs[1..]))?;
    }
    stack.push(&["-t", "sysfs"], "none", &dir.join("sys"))?;
    for disk in disks {
        let disk = disk.to_str().context("disk path is not UTF-8")?;
        in_chroot(&dir, &install, &["--target=i386-pc", disk], &[])?;
        tracing::info!(disk, "GRUB installed from the image");
    }
    let config = format!("/boot/{binary}/grub.cfg");
    in_chroot(
        &dir,
        &format!("{binary}-mkconfig"),
        &["-o", &config],
        &[
            ("GRUB_DISABLE_OS_PROBER", "true"),
            ("GRUB_SAVEDEFAULT", "true"),
            ("LC_ALL", "C"),
        ],
    )?;
    nix::unistd::sync();
    stack.release()?;
    Ok(Installed {
        disks: disks.to_vec(),
        binary: binary.to_string(),
        config,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grub2_names_when_the_image_has_grub2_install() {
        let d = tempfile::tempdir().unwrap();
        assert_eq!(binary_name(d.path()), "grub");
        std::fs::create_dir_all(d.path().join("usr/sbin")).unwrap();
        std::fs::write(d.path().join("usr/sbin/grub2-install"), "").unwrap();
        assert_eq!(binary_name(d.path()), "grub2");
    }
}
