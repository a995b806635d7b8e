//! Writing a new partition table over a whole disk (partition images,
//! PROTOCOL.md §5.6): a GPT (protective MBR, primary and backup headers and
//! entry arrays, both CRCs) or a DOS/MBR table of primary partitions, as
//! `parted mklabel … mkpart …` leaves them. The caller plans the layout in
//! sectors; this only checks that it fits and encodes it.

use super::{Disk, Kind};
use crate::disk::gpt::{header_crc, put_u32, put_u64};

/// GPT entries written (the UEFI minimum, what parted and sgdisk use).
const GPT_ENTRIES: u64 = 128;
/// Bytes per GPT entry.
const GPT_ENTRY_SIZE: u64 = 128;
/// GPT header size.
const GPT_HEADER_SIZE: u32 = 92;

/// One partition to create, in logical sectors.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewPart {
    /// First sector.
    pub start: u64,
    /// Number of sectors.
    pub sectors: u64,
    /// GPT type GUID, on-disk byte order.
    pub gpt_type: [u8; 16],
    /// GPT partition name.
    pub name: String,
    /// MBR partition type.
    pub mbr_type: u8,
    /// MBR active flag (parted's `boot` on msdos).
    pub bootable: bool,
}

/// Why a table cannot be written.
#[derive(Debug, thiserror::Error)]
pub enum CreateError {
    /// Reading or writing the disk failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being written.
        what: &'static str,
        /// The system's error.
        source: std::io::Error,
    },
    /// A partition outside the usable sectors, or overlapping another.
    #[error(
        "partition {number} (sectors {start}..{end}) does not fit: the usable sectors are {first}..{last_excl}"
    )]
    DoesNotFit {
        /// 1-based number.
        number: usize,
        /// First sector.
        start: u64,
        /// End sector (exclusive).
        end: u64,
        /// First usable sector.
        first: u64,
        /// End of the usable sectors (exclusive).
        last_excl: u64,
    },
    /// More partitions than the table holds.
    #[error("{count} partitions do not fit into a {kind:?} table (at most {max})")]
    TooMany {
        /// Partitions asked for.
        count: usize,
        /// Table kind.
        kind: Kind,
        /// Its limit.
        max: usize,
    },
    /// A sector size GPT and MBR cannot use.
    #[error("unsupported logical sector size {0}")]
    Sector(u64),
}

fn io(what: &'static str) -> impl Fn(std::io::Error) -> CreateError {
    move |source| CreateError::Io { what, source }
}

/// The sectors a GPT leaves for partitions on a disk of `total` sectors:
/// `(first usable, end exclusive)`.
pub fn gpt_usable(sector: u64, total: u64) -> (u64, u64) {
    let array = (GPT_ENTRIES * GPT_ENTRY_SIZE).div_ceil(sector);
    // LBA 0 protective MBR, LBA 1 header, then the array; the same at the end.
    (2 + array, total.saturating_sub(1 + array))
}

/// The sectors an MBR leaves: `(1, min(total, 2^32))`.
pub fn mbr_usable(total: u64) -> (u64, u64) {
    (1, total.min(1 << 32))
}

fn check(parts: &[NewPart], (first, last_excl): (u64, u64)) -> Result<(), CreateError> {
    let mut prev_end = first;
    for (i, p) in parts.iter().enumerate() {
        let end = p.start.saturating_add(p.sectors);
        if p.sectors == 0 || p.start < prev_end || end > last_excl {
            return Err(CreateError::DoesNotFit {
                number: i + 1,
                start: p.start,
                end,
                first,
                last_excl,
            });
        }
        prev_end = end;
    }
    Ok(())
}

