//! A repair after directories were created with the `fatfs` crate (0.3),
//! which writes a long-name entry in front of each new directory's `.` and
//! `..` (`LFN(.) . LFN(..) ..`) where FAT requires `.` and `..` in the first
//! two slots (firmware, fsck.fat and Windows insist). Walks every directory
//! of a FAT12/16/32 filesystem on a device (following cluster chains through
//! the FAT, bounded) and rewrites such a directory's first four slots to
//! `. .. <free> <free>`, and points the `..` of a directory in the root at
//! cluster 0 as FAT requires (fatfs names the FAT32 root's cluster). The
//! same repair as the config drive's in-memory one
//! ([`crate::configdrive::vfat`]), for a filesystem too large to hold in
//! memory (the ESP).

use std::io::{Read, Seek, SeekFrom, Write};

use anyhow::{bail, Context, Result};

const ENTRY: usize = 32;
const ATTR_DIR: u8 = 0x10;
const ATTR_LFN: u8 = 0x0f;
/// Directories visited at most.
const MAX_DIRS: usize = 10_000;
/// Clusters of one directory followed at most.
const MAX_DIR_CLUSTERS: usize = 4096;

/// Geometry from the boot sector.
struct Fat {
    cluster: u64,
    fat_start: u64,
    data_start: u64,
    /// FAT32's root cluster, or FAT12/16's fixed root (offset, entries).
    root: Root,
    bits: u32,
    clusters: u64,
}

enum Root {
    Cluster(u32),
    Fixed(u64, usize),
}

fn read_at<D: Read + Seek>(d: &mut D, at: u64, buf: &mut [u8]) -> Result<()> {
    d.seek(SeekFrom::Start(at))?;
    d.read_exact(buf)
        .with_context(|| format!("reading {} bytes at {at}", buf.len()))
}

fn geometry<D: Read + Seek>(d: &mut D) -> Result<Fat> {
    let mut b = [0u8; 512];
    read_at(d, 0, &mut b)?;
    let u16at = |i: usize| u64::from(u16::from_le_bytes([b[i], b[i + 1]]));
    let u32at = |i: usize| u64::from(u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]));
    let bps = u16at(11);
    let spc = u64::from(b[13]);
    let reserved = u16at(14);
    let fats = u64::from(b[16]);
    let root_entries = u16at(17);
    let total = if u16at(19) != 0 { u16at(19) } else { u32at(32) };
    let fat_sectors = if u16at(22) != 0 { u16at(22) } else { u32at(36) };
    if !(512..=4096).contains(&bps) || spc == 0 || fats == 0 || fat_sectors == 0 {
        bail!("not a FAT boot sector");
    }
    let root_bytes = root_entries * ENTRY as u64;
    let fat_start = reserved * bps;
    let root_start = fat_start + fats * fat_sectors * bps;
    let data_start = root_start + root_bytes.div_ceil(bps) * bps;
    let clusters = (total * bps).saturating_sub(data_start) / (spc * bps);
    let bits = if u16at(22) == 0 {
        32
    } else if clusters < 4085 {
        12
    } else {
        16
    };
    let root = if bits == 32 {
        Root::Cluster(u32at(44) as u32)
    } else {
        Root::Fixed(root_start, root_entries as usize)
    };
    Ok(Fat {
        cluster: spc * bps,
        fat_start,
        data_start,
        root,
        bits,
        clusters,
    })
}

impl Fat {
    fn offset(&self, cluster: u32) -> Option<u64> {
        let c = u64::from(cluster);
        (2..self.clusters + 2)
            .contains(&c)
            .then(|| self.data_start + (c - 2) * self.cluster)
    }

    fn next<D: Read + Seek>(&self, d: &mut D, cluster: u32) -> Result<Option<u32>> {
        let c = u64::from(cluster);
        let next = match self.bits {
            32 => {
                let mut b = [0u8; 4];
                read_at(d, self.fat_start + c * 4, &mut b)?;
                u32::from_le_bytes(b) & 0x0fff_ffff
            }
            16 => {
                let mut b = [0u8; 2];
                read_at(d, self.fat_start + c * 2, &mut b)?;
                u32::from(u16::from_le_bytes(b))
            }
            _ => {
                let mut b = [0u8; 2];
                read_at(d, self.fat_start + c + c / 2, &mut b)?;
                let v = u16::from_le_bytes(b);
                u32::from(if c % 2 == 0 { v & 0xfff } else { v >> 4 })
            }
        };
        let end = match self.bits {
            32 => 0x0fff_fff8,
            16 => 0xfff8,
            _ => 0xff8,
        };
        Ok((next >= 2 && next < end).then_some(next))
    }
}

