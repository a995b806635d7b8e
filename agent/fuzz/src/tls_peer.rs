//! A scripted TLS server for the `tls_read` target: a real rustls server
//! in memory, the transport under the agent's direct-path TLS client
//! (`agent_contents::image::fetch::connect_tls`). The handshake and the request are
//! genuine; after them the fuzz input is a script of what the server does:
//! send application data, close_notify, a KeyUpdate, raw bytes, a flipped
//! byte in its next records, a cut connection, and how many bytes each
//! socket read of the client gets.
//!
//! [`run`] checks what the client read: never a byte the server did not
//! send as application data, in order (a prefix of it); everything when
//! the server only behaved; after an error, every later read fails the
//! same way (sticky); and it ends.

use std::io::{Read, Write};
use std::sync::{Arc, OnceLock};

use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// The server's configurations (TLS 1.2 only, TLS 1.3 only), made once.
fn servers() -> &'static [Arc<rustls::ServerConfig>; 2] {
    static SERVERS: OnceLock<[Arc<rustls::ServerConfig>; 2]> = OnceLock::new();
    SERVERS.get_or_init(|| {
        let ck = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string()])
            .expect("a certificate");
        let make = |v: &'static rustls::SupportedProtocolVersion| {
            let c = rustls::ServerConfig::builder_with_provider(Arc::new(
                rustls::crypto::ring::default_provider(),
            ))
            .with_protocol_versions(&[v])
            .expect("the version")
            .with_no_client_auth()
            .with_single_cert(
                vec![CertificateDer::from(ck.cert.der().to_vec())],
                PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(ck.signing_key.serialize_der())),
            )
            .expect("the certificate");
            Arc::new(c)
        };
        [make(&rustls::version::TLS12), make(&rustls::version::TLS13)]
    })
}

/// The client's configuration: the agent's, with `ipa-insecure` (the
/// certificate check is not what is fuzzed here).
fn client() -> &'static Arc<rustls::ClientConfig> {
    static CLIENT: OnceLock<Arc<rustls::ClientConfig>> = OnceLock::new();
    CLIENT.get_or_init(|| {
        Arc::new(agent_base::tls::client_config(true, None).expect("the client configuration"))
    })
}

/// The scripted server, as the client's socket.
struct Peer<'a> {
    server: rustls::ServerConnection,
    script: &'a [u8],
    /// Bytes on their way to the client.
    wire: Vec<u8>,
    at: usize,
    /// Most bytes one client read gets.
    chunk: usize,
    /// Flip this byte of the next output (an offset into it).
    flip: Option<usize>,
    /// The connection ends after this many more bytes.
    cut: Option<usize>,
    /// Application data sent before close_notify, in order.
    sent: Vec<u8>,
    closed: bool,
    /// Something other than genuine records went to the client.
    disturbed: bool,
    /// The request came: the script runs.
    started: bool,
    counter: u8,
}

impl Peer<'_> {
    fn byte(&mut self) -> Option<u8> {
        let (&b, rest) = self.script.split_first()?;
        self.script = rest;
        Some(b)
    }

    fn u16(&mut self) -> u16 {
        u16::from_be_bytes([self.byte().unwrap_or(0), self.byte().unwrap_or(0)])
    }

    /// The server's pending output onto the wire, with a flip if asked.
    fn drain(&mut self) {
        let start = self.wire.len();
        while self.server.wants_write() {
            if self.server.write_tls(&mut self.wire).is_err() {
                break;
            }
        }
        if let Some(off) = self.flip {
            if let Some(b) = self.wire[start..].get_mut(off) {
                *b ^= 0x80;
                self.flip = None;
                self.disturbed = true;
            }
        }
    }

    /// One step of the script; false at its end.
    fn act(&mut self) -> bool {
        let Some(op) = self.byte() else {
            return false;
        };
        match op % 8 {
            0 | 1 => {
                let len = usize::from(self.u16() % 40_000);
                let data: Vec<u8> = (0..len)
                    .map(|_| {
                        self.counter = self.counter.wrapping_add(1);
                        self.counter
                    })
                    .collect();
                match self.server.writer().write_all(&data) {
                    Ok(()) if !self.closed => self.sent.extend_from_slice(&data),
                    Ok(()) => {}
                    // Some of it may have gone out: not counted.
                    Err(_) => self.disturbed = true,
                }
            }
            2 => {
                self.server.send_close_notify();
                self.closed = true;
            }
            3 => {
                // TLS 1.3 only; on TLS 1.2 an error, and nothing sent.
                let _ = self.server.refresh_traffic_keys();
            }
            4 => {
                let len = usize::from(self.byte().unwrap_or(0));
                let n = len.min(self.script.len());
                self.wire.extend_from_slice(&self.script[..n]);
                self.script = &self.script[n..];
                self.disturbed |= n > 0;
            }
            5 => self.flip = Some(usize::from(self.u16())),
            6 => self.cut = Some(usize::from(self.u16())),
            _ => self.chunk = usize::from(self.u16()).max(1),
        }
        self.drain();
        true
    }
}

