//! Images over HTTPS: read by the direct path (rustls's unbuffered client,
//! records opened in place, into the pipeline's buffers) with the CA file
//! trusted, from TLS 1.2-only and TLS 1.3-only servers, resumed over TLS
//! after a dropped connection or a tampered record (nothing after it is
//! used), and a certificate outside the CA file refused at once, not
//! retried. The TLS front here relays each request to the
//! plain test image server, whose faults (dropped connections) apply.

mod image_support;

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use agent_testkit::image_server::Fault;
use image_support::*;

/// How the TLS front behaves.
#[derive(Default)]
struct FrontOpts<'a> {
    /// Ask every client for a certificate signed by this CA (PEM).
    client_ca: Option<&'a str>,
    /// Only this TLS version (both when `None`).
    version: Option<&'static rustls::SupportedProtocolVersion>,
    /// Flip the byte at this offset of the TLS stream sent to the client,
    /// on the first connection only (`true`: on every connection).
    tamper_at: Option<(u64, bool)>,
}

/// A running TLS front.
struct Front {
    base: String,
    pem: String,
    /// The TLS version of each connection, in order.
    versions: Arc<Mutex<Vec<rustls::ProtocolVersion>>>,
    /// Whether each connection's handshake was full or resumed.
    kinds: Arc<Mutex<Vec<rustls::HandshakeKind>>>,
}

/// A loopback TLS front for `backend` with a certificate for 127.0.0.1;
/// returns its base URL and the certificate's PEM.
fn tls_front(backend: &str) -> (String, String) {
    tls_front_with(backend, None)
}

/// [`tls_front`] asking every client for a certificate signed by the CA
/// `client_ca` (PEM) when given.
fn tls_front_with(backend: &str, client_ca: Option<&str>) -> (String, String) {
    let f = front(
        backend,
        FrontOpts {
            client_ca,
            ..Default::default()
        },
    );
    (f.base, f.pem)
}

fn front(backend: &str, opts: FrontOpts<'_>) -> Front {
    let backend: SocketAddr = backend
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .parse()
        .unwrap();
    let cert = agent_base::tls::generate_certificate(
        "127.0.0.1".parse().unwrap(),
        "image-server",
        agent_base::config::TlsCurve::P256,
    )
    .unwrap();
    let mut served_pem = cert.pem.clone();
    let mut config = match opts.client_ca {
        None => agent_base::tls::server_config(&cert, None, None).unwrap(),
        Some(ca) => {
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            let mut roots = rustls::RootCertStore::empty();
            agent_base::tls::add_pem_roots(&mut roots, ca.as_bytes()).unwrap();
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                provider.clone(),
            )
            .build()
            .unwrap();
            // The agent's own certificate maker keeps its key in memory:
            // the same certificate is rebuilt here with rcgen, key in PEM.
            let key = rcgen::KeyPair::generate().unwrap();
            let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
            params.subject_alt_names =
                vec![rcgen::SanType::IpAddress("127.0.0.1".parse().unwrap())];
            let own = params.self_signed(&key).unwrap();
            served_pem = own.pem();
            let files = agent_base::config::TlsFiles {
                cert: write_tmp("server.pem", &served_pem),
                key: write_tmp("server.key", &key.serialize_pem()),
            };
            let (chain, key) = agent_base::tls::load_pair(&files).unwrap();
            let mut c = rustls::ServerConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_client_cert_verifier(verifier)
                .with_single_cert(chain, key)
                .unwrap();
            c.alpn_protocols = vec![b"http/1.1".to_vec()];
            c
        }
    };
    if let Some(version) = opts.version {
        // A certificate of its own (rcgen keeps the key), one version only.
        let only = rcgen::generate_simple_self_signed(vec!["127.0.0.1".into()]).unwrap();
        served_pem = only.cert.pem();
        config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_protocol_versions(&[version])
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![only.cert.der().clone()],
            rustls::pki_types::PrivateKeyDer::Pkcs8(only.signing_key.serialize_der().into()),
        )
        .unwrap();
    }
    let config = Arc::new(config);
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("https://{}", listener.local_addr().unwrap());
    let versions = Arc::new(Mutex::new(Vec::new()));
    let kinds = Arc::new(Mutex::new(Vec::new()));
    let seen = (Arc::clone(&versions), Arc::clone(&kinds));
    let tamper = opts.tamper_at;
    let conns = Arc::new(AtomicUsize::new(0));
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            let config = Arc::clone(&config);
            let seen = (Arc::clone(&seen.0), Arc::clone(&seen.1));
            let first = conns.fetch_add(1, Ordering::Relaxed) == 0;
            let at = tamper.and_then(|(at, every)| (first || every).then_some(at));
            std::thread::spawn(move || serve(conn, config, backend, at, &seen.0, &seen.1));
        }
    });
    Front {
        base,
        pem: served_pem,
        versions,
        kinds,
    }
}

