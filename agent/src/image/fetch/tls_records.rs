//! TLS for the direct image path (`direct.rs`): rustls makes the handshake
//! and sends the request; then, on TLS 1.3, the response's records are
//! decrypted here, in place in the socket's read buffer, and the plaintext
//! is copied once into the caller's buffer (the pipeline's pool buffer).
//!
//! Through rustls's own reader every byte is copied three times after the
//! kernel's copy (socket buffer → rustls's record buffer, decrypted record →
//! a plaintext `Vec`, that → the caller); on the 2-core bench machine those
//! copies cost more than the AES-GCM itself. Here it is one.
//!
//! rustls is fed through [`Framer`], which never hands it a byte past the
//! end of the current record, so when the handshake is done rustls holds no
//! partial record and its secrets can be taken over (`enable_secret_extraction`,
//! set on the direct path's copy of the client configuration only) with the
//! receive sequence number. Only reading continues after that:
//! application data, `close_notify` (the end), other alerts (an error),
//! NewSessionTicket (ignored). A KeyUpdate from the server ends the attempt
//! with an error, so the download resumes on a new connection with a Range
//! request. TLS 1.2, or anything not expected here, stays on rustls.

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::ops::Range;
use std::sync::Arc;

use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey};
use rustls::{ClientConnection, ConnectionTrafficSecrets, ProtocolVersion, StreamOwned};

/// The socket read buffer (whole records are decrypted in it).
const READ_BUFFER: usize = 256 << 10;
/// A TLS record header: type, legacy version, length.
const HEADER: usize = 5;
/// Largest TLS 1.3 ciphertext (RFC 8446 §5.2: 2^14 + 256).
const MAX_CIPHERTEXT: usize = (1 << 14) + 256;
/// AEAD tag.
const TAG: usize = 16;
/// Largest post-handshake handshake message kept while it arrives.
const HANDSHAKE_LIMIT: usize = 64 << 10;

/// The socket behind a large read buffer that hands out bytes up to the end
/// of the current TLS record at most.
struct Framer {
    sock: TcpStream,
    buf: Vec<u8>,
    start: usize,
    end: usize,
    /// Bytes of the current record not yet handed to rustls (0: the next
    /// byte starts a record header).
    record_left: usize,
}

impl Framer {
    fn new(sock: TcpStream) -> Self {
        Self {
            sock,
            buf: vec![0u8; READ_BUFFER],
            start: 0,
            end: 0,
            record_left: 0,
        }
    }

    fn buffered(&self) -> &[u8] {
        &self.buf[self.start..self.end]
    }

    /// The length of the record starting at `start`, when its header is here.
    fn next_len(&self) -> Option<usize> {
        let b = self.buffered();
        (b.len() >= HEADER).then(|| usize::from(u16::from_be_bytes([b[3], b[4]])))
    }

    /// Whether a whole record is buffered.
    fn whole_record(&self) -> bool {
        self.next_len()
            .is_some_and(|len| self.buffered().len() >= HEADER + len)
    }

    /// Reads until `need` bytes are buffered; false at the end of the stream
    /// before that. Moves the buffered bytes to the front when needed.
    fn fill(&mut self, need: usize) -> std::io::Result<bool> {
        while self.end - self.start < need {
            if self.buf.len() - self.start < need {
                self.buf.copy_within(self.start..self.end, 0);
                self.end -= self.start;
                self.start = 0;
            }
            match self.sock.read(&mut self.buf[self.end..]) {
                Ok(0) => return Ok(false),
                Ok(n) => self.end += n,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(true)
    }
}

/// What rustls reads: never past the current record.
impl Read for Framer {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        if self.record_left == 0 {
            // A header cut by the end of the stream goes to rustls as it is.
            if self.fill(HEADER)? {
                self.record_left = HEADER + self.next_len().unwrap_or(0);
            }
        }
        if self.start == self.end && !self.fill(1)? {
            return Ok(0);
        }
        let n = out
            .len()
            .min(self.end - self.start)
            .min(self.record_left.max(1));
        out[..n].copy_from_slice(&self.buf[self.start..self.start + n]);
        self.start += n;
        self.record_left = self.record_left.saturating_sub(n);
        Ok(n)
    }
}

impl Write for Framer {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.sock.write(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.sock.flush()
    }
}

/// A TLS connection of the direct path.
pub struct TlsConn {
    /// The socket's own descriptor, for its options whatever the state.
    sock: TcpStream,
    state: State,
}

impl std::fmt::Debug for TlsConn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = match &self.state {
            State::Rustls(_) => "rustls",
            State::Records(_) => "records",
            State::Failed => "failed",
        };
        f.debug_tuple("TlsConn").field(&state).finish()
    }
}

enum State {
    /// Handshake, request, and TLS 1.2: rustls reads and writes.
    Rustls(Box<StreamOwned<ClientConnection, Framer>>),
    /// TLS 1.3 after the request: records decrypted here.
    Records(Box<Records>),
    /// Taking over the record layer failed; nothing more is read.
    Failed,
}

