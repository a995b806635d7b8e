//! IPA 13's `full_sync` (`hardware.py`, before `standby.sync` answers and
//! before a power action): `sync(2)`, the kernel's page cache dropped
//! (`/proc/sys/vm/drop_caches`), and every block device's buffers flushed
//! (`BLKFLSBUF`, what `blockdev --flushbufs` does). Only `sync` failing is
//! an error (the machine is then in a bad state); the rest is logged.

use std::path::{Path, PathBuf};

use super::ioctl;

/// What [`full_sync`] did beyond `sync(2)`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Flushed {
    /// Devices whose buffers were flushed.
    pub devices: Vec<PathBuf>,
    /// Why a device or the cache drop failed, one line each.
    pub warnings: Vec<String>,
}

/// Syncs, drops the page cache when `drop_caches` names the knob's file
/// (`/proc/sys/vm/drop_caches` in the ramdisk; `None` in host mode, which
/// never changes this machine's kernel settings), and flushes `devices`.
pub fn full_sync(devices: &[PathBuf], drop_caches: Option<&Path>) -> Flushed {
    nix::unistd::sync();
    let mut out = Flushed::default();
    if let Some(knob) = drop_caches {
        if let Err(e) = std::fs::write(knob, b"3") {
            out.warnings.push(format!(
                "cannot tell the kernel to drop caches ({}): {e}",
                knob.display()
            ));
        }
    }
    for d in devices {
        let flushed = std::fs::File::open(d).and_then(|f| ioctl::flush_buffers(&f));
        match flushed {
            Ok(()) => out.devices.push(d.clone()),
            Err(e) => out
                .warnings
                .push(format!("cannot flush the buffers of {}: {e}", d.display())),
        }
    }
    for w in &out.warnings {
        tracing::warn!("{w}");
    }
    tracing::info!(devices = ?out.devices, "file system and device buffers flushed");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_device_that_cannot_flush_is_named_and_the_rest_goes_on() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("not-a-block-device");
        std::fs::write(&file, b"x").unwrap();
        let knob = dir.path().join("drop_caches");
        let out = full_sync(&[file.clone(), dir.path().join("missing")], Some(&knob));
        assert!(out.devices.is_empty());
        assert_eq!(out.warnings.len(), 2, "{:?}", out.warnings);
        assert!(
            out.warnings[0].contains("not-a-block-device"),
            "{:?}",
            out.warnings
        );
        assert_eq!(std::fs::read(&knob).unwrap(), b"3");
        let out = full_sync(&[], Some(&dir.path().join("no/such/knob")));
        assert!(out.warnings[0].starts_with("cannot tell the kernel to drop caches"));
    }
}
