//! The partition table of a freshly written disk: read it (GPT, else MBR)
//! and add the config-drive partition at the disk's end (PROTOCOL.md §6.2), as
//! `sgdisk -n 0:-64MB:0` (GPT, both copies and their CRCs updated) or
//! `parted mkpart primary fat32 -64MiB -0` (MBR, below 2 TiB) do.
//!
//! A new table over a whole disk (partition images): [`create`].
//!
//! Pure byte work on a [`Disk`] (anything with positioned reads and writes),
//! so unit tests run on memory.

use std::os::unix::fs::FileExt;

pub mod create;
pub mod logical;

use super::gpt::{header_crc, put_u32, put_u64, u32_at, u64_at};

/// Size of a new config-drive partition.
pub const PART_BYTES: u64 = 64 << 20;
/// Partition start alignment.
const ALIGN_BYTES: u64 = 1 << 20;
/// Largest GPT partition entry array read (1024 entries of 1 KiB).
const MAX_ENTRY_ARRAY: u64 = 1 << 20;
/// GPT name of the partition.
pub const GPT_NAME: &str = "config-2";
/// "Linux filesystem data" (sgdisk's default type 8300), on-disk byte order.
const LINUX_FS_TYPE: [u8; 16] = [
    0xaf, 0x3d, 0xc6, 0x0f, 0x83, 0x84, 0x72, 0x47, 0x8e, 0x79, 0x3d, 0x69, 0xd8, 0x47, 0x7d, 0xe4,
];
/// MBR type parted uses for `fat32` on LBA disks.
const MBR_TYPE: u8 = 0x0c;

/// Positioned I/O on a disk (a `File` or memory in tests).
pub trait Disk {
    /// Reads exactly `buf.len()` bytes at `offset`.
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()>;
    /// Writes all of `buf` at `offset`.
    fn write_at(&mut self, buf: &[u8], offset: u64) -> std::io::Result<()>;
}

impl Disk for std::fs::File {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        self.read_exact_at(buf, offset)
    }
    fn write_at(&mut self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        self.write_all_at(buf, offset)
    }
}

impl Disk for Vec<u8> {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        let at = offset as usize;
        let src = self
            .get(at..at + buf.len())
            .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::UnexpectedEof))?;
        buf.copy_from_slice(src);
        Ok(())
    }
    fn write_at(&mut self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        let at = offset as usize;
        self.get_mut(at..at + buf.len())
            .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::UnexpectedEof))?
            .copy_from_slice(buf);
        Ok(())
    }
}

/// Which kind of table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// GUID partition table.
    Gpt,
    /// DOS/MBR table.
    Mbr,
}

/// One partition, in bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Part {
    /// 1-based partition number (slot + 1), as the kernel names it.
    pub number: u32,
    /// First byte.
    pub start: u64,
    /// Length in bytes.
    pub len: u64,
    /// GPT partition name (empty for MBR).
    pub name: String,
    /// GPT partition type GUID, on-disk byte order (zeros for MBR).
    pub type_guid: [u8; 16],
    /// GPT unique partition GUID, on-disk byte order (zeros for MBR).
    pub guid: [u8; 16],
    /// MBR partition type (0 for GPT).
    pub mbr_type: u8,
}

/// A parsed table.
#[derive(Debug, Clone)]
pub struct Table {
    /// GPT or MBR.
    pub kind: Kind,
    /// Used partitions (for MBR: the primary and extended entries).
    pub parts: Vec<Part>,
    sector: u64,
    gpt: Option<GptHeader>,
}

#[derive(Debug, Clone)]
struct GptHeader {
    raw: Vec<u8>,
    entries_lba: u64,
    count: u32,
    entry_size: u32,
    first_usable: u64,
    last_usable: u64,
    alternate: u64,
}

