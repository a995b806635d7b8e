//! vfat config drives on disks with large logical sectors (4Kn).
//!
//! Linux mounts a FAT filesystem only when its bytes-per-sector (BPB,
//! offset 11) is at least the device's logical block size; otherwise
//! `fat_fill_super` fails with "logical sector size too small for device".
//! A vfat config drive made with 512-byte sectors (what `mkfs.vfat` and
//! Ironic-side tools produce) written byte for byte to a 4096-byte-sector
//! disk would therefore be unreadable for cloud-init or Ignition on the
//! deployed system, although libblkid still reads its label. Such an image
//! is rebuilt in memory with the disk's sector size (as IPA rebuilds an
//! unmountable config drive as vfat): same volume label and id, the same
//! directory tree and file contents, sized like the original (at least
//! 4 MiB, twice the original, at most the partition). ISO 9660 config
//! drives are written as they are (their 2048-byte blocks are a separate
//! matter; see agent/docs/what-works.md, "Config drive").

use std::io::{Cursor, Read, Write};

use fatfs::{Dir, FileSystem, FormatVolumeOptions, FsOptions, ReadWriteSeek};

/// Why a vfat config drive could not be rebuilt.
#[derive(Debug, thiserror::Error)]
pub enum VfatError {
    /// The disk's sector size is not one FAT can have.
    #[error("cannot rebuild a vfat config drive for {0}-byte sectors")]
    UnsupportedSector(u64),
    /// Reading the source or writing the rebuilt image failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done, on which path.
        what: String,
        /// The error.
        source: std::io::Error,
    },
    /// fatfs made a FAT32 filesystem.
    #[error("the rebuilt config drive is FAT32, which is not expected")]
    Fat32,
    /// More directories than a config drive can have.
    #[error("the rebuilt config drive has too many directories")]
    TooManyDirectories,
    /// A directory entry points past the image.
    #[error("directory cluster {0} lies outside the image")]
    ClusterOutside(usize),
    /// Directories nested past [`MAX_DEPTH`].
    #[error(
        "the vfat config drive nests directories deeper than {MAX_DEPTH} at {0}/ (a directory loop?)"
    )]
    TooDeep(String),
    /// More entries than the budget.
    #[error("the vfat config drive has too many entries (at {0})")]
    TooManyEntries(String),
    /// Files that hold more than the image.
    #[error(
        "{0}: the vfat config drive's files hold more than the image itself (a looping cluster chain?)"
    )]
    LoopingChain(String),
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> VfatError {
    let what = what.into();
    move |source| VfatError::Io { what, source }
}

/// The bytes-per-sector of `data` when it starts with a FAT boot sector.
pub fn fat_sector_size(data: &[u8]) -> Option<u16> {
    if data.len() < 512 || data[510..512] != [0x55, 0xaa] || !matches!(data[0], 0xeb | 0xe9) {
        return None;
    }
    let fat_name =
        &data[54..59] == b"FAT12" || &data[54..59] == b"FAT16" || &data[82..87] == b"FAT32";
    let bps = u16::from_le_bytes([data[11], data[12]]);
    (fat_name && matches!(bps, 512 | 1024 | 2048 | 4096)).then_some(bps)
}

/// `Some(rebuilt image)` when `data` is a FAT image whose sectors are
/// smaller than the disk's `sector` size; `None` when it can be written as
/// it is. `room` is the partition size (the rebuilt image must fit).
pub fn adapt(data: &[u8], sector: u64, room: u64) -> Result<Option<Vec<u8>>, VfatError> {
    let Some(bps) = fat_sector_size(data) else {
        return Ok(None);
    };
    if u64::from(bps) >= sector {
        return Ok(None);
    }
    let sector16 = u16::try_from(sector)
        .ok()
        .filter(|s| s.is_power_of_two() && *s <= 4096)
        .ok_or(VfatError::UnsupportedSector(sector))?;
    let src = FileSystem::new(Cursor::new(data.to_vec()), FsOptions::new())
        .map_err(io("reading the vfat config drive"))?;
    let size = (data.len() as u64 * 2).max(4 << 20).min(room) / sector * sector;
    let mut label = [b' '; 11];
    let old = src.volume_label();
    let old = old.trim_end();
    for (d, s) in label.iter_mut().zip(old.bytes()) {
        *d = s;
    }
    let mut image = Cursor::new(vec![0u8; size as usize]);
    fatfs::format_volume(
        &mut image,
        FormatVolumeOptions::new()
            .bytes_per_sector(sector16)
            .volume_label(label)
            .volume_id(src.volume_id()),
    )
    .map_err(io(format!(
        "formatting a vfat config drive with {sector}-byte sectors"
    )))?;
    {
        let dst = FileSystem::new(&mut image, FsOptions::new())
            .map_err(io("opening the rebuilt config drive"))?;
        let mut budget = Budget {
            bytes: data.len() as u64,
            entries: 10_000,
        };
        copy_dir(&src.root_dir(), &dst.root_dir(), "", 0, &mut budget)?;
        dst.unmount()
            .map_err(io("closing the rebuilt config drive"))?;
    }
    let mut image = image.into_inner();
    fix_dot_entries(&mut image)?;
    tracing::info!(
        from = bps,
        to = sector,
        label = old,
        bytes = size,
        "vfat config drive rebuilt for the disk's sector size"
    );
    Ok(Some(image))
}

