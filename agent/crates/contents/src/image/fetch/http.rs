//! What the image download says and hears in HTTP/1.1, as pure functions
//! over bytes and values (no socket here; `direct.rs` drives the I/O): the
//! request head with its resumption headers, the response head parsed for
//! what the download needs, what a reply means for a download resumed at
//! some byte (`accept_reply`), where a redirect goes (`next_hop`) and
//! whether a body that stopped ended the attempt well (`body_end`).
//! Nothing here panics on what a server sends: a head that does not parse
//! is an error (`fetch_text` fuzzes it).

use reqwest::{StatusCode, Url};

use super::outcome::AttemptError;
use super::route;
use crate::image::ImageError;

/// The `Range` header value for a request from byte `offset` that stops at
/// `limit`, if the request needs one.
pub(super) fn range_header(offset: u64, limit: u64) -> Option<String> {
    match (offset, limit) {
        (0, u64::MAX) => None,
        (_, u64::MAX) => Some(format!("bytes={offset}-")),
        _ => Some(format!("bytes={offset}-{}", limit.saturating_sub(1))),
    }
}

/// What goes into one request besides the URL.
#[derive(Debug, Default)]
pub(super) struct RequestHead<'a> {
    /// The absolute URL as the target (an http URL through a proxy).
    pub(super) absolute: bool,
    /// `Authorization` value.
    pub(super) authorization: Option<&'a str>,
    /// `Proxy-Authorization` value (sent only with `absolute`).
    pub(super) proxy_authorization: Option<&'a str>,
    /// `Range` value ([`range_header`]).
    pub(super) range: Option<String>,
    /// `If-Range` value (the ETag the first reply gave), sent with a range.
    pub(super) if_range: Option<&'a str>,
    /// Ask the server to keep the connection open for the next request
    /// (the segments of a parallel download, `parallel.rs`).
    pub(super) keep_alive: bool,
}

/// The request head: a GET of path and query (the absolute URL, without
/// user info, for `absolute`), with the credentials and the resumption
/// headers.
pub(super) fn request(url: &Url, head: &RequestHead<'_>) -> String {
    let authority = route::authority(url);
    let mut target = match head.absolute {
        true => format!("{}://{authority}{}", url.scheme(), url.path()),
        false => url.path().to_string(),
    };
    if let Some(q) = url.query() {
        target.push('?');
        target.push_str(q);
    }
    let mut r = format!(
        "GET {target} HTTP/1.1\r\nHost: {authority}\r\nAccept: */*\r\nUser-Agent: {}\r\nConnection: {}\r\n",
        concat!("ironic-deploy-agent/", env!("CARGO_PKG_VERSION")),
        if head.keep_alive { "keep-alive" } else { "close" }
    );
    if let Some(auth) = head.authorization {
        r.push_str(&format!("Authorization: {auth}\r\n"));
    }
    if let Some(auth) = head.proxy_authorization.filter(|_| head.absolute) {
        r.push_str(&format!("Proxy-Authorization: {auth}\r\n"));
    }
    if let Some(range) = &head.range {
        r.push_str(&format!("Range: {range}\r\n"));
        if let Some(etag) = head.if_range {
            r.push_str(&format!("If-Range: {etag}\r\n"));
        }
    }
    r.push_str("\r\n");
    r
}

