//! The download's sink: received bytes gathered into the pipeline's pool
//! buffers, each full one handed on in order, up to a byte limit.

use std::sync::Arc;

use super::outcome::FetchEnd;
use crate::image::buffers::{Block, Pool, PooledBuf};
use crate::image::progress::Progress;

/// Accumulates received bytes into pool buffers and hands full ones on.
pub(super) struct Emitter<'a> {
    pub(super) pool: &'a Pool,
    pub(super) progress: &'a Progress,
    pub(super) emit: &'a mut dyn FnMut(Block) -> bool,
    pub(super) cur: Option<PooledBuf>,
    /// File offset of the next byte.
    pub(super) offset: u64,
    /// File offset to stop at (`u64::MAX`: the end of the file).
    pub(super) limit: u64,
}

impl Emitter<'_> {
    /// Whether every byte up to the limit has arrived.
    pub(super) fn reached(&self) -> bool {
        self.offset >= self.limit
    }

    /// Takes `data` (cut at the limit).
    pub(super) fn push(&mut self, data: &[u8]) -> Result<(), FetchEnd> {
        let room = usize::try_from(self.limit - self.offset).unwrap_or(usize::MAX);
        let mut data = &data[..data.len().min(room)];
        self.progress.add_downloaded(data.len() as u64);
        self.offset += data.len() as u64;
        while !data.is_empty() {
            let cur = self.cur.get_or_insert_with(|| self.pool.take());
            let n = cur.fill_from(data);
            data = &data[n..];
            if cur.is_full() {
                self.flush()?;
            }
        }
        Ok(())
    }

    /// The unfilled part of the current buffer (up to the limit), for
    /// reading into directly.
    pub(super) fn spare(&mut self) -> &mut [u8] {
        let room = usize::try_from(self.limit - self.offset).unwrap_or(usize::MAX);
        let cur = self.cur.get_or_insert_with(|| self.pool.take());
        let filled = cur.len();
        let end = cur.capacity().min(filled.saturating_add(room));
        &mut cur.spare()[filled..end]
    }

    /// Counts `n` bytes just read into [`Self::spare`]; hands the buffer on
    /// when full.
    pub(super) fn commit(&mut self, n: usize) -> Result<(), FetchEnd> {
        let cur = self.cur.as_mut().expect("spare() took a buffer");
        let len = cur.len() + n;
        cur.set_len(len);
        self.progress.add_downloaded(n as u64);
        self.offset += n as u64;
        if cur.is_full() {
            self.flush()?;
        }
        Ok(())
    }

    pub(super) fn flush(&mut self) -> Result<(), FetchEnd> {
        match self.cur.take() {
            Some(buf) if !buf.is_empty() => {
                if (self.emit)(Arc::new(buf)) {
                    Ok(())
                } else {
                    Err(FetchEnd::Stopped)
                }
            }
            _ => Ok(()),
        }
    }
}
