//! Image sources, read into pool buffers in order: the one seam through
//! which every download goes (images, config drives, checksum files,
//! `inject_files`' files, NIC firmware). Two sources: http(s) URLs through
//! the one image HTTP client (`retry.rs` resumes and retries attempts,
//! `direct.rs` makes one: proxies, redirects, TLS, chunked bodies, over
//! `conn.rs`'s sockets; `http.rs` says what the bytes mean), and local
//! files (`file.rs`: `file://` URLs or plain paths). A large image from a
//! server that takes ranges comes over several connections in segments
//! (`parallel.rs`), still handed on in order. How the server is reached is
//! `options.rs`'s, what a download remembers across attempts `state.rs`'s,
//! how a fetch ends `outcome.rs`'s.
//!
//! HTTP downloads survive dropped connections: a failed or stalled transfer
//! resumes with `Range: bytes=N-` from the last byte received (with
//! `If-Range` when the server gave an ETag), so the running hash downstream
//! continues unchanged. A server that ignores the range answers 200 with the
//! whole image; the first N bytes are then read and dropped, which restarts
//! the transfer from zero without restarting the pipeline. Connection errors,
//! stalls and 5xx are retried with back-off (bounded, counted per failure
//! without progress), moving to the next URL when an attempt got nothing;
//! 4xx is final. A stall (no byte for `stall_timeout`) and the total
//! duration (`total_timeout`) are limited separately.

use crate::image::buffers::{Block, Pool};
use crate::image::progress::Progress;
use crate::image::ImageError;
use emitter::Emitter;

mod chunked;
mod conn;
mod direct;
mod emitter;
mod file;
mod http;
mod options;
mod outcome;
mod parallel;
mod retry;
mod route;
mod state;
mod tls_conn;
/// The chunked body decoder, for the fuzz target `fetch_text`.
#[doc(hidden)]
pub use chunked::{ChunkError, Decoder as ChunkedDecoder};
/// The Content-Range parser, for the fuzz target `fetch_text`.
#[doc(hidden)]
pub use http::parse_content_range;
pub use options::HttpOptions;
pub use outcome::FetchEnd;
/// The image client's TLS, for the benchmark's floor.
pub use tls_conn::{connect as connect_tls, HandshakeError, TlsConn};

/// Reads the image at `url` (http(s), `file://` or a path) from the start,
/// handing each full pool buffer to `emit` in order; `emit` returns false
/// when the pipeline stopped. Returns the number of bytes read. A large
/// image from a server that takes ranges comes over several connections
/// (`parallel.rs`) unless `opts.connections` is 1.
pub fn fetch(
    urls: &[String],
    opts: &HttpOptions,
    pool: &Pool,
    progress: &Progress,
    emit: &mut dyn FnMut(Block) -> bool,
) -> Result<u64, FetchEnd> {
    if urls.first().is_some_and(|u| is_http(u)) && opts.connections > 1 {
        return parallel::fetch(urls, opts, pool, progress, emit);
    }
    fetch_from(urls, opts, pool, progress, 0..u64::MAX, emit).map(|(end, _)| end)
}

/// Reads bytes `span` of the image (the end may be `u64::MAX`: to the end
/// of the file) like [`fetch`], with a Range request over http(s). Returns
/// the offset reached and whether the server honoured the range: one that
/// ignored it sent the image from its start, whose bytes before the span
/// were read and dropped.
pub fn fetch_from(
    urls: &[String],
    opts: &HttpOptions,
    pool: &Pool,
    progress: &Progress,
    span: std::ops::Range<u64>,
    emit: &mut dyn FnMut(Block) -> bool,
) -> Result<(u64, bool), FetchEnd> {
    let first = urls
        .first()
        .ok_or_else(|| ImageError::InvalidParams("no image URL given".into()))?;
    let mut out = Emitter {
        pool,
        progress,
        emit,
        cur: None,
        offset: span.start,
        limit: span.end,
    };
    let mut range_honoured = true;
    if is_http(first) {
        let tls = opts.check()?;
        let mut state = state::HttpState::default();
        retry::fetch_http(urls, opts, &tls, &mut state, &mut out)?;
        range_honoured = !state.range_ignored;
    } else {
        file::fetch_file(first, &mut out)?;
    }
    out.flush()?;
    Ok((out.offset, range_honoured))
}

/// Whether `url` is fetched over HTTP (http or https) rather than read as
/// a file.
pub(crate) fn is_http(url: &str) -> bool {
    url.starts_with("http://") || url.starts_with("https://")
}

/// Reads a small document (a checksum file, a file `inject_files` puts on
/// the disk) completely: `Ok(None)` when it has more than `limit` bytes.
pub fn fetch_small(
    url: &str,
    opts: &HttpOptions,
    limit: usize,
) -> Result<Option<Vec<u8>>, ImageError> {
    let pool = Pool::new(1, 64 * 1024);
    let progress = Progress::default();
    let mut data = Vec::new();
    let mut too_big = false;
    let mut emit = |b: Block| {
        data.extend_from_slice(&b);
        too_big = data.len() > limit;
        !too_big
    };
    let res = fetch(&[url.to_string()], opts, &pool, &progress, &mut emit);
    match res {
        Ok(_) => Ok(Some(data)),
        // Only the size limit stops a small fetch.
        Err(FetchEnd::Stopped) => Ok(None),
        Err(FetchEnd::Failed(e)) => Err(e),
    }
}

/// Parses an HTTP response head (status line and headers, up to the
/// blank line) as the image client does; for the fuzz targets in
/// `agent/fuzz`. The status code, or `None` when the head is refused.
#[doc(hidden)]
pub fn parse_response_head(head: &[u8]) -> Option<u16> {
    http::parse_head(head).ok().map(|r| r.status)
}
