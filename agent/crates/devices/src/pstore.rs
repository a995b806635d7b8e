//! The kernel's persistent store (pstore: crash dumps and console logs kept
//! across reboots in firmware or RAM), which the `erase_pstore` clean step
//! empties so the next tenant does not read the last one's crash logs.
//! Paths are parameters so the logic is tested on plain directories.

use std::io;
use std::path::{Path, PathBuf};

/// Where the kernel's pstore is mounted by convention.
pub const DEFAULT_MOUNT: &str = "/sys/fs/pstore";

/// The mount point of a `pstore` filesystem in `/proc/mounts` text.
pub fn mount_point(mounts: &str) -> Option<PathBuf> {
    mounts.lines().find_map(|l| {
        let mut f = l.split_whitespace();
        let (_, dir, fstype) = (f.next()?, f.next()?, f.next()?);
        (fstype == "pstore").then(|| PathBuf::from(dir.replace("\\040", " ")))
    })
}

/// Removes everything in `dir` (files and, should there be any,
/// directories); returns the names removed.
pub fn erase(dir: &Path) -> io::Result<Vec<String>> {
    let mut removed = Vec::new();
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        let path = e.path();
        if e.file_type()?.is_dir() {
            std::fs::remove_dir_all(&path)?;
        } else {
            std::fs::remove_file(&path)?;
        }
        removed.push(e.file_name().to_string_lossy().into_owned());
    }
    removed.sort();
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_mount_and_empties_it() {
        let mounts = "sysfs /sys sysfs rw 0 0\npstore /sys/fs/pstore pstore rw,nosuid 0 0\n";
        assert_eq!(mount_point(mounts), Some(PathBuf::from("/sys/fs/pstore")));
        assert_eq!(mount_point("sysfs /sys sysfs rw 0 0\n"), None);
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("dmesg-efi-1"), "oops").unwrap();
        std::fs::write(dir.path().join("console-ramoops-0"), "log").unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        assert_eq!(
            erase(dir.path()).unwrap(),
            ["console-ramoops-0", "dmesg-efi-1", "sub"]
        );
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        assert!(erase(&dir.path().join("missing")).is_err());
    }
}
