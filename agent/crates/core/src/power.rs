//! Powering the machine off or rebooting it — only ever inside the deploy
//! ramdisk, or from OpenShift's `ironic-agent` container on a CoreOS live
//! host ([`act_from_container`]). Elsewhere (host mode) power actions are
//! simulated by the caller and this module refuses to act, whatever the
//! configuration says.

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

/// The kernel's magic SysRq trigger: `o` powers off, `b` reboots, at once.
pub const SYSRQ_TRIGGER: &str = "/proc/sysrq-trigger";

/// Powers the host off or reboots it from OpenShift's `ironic-agent`
/// container, whose PID 1 is the agent in its own PID namespace (where
/// reboot(2) only ends the namespace): as IPA 13 does there, after a sync
/// through the SysRq trigger (`standby._run_shutdown_command` runs
/// `poweroff`/`reboot`, which fail without systemd in the container, then
/// writes `o`/`b` to `/proc/sysrq-trigger`). Acts only when the host root
/// still shows a CoreOS live system; returns only if it did not act.
pub fn act_from_container(action: PowerAction, host_root: &std::path::Path) {
    if !agent_base::config::container::is_live(host_root) {
        tracing::error!(
            ?action,
            host_root = %host_root.display(),
            marker = agent_base::config::container::LIVE_MARKER,
            "refusing to power the host: it is not a CoreOS live system"
        );
        return;
    }
    freeze_md_sync();
    nix::unistd::sync();
    if let Err(e) = std::fs::write(SYSRQ_TRIGGER, sysrq_key(action)) {
        tracing::error!(?action, "writing {SYSRQ_TRIGGER}: {e}");
    }
}

/// The SysRq key of an action.
pub fn sysrq_key(action: PowerAction) -> &'static str {
    match action {
        PowerAction::PowerOff => "o",
        PowerAction::Reboot => "b",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sysrq_keys_as_ipa_writes_them() {
        // The refusal on a host that is not live is tested through the
        // container itself (hardware-tests/tests/host/container_form.rs), never
        // by calling the power path in a unit test.
        assert_eq!(sysrq_key(PowerAction::PowerOff), "o");
        assert_eq!(sysrq_key(PowerAction::Reboot), "b");
    }
}