/// Why a partition table cannot be read or extended.
#[derive(Debug, thiserror::Error)]
pub enum TableError {
    /// Reading or writing the disk failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being read or written.
        what: &'static str,
        /// The system's error.
        source: std::io::Error,
    },
    /// A protective MBR (type 0xee) without a GPT behind it.
    #[error("the disk has a protective MBR but no valid GPT header")]
    ProtectiveMbrWithoutGpt,
    /// The primary GPT header's size or CRC is wrong.
    #[error("the primary GPT header is damaged (size or CRC)")]
    DamagedHeader,
    /// An entry array this reader refuses.
    #[error(
        "unsupported GPT entry array ({count} × {entry_size} bytes; entries must be 128 × 2^n bytes, at most {MAX_ENTRY_ARRAY} bytes in all)"
    )]
    UnsupportedEntries {
        /// Number of entries.
        count: u32,
        /// Bytes per entry.
        entry_size: u32,
    },
    /// The entry array's CRC is wrong.
    #[error("the GPT partition entry array CRC does not match")]
    EntriesCrc,
    /// A partition whose LBAs overflow a byte offset.
    #[error("GPT partition {number} has an impossible range (LBA {first} to {last})")]
    ImpossibleRange {
        /// Partition number.
        number: usize,
        /// First LBA.
        first: u64,
        /// Last LBA.
        last: u64,
    },
    /// The entry array's LBA overflows a byte offset.
    #[error("the GPT entry array's LBA {0} lies beyond any disk")]
    EntriesBeyondDisk(u64),
    /// Another LBA of the header overflows a byte offset.
    #[error("the GPT's {what} (LBA {lba}) lies beyond any disk")]
    BeyondDisk {
        /// Which LBA.
        what: &'static str,
        /// Its value.
        lba: u64,
    },
    /// The disk cannot hold the config-drive partition at all.
    #[error("the disk is too small for a {} MiB config-drive partition", PART_BYTES >> 20)]
    TooSmall,
    /// A partition occupies the space the config drive needs.
    #[error(
        "no free space at the end of the disk for the config drive: partition {number} ends at byte {ends}, \
         the config drive needs bytes {start}..{end}"
    )]
    NoFreeSpace {
        /// The partition in the way.
        number: u32,
        /// Where it ends (byte).
        ends: u64,
        /// The config drive's first byte.
        start: u64,
        /// The config drive's end (exclusive).
        end: u64,
    },
    /// No free GPT entry.
    #[error("all GPT partition entries are in use")]
    GptFull,
    /// No free MBR slot.
    #[error("the MBR already has 4 primary partitions; no room for a config drive")]
    MbrFull,
}

fn io(what: &'static str) -> impl Fn(std::io::Error) -> TableError {
    move |source| TableError::Io { what, source }
}

/// Reads the table. `Ok(None)`: neither a valid GPT nor an MBR.
pub fn read(disk: &dyn Disk, sector: u64) -> Result<Option<Table>, TableError> {
    let mut mbr = [0u8; 512];
    disk.read_at(&mut mbr, 0).map_err(io("reading the MBR"))?;
    if let Some(t) = read_gpt(disk, sector)? {
        return Ok(Some(t));
    }
    if mbr[510..512] != [0x55, 0xaa] {
        return Ok(None);
    }
    let mut parts = Vec::new();
    for slot in 0..4 {
        let e = &mbr[446 + 16 * slot..446 + 16 * (slot + 1)];
        if e[4] == 0xee {
            return Err(TableError::ProtectiveMbrWithoutGpt);
        }
        let (start, len) = (u64::from(u32_at(e, 8)), u64::from(u32_at(e, 12)));
        if e[4] != 0 && len > 0 {
            parts.push(Part {
                number: slot as u32 + 1,
                start: start * sector,
                len: len * sector,
                name: String::new(),
                type_guid: [0; 16],
                guid: [0; 16],
                mbr_type: e[4],
            });
        }
    }
    Ok(Some(Table {
        kind: Kind::Mbr,
        parts,
        sector,
        gpt: None,
    }))
}