/// The socket under the TLS front: flips the byte at `at` of what it sends.
struct Tamper {
    sock: TcpStream,
    sent: u64,
    at: Option<u64>,
}

impl Read for Tamper {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.sock.read(buf)
    }
}

impl Write for Tamper {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let end = self.sent + buf.len() as u64;
        match self.at {
            Some(at) if (self.sent..end).contains(&at) => {
                let mut copy = buf.to_vec();
                copy[(at - self.sent) as usize] ^= 0x01;
                self.sock.write_all(&copy)?;
            }
            _ => self.sock.write_all(buf)?,
        }
        self.sent = end;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.sock.flush()
    }
}

/// One TLS connection, one request (the agent asks with `Connection:
/// close`): relayed to the backend on a connection of its own, the reply
/// relayed back until the backend closes (after the reply, or early on a
/// dropped-connection fault); then the TLS connection is closed too.
fn serve(
    conn: TcpStream,
    config: Arc<rustls::ServerConfig>,
    backend: SocketAddr,
    tamper_at: Option<u64>,
    versions: &Mutex<Vec<rustls::ProtocolVersion>>,
    kinds: &Mutex<Vec<rustls::HandshakeKind>>,
) {
    let Ok(tls) = rustls::ServerConnection::new(config) else {
        return;
    };
    let Ok(sock) = conn.try_clone() else {
        return;
    };
    let sock = Tamper {
        sock,
        sent: 0,
        at: tamper_at,
    };
    let mut client = rustls::StreamOwned::new(tls, sock);
    let mut buf = vec![0u8; 64 << 10];
    let mut head = Vec::new();
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match client.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    if let Some(v) = client.conn.protocol_version() {
        versions.lock().unwrap().push(v);
    }
    if let Some(k) = client.conn.handshake_kind() {
        kinds.lock().unwrap().push(k);
    }
    let Ok(mut plain) = TcpStream::connect(backend) else {
        return;
    };
    if plain.write_all(&head).is_err() {
        return;
    }
    while let Ok(n) = plain.read(&mut buf) {
        if n == 0 || client.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    client.conn.send_close_notify();
    let _ = client.flush();
    let _ = conn.shutdown(Shutdown::Both);
}

/// Writes `text` to a file of its own that lives as long as the test
/// process (the TLS front's key material).
fn write_tmp(name: &str, text: &str) -> std::path::PathBuf {
    let dir = tempfile::tempdir().unwrap().keep();
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

fn write_pem(dir: &Path, name: &str, pem: &str) -> std::path::PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, pem).unwrap();
    path
}

