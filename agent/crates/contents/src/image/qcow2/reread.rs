//! Reading host bytes again: the seam between the converter and its source
//! for data that streamed past before anything said what it was (an L2
//! table behind the L1 entry that names it, clusters before the L2 table
//! that maps them), and the plan of which blocks a round reads.
//!
//! A round asks the source for runs of whole blocks, in ascending order, and
//! checks every block against its digest from the first stream before any
//! byte of it is used ([`super::digests`]).

use std::io;
use std::ops::Range;

use super::digests::{BlockDigests, Kept};
use super::error::Qcow2Error;
use super::pending::{Item, Kind};
use super::source::Reread;
use super::stream::Engine;
use super::window::Window;
use super::Sink;

/// Rounds of reading again before giving up. An L2 table behind the L1
/// table takes one, data behind the L2 table read in that round a second;
/// a third can only come from a table the same round already reached.
const MAX_ROUNDS: u32 = 4;

impl<S: Sink + ?Sized> Engine<'_, S> {
    /// Reads again, in rounds, every deferred range (and whatever the tables
    /// found in them map), until nothing is missing.
    pub(super) fn read_deferred(
        &mut self,
        again: &mut dyn Reread,
        window: &mut Window,
        digests: &BlockDigests,
    ) -> Result<(), Qcow2Error> {
        while !self.deferred.is_empty() {
            let mut items = std::mem::take(&mut self.deferred);
            if self.reread_rounds == MAX_ROUNDS {
                return Err(Qcow2Error::InvalidMetadata {
                    detail: format!(
                        "after {MAX_ROUNDS} rounds of reading host ranges again, {} still wait (first: {} at host offset {})",
                        items.len(),
                        items[0].kind.what(),
                        items[0].start
                    ),
                });
            }
            self.reread_rounds += 1;
            let runs = plan(
                &items,
                window.block_size() as u64,
                self.eof,
                |item, host| self.guest_at(item, host),
            )?;
            let bytes: u64 = runs.iter().map(|r| r.end - r.start).sum();
            let what = items[0].kind.what();
            tracing::info!(
                round = self.reread_rounds,
                ranges = items.len(),
                runs = runs.len(),
                bytes,
                "qcow2: reading again host ranges that streamed past before their table (first: {what} at host offset {})",
                items[0].start
            );
            for mut item in items.drain(..) {
                if let Kind::Compressed { .. } = item.kind {
                    // Decompression sees what there is up to the end.
                    item.end = item.end.min(self.eof);
                }
                self.pending.push(item);
            }
            self.round(again, window, digests, &runs, what)?;
            // What this round did not reach waits for the next one.
            self.deferred
                .extend(std::mem::take(&mut self.pending).into_items());
        }
        Ok(())
    }

    /// One round: reads `runs` again, checks each block against its digest,
    /// and processes the pending ranges as the blocks arrive.
    fn round(
        &mut self,
        again: &mut dyn Reread,
        window: &mut Window,
        digests: &BlockDigests,
        runs: &[Range<u64>],
        what: &'static str,
    ) -> Result<(), Qcow2Error> {
        let block_size = window.block_size() as u64;
        let mut cursor = RunCursor::new(runs);
        // The block being filled: buffer, bytes in it, its host offset.
        let mut block: Option<(Vec<u8>, usize, u64)> = None;
        let mut failure = None;
        let source_error = |detail: DeliveryError| Qcow2Error::Reread {
            start: runs[0].start,
            end: runs[runs.len() - 1].end,
            what,
            source: io::Error::new(io::ErrorKind::InvalidData, detail),
        };
        let mut deliver = |at: u64, bytes: &[u8]| -> bool {
            let mut step = || -> Result<(), Qcow2Error> {
                if cursor
                    .accept(at, bytes.len() as u64)
                    .map_err(source_error)?
                {
                    window.restart(at);
                }
                let mut rest = bytes;
                while !rest.is_empty() {
                    let (buf, filled, start) =
                        block.get_or_insert_with(|| (window.take_buffer(), 0, window.end()));
                    let index = (*start / block_size) as usize;
                    let want = match digests.kept(index) {
                        Kept::Digest(len) => len,
                        Kept::Unknown => {
                            return Err(source_error(DeliveryError::PastDownload(*start)))
                        }
                        Kept::Used(len) => {
                            return Err(Qcow2Error::InvalidMetadata {
                                detail: format!(
                                    "host bytes {start}..{} are needed again after the first stream had used every one of them: two mappings share host bytes",
                                    *start + len as u64
                                ),
                            })
                        }
                    };
                    let n = (want - *filled).min(rest.len());
                    buf[*filled..*filled + n].copy_from_slice(&rest[..n]);
                    *filled += n;
                    rest = &rest[n..];
                    if *filled < want {
                        continue;
                    }
                    let (buf, filled, start) = block.take().expect("filled above");
                    if !digests.matches(index, &buf[..filled]) {
                        return Err(Qcow2Error::RereadMismatch {
                            offset: start,
                            len: filled as u64,
                            detail: "BLAKE3 digest of the block differs".into(),
                        });
                    }
                    window.push_block(buf, filled);
                    self.reread_bytes += filled as u64;
                    self.process(window)?;
                    window.evict();
                }
                Ok(())
            };
            match step() {
                Ok(()) => true,
                Err(e) => {
                    failure = Some(e);
                    false
                }
            }
        };
        let result = again.reread(runs, &mut deliver);
        if let Some(e) = failure {
            return Err(e);
        }
        result.map_err(|source| Qcow2Error::Reread {
            start: runs[0].start,
            end: runs[runs.len() - 1].end,
            what,
            source,
        })?;
        cursor.finish().map_err(source_error)
    }
}