impl Read for Peer<'_> {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        loop {
            if self.cut == Some(0) {
                return Ok(0);
            }
            if self.at < self.wire.len() {
                let mut k = out.len().min(self.wire.len() - self.at).min(self.chunk);
                if let Some(c) = &mut self.cut {
                    k = k.min(*c);
                    *c -= k;
                    self.disturbed = true;
                }
                out[..k].copy_from_slice(&self.wire[self.at..self.at + k]);
                self.at += k;
                return Ok(k);
            }
            self.wire.clear();
            self.at = 0;
            self.drain();
            if self.wire.is_empty() {
                if !self.started {
                    // Nothing to say before the request has come: the end.
                    let mut req = [0u8; 4096];
                    self.started = !self.server.is_handshaking()
                        && matches!(self.server.reader().read(&mut req), Ok(n) if n > 0);
                    if !self.started {
                        return Ok(0);
                    }
                }
                if !self.act() {
                    return Ok(0);
                }
            }
        }
    }
}

impl Write for Peer<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let mut rest = buf;
        while !rest.is_empty() {
            match self.server.read_tls(&mut rest) {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
            if self.server.process_new_packets().is_err() {
                break;
            }
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// What one run came to.
#[derive(Debug, Default)]
pub struct Outcome {
    /// Bytes the client read.
    pub read: usize,
    /// Application data the server sent before close_notify.
    pub sent: usize,
    /// The client's error, if any.
    pub error: Option<String>,
}

/// One run: `data` is `[flags][client read size u16][script]`.
pub fn run(data: &[u8]) -> Outcome {
    let [flags, r0, r1, script @ ..] = data else {
        return Outcome::default();
    };
    let config = Arc::clone(&servers()[usize::from(flags & 1)]);
    let mut server = rustls::ServerConnection::new(config).expect("a server connection");
    server.set_buffer_limit(None);
    let mut peer = Peer {
        server,
        script,
        wire: Vec::new(),
        at: 0,
        chunk: usize::MAX,
        flip: None,
        cut: None,
        sent: Vec::new(),
        closed: false,
        disturbed: false,
        started: false,
        counter: 0,
    };
    // Small reads during the handshake as well, when asked.
    if flags & 2 != 0 {
        peer.chunk = usize::from(flags >> 2).max(1);
    }
    let mut conn = agent_contents::image::fetch::connect_tls(&mut peer, "127.0.0.1", client())
        .expect("the handshake with a genuine server");
    conn.write_all(b"GET /disk.img HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .expect("the request");
    let read_size = usize::from(u16::from_be_bytes([*r0, *r1])).max(1);
    let mut buf = vec![0u8; read_size];
    let mut got = Vec::new();
    // Each read but the last returns a byte at least, and the script
    // sends at most 40,000 bytes per 3 of its bytes.
    let most_reads = 1000 + script.len() * 40_000;
    let mut reads = 0usize;
    let failed = loop {
        reads += 1;
        assert!(reads <= most_reads, "the client does not end");
        match conn.read(&mut buf) {
            Ok(0) => break None,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) => break Some(e.to_string()),
        }
    };
    if let Some(first) = &failed {
        // Sticky: the same error again, and no data.
        for _ in 0..2 {
            let again = conn.read(&mut buf).expect_err("a read after an error");
            assert_eq!(&again.to_string(), first);
        }
    }
    drop(conn);
    assert!(
        peer.sent.starts_with(&got),
        "the client read {} bytes that are not the server's application data",
        got.len()
    );
    if !peer.disturbed {
        assert_eq!(
            got.len(),
            peer.sent.len(),
            "a genuine server's data was not read whole"
        );
    }
    Outcome {
        read: got.len(),
        sent: peer.sent.len(),
        error: failed,
    }
}
