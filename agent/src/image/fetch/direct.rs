//! The direct path for `http://` and `https://` images: one HTTP/1.1 GET on
//! a blocking socket whose body is read straight into the pipeline's aligned
//! pool buffers. Going through reqwest costs a second copy of every byte
//! (hyper's read buffer into the pool buffer) and a task wake-up per read;
//! on a CPU that hashes at 1.5 GB/s that extra work is what the other core
//! lacks (see agent/docs/image-writing.md, "Benchmark").
//!
//! Over TLS (1.2 or 1.3), rustls's unbuffered client makes the handshake
//! with the same client configuration as reqwest's
//! (`crate::tls::client_config_with`, so the same CA file, pinning,
//! `ipa-insecure` and client certificate) and opens the response's records
//! in place in the connection's read buffer (`tls_conn.rs`).
//!
//! Only the common case is taken here: no proxy, no user info in the URL, a
//! 200 or 206 answer with `Content-Length` and no `Transfer-Encoding`.
//! Anything else (a redirect, a chunked body, a proxy, a failed TLS
//! handshake) is answered [`Attempt::Unsupported`] before a body byte is
//! consumed, and the caller uses reqwest for the rest of that download (so
//! a refused certificate is reported by the reqwest path, as before).
//! Status handling, resumption and error texts are the reqwest path's
//! (`super::attempt_http`).

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::time::{Duration, Instant};

use reqwest::Url;

use reqwest::header::HeaderValue;
use reqwest::StatusCode;

use super::tls_conn::{self, TlsConn};
use super::{accept_reply, AttemptError, Emitter, FetchEnd, HttpOptions, HttpState, ReplyHead};
use crate::image::ImageError;

/// Largest response head accepted.
const HEAD_LIMIT: usize = 64 << 10;

/// What one direct attempt came to.
pub(super) enum Attempt {
    /// The whole body arrived.
    Done,
    /// Retried or final, as on the reqwest path.
    Failed(AttemptError),
    /// This download needs reqwest; nothing of the body was consumed.
    Unsupported(String),
}

impl From<AttemptError> for Attempt {
    fn from(e: AttemptError) -> Self {
        Self::Failed(e)
    }
}

impl From<FetchEnd> for Attempt {
    fn from(e: FetchEnd) -> Self {
        Self::Failed(AttemptError::Fatal(e))
    }
}

/// True when `url` is http(s) and no proxy can apply to it: none in `opts`
/// and none in the environment (reqwest honours `http_proxy`/`HTTP_PROXY`,
/// `https_proxy`/`HTTPS_PROXY` and `ALL_PROXY`).
pub(super) fn eligible(url: &str, opts: &HttpOptions) -> bool {
    let env_proxy = |vars: [&str; 4]| {
        vars.iter()
            .any(|v| std::env::var_os(v).is_some_and(|s| !s.is_empty()))
    };
    if url.starts_with("http://") {
        opts.http_proxy.is_none()
            && !env_proxy(["http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"])
    } else if url.starts_with("https://") {
        opts.https_proxy.is_none()
            && !env_proxy(["https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"])
    } else {
        false
    }
}

/// One connection: plain TCP or TLS over it.
enum Conn {
    Plain(TcpStream),
    Tls(Box<TlsConn>),
}

impl Conn {
    fn socket(&self) -> &TcpStream {
        match self {
            Self::Plain(s) => s,
            Self::Tls(t) => t.socket(),
        }
    }
}

impl Read for Conn {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Self::Plain(s) => s.read(buf),
            Self::Tls(t) => t.read(buf),
        }
    }
}

impl Write for Conn {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Self::Plain(s) => s.write(buf),
            Self::Tls(t) => t.write(buf),
        }
    }
    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Self::Plain(s) => s.flush(),
            Self::Tls(t) => t.flush(),
        }
    }
}

