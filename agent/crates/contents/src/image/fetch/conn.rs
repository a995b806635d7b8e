//! The image download's socket I/O (`direct.rs` drives it): the
//! connection to the server or its proxy (a `CONNECT` tunnel, then TLS,
//! for https; an https proxy is reached over TLS first, so an https image
//! through it is TLS inside TLS) and reading a response head, bounded to
//! [`HEAD_LIMIT`]. What the bytes mean is `http.rs`'s.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::time::Duration;

use reqwest::Url;

use super::http::parse_head;
use super::outcome::AttemptError;
use super::route::Proxy;
use super::tls_conn::{self, TlsConn};

/// Largest response head accepted.
pub(super) const HEAD_LIMIT: usize = 64 << 10;

/// One connection: plain TCP, TLS over it, or TLS inside TLS (an https
/// image through an https proxy's tunnel).
pub(super) enum Conn {
    Plain(TcpStream),
    Tls(Box<TlsConn>),
    TlsInTls(Box<TlsConn<TlsConn>>),
}

impl Conn {
    pub(super) fn socket(&self) -> &TcpStream {
        match self {
            Self::Plain(s) => s,
            Self::Tls(t) => t.socket(),
            Self::TlsInTls(t) => t.transport().socket(),
        }
    }
}

impl Read for Conn {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Self::Plain(s) => s.read(buf),
            Self::Tls(t) => t.read(buf),
            Self::TlsInTls(t) => t.read(buf),
        }
    }
}

impl Write for Conn {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Self::Plain(s) => s.write(buf),
            Self::Tls(t) => t.write(buf),
            Self::TlsInTls(t) => t.write(buf),
        }
    }
    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Self::Plain(s) => s.flush(),
            Self::Tls(t) => t.flush(),
            Self::TlsInTls(t) => t.flush(),
        }
    }
}

/// Connects to the server of `url` (through `proxy`, the one that applies
/// to it, with a tunnel for https) and makes the TLS handshake for https.
pub(super) fn open(
    url: &Url,
    proxy: Option<&Proxy>,
    tls: &Arc<rustls::ClientConfig>,
    timeout: Duration,
    offset: u64,
) -> Result<Conn, AttemptError> {
    let host = url
        .host_str()
        .ok_or_else(|| AttemptError::fatal(url.as_str(), offset, "no host in the URL".into()))?;
    let port = url.port_or_known_default().unwrap_or(80);
    let sock = match proxy {
        Some(p) => connect(&p.host, p.port, timeout)
            .map_err(|e| AttemptError::Retry(format!("proxy {}:{}: {e}", p.host, p.port)))?,
        None => connect(host, port, timeout).map_err(|e| AttemptError::Retry(e.to_string()))?,
    };
    let _ = sock.set_nodelay(true);
    sock.set_read_timeout(Some(timeout))
        .and_then(|()| sock.set_write_timeout(Some(timeout)))
        .map_err(|e| AttemptError::Retry(format!("socket: {e}")))?;
    let target = format!("{host}:{port}");
    match proxy.filter(|p| p.tls) {
        // An https proxy: TLS to it first (its certificate checked as the
        // image server's would be), then the request or the tunnel inside.
        Some(p) => {
            let mut via = handshake(sock, &p.host, tls, url, offset, "the proxy ")?;
            if url.scheme() != "https" {
                return Ok(Conn::Tls(Box::new(via)));
            }
            tunnel(&mut via, p, &target, timeout)?;
            Ok(Conn::TlsInTls(Box::new(handshake(
                via, host, tls, url, offset, "",
            )?)))
        }
        None => {
            if url.scheme() != "https" {
                return Ok(Conn::Plain(sock));
            }
            let mut sock = sock;
            if let Some(p) = proxy {
                tunnel(&mut sock, p, &target, timeout)?;
            }
            Ok(Conn::Tls(Box::new(handshake(
                sock, host, tls, url, offset, "",
            )?)))
        }
    }
}

