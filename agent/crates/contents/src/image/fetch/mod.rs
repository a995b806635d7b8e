//! Image sources: http(s) URLs through the one image HTTP client
//! (`direct.rs`: proxies, redirects, TLS, chunked bodies) and local files
//! (`file://` URLs or plain paths), read into pool buffers in order. This
//! module owns the download's options, its resumption, retries, back-off
//! and timeouts; `direct.rs` makes one attempt.
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

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine as _;
use reqwest::header::HeaderValue;
use reqwest::StatusCode;

mod chunked;
mod direct;
mod emitter;
mod route;
mod tls_conn;
mod wire;
/// The chunked body decoder, for the fuzz target `fetch_text`.
#[doc(hidden)]
pub use chunked::{ChunkError, Decoder as ChunkedDecoder};
/// The image client's TLS, for the benchmark's floor.
pub use tls_conn::{connect as connect_tls, HandshakeError, TlsConn};

use super::buffers::{Block, Pool};
use super::progress::Progress;
use super::ImageError;
use emitter::Emitter;

/// How to reach the image server.
#[derive(Debug, Clone)]
pub struct HttpOptions {
    /// Skip TLS verification (`ipa-insecure`).
    pub insecure: bool,
    /// CA bundle to trust instead of the system's.
    pub cafile: Option<PathBuf>,
    /// Client certificate presented when a server asks (IPA's
    /// `certfile`/`keyfile`).
    pub client_certificate: Option<agent_base::config::TlsFiles>,
    /// Proxy for http URLs (`image_info.proxies.http`).
    pub http_proxy: Option<String>,
    /// Proxy for https URLs.
    pub https_proxy: Option<String>,
    /// Hosts that bypass the proxies (`image_info.no_proxy`).
    pub no_proxy: Option<String>,
    /// Full `Authorization` header value.
    pub authorization: Option<String>,
    /// Longest time without a byte before the connection counts as dropped.
    pub stall_timeout: Duration,
    /// Limit on the whole download (`ipa-image-download-max-duration`).
    pub total_timeout: Option<Duration>,
    /// Retries after a failure that made no progress.
    pub retries: u32,
    /// Longest wait between retries (back-off starts at a second).
    pub retry_interval: Duration,
}

impl Default for HttpOptions {
    fn default() -> Self {
        Self {
            insecure: false,
            cafile: None,
            client_certificate: None,
            http_proxy: None,
            https_proxy: None,
            no_proxy: None,
            authorization: None,
            stall_timeout: Duration::from_secs(60),
            total_timeout: None,
            retries: 9,
            retry_interval: Duration::from_secs(10),
        }
    }
}

impl HttpOptions {
    /// The proxies of the agent's environment (`http_proxy`, `https_proxy`,
    /// `no_proxy`, lower case first, as curl and Python's requests and
    /// urlopen read them) in place of any set: for downloads IPA makes with
    /// its environment's proxies (`inject_files`' URLs, NIC firmware).
    pub fn use_environment_proxies(&mut self) {
        self.http_proxy = env_proxy("http_proxy");
        self.https_proxy = env_proxy("https_proxy");
        self.no_proxy = env_proxy("no_proxy");
    }

    /// `Authorization: Basic …` from a user and password.
    pub fn set_basic_auth(&mut self, user: &str, password: &str) {
        let token = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        self.authorization = Some(format!("Basic {token}"));
    }

    /// Checks that the `Authorization` value can be sent as a header (no
    /// CR, LF or other control bytes).
    pub fn check_authorization(&self) -> Result<(), ImageError> {
        match &self.authorization {
            Some(a) if HeaderValue::from_str(a).is_err() => Err(ImageError::InvalidParams(
                "the Authorization value is not a valid header".into(),
            )),
            _ => Ok(()),
        }
    }

    /// Checks every setting that can be wrong before anything is
    /// downloaded: the TLS settings (CA file, client certificate) and the
    /// proxies; returns the TLS client configuration.
    pub fn check(&self) -> Result<Arc<rustls::ClientConfig>, ImageError> {
        for p in [&self.http_proxy, &self.https_proxy].into_iter().flatten() {
            route::parse_proxy(p)?;
        }
        self.check_authorization()?;
        agent_base::tls::client_config_with(
            self.insecure,
            self.cafile.as_deref(),
            self.client_certificate.as_ref(),
        )
        .map(Arc::new)
        .map_err(|e| ImageError::InvalidParams(format!("TLS settings: {e:#}")))
    }
}

/// How a fetch ended other than by reaching the end of the image.
#[derive(Debug)]
pub enum FetchEnd {
    /// A later stage stopped taking data (its own error is the cause).
    Stopped,
    /// The source failed.
    Failed(ImageError),
}

impl From<ImageError> for FetchEnd {
    fn from(e: ImageError) -> Self {
        Self::Failed(e)
    }
}