/// Why a response head was refused.
#[derive(Debug, thiserror::Error)]
pub(super) enum HeadError {
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

/// The parts of a response head the download needs.
#[derive(Debug, PartialEq)]
pub(super) struct Reply {
    pub(super) status: u16,
    /// `Content-Length` (`None` when a transfer coding is set, which
    /// overrides it, RFC 9112 §6.3).
    pub(super) content_length: Option<u64>,
    pub(super) content_range: Option<(u64, Option<u64>)>,
    pub(super) etag: Option<String>,
    /// `Transfer-Encoding` ends in `chunked`.
    pub(super) chunked: bool,
    /// `Location`, for a redirect.
    pub(super) location: Option<String>,
    /// `Accept-Ranges: bytes`: the server says it serves Range requests.
    pub(super) accept_ranges: bool,
    /// The server closes the connection after this reply (`Connection:
    /// close`, or an HTTP/1.0 reply without `keep-alive`).
    pub(super) close: bool,
}

impl Reply {
    /// A reply with `status` and no header the download reads.
    pub(super) fn new(status: u16) -> Self {
        Self {
            status,
            content_length: None,
            content_range: None,
            etag: None,
            chunked: false,
            location: None,
            accept_ranges: false,
            close: false,
        }
    }
}

/// Parses a response head (status line and headers, up to the blank line).
pub(super) fn parse_head(head: &[u8]) -> Result<Reply, HeadError> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut resp = httparse::Response::new(&mut headers);
    match resp.parse(head) {
        Ok(httparse::Status::Complete(_)) => {}
        Ok(httparse::Status::Partial) => return Err(HeadError::Incomplete),
        Err(e) => return Err(HeadError::Unparsed(e)),
    }
    let status = resp.code.ok_or(HeadError::NoStatus)?;
    let mut reply = Reply::new(status);
    let mut transfer_coded = false;
    let mut keep_alive = false;
    for h in resp.headers.iter() {
        let value = std::str::from_utf8(h.value).unwrap_or("").trim();
        match h.name.to_ascii_lowercase().as_str() {
            "content-length" => {
                let n = value
                    .parse()
                    .map_err(|_| HeadError::ContentLength(value.to_string()))?;
                if reply.content_length.is_some_and(|m| m != n) {
                    return Err(HeadError::ConflictingLength);
                }
                reply.content_length = Some(n);
            }
            "content-range" => reply.content_range = parse_content_range(value),
            "etag" => reply.etag = Some(value.to_string()),
            "transfer-encoding" => {
                // The last coding decides: chunked, or (any other) the body
                // runs to the end of the connection.
                transfer_coded = true;
                reply.chunked = value
                    .rsplit(',')
                    .next()
                    .is_some_and(|c| c.trim().eq_ignore_ascii_case("chunked"));
            }
            "location" => reply.location = Some(value.to_string()),
            "accept-ranges" => {
                reply.accept_ranges = value
                    .split(',')
                    .any(|u| u.trim().eq_ignore_ascii_case("bytes"));
            }
            "connection" => {
                let has = |t: &str| value.split(',').any(|v| v.trim().eq_ignore_ascii_case(t));
                reply.close |= has("close");
                keep_alive |= has("keep-alive");
            }
            _ => {}
        }
    }
    if transfer_coded {
        reply.content_length = None;
    }
    if resp.version != Some(1) && !keep_alive {
        reply.close = true;
    }
    Ok(reply)
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

/// What a successful reply means for a download at some byte.
#[derive(Debug, PartialEq)]
pub(super) enum Accepted {
    /// 206 from the byte asked for; the image's size, if the server gave it.
    Partial { total: Option<u64> },
    /// Any other 2xx: the whole image from its first byte, of which the
    /// first `skip` (those before the byte asked for) are to be dropped.
    Whole {
        skip: u64,
        length: Option<u64>,
        etag: Option<String>,
    },
}

/// A reply to the request for `url` from byte `offset`: 4xx is final,
/// other non-2xx retried, a 206 must start where asked.
pub(super) fn accept_reply(
    url: &str,
    reply: &Reply,
    offset: u64,
) -> Result<Accepted, AttemptError> {
    let Ok(status) = StatusCode::from_u16(reply.status) else {
        return Err(AttemptError::Retry(format!(
            "HTTP status {} not understood",
            reply.status
        )));
    };
    if status.is_client_error() {
        return Err(AttemptError::Fatal(
            ImageError::HttpStatus {
                url: url.to_string(),
                status: status.as_u16(),
            }
            .into(),
        ));
    }
    if !status.is_success() {
        return Err(AttemptError::Retry(format!("HTTP {status}")));
    }
    if status != StatusCode::PARTIAL_CONTENT {
        return Ok(Accepted::Whole {
            skip: offset,
            length: reply.content_length,
            etag: reply.etag.clone(),
        });
    }
    let (start, total) = reply
        .content_range
        .ok_or_else(|| AttemptError::Retry("206 without a usable Content-Range".into()))?;
    if start != offset {
        return Err(AttemptError::Retry(format!(
            "asked for byte {offset}, server sent from byte {start}"
        )));
    }
    Ok(Accepted::Partial { total })
}

/// Where a redirect from `current` to `location` (status `status`) goes,
/// and whether it stays with the same scheme, host and port (the
/// configured `Authorization` is not sent elsewhere). Refused: an https
/// URL redirected to http, and any scheme but http(s).
pub(super) fn next_hop(
    current: &Url,
    status: u16,
    location: &str,
    offset: u64,
) -> Result<(Url, bool), AttemptError> {
    let here = current.as_str();
    let next = current.join(location).map_err(|e| {
        AttemptError::fatal(
            here,
            offset,
            format!("HTTP {status} redirect to {location:?}: {e}"),
        )
    })?;
    match (current.scheme(), next.scheme()) {
        ("https", "http") => {
            return Err(AttemptError::fatal(
                here,
                offset,
                format!("refused a redirect from https to {next}"),
            ))
        }
        (_, "http" | "https") => {}
        (_, other) => {
            return Err(AttemptError::fatal(
                here,
                offset,
                format!("refused a redirect to a {other}: URL"),
            ))
        }
    }
    let same = same_origin(&next, current);
    Ok((next, same))
}

/// Whether `a` and `b` have the same scheme, host and port: the
/// configured `Authorization` goes to both, and a connection opened for
/// one may carry a request for the other.
pub(super) fn same_origin(a: &Url, b: &Url) -> bool {
    a.scheme() == b.scheme()
        && a.host_str() == b.host_str()
        && a.port_or_known_default() == b.port_or_known_default()
}

/// How one reply's body stopped.
#[derive(Debug, Clone, Copy)]
pub(super) struct BodyEnd {
    /// The download reached the end of the span it asks for.
    pub(super) reached: bool,
    /// The body ended as framed (a body framed by the connection's end
    /// ends there).
    pub(super) ended: bool,
    /// The body was chunked.
    pub(super) chunked: bool,
    /// The image's size, if known.
    pub(super) total: Option<u64>,
    /// The byte reached.
    pub(super) offset: u64,
    /// The byte this attempt asked for.
    pub(super) asked: u64,
    /// Bytes before `asked` of a whole reply still to drop.
    pub(super) skip_left: u64,
}

/// Whether an attempt whose body stopped as `end` says ended the download
/// well (`Ok`), is to be resumed (`Retry`) or failed (`Fatal`). A body that
/// ends with the connection cannot tell a cut from the end: a known total
/// (from a 206's Content-Range) still can; without one the image ends
/// there, and a truncated image is caught by its checksum (the write fails
/// closed), not resumed.
pub(super) fn body_end(url: &str, end: BodyEnd) -> Result<(), AttemptError> {
    let at = end.offset;
    match end.total {
        _ if end.reached => Ok(()),
        _ if !end.ended && end.chunked => Err(AttemptError::Retry(format!(
            "connection closed at byte {at} before the last chunk"
        ))),
        Some(t) if !end.ended || at < t => Err(AttemptError::Retry(format!(
            "connection closed at byte {at} of {t}"
        ))),
        None if !end.ended => Err(AttemptError::Retry(format!(
            "connection closed at byte {at}"
        ))),
        Some(t) if at > t => Err(AttemptError::fatal(
            url,
            at,
            format!("server sent more than the {t} bytes it announced"),
        )),
        _ if end.skip_left > 0 => Err(AttemptError::Retry(format!(
            "the full reply ended before byte {}",
            end.asked
        ))),
        _ => Ok(()),
    }
}

#[cfg(test)]
#[path = "http_tests.rs"]
mod tests;