const ENTRY: usize = 32;
const ATTR_DIR: u8 = 0x10;
const ATTR_LFN: u8 = 0x0f;

/// fatfs 0.3 writes a long-name entry in front of each new directory's `.`
/// and `..` (layout `LFN(.) . LFN(..) ..`), where FAT requires `.` and `..`
/// in the first two slots (fsck.fat and Windows insist). Rewrites each such
/// directory's first four slots to `. .. <free> <free>`. FAT12/16 only
/// (what a config drive of at most 64 MiB becomes).
fn fix_dot_entries(img: &mut [u8]) -> Result<(), VfatError> {
    let u16at = |img: &[u8], i: usize| usize::from(u16::from_le_bytes([img[i], img[i + 1]]));
    let bps = u16at(img, 11);
    let spc = usize::from(img[13]);
    let reserved = u16at(img, 14);
    let fats = usize::from(img[16]);
    let root_entries = u16at(img, 17);
    let fat_sectors = u16at(img, 22);
    if fat_sectors == 0 {
        return Err(VfatError::Fat32);
    }
    let root = (reserved + fats * fat_sectors) * bps;
    let data = root + root_entries * ENTRY;
    let cluster_size = spc * bps;
    let mut todo = vec![(root, root_entries)];
    let mut seen = 0;
    while let Some((start, slots)) = todo.pop() {
        seen += 1;
        if seen > 10_000 {
            return Err(VfatError::TooManyDirectories);
        }
        if start != root {
            let attr = |k: usize| img[start + k * ENTRY + 11];
            let name = |k: usize| &img[start + k * ENTRY..start + k * ENTRY + 11];
            if attr(0) == ATTR_LFN
                && name(1) == b".          "
                && attr(2) == ATTR_LFN
                && name(3) == b"..         "
            {
                let dot = img[start + ENTRY..start + 2 * ENTRY].to_vec();
                let dotdot = img[start + 3 * ENTRY..start + 4 * ENTRY].to_vec();
                img[start..start + ENTRY].copy_from_slice(&dot);
                img[start + ENTRY..start + 2 * ENTRY].copy_from_slice(&dotdot);
                for k in 2..4 {
                    let e = start + k * ENTRY;
                    img[e..e + ENTRY].fill(0);
                    img[e] = 0xe5;
                }
            }
        }
        for k in 0..slots {
            let e = start + k * ENTRY;
            let (first, attr) = (img[e], img[e + 11]);
            if first == 0 {
                break;
            }
            if first == 0xe5 || attr == ATTR_LFN || attr & ATTR_DIR == 0 || first == b'.' {
                continue;
            }
            let cluster = u16at(img, e + 26);
            if cluster < 2 {
                continue;
            }
            let off = data + (cluster - 2) * cluster_size;
            if off + cluster_size > img.len() {
                return Err(VfatError::ClusterOutside(cluster));
            }
            // Directories written here fit in one cluster (fatfs extends
            // them only past cluster_size / 32 entries).
            todo.push((off, cluster_size / ENTRY));
        }
    }
    Ok(())
}

/// Deepest directory nesting copied: config drives are two or three deep;
/// a directory whose clusters loop back into an ancestor is not followed
/// for ever.
const MAX_DEPTH: usize = 16;

/// What a copy may still take: bytes (the whole source image: its files
/// cannot hold more, unless their cluster chains lie) and entries.
struct Budget {
    bytes: u64,
    entries: usize,
}