/// Writes a GPT with `parts` (in order, ascending, not overlapping) on a
/// disk of `total` sectors of `sector` bytes. Returns each partition's
/// unique GUID (on-disk byte order), made at random.
pub fn write_gpt(
    disk: &mut dyn Disk,
    sector: u64,
    total: u64,
    parts: &[NewPart],
) -> Result<Vec<[u8; 16]>, CreateError> {
    if !(512..=4096).contains(&sector) || !sector.is_power_of_two() {
        return Err(CreateError::Sector(sector));
    }
    if parts.len() as u64 > GPT_ENTRIES {
        return Err(CreateError::TooMany {
            count: parts.len(),
            kind: Kind::Gpt,
            max: GPT_ENTRIES as usize,
        });
    }
    let (first, last_excl) = gpt_usable(sector, total);
    check(parts, (first, last_excl))?;
    let s = sector as usize;
    let mut entries = vec![0u8; (GPT_ENTRIES * GPT_ENTRY_SIZE) as usize];
    let mut guids = Vec::with_capacity(parts.len());
    for (p, e) in parts
        .iter()
        .zip(entries.chunks_mut(GPT_ENTRY_SIZE as usize))
    {
        let guid = uuid::Uuid::new_v4().to_bytes_le();
        e[..16].copy_from_slice(&p.gpt_type);
        e[16..32].copy_from_slice(&guid);
        put_u64(e, 32, p.start);
        put_u64(e, 40, p.start + p.sectors - 1);
        for (i, c) in p.name.encode_utf16().take(36).enumerate() {
            e[56 + 2 * i..58 + 2 * i].copy_from_slice(&c.to_le_bytes());
        }
        guids.push(guid);
    }
    let entries_crc = crc32fast::hash(&entries);
    let array_sectors = entries.len().div_ceil(s) as u64;
    let disk_guid = uuid::Uuid::new_v4().to_bytes_le();
    let header = |this: u64, alternate: u64, entries_lba: u64| {
        let mut h = vec![0u8; s];
        h[..8].copy_from_slice(b"EFI PART");
        put_u32(&mut h, 8, 0x0001_0000);
        put_u32(&mut h, 12, GPT_HEADER_SIZE);
        put_u64(&mut h, 24, this);
        put_u64(&mut h, 32, alternate);
        put_u64(&mut h, 40, first);
        put_u64(&mut h, 48, last_excl - 1);
        h[56..72].copy_from_slice(&disk_guid);
        put_u64(&mut h, 72, entries_lba);
        put_u32(&mut h, 80, GPT_ENTRIES as u32);
        put_u32(&mut h, 84, GPT_ENTRY_SIZE as u32);
        put_u32(&mut h, 88, entries_crc);
        let crc = header_crc(&h[..GPT_HEADER_SIZE as usize]);
        put_u32(&mut h, 16, crc);
        h
    };
    let last = total - 1;
    let backup_entries = last - array_sectors;
    // Backup first, primary last: until the primary lands the disk has no
    // valid table to boot from.
    disk.write_at(&entries, backup_entries * sector)
        .map_err(io("writing the backup GPT entries"))?;
    disk.write_at(&header(last, 1, backup_entries), last * sector)
        .map_err(io("writing the backup GPT header"))?;
    disk.write_at(&entries, 2 * sector)
        .map_err(io("writing the GPT entries"))?;
    disk.write_at(&header(1, last, 2), sector)
        .map_err(io("writing the GPT header"))?;
    let mut mbr = vec![0u8; s];
    let e = &mut mbr[446..462];
    e[1..4].copy_from_slice(&[0x00, 0x02, 0x00]);
    e[4] = 0xee;
    e[5..8].copy_from_slice(&[0xff, 0xff, 0xff]);
    put_u32(e, 8, 1);
    put_u32(e, 12, (total - 1).min(u64::from(u32::MAX)) as u32);
    mbr[510] = 0x55;
    mbr[511] = 0xaa;
    disk.write_at(&mbr, 0)
        .map_err(io("writing the protective MBR"))?;
    Ok(guids)
}

/// Writes a DOS/MBR table of up to four primary partitions with a random
/// disk signature, which it returns.
pub fn write_mbr(
    disk: &mut dyn Disk,
    sector: u64,
    total: u64,
    parts: &[NewPart],
) -> Result<u32, CreateError> {
    if !(512..=4096).contains(&sector) || !sector.is_power_of_two() {
        return Err(CreateError::Sector(sector));
    }
    if parts.len() > 4 {
        return Err(CreateError::TooMany {
            count: parts.len(),
            kind: Kind::Mbr,
            max: 4,
        });
    }
    check(parts, mbr_usable(total))?;
    let mut mbr = vec![0u8; sector as usize];
    let signature = loop {
        let s = fastrand::u32(..);
        if s != 0 {
            break s;
        }
    };
    put_u32(&mut mbr, 440, signature);
    for (i, p) in parts.iter().enumerate() {
        let e = &mut mbr[446 + 16 * i..462 + 16 * i];
        e[0] = if p.bootable { 0x80 } else { 0 };
        // CHS fields: "beyond CHS range" markers, LBA only.
        e[1..4].copy_from_slice(&[0xfe, 0xff, 0xff]);
        e[4] = p.mbr_type;
        e[5..8].copy_from_slice(&[0xfe, 0xff, 0xff]);
        put_u32(e, 8, p.start as u32);
        put_u32(e, 12, p.sectors as u32);
    }
    mbr[510] = 0x55;
    mbr[511] = 0xaa;
    disk.write_at(&mbr, 0).map_err(io("writing the MBR"))?;
    Ok(signature)
}

