//! The decode stage's byte streams: the downloaded blocks read as one
//! stream ([`BlockReader`]), and the decompressors with the pipeline's
//! memory limits ([`decompressor`]). The first download and the qcow2
//! converter's re-read of a compressed image use both.

use std::io::{self, BufRead, Read};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::Receiver;
use std::sync::Arc;

use super::buffers::Block;
use super::format::Format;

/// Largest zstd window accepted (16 MiB): keeps memory bounded.
const ZSTD_WINDOW_LOG_MAX: u32 = 24;
/// Memory limit of the xz decoder (enough for `xz -8`).
const XZ_MEMLIMIT: u64 = 40 << 20;

/// Reads the stream of blocks as one byte stream (for decompressors).
#[derive(Debug)]
pub(crate) struct BlockReader {
    rx: Receiver<Block>,
    cur: Option<Block>,
    pos: usize,
    consumed: Arc<AtomicU64>,
}

impl BlockReader {
    /// A reader of the blocks `rx` receives.
    pub(super) fn new(rx: Receiver<Block>) -> Self {
        BlockReader {
            rx,
            cur: None,
            pos: 0,
            consumed: Arc::default(),
        }
    }

    /// A reader of `first`, then of the blocks `rx` receives, counting the
    /// bytes consumed in `consumed`.
    pub(super) fn starting_with(
        rx: Receiver<Block>,
        first: Block,
        consumed: Arc<AtomicU64>,
    ) -> Self {
        BlockReader {
            rx,
            cur: Some(first),
            pos: 0,
            consumed,
        }
    }
}

/// The decompressing reader for a compressed `format` over `reader`, with
/// the memory limits of the pipeline.
pub(crate) fn decompressor<'r, R: BufRead + 'r>(
    format: Format,
    reader: R,
) -> io::Result<Box<dyn Read + 'r>> {
    Ok(match format {
        Format::Zstd => {
            let mut d = zstd::stream::read::Decoder::with_buffer(reader)?;
            d.window_log_max(ZSTD_WINDOW_LOG_MAX)?;
            Box::new(d)
        }
        Format::Gzip => Box::new(flate2::bufread::MultiGzDecoder::new(reader)),
        Format::Xz => {
            let stream = liblzma::stream::Stream::new_stream_decoder(
                XZ_MEMLIMIT,
                liblzma::stream::CONCATENATED,
            )?;
            Box::new(liblzma::bufread::XzDecoder::new_stream(reader, stream))
        }
        Format::Raw | Format::Qcow2 => {
            return Err(io::Error::other(format!(
                "{format} is not a compressed format"
            )))
        }
    })
}

impl Read for BlockReader {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        let avail = self.fill_buf()?;
        let n = avail.len().min(out.len());
        out[..n].copy_from_slice(&avail[..n]);
        self.consume(n);
        Ok(n)
    }
}

impl BufRead for BlockReader {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        while self.cur.as_ref().is_none_or(|b| self.pos >= b.len()) {
            match self.rx.recv() {
                Ok(b) => {
                    self.cur = Some(b);
                    self.pos = 0;
                }
                Err(_) => return Ok(&[]),
            }
        }
        let b = self.cur.as_ref().expect("filled above");
        Ok(&b[self.pos..])
    }

    fn consume(&mut self, n: usize) {
        self.pos += n;
        self.consumed.fetch_add(n as u64, Ordering::Relaxed);
    }
}