fn read_gpt(disk: &dyn Disk, sector: u64) -> Result<Option<Table>, TableError> {
    let mut raw = vec![0u8; sector as usize];
    disk.read_at(&mut raw, sector)
        .map_err(io("reading the GPT header"))?;
    if &raw[..8] != b"EFI PART" {
        return Ok(None);
    }
    let size = u32_at(&raw, 12) as usize;
    if !(92..=raw.len()).contains(&size) || header_crc(&raw[..size]) != u32_at(&raw, 16) {
        return Err(TableError::DamagedHeader);
    }
    let h = GptHeader {
        entries_lba: u64_at(&raw, 72),
        count: u32_at(&raw, 80),
        entry_size: u32_at(&raw, 84),
        first_usable: u64_at(&raw, 40),
        last_usable: u64_at(&raw, 48),
        alternate: u64_at(&raw, 32),
        raw,
    };
    // The UEFI sizes: 128 × 2^n bytes per entry; at most 1 MiB in all, so a
    // header (CRC valid or not) can never make the agent allocate more.
    let array = u64::from(h.count) * u64::from(h.entry_size);
    if h.entry_size < 128
        || !h.entry_size.is_power_of_two()
        || h.count == 0
        || h.count > 1024
        || array > MAX_ENTRY_ARRAY
    {
        return Err(TableError::UnsupportedEntries {
            count: h.count,
            entry_size: h.entry_size,
        });
    }
    let entries = read_entries(disk, &h, h.entries_lba, sector)?;
    if crc32fast::hash(&entries) != u32_at(&h.raw, 88) {
        return Err(TableError::EntriesCrc);
    }
    let mut parts = Vec::new();
    for (i, e) in entries.chunks(h.entry_size as usize).enumerate() {
        if e[..16].iter().all(|b| *b == 0) {
            continue;
        }
        let (first, last) = (u64_at(e, 32), u64_at(e, 40));
        let (Some(start), Some(end)) = (
            first.checked_mul(sector),
            last.checked_add(1).and_then(|l| l.checked_mul(sector)),
        ) else {
            return Err(TableError::ImpossibleRange {
                number: i + 1,
                first,
                last,
            });
        };
        let name: Vec<u16> = e[56..128]
            .chunks(2)
            .map(|c| u16::from_le_bytes([c[0], c[1]]))
            .take_while(|c| *c != 0)
            .collect();
        parts.push(Part {
            number: i as u32 + 1,
            start,
            len: end.saturating_sub(start),
            name: String::from_utf16_lossy(&name),
            type_guid: e[..16].try_into().expect("16 bytes"),
            guid: e[16..32].try_into().expect("16 bytes"),
            mbr_type: 0,
        });
    }
    Ok(Some(Table {
        kind: Kind::Gpt,
        parts,
        sector,
        gpt: Some(h),
    }))
}

fn read_entries(
    disk: &dyn Disk,
    h: &GptHeader,
    lba: u64,
    sector: u64,
) -> Result<Vec<u8>, TableError> {
    let at = lba
        .checked_mul(sector)
        .ok_or(TableError::EntriesBeyondDisk(lba))?;
    let mut entries = vec![0u8; h.count as usize * h.entry_size as usize];
    disk.read_at(&mut entries, at)
        .map_err(io("reading the GPT entries"))?;
    Ok(entries)
}

/// Adds the config-drive partition at the end of the disk (`disk_bytes`
/// long) and returns it. Fails, describing why, when no slot is free or the
/// last 64 MiB are not free.
pub fn add_config_partition(
    disk: &mut dyn Disk,
    table: &Table,
    disk_bytes: u64,
) -> Result<Part, TableError> {
    match table.kind {
        Kind::Gpt => add_gpt(disk, table),
        Kind::Mbr => add_mbr(disk, table, disk_bytes),
    }
}

/// The aligned start of a partition of [`PART_BYTES`] ending at `end`
/// (exclusive, bytes), checked against the existing partitions.
fn place(table: &Table, end: u64, floor: u64) -> Result<u64, TableError> {
    let start = end.saturating_sub(PART_BYTES) / ALIGN_BYTES * ALIGN_BYTES;
    if start < floor || start >= end {
        return Err(TableError::TooSmall);
    }
    if let Some(p) = table.parts.iter().find(|p| p.start + p.len > start) {
        return Err(TableError::NoFreeSpace {
            number: p.number,
            ends: p.start + p.len,
            start,
            end,
        });
    }
    Ok(start)
}