/// One GET of `url` from byte `out.offset`, the body read into `out`;
/// `tls` is the client configuration for `https://` URLs.
pub(super) fn attempt(
    url: &str,
    opts: &HttpOptions,
    tls: &Arc<rustls::ClientConfig>,
    state: &mut HttpState,
    out: &mut Emitter<'_>,
    deadline: Option<Instant>,
) -> Attempt {
    let parsed = match Url::parse(url) {
        Ok(u) if u.username().is_empty() && u.password().is_none() => u,
        Ok(_) => return Attempt::Unsupported("credentials in the URL".into()),
        Err(e) => return Attempt::Unsupported(format!("URL not parsed here: {e}")),
    };
    let Some(host) = parsed.host_str().map(str::to_string) else {
        return Attempt::Unsupported("no host".into());
    };
    let port = parsed.port_or_known_default().unwrap_or(80);
    let stall = opts.stall_timeout;
    let timeout = |left: Option<Instant>| {
        match left {
            Some(d) => stall.min(d.saturating_duration_since(Instant::now())),
            None => stall,
        }
        .max(Duration::from_millis(1))
    };

    if deadline.is_some_and(|d| Instant::now() >= d) {
        return total_timeout(url, opts, out.offset);
    }
    let sock = match connect(&host, port, timeout(deadline)) {
        Ok(c) => c,
        Err(reason) => return AttemptError::Retry(reason.to_string()).into(),
    };
    let _ = sock.set_nodelay(true);
    if let Err(e) = sock.set_read_timeout(Some(timeout(deadline))) {
        return AttemptError::Retry(format!("socket: {e}")).into();
    }
    let mut conn = if parsed.scheme() == "https" {
        match tls_conn::connect(sock, &host, tls) {
            Ok(c) => Conn::Tls(Box::new(c)),
            Err(why) => return Attempt::Unsupported(why),
        }
    } else {
        Conn::Plain(sock)
    };
    // The same rule as reqwest's: a header value with CR, LF or other
    // control bytes would inject headers into the request.
    if let Some(auth) = &opts.authorization {
        if HeaderValue::from_str(auth).is_err() {
            return AttemptError::Fatal(FetchEnd::Failed(ImageError::InvalidParams(
                "the Authorization value is not a valid header".into(),
            )))
            .into();
        }
    }
    let request = request(&parsed, &host, port, opts, state, out.offset, out.limit);
    if let Err(e) = conn
        .write_all(request.as_bytes())
        .and_then(|()| conn.flush())
    {
        return AttemptError::Retry(format!("sending the request: {e}")).into();
    }

    let (head, leftover) = match read_head(&mut conn, stall) {
        Ok(h) => h,
        Err(reason) => return AttemptError::Retry(reason.to_string()).into(),
    };
    let reply = match parse_head(&head) {
        Ok(r) => r,
        Err(reason) => return Attempt::Unsupported(reason.to_string()),
    };
    if (300..400).contains(&reply.status) {
        return Attempt::Unsupported(format!("HTTP {} redirect", reply.status));
    }
    let Ok(status) = StatusCode::from_u16(reply.status) else {
        return AttemptError::Retry(format!("HTTP status {} not understood", reply.status)).into();
    };
    let head = ReplyHead {
        status,
        content_range: reply.content_range,
        content_length: reply.content_length,
        etag: reply
            .etag
            .as_deref()
            .and_then(|e| HeaderValue::from_str(e).ok()),
    };
    let offset = out.offset;
    let mut skip = match accept_reply(url, head, state, out) {
        Ok(skip) => skip,
        Err(e) => return e.into(),
    };
    if reply.chunked {
        return Attempt::Unsupported("chunked transfer encoding".into());
    }
    let Some(body_len) = reply.content_length else {
        return Attempt::Unsupported("no Content-Length".into());
    };

    // The body: bytes already read with the head, then straight from the socket.
    let mut left = body_len;
    let mut data = &leftover[..leftover.len().min(body_len as usize)];
    left -= data.len() as u64;
    let n = skip.min(data.len() as u64) as usize;
    skip -= n as u64;
    data = &data[n..];
    if !data.is_empty() {
        if let Err(e) = out.push(data) {
            return e.into();
        }
    }
    let started = Instant::now();
    while left > 0 && !out.reached() {
        if deadline.is_some() {
            if let Err(e) = conn.socket().set_read_timeout(Some(timeout(deadline))) {
                return AttemptError::Retry(format!("socket: {e}")).into();
            }
        }
        let read = if skip > 0 {
            let mut scratch = vec![0u8; (skip.min(1 << 20)) as usize];
            conn.read(&mut scratch).map(|n| {
                skip -= n as u64;
                (n, false)
            })
        } else {
            let spare = out.spare();
            let cap = (spare.len() as u64).min(left) as usize;
            conn.read(&mut spare[..cap]).map(|n| (n, true))
        };
        match read {
            Ok((0, _)) => break,
            Ok((n, into_buffer)) => {
                left -= n as u64;
                if into_buffer {
                    if let Err(e) = out.commit(n) {
                        return e.into();
                    }
                }
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                if deadline.is_some_and(|d| Instant::now() >= d) {
                    return total_timeout(url, opts, out.offset);
                }
                return AttemptError::Retry(format!(
                    "stalled: no data for {} s at byte {} (after {:.0} s)",
                    stall.as_secs_f64(),
                    out.offset,
                    started.elapsed().as_secs_f64()
                ))
                .into();
            }
            Err(e) => return AttemptError::Retry(e.to_string()).into(),
        }
    }
    if left > 0 && !out.reached() {
        return AttemptError::Retry(match state.total {
            Some(t) => format!("connection closed at byte {} of {t}", out.offset),
            None => format!("connection closed at byte {}", out.offset),
        })
        .into();
    }
    if skip > 0 {
        return AttemptError::Retry(format!("the full reply ended before byte {offset}")).into();
    }
    Attempt::Done
}

