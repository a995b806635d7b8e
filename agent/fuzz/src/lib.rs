//! Helpers shared by the fuzz targets in `fuzz_targets/`.

pub mod tls_peer;

use std::collections::BTreeMap;
use std::io;
use std::ops::Range;

use agent_devices::disk::table::Disk;
use agent_contents::image::qcow2::{Reread, Sink};

/// A disk of `size` bytes whose first bytes are `head` and the rest zeros.
/// Writes past the head are checked for bounds and dropped.
#[derive(Debug)]
pub struct SparseDisk {
    /// The first bytes.
    pub head: Vec<u8>,
    /// The disk's size in bytes.
    pub size: u64,
    /// Whether a write fell (partly) past the head and was dropped.
    pub dropped: bool,
}

fn end(offset: u64, len: usize, size: u64) -> io::Result<u64> {
    offset
        .checked_add(len as u64)
        .filter(|e| *e <= size)
        .ok_or_else(|| io::Error::from(io::ErrorKind::UnexpectedEof))
}

impl Disk for SparseDisk {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        end(offset, buf.len(), self.size)?;
        for (i, b) in buf.iter_mut().enumerate() {
            let at = offset + i as u64;
            *b = usize::try_from(at)
                .ok()
                .and_then(|a| self.head.get(a))
                .copied()
                .unwrap_or(0);
        }
        Ok(())
    }

    fn write_at(&mut self, buf: &[u8], offset: u64) -> io::Result<()> {
        end(offset, buf.len(), self.size)?;
        for (i, b) in buf.iter().enumerate() {
            if let Some(d) = usize::try_from(offset + i as u64)
                .ok()
                .and_then(|a| self.head.get_mut(a))
            {
                *d = *b;
            } else {
                self.dropped = true;
            }
        }
        Ok(())
    }
}

/// A qcow2 source that can be read again: the same bytes.
#[derive(Debug)]
pub struct MemReread<'a>(pub &'a [u8]);

impl Reread for MemReread<'_> {
    fn reread(
        &mut self,
        runs: &[Range<u64>],
        deliver: &mut dyn FnMut(u64, &[u8]) -> bool,
    ) -> io::Result<()> {
        for r in runs {
            let s = usize::try_from(r.start).unwrap_or(usize::MAX);
            let e = usize::try_from(r.end).unwrap_or(usize::MAX);
            let bytes = self
                .0
                .get(s..e.min(self.0.len()))
                .ok_or_else(|| io::Error::from(io::ErrorKind::UnexpectedEof))?;
            for (i, chunk) in bytes.chunks(64 << 10).enumerate() {
                if !deliver(r.start + (i as u64) * (64 << 10), chunk) {
                    return Ok(());
                }
            }
        }
        Ok(())
    }
}

/// A qcow2 sink that checks the converter's promise: after `begin`, data and
/// zero ranges lie within the virtual size, never overlap, and together
/// cover it exactly once. Keeps the covered ranges merged, so its memory
/// grows with the number of gaps, not with the data.
#[derive(Debug, Default)]
pub struct CoverageSink {
    /// The virtual size given to `begin`.
    pub size: Option<u64>,
    /// Covered ranges, start → end, merged when adjacent.
    pub covered: BTreeMap<u64, u64>,
    /// Zero ranges seen (they come after all data).
    pub zeros_started: bool,
}

impl CoverageSink {
    fn add(&mut self, start: u64, len: u64) {
        let size = self.size.expect("data or zero before begin");
        if len == 0 {
            return;
        }
        let end = start.checked_add(len).expect("range end overflows");
        assert!(
            end <= size,
            "range {start}..{end} beyond virtual size {size}"
        );
        if let Some((&ps, &pe)) = self.covered.range(..=start).next_back() {
            assert!(pe <= start, "range {start}..{end} overlaps {ps}..{pe}");
        }
        if let Some((&ns, &ne)) = self.covered.range(start..).next() {
            assert!(ns >= end, "range {start}..{end} overlaps {ns}..{ne}");
        }
        let mut s = start;
        let mut e = end;
        if let Some((&ps, &pe)) = self.covered.range(..start).next_back() {
            if pe == start {
                self.covered.remove(&ps);
                s = ps;
            }
        }
        if let Some(&ne) = self.covered.get(&end) {
            self.covered.remove(&end);
            e = ne;
        }
        self.covered.insert(s, e);
    }

    /// Asserts that everything was covered exactly once.
    pub fn check_complete(&self) {
        let size = self.size.expect("a successful conversion called begin");
        if size == 0 {
            assert!(self.covered.is_empty());
            return;
        }
        let ranges: Vec<_> = self.covered.iter().take(3).collect();
        assert_eq!(
            (self.covered.len(), self.covered.get(&0)),
            (1, Some(&size)),
            "covered {ranges:?}… of {size}"
        );
    }
}

impl Sink for CoverageSink {
    fn begin(&mut self, virtual_size: u64) -> io::Result<()> {
        assert!(self.size.is_none(), "begin called twice");
        self.size = Some(virtual_size);
        Ok(())
    }

    fn data(&mut self, offset: u64, bytes: &[u8]) -> io::Result<()> {
        assert!(!self.zeros_started, "data after zero ranges");
        self.add(offset, bytes.len() as u64);
        Ok(())
    }

    fn zero(&mut self, offset: u64, len: u64) -> io::Result<()> {
        self.zeros_started = true;
        self.add(offset, len);
        Ok(())
    }
}

/// Splits fuzz input at the first occurrence of `sep` (or at the end).
pub fn split<'a>(data: &'a [u8], sep: &[u8]) -> (&'a [u8], &'a [u8]) {
    match data.windows(sep.len()).position(|w| w == sep) {
        Some(i) => (&data[..i], &data[i + sep.len()..]),
        None => (data, &[]),
    }
}
