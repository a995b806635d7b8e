//! The decode stage: recognises the format from the first bytes and turns
//! the downloaded byte stream into disk writes. Raw blocks pass through
//! untouched (no copy); gzip, zstd and xz are decompressed into aligned
//! buffers; qcow2 (also inside a compressed stream) is converted while
//! streaming. Compressed streams must end exactly at the end of the image:
//! trailing bytes are an error.

use std::io::{self, BufRead, Read};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender};
use std::sync::Arc;

use super::buffers::{Block, Pool, PooledBuf};
use super::format::{self, Format};
use super::progress::Progress;
use super::reread::SourceReread;
use super::streams::{decompressor, BlockReader};
use super::{policy, qcow2};
use super::{ImageError, WriteRequest};

/// Bytes of qcow2 data kept for clusters whose mapping comes a little
/// later; what lies further back is read again.
const QCOW2_LOOKAHEAD: usize = 8 << 20;

/// One operation for the writer.
#[derive(Debug)]
pub enum WriteOp {
    /// A downloaded block written as is (raw images).
    Shared {
        /// Disk offset.
        offset: u64,
        /// The bytes.
        block: Block,
    },
    /// A decoded buffer.
    Owned {
        /// Disk offset.
        offset: u64,
        /// The bytes.
        buf: PooledBuf,
    },
    /// A range that reads as zeros.
    Zero {
        /// Disk offset.
        offset: u64,
        /// Length.
        len: u64,
    },
    /// The image's disk size, as soon as it is known.
    Size(u64),
}

/// What the stage found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decoded {
    /// Outer format.
    pub format: Format,
    /// A qcow2 inside a compressed stream.
    pub inner: Option<Format>,
}

/// How the stage ended other than successfully.
#[derive(Debug)]
pub enum DecodeEnd {
    /// The writer stopped (its own error is the cause).
    Stopped,
    /// The image is invalid or unsupported.
    Failed(ImageError),
}

/// Runs the stage until the input ends. `want` is a format the caller
/// insisted on (`--format`); the detected format must then agree.
pub fn decode(
    rx: Receiver<Block>,
    tx: SyncSender<WriteOp>,
    req: &WriteRequest,
    out_pool: &Pool,
    url: &str,
    progress: &Progress,
) -> Result<Decoded, DecodeEnd> {
    let want = req.format;
    let corrupt = |format: Format, reason: String| {
        DecodeEnd::Failed(ImageError::Corrupt {
            format: format.name(),
            url: url.to_string(),
            reason,
        })
    };
    let Ok(first) = rx.recv() else {
        // No data at all: the fetch stage reports why (or the image is empty).
        return Err(corrupt(
            want.unwrap_or(Format::Raw),
            "the image is empty (0 bytes)".into(),
        ));
    };
    let head = &first[..first.len().min(format::DETECT_BYTES)];
    let detected = format::detect(head).map_err(|refused| {
        DecodeEnd::Failed(ImageError::Unsupported {
            url: url.to_string(),
            reason: refused.to_string(),
        })
    })?;
    if let Some(w) = want {
        if w != detected {
            return Err(DecodeEnd::Failed(ImageError::Unsupported {
                url: url.to_string(),
                reason: format!("the image is {detected} but format {w} was requested"),
            }));
        }
    }
    tracing::info!(url, format = %detected, "image format recognised");
    if !detected.is_compressed() {
        permit(req, url, policy::content_format(&first[..]))?;
    }
    let send = |op: WriteOp| tx.send(op).map_err(|_| DecodeEnd::Stopped);

    if detected == Format::Raw {
        if let Some(total) = progress.snapshot().download_total {
            send(WriteOp::Size(total))?;
        }
        let mut offset = 0u64;
        for block in std::iter::once(first).chain(rx.iter()) {
            let len = block.len() as u64;
            send(WriteOp::Shared { offset, block })?;
            offset += len;
        }
        return Ok(Decoded {
            format: Format::Raw,
            inner: None,
        });
    }

    let consumed = Arc::new(AtomicU64::new(0));
    let mut reader = BlockReader::starting_with(rx, first, consumed.clone());
    if detected == Format::Qcow2 {
        run_qcow2(&mut reader, &tx, out_pool, detected, req, url)?;
        return Ok(Decoded {
            format: Format::Qcow2,
            inner: None,
        });
    }

    let err_at = |e: io::Error| {
        let at = consumed.load(Ordering::Relaxed);
        let mut reason = format!("at compressed byte {at}: {e}");
        if detected == Format::Zstd && e.to_string().contains("memory") {
            reason.push_str(
                " (windows above 16 MiB, as made by zstd --long, are refused to bound memory)",
            );
        }
        corrupt(detected, reason)
    };
    let inner = {
        let mut d = decompressor(detected, &mut reader).map_err(err_at)?;
        pump(&mut d, &tx, out_pool, detected, req, url, &err_at)?
    };
    let trailing = reader.fill_buf().map(|b| b.len()).unwrap_or(0);
    if trailing > 0 {
        let at = consumed.load(Ordering::Relaxed);
        return Err(corrupt(
            detected,
            format!("unexpected data after the end of the {detected} stream at byte {at}"),
        ));
    }
    Ok(Decoded {
        format: detected,
        inner,
    })
}

/// The conductor's format check ([`policy`]) on what the image holds.
fn permit(req: &WriteRequest, url: &str, found: &'static str) -> Result<(), DecodeEnd> {
    req.formats.check(found).map_err(|reason| {
        tracing::error!(url, format = found, "{reason}");
        DecodeEnd::Failed(ImageError::NotPermitted {
            url: url.to_string(),
            reason: reason.to_string(),
        })
    })
}

