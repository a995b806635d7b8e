//! The filesystems PID 1 mounts before anything else: proc, sys, devtmpfs,
//! /run, /tmp, securityfs (where the kernel shows its lockdown mode); and efivarfs when booted by UEFI, once the modules are loaded
//! (Debian builds it as a module). Already-mounted ones (EBUSY) are fine, so
//! running twice is harmless.

use std::path::Path;

use nix::mount::{mount, MsFlags};

/// One mount: source, target, type, flags.
type Spec = (&'static str, &'static str, &'static str, MsFlags);

/// Mounts everything; returns what failed (logged by the caller).
pub(crate) fn mount_all() -> Vec<String> {
    let nodev = MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
    let specs: [Spec; 7] = [
        ("proc", "/proc", "proc", nodev),
        ("sysfs", "/sys", "sysfs", nodev),
        ("devtmpfs", "/dev", "devtmpfs", MsFlags::MS_NOSUID),
        ("securityfs", "/sys/kernel/security", "securityfs", nodev),
        (
            "devpts",
            "/dev/pts",
            "devpts",
            MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC,
        ),
        (
            "tmpfs",
            "/run",
            "tmpfs",
            MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        ),
        (
            "tmpfs",
            "/tmp",
            "tmpfs",
            MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        ),
    ];
    let mut failed = Vec::new();
    for (src, target, fstype, flags) in specs {
        if let Err(e) = mount_one(src, target, fstype, flags) {
            failed.push(format!("{target}: {e}"));
        }
    }
    failed
}

/// Mounts efivarfs when the machine booted by UEFI (after the module
/// phase: `efivarfs` is a module in Debian's kernel). Returns a failure.
pub(crate) fn mount_efivarfs() -> Option<String> {
    if !Path::new("/sys/firmware/efi").exists() {
        return None;
    }
    let nodev = MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
    mount_one("efivarfs", "/sys/firmware/efi/efivars", "efivarfs", nodev)
        .err()
        .map(|e| format!("efivarfs: {e}"))
}

fn mount_one(src: &str, target: &str, fstype: &str, flags: MsFlags) -> nix::Result<()> {
    let _ = std::fs::create_dir_all(target);
    match mount(Some(src), target, Some(fstype), flags, None::<&str>) {
        Err(nix::errno::Errno::EBUSY) | Ok(()) => Ok(()),
        Err(e) => Err(e),
    }
}