fn add_gpt(disk: &mut dyn Disk, table: &Table) -> Result<Part, TableError> {
    let h = table.gpt.as_ref().expect("a GPT table has a header");
    let s = table.sector;
    let lba_bytes = |lba: u64, what: &'static str| {
        lba.checked_mul(s)
            .ok_or(TableError::BeyondDisk { what, lba })
    };
    let end = lba_bytes(h.last_usable.saturating_add(1), "last usable sector")?;
    let floor = lba_bytes(h.first_usable, "first usable sector")?;
    let start = place(table, end, floor)?;
    let mut entries = read_entries(&*disk, h, h.entries_lba, s)?;
    let esz = h.entry_size as usize;
    let slot = entries
        .chunks(esz)
        .position(|e| e[..16].iter().all(|b| *b == 0))
        .ok_or(TableError::GptFull)?;
    let e = &mut entries[slot * esz..(slot + 1) * esz];
    e.fill(0);
    let guid = uuid::Uuid::new_v4().to_bytes_le();
    e[..16].copy_from_slice(&LINUX_FS_TYPE);
    e[16..32].copy_from_slice(&guid);
    put_u64(e, 32, start / s);
    put_u64(e, 40, end / s - 1);
    for (i, c) in GPT_NAME.encode_utf16().enumerate() {
        e[56 + 2 * i..58 + 2 * i].copy_from_slice(&c.to_le_bytes());
    }
    let crc = crc32fast::hash(&entries);

    // Backup copy first, then the primary: a crash in between leaves a
    // valid primary that simply lacks the new partition.
    let mut backup = vec![0u8; s as usize];
    let alternate = lba_bytes(h.alternate, "backup header")?;
    disk.read_at(&mut backup, alternate)
        .map_err(io("reading the backup GPT header"))?;
    let size = u32_at(&backup, 12) as usize;
    let backup_ok = &backup[..8] == b"EFI PART"
        && (92..=backup.len()).contains(&size)
        && header_crc(&backup[..size]) == u32_at(&backup, 16);
    if backup_ok {
        let backup_entries = lba_bytes(u64_at(&backup, 72), "backup entries")?;
        disk.write_at(&entries, backup_entries)
            .map_err(io("writing the backup GPT entries"))?;
        put_u32(&mut backup, 88, crc);
        let hc = header_crc(&backup[..size]);
        put_u32(&mut backup, 16, hc);
        disk.write_at(&backup, alternate)
            .map_err(io("writing the backup GPT header"))?;
    } else {
        tracing::warn!(
            lba = h.alternate,
            "no valid backup GPT header (signature, size, CRC) where the primary says; only the primary is updated"
        );
    }
    disk.write_at(&entries, lba_bytes(h.entries_lba, "entry array")?)
        .map_err(io("writing the GPT entries"))?;
    let mut primary = h.raw.clone();
    let size = u32_at(&primary, 12) as usize;
    put_u32(&mut primary, 88, crc);
    let hc = header_crc(&primary[..size]);
    put_u32(&mut primary, 16, hc);
    disk.write_at(&primary, s)
        .map_err(io("writing the GPT header"))?;
    Ok(Part {
        number: slot as u32 + 1,
        start,
        len: end - start,
        name: GPT_NAME.into(),
        type_guid: LINUX_FS_TYPE,
        guid,
        mbr_type: 0,
    })
}

fn add_mbr(disk: &mut dyn Disk, table: &Table, disk_bytes: u64) -> Result<Part, TableError> {
    let s = table.sector;
    // MBR addresses 2^32 sectors; on larger disks IPA places the partition
    // just below that limit.
    let end = (disk_bytes / s).min(1 << 32) * s;
    let mut mbr = [0u8; 512];
    disk.read_at(&mut mbr, 0).map_err(io("reading the MBR"))?;
    let slot = (0..4)
        .find(|i| mbr[446 + 16 * i + 4] == 0)
        .ok_or(TableError::MbrFull)?;
    let start = place(table, end, s)?;
    let e = &mut mbr[446 + 16 * slot..446 + 16 * (slot + 1)];
    e.fill(0);
    // CHS fields: "beyond CHS range" markers, LBA only.
    e[1..4].copy_from_slice(&[0xfe, 0xff, 0xff]);
    e[4] = MBR_TYPE;
    e[5..8].copy_from_slice(&[0xfe, 0xff, 0xff]);
    put_u32(e, 8, (start / s) as u32);
    put_u32(e, 12, ((end - start) / s) as u32);
    disk.write_at(&mbr, 0).map_err(io("writing the MBR"))?;
    Ok(Part {
        number: slot as u32 + 1,
        start,
        len: end - start,
        name: String::new(),
        type_guid: [0; 16],
        guid: [0; 16],
        mbr_type: MBR_TYPE,
    })
}

#[cfg(test)]
pub(crate) mod tests;