/// Reads `src` to the end into aligned buffers. A qcow2 inside is converted.
fn pump(
    src: &mut dyn Read,
    tx: &SyncSender<WriteOp>,
    pool: &Pool,
    outer: Format,
    req: &WriteRequest,
    url: &str,
    err_at: &dyn Fn(io::Error) -> DecodeEnd,
) -> Result<Option<Format>, DecodeEnd> {
    let mut offset = 0u64;
    let mut first = true;
    loop {
        let mut buf = pool.take();
        let cap = buf.capacity();
        let mut len = 0;
        while len < cap {
            match src.read(&mut buf.spare()[len..cap]) {
                Ok(0) => break,
                Ok(n) => len += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(err_at(e)),
            }
        }
        buf.set_len(len);
        if first {
            first = false;
            permit(req, url, policy::content_format(&buf[..]))?;
            if qcow2::is_qcow2(&buf) {
                tracing::info!(url, "the {outer} stream holds a qcow2 image");
                let mut chained = (&buf[..]).chain(src);
                run_qcow2(&mut chained, tx, pool, outer, req, url)?;
                return Ok(Some(Format::Qcow2));
            }
        }
        if len == 0 {
            return Ok(None);
        }
        let at_end = len < cap;
        tx.send(WriteOp::Owned { offset, buf })
            .map_err(|_| DecodeEnd::Stopped)?;
        offset += len as u64;
        if at_end {
            return Ok(None);
        }
    }
}

/// Sends qcow2 guest data to the writer, batching contiguous clusters.
struct QcowSink<'a> {
    tx: &'a SyncSender<WriteOp>,
    pool: &'a Pool,
    cur: Option<(u64, PooledBuf)>,
}

impl QcowSink<'_> {
    fn flush(&mut self) -> io::Result<()> {
        if let Some((offset, buf)) = self.cur.take() {
            if !buf.is_empty() {
                self.tx
                    .send(WriteOp::Owned { offset, buf })
                    .map_err(|_| io::Error::other(STOPPED))?;
            }
        }
        Ok(())
    }
}

const STOPPED: &str = "the writer stopped";

impl qcow2::Sink for QcowSink<'_> {
    fn begin(&mut self, virtual_size: u64) -> io::Result<()> {
        self.tx
            .send(WriteOp::Size(virtual_size))
            .map_err(|_| io::Error::other(STOPPED))
    }

    fn data(&mut self, mut offset: u64, mut bytes: &[u8]) -> io::Result<()> {
        while !bytes.is_empty() {
            let contiguous = matches!(&self.cur, Some((start, buf)) if start + buf.len() as u64 == offset && !buf.is_full());
            if !contiguous {
                self.flush()?;
                self.cur = Some((offset, self.pool.take()));
            }
            let (_, buf) = self.cur.as_mut().expect("set above");
            let n = buf.fill_from(bytes);
            bytes = &bytes[n..];
            offset += n as u64;
            if buf.is_full() {
                self.flush()?;
            }
        }
        Ok(())
    }

    fn zero(&mut self, offset: u64, len: u64) -> io::Result<()> {
        self.flush()?;
        self.tx
            .send(WriteOp::Zero { offset, len })
            .map_err(|_| io::Error::other(STOPPED))
    }
}

fn run_qcow2(
    input: &mut dyn Read,
    tx: &SyncSender<WriteOp>,
    pool: &Pool,
    outer: Format,
    req: &WriteRequest,
    url: &str,
) -> Result<(), DecodeEnd> {
    let mut sink = QcowSink {
        tx,
        pool,
        cur: None,
    };
    let limits = qcow2::Limits {
        lookahead_bytes: QCOW2_LOOKAHEAD,
        ..qcow2::Limits::default()
    };
    let mut again = SourceReread::new(&req.urls, &req.http, outer);
    let result = qcow2::convert(input, &mut again, &mut sink, &limits);
    if result.is_ok() && sink.flush().is_err() {
        return Err(DecodeEnd::Stopped);
    }
    match result {
        Ok(summary) => {
            tracing::info!(
                url,
                virtual_size = summary.virtual_size,
                cluster_size = summary.cluster_size,
                data_clusters = summary.data_clusters,
                compressed = summary.compressed_clusters,
                reread_bytes = summary.reread_bytes,
                reread_rounds = summary.reread_rounds,
                "qcow2 converted"
            );
            if summary.snapshots > 0 {
                tracing::info!(
                    url,
                    snapshots = summary.snapshots,
                    "the qcow2 image has internal snapshots; they were ignored, the active state was written (as qemu-img convert does)"
                );
            }
            Ok(())
        }
        Err(qcow2::Qcow2Error::Sink { .. }) => Err(DecodeEnd::Stopped),
        Err(qcow2::Qcow2Error::Read { offset, source }) if outer != Format::Qcow2 => {
            Err(DecodeEnd::Failed(ImageError::Corrupt {
                format: outer.name(),
                url: url.to_string(),
                reason: format!("at decompressed byte {offset}: {source}"),
            }))
        }
        // Reading again failed, or the server's bytes changed: the source's
        // fault, not the image's.
        Err(e @ (qcow2::Qcow2Error::Reread { .. } | qcow2::Qcow2Error::RereadMismatch { .. })) => {
            let offset = match &e {
                qcow2::Qcow2Error::Reread { start, .. } => *start,
                qcow2::Qcow2Error::RereadMismatch { offset, .. } => *offset,
                _ => 0,
            };
            Err(DecodeEnd::Failed(ImageError::Download {
                url: url.to_string(),
                attempts: 1,
                offset,
                reason: e.to_string(),
            }))
        }
        Err(e) => Err(DecodeEnd::Failed(ImageError::Corrupt {
            format: "qcow2",
            url: url.to_string(),
            reason: e.to_string(),
        })),
    }
}
