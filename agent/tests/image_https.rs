//! Images over HTTPS: read by the direct path (rustls's handshake, then the
//! agent's record layer into the pipeline's buffers) with the CA file
//! trusted, resumed over TLS after a dropped connection, and a certificate
//! outside the CA file refused at once with the reqwest path's error. The TLS front here relays each request to the
//! plain test image server, whose faults (dropped connections) apply.

mod image_support;

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::sync::Arc;

use agent::testconductor::image_server::Fault;
use image_support::*;

/// A loopback TLS front for `backend` with a certificate for 127.0.0.1;
/// returns its base URL and the certificate's PEM.
fn tls_front(backend: &str) -> (String, String) {
    tls_front_with(backend, None)
}

/// [`tls_front`] asking every client for a certificate signed by the CA
/// `client_ca` (PEM) when given.
fn tls_front_with(backend: &str, client_ca: Option<&str>) -> (String, String) {
    let backend: SocketAddr = backend
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .parse()
        .unwrap();
    let cert = agent::tls::generate_certificate(
        "127.0.0.1".parse().unwrap(),
        "image-server",
        agent::config::TlsCurve::P256,
    )
    .unwrap();
    let mut served_pem = cert.pem.clone();
    let config = Arc::new(match client_ca {
        None => agent::tls::server_config(&cert, None, None).unwrap(),
        Some(ca) => {
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            let mut roots = rustls::RootCertStore::empty();
            agent::tls::add_pem_roots(&mut roots, ca.as_bytes()).unwrap();
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
            let files = agent::config::TlsFiles {
                cert: write_tmp("server.pem", &served_pem),
                key: write_tmp("server.key", &key.serialize_pem()),
            };
            let (chain, key) = agent::tls::load_pair(&files).unwrap();
            let mut c = rustls::ServerConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_client_cert_verifier(verifier)
                .with_single_cert(chain, key)
                .unwrap();
            c.alpn_protocols = vec![b"http/1.1".to_vec()];
            c
        }
    });
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("https://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            let config = Arc::clone(&config);
            std::thread::spawn(move || serve(conn, config, backend));
        }
    });
    (base, served_pem)
}

/// One TLS connection, one request (the agent asks with `Connection:
/// close`): relayed to the backend on a connection of its own, the reply
/// relayed back until the backend closes (after the reply, or early on a
/// dropped-connection fault); then the TLS connection is closed too.
fn serve(conn: TcpStream, config: Arc<rustls::ServerConfig>, backend: SocketAddr) {
    let Ok(tls) = rustls::ServerConnection::new(config) else {
        return;
    };
    let Ok(sock) = conn.try_clone() else {
        return;
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
    // Both requests came from the direct path (reqwest sends no
    // User-Agent of ours), the second resuming where the first was cut.
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
    let other = agent::tls::generate_certificate(
        "127.0.0.1".parse().unwrap(),
        "other",
        agent::config::TlsCurve::P256,
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
    req.http.client_certificate = Some(agent::config::TlsFiles {
        cert: write_pem(b.dir.path(), "client.pem", &client.pem()),
        key: write_pem(b.dir.path(), "client.key", &key.serialize_pem()),
    });
    let target = b.target("t2", 24 * MIB);
    let report = write(&req, &target).0.unwrap();
    assert_eq!(report.downloaded, 24 * MIB);
    assert_eq!(std::fs::read(&target).unwrap(), b.raw);
}
