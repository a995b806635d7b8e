//! TLS for the direct image path (`direct.rs`), TLS 1.2 and TLS 1.3 alike,
//! through rustls's unbuffered API (`UnbufferedClientConnection`): rustls
//! makes the handshake, sends the request and opens every record; this
//! module only moves bytes between the socket and rustls's state machine.
//!
//! Design: records are read from the socket into one large buffer owned
//! here ([`READ_BUFFER`]) and rustls decrypts them in place in it, so the
//! ciphertext is not copied into a buffer of rustls's own (its buffered
//! `ClientConnection` does that, then copies the plaintext once more into
//! the caller's buffer). rustls 0.23.46 still hands each record's
//! plaintext over in a `Vec` of its own (`ReadTraffic::next_record`), which
//! is then copied once into the caller's buffer (the pipeline's pool
//! buffer); rustls/rustls#2746, merged upstream after it, drops that
//! intermediate buffer. The checks are all rustls's: record sizes,
//! sequence numbers, alerts, KeyUpdate, TLS 1.2 renegotiation refusal.
//!
//! Errors are sticky: after the first TLS error every read returns it
//! again and nothing more is decrypted, so a forged record ends the
//! attempt (the download resumes on a new connection with a Range request).
//! A server that closes the socket without `close_notify` reads as a plain
//! close: the HTTP byte count decides, as on plain HTTP.

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::sync::Arc;

use rustls::client::{ClientConnectionData, UnbufferedClientConnection};
use rustls::unbuffered::{
    ConnectionState, EncodeError, EncodeTlsData, EncryptError, InsufficientSizeError, ReadTraffic,
    UnbufferedStatus, WriteTraffic,
};

/// The socket read buffer (records are decrypted in place in it).
const READ_BUFFER: usize = 256 << 10;
/// Room kept free at the end of the read buffer before a socket read: a
/// whole record of the largest size (TLS 1.2 allows 2^14 + 2048 bytes of
/// ciphertext, RFC 5246 §6.2.3) plus its header.
const RECORD_ROOM: usize = (1 << 14) + 2048 + 5;

/// A TLS connection of the direct path over `S` (the socket; a scripted
/// peer in the fuzz target `tls_read`).
pub struct TlsConn<S = TcpStream> {
    sock: S,
    conn: UnbufferedClientConnection,
    /// Received bytes not yet processed by rustls: `incoming[start..end]`.
    incoming: Vec<u8>,
    start: usize,
    end: usize,
    /// Records rustls encoded, to be sent.
    outgoing: Vec<u8>,
    /// Plaintext of a record that did not fit the caller's buffer.
    pending: Vec<u8>,
    pending_at: usize,
    /// The peer's close_notify arrived, or the socket ended.
    closed: bool,
    /// The first TLS error, returned by every read after it.
    failed: Option<(ErrorKind, String)>,
    /// The server's certificate was refused (why).
    refused_certificate: Option<String>,
}

impl<S> std::fmt::Debug for TlsConn<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsConn")
            .field("version", &self.conn.protocol_version())
            .field("closed", &self.closed)
            .field("failed", &self.failed)
            .finish()
    }
}

/// What one step of rustls's state machine asks the socket side to do.
enum Step {
    /// Nothing: ask rustls again.
    Again,
    /// Read more from the socket.
    NeedInput,
    /// Send `outgoing`.
    Transmit,
    /// The handshake is over; application data may be sent.
    Writable,
    /// `send` was encrypted into `outgoing`.
    Encrypted,
    /// `n` bytes of plaintext went to the caller's buffer.
    Delivered(usize),
    /// The peer closed (close_notify).
    Closed,
}

/// Why a handshake failed.
#[derive(Debug, thiserror::Error)]
#[error("{reason}")]
pub struct HandshakeError {
    /// What went wrong.
    pub reason: String,
    /// Set when the server's certificate was refused (why): a failure a
    /// retry cannot mend.
    pub refused_certificate: Option<String>,
}

impl HandshakeError {
    fn other(reason: String) -> Self {
        Self {
            reason,
            refused_certificate: None,
        }
    }
}

