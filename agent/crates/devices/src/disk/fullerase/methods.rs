//! The erase methods on one open device: discard followed by a sampled
//! read-back that must find only zeros, and overwrite (random passes, then
//! an optional zero pass), both checking a cancel flag between chunks and
//! counting progress.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use anyhow::{bail, Context, Result};

use crate::disk::ioctl;

/// Bytes written per call while overwriting.
const CHUNK: usize = 4 << 20;
/// Bytes written between flushes while overwriting: how far past a write
/// error a pass may go, and the span its message names.
const FLUSH_EVERY: u64 = 64 << 20;
/// Random windows read back after a discard or a zero pass.
const SAMPLES: usize = 64;
/// Size of one sampled window.
const WINDOW: u64 = 64 << 10;
/// Bytes checked at each end of the device in any case.
const ENDS: u64 = 1 << 20;

/// An open device (or a regular file standing in for one).
#[derive(Debug)]
pub struct Target<'a> {
    /// The open file.
    pub file: &'a File,
    /// Size in bytes.
    pub size: u64,
    /// True for block devices (ioctls), false for files (hole punching).
    pub is_block: bool,
    /// Set to stop between chunks.
    pub cancel: &'a AtomicBool,
    /// Bytes processed so far (all passes).
    pub done: &'a AtomicU64,
}

impl Target<'_> {
    fn check_cancel(&self) -> Result<()> {
        if self.cancel.load(Ordering::Relaxed) {
            bail!("erase aborted");
        }
        Ok(())
    }

    /// Discards the whole device (secure discard first) and proves by
    /// sampled reads that it reads as zeros. `Ok(false)`: discard is not
    /// supported or does not zero, so another method is needed.
    pub fn discard_and_verify(&self) -> Result<bool> {
        self.check_cancel()?;
        let len = self.size / 512 * 512;
        let discarded = if self.is_block {
            ioctl::discard(self.file, 0, len, true)
                .or_else(|_| ioctl::discard(self.file, 0, len, false))
                .is_ok()
        } else {
            use nix::fcntl::{fallocate, FallocateFlags};
            let flags = FallocateFlags::FALLOC_FL_PUNCH_HOLE | FallocateFlags::FALLOC_FL_KEEP_SIZE;
            fallocate(self.file, flags, 0, self.size as i64).is_ok()
        };
        if !discarded {
            return Ok(false);
        }
        if self.is_block {
            let _ = ioctl::flush_buffers(self.file);
        }
        self.done.fetch_add(self.size, Ordering::Relaxed);
        self.reads_zero()
    }

    /// Sampled read-back: both ends and [`SAMPLES`] random windows.
    pub fn reads_zero(&self) -> Result<bool> {
        let mut rng = fastrand::Rng::new();
        let mut offsets = vec![0, self.size.saturating_sub(ENDS)];
        let span = self.size.saturating_sub(WINDOW);
        offsets.extend((0..SAMPLES).map(|_| rng.u64(0..=span) / 512 * 512));
        let mut buf = vec![0u8; ENDS as usize];
        for off in offsets {
            let n = (self.size - off).min(if off == 0 || off + ENDS >= self.size {
                ENDS
            } else {
                WINDOW
            }) as usize;
            self.file
                .read_exact_at(&mut buf[..n], off)
                .with_context(|| format!("reading back at byte {off}"))?;
            if buf[..n].iter().any(|b| *b != 0) {
                tracing::info!(offset = off, "data found after discard or zeroing");
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// `iterations` passes of random data, then zeros when `zeroize`
    /// (what `shred --iterations N [--zero]` does). A zero pass is verified.
    pub fn overwrite(&self, iterations: u32, zeroize: bool) -> Result<()> {
        let mut rng = fastrand::Rng::new();
        let mut buf = vec![0u8; CHUNK];
        for pass in 0..iterations {
            tracing::info!(pass = pass + 1, of = iterations, "random overwrite pass");
            self.pass(|b| rng.fill(b), &mut buf)?;
        }
        if zeroize {
            tracing::info!("zero pass");
            let zeroed =
                self.is_block && ioctl::zero_out(self.file, 0, self.size / 512 * 512).is_ok();
            if zeroed && self.size % 512 == 0 {
                self.done.fetch_add(self.size, Ordering::Relaxed);
            } else {
                self.pass(|b| b.fill(0), &mut buf)?;
            }
            self.file.sync_all().context("flushing")?;
            if !self.reads_zero()? {
                bail!("the device does not read back as zeros after the zero pass");
            }
        }
        self.file.sync_all().context("flushing")
    }

    /// One overwrite pass. Writes go through the page cache, so a disk's
    /// write error surfaces at writeback: the pass flushes every
    /// [`FLUSH_EVERY`] bytes, stops at the first error, and names the
    /// bytes written since the last good flush (found with a blkdebug
    /// write error under real Ironic: without the flushes the pass wrote
    /// the whole disk and then reported only `flushing: Input/output
    /// error`).
    fn pass(&self, mut fill: impl FnMut(&mut [u8]), buf: &mut [u8]) -> Result<()> {
        let mut off = 0u64;
        let mut flushed = 0u64;
        while off < self.size {
            self.check_cancel()?;
            let n = (self.size - off).min(buf.len() as u64) as usize;
            fill(&mut buf[..n]);
            let end = off + n as u64;
            self.file
                .write_all_at(&buf[..n], off)
                .with_context(|| format!("writing bytes {off} to {end}"))?;
            off = end;
            if off - flushed >= FLUSH_EVERY || off == self.size {
                self.file
                    .sync_data()
                    .with_context(|| format!("writing bytes {flushed} to {off} (at the flush)"))?;
                flushed = off;
            }
            self.done.fetch_add(n as u64, Ordering::Relaxed);
        }
        Ok(())
    }
}
