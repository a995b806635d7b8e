//! Config drives (PROTOCOL.md §6): decoding what the conductor sends ([`source`])
//! and placing it on the freshly written disk ([`table`], [`write`]):
//! reuse a partition named or labelled `config-2`, else add one in the last
//! 64 MiB of the disk; write the image there (a vfat image rebuilt for the
//! disk's sector size when that is larger than the image's, [`vfat`]), zero
//! the rest of the partition, flush, and check that libblkid reads a
//! `config-2` label back.
//!
//! A partition image's config-drive partition is filled by
//! [`write_partition`].
//!
//! Also owns IPA's post-write check that a whole-disk image left at least
//! one partition ([`check_partitioned`]).

pub mod source;
pub mod vfat;

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};

use agent_devices::disk::ioctl;
use agent_devices::disk::table::{self, Disk, Part};

/// Why a config drive could not be used or placed.
#[derive(Debug, thiserror::Error)]
pub enum ConfigDriveError {
    /// The parameter is not a usable config drive.
    #[error("invalid config drive: {0}")]
    Invalid(String),
    /// Larger than IPA's limit.
    #[error("the config drive is larger than {} MiB", limit >> 20)]
    TooLarge {
        /// The limit in bytes.
        limit: u64,
    },
    /// Fetching it failed.
    #[error("downloading the config drive from {url} failed: {reason}")]
    Download {
        /// Where from.
        url: String,
        /// Why.
        reason: String,
    },
    /// It could not be written to the disk.
    #[error("cannot place the config drive on {device}: {reason}")]
    Place {
        /// The target device.
        device: String,
        /// Why.
        reason: TargetError,
    },
}

/// What went wrong on the target disk.
#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    /// A system call on the disk failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// The system's error.
        source: std::io::Error,
    },
    /// Its partition table cannot be read or extended.
    #[error(transparent)]
    Table(#[from] table::TableError),
    /// It has none.
    #[error("the disk has no partition table")]
    NoTable,
    /// A whole-disk image left no partition (IPA's check).
    #[error(
        "no partition found on {} after writing the image; a whole-disk image must carry a partition table",
        .0.display()
    )]
    Unpartitioned(PathBuf),
    /// Several `config-2` partitions.
    #[error(
        "{} partitions are labelled config-2 (numbers {numbers:?}); refusing to choose",
        .numbers.len()
    )]
    Ambiguous {
        /// Their numbers.
        numbers: Vec<u32>,
    },
    /// A vfat image that could not be rebuilt for the disk's sectors.
    #[error(transparent)]
    Vfat(#[from] vfat::VfatError),
    /// The image is larger than the partition.
    #[error(
        "the config drive ({bytes} bytes) does not fit into partition {number} ({room} bytes)"
    )]
    TooBig {
        /// The image's size.
        bytes: usize,
        /// The partition.
        number: u32,
        /// The partition's size.
        room: u64,
    },
}

fn io(what: &'static str) -> impl FnOnce(std::io::Error) -> TargetError {
    move |source| TargetError::Io { what, source }
}

/// Where the config drive went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placed {
    /// The partition (number, offset, length).
    pub part: Part,
    /// True when an existing `config-2` partition was reused.
    pub reused: bool,
    /// Filesystem label libblkid reads there afterwards.
    pub label: Option<String>,
}

fn open_rw(path: &Path) -> Result<(File, u64, u64), TargetError> {
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map_err(io("opening"))?;
    let meta = f.metadata().map_err(io("stat"))?;
    if meta.file_type().is_file() {
        return Ok((f, meta.len(), 512));
    }
    let size = ioctl::size_bytes(&f).map_err(io("reading the size"))?;
    let sector = ioctl::logical_sector_size(&f).map_err(io("reading the sector size"))?;
    Ok((f, size, u64::from(sector).max(512)))
}

/// IPA's check after a whole-disk write: the image must have left a
/// partition table with at least one partition.
pub fn check_partitioned(device: &Path) -> Result<usize, TargetError> {
    let (f, _, sector) = open_rw(device)?;
    match table::read(&f, sector)? {
        Some(t) if !t.parts.is_empty() => Ok(t.parts.len()),
        _ => Err(TargetError::Unpartitioned(device.to_path_buf())),
    }
}

/// Writes `data` to the config-drive partition of `device`, creating the
/// partition when the image has none.
pub fn write(device: &Path, data: &[u8]) -> Result<Placed, ConfigDriveError> {
    place(device, data).map_err(|reason| ConfigDriveError::Place {
        device: device.display().to_string(),
        reason,
    })
}