/// The handshake on `sock` for `host`; `Err` says why this download should
/// go through reqwest instead (which reports certificate errors).
pub fn connect(
    sock: TcpStream,
    host: &str,
    config: &Arc<rustls::ClientConfig>,
) -> Result<TlsConn, String> {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    let name = rustls::pki_types::ServerName::try_from(bare.to_string())
        .map_err(|e| format!("TLS server name {host:?}: {e}"))?;
    let tls =
        ClientConnection::new(Arc::clone(config), name).map_err(|e| format!("TLS client: {e}"))?;
    let options = sock.try_clone().map_err(|e| format!("socket: {e}"))?;
    let mut stream = StreamOwned::new(tls, Framer::new(sock));
    while stream.conn.is_handshaking() {
        stream
            .conn
            .complete_io(&mut stream.sock)
            .map_err(|e| format!("TLS handshake: {e}"))?;
    }
    Ok(TlsConn {
        sock: options,
        state: State::Rustls(Box::new(stream)),
    })
}

/// The direct path's copy of `config`, allowed to hand its keys to [`Records`].
pub fn direct_config(config: &rustls::ClientConfig) -> Arc<rustls::ClientConfig> {
    let mut c = config.clone();
    c.enable_secret_extraction = true;
    Arc::new(c)
}

impl TlsConn {
    /// The TCP connection under it.
    pub fn socket(&self) -> &TcpStream {
        &self.sock
    }

    /// Whether the connection can leave rustls: TLS 1.3, handshake done,
    /// nothing to send, no partial record inside rustls.
    fn can_switch(s: &StreamOwned<ClientConnection, Framer>) -> bool {
        use rustls::CipherSuite as C;
        s.conn.protocol_version() == Some(ProtocolVersion::TLSv1_3)
            && !s.conn.is_handshaking()
            && !s.conn.wants_write()
            && s.sock.record_left == 0
            && s.conn.negotiated_cipher_suite().is_some_and(|c| {
                matches!(
                    c.suite(),
                    C::TLS13_AES_128_GCM_SHA256
                        | C::TLS13_AES_256_GCM_SHA384
                        | C::TLS13_CHACHA20_POLY1305_SHA256
                )
            })
    }

    fn switch(&mut self) -> std::io::Result<()> {
        let State::Rustls(s) = std::mem::replace(&mut self.state, State::Failed) else {
            return Err(std::io::Error::other("TLS: no connection to take over"));
        };
        let (conn, framer) = s.into_parts();
        let secrets = conn.dangerous_extract_secrets().map_err(|e| {
            std::io::Error::other(format!("TLS: taking over the record layer: {e}"))
        })?;
        let (seq, keys) = secrets.rx;
        let (alg, key, iv) = match keys {
            ConnectionTrafficSecrets::Aes128Gcm { key, iv } => (&ring::aead::AES_128_GCM, key, iv),
            ConnectionTrafficSecrets::Aes256Gcm { key, iv } => (&ring::aead::AES_256_GCM, key, iv),
            ConnectionTrafficSecrets::Chacha20Poly1305 { key, iv } => {
                (&ring::aead::CHACHA20_POLY1305, key, iv)
            }
            _ => {
                return Err(std::io::Error::other(
                    "TLS: unexpected cipher after the handshake",
                ))
            }
        };
        let key = UnboundKey::new(alg, key.as_ref())
            .map_err(|_| std::io::Error::other("TLS: traffic key of the wrong size"))?;
        let iv: [u8; 12] = iv
            .as_ref()
            .try_into()
            .map_err(|_| std::io::Error::other("TLS: traffic IV of the wrong size"))?;
        self.state = State::Records(Box::new(Records {
            framer,
            key: LessSafeKey::new(key),
            iv,
            seq,
            plain: 0..0,
            handshake: Vec::new(),
            closed: false,
            failed: None,
        }));
        Ok(())
    }
}

impl Read for TlsConn {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if let State::Rustls(s) = &mut self.state {
            // Plaintext rustls already decrypted comes first.
            match s.conn.reader().read(buf) {
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                // A server that closes without close_notify after the
                // body (or before its end) reads as a plain close: the
                // byte count decides, as on plain HTTP.
                Err(e) if e.kind() == ErrorKind::UnexpectedEof => return Ok(0),
                Err(e) => return Err(e),
            }
            if !Self::can_switch(s) {
                return match s.read(buf) {
                    Err(e) if e.kind() == ErrorKind::UnexpectedEof => Ok(0),
                    r => r,
                };
            }
            self.switch()?;
        }
        match &mut self.state {
            State::Records(r) => r.read(buf),
            _ => Err(std::io::Error::other(
                "TLS: the connection failed before (taking over the record layer)",
            )),
        }
    }
}

impl Write for TlsConn {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match &mut self.state {
            State::Rustls(s) => s.write(buf),
            _ => Err(std::io::Error::other(
                "TLS: nothing is sent after the request",
            )),
        }
    }
    fn flush(&mut self) -> std::io::Result<()> {
        match &mut self.state {
            State::Rustls(s) => s.flush(),
            _ => Ok(()),
        }
    }
}