/// The runs of whole blocks (`block_size`, the last one ending at `eof`)
/// that hold every byte `items` still need, ascending and merged.
///
/// Fails with [`Qcow2Error::Truncated`] for an item that needs bytes past
/// the end of the file (a compressed cluster may be cut there: its
/// decompressor sees what there is).
pub(crate) fn plan(
    items: &[Item],
    block_size: u64,
    eof: u64,
    guest_at: impl Fn(&Item, u64) -> u64,
) -> Result<Vec<Range<u64>>, Qcow2Error> {
    let mut blocks: Vec<(u64, u64)> = Vec::with_capacity(items.len());
    for item in items {
        let from = item.first_missing();
        let to = match item.kind {
            Kind::Compressed { .. } => item.end.min(eof),
            _ => item.end,
        };
        if to > eof || from >= eof {
            let host_offset = from.max(eof);
            return Err(Qcow2Error::Truncated {
                eof,
                what: item.kind.what(),
                guest_offset: guest_at(item, host_offset),
                host_offset,
            });
        }
        blocks.push((from / block_size, to.div_ceil(block_size)));
    }
    blocks.sort_unstable();
    let mut runs: Vec<Range<u64>> = Vec::new();
    for (first, end) in blocks {
        let (start, end) = (first * block_size, (end * block_size).min(eof));
        match runs.last_mut() {
            Some(last) if start <= last.end => last.end = last.end.max(end),
            _ => runs.push(start..end),
        }
    }
    Ok(runs)
}

/// Checks that re-read pieces arrive in the order and extent of the runs.
#[derive(Debug)]
pub(crate) struct RunCursor<'a> {
    /// The runs asked for.
    runs: &'a [Range<u64>],
    /// Index of the run being delivered.
    index: usize,
    /// Next host offset expected; `None` before the first piece.
    next: Option<u64>,
}

/// How a source broke the order of the bytes asked for again.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(super) enum DeliveryError {
    /// Bytes at another offset than the next one expected.
    #[error("the source delivered host offset {at} where {next} was expected")]
    Unexpected {
        /// Where they were.
        at: u64,
        /// Where they should have been.
        next: u64,
    },
    /// Bytes outside every run asked for.
    #[error("the source delivered host offset {0}, outside the runs asked for")]
    Outside(u64),
    /// Bytes past the end of their run.
    #[error(
        "the source delivered bytes up to host offset {end}, past the run {}..{} asked for",
        .run.start, .run.end
    )]
    PastRun {
        /// Where they ended.
        end: u64,
        /// The run.
        run: Range<u64>,
    },
    /// The source ended before a run was complete.
    #[error(
        "the source stopped at host offset {at} before the end of run {}..{}",
        .run.start, .run.end
    )]
    Stopped {
        /// Where it stopped.
        at: u64,
        /// The run.
        run: Range<u64>,
    },
    /// A block beyond what the first download had.
    #[error("host offset {0} lies past the end of the first download")]
    PastDownload(u64),
}

