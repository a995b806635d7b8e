//! The read side: pulls the image sequentially in fixed-size blocks and keeps
//! the most recent ones, so that table entries that point a little backwards
//! can still be served. Blocks are recycled; nothing else is buffered.

use std::collections::VecDeque;
use std::io::{self, Read};

/// Recently read bytes of the host file, in blocks of `block_size`.
///
/// Every block but the last one read is full, so the block holding a host
/// offset is found by division.
pub(crate) struct Window {
    /// Retained blocks, oldest first, each with its filled length.
    blocks: VecDeque<(Vec<u8>, usize)>,
    /// Host offset of the first byte of `blocks[0]`.
    first: u64,
    /// Host offset just past the last byte read.
    end: u64,
    /// Size of a full block.
    block_size: usize,
    /// Bytes behind `end` that may be kept; older whole blocks are dropped.
    keep: u64,
    /// Dropped blocks, ready for reuse.
    spare: Vec<Vec<u8>>,
    /// Whether the input has ended.
    eof: bool,
}

impl Window {
    /// An empty window at host offset 0.
    pub(super) fn new(block_size: usize, keep: u64) -> Window {
        assert!(block_size > 0, "block size must not be zero");
        Window {
            blocks: VecDeque::new(),
            first: 0,
            end: 0,
            block_size,
            keep,
            spare: Vec::new(),
            eof: false,
        }
    }

    /// Changes how many bytes behind the read position are kept.
    pub(super) fn set_keep(&mut self, keep: u64) {
        self.keep = keep;
    }

    /// Oldest host offset still held.
    pub(super) fn start(&self) -> u64 {
        self.first
    }

    /// Host offset just past the last byte read: the stream position.
    pub(super) fn end(&self) -> u64 {
        self.end
    }

    /// Whether the input has ended.
    pub(super) fn at_eof(&self) -> bool {
        self.eof
    }

    /// Reads the next block, filling it completely unless the input ends.
    ///
    /// Returns the bytes read; 0 means the input had already ended.
    pub(super) fn read_block<R: Read>(&mut self, input: &mut R) -> io::Result<usize> {
        if self.eof {
            return Ok(0);
        }
        let mut buf = self.spare.pop().unwrap_or_else(|| vec![0; self.block_size]);
        let mut filled = 0;
        while filled < buf.len() {
            match input.read(&mut buf[filled..]) {
                Ok(0) => {
                    self.eof = true;
                    break;
                }
                Ok(n) => filled += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    // Keep what arrived so the error offset is exact.
                    self.end += filled as u64;
                    self.spare.push(buf);
                    return Err(e);
                }
            }
        }
        if filled == 0 {
            self.spare.push(buf);
            return Ok(0);
        }
        self.blocks.push_back((buf, filled));
        self.end += filled as u64;
        Ok(filled)
    }

    /// Size of a full block.
    pub(super) fn block_size(&self) -> usize {
        self.block_size
    }

    /// The newest block: its host offset and bytes.
    pub(super) fn last_block(&self) -> Option<(u64, &[u8])> {
        let (buf, filled) = self.blocks.back()?;
        Some((self.end - *filled as u64, &buf[..*filled]))
    }

    /// Empties the window and moves it to host offset `at` (a block
    /// boundary), for bytes read again from there on.
    pub(super) fn restart(&mut self, at: u64) {
        debug_assert_eq!(
            at % self.block_size as u64,
            0,
            "restart at a block boundary"
        );
        while let Some((buf, _)) = self.blocks.pop_front() {
            self.spare.push(buf);
        }
        self.first = at;
        self.end = at;
        self.eof = false;
    }

    /// A buffer of the block size, for filling by the caller.
    pub(super) fn take_buffer(&mut self) -> Vec<u8> {
        self.spare.pop().unwrap_or_else(|| vec![0; self.block_size])
    }

    /// Appends a block the caller filled (`filled` bytes of `buf`, a full
    /// block unless it is the last one of the file).
    pub(super) fn push_block(&mut self, buf: Vec<u8>, filled: usize) {
        debug_assert!(filled <= buf.len() && buf.len() == self.block_size);
        self.blocks.push_back((buf, filled));
        self.end += filled as u64;
    }

    /// Drops the oldest blocks while more than `keep` bytes are held, always
    /// keeping the newest block.
    pub(super) fn evict(&mut self) {
        self.evict_each(|_, _| {});
    }

    /// Like [`Self::evict`], showing each block dropped (host offset, bytes)
    /// to `dropped` first.
    pub(super) fn evict_each(&mut self, mut dropped: impl FnMut(u64, &[u8])) {
        while self.blocks.len() > 1 && self.end - self.first > self.keep {
            if let Some((buf, len)) = self.blocks.pop_front() {
                dropped(self.first, &buf[..len]);
                self.first += len as u64;
                self.spare.push(buf);
            }
        }
    }

    /// The blocks held, oldest first: host offset and bytes.
    pub(super) fn held(&self) -> impl Iterator<Item = (u64, &[u8])> {
        let mut at = self.first;
        self.blocks.iter().map(move |(buf, len)| {
            let start = at;
            at += *len as u64;
            (start, &buf[..*len])
        })
    }

    /// The held bytes of `[from, to)` as consecutive `(host offset, bytes)`
    /// pieces, one per block. The range must lie inside `[start, end)`.
    pub(super) fn pieces(&self, from: u64, to: u64) -> Pieces<'_> {
        debug_assert!(self.first <= from && from <= to && to <= self.end);
        Pieces {
            window: self,
            at: from,
            to,
        }
    }

    /// `[from, to)` as one slice, if it lies inside a single block.
    pub(super) fn contiguous(&self, from: u64, to: u64) -> Option<&[u8]> {
        debug_assert!(self.first <= from && from <= to && to <= self.end);
        let (block, off) = self.locate(from);
        let len = usize::try_from(to - from).ok()?;
        let (buf, filled) = self.blocks.get(block)?;
        (off + len <= *filled).then(|| &buf[off..off + len])
    }

    /// The block index and offset inside it of a held host offset.
    fn locate(&self, at: u64) -> (usize, usize) {
        let rel = at - self.first;
        let bs = self.block_size as u64;
        ((rel / bs) as usize, (rel % bs) as usize)
    }
}

/// Iterator over the pieces of a held range; see [`Window::pieces`].
pub(crate) struct Pieces<'a> {
    /// The window the bytes come from.
    window: &'a Window,
    /// Next host offset to yield.
    at: u64,
    /// End of the range.
    to: u64,
}

impl<'a> Iterator for Pieces<'a> {
    type Item = (u64, &'a [u8]);

    fn next(&mut self) -> Option<Self::Item> {
        if self.at >= self.to {
            return None;
        }
        let (block, off) = self.window.locate(self.at);
        let (buf, filled) = self.window.blocks.get(block)?;
        let want = usize::try_from(self.to - self.at).unwrap_or(usize::MAX);
        let len = want.min(filled - off);
        let at = self.at;
        self.at += len as u64;
        Some((at, &buf[off..off + len]))
    }
}
