//! Powering the machine off or rebooting it — only ever inside the deploy
//! ramdisk. Outside it (host mode) power actions are simulated by the caller
//! and this module refuses to act, whatever the configuration says.

use crate::state::PowerAction;

/// Whether this process runs inside the deploy ramdisk: the root filesystem
/// is the initramfs (rootfs/ramfs/tmpfs) and the ramdisk's marker exists.
pub fn in_ramdisk() -> bool {
    let root_is_initramfs = std::fs::read_to_string("/proc/self/mountinfo")
        .ok()
        .and_then(|mi| {
            mi.lines()
                .find(|l| l.split_whitespace().nth(4) == Some("/"))
                .and_then(|l| l.split(" - ").nth(1))
                .and_then(|rest| rest.split_whitespace().next())
                .map(|fstype| matches!(fstype, "rootfs" | "ramfs" | "tmpfs"))
        })
        // The initramfs root often does not appear in mountinfo at all.
        .unwrap_or(true);
    root_is_initramfs && std::path::Path::new(RAMDISK_MARKER).exists()
}

/// File the image builder puts in the initramfs.
pub const RAMDISK_MARKER: &str = "/etc/deploy-ramdisk-release";

/// Syncs and powers off or reboots. Returns only if that failed or this is
/// not the ramdisk.
pub fn act(action: PowerAction) {
    if !in_ramdisk() {
        tracing::error!(
            ?action,
            "refusing to power the machine: not running in the deploy ramdisk"
        );
        return;
    }
    freeze_md_sync();
    nix::unistd::sync();
    let mode = match action {
        PowerAction::PowerOff => nix::sys::reboot::RebootMode::RB_POWER_OFF,
        PowerAction::Reboot => nix::sys::reboot::RebootMode::RB_AUTOBOOT,
    };
    let Err(e) = nix::sys::reboot::reboot(mode);
    tracing::error!(?action, error = %e, "reboot(2) failed");
}

/// Stops every software RAID resync or recovery in progress (`frozen` in
/// `/sys/block/mdN/md/sync_action`) so the kernel's shutdown does not wait
/// on a sync thread; md resumes from its checkpoint at the next assembly.
fn freeze_md_sync() {
    let Ok(entries) = std::fs::read_dir("/sys/block") else {
        return;
    };
    for e in entries.flatten() {
        let action = e.path().join("md/sync_action");
        if action.exists() {
            if let Err(err) = std::fs::write(&action, "frozen") {
                tracing::warn!(device = %e.file_name().to_string_lossy(), "freezing the RAID resync: {err}");
            }
        }
    }
}