/// The TLS handshake with `host` (`what`: "the proxy " or "") on `sock`;
/// a refused certificate fails the download at once, saying so.
fn handshake<S: Read + Write>(
    sock: S,
    host: &str,
    tls: &Arc<rustls::ClientConfig>,
    url: &Url,
    offset: u64,
    what: &str,
) -> Result<TlsConn<S>, AttemptError> {
    tls_conn::connect(sock, host, tls).map_err(|e| match e.refused_certificate {
        Some(why) => AttemptError::fatal(
            url.as_str(),
            offset,
            format!(
                "the TLS certificate of {what}{host} was refused ({why}); not retried: check the CA file (cafile) or the {}certificate",
                if what.is_empty() { "server's " } else { "proxy's " }
            ),
        ),
        None => AttemptError::Retry(format!("{what}{host}: {}", e.reason)),
    })
}

/// Opens a `CONNECT` tunnel to `target` (`host:port`) through `proxy`.
fn tunnel(
    sock: &mut (impl Read + Write),
    proxy: &Proxy,
    target: &str,
    timeout: Duration,
) -> Result<(), AttemptError> {
    let mut req = format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n");
    if let Some(auth) = &proxy.authorization {
        req.push_str(&format!("Proxy-Authorization: {auth}\r\n"));
    }
    req.push_str("\r\n");
    let which = format!("proxy {}:{}", proxy.host, proxy.port);
    sock.write_all(req.as_bytes())
        .map_err(|e| AttemptError::Retry(format!("{which}: sending CONNECT: {e}")))?;
    let (head, rest) =
        read_head(sock, timeout).map_err(|e| AttemptError::Retry(format!("{which}: {e}")))?;
    let reply = parse_head(&head).map_err(|e| AttemptError::Retry(format!("{which}: {e}")))?;
    if !(200..300).contains(&reply.status) {
        return Err(AttemptError::Retry(format!(
            "{which} refused the tunnel to {target}: HTTP {}",
            reply.status
        )));
    }
    if !rest.is_empty() {
        return Err(AttemptError::Retry(format!(
            "{which} sent data before the TLS handshake"
        )));
    }
    Ok(())
}

/// Why the connection failed or no response head came (the attempt is
/// retried).
#[derive(Debug, thiserror::Error)]
pub(super) enum ConnError {
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
}

/// Connects to the first address of `host` that answers within `timeout`.
pub(super) fn connect(host: &str, port: u16, timeout: Duration) -> Result<TcpStream, ConnError> {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    let addrs: Vec<SocketAddr> = (bare, port)
        .to_socket_addrs()
        .map_err(|source| ConnError::Resolve {
            host: host.to_string(),
            source,
        })?
        .collect();
    let mut last = ConnError::NoAddress(host.to_string());
    for addr in addrs {
        match TcpStream::connect_timeout(&addr, timeout) {
            Ok(c) => return Ok(c),
            Err(source) => last = ConnError::Connect { addr, source },
        }
    }
    Err(last)
}

/// Reads up to the end of the response head; returns the head and the
/// body bytes that came with it.
pub(super) fn read_head(
    conn: &mut impl Read,
    stall: Duration,
) -> Result<(Vec<u8>, Vec<u8>), ConnError> {
    let mut buf = Vec::with_capacity(4096);
    let mut chunk = [0u8; 4096];
    loop {
        let n = match conn.read(&mut chunk) {
            Ok(0) => return Err(ConnError::Closed),
            Ok(n) => n,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return Err(ConnError::NoResponse(stall))
            }
            Err(e) => return Err(ConnError::Read(e)),
        };
        buf.extend_from_slice(&chunk[..n]);
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let rest = buf.split_off(end + 4);
            return Ok((buf, rest));
        }
        if buf.len() > HEAD_LIMIT {
            return Err(ConnError::HeadTooLong);
        }
    }
}