/// The handshake on `sock` for `host` (a name or an IP address, IPv6 in
/// brackets or not).
pub fn connect<S: Read + Write>(
    sock: S,
    host: &str,
    config: &Arc<rustls::ClientConfig>,
) -> Result<TlsConn<S>, HandshakeError> {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    let name = rustls::pki_types::ServerName::try_from(bare.to_string())
        .map_err(|e| HandshakeError::other(format!("TLS server name {host:?}: {e}")))?;
    let conn = UnbufferedClientConnection::new(Arc::clone(config), name)
        .map_err(|e| HandshakeError::other(format!("TLS client: {e}")))?;
    let mut c = TlsConn {
        sock,
        conn,
        incoming: vec![0u8; READ_BUFFER],
        start: 0,
        end: 0,
        outgoing: Vec::with_capacity(4096),
        pending: Vec::new(),
        pending_at: 0,
        closed: false,
        failed: None,
        refused_certificate: None,
    };
    let fail = |c: &TlsConn<S>, e: String| HandshakeError {
        reason: format!("TLS handshake: {e}"),
        refused_certificate: c.refused_certificate.clone(),
    };
    loop {
        match c.step(&mut [], None) {
            Ok(Step::Writable) => break,
            Ok(Step::Again) => {}
            Ok(Step::Transmit) => c.transmit().map_err(|e| fail(&c, e.to_string()))?,
            Ok(Step::NeedInput) => match c.fill() {
                Ok(true) => {}
                Ok(false) => return Err(fail(&c, "the server closed the connection".into())),
                Err(e) => return Err(fail(&c, e.to_string())),
            },
            // Neither is expected before the handshake ends.
            Ok(Step::Delivered(_) | Step::Closed | Step::Encrypted) => {
                return Err(fail(&c, "data before the handshake ended".into()))
            }
            Err(e) => return Err(fail(&c, e.to_string())),
        }
    }
    tracing::debug!(
        version = ?c.conn.protocol_version(),
        suite = ?c.conn.negotiated_cipher_suite().map(|s| s.suite()),
        "TLS handshake done; records are read in place"
    );
    Ok(c)
}

impl TlsConn<TcpStream> {
    /// The TCP connection under it.
    pub fn socket(&self) -> &TcpStream {
        &self.sock
    }
}

impl<S> TlsConn<S> {
    /// The transport under it (a TLS connection to an https proxy, for a
    /// tunnel inside one).
    pub fn transport(&self) -> &S {
        &self.sock
    }
}

impl<S: Read + Write> TlsConn<S> {
    /// The negotiated TLS version.
    pub fn protocol_version(&self) -> Option<rustls::ProtocolVersion> {
        self.conn.protocol_version()
    }

    /// One call into rustls over the unprocessed bytes; application data
    /// goes into `out` (or `pending` past its end), and `send`, once the
    /// handshake is over, is encrypted into `outgoing`. A TLS error is kept.
    fn step(&mut self, out: &mut [u8], send: Option<&[u8]>) -> std::io::Result<Step> {
        if let Some((kind, why)) = &self.failed {
            return Err(std::io::Error::new(*kind, why.clone()));
        }
        let UnbufferedStatus { mut discard, state } = self
            .conn
            .process_tls_records(&mut self.incoming[self.start..self.end]);
        let step = match state {
            Err(e) => Err(e),
            Ok(ConnectionState::ReadTraffic(r)) => {
                deliver(r, out, &mut self.pending, &mut discard).map(Step::Delivered)
            }
            Ok(ConnectionState::EncodeTlsData(e)) => {
                encode(e, &mut self.outgoing).map(|()| Step::Again)
            }
            Ok(ConnectionState::TransmitTlsData(t)) => {
                // The bytes go out right after this call; rustls only
                // needs to know they will.
                t.done();
                Ok(Step::Transmit)
            }
            Ok(ConnectionState::BlockedHandshake) => Ok(Step::NeedInput),
            Ok(ConnectionState::WriteTraffic(w)) => match send {
                None => Ok(Step::Writable),
                Some(data) => encrypt(w, data, &mut self.outgoing).map(|()| Step::Encrypted),
            },
            Ok(ConnectionState::PeerClosed | ConnectionState::Closed) => Ok(Step::Closed),
            Ok(_) => Err(rustls::Error::General("unexpected TLS state".into())),
        };
        self.start += discard;
        if self.start == self.end {
            (self.start, self.end) = (0, 0);
        }
        step.map_err(|e| self.fail(&e))
    }

    /// Keeps `e` as the connection's error and returns it.
    fn fail(&mut self, e: &rustls::Error) -> std::io::Error {
        let why = match e {
            rustls::Error::DecryptError => {
                format!("TLS: a record failed authentication (bad_record_mac): {e}")
            }
            rustls::Error::AlertReceived(a) => format!("TLS: the server sent alert {a:?}"),
            rustls::Error::InvalidCertificate(_) | rustls::Error::NoCertificatesPresented => {
                self.refused_certificate = Some(e.to_string());
                format!("TLS: {e}")
            }
            _ => format!("TLS: {e}"),
        };
        self.failed = Some((ErrorKind::InvalidData, why.clone()));
        std::io::Error::new(ErrorKind::InvalidData, why)
    }

    /// Sends what rustls encoded.
    fn transmit(&mut self) -> std::io::Result<()> {
        self.sock.write_all(&self.outgoing)?;
        self.outgoing.clear();
        Ok(())
    }

