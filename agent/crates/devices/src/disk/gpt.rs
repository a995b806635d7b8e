//! Moving a GPT's backup copy to the real end of the disk after writing an
//! image smaller than the disk (what `sgdisk -e` does): the backup partition
//! entries and header go to the last sectors, and the primary header's
//! `alternate_lba` and `last_usable_lba` are updated, with both CRCs.
//!
//! Works on the held-back first MiB of the image (which holds the primary
//! header and entries), so the primary table is rewritten before it is ever
//! committed to the disk.

/// Where the new backup copy goes and what it contains.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Relocation {
    /// Backup partition entries (whole sectors).
    pub entries: Vec<u8>,
    /// First sector of the backup entries.
    pub entries_lba: u64,
    /// The backup header (one sector).
    pub header: Vec<u8>,
    /// The disk's last sector, where the backup header goes.
    pub header_lba: u64,
    /// Where the image's backup header was (to be cleared).
    pub old_header_lba: u64,
}

/// Why the backup GPT cannot be moved.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RelocateError {
    /// The primary header's size field is out of range.
    #[error("primary GPT header size {0} is invalid")]
    HeaderSize(usize),
    /// The primary header's CRC is wrong.
    #[error("primary GPT header CRC does not match")]
    HeaderCrc,
    /// A disk of zero sectors.
    #[error("empty disk")]
    EmptyDisk,
    /// Entry count × entry size overflows.
    #[error("GPT entry array size overflows")]
    EntriesOverflow,
    /// The entry array's LBA overflows a byte offset.
    #[error("GPT entries LBA too large")]
    EntriesLba,
    /// The entry array is not within the bytes held.
    #[error(
        "GPT entry array ({count} × {entry_size} bytes at LBA {lba}) is not within the first {held} bytes"
    )]
    EntriesOutside {
        /// Number of entries.
        count: usize,
        /// Bytes per entry.
        entry_size: usize,
        /// First LBA of the array.
        lba: u64,
        /// Bytes of the image held.
        held: usize,
    },
    /// The entry array's CRC is wrong.
    #[error("GPT partition entry array CRC does not match")]
    EntriesCrc,
    /// The disk is smaller than the GPT describes.
    #[error(
        "the disk ({disk_sectors} sectors) is smaller than the image's GPT expects (backup header at LBA {alternate})"
    )]
    DiskTooSmall {
        /// The disk's size in sectors.
        disk_sectors: u64,
        /// Where the image's backup header is.
        alternate: u64,
    },
}

/// Little-endian `u32` at `at` (GPT and MBR fields).
pub(crate) fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

/// Little-endian `u64` at `at`.
pub(crate) fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// Stores a little-endian `u32` at `at`.
pub(crate) fn put_u32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

/// Stores a little-endian `u64` at `at`.
pub(crate) fn put_u64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

/// CRC32 of a GPT header with its own CRC field taken as zero.
pub(crate) fn header_crc(header: &[u8]) -> u32 {
    let mut copy = header.to_vec();
    put_u32(&mut copy, 16, 0);
    crc32fast::hash(&copy)
}

