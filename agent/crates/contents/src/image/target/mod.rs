//! The device an image is written to, and the fail-closed write protocol.
//!
//! * Before writing, every signature on the device is erased (both GPT
//!   copies, MBR, filesystems), so old content cannot boot either.
//! * The first MiB (MBR, primary GPT, ISO and boot-loader headers) is held
//!   in memory; everything else goes to the device with O_DIRECT from
//!   aligned buffers. All-zero stretches are detected and zeroed with
//!   BLKZEROOUT (a hole punch for regular files) instead of written.
//! * [`Target::commit`] runs only after the checksum matched: flush, move
//!   the backup GPT to the disk's end, write the first MiB, flush, re-read
//!   partitions. [`Target::abort`] zeroes both ends of the device instead,
//!   so a failed write never leaves a partition table behind.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use super::progress::Progress;
use super::ImageError;
use agent_devices::disk::gpt;
use agent_devices::disk::{ioctl, Device};

/// Bytes held back until the checksum is verified.
pub(crate) const HOLD: u64 = 1 << 20;
/// Granule of zero detection.
const ZERO_GRANULE: usize = 64 * 1024;
static ZEROS: [u8; ZERO_GRANULE] = [0; ZERO_GRANULE];

/// What a successful commit reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Committed {
    /// Bytes of disk content the image defines.
    pub image_size: u64,
    /// MBR disk signature (offset 440), as `get_partition_uuids` reports it.
    pub mbr_signature: u32,
    /// True when the backup GPT was moved to the end of the disk.
    pub gpt_moved: bool,
}

/// An open target device (or a regular file in tests and host mode).
#[derive(Debug)]
pub(crate) struct Target {
    path: PathBuf,
    direct: File,
    buffered: File,
    direct_ok: bool,
    is_block: bool,
    size: Option<u64>,
    sector: u64,
    held: Vec<u8>,
    end: u64,
}

fn werr(path: &Path, what: &str, e: impl std::fmt::Display) -> ImageError {
    let mut reason = format!("{what}: {e}");
    // A SAN LUN whose paths are all gone fails its I/O once the multipath
    // watch stops queueing it: say so beside the I/O error.
    if let Some(why) = agent_devices::disk::multipath::watch::no_path(path) {
        reason = format!("{reason} ({why})");
    }
    ImageError::Write {
        device: path.display().to_string(),
        reason,
    }
}

