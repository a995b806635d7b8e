//! The direct path's TLS against a rustls server on loopback, TLS 1.2 and
//! TLS 1.3: bodies read whole (tickets and a KeyUpdate handled by rustls,
//! the end at close_notify), and what must fail and stay failed: a forged
//! record, an alert; a record cut by the close reads as a plain close.

use super::*;
use std::net::TcpListener;

use rustls::StreamOwned;

type Server = StreamOwned<rustls::ServerConnection, TcpStream>;

const TLS12: &[&rustls::SupportedProtocolVersion] = &[&rustls::version::TLS12];
const TLS13: &[&rustls::SupportedProtocolVersion] = &[&rustls::version::TLS13];

/// A TLS server configuration for 127.0.0.1 speaking `versions`, and
/// its self-signed certificate as a CA file in `dir` (also the direct
/// path's tests' server).
pub(in crate::image::fetch) fn loopback_server(
    dir: &std::path::Path,
    versions: &[&'static rustls::SupportedProtocolVersion],
) -> (Arc<rustls::ServerConfig>, std::path::PathBuf) {
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
    let ck = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string()]).unwrap();
    let ca = dir.join("ca.pem");
    std::fs::write(&ca, ck.cert.pem()).unwrap();
    let cfg = rustls::ServerConfig::builder_with_provider(Arc::new(
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
    (Arc::new(cfg), ca)
}

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
    let dir = tempfile::tempdir().unwrap();
    let (server_config, ca) = loopback_server(dir.path(), versions);
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let server = std::thread::spawn(move || {
        let (sock, _) = listener.accept().unwrap();
        let conn = rustls::ServerConnection::new(server_config).unwrap();
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
    let client = Arc::new(agent_base::tls::client_config(false, Some(&ca)).unwrap());
    Bed {
        addr,
        client,
        server,
        _dir: dir,
    }
}

/// What a fetch came to.
struct Got {
    data: Vec<u8>,
    err: Option<std::io::Error>,
    version: Option<rustls::ProtocolVersion>,
    /// What a read after the error returned.
    again: Option<std::io::Result<usize>>,
}

/// Connects, sends a request and reads until the end or an error (then
/// once more).
fn fetch(bed: Bed) -> Got {
    let sock = TcpStream::connect(bed.addr).unwrap();
    sock.set_read_timeout(Some(std::time::Duration::from_secs(20)))
        .unwrap();
    let mut c = connect(sock, "127.0.0.1", &bed.client).unwrap();
    c.write_all(b"GET /disk.img HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    c.flush().unwrap();
    let mut data = Vec::new();
    let mut buf = vec![0u8; 100_000];
    let err = loop {
        match c.read(&mut buf) {
            Ok(0) => break None,
            Ok(n) => data.extend_from_slice(&buf[..n]),
            Err(e) => break Some(e),
        }
    };
    let again = err.is_some().then(|| c.read(&mut buf));
    let version = c.protocol_version();
    drop(c);
    bed.server.join().unwrap();
    Got {
        data,
        err,
        version,
        again,
    }
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
fn tls13_and_tls12_bodies_are_read_whole() {
    for (versions, want) in [
        (TLS13, rustls::ProtocolVersion::TLSv1_3),
        (TLS12, rustls::ProtocolVersion::TLSv1_2),
    ] {
        let data = body(3 << 20);
        let sent = data.clone();
        let got = fetch(bed(versions, move |s| send_then_close(s, &sent)));
        assert!(got.err.is_none(), "{:?}", got.err);
        assert_eq!(got.version, Some(want));
        assert!(
            got.data == data,
            "{want:?}: {} bytes of {} read",
            got.data.len(),
            data.len()
        );
    }
}

#[test]
fn a_key_update_is_followed() {
    let data = body(1 << 20);
    let sent = data.clone();
    let got = fetch(bed(TLS13, move |s| {
        s.write_all(&sent[..1000]).unwrap();
        s.flush().unwrap();
        s.conn.refresh_traffic_keys().unwrap();
        send_then_close(s, &sent[1000..]);
    }));
    assert!(got.err.is_none(), "{:?}", got.err);
    assert!(got.data == data, "{} bytes read", got.data.len());
}

/// Application data that did not come from the key holder, after `data`.
fn forged_after(versions: &'static [&'static rustls::SupportedProtocolVersion]) {
    let data = body(100_000);
    let sent = data.clone();
    let got = fetch(bed(versions, move |s| {
        s.write_all(&sent).unwrap();
        s.flush().unwrap();
        let mut forged = vec![23u8, 3, 3, 0x01, 0x00];
        forged.extend(std::iter::repeat_n(0x5a, 0x100));
        s.sock.write_all(&forged).unwrap();
        s.sock.flush().unwrap();
        // Genuine data after it must not be read.
        send_then_close(s, b"after the forged record");
        std::thread::sleep(std::time::Duration::from_millis(200));
    }));
    assert!(got.data == data, "{} bytes read", got.data.len());
    let err = got.err.expect("a forged record is an error");
    assert_eq!(err.kind(), ErrorKind::InvalidData);
    assert!(err.to_string().contains("bad_record_mac"), "{err}");
    // Sticky: the next read fails the same way and returns nothing.
    let again = got.again.expect("read again").unwrap_err();
    assert_eq!(again.to_string(), err.to_string());
}

#[test]
fn a_forged_record_is_refused_and_the_error_sticks() {
    forged_after(TLS13);
    forged_after(TLS12);
}

#[test]
fn a_record_cut_by_the_close_reads_as_a_plain_close() {
    let data = body(200_000);
    let sent = data.clone();
    let got = fetch(bed(TLS13, move |s| {
        s.write_all(&sent).unwrap();
        s.flush().unwrap();
        s.sock.write_all(&[23, 3, 3, 0x40, 0x11, 1, 2, 3]).unwrap();
        s.sock.shutdown(std::net::Shutdown::Both).unwrap();
    }));
    assert!(got.err.is_none(), "{:?}", got.err);
    assert!(got.data == data, "{} bytes read", got.data.len());
}

#[test]
fn an_oversized_record_is_refused() {
    // 2^14 + 256 + 1 bytes of ciphertext: above TLS 1.3's limit.
    let got = fetch(bed(TLS13, move |s| {
        s.write_all(b"some data").unwrap();
        s.flush().unwrap();
        let len: u16 = (1 << 14) + 256 + 1;
        let mut big = vec![23u8, 3, 3];
        big.extend(len.to_be_bytes());
        big.extend(std::iter::repeat_n(0u8, usize::from(len)));
        s.sock.write_all(&big).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(200));
    }));
    assert_eq!(got.data, b"some data");
    let err = got.err.expect("an oversized record is an error");
    assert_eq!(err.kind(), ErrorKind::InvalidData);
}