/// Plans the move. `first` is the image's first bytes (at least up to the
/// end of the primary entries), `sector` the logical sector size and
/// `disk_sectors` the disk size in sectors. `Ok(None)`: no GPT, or the
/// backup is already at the end. `Err`: a GPT that is damaged or does not
/// fit, described.
pub fn relocate_backup(
    first: &mut [u8],
    sector: usize,
    disk_sectors: u64,
) -> Result<Option<Relocation>, RelocateError> {
    if first.len() < 2 * sector || &first[sector..sector + 8] != b"EFI PART" {
        return Ok(None);
    }
    let hdr_at = sector;
    let header_size = u32_at(first, hdr_at + 12) as usize;
    if !(92..=sector).contains(&header_size) {
        return Err(RelocateError::HeaderSize(header_size));
    }
    let header = &first[hdr_at..hdr_at + header_size];
    if header_crc(header) != u32_at(header, 16) {
        return Err(RelocateError::HeaderCrc);
    }
    let alternate = u64_at(header, 32);
    let disk_last = disk_sectors
        .checked_sub(1)
        .ok_or(RelocateError::EmptyDisk)?;
    if alternate == disk_last {
        return Ok(None);
    }
    let entries_lba = u64_at(header, 72);
    let count = u32_at(header, 80) as usize;
    let entry_size = u32_at(header, 84) as usize;
    let bytes = count
        .checked_mul(entry_size)
        .ok_or(RelocateError::EntriesOverflow)?;
    let start = usize::try_from(entries_lba)
        .ok()
        .and_then(|l| l.checked_mul(sector))
        .ok_or(RelocateError::EntriesLba)?;
    if entry_size < 128 || bytes == 0 || start.checked_add(bytes).is_none_or(|e| e > first.len()) {
        return Err(RelocateError::EntriesOutside {
            count,
            entry_size,
            lba: entries_lba,
            held: first.len(),
        });
    }
    if crc32fast::hash(&first[start..start + bytes]) != u32_at(header, 88) {
        return Err(RelocateError::EntriesCrc);
    }
    let entry_sectors = bytes.div_ceil(sector) as u64;
    let too_small = || RelocateError::DiskTooSmall {
        disk_sectors,
        alternate,
    };
    let new_entries_lba = disk_last.checked_sub(entry_sectors).ok_or_else(too_small)?;
    let new_last_usable = new_entries_lba.checked_sub(1).ok_or_else(too_small)?;
    let last_usable = u64_at(header, 48);
    if new_last_usable < last_usable || alternate > disk_last {
        return Err(too_small());
    }

    let mut entries = vec![0u8; entry_sectors as usize * sector];
    entries[..bytes].copy_from_slice(&first[start..start + bytes]);

    let primary = &mut first[hdr_at..hdr_at + header_size];
    put_u64(primary, 32, disk_last);
    put_u64(primary, 48, new_last_usable);
    let crc = header_crc(primary);
    put_u32(primary, 16, crc);

    let mut backup = vec![0u8; sector];
    backup[..header_size].copy_from_slice(primary);
    put_u64(&mut backup, 24, disk_last);
    put_u64(&mut backup, 32, 1);
    put_u64(&mut backup, 72, new_entries_lba);
    let crc = header_crc(&backup[..header_size]);
    put_u32(&mut backup, 16, crc);
    fix_protective_mbr(first, disk_sectors);

    Ok(Some(Relocation {
        entries,
        entries_lba: new_entries_lba,
        header: backup,
        header_lba: disk_last,
        old_header_lba: alternate,
    }))
}

