//! Whether a block device is a software RAID member, as IPA 13's erase
//! steps ask it (`_is_linux_raid_member`: `lsblk --fs` of the device *and
//! its partitions* shows `linux_raid_member`): the device or one of its
//! partitions is held by an md array, or carries an md superblock of
//! version 1.x or 0.90 (a member of an array that is not running counts
//! too, as libblkid reports it the same).

use std::fs;
use std::path::Path;

use super::ops::{examine, has_v090};
use agent_devices::disk::Device;

/// Why `dev` is a RAID member (`"/dev/vda2 is a member of md0"`), or `None`.
pub fn member_reason(dev: &Device) -> Option<String> {
    let parts = dev.partitions();
    std::iter::once(dev).chain(parts.iter()).find_map(|d| {
        if let Some(name) = d.kernel_name() {
            let holders = Path::new("/sys/class/block").join(&name).join("holders");
            if let Ok(entries) = fs::read_dir(&holders) {
                for h in entries.flatten() {
                    let h = h.file_name().to_string_lossy().into_owned();
                    if h.starts_with("md") {
                        return Some(format!("{} is a member of {h}", d.path.display()));
                    }
                }
            }
        }
        if let Some((_, found)) = examine(&d.path) {
            return Some(format!(
                "{} carries the md superblock of array {:?} (not running)",
                d.path.display(),
                found.name
            ));
        }
        has_v090(&d.path).then(|| {
            format!(
                "{} carries a version-0.90 md superblock (not running)",
                d.path.display()
            )
        })
    })
}