fn copy_dir<S: ReadWriteSeek, D: ReadWriteSeek>(
    src: &Dir<'_, S>,
    dst: &Dir<'_, D>,
    path: &str,
    depth: usize,
    budget: &mut Budget,
) -> Result<(), VfatError> {
    if depth > MAX_DEPTH {
        return Err(VfatError::TooDeep(path.to_string()));
    }
    for entry in src.iter() {
        let entry = entry.map_err(io(format!("listing {path}/")))?;
        let name = entry.file_name();
        if name == "." || name == ".." {
            continue;
        }
        budget.entries = budget
            .entries
            .checked_sub(1)
            .ok_or_else(|| VfatError::TooManyEntries(format!("{path}/{name}")))?;
        let here = format!("{path}/{name}");
        if entry.is_dir() {
            let d = dst
                .create_dir(&name)
                .map_err(io(format!("creating {here}")))?;
            copy_dir(&entry.to_dir(), &d, &here, depth + 1, budget)?;
        } else {
            let mut bytes = Vec::new();
            entry
                .to_file()
                .take(budget.bytes + 1)
                .read_to_end(&mut bytes)
                .map_err(io(format!("reading {here}")))?;
            budget.bytes = budget
                .bytes
                .checked_sub(bytes.len() as u64)
                .ok_or_else(|| VfatError::LoopingChain(here.clone()))?;
            let mut f = dst
                .create_file(&name)
                .map_err(io(format!("creating {here}")))?;
            f.truncate().map_err(io(format!("creating {here}")))?;
            f.write_all(&bytes)
                .and_then(|()| f.flush())
                .map_err(io(format!("writing {here}")))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 512-byte-sector FAT image with a config-2 tree, made by fatfs.
    fn small_fat() -> Vec<u8> {
        let mut img = Cursor::new(vec![0u8; 2 << 20]);
        fatfs::format_volume(
            &mut img,
            FormatVolumeOptions::new()
                .volume_label(*b"CONFIG-2   ")
                .volume_id(0x1234_5678),
        )
        .unwrap();
        {
            let fs = FileSystem::new(&mut img, FsOptions::new()).unwrap();
            let d = fs.root_dir().create_dir("openstack").unwrap();
            let d = d.create_dir("latest").unwrap();
            d.create_file("meta_data.json")
                .unwrap()
                .write_all(b"{\"uuid\": \"n1\"}")
                .unwrap();
            d.create_file("user_data")
                .unwrap()
                .write_all(&vec![b'x'; 10_000])
                .unwrap();
        }
        img.into_inner()
    }

    /// A directory entry whose first cluster is 1 (below the first data
    /// cluster, 2): fatfs computes `cluster - 2`, an overflow panic in a
    /// debug build before the workspace's profile exempted it. The rebuild
    /// ends (copied or refused) within its budget, never a panic.
    #[test]
    fn an_entry_below_the_first_data_cluster_is_not_a_panic() {
        let mut img = small_fat();
        let name = b"LATEST     ";
        let at = img
            .windows(name.len())
            .position(|w| w == name)
            .expect("the latest directory entry");
        // First cluster: high half at +20, low half at +26.
        img[at + 20..at + 22].copy_from_slice(&0u16.to_le_bytes());
        img[at + 26..at + 28].copy_from_slice(&1u16.to_le_bytes());
        if let Ok(Some(rebuilt)) = adapt(&img, 4096, 8 << 20) {
            assert!(rebuilt.len() <= 8 << 20);
        }
    }

    #[test]
    fn directories_nested_past_the_limit_are_refused_not_followed_for_ever() {
        let mut img = Cursor::new(vec![0u8; 2 << 20]);
        fatfs::format_volume(&mut img, FormatVolumeOptions::new()).unwrap();
        {
            let fs = FileSystem::new(&mut img, FsOptions::new()).unwrap();
            let mut d = fs.root_dir();
            for _ in 0..=MAX_DEPTH + 1 {
                d = d.create_dir("d").unwrap();
            }
        }
        let e = adapt(&img.into_inner(), 4096, 64 << 20)
            .unwrap_err()
            .to_string();
        assert!(e.contains("deeper than 16"), "{e}");
    }

    #[test]
    fn a_512_byte_fat_is_rebuilt_with_4k_sectors_and_the_same_files() {
        let small = small_fat();
        assert_eq!(fat_sector_size(&small), Some(512));
        assert!(adapt(&small, 512, 64 << 20).unwrap().is_none());
        assert!(adapt(b"not fat at all", 4096, 64 << 20).unwrap().is_none());
        let big = adapt(&small, 4096, 64 << 20).unwrap().unwrap();
        assert_eq!(fat_sector_size(&big), Some(4096));
        assert_eq!(big.len(), 4 << 20);
        let fs = FileSystem::new(Cursor::new(big), FsOptions::new()).unwrap();
        assert_eq!(fs.volume_label(), "CONFIG-2");
        assert_eq!(fs.volume_id(), 0x1234_5678);
        let mut s = String::new();
        fs.root_dir()
            .open_file("openstack/latest/meta_data.json")
            .unwrap()
            .read_to_string(&mut s)
            .unwrap();
        assert_eq!(s, "{\"uuid\": \"n1\"}");
        let mut b = Vec::new();
        fs.root_dir()
            .open_file("openstack/latest/user_data")
            .unwrap()
            .read_to_end(&mut b)
            .unwrap();
        assert_eq!(b, vec![b'x'; 10_000]);
        // `.` and `..` are the first two slots of every directory, as FAT
        // requires (with 4096-byte clusters: `.` at a 4 KiB boundary).
        let raw = adapt(&small, 4096, 64 << 20).unwrap().unwrap();
        let dots: Vec<usize> = (0..raw.len() / 32)
            .map(|k| k * 32)
            .filter(|&o| &raw[o..o + 11] == b".          " && raw[o + 11] == ATTR_DIR)
            .collect();
        assert_eq!(dots.len(), 2, "one per subdirectory");
        for o in dots {
            assert_eq!(o % 4096, 0, "`.` at byte {o} is not the first slot");
            assert_eq!(&raw[o + 32..o + 43], b"..         ");
        }
    }
}