impl<'a> RunCursor<'a> {
    /// A cursor before the first byte of `runs`.
    pub(super) fn new(runs: &'a [Range<u64>]) -> Self {
        RunCursor {
            runs,
            index: 0,
            next: None,
        }
    }

    /// Accepts a piece of `len` bytes at `at`; returns true when it starts a
    /// new run (the window must restart there).
    pub(super) fn accept(&mut self, at: u64, len: u64) -> Result<bool, DeliveryError> {
        let starts_run = match self.next {
            Some(next) if next == at => false,
            Some(next) if next == self.runs[self.index].end => {
                self.index += 1;
                true
            }
            None => true,
            Some(next) => return Err(DeliveryError::Unexpected { at, next }),
        };
        let run = self
            .runs
            .get(self.index)
            .filter(|r| !starts_run || r.start == at)
            .ok_or(DeliveryError::Outside(at))?;
        let end = at + len;
        if end > run.end {
            return Err(DeliveryError::PastRun {
                end,
                run: run.clone(),
            });
        }
        self.next = Some(end);
        Ok(starts_run)
    }

    /// Checks that every run was delivered completely.
    pub(super) fn finish(&self) -> Result<(), DeliveryError> {
        let last = self.runs.len().checked_sub(1);
        match (self.next, last) {
            (_, None) => Ok(()),
            (Some(next), Some(last)) if self.index == last && next == self.runs[last].end => Ok(()),
            (next, _) => Err(DeliveryError::Stopped {
                at: next.unwrap_or(self.runs[self.index].start),
                run: self.runs[self.index].clone(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    //! Run planning and delivery checks.

    use super::*;

    fn data(start: u64, end: u64) -> Item {
        Item::new(start, end, Kind::Data { guest: 0 })
    }

    #[test]
    fn plans_merge_whole_blocks_and_stop_at_the_end() {
        let items = [data(5000, 6000), data(100, 200), data(4096, 4100)];
        let runs = plan(&items, 4096, 10_000, |_, _| 0).unwrap();
        assert_eq!(runs, vec![0..8192]);
        let items = [data(9000, 9100), data(100, 200)];
        assert_eq!(
            plan(&items, 4096, 9500, |_, _| 0).unwrap(),
            vec![0..4096, 8192..9500]
        );
        let cut = Item::new(9400, 9800, Kind::Compressed { guest: 0 });
        assert_eq!(
            plan(&[cut], 4096, 9500, |_, _| 0).unwrap(),
            vec![8192..9500]
        );
        let err = plan(&[data(9000, 9600)], 4096, 9500, |_, _| 7).unwrap_err();
        assert!(matches!(
            err,
            Qcow2Error::Truncated {
                eof: 9500,
                host_offset: 9500,
                ..
            }
        ));
    }

    #[test]
    fn the_cursor_insists_on_the_runs() {
        let runs = [0..10, 20..30];
        let mut c = RunCursor::new(&runs);
        assert_eq!(c.accept(0, 4), Ok(true));
        assert_eq!(c.accept(4, 6), Ok(false));
        assert_eq!(c.accept(20, 10), Ok(true));
        assert_eq!(c.finish(), Ok(()));

        let mut c = RunCursor::new(&runs);
        c.accept(0, 4).unwrap();
        assert!(c.accept(20, 1).is_err(), "a run cut short");
        let mut c = RunCursor::new(&runs);
        assert!(c.accept(0, 11).is_err(), "past a run");
        let mut c = RunCursor::new(&runs);
        c.accept(0, 10).unwrap();
        assert!(c.finish().is_err(), "a run missing");
        let mut c = RunCursor::new(&runs);
        assert!(c.accept(5, 1).is_err(), "not at a run start");
    }
}
