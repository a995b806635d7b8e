//! The image HTTP client: one HTTP/1.1 GET per attempt on a blocking
//! socket, the body read straight into the pipeline's aligned pool buffers
//! (no copy through an HTTP library's own read buffer, no task wake-up per
//! read: on a CPU that hashes at 1.5 GB/s that extra work is what the
//! other core lacks, see agent/docs/image-writing.md, "Benchmark").
//!
//! It takes every image URL: http and https (TLS 1.2 and 1.3 through
//! rustls's unbuffered client, `tls_conn.rs`, with the configuration of
//! `agent_base::tls::client_config_with`: CA file, pinning, `ipa-insecure`,
//! client certificate), IPv6 literal hosts, HTTP proxies (`route.rs`:
//! absolute-form requests for http, a `CONNECT` tunnel then TLS for
//! https), basic auth from user info in the URL, redirects, and bodies
//! framed by `Content-Length`, by chunked transfer coding (`chunked.rs`,
//! decoded in place in the pool buffers) or by the end of the connection.
//!
//! Redirects (301, 302, 303, 307, 308) are followed up to
//! [`MAX_REDIRECTS`] hops per attempt, `Location` resolved against the
//! current URL; a redirect from https to http is refused, and the
//! configured `Authorization` is not sent on once a hop changes scheme,
//! host or port (as reqwest did). The URL reached is kept in [`HttpState`]:
//! a resumed attempt asks it directly.
//!
//! Status handling, resumption and error texts are `super::accept_reply`'s
//! and the retry loop's (`super::fetch_http`).

use std::io::{ErrorKind, Read, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};

use reqwest::header::HeaderValue;
use reqwest::{StatusCode, Url};

use super::chunked::Decoder;
use super::route::{self, Proxy};
use super::wire::{open, parse_head, read_head, Conn};
use super::{accept_reply, AttemptError, Emitter, FetchEnd, HttpOptions, HttpState, ReplyHead};
use crate::image::ImageError;

/// Most redirects followed in one attempt (reqwest's default too).
pub(super) const MAX_REDIRECTS: u32 = 10;

/// Where a download's requests go after its redirects.
#[derive(Debug, Clone)]
pub(super) struct Redirected {
    /// The URL reached.
    pub(super) url: Url,
    /// Whether the configured `Authorization` still applies to it.
    pub(super) keep_auth: bool,
}

/// The whole download took longer than `opts.total_timeout`.
fn total_timeout(url: &str, opts: &HttpOptions, offset: u64) -> AttemptError {
    AttemptError::Fatal(FetchEnd::Failed(ImageError::TotalTimeout {
        url: url.to_string(),
        secs: opts.total_timeout.map_or(0, |t| t.as_secs()),
        offset,
    }))
}

/// How the body of a reply ends.
enum Framing {
    /// After this many bytes.
    Length(u64),
    /// After the last chunk.
    Chunked(Decoder),
    /// When the server closes the connection.
    Eof,
}

