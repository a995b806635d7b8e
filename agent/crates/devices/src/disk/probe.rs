//! Single superblock values libblkid reads in a byte range of a device or
//! image (a filesystem's `TYPE`, `LABEL` or `UUID`), for the checks that must know
//! what a partition holds before touching it.

use std::fs::File;
use std::os::fd::AsRawFd;

use blkid::prober::{ProbeState, Prober};
use blkid::SuperblocksFlags;

/// A superblock value (`LABEL`, `TYPE`, `UUID`) libblkid reads in `[offset, offset+len)`.
pub fn probe_value(f: &File, offset: u64, len: u64, key: &str) -> Option<String> {
    let mut pr = Prober::new().ok()?;
    pr.set_device(f.as_raw_fd(), offset as i64, Some(len as i64))
        .ok()?;
    pr.enable_superblocks(true).ok()?;
    pr.set_superblocks_flags(
        SuperblocksFlags::LABEL | SuperblocksFlags::TYPE | SuperblocksFlags::UUID,
    )
    .ok()?;
    pr.enable_partitions(false).ok()?;
    match pr.do_safe_probe() {
        Ok(ProbeState::Success) => pr.lookup_value(key).ok(),
        _ => None,
    }
}
