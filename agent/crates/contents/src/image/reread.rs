//! The qcow2 converter's second look at the image source ([`qcow2::Reread`]):
//! host ranges that streamed past before the table mapping them are fetched
//! again once the first download has ended.
//!
//! - A plain qcow2 over http(s): one Range request per run of blocks, with
//!   the same retries, resumption and timeouts as the first download. A
//!   server that answers a Range request with the whole image (200) is
//!   noticed on the first run; the remaining runs of that round and every
//!   later round then come from one download from the start, keeping only
//!   the bytes asked for. That fallback costs at most one more download of
//!   the image per round (a round is needed for L2 tables stored behind the
//!   L1 table, another for data stored behind those tables) and no memory.
//! - A local file: read at the offsets asked for.
//! - A qcow2 inside a gzip, zstd or xz stream: host offsets are offsets in
//!   the decompressed stream, which no Range request reaches, so each round
//!   downloads and decompresses the image again from the start, keeping only
//!   the bytes asked for.
//!
//! The converter checks every block it gets here against the digest it took
//! of the same block during the first download, whatever the path.

use std::io::{self, Read};
use std::ops::Range;
use std::sync::mpsc::sync_channel;

use super::buffers::{Block, Pool};
use super::fetch::{self, FetchEnd, HttpOptions};
use super::format::Format;
use super::progress::Progress;
use super::qcow2;
use super::streams::{decompressor, BlockReader};

/// Buffers for one re-read: 4 × 1 MiB.
const BUFFERS: (usize, usize) = (4, 1 << 20);

/// Reads parts of the image at `urls` again; see the module docs.
#[derive(Debug)]
pub(crate) struct SourceReread<'a> {
    /// Image locations, tried in order.
    urls: &'a [String],
    /// Network settings.
    http: &'a HttpOptions,
    /// The format of the downloaded stream: qcow2, or the compression around it.
    outer: Format,
    /// False once a server answered a Range request with the whole image.
    ranges: bool,
}

impl<'a> SourceReread<'a> {
    /// A re-reader for the image at `urls` whose downloaded form is `outer`.
    pub(super) fn new(urls: &'a [String], http: &'a HttpOptions, outer: Format) -> Self {
        SourceReread {
            urls,
            http,
            outer,
            ranges: true,
        }
    }

    /// Fetches bytes `span` of the downloaded file, handing every block to
    /// `deliver(offset, bytes)`; returns whether the server honoured Range.
    fn span(
        &self,
        span: Range<u64>,
        deliver: &mut dyn FnMut(u64, &[u8]) -> bool,
    ) -> io::Result<bool> {
        let pool = Pool::new(BUFFERS.0, BUFFERS.1);
        let progress = Progress::default();
        let mut at = span.start;
        let mut emit = |block: Block| {
            let offset = at;
            at += block.len() as u64;
            deliver(offset, &block)
        };
        match fetch::fetch_from(self.urls, self.http, &pool, &progress, span, &mut emit) {
            Ok((_, honoured)) => Ok(honoured),
            Err(FetchEnd::Stopped) => Ok(true),
            Err(FetchEnd::Failed(e)) => Err(io::Error::other(e.to_string())),
        }
    }

    /// Reads the decompressed stream from its start, handing the bytes of
    /// `runs` to `deliver`, and stops after the last run.
    fn restream(
        &self,
        runs: &[Range<u64>],
        deliver: &mut dyn FnMut(u64, &[u8]) -> bool,
    ) -> io::Result<()> {
        let pool = Pool::new(BUFFERS.0, BUFFERS.1);
        let progress = Progress::default();
        let (tx, rx) = sync_channel::<Block>(BUFFERS.0);
        std::thread::scope(|s| {
            let fetcher = s.spawn(move || {
                let mut emit = |b: Block| tx.send(b).is_ok();
                fetch::fetch(self.urls, self.http, &pool, &progress, &mut emit)
            });
            let result = (|| {
                let mut reader = BlockReader::new(rx);
                let mut stream = decompressor(self.outer, &mut reader)?;
                let mut filter = RunFilter::new(runs, deliver);
                let mut buf = vec![0u8; BUFFERS.1];
                while !filter.done() {
                    let n = match stream.read(&mut buf) {
                        Ok(0) => break,
                        Ok(n) => n,
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                        Err(e) => return Err(e),
                    };
                    if !filter.take(&buf[..n]) {
                        return Ok(());
                    }
                }
                Ok(())
            })();
            // Dropping the reader stopped the fetch if the runs ended first.
            match fetcher.join().expect("re-read fetch thread panicked") {
                Err(FetchEnd::Failed(e)) if result.is_ok() => Err(io::Error::other(e.to_string())),
                _ => result,
            }
        })
    }
}