#[test]
fn https_images_are_read_directly_resumed_and_verified() {
    let b = bed();
    let plain = b.serve(
        "/disk.img",
        &b.raw,
        &[Fault::DropAfter(3 * MIB + 17)],
        Fault::None,
    );
    let (base, pem) = tls_front(plain.trim_end_matches("/disk.img"));
    let mut req = b.request(
        format!("{base}/disk.img"),
        &format!("sha256:{}", sha256_hex(&b.raw)),
    );
    req.http.cafile = Some(write_pem(b.dir.path(), "ca.pem", &pem));
    let target = b.target("t", 24 * MIB);
    let (res, progress) = write(&req, &target);
    let report = res.unwrap();
    assert_eq!(report.downloaded, 24 * MIB);
    assert_eq!(std::fs::read(&target).unwrap(), b.raw);
    assert_eq!(progress.snapshot().resumes, 1);
    // Both requests came from the agent's image client (its User-Agent),
    // the second resuming where the first was cut.
    let seen: Vec<_> = b
        .server
        .seen()
        .into_iter()
        .map(|s| {
            (
                s.range,
                s.user_agent
                    .is_some_and(|u| u.starts_with("ironic-deploy-agent/")),
            )
        })
        .collect();
    assert_eq!(
        seen,
        vec![
            (None, true),
            (Some(format!("bytes={}-", 3 * MIB + 17)), true)
        ]
    );
}

#[test]
fn a_certificate_outside_the_ca_file_is_refused_at_once() {
    let b = bed();
    let plain = b.serve("/disk.img", &b.raw, &[], Fault::None);
    let (base, _) = tls_front(plain.trim_end_matches("/disk.img"));
    // Some other certificate for the same address: not the server's.
    let other = agent_base::tls::generate_certificate(
        "127.0.0.1".parse().unwrap(),
        "other",
        agent_base::config::TlsCurve::P256,
    )
    .unwrap();
    let mut req = b.request(
        format!("{base}/disk.img"),
        &format!("sha256:{}", sha256_hex(&b.raw)),
    );
    req.http.cafile = Some(write_pem(b.dir.path(), "other.pem", &other.pem));
    let target = b.target("t", 24 * MIB);
    let err = write(&req, &target).0.unwrap_err().to_string();
    assert!(
        err.contains("TLS certificate of 127.0.0.1 was refused") && err.contains("not retried"),
        "{err}"
    );
    // No request reached the image server.
    assert!(b.server.seen().is_empty(), "{:?}", b.server.seen());
}

#[test]
fn a_server_that_asks_for_a_client_certificate_gets_the_configured_one() {
    let b = bed();
    let plain = b.serve("/disk.img", &b.raw, &[], Fault::None);
    // The operator's client CA and a certificate it signed.
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca_pem = ca.self_signed(&ca_key).unwrap().pem();
    let issuer = rcgen::Issuer::new(ca, ca_key);
    let key = rcgen::KeyPair::generate().unwrap();
    let client = rcgen::CertificateParams::new(Vec::<String>::new())
        .unwrap()
        .signed_by(&key, &issuer)
        .unwrap();
    let (base, pem) = tls_front_with(plain.trim_end_matches("/disk.img"), Some(&ca_pem));
    let mut req = b.request(
        format!("{base}/disk.img"),
        &format!("sha256:{}", sha256_hex(&b.raw)),
    );
    req.http.cafile = Some(write_pem(b.dir.path(), "ca.pem", &pem));
    // Without a client certificate the server refuses the handshake.
    let target = b.target("t", 24 * MIB);
    assert!(
        write(&req, &target).0.is_err(),
        "a server requiring a client certificate served without one"
    );
    req.http.client_certificate = Some(agent_base::config::TlsFiles {
        cert: write_pem(b.dir.path(), "client.pem", &client.pem()),
        key: write_pem(b.dir.path(), "client.key", &key.serialize_pem()),
    });
    let target = b.target("t2", 24 * MIB);
    let report = write(&req, &target).0.unwrap();
    assert_eq!(report.downloaded, 24 * MIB);
    assert_eq!(std::fs::read(&target).unwrap(), b.raw);
}