/// Repairs the `.`/`..` entries of every directory on the FAT filesystem
/// `d`; returns how many directories were repaired.
pub(crate) fn repair<D: Read + Write + Seek>(d: &mut D) -> Result<usize> {
    let fat = geometry(d)?;
    // (first cluster or None for a fixed root, fixed root's offset and
    // entries, whether the parent is the root directory)
    let mut todo: Vec<(Option<u32>, u64, usize, bool)> = match fat.root {
        Root::Cluster(c) => vec![(Some(c), 0, 0, false)],
        Root::Fixed(at, n) => vec![(None, at, n, false)],
    };
    let (mut seen, mut fixed) = (0usize, 0usize);
    while let Some((first, fixed_at, fixed_n, parent_is_root)) = todo.pop() {
        seen += 1;
        if seen > MAX_DIRS {
            bail!("more than {MAX_DIRS} directories (a loop?)");
        }
        // The directory's regions: its clusters, or the fixed root.
        let mut regions = Vec::new();
        match first {
            None => regions.push((fixed_at, fixed_n * ENTRY)),
            Some(c) => {
                let mut cur = Some(c);
                while let Some(c) = cur {
                    if regions.len() >= MAX_DIR_CLUSTERS {
                        bail!(
                            "directory at cluster {c} is longer than {MAX_DIR_CLUSTERS} clusters"
                        );
                    }
                    let at = fat
                        .offset(c)
                        .with_context(|| format!("cluster {c} lies outside the filesystem"))?;
                    regions.push((at, fat.cluster as usize));
                    cur = fat.next(d, c)?;
                }
            }
        }
        let is_root = first.is_none() || matches!(fat.root, Root::Cluster(r) if Some(r) == first);
        for (i, (at, len)) in regions.iter().enumerate() {
            let mut buf = vec![0u8; *len];
            read_at(d, *at, &mut buf)?;
            if i == 0 && !is_root {
                let mut changed = fix_dots(&mut buf);
                // FAT: `..` of a directory in the root points to cluster 0.
                if parent_is_root && &buf[ENTRY..ENTRY + 11] == b"..         " {
                    let dd = &mut buf[ENTRY..2 * ENTRY];
                    if dd[20..22] != [0, 0] || dd[26..28] != [0, 0] {
                        dd[20..22].fill(0);
                        dd[26..28].fill(0);
                        changed = true;
                    }
                }
                if changed {
                    d.seek(SeekFrom::Start(*at))?;
                    d.write_all(&buf[..4 * ENTRY])?;
                    fixed += 1;
                }
            }
            for e in buf.chunks(ENTRY) {
                if e[0] == 0 {
                    break;
                }
                if e[0] == 0xe5 || e[11] == ATTR_LFN || e[11] & ATTR_DIR == 0 || e[0] == b'.' {
                    continue;
                }
                let hi = if fat.bits == 32 {
                    u32::from(u16::from_le_bytes([e[20], e[21]])) << 16
                } else {
                    0
                };
                let c = hi | u32::from(u16::from_le_bytes([e[26], e[27]]));
                if c >= 2 {
                    todo.push((Some(c), 0, 0, is_root));
                }
            }
        }
    }
    d.flush()?;
    Ok(fixed)
}

/// `LFN . LFN ..` in the first four slots → `. .. <free> <free>`.
fn fix_dots(dir: &mut [u8]) -> bool {
    if dir.len() < 4 * ENTRY {
        return false;
    }
    let attr = |d: &[u8], k: usize| d[k * ENTRY + 11];
    let name = |d: &[u8], k: usize| d[k * ENTRY..k * ENTRY + 11].to_vec();
    if !(attr(dir, 0) == ATTR_LFN
        && name(dir, 1) == b".          "
        && attr(dir, 2) == ATTR_LFN
        && name(dir, 3) == b"..         ")
    {
        return false;
    }
    let dot = dir[ENTRY..2 * ENTRY].to_vec();
    let dotdot = dir[3 * ENTRY..4 * ENTRY].to_vec();
    dir[..ENTRY].copy_from_slice(&dot);
    dir[ENTRY..2 * ENTRY].copy_from_slice(&dotdot);
    for k in 2..4 {
        let e = &mut dir[k * ENTRY..(k + 1) * ENTRY];
        e.fill(0);
        e[0] = 0xe5;
    }
    true
}

#[cfg(test)]
mod tests {
    use std::io::Cursor;

    use super::*;

    fn check(mib: u64, fat_type: Option<fatfs::FatType>) {
        let mut img = Cursor::new(vec![0u8; (mib << 20) as usize]);
        let mut opts = fatfs::FormatVolumeOptions::new();
        if let Some(t) = fat_type {
            opts = opts.fat_type(t);
        }
        fatfs::format_volume(&mut img, opts).unwrap();
        {
            let fs = fatfs::FileSystem::new(&mut img, fatfs::FsOptions::new()).unwrap();
            {
                let efi = fs.root_dir().create_dir("EFI").unwrap();
                let boot = efi.create_dir("BOOT").unwrap();
                boot.create_file("BOOTX64.EFI")
                    .unwrap()
                    .write_all(b"x")
                    .unwrap();
                efi.create_dir("debian").unwrap();
            }
            fs.unmount().unwrap();
        }
        assert_eq!(repair(&mut img).unwrap(), 3, "{mib} MiB {fat_type:?}");
        // Idempotent, and fatfs still reads the tree.
        assert_eq!(repair(&mut img).unwrap(), 0);
        img.set_position(0);
        let fs = fatfs::FileSystem::new(&mut img, fatfs::FsOptions::new()).unwrap();
        let boot = fs.root_dir().open_dir("EFI/BOOT").unwrap();
        let names: Vec<String> = boot.iter().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names[..2], [".".to_string(), "..".to_string()]);
        assert!(names.contains(&"BOOTX64.EFI".to_string()));
        drop(boot);
        fs.unmount().unwrap();
        // fsck.fat finds nothing to fix in the directories.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("fat.img");
        std::fs::write(&path, img.get_ref()).unwrap();
        let out = std::process::Command::new("fsck.fat")
            .arg("-n")
            .arg(&path)
            .output()
            .expect("fsck.fat (dosfstools) is installed");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(!text.contains("entry"), "{mib} MiB {fat_type:?}: {text}");
    }

    #[test]
    fn dot_entries_come_first_on_fat16_and_fat32() {
        check(40, Some(fatfs::FatType::Fat16));
        check(40, Some(fatfs::FatType::Fat32));
    }

    #[test]
    fn garbage_is_refused_not_followed() {
        let mut img = Cursor::new(vec![0u8; 4096]);
        assert!(repair(&mut img).is_err());
    }
}