impl qcow2::Reread for SourceReread<'_> {
    fn reread(
        &mut self,
        runs: &[Range<u64>],
        deliver: &mut dyn FnMut(u64, &[u8]) -> bool,
    ) -> io::Result<()> {
        if self.outer != Format::Qcow2 {
            tracing::info!(
                format = %self.outer,
                "downloading and decompressing the image again for {} host ranges of the qcow2 inside",
                runs.len()
            );
            return self.restream(runs, deliver);
        }
        let mut next = 0;
        while next < runs.len() && self.ranges {
            let mut stopped = false;
            let mut pass = |at: u64, bytes: &[u8]| {
                stopped = !deliver(at, bytes);
                !stopped
            };
            self.ranges = self.span(runs[next].clone(), &mut pass)?;
            if stopped {
                return Ok(());
            }
            next += 1;
            if !self.ranges {
                tracing::warn!(
                    "the image server ignores Range requests: the rest of the qcow2 image's re-read ranges come from one more download from the start"
                );
            }
        }
        let rest = &runs[next..];
        let (Some(first), Some(last)) = (rest.first(), rest.last()) else {
            return Ok(());
        };
        let mut filter = RunFilter::new(rest, deliver);
        self.span(first.start..last.end, &mut |at, bytes| {
            filter.take_at(at, bytes)
        })?;
        Ok(())
    }
}

/// Passes on only the bytes of a stream that fall inside `runs`.
struct RunFilter<'r, 'd> {
    /// The runs, ascending.
    runs: &'r [Range<u64>],
    /// Where the bytes go.
    deliver: &'d mut dyn FnMut(u64, &[u8]) -> bool,
    /// Stream offset of the next byte.
    at: u64,
    /// Index of the first run not yet passed.
    index: usize,
}

impl<'r, 'd> RunFilter<'r, 'd> {
    fn new(runs: &'r [Range<u64>], deliver: &'d mut dyn FnMut(u64, &[u8]) -> bool) -> Self {
        RunFilter {
            runs,
            deliver,
            at: 0,
            index: 0,
        }
    }

    /// Whether every run was passed on.
    fn done(&self) -> bool {
        self.index >= self.runs.len()
    }

    /// Takes the stream's next `bytes` at offset `at`.
    fn take_at(&mut self, at: u64, bytes: &[u8]) -> bool {
        self.at = at;
        self.take(bytes)
    }

    /// Takes the stream's next `bytes`; false when `deliver` said stop.
    fn take(&mut self, bytes: &[u8]) -> bool {
        let start = self.at;
        let end = start + bytes.len() as u64;
        self.at = end;
        while let Some(run) = self.runs.get(self.index) {
            if run.start >= end {
                break;
            }
            let from = run.start.max(start);
            let to = run.end.min(end);
            if from < to {
                let piece = &bytes[(from - start) as usize..(to - start) as usize];
                if !(self.deliver)(from, piece) {
                    return false;
                }
            }
            if run.end > end {
                break;
            }
            self.index += 1;
        }
        true
    }
}

#[cfg(test)]
mod tests {
    //! Filtering a stream down to the runs.

    use super::RunFilter;

    #[test]
    fn only_the_runs_pass_in_pieces_that_follow_the_stream() {
        let runs = [2..5, 7..8, 9..12];
        let mut got = Vec::new();
        let mut deliver = |at: u64, b: &[u8]| {
            got.push((at, b.to_vec()));
            true
        };
        let mut f = RunFilter::new(&runs, &mut deliver);
        let stream: Vec<u8> = (0..20).collect();
        for chunk in stream.chunks(4) {
            assert!(f.take(chunk));
        }
        assert!(f.done());
        assert_eq!(
            got,
            vec![
                (2, vec![2, 3]),
                (4, vec![4]),
                (7, vec![7]),
                (9, vec![9, 10, 11]),
            ]
        );
    }
}
