//! Memory: usable total from `/proc/meminfo`, installed size from the SMBIOS
//! memory devices, falling back to the online memory blocks in sysfs.

use std::path::Path;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use super::{read_attr, smbios, under};

/// `inventory.memory`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Memory {
    /// Usable memory in bytes (`MemTotal`).
    pub total: u64,
    /// Installed memory in MiB; null when neither SMBIOS nor sysfs tell.
    pub physical_mb: Option<u64>,
}

/// `MemTotal` in bytes from `/proc/meminfo` text.
pub(crate) fn parse_meminfo_total(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Reads memory facts under `root`.
pub(crate) fn read(root: &Path) -> Result<Memory> {
    let path = under(root, "/proc/meminfo");
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let total =
        parse_meminfo_total(&text).with_context(|| format!("no MemTotal in {}", path.display()))?;
    let physical_mb = std::fs::read(under(root, "/sys/firmware/dmi/tables/DMI"))
        .ok()
        .and_then(|t| smbios::physical_memory_mib(&t))
        .or_else(|| memory_blocks_mib(root));
    Ok(Memory { total, physical_mb })
}

/// Online memory blocks × block size, in MiB (hot-pluggable memory
/// sections; excludes firmware holes, so slightly below the installed size).
pub(crate) fn memory_blocks_mib(root: &Path) -> Option<u64> {
    let dir = under(root, "/sys/devices/system/memory");
    let block = u64::from_str_radix(&read_attr(&dir.join("block_size_bytes"))?, 16).ok()?;
    let online = std::fs::read_dir(&dir)
        .ok()?
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("memory"))
        .filter(|e| read_attr(&e.path().join("online")).as_deref() == Some("1"))
        .count() as u64;
    (online > 0).then(|| online * block / (1 << 20))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meminfo_total_in_bytes() {
        let text = "MemTotal:       24684084 kB\nMemFree:        1 kB\n";
        assert_eq!(parse_meminfo_total(text), Some(24684084 * 1024));
        assert_eq!(parse_meminfo_total("MemFree: 1 kB\n"), None);
    }

    #[test]
    fn memory_blocks_fallback() {
        let dir = tempfile::tempdir().unwrap();
        let mem = dir.path().join("sys/devices/system/memory");
        std::fs::create_dir_all(&mem).unwrap();
        std::fs::write(mem.join("block_size_bytes"), "8000000\n").unwrap();
        for (i, on) in [(0, "1"), (1, "1"), (2, "0")] {
            let d = mem.join(format!("memory{i}"));
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join("online"), on).unwrap();
        }
        assert_eq!(memory_blocks_mib(dir.path()), Some(256));
    }
}