    /// One socket read into the free end of the read buffer (moving the
    /// unprocessed bytes to the front when little room is left); false at
    /// the end of the stream.
    fn fill(&mut self) -> std::io::Result<bool> {
        if self.incoming.len() - self.end < RECORD_ROOM {
            self.incoming.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        loop {
            match self.sock.read(&mut self.incoming[self.end..]) {
                Ok(0) => return Ok(false),
                Ok(n) => {
                    self.end += n;
                    return Ok(true);
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Plaintext kept from an earlier record, into `out`.
    fn take_pending(&mut self, out: &mut [u8]) -> usize {
        let rest = &self.pending[self.pending_at..];
        let k = rest.len().min(out.len());
        out[..k].copy_from_slice(&rest[..k]);
        self.pending_at += k;
        if self.pending_at == self.pending.len() {
            self.pending.clear();
            self.pending_at = 0;
        }
        k
    }
}

impl<S: Read + Write> Read for TlsConn<S> {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        if out.is_empty() {
            return Ok(0);
        }
        let mut n = self.take_pending(out);
        while n < out.len() && self.pending.is_empty() && !self.closed {
            let step = match self.step(&mut out[n..], None) {
                Ok(step) => step,
                // The data before the error is good: it goes first, the
                // error (kept) with the next read.
                Err(_) if n > 0 => break,
                Err(e) => return Err(e),
            };
            match step {
                Step::Delivered(k) => n += k,
                Step::Again | Step::Encrypted => {}
                Step::Transmit => self.transmit()?,
                Step::Closed => self.closed = true,
                // Do not wait for the network with data in hand.
                Step::NeedInput | Step::Writable if n > 0 => break,
                Step::NeedInput | Step::Writable => {
                    if !self.fill()? {
                        self.closed = true;
                    }
                }
            }
        }
        Ok(n)
    }
}

impl<S: Read + Write> Write for TlsConn<S> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        loop {
            // Plaintext that arrives before the request is sent is kept
            // (`pending`) for the next read.
            match self.step(&mut [], Some(buf))? {
                Step::Encrypted => break,
                Step::Again | Step::Delivered(_) => {}
                Step::Writable => return Err(std::io::Error::other("TLS: not ready to send")),
                Step::Transmit => self.transmit()?,
                Step::NeedInput => {
                    if !self.fill()? {
                        return Err(ErrorKind::UnexpectedEof.into());
                    }
                }
                Step::Closed => return Err(ErrorKind::BrokenPipe.into()),
            }
        }
        self.transmit()?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.sock.flush()
    }
}

/// The plaintext of the records received, into `out` as far as it goes,
/// the rest into `pending`; adds the bytes rustls is done with to
/// `discard`. Returns how many bytes went into `out`.
fn deliver(
    mut r: ReadTraffic<'_, '_, ClientConnectionData>,
    out: &mut [u8],
    pending: &mut Vec<u8>,
    discard: &mut usize,
) -> Result<usize, rustls::Error> {
    let mut n = 0;
    while let Some(record) = r.next_record() {
        let record = record?;
        *discard += record.discard;
        let k = record.payload.len().min(out.len() - n);
        out[n..n + k].copy_from_slice(&record.payload[..k]);
        n += k;
        pending.extend_from_slice(&record.payload[k..]);
        if n == out.len() {
            break;
        }
    }
    Ok(n)
}

/// A handshake record rustls has for the peer, appended to `outgoing`.
fn encode(
    mut e: EncodeTlsData<'_, ClientConnectionData>,
    outgoing: &mut Vec<u8>,
) -> Result<(), rustls::Error> {
    let at = outgoing.len();
    let n = match e.encode(&mut []) {
        Err(EncodeError::InsufficientSize(InsufficientSizeError { required_size })) => {
            outgoing.resize(at + required_size, 0);
            e.encode(&mut outgoing[at..])
        }
        r => r,
    };
    match n {
        Ok(n) => {
            outgoing.truncate(at + n);
            Ok(())
        }
        Err(e) => Err(rustls::Error::General(format!("encoding a record: {e}"))),
    }
}

/// `data` encrypted as application data, appended to `outgoing`.
fn encrypt(
    mut w: WriteTraffic<'_, ClientConnectionData>,
    data: &[u8],
    outgoing: &mut Vec<u8>,
) -> Result<(), rustls::Error> {
    let at = outgoing.len();
    let sent = match w.encrypt(data, &mut []) {
        Err(EncryptError::InsufficientSize(InsufficientSizeError { required_size })) => {
            outgoing.resize(at + required_size, 0);
            w.encrypt(data, &mut outgoing[at..])
        }
        r => r,
    };
    match sent {
        Ok(n) => {
            outgoing.truncate(at + n);
            Ok(())
        }
        Err(e) => {
            outgoing.truncate(at);
            Err(rustls::Error::General(format!("encrypting: {e}")))
        }
    }
}

#[cfg(test)]
#[path = "tls_conn_tests.rs"]
pub(super) mod tests;
