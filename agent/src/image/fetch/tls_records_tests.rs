//! The direct path's TLS against a rustls server on loopback: the record
//! layer taken over after the request on TLS 1.3 (tickets skipped, the end
//! at close_notify), rustls kept on TLS 1.2, and what must fail: a
//! KeyUpdate, a forged record; a cut record reads as a plain close.

use super::*;
use std::net::TcpListener;

use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

type Server = StreamOwned<rustls::ServerConnection, TcpStream>;

struct Bed {
    addr: std::net::SocketAddr,
    client: Arc<rustls::ClientConfig>,
    server: std::thread::JoinHandle<()>,
    _dir: tempfile::TempDir,
}

/// A server for one connection speaking `versions`: it reads the request
/// head, then `scenario` answers.
fn bed(
    versions: &[&'static rustls::SupportedProtocolVersion],
    scenario: impl FnOnce(&mut Server) + Send + 'static,
) -> Bed {
    let ck = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string()]).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, ck.cert.pem()).unwrap();
    let server_config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_protocol_versions(versions)
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(
        vec![CertificateDer::from(ck.cert.der().to_vec())],
        PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(ck.signing_key.serialize_der())),
    )
    .unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let server = std::thread::spawn(move || {
        let (sock, _) = listener.accept().unwrap();
        let conn = rustls::ServerConnection::new(Arc::new(server_config)).unwrap();
        let mut s = StreamOwned::new(conn, sock);
        let mut head = Vec::new();
        let mut b = [0u8; 1024];
        while !head.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = s.read(&mut b).unwrap();
            assert!(n > 0, "the client closed before its request");
            head.extend_from_slice(&b[..n]);
        }
        scenario(&mut s);
    });
    let client = direct_config(&crate::tls::client_config(false, Some(&ca)).unwrap());
    Bed {
        addr,
        client,
        server,
        _dir: dir,
    }
}

/// Connects, sends a request and reads until the end or an error:
/// (bytes read, the error, whether the records were taken over).
fn fetch(bed: Bed) -> (Vec<u8>, Option<std::io::Error>, bool) {
    let sock = TcpStream::connect(bed.addr).unwrap();
    sock.set_read_timeout(Some(std::time::Duration::from_secs(20)))
        .unwrap();
    let mut c = connect(sock, "127.0.0.1", &bed.client).unwrap();
    c.write_all(b"GET /disk.img HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    c.flush().unwrap();
    let mut got = Vec::new();
    let mut buf = vec![0u8; 100_000];
    let err = loop {
        match c.read(&mut buf) {
            Ok(0) => break None,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) => break Some(e),
        }
    };
    let taken_over = matches!(c.state, State::Records(_));
    drop(c);
    bed.server.join().unwrap();
    (got, err, taken_over)
}

fn body(len: usize) -> Vec<u8> {
    let mut rng = fastrand::Rng::with_seed(7);
    (0..len).map(|_| rng.u8(..)).collect()
}

fn send_then_close(s: &mut Server, data: &[u8]) {
    s.write_all(data).unwrap();
    s.conn.send_close_notify();
    s.flush().unwrap();
}

#[test]
fn tls13_bodies_are_read_by_the_record_layer_here() {
    let data = body(3 << 20);
    let sent = data.clone();
    let (got, err, taken_over) = fetch(bed(&[&rustls::version::TLS13], move |s| {
        send_then_close(s, &sent)
    }));
    assert!(err.is_none(), "{err:?}");
    assert!(taken_over);
    assert!(got == data, "{} bytes of {} read", got.len(), data.len());
}

#[test]
fn tls12_stays_on_rustls() {
    let data = body(1 << 20);
    let sent = data.clone();
    let (got, err, taken_over) = fetch(bed(&[&rustls::version::TLS12], move |s| {
        send_then_close(s, &sent)
    }));
    assert!(err.is_none(), "{err:?}");
    assert!(!taken_over);
    assert!(got == data);
}

#[test]
fn a_key_update_ends_the_connection_after_the_data_before_it() {
    let data = body(1 << 20);
    let sent = data.clone();
    let (got, err, _) = fetch(bed(&[&rustls::version::TLS13], move |s| {
        s.write_all(&sent).unwrap();
        s.flush().unwrap();
        s.conn.refresh_traffic_keys().unwrap();
        send_then_close(s, b"after the key update");
    }));
    assert!(got == data, "{} bytes read", got.len());
    let err = err.expect("the key update is an error").to_string();
    assert!(err.contains("KeyUpdate"), "{err}");
}

#[test]
fn a_forged_record_is_refused() {
    let data = body(100_000);
    let sent = data.clone();
    let (got, err, _) = fetch(bed(&[&rustls::version::TLS13], move |s| {
        s.write_all(&sent).unwrap();
        s.flush().unwrap();
        // Application data that did not come from the key holder.
        let mut forged = vec![23u8, 3, 3, 0x01, 0x00];
        forged.extend(std::iter::repeat_n(0x5a, 0x100));
        s.sock.write_all(&forged).unwrap();
        s.sock.flush().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(200));
    }));
    assert!(got == data, "{} bytes read", got.len());
    let err = err.expect("a forged record is an error");
    assert_eq!(err.kind(), ErrorKind::InvalidData);
    assert!(err.to_string().contains("bad_record_mac"), "{err}");
}

#[test]
fn a_record_cut_by_the_close_reads_as_a_plain_close() {
    let data = body(200_000);
    let sent = data.clone();
    let (got, err, _) = fetch(bed(&[&rustls::version::TLS13], move |s| {
        s.write_all(&sent).unwrap();
        s.flush().unwrap();
        s.sock.write_all(&[23, 3, 3, 0x40, 0x11, 1, 2, 3]).unwrap();
        s.sock.shutdown(std::net::Shutdown::Both).unwrap();
    }));
    assert!(err.is_none(), "{err:?}");
    assert!(got == data, "{} bytes read", got.len());
}