/// The whole download took longer than `opts.total_timeout`.
fn total_timeout(url: &str, opts: &HttpOptions, offset: u64) -> Attempt {
    AttemptError::Fatal(FetchEnd::Failed(ImageError::TotalTimeout {
        url: url.to_string(),
        secs: opts.total_timeout.map_or(0, |t| t.as_secs()),
        offset,
    }))
    .into()
}

/// Why the connection or the response head failed (a retry, or for a head
/// that does not parse, a fall-back to reqwest).
#[derive(Debug, thiserror::Error)]
pub(super) enum DirectError {
    /// The host name does not resolve.
    #[error("resolving {host}: {source}")]
    Resolve {
        /// The host.
        host: String,
        /// The resolver's error.
        source: std::io::Error,
    },
    /// It resolves to nothing.
    #[error("{0} has no address")]
    NoAddress(String),
    /// The last address tried refused or timed out.
    #[error("connecting to {addr}: {source}")]
    Connect {
        /// The address.
        addr: SocketAddr,
        /// The error.
        source: std::io::Error,
    },
    /// The server closed before the head ended.
    #[error("connection closed before the response head")]
    Closed,
    /// No head within the stall timeout.
    #[error("no response within {0:?}")]
    NoResponse(Duration),
    /// Reading failed.
    #[error("{0}")]
    Read(std::io::Error),
    /// The head is larger than allowed.
    #[error("response head longer than {HEAD_LIMIT} bytes")]
    HeadTooLong,
    /// The head ended early.
    #[error("incomplete response head")]
    Incomplete,
    /// The head is not HTTP.
    #[error("response head not parsed: {0}")]
    Unparsed(httparse::Error),
    /// No status code.
    #[error("no status code")]
    NoStatus,
    /// An unparsable Content-Length.
    #[error("Content-Length {0:?}")]
    ContentLength(String),
    /// Two different Content-Length values.
    #[error("conflicting Content-Length headers")]
    ConflictingLength,
}

/// Connects to the first address of `host` that answers within `timeout`.
fn connect(host: &str, port: u16, timeout: Duration) -> Result<TcpStream, DirectError> {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    let addrs: Vec<SocketAddr> = (bare, port)
        .to_socket_addrs()
        .map_err(|source| DirectError::Resolve {
            host: host.to_string(),
            source,
        })?
        .collect();
    let mut last = DirectError::NoAddress(host.to_string());
    for addr in addrs {
        match TcpStream::connect_timeout(&addr, timeout) {
            Ok(c) => return Ok(c),
            Err(source) => last = DirectError::Connect { addr, source },
        }
    }
    Err(last)
}

/// The request head: a GET of path and query, with the resumption headers.
fn request(
    url: &Url,
    host: &str,
    port: u16,
    opts: &HttpOptions,
    state: &HttpState,
    offset: u64,
    limit: u64,
) -> String {
    let mut target = url.path().to_string();
    if let Some(q) = url.query() {
        target.push('?');
        target.push_str(q);
    }
    let host_header = match url.port() {
        Some(_) => format!("{host}:{port}"),
        None => host.to_string(),
    };
    let mut r = format!(
        "GET {target} HTTP/1.1\r\nHost: {host_header}\r\nAccept: */*\r\nUser-Agent: {}\r\nConnection: close\r\n",
        concat!("ironic-deploy-agent/", env!("CARGO_PKG_VERSION"))
    );
    if let Some(auth) = &opts.authorization {
        r.push_str(&format!("Authorization: {auth}\r\n"));
    }
    if let Some(range) = super::range_header(offset, limit) {
        r.push_str(&format!("Range: {range}\r\n"));
        if let Some(etag) = state.etag.as_ref().and_then(|e| e.to_str().ok()) {
            r.push_str(&format!("If-Range: {etag}\r\n"));
        }
    }
    r.push_str("\r\n");
    r
}

