//! What one HTTP download remembers across its attempts (`retry.rs`
//! runs them, `direct.rs` makes each): the image's size and ETag, where
//! redirects led, the connection a reply left open for the next request,
//! whether a download may go on over several connections, and when it
//! started.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Instant;

use reqwest::header::HeaderValue;
use reqwest::Url;

use super::conn::Conn;
use super::emitter::Emitter;
use super::http::{self, Accepted};

/// Where a download's requests go after its redirects.
#[derive(Debug, Clone)]
pub(super) struct Redirected {
    /// The URL reached.
    pub(super) url: Url,
    /// Whether the configured `Authorization` still applies to it.
    pub(super) keep_auth: bool,
}

/// A connection left open after a reply whose body ended as framed, for
/// the next request to the same origin as `url` (`http::same_origin`, no
/// proxy).
pub(super) struct Idle {
    /// The URL whose reply left it open.
    pub(super) url: Url,
    pub(super) conn: Conn,
}

impl std::fmt::Debug for Idle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Idle")
            .field("url", &self.url.as_str())
            .finish()
    }
}

/// What the first reply of a download that may go on over several
/// connections (`parallel.rs`) says: `splittable` is set when it is a
/// whole reply from a server that takes ranges (`Accept-Ranges: bytes`,
/// framed by its `Content-Length`) for an image of at least `min_total`
/// bytes.
#[derive(Debug, Clone)]
pub(super) struct Probe {
    pub(super) min_total: u64,
    pub(super) splittable: Arc<AtomicBool>,
}

/// State kept across attempts of one HTTP download.
#[derive(Debug, Default)]
pub(super) struct HttpState {
    pub(super) total: Option<u64>,
    /// The first whole reply's ETag, sent as `If-Range` when resuming.
    pub(super) etag: Option<String>,
    /// A reply came back whole (200) to a Range request.
    pub(super) range_ignored: bool,
    /// Where redirects of the current URL led: resumed attempts go there.
    pub(super) redirected: Option<Redirected>,
    /// A segment of a parallel download (`parallel.rs`): connections are
    /// kept open and reused, and a reply must honour the range (a whole
    /// image back means it changed on the server, or ranges are not
    /// served after all).
    pub(super) segments: bool,
    /// The connection kept open by the last reply.
    pub(super) idle: Option<Idle>,
    /// Read by the first accepted reply ([`Probe`]), which takes it.
    pub(super) probe: Option<Probe>,
    /// When the download started: its total time limit counts from here,
    /// across every attempt and every segment.
    pub(super) started: Option<Instant>,
}

impl HttpState {
    /// Records what an accepted reply to the request from `out.offset`
    /// says (the image's size, its ETag, a range ignored); returns how
    /// many leading body bytes to drop.
    pub(super) fn record(&mut self, url: &str, accepted: Accepted, out: &Emitter<'_>) -> u64 {
        let skip = match accepted {
            Accepted::Partial { total } => {
                if total.is_some() {
                    self.total = total;
                }
                0
            }
            Accepted::Whole { skip, length, etag } => {
                if skip > 0 {
                    tracing::warn!(
                        url,
                        offset = skip,
                        "server ignored the Range request; reading from the start again"
                    );
                }
                self.range_ignored |= http::range_header(out.offset, out.limit).is_some();
                self.total = length;
                // Only a value that can go back out as a header.
                self.etag = etag.filter(|e| HeaderValue::from_str(e).is_ok());
                skip
            }
        };
        if let Some(t) = self.total {
            out.progress.set_download_total(t);
        }
        skip
    }
}