#[cfg(test)]
mod tests {
    use super::super::{read, Kind};
    use super::*;
    use agent_testkit::sfdisk_json;

    const LINUX: [u8; 16] = [
        0xaf, 0x3d, 0xc6, 0x0f, 0x83, 0x84, 0x72, 0x47, 0x8e, 0x79, 0x3d, 0x69, 0xd8, 0x47, 0x7d,
        0xe4,
    ];

    fn part(start: u64, sectors: u64) -> NewPart {
        NewPart {
            start,
            sectors,
            gpt_type: LINUX,
            name: "primary".into(),
            mbr_type: 0x83,
            bootable: false,
        }
    }

    fn file(dir: &std::path::Path, bytes: u64) -> (std::path::PathBuf, std::fs::File) {
        let path = dir.join("disk.img");
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        f.set_len(bytes).unwrap();
        (path, f)
    }

    #[test]
    fn gpt_is_read_back_by_sfdisk_and_by_our_reader() {
        let dir = tempfile::tempdir().unwrap();
        let (path, mut f) = file(dir.path(), 64 << 20);
        let total = (64 << 20) / 512;
        let parts = [part(2048, 2048), part(4096, total - 34 - 4096)];
        let guids = write_gpt(&mut f, 512, total, &parts).unwrap();
        let j = sfdisk_json(&path);
        let pt = &j["partitiontable"];
        assert_eq!(pt["label"], "gpt");
        assert_eq!(pt["lastlba"], total - 34);
        let ps = pt["partitions"].as_array().unwrap();
        assert_eq!(ps.len(), 2);
        assert_eq!(
            (ps[0]["start"].as_u64(), ps[0]["size"].as_u64()),
            (Some(2048), Some(2048))
        );
        assert_eq!(ps[1]["size"].as_u64(), Some(total - 34 - 4096));
        assert_eq!(ps[1]["name"], "primary");
        let t = read(&f, 512).unwrap().unwrap();
        assert_eq!(t.kind, Kind::Gpt);
        assert_eq!(t.parts[1].guid, guids[1]);
        assert_ne!(guids[0], guids[1]);
    }

    #[test]
    fn mbr_carries_types_boot_flag_and_a_signature() {
        let dir = tempfile::tempdir().unwrap();
        let (path, mut f) = file(dir.path(), 32 << 20);
        let mut root = part(4096, 8192);
        root.bootable = true;
        let swap = NewPart {
            mbr_type: 0x82,
            ..part(2048, 2048)
        };
        let sig = write_mbr(&mut f, 512, (32 << 20) / 512, &[swap, root]).unwrap();
        let j = sfdisk_json(&path);
        let pt = &j["partitiontable"];
        assert_eq!(pt["label"], "dos");
        assert_eq!(pt["id"], format!("0x{sig:08x}"));
        let ps = pt["partitions"].as_array().unwrap();
        assert_eq!(ps[0]["type"], "82");
        assert_eq!(ps[1]["type"], "83");
        assert_eq!(ps[1]["bootable"], true);
    }

    #[test]
    fn layouts_that_do_not_fit_are_refused_naming_the_partition() {
        let dir = tempfile::tempdir().unwrap();
        let (_, mut f) = file(dir.path(), 8 << 20);
        let total = (8 << 20) / 512;
        let e = write_gpt(&mut f, 512, total, &[part(2048, total)]).unwrap_err();
        assert!(e.to_string().contains("partition 1"), "{e}");
        let e = write_gpt(&mut f, 512, total, &[part(2048, 100), part(2100, 10)]).unwrap_err();
        assert!(e.to_string().contains("partition 2"), "{e}");
        let five: Vec<_> = (0..5).map(|i| part(2048 + i * 10, 10)).collect();
        assert!(write_mbr(&mut f, 512, total, &five)
            .unwrap_err()
            .to_string()
            .contains("at most 4"));
    }
}
