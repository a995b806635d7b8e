//! One attempt of an HTTP download (the retry loop is `retry.rs`'s): the
//! GET of the image URL (or of where earlier redirects led) from the byte
//! reached, its redirects followed, its body read on a blocking socket
//! straight into the pipeline's aligned pool buffers (no copy through an
//! HTTP library's own read buffer, no task wake-up per read: on a CPU that
//! hashes at 1.5 GB/s that extra work is what the other core lacks, see
//! agent/docs/image-writing.md, "Benchmark").
//!
//! It takes every image URL: http and https (TLS 1.2 and 1.3 through
//! rustls's unbuffered client, `tls_conn.rs`, with the configuration of
//! `agent_base::tls::client_config_with`: CA file, pinning, `ipa-insecure`,
//! client certificate), IPv6 literal hosts, HTTP proxies (`route.rs`:
//! absolute-form requests for http, a `CONNECT` tunnel then TLS for
//! https; the sockets are `conn.rs`'s), basic auth from user info in the
//! URL, redirects, and bodies framed by `Content-Length`, by chunked
//! transfer coding (`chunked.rs`, decoded in place in the pool buffers) or
//! by the end of the connection.
//!
//! Redirects (301, 302, 303, 307, 308) are followed up to
//! [`MAX_REDIRECTS`] hops per attempt, `Location` resolved against the
//! current URL; a redirect from https to http is refused, and the
//! configured `Authorization` is not sent on once a hop changes scheme,
//! host or port (as reqwest did). The URL reached is kept in [`HttpState`]:
//! a resumed attempt asks it directly. So is, for the segments of a
//! parallel download (`parallel.rs`), a connection whose reply ended at
//! its `Content-Length`: the next request to the same origin goes on it
//! (`Connection: keep-alive`), and on a new one if the server closed it.
//! What a reply means (status, resumption, the end of a body) is
//! `http.rs`'s.

use std::io::{ErrorKind, Read, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};

use reqwest::Url;

use super::chunked::Decoder;
use super::conn::{open, read_head, Conn};
use super::emitter::Emitter;
use super::http::{self, Accepted, BodyEnd, Reply, RequestHead};
use super::options::HttpOptions;
use super::outcome::{AttemptError, FetchEnd};
use super::route;
use super::state::{HttpState, Idle, Redirected};
use crate::image::ImageError;

/// Most redirects followed in one attempt (reqwest's default too).
pub(super) const MAX_REDIRECTS: u32 = 10;

/// An attempt's time limits: the stall timeout per read, and the whole
/// download's deadline.
pub(super) struct Clock<'a> {
    pub(super) opts: &'a HttpOptions,
    pub(super) deadline: Option<Instant>,
}

impl Clock<'_> {
    /// How long the next read or connect may wait.
    fn timeout(&self) -> Duration {
        let stall = self.opts.stall_timeout;
        match self.deadline {
            Some(d) => stall.min(d.saturating_duration_since(Instant::now())),
            None => stall,
        }
        .max(Duration::from_millis(1))
    }

    fn expired(&self) -> bool {
        self.deadline.is_some_and(|d| Instant::now() >= d)
    }

    /// The whole download took longer than `opts.total_timeout`.
    fn total_timeout(&self, url: &str, offset: u64) -> AttemptError {
        AttemptError::Fatal(FetchEnd::Failed(ImageError::TotalTimeout {
            url: url.to_string(),
            secs: self.opts.total_timeout.map_or(0, |t| t.as_secs()),
            offset,
        }))
    }
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

impl Framing {
    fn of(reply: &Reply) -> Self {
        match (reply.chunked, reply.content_length) {
            (true, _) => Self::Chunked(Decoder::default()),
            (false, Some(n)) => Self::Length(n),
            (false, None) => Self::Eof,
        }
    }
}

/// A connection whose response head has been read: the reply, and the
/// body bytes that came with the head.
struct Answered {
    conn: Conn,
    reply: Reply,
    leftover: Vec<u8>,
}

/// One GET of `url` (or of where earlier redirects led) from byte
/// `out.offset`, the body read into `out`; `tls` is the client
/// configuration for `https://` URLs.
pub(super) fn attempt(
    url: &str,
    tls: &Arc<rustls::ClientConfig>,
    state: &mut HttpState,
    out: &mut Emitter<'_>,
    clock: &Clock<'_>,
) -> Result<(), AttemptError> {
    let current = match &state.redirected {
        Some(r) => r.url.clone(),
        None => Url::parse(url).map_err(|e| {
            AttemptError::fatal(url, out.offset, format!("the URL is not valid: {e}"))
        })?,
    };
    let (
        Answered {
            mut conn,
            reply,
            leftover,
        },
        current,
    ) = follow_redirects(current, tls, state, out, clock)?;
    let url = current.as_str();
    let asked = out.offset;
    let accepted = http::accept_reply(url, &reply, asked)?;
    if state.segments && asked > 0 && matches!(accepted, Accepted::Whole { .. }) {
        return Err(AttemptError::fatal(
            url,
            asked,
            format!(
                "the server answered the Range request for byte {asked} with the whole image \
                 (status {}): the image changed on the server, or its ranges are not served",
                reply.status
            ),
        ));
    }
    if let Some(probe) = state.probe.take() {
        let ranges = reply.status == 200 && reply.accept_ranges && !reply.chunked;
        let large = reply.content_length.is_some_and(|n| n >= probe.min_total);
        probe.splittable.store(
            asked == 0 && ranges && large,
            std::sync::atomic::Ordering::Relaxed,
        );
    }
    let skip = state.record(url, accepted, out);
    // Only a body framed by its length, with nothing of the next reply
    // already read, leaves the connection at a reply's boundary.
    let reusable = state.segments
        && !reply.close
        && !reply.chunked
        && reply
            .content_length
            .is_some_and(|n| leftover.len() as u64 <= n);
    let body = Body {
        url,
        clock,
        framing: Framing::of(&reply),
        skip,
    };
    let (ended, skip_left) = body.read(&mut conn, leftover, out)?;
    if reusable && ended && skip_left == 0 {
        state.idle = Some(Idle {
            url: current.clone(),
            conn,
        });
    }
    http::body_end(
        url,
        BodyEnd {
            reached: out.reached(),
            ended,
            chunked: reply.chunked,
            total: state.total,
            offset: out.offset,
            asked,
            skip_left,
        },
    )
}