/// Reads up to the end of the response head; returns the head and the
/// body bytes that came with it.
fn read_head(conn: &mut impl Read, stall: Duration) -> Result<(Vec<u8>, Vec<u8>), DirectError> {
    let mut buf = Vec::with_capacity(4096);
    let mut chunk = [0u8; 4096];
    loop {
        let n = match conn.read(&mut chunk) {
            Ok(0) => return Err(DirectError::Closed),
            Ok(n) => n,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return Err(DirectError::NoResponse(stall))
            }
            Err(e) => return Err(DirectError::Read(e)),
        };
        buf.extend_from_slice(&chunk[..n]);
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let rest = buf.split_off(end + 4);
            return Ok((buf, rest));
        }
        if buf.len() > HEAD_LIMIT {
            return Err(DirectError::HeadTooLong);
        }
    }
}

/// The parts of a response head the download needs.
#[derive(Debug, PartialEq)]
pub(super) struct Reply {
    pub(super) status: u16,
    content_length: Option<u64>,
    content_range: Option<(u64, Option<u64>)>,
    etag: Option<String>,
    chunked: bool,
}

pub(super) fn parse_head(head: &[u8]) -> Result<Reply, DirectError> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut resp = httparse::Response::new(&mut headers);
    match resp.parse(head) {
        Ok(httparse::Status::Complete(_)) => {}
        Ok(httparse::Status::Partial) => return Err(DirectError::Incomplete),
        Err(e) => return Err(DirectError::Unparsed(e)),
    }
    let status = resp.code.ok_or(DirectError::NoStatus)?;
    let mut reply = Reply {
        status,
        content_length: None,
        content_range: None,
        etag: None,
        chunked: false,
    };
    for h in resp.headers.iter() {
        let value = std::str::from_utf8(h.value).unwrap_or("").trim();
        match h.name.to_ascii_lowercase().as_str() {
            "content-length" => {
                let n = value
                    .parse()
                    .map_err(|_| DirectError::ContentLength(value.to_string()))?;
                if reply.content_length.is_some_and(|m| m != n) {
                    return Err(DirectError::ConflictingLength);
                }
                reply.content_length = Some(n);
            }
            "content-range" => reply.content_range = super::parse_content_range(value),
            "etag" => reply.etag = Some(value.to_string()),
            "transfer-encoding" => reply.chunked = true,
            _ => {}
        }
    }
    Ok(reply)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn response_heads_are_read_for_what_the_download_needs() {
        let r = parse_head(
            b"HTTP/1.1 206 Partial Content\r\nContent-Length: 10\r\nContent-Range: bytes 90-99/100\r\nETag: \"x1\"\r\n\r\n",
        )
        .unwrap();
        assert_eq!(
            r,
            Reply {
                status: 206,
                content_length: Some(10),
                content_range: Some((90, Some(100))),
                etag: Some("\"x1\"".into()),
                chunked: false,
            }
        );
        let r = parse_head(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n").unwrap();
        assert!(r.chunked && r.content_length.is_none());
        assert!(
            parse_head(b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n")
                .is_err()
        );
        assert!(parse_head(b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n").is_err());
        assert!(parse_head(b"garbage\r\n\r\n").is_err());
    }

    #[test]
    fn requests_carry_the_resumption_headers() {
        let url = Url::parse("http://[::1]:8080/images/disk.img?sig=1").unwrap();
        let mut opts = HttpOptions::default();
        opts.set_basic_auth("u", "p");
        let state = HttpState {
            total: Some(100),
            etag: Some(reqwest::header::HeaderValue::from_static("\"e\"")),
            range_ignored: false,
        };
        let r = request(&url, "[::1]", 8080, &opts, &state, 42, u64::MAX);
        assert!(r.starts_with("GET /images/disk.img?sig=1 HTTP/1.1\r\nHost: [::1]:8080\r\n"));
        assert!(r.contains("\r\nAuthorization: Basic dTpw\r\n"));
        assert!(r.contains("\r\nRange: bytes=42-\r\nIf-Range: \"e\"\r\n"));
        assert!(r.ends_with("\r\n\r\n"));
        let r = request(&url, "[::1]", 8080, &opts, &state, 0, u64::MAX);
        assert!(!r.contains("Range"));
        let r = request(&url, "[::1]", 8080, &opts, &state, 0, 4096);
        assert!(r.contains("\r\nRange: bytes=0-4095\r\n"));
    }

    #[test]
    fn proxies_take_the_reqwest_path() {
        let mut opts = HttpOptions::default();
        assert!(eligible("https://example.invalid/x", &opts));
        assert!(eligible("http://example.invalid/x", &opts));
        assert!(!eligible("ftp://example.invalid/x", &opts));
        opts.http_proxy = Some("http://proxy.invalid:3128".into());
        assert!(!eligible("http://example.invalid/x", &opts));
        assert!(eligible("https://example.invalid/x", &opts));
        opts.https_proxy = Some("http://proxy.invalid:3128".into());
        assert!(!eligible("https://example.invalid/x", &opts));
    }
}