/// One GET of `url` (or of where earlier redirects led) from byte
/// `out.offset`, the body read into `out`; `tls` is the client
/// configuration for `https://` URLs.
pub(super) fn attempt(
    url: &str,
    opts: &HttpOptions,
    tls: &Arc<rustls::ClientConfig>,
    state: &mut HttpState,
    out: &mut Emitter<'_>,
    deadline: Option<Instant>,
) -> Result<(), AttemptError> {
    let stall = opts.stall_timeout;
    let timeout = |left: Option<Instant>| {
        match left {
            Some(d) => stall.min(d.saturating_duration_since(Instant::now())),
            None => stall,
        }
        .max(Duration::from_millis(1))
    };
    // The same rule as reqwest's: a header value with CR, LF or other
    // control bytes would inject headers into the request.
    if let Some(auth) = &opts.authorization {
        if HeaderValue::from_str(auth).is_err() {
            return Err(AttemptError::Fatal(FetchEnd::Failed(
                ImageError::InvalidParams("the Authorization value is not a valid header".into()),
            )));
        }
    }
    let Redirected {
        url: mut current,
        mut keep_auth,
    } = match state.redirected.clone() {
        Some(r) => r,
        None => Redirected {
            url: Url::parse(url).map_err(|e| {
                AttemptError::fatal(url, out.offset, format!("the URL is not valid: {e}"))
            })?,
            keep_auth: true,
        },
    };
    let mut hops = 0;
    let (mut conn, reply, leftover) = loop {
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Err(total_timeout(url, opts, out.offset));
        }
        let mut conn = open(&current, opts, tls, timeout(deadline), out.offset)?;
        let auth = keep_auth
            .then(|| opts.authorization.clone())
            .flatten()
            .or_else(|| route::userinfo_authorization(&current));
        let proxy = route::proxy_for(&current, opts).map_err(|e| AttemptError::Fatal(e.into()))?;
        let absolute = current.scheme() == "http" && proxy.is_some();
        let request = request(
            &current,
            absolute,
            auth.as_deref(),
            proxy.as_ref(),
            state,
            out,
        );
        if let Err(e) = conn
            .write_all(request.as_bytes())
            .and_then(|()| conn.flush())
        {
            return Err(AttemptError::Retry(format!("sending the request: {e}")));
        }
        let (head, leftover) =
            read_head(&mut conn, stall).map_err(|e| AttemptError::Retry(e.to_string()))?;
        let reply = parse_head(&head).map_err(|e| AttemptError::Retry(e.to_string()))?;
        let location = match (reply.status, &reply.location) {
            (301 | 302 | 303 | 307 | 308, Some(l)) => l,
            _ => break (conn, reply, leftover),
        };
        let here = current.as_str().to_string();
        hops += 1;
        if hops > MAX_REDIRECTS {
            return Err(AttemptError::fatal(
                &here,
                out.offset,
                format!("more than {MAX_REDIRECTS} redirects"),
            ));
        }
        let next = current.join(location).map_err(|e| {
            AttemptError::fatal(
                &here,
                out.offset,
                format!("HTTP {} redirect to {location:?}: {e}", reply.status),
            )
        })?;
        match (current.scheme(), next.scheme()) {
            ("https", "http") => {
                return Err(AttemptError::fatal(
                    &here,
                    out.offset,
                    format!("refused a redirect from https to {next}"),
                ))
            }
            (_, "http" | "https") => {}
            (_, other) => {
                return Err(AttemptError::fatal(
                    &here,
                    out.offset,
                    format!("refused a redirect to a {other}: URL"),
                ))
            }
        }
        if next.scheme() != current.scheme()
            || next.host_str() != current.host_str()
            || next.port_or_known_default() != current.port_or_known_default()
        {
            keep_auth = false;
        }
        tracing::info!(from = %here, to = %next, status = reply.status, "image download redirected");
        current = next;
        state.redirected = Some(Redirected {
            url: current.clone(),
            keep_auth,
        });
    };
    let url = current.as_str();

    let Ok(status) = StatusCode::from_u16(reply.status) else {
        return Err(AttemptError::Retry(format!(
            "HTTP status {} not understood",
            reply.status
        )));
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
    let skip = accept_reply(url, head, state, out)?;
    let framing = if reply.chunked {
        Framing::Chunked(Decoder::default())
    } else {
        match reply.content_length {
            Some(n) => Framing::Length(n),
            None => Framing::Eof,
        }
    };
    let body = Body {
        url,
        opts,
        deadline,
        framing,
        skip,
        timeout: &timeout,
    };
    let chunked = reply.chunked;
    let (ended, skip) = body.read(&mut conn, leftover, out)?;

    // A body that ends with the connection cannot tell a cut from the
    // end: a known total (from a 206's Content-Range) still can; without
    // one the image ends here, and a truncated image is caught by its
    // checksum (the write fails closed), not resumed.
    let total = state.total;
    match total {
        _ if out.reached() => Ok(()),
        _ if !ended && chunked => Err(AttemptError::Retry(format!(
            "connection closed at byte {} before the last chunk",
            out.offset
        ))),
        Some(t) if !ended || out.offset < t => Err(AttemptError::Retry(format!(
            "connection closed at byte {} of {t}",
            out.offset
        ))),
        None if !ended => Err(AttemptError::Retry(format!(
            "connection closed at byte {}",
            out.offset
        ))),
        Some(t) if out.offset > t => Err(AttemptError::fatal(
            url,
            out.offset,
            format!("server sent more than the {t} bytes it announced"),
        )),
        _ if skip > 0 => Err(AttemptError::Retry(format!(
            "the full reply ended before byte {offset}"
        ))),
        _ => Ok(()),
    }
}

/// The request head: a GET of path and query (the absolute URL, without
/// user info, through a proxy for http), with the credentials and the
/// resumption headers.
fn request(
    url: &Url,
    absolute: bool,
    authorization: Option<&str>,
    proxy: Option<&Proxy>,
    state: &HttpState,
    out: &Emitter<'_>,
) -> String {
    let authority = route::authority(url);
    let mut target = match absolute {
        true => format!("{}://{authority}{}", url.scheme(), url.path()),
        false => url.path().to_string(),
    };
    if let Some(q) = url.query() {
        target.push('?');
        target.push_str(q);
    }
    let mut r = format!(
        "GET {target} HTTP/1.1\r\nHost: {authority}\r\nAccept: */*\r\nUser-Agent: {}\r\nConnection: close\r\n",
        concat!("ironic-deploy-agent/", env!("CARGO_PKG_VERSION"))
    );
    if let Some(auth) = authorization {
        r.push_str(&format!("Authorization: {auth}\r\n"));
    }
    if let Some(auth) = proxy
        .filter(|_| absolute)
        .and_then(|p| p.authorization.as_ref())
    {
        r.push_str(&format!("Proxy-Authorization: {auth}\r\n"));
    }
    if let Some(range) = super::range_header(out.offset, out.limit) {
        r.push_str(&format!("Range: {range}\r\n"));
        if let Some(etag) = state.etag.as_ref().and_then(|e| e.to_str().ok()) {
            r.push_str(&format!("If-Range: {etag}\r\n"));
        }
    }
    r.push_str("\r\n");
    r
}