fn place(device: &Path, data: &[u8]) -> Result<Placed, TargetError> {
    let (mut f, size, sector) = open_rw(device)?;
    let table = table::read(&f, sector)?.ok_or(TargetError::NoTable)?;
    let existing = find_existing(&f, &table.parts)?;
    let (part, reused) = match existing {
        Some(p) => (p, true),
        None => (table::add_config_partition(&mut f, &table, size)?, false),
    };
    tracing::info!(device = %device.display(), partition = part.number, offset = part.start,
        bytes = data.len(), reused, "writing the config drive");
    let label = fill(&mut f, device, &part, data, sector)?;
    if ioctl::size_bytes(&f).is_ok() {
        // Loop devices without partition scanning refuse (EINVAL); the
        // ramdisk's disks accept.
        if let Err(e) =
            agent_devices::disk::busy::retry(device, "re-reading the partition table", || {
                ioctl::reread_partitions(&f)
            })
        {
            tracing::debug!(device = %device.display(), "re-reading partitions: {e}");
        }
        // A multipath device's partitions are dm maps (the kernel makes none).
        agent_devices::disk::multipath::sync_partitions(device).map_err(|e| TargetError::Io {
            what: "mapping the multipath device's partitions",
            source: std::io::Error::other(format!("{e:#}")),
        })?;
    }
    Ok(Placed {
        part,
        reused,
        label,
    })
}

/// Writes `data` as the whole content of the partition device `path` (a
/// partition image's config-drive partition, PROTOCOL.md §5.6), adapted to
/// the device's sector size as [`write`] does. Returns the label read back.
pub fn write_partition(path: &Path, data: &[u8]) -> Result<Option<String>, ConfigDriveError> {
    let placed = (|| {
        let (mut f, size, sector) = open_rw(path)?;
        let part = Part {
            number: 0,
            start: 0,
            len: size,
            name: String::new(),
            type_guid: [0; 16],
            guid: [0; 16],
            mbr_type: 0,
        };
        fill(&mut f, path, &part, data, sector)
    })();
    placed.map_err(|reason| ConfigDriveError::Place {
        device: path.display().to_string(),
        reason,
    })
}

/// Writes the (adapted) image at the start of `part`, zeroes the rest,
/// flushes, and reads the filesystem label back.
fn fill(
    f: &mut File,
    device: &Path,
    part: &Part,
    data: &[u8],
    sector: u64,
) -> Result<Option<String>, TargetError> {
    // A vfat image with sectors smaller than the disk's cannot be mounted
    // there: rebuild it with the disk's sector size.
    let rebuilt = vfat::adapt(data, sector, part.len)?;
    let data = rebuilt.as_deref().unwrap_or(data);
    if data.len() as u64 > part.len {
        return Err(TargetError::TooBig {
            bytes: data.len(),
            number: part.number,
            room: part.len,
        });
    }
    Disk::write_at(f, data, part.start).map_err(io("writing"))?;
    zero(
        f,
        part.start + data.len() as u64,
        part.len - data.len() as u64,
    )
    .map_err(io("clearing the rest of the partition"))?;
    f.sync_all().map_err(io("flushing"))?;
    let label = probe_label(f, part.start, part.len);
    if !label
        .as_deref()
        .is_some_and(|l| l.eq_ignore_ascii_case("config-2"))
    {
        tracing::warn!(device = %device.display(), ?label, "the config drive carries no filesystem labelled config-2");
    }
    Ok(label)
}

/// The partition named (GPT) or whose filesystem is labelled `config-2`,
/// case-insensitively; two of them is an error (as in IPA).
fn find_existing(f: &File, parts: &[Part]) -> Result<Option<Part>, TargetError> {
    let is_cd = |s: &str| s.eq_ignore_ascii_case("config-2");
    let found: Vec<&Part> = parts
        .iter()
        .filter(|p| is_cd(&p.name) || probe_label(f, p.start, p.len).is_some_and(|l| is_cd(&l)))
        .collect();
    match found.as_slice() {
        [] => Ok(None),
        [one] => Ok(Some((*one).clone())),
        many => Err(TargetError::Ambiguous {
            numbers: many.iter().map(|p| p.number).collect(),
        }),
    }
}

/// The filesystem label libblkid reads in `[offset, offset+len)`.
pub fn probe_label(f: &File, offset: u64, len: u64) -> Option<String> {
    agent_devices::disk::probe::probe_value(f, offset, len, "LABEL")
}

/// Makes `len` bytes at `offset` read as zeros.
fn zero(f: &File, offset: u64, len: u64) -> std::io::Result<()> {
    if len == 0 {
        return Ok(());
    }
    let aligned = offset % 512 == 0 && len % 512 == 0;
    if aligned && ioctl::zero_out(f, offset, len).is_ok() {
        return Ok(());
    }
    use nix::fcntl::{fallocate, FallocateFlags};
    let flags = FallocateFlags::FALLOC_FL_PUNCH_HOLE | FallocateFlags::FALLOC_FL_KEEP_SIZE;
    if fallocate(f, flags, offset as i64, len as i64).is_ok() {
        return Ok(());
    }
    let zeros = vec![0u8; 1 << 20];
    let mut pos = 0;
    while pos < len {
        let n = (len - pos).min(zeros.len() as u64);
        std::os::unix::fs::FileExt::write_all_at(f, &zeros[..n as usize], offset + pos)?;
        pos += n;
    }
    Ok(())
}

#[cfg(test)]
mod tests;