/// The receiving half of a TLS 1.3 connection after the handshake.
struct Records {
    framer: Framer,
    key: LessSafeKey,
    iv: [u8; 12],
    /// Sequence number of the next record.
    seq: u64,
    /// Decrypted application data not yet read (within `framer.buf`).
    plain: Range<usize>,
    /// A post-handshake message still arriving.
    handshake: Vec<u8>,
    /// close_notify, or the end of the stream.
    closed: bool,
    /// An error met after some data: returned by the next read.
    failed: Option<std::io::Error>,
}

fn invalid(what: String) -> std::io::Error {
    std::io::Error::new(ErrorKind::InvalidData, what)
}

impl Records {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        if let Some(e) = self.failed.take() {
            return Err(e);
        }
        let mut n = 0;
        loop {
            if !self.plain.is_empty() {
                let k = self.plain.len().min(out.len() - n);
                out[n..n + k].copy_from_slice(&self.framer.buf[self.plain.start..][..k]);
                self.plain.start += k;
                n += k;
                if n == out.len() {
                    return Ok(n);
                }
            }
            // Do not wait for the network with data in hand.
            if self.closed || (n > 0 && !self.framer.whole_record()) {
                return Ok(n);
            }
            if let Err(e) = self.next_record() {
                if n == 0 {
                    return Err(e);
                }
                // The data before the error is good: it goes first.
                self.failed = Some(e);
                return Ok(n);
            }
        }
    }

    /// Reads and opens one record; at the end of the stream (a clean
    /// close_notify or not) marks the connection closed.
    fn next_record(&mut self) -> std::io::Result<()> {
        if !self.framer.fill(HEADER)? {
            self.closed = true;
            return Ok(());
        }
        let b = self.framer.buffered();
        let header: [u8; HEADER] = [b[0], b[1], b[2], b[3], b[4]];
        let len = self.framer.next_len().unwrap_or(0);
        if header[0] != 23 || header[1] != 3 {
            return Err(invalid(format!(
                "TLS: unexpected record type {} version {}.{} after the handshake",
                header[0], header[1], header[2]
            )));
        }
        if !(TAG + 1..=MAX_CIPHERTEXT).contains(&len) {
            return Err(invalid(format!("TLS: record of {len} bytes")));
        }
        if !self.framer.fill(HEADER + len)? {
            // Cut inside a record: a plain close; the byte count decides.
            self.closed = true;
            return Ok(());
        }
        let body = self.framer.start + HEADER..self.framer.start + HEADER + len;
        self.framer.start = body.end;
        let mut nonce = self.iv;
        for (n, s) in nonce[4..].iter_mut().zip(self.seq.to_be_bytes()) {
            *n ^= s;
        }
        self.seq = self
            .seq
            .checked_add(1)
            .ok_or_else(|| invalid("TLS: record sequence exhausted".into()))?;
        let opened = self
            .key
            .open_in_place(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(header),
                &mut self.framer.buf[body.clone()],
            )
            .map_err(|_| invalid("TLS: a record failed authentication (bad_record_mac)".into()))?;
        // TLSInnerPlaintext: content, content type, zero padding.
        let Some(last) = opened.iter().rposition(|&b| b != 0) else {
            return Err(invalid("TLS: a record without a content type".into()));
        };
        let content = body.start..body.start + last;
        match opened[last] {
            23 => self.plain = content,
            21 => self.alert(content)?,
            22 => self.post_handshake(content)?,
            t => return Err(invalid(format!("TLS: unexpected content type {t}"))),
        }
        Ok(())
    }

    fn alert(&mut self, content: Range<usize>) -> std::io::Result<()> {
        match &self.framer.buf[content] {
            [_, 0] => {
                self.closed = true;
                Ok(())
            }
            [_, desc] => Err(invalid(format!("TLS: the server sent alert {desc}"))),
            _ => Err(invalid("TLS: a malformed alert".into())),
        }
    }

    /// NewSessionTicket is ignored; a KeyUpdate ends this connection.
    fn post_handshake(&mut self, content: Range<usize>) -> std::io::Result<()> {
        self.handshake.extend_from_slice(&self.framer.buf[content]);
        while self.handshake.len() >= 4 {
            let h = &self.handshake;
            let len = u32::from_be_bytes([0, h[1], h[2], h[3]]) as usize;
            if h.len() < 4 + len {
                break;
            }
            match h[0] {
                4 => {}
                24 => return Err(std::io::Error::other(
                    "TLS: the server updated its keys (KeyUpdate); resuming on a new connection",
                )),
                t => return Err(invalid(format!("TLS: unexpected handshake message {t}"))),
            }
            self.handshake.drain(..4 + len);
        }
        if self.handshake.len() > HANDSHAKE_LIMIT {
            return Err(invalid("TLS: post-handshake message too long".into()));
        }
        Ok(())
    }
}

#[cfg(test)]
#[path = "tls_records_tests.rs"]
mod tests;