/// The raw image through a front with `opts`, checked byte for byte
/// against its sha256; returns the bed and the front.
fn fetch_through(opts: FrontOpts<'_>, retries: u32) -> (Bed, Front, Result<u64, String>, u64) {
    let b = bed();
    let plain = b.serve("/disk.img", &b.raw, &[], Fault::None);
    let f = front(plain.trim_end_matches("/disk.img"), opts);
    let mut req = b.request(
        format!("{}/disk.img", f.base),
        &format!("sha256:{}", sha256_hex(&b.raw)),
    );
    req.http.cafile = Some(write_pem(b.dir.path(), "ca.pem", &f.pem));
    req.http.retries = retries;
    let target = b.target("t", 24 * MIB);
    let (res, progress) = write(&req, &target);
    let res = res.map(|r| r.downloaded).map_err(|e| e.to_string());
    if res.is_ok() {
        assert!(
            std::fs::read(&target).unwrap() == b.raw,
            "not byte-identical"
        );
    } else {
        assert_wiped(&target);
    }
    let resumes = progress.snapshot().resumes;
    (b, f, res, resumes)
}

/// Whether every request the image server saw came from the agent's image
/// client (its User-Agent), with their ranges.
fn direct_requests(b: &Bed) -> Vec<(Option<String>, bool)> {
    b.server
        .seen()
        .into_iter()
        .map(|s| {
            (
                s.range,
                s.user_agent
                    .is_some_and(|u| u.starts_with("ironic-deploy-agent/")),
            )
        })
        .collect()
}

#[test]
fn tls12_and_tls13_servers_are_read_by_the_direct_path() {
    for (version, want) in [
        (&rustls::version::TLS12, rustls::ProtocolVersion::TLSv1_2),
        (&rustls::version::TLS13, rustls::ProtocolVersion::TLSv1_3),
    ] {
        let opts = FrontOpts {
            version: Some(version),
            ..Default::default()
        };
        let (b, f, res, resumes) = fetch_through(opts, 3);
        assert_eq!(res, Ok(24 * MIB), "{want:?}");
        assert_eq!(resumes, 0, "{want:?}");
        assert_eq!(*f.versions.lock().unwrap(), vec![want]);
        assert_eq!(direct_requests(&b), vec![(None, true)], "{want:?}");
    }
}

#[test]
fn a_tampered_record_ends_the_connection_and_the_download_resumes_before_it() {
    // Flipped in the ciphertext 5 MiB into the first connection: the
    // attempt ends at the record holding it, nothing after it is used,
    // and the download resumes over a new connection from a byte before
    // it, to the right hash; the new connection resumes the TLS session.
    let at = 5 * MIB;
    for version in [&rustls::version::TLS12, &rustls::version::TLS13] {
        let opts = FrontOpts {
            version: Some(version),
            tamper_at: Some((at, false)),
            ..Default::default()
        };
        let (b, f, res, resumes) = fetch_through(opts, 3);
        assert_eq!(res, Ok(24 * MIB));
        assert_eq!(resumes, 1);
        assert_eq!(
            *f.kinds.lock().unwrap(),
            [rustls::HandshakeKind::Full, rustls::HandshakeKind::Resumed]
        );
        let seen = direct_requests(&b);
        assert_eq!(seen.len(), 2, "{seen:?}");
        assert_eq!(seen[0], (None, true));
        let from: u64 = seen[1]
            .0
            .as_deref()
            .and_then(|r| r.strip_prefix("bytes="))
            .and_then(|r| r.strip_suffix('-'))
            .and_then(|r| r.parse().ok())
            .unwrap_or_else(|| panic!("{seen:?}"));
        assert!(from > 0 && from < at, "resumed from {from}");
        assert!(seen[1].1);
    }
}

#[test]
fn a_server_whose_records_are_always_tampered_fails_the_download_clearly() {
    let opts = FrontOpts {
        version: Some(&rustls::version::TLS13),
        // Past the handshake and the tickets, in the first records of
        // the reply: no attempt gets a byte of the body.
        tamper_at: Some((8000, true)),
        ..Default::default()
    };
    let (b, _, res, _) = fetch_through(opts, 1);
    let err = res.unwrap_err();
    assert!(
        err.contains(
            "after 2 attempts at byte 0: TLS: a record failed authentication (bad_record_mac)"
        ),
        "{err}"
    );
    assert_eq!(direct_requests(&b).len(), 2);
}