/// Reading one reply's body.
struct Body<'a, T: Fn(Option<Instant>) -> Duration> {
    url: &'a str,
    opts: &'a HttpOptions,
    deadline: Option<Instant>,
    framing: Framing,
    /// Leading bytes to drop (a 200 to a Range request).
    skip: u64,
    timeout: &'a T,
}

impl<T: Fn(Option<Instant>) -> Duration> Body<'_, T> {
    /// Removes the framing from `data` (bytes as received) in place;
    /// returns how many body bytes are left at its start.
    fn unframe(&mut self, data: &mut [u8]) -> Result<usize, AttemptError> {
        match &mut self.framing {
            Framing::Length(left) => {
                let n = usize::try_from(*left).unwrap_or(usize::MAX).min(data.len());
                *left -= n as u64;
                Ok(n)
            }
            Framing::Chunked(d) => d
                .decode_in_place(data)
                .map_err(|e| AttemptError::Retry(e.to_string())),
            Framing::Eof => Ok(data.len()),
        }
    }

    /// Bytes that came in a scratch buffer: framing removed, `skip`
    /// dropped, the rest pushed to `out`.
    fn take(&mut self, data: &mut [u8], out: &mut Emitter<'_>) -> Result<(), AttemptError> {
        let n = self.unframe(data)?;
        let body = data.get(..n).unwrap_or_default();
        let dropped = usize::try_from(self.skip)
            .unwrap_or(usize::MAX)
            .min(body.len());
        self.skip -= dropped as u64;
        match body.get(dropped..) {
            Some(rest) if !rest.is_empty() => out.push(rest).map_err(AttemptError::Fatal),
            _ => Ok(()),
        }
    }

    fn ended(&self) -> bool {
        match &self.framing {
            Framing::Length(left) => *left == 0,
            Framing::Chunked(d) => d.done(),
            Framing::Eof => false,
        }
    }

    /// Reads the body: the bytes that came with the head, then straight
    /// from the connection into `out`'s buffers. Returns whether the body
    /// ended as framed (a body framed by the connection's end ends there)
    /// and how many bytes to skip were left.
    fn read(
        mut self,
        conn: &mut Conn,
        mut leftover: Vec<u8>,
        out: &mut Emitter<'_>,
    ) -> Result<(bool, u64), AttemptError> {
        self.take(&mut leftover, out)?;
        let started = Instant::now();
        let mut scratch = Vec::new();
        while !self.ended() && !out.reached() {
            if self.deadline.is_some() {
                conn.socket()
                    .set_read_timeout(Some((self.timeout)(self.deadline)))
                    .map_err(|e| AttemptError::Retry(format!("socket: {e}")))?;
            }
            let read = if self.skip > 0 {
                let cap = match self.framing {
                    Framing::Length(left) => self.skip.min(left),
                    _ => self.skip,
                }
                .clamp(1, 1 << 20);
                scratch.resize(cap as usize, 0);
                conn.read(&mut scratch).map(|n| (n, false))
            } else {
                let spare = out.spare();
                let cap = match self.framing {
                    Framing::Length(left) => usize::try_from(left).unwrap_or(usize::MAX),
                    _ => usize::MAX,
                }
                .min(spare.len());
                conn.read(&mut spare[..cap]).map(|n| (n, true))
            };
            match read {
                Ok((0, _)) => return Ok((matches!(self.framing, Framing::Eof), self.skip)),
                Ok((n, false)) => {
                    let mut data = std::mem::take(&mut scratch);
                    let res = self.take(&mut data[..n], out);
                    scratch = data;
                    res?;
                }
                Ok((n, true)) => {
                    let k = self.unframe(&mut out.spare()[..n])?;
                    out.commit(k).map_err(AttemptError::Fatal)?;
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    if self.deadline.is_some_and(|d| Instant::now() >= d) {
                        return Err(total_timeout(self.url, self.opts, out.offset));
                    }
                    let stall = self.opts.stall_timeout;
                    return Err(AttemptError::Retry(format!(
                        "stalled: no data for {} s at byte {} (after {:.0} s)",
                        stall.as_secs_f64(),
                        out.offset,
                        started.elapsed().as_secs_f64()
                    )));
                }
                Err(e) => return Err(AttemptError::Retry(e.to_string())),
            }
        }
        Ok((self.ended(), self.skip))
    }
}

#[cfg(test)]
#[path = "direct_tests.rs"]
mod tests;