/// Makes a protective MBR entry (type 0xEE) span the whole disk, as
/// `sgdisk -e` does, so tools do not report a size mismatch.
fn fix_protective_mbr(first: &mut [u8], disk_sectors: u64) {
    if first[510..512] != [0x55, 0xaa] {
        return;
    }
    for i in 0..4 {
        let e = 446 + 16 * i;
        if first[e + 4] == 0xee && u32_at(first, e + 8) == 1 {
            let size = (disk_sectors - 1).min(u64::from(u32::MAX)) as u32;
            put_u32(first, e + 12, size);
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal valid GPT for a disk of `sectors` sectors with one partition.
    pub(crate) fn tiny_gpt(sectors: u64) -> Vec<u8> {
        let mut img = vec![0u8; 34 * 512];
        img[446 + 4] = 0xee;
        put_u32(&mut img, 446 + 8, 1);
        put_u32(&mut img, 446 + 12, (sectors - 1) as u32);
        img[510] = 0x55;
        img[511] = 0xaa;
        let entries_at = 2 * 512;
        // One partition entry: type GUID non-zero, LBA 34..(sectors-34).
        img[entries_at] = 0xaf;
        put_u64(&mut img, entries_at + 32, 34);
        put_u64(&mut img, entries_at + 40, sectors - 34);
        let entries_crc = crc32fast::hash(&img[entries_at..entries_at + 128 * 128]);
        let h = 512;
        img[h..h + 8].copy_from_slice(b"EFI PART");
        put_u32(&mut img, h + 8, 0x0001_0000);
        put_u32(&mut img, h + 12, 92);
        put_u64(&mut img, h + 24, 1);
        put_u64(&mut img, h + 32, sectors - 1);
        put_u64(&mut img, h + 40, 34);
        put_u64(&mut img, h + 48, sectors - 34);
        put_u64(&mut img, h + 72, 2);
        put_u32(&mut img, h + 80, 128);
        put_u32(&mut img, h + 84, 128);
        put_u32(&mut img, h + 88, entries_crc);
        let crc = header_crc(&img[h..h + 92]);
        put_u32(&mut img, h + 16, crc);
        img
    }

    #[test]
    fn backup_moves_to_the_disk_end_with_valid_crcs() {
        let mut first = tiny_gpt(2048);
        let r = relocate_backup(&mut first, 512, 8192).unwrap().unwrap();
        assert_eq!(r.header_lba, 8191);
        assert_eq!(r.entries_lba, 8191 - 32);
        assert_eq!(r.old_header_lba, 2047);
        let p = &first[512..604];
        assert_eq!(u64_at(p, 32), 8191);
        assert_eq!(u64_at(p, 48), 8191 - 33);
        assert_eq!(header_crc(p), u32_at(p, 16));
        let b = &r.header[..92];
        assert_eq!(
            (u64_at(b, 24), u64_at(b, 32), u64_at(b, 72)),
            (8191, 1, 8191 - 32)
        );
        assert_eq!(header_crc(b), u32_at(b, 16));
        assert_eq!(crc32fast::hash(&r.entries[..128 * 128]), u32_at(b, 88));
        assert_eq!(
            u32_at(&first, 446 + 12),
            8191,
            "protective MBR spans the disk"
        );
        // Already at the end: nothing to do.
        assert_eq!(relocate_backup(&mut first, 512, 8192).unwrap(), None);
    }

    #[test]
    fn damaged_or_absent_gpt_is_reported_or_ignored() {
        let mut none = vec![0u8; 4096];
        assert_eq!(relocate_backup(&mut none, 512, 100).unwrap(), None);
        let mut bad = tiny_gpt(2048);
        bad[512 + 40] ^= 1;
        assert!(relocate_backup(&mut bad, 512, 8192)
            .unwrap_err()
            .to_string()
            .contains("header CRC"));
        let mut bad = tiny_gpt(2048);
        bad[2 * 512 + 5] ^= 1;
        assert!(relocate_backup(&mut bad, 512, 8192)
            .unwrap_err()
            .to_string()
            .contains("entry array CRC"));
        let mut small = tiny_gpt(2048);
        assert!(relocate_backup(&mut small, 512, 1024)
            .unwrap_err()
            .to_string()
            .contains("smaller"));
    }

    #[test]
    fn a_disk_too_small_for_the_entries_or_huge_header_values_are_errors_not_panics() {
        // A GPT made for 100 sectors relocated onto 20: fewer sectors than
        // the entry array needs.
        let mut img = tiny_gpt(100);
        let e = relocate_backup(&mut img, 512, 20).unwrap_err().to_string();
        assert!(e.contains("smaller than the image's GPT expects"), "{e}");
        // Entry LBA and sizes chosen to overflow offsets: refused.
        for (at, v) in [(72usize, u64::MAX / 256), (72, u64::MAX)] {
            let mut img = tiny_gpt(100);
            put_u64(&mut img, 512 + at, v);
            let crc = header_crc(&img[512..512 + 92]);
            put_u32(&mut img, 512 + 16, crc);
            assert!(relocate_backup(&mut img, 512, 1 << 30).is_err());
        }
    }
}