/// Reads the image at `url` (http(s), `file://` or a path) from the start,
/// handing each full pool buffer to `emit` in order; `emit` returns false
/// when the pipeline stopped. Returns the number of bytes read.
pub fn fetch(
    urls: &[String],
    opts: &HttpOptions,
    pool: &Pool,
    progress: &Progress,
    emit: &mut dyn FnMut(Block) -> bool,
) -> Result<u64, FetchEnd> {
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
    if first.starts_with("http://") || first.starts_with("https://") {
        range_honoured = fetch_http(urls, opts, &mut out)?;
    } else {
        fetch_file(first, &mut out)?;
    }
    out.flush()?;
    Ok((out.offset, range_honoured))
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

/// The environment variable `name` (else its upper-case form), if set
/// and not empty.
fn env_proxy(name: &str) -> Option<String> {
    [name.to_string(), name.to_uppercase()]
        .iter()
        .find_map(|n| std::env::var(n).ok())
        .filter(|v| !v.trim().is_empty())
}

fn local_path(url: &str) -> &str {
    url.strip_prefix("file://").unwrap_or(url)
}

fn fetch_file(url: &str, out: &mut Emitter<'_>) -> Result<(), FetchEnd> {
    let path = local_path(url);
    let fail = |e: std::io::Error| ImageError::Download {
        url: url.to_string(),
        attempts: 1,
        offset: 0,
        reason: e.to_string(),
    };
    let mut file = File::open(path).map_err(fail)?;
    if let Ok(meta) = file.metadata() {
        out.progress.set_download_total(meta.len());
    }
    if out.offset > 0 {
        file.seek(SeekFrom::Start(out.offset)).map_err(fail)?;
    }
    let mut buf = vec![0u8; 1 << 20];
    while !out.reached() {
        let n = match file.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                return Err(ImageError::Download {
                    url: url.to_string(),
                    attempts: 1,
                    offset: out.offset,
                    reason: e.to_string(),
                }
                .into())
            }
        };
        out.push(&buf[..n])?;
    }
    Ok(())
}

/// One attempt's failure: retried, or final.
enum AttemptError {
    Retry(String),
    Fatal(FetchEnd),
}

impl AttemptError {
    /// A final download failure at `offset` of `url`.
    fn fatal(url: &str, offset: u64, reason: String) -> Self {
        Self::Fatal(FetchEnd::Failed(ImageError::Download {
            url: url.to_string(),
            attempts: 1,
            offset,
            reason,
        }))
    }
}

impl From<FetchEnd> for AttemptError {
    fn from(e: FetchEnd) -> Self {
        Self::Fatal(e)
    }
}

/// State kept across attempts of one HTTP download.
struct HttpState {
    total: Option<u64>,
    etag: Option<HeaderValue>,
    /// A reply came back whole (200) to a Range request.
    range_ignored: bool,
    /// Where redirects of the current URL led: resumed attempts go there.
    redirected: Option<direct::Redirected>,
}

/// The `Range` header value for a request from byte `offset` that stops at
/// `limit`, if the request needs one.
fn range_header(offset: u64, limit: u64) -> Option<String> {
    match (offset, limit) {
        (0, u64::MAX) => None,
        (_, u64::MAX) => Some(format!("bytes={offset}-")),
        _ => Some(format!("bytes={offset}-{}", limit.saturating_sub(1))),
    }
}

/// Downloads into `out` until its limit or the end of the file; returns
/// whether no reply ignored a Range request.
fn fetch_http(
    urls: &[String],
    opts: &HttpOptions,
    out: &mut Emitter<'_>,
) -> Result<bool, FetchEnd> {
    // One TLS configuration (and so one session cache) for every attempt.
    let tls = opts.check()?;
    let started = Instant::now();
    let deadline = opts.total_timeout.map(|t| started + t);
    let mut state = HttpState {
        total: None,
        etag: None,
        range_ignored: false,
        redirected: None,
    };
    let mut url_idx = 0;
    let mut failures = 0u32;
    loop {
        let Some(url) = urls.get(url_idx) else {
            return Err(ImageError::InvalidParams("no image URL given".into()).into());
        };
        let before = out.offset;
        let reason = match direct::attempt(url, opts, &tls, &mut state, out, deadline) {
            Ok(()) => return Ok(!state.range_ignored),
            Err(AttemptError::Fatal(e)) => return Err(e),
            Err(AttemptError::Retry(reason)) => reason,
        };
        if out.offset > before {
            failures = 0;
        } else if urls.len() > 1 {
            url_idx = (url_idx + 1) % urls.len();
            // The next URL starts from itself, not from where the last
            // one's redirects led.
            state.redirected = None;
        }
        failures += 1;
        if failures > opts.retries {
            return Err(ImageError::Download {
                url: url.clone(),
                attempts: failures,
                offset: out.offset,
                reason,
            }
            .into());
        }
        out.progress.add_resume();
        let wait = Duration::from_secs(1 << (failures - 1).min(4)).min(opts.retry_interval);
        tracing::warn!(
            url = %url, offset = out.offset, attempt = failures, retries = opts.retries,
            "image download interrupted ({reason}); resuming in {wait:?}"
        );
        std::thread::sleep(wait);
    }
}