/// Asks `current` and follows its redirects; returns the connection that
/// answered otherwise, and the URL it answered for (recorded in
/// `state.redirected` once a redirect was followed).
fn follow_redirects(
    mut current: Url,
    tls: &Arc<rustls::ClientConfig>,
    state: &mut HttpState,
    out: &Emitter<'_>,
    clock: &Clock<'_>,
) -> Result<(Answered, Url), AttemptError> {
    let mut keep_auth = state.redirected.as_ref().is_none_or(|r| r.keep_auth);
    let mut hops = 0;
    loop {
        if clock.expired() {
            return Err(clock.total_timeout(current.as_str(), out.offset));
        }
        let answered = ask(&current, keep_auth, tls, state, out, clock)?;
        let location = match (answered.reply.status, &answered.reply.location) {
            (301 | 302 | 303 | 307 | 308, Some(l)) => l,
            _ => return Ok((answered, current)),
        };
        hops += 1;
        if hops > MAX_REDIRECTS {
            return Err(AttemptError::fatal(
                current.as_str(),
                out.offset,
                format!("more than {MAX_REDIRECTS} redirects"),
            ));
        }
        let (next, same_origin) =
            http::next_hop(&current, answered.reply.status, location, out.offset)?;
        keep_auth &= same_origin;
        tracing::info!(from = %current, to = %next, status = answered.reply.status, "image download redirected");
        current = next;
        state.redirected = Some(Redirected {
            url: current.clone(),
            keep_auth,
        });
    }
}

/// One request for `url`, up to the response head: on the connection the
/// last reply left open when it goes to the same origin without a proxy
/// (once more on a new one if that fails: the server may have closed it),
/// else on a new connection.
fn ask(
    url: &Url,
    keep_auth: bool,
    tls: &Arc<rustls::ClientConfig>,
    state: &mut HttpState,
    out: &Emitter<'_>,
    clock: &Clock<'_>,
) -> Result<Answered, AttemptError> {
    let opts = clock.opts;
    let proxy = route::proxy_for(url, opts.proxies()).map_err(|e| AttemptError::Fatal(e.into()))?;
    let idle = state
        .idle
        .take()
        .filter(|i| proxy.is_none() && http::same_origin(&i.url, url));
    if let Some(idle) = idle {
        match ask_on(idle.conn, url, keep_auth, proxy.as_ref(), state, out, clock) {
            Ok(answered) => return Ok(answered),
            Err(AttemptError::Retry(e)) => {
                tracing::debug!(url = %url, "the kept connection failed ({e}); a new one");
            }
            Err(fatal) => return Err(fatal),
        }
    }
    let conn = open(url, proxy.as_ref(), tls, clock.timeout(), out.offset)?;
    ask_on(conn, url, keep_auth, proxy.as_ref(), state, out, clock)
}

/// The request for `url` on `conn`, up to the response head.
fn ask_on(
    mut conn: Conn,
    url: &Url,
    keep_auth: bool,
    proxy: Option<&route::Proxy>,
    state: &HttpState,
    out: &Emitter<'_>,
    clock: &Clock<'_>,
) -> Result<Answered, AttemptError> {
    let opts = clock.opts;
    let authorization = keep_auth
        .then(|| opts.authorization.clone())
        .flatten()
        .or_else(|| route::userinfo_authorization(url));
    let range = http::range_header(out.offset, out.limit);
    let request = http::request(
        url,
        &RequestHead {
            absolute: url.scheme() == "http" && proxy.is_some(),
            authorization: authorization.as_deref(),
            proxy_authorization: proxy.and_then(|p| p.authorization.as_deref()),
            if_range: range.as_ref().and(state.etag.as_deref()),
            range,
            keep_alive: state.segments && proxy.is_none(),
        },
    );
    if let Err(e) = conn
        .write_all(request.as_bytes())
        .and_then(|()| conn.flush())
    {
        return Err(AttemptError::Retry(format!("sending the request: {e}")));
    }
    let (head, leftover) =
        read_head(&mut conn, opts.stall_timeout).map_err(|e| AttemptError::Retry(e.to_string()))?;
    let reply = http::parse_head(&head).map_err(|e| AttemptError::Retry(e.to_string()))?;
    Ok(Answered {
        conn,
        reply,
        leftover,
    })
}

/// Reading one reply's body.
struct Body<'a> {
    url: &'a str,
    clock: &'a Clock<'a>,
    framing: Framing,
    /// Leading bytes to drop (a 200 to a Range request).
    skip: u64,
}

impl Body<'_> {
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
            if self.clock.deadline.is_some() {
                conn.socket()
                    .set_read_timeout(Some(self.clock.timeout()))
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
                    if self.clock.expired() {
                        return Err(self.clock.total_timeout(self.url, out.offset));
                    }
                    let stall = self.clock.opts.stall_timeout;
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
pub(super) mod tests;