impl Target {
    /// Erases the device's metadata and opens it for writing (exclusively for
    /// block devices). The caller has checked it against the write policy.
    pub(crate) fn open(path: &Path) -> Result<Self, ImageError> {
        let dev = Device::open(path)?;
        let is_block = dev.devno.is_some();
        agent_devices::disk::erase::erase_metadata(path)
            .map_err(|e| werr(path, "erasing old metadata", format!("{e:#}")))?;
        let open = |flags: i32| {
            agent_devices::disk::busy::retry(path, "opening it exclusively", || {
                OpenOptions::new()
                    .read(true)
                    .write(true)
                    .custom_flags(flags)
                    .open(path)
            })
        };
        let excl = if is_block { libc::O_EXCL } else { 0 };
        let (direct, direct_ok) = match open(excl | libc::O_DIRECT) {
            Ok(f) => (f, true),
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                tracing::info!(path = %path.display(), "O_DIRECT not supported here; using buffered writes");
                (open(excl).map_err(|e| werr(path, "opening", e))?, false)
            }
            Err(e) => return Err(werr(path, "opening exclusively", e)),
        };
        let buffered = open(0).map_err(|e| werr(path, "opening", e))?;
        let (size, sector) = if is_block {
            let size = ioctl::size_bytes(&direct).map_err(|e| werr(path, "reading the size", e))?;
            let sector = ioctl::logical_sector_size(&direct)
                .map_err(|e| werr(path, "reading the sector size", e))?;
            (Some(size), u64::from(sector).max(512))
        } else {
            let len = direct
                .metadata()
                .map_err(|e| werr(path, "reading the size", e))?
                .len();
            ((len > 0).then_some(len), 512)
        };
        Ok(Self {
            path: path.to_path_buf(),
            direct,
            buffered,
            direct_ok,
            is_block,
            size,
            sector,
            held: vec![0; HOLD as usize],
            end: 0,
        })
    }

    /// Fails early when an image of `needed` bytes cannot fit.
    pub(crate) fn check_fits(&self, needed: u64) -> Result<(), ImageError> {
        match self.size {
            Some(size) if needed > size => Err(ImageError::TooLarge {
                device: self.path.display().to_string(),
                needed,
                size,
            }),
            _ => Ok(()),
        }
    }

    /// Writes image bytes at `offset`.
    pub(crate) fn write(
        &mut self,
        offset: u64,
        data: &[u8],
        progress: &Progress,
    ) -> Result<(), ImageError> {
        let end = offset + data.len() as u64;
        self.check_fits(end)?;
        self.end = self.end.max(end);
        progress.add_written(data.len() as u64);
        let (held, rest_off, rest) = self.split_held(offset, data.len() as u64);
        if let Some((at, n)) = held {
            self.held[at as usize..(at + n) as usize].copy_from_slice(&data[..n as usize]);
        }
        let rest = &data[(data.len() as u64 - rest) as usize..];
        self.write_scanning_zeros(rest_off, rest)
    }

    /// Makes `len` bytes at `offset` read as zeros.
    pub(crate) fn zero(
        &mut self,
        offset: u64,
        len: u64,
        progress: &Progress,
    ) -> Result<(), ImageError> {
        let end = offset + len;
        self.check_fits(end)?;
        self.end = self.end.max(end);
        progress.add_written(len);
        let (held, rest_off, rest) = self.split_held(offset, len);
        if let Some((at, n)) = held {
            self.held[at as usize..(at + n) as usize].fill(0);
        }
        if rest > 0 {
            self.zero_range(rest_off, rest)?;
        }
        Ok(())
    }

    /// Splits `[offset, offset+len)` into the part inside the held MiB
    /// (`(offset, len)` in it) and the rest (offset, len).
    fn split_held(&self, offset: u64, len: u64) -> (Option<(u64, u64)>, u64, u64) {
        if offset >= HOLD {
            return (None, offset, len);
        }
        let n = len.min(HOLD - offset);
        (Some((offset, n)), offset + n, len - n)
    }

    fn write_scanning_zeros(&mut self, offset: u64, data: &[u8]) -> Result<(), ImageError> {
        let mut pos = 0usize;
        while pos < data.len() {
            let first = &data[pos..(pos + ZERO_GRANULE).min(data.len())];
            let zero = is_zero(first);
            // Each granule is tested once: the run starts after the first.
            let mut run_end = pos + first.len();
            while run_end < data.len() {
                let g = &data[run_end..(run_end + ZERO_GRANULE).min(data.len())];
                if is_zero(g) != zero {
                    break;
                }
                run_end += g.len();
            }
            let at = offset + pos as u64;
            let run = &data[pos..run_end];
            if zero && at % self.sector == 0 && run.len() as u64 % self.sector == 0 {
                self.zero_range(at, run.len() as u64)?;
            } else {
                self.write_data(at, run)?;
            }
            pos = run_end;
        }
        Ok(())
    }

    fn write_data(&self, offset: u64, data: &[u8]) -> Result<(), ImageError> {
        let s = self.sector;
        let aligned = self.direct_ok
            && offset % s == 0
            && data.as_ptr() as u64 % s == 0
            && data.len() as u64 >= s;
        if aligned {
            let body = data.len() as u64 / s * s;
            match self.direct.write_all_at(&data[..body as usize], offset) {
                Ok(()) => {
                    if body < data.len() as u64 {
                        self.write_buffered(offset + body, &data[body as usize..])?;
                    }
                    return Ok(());
                }
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                    tracing::debug!(offset, "O_DIRECT write refused; writing buffered");
                }
                Err(e) => return Err(werr(&self.path, &format!("writing at byte {offset}"), e)),
            }
        }
        self.write_buffered(offset, data)
    }

    fn write_buffered(&self, offset: u64, data: &[u8]) -> Result<(), ImageError> {
        self.buffered
            .write_all_at(data, offset)
            .map_err(|e| werr(&self.path, &format!("writing at byte {offset}"), e))
    }

    fn zero_range(&self, offset: u64, len: u64) -> Result<(), ImageError> {
        let aligned = offset % 512 == 0 && len % 512 == 0;
        let done = if self.is_block && aligned {
            ioctl::zero_out(&self.direct, offset, len).is_ok()
        } else if !self.is_block {
            use nix::fcntl::{fallocate, FallocateFlags};
            let flags = FallocateFlags::FALLOC_FL_PUNCH_HOLE | FallocateFlags::FALLOC_FL_KEEP_SIZE;
            fallocate(&self.buffered, flags, offset as i64, len as i64).is_ok()
        } else {
            false
        };
        if done {
            return Ok(());
        }
        let mut pos = 0;
        while pos < len {
            let n = (len - pos).min(ZERO_GRANULE as u64);
            self.write_data(offset + pos, &ZEROS[..n as usize])?;
            pos += n;
        }
        Ok(())
    }

    fn sync(&self) -> Result<(), ImageError> {
        self.direct
            .sync_data()
            .map_err(|e| werr(&self.path, "flushing", e))?;
        self.buffered
            .sync_data()
            .map_err(|e| werr(&self.path, "flushing", e))
    }

    /// After the checksum matched: flush, fix up the GPT, write the first
    /// MiB, flush, and have the kernel re-read the partition table.
    pub(crate) fn commit(mut self) -> Result<Committed, ImageError> {
        if self.end == 0 {
            return Err(werr(
                &self.path,
                "committing",
                "the image is empty (0 bytes)",
            ));
        }
        self.sync()?;
        let mut gpt_moved = false;
        if let Some(size) = self.size.filter(|s| *s > self.end) {
            let sector = self.sector as usize;
            match gpt::relocate_backup(&mut self.held, sector, size / self.sector) {
                Ok(Some(r)) => {
                    self.write_data(r.entries_lba * self.sector, &aligned_copy(&r.entries))?;
                    self.write_data(r.header_lba * self.sector, &aligned_copy(&r.header))?;
                    if r.old_header_lba * self.sector >= HOLD {
                        self.write_data(r.old_header_lba * self.sector, &ZEROS[..sector])?;
                    }
                    gpt_moved = true;
                    tracing::info!(device = %self.path.display(), lba = r.header_lba, "moved the backup GPT to the end of the disk");
                }
                Ok(None) => {}
                Err(reason) => {
                    tracing::warn!(device = %self.path.display(), "GPT left as written: {reason}")
                }
            }
            self.sync()?;
        } else if !self.is_block {
            let len = self
                .buffered
                .metadata()
                .map_err(|e| werr(&self.path, "reading the size", e))?
                .len();
            if len < self.end {
                self.buffered
                    .set_len(self.end)
                    .map_err(|e| werr(&self.path, "extending", e))?;
            }
        }
        let head = self.end.min(HOLD) as usize;
        let head_sectors = head.div_ceil(self.sector as usize) * self.sector as usize;
        let first = aligned_copy(&self.held[..head_sectors.min(self.held.len())]);
        self.write_data(0, &first[..head])?;
        self.sync()?;
        if self.is_block {
            let reread = agent_devices::disk::busy::retry(
                &self.path,
                "re-reading the partition table",
                || ioctl::reread_partitions(&self.direct),
            );
            if let Err(e) = reread {
                if e.raw_os_error() != Some(libc::EINVAL) {
                    tracing::warn!(device = %self.path.display(), "re-reading the partition table: {e}");
                }
            }
        }
        let mbr_signature = u32::from_le_bytes(self.held[440..444].try_into().expect("4 bytes"));
        Ok(Committed {
            image_size: self.end,
            mbr_signature,
            gpt_moved,
        })
    }

    /// After a failure: zero the first and last MiB of the device (and the
    /// sectors before the image's end, where its backup GPT would be), so no
    /// partition table is left and nothing boots.
    pub(crate) fn abort(self) -> Result<(), ImageError> {
        let mut ranges = vec![(0, HOLD)];
        let size = self.size.unwrap_or(self.end);
        if size > HOLD {
            ranges.push((size.saturating_sub(HOLD).max(HOLD), size.min(HOLD)));
        }
        if self.end > 2 * HOLD && self.end < size {
            let start = (self.end - HOLD) / self.sector * self.sector;
            ranges.push((start, HOLD.min(size - start)));
        }
        for (offset, len) in ranges {
            let len = len.min(size.saturating_sub(offset));
            if len > 0 {
                self.zero_range(offset, len)?;
            }
        }
        self.sync()?;
        if self.is_block {
            let _ = agent_devices::disk::busy::retry(
                &self.path,
                "re-reading the partition table",
                || ioctl::reread_partitions(&self.direct),
            );
        }
        Ok(())
    }
}

/// Fast all-zero test (memcmp against a zero page).
fn is_zero(data: &[u8]) -> bool {
    data.chunks(ZERO_GRANULE).all(|c| c == &ZEROS[..c.len()])
}

/// A copy of `data` in an aligned buffer (for O_DIRECT).
fn aligned_copy(data: &[u8]) -> super::buffers::AlignedBuf {
    let cap = data.len().div_ceil(super::buffers::ALIGN).max(1) * super::buffers::ALIGN;
    let mut b = super::buffers::AlignedBuf::new(cap);
    b.fill_from(data);
    b
}

#[cfg(test)]
mod tests;