/// The parts of a reply's head that decide how a download goes on.
struct ReplyHead {
    status: StatusCode,
    content_range: Option<(u64, Option<u64>)>,
    content_length: Option<u64>,
    etag: Option<HeaderValue>,
}

/// Checks a reply to the request from byte `out.offset`: 4xx is final, other non-2xx retried, a 206
/// must start where asked; a 200 to a range request is the whole image
/// again. Records the total and the ETag, and returns how many leading body
/// bytes to drop.
fn accept_reply(
    url: &str,
    reply: ReplyHead,
    state: &mut HttpState,
    out: &mut Emitter<'_>,
) -> Result<u64, AttemptError> {
    let status = reply.status;
    if status.is_client_error() {
        return Err(FetchEnd::Failed(ImageError::HttpStatus {
            url: url.to_string(),
            status: status.as_u16(),
        })
        .into());
    }
    if !status.is_success() {
        return Err(AttemptError::Retry(format!("HTTP {status}")));
    }
    let offset = out.offset;
    let mut skip = 0u64;
    if status == StatusCode::PARTIAL_CONTENT {
        let (start, total) = reply
            .content_range
            .ok_or_else(|| AttemptError::Retry("206 without a usable Content-Range".into()))?;
        if start != offset {
            return Err(AttemptError::Retry(format!(
                "asked for byte {offset}, server sent from byte {start}"
            )));
        }
        if total.is_some() {
            state.total = total;
        }
    } else {
        if offset > 0 {
            tracing::warn!(
                url,
                offset,
                "server ignored the Range request; reading from the start again"
            );
            skip = offset;
        }
        state.range_ignored |= range_header(offset, out.limit).is_some();
        state.total = reply.content_length;
        state.etag = reply.etag;
    }
    if let Some(t) = state.total {
        out.progress.set_download_total(t);
    }
    Ok(skip)
}

/// `bytes 100-199/1000` → `(100, Some(1000))`; `*` totals give `None`.
/// Public (hidden) for the fuzz targets in `agent/fuzz`.
#[doc(hidden)]
pub fn parse_content_range(v: &str) -> Option<(u64, Option<u64>)> {
    let rest = v.trim().strip_prefix("bytes ")?;
    let (range, total) = rest.split_once('/')?;
    let start = range.split_once('-')?.0.trim().parse().ok()?;
    let total = total.trim().parse().ok();
    Some((start, total))
}

/// Parses an HTTP response head (status line and headers, up to the
/// blank line) as the image client does; for the fuzz targets in
/// `agent/fuzz`. The status code, or `None` when the head is refused.
#[doc(hidden)]
pub fn parse_response_head(head: &[u8]) -> Option<u16> {
    wire::parse_head(head).ok().map(|r| r.status)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_range_is_parsed() {
        assert_eq!(
            parse_content_range("bytes 100-199/1000"),
            Some((100, Some(1000)))
        );
        assert_eq!(parse_content_range("bytes 5-9/*"), Some((5, None)));
        assert_eq!(parse_content_range("items 1-2/3"), None);
    }

    #[test]
    fn settings_are_checked_before_any_download() {
        let ok = HttpOptions {
            http_proxy: Some("http://u:p@[::1]:3128".into()),
            https_proxy: Some("https://proxy.local:3129".into()),
            ..HttpOptions::default()
        };
        assert!(ok.check().is_ok());
        for bad in [
            HttpOptions {
                http_proxy: Some("socks5://proxy.local:1080".into()),
                ..HttpOptions::default()
            },
            HttpOptions {
                authorization: Some("Basic x\r\nX-Injected: 1".into()),
                ..HttpOptions::default()
            },
            HttpOptions {
                cafile: Some("/nonexistent/ca.pem".into()),
                ..HttpOptions::default()
            },
        ] {
            let err = bad.check().unwrap_err();
            assert!(matches!(err, ImageError::InvalidParams(_)), "{err}");
        }
    }

    #[test]
    fn basic_auth_header() {
        let mut o = HttpOptions::default();
        o.set_basic_auth("user", "pass");
        assert_eq!(o.authorization.as_deref(), Some("Basic dXNlcjpwYXNz"));
    }

    #[test]
    fn local_file_is_read_in_full_buffers() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("img");
        let data: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(&path, &data).unwrap();
        let pool = Pool::new(2, 4096);
        let progress = Progress::default();
        let mut got = Vec::new();
        let mut sizes = Vec::new();
        let n = fetch(
            &[format!("file://{}", path.display())],
            &HttpOptions::default(),
            &pool,
            &progress,
            &mut |b| {
                sizes.push(b.len());
                got.extend_from_slice(&b);
                true
            },
        )
        .unwrap();
        assert_eq!(n, 10_000);
        assert_eq!(got, data);
        assert_eq!(sizes, vec![4096, 4096, 1808]);
        let err = fetch(
            &["/nonexistent/img".into()],
            &HttpOptions::default(),
            &pool,
            &progress,
            &mut |_| true,
        )
        .unwrap_err();
        assert!(
            matches!(err, FetchEnd::Failed(ImageError::Download { ref url, .. }) if url == "/nonexistent/img")
        );
    }
}
