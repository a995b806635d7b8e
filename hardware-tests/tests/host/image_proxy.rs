//! The image download through a real HTTP proxy, tinyproxy (Debian's,
//! installed by ci/install-deps), on loopback with basic auth: an http
//! image as an absolute-form request (and resumed through the proxy after
//! a dropped connection), an https image through a `CONNECT` tunnel, wrong
//! proxy credentials failing with the proxy's 407, and `no_proxy`
//! bypassing it. tinyproxy's own log shows what it forwarded. Then the
//! same proxy as an `https://` one, behind Debian's stunnel: TLS to the
//! proxy (its certificate checked against the CA file), an http image
//! inside it, and an https image through a tunnel inside it (TLS in TLS);
//! a proxy certificate outside the CA file is refused at once.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use agent_contents::image::buffers::Pool;
use agent_contents::image::fetch::{fetch, FetchEnd, HttpOptions};
use agent_contents::image::progress::Progress;
use agent_contents::image::ImageError;
use agent_testkit::image_server::{Fault, ImageServer};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

const MIB: usize = 1 << 20;

/// tinyproxy in the foreground on a free loopback port; killed (by its
/// PID) on drop.
struct Tinyproxy {
    child: Child,
    port: u16,
    log: PathBuf,
}

impl Tinyproxy {
    fn start(dir: &Path) -> Self {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let conf = dir.join("tinyproxy.conf");
        let log = dir.join("tinyproxy.log");
        std::fs::write(
            &conf,
            format!(
                "Port {port}\nListen 127.0.0.1\nTimeout 30\nAllow 127.0.0.1\nBasicAuth agent s3cret\nLogLevel Connect\nMaxClients 16\n"
            ),
        )
        .unwrap();
        let child = Command::new("tinyproxy")
            .arg("-d")
            .arg("-c")
            .arg(&conf)
            .stdout(std::fs::File::create(&log).unwrap())
            .stderr(Stdio::null())
            .spawn()
            .expect("tinyproxy (ci/install-deps installs it)");
        let t = Tinyproxy { child, port, log };
        let until = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < until, "tinyproxy did not listen");
            std::thread::sleep(Duration::from_millis(50));
        }
        t
    }

    fn url(&self, creds: &str) -> String {
        format!("http://{creds}@127.0.0.1:{}", self.port)
    }

    /// The requests tinyproxy logged.
    fn requests(&self) -> Vec<String> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.split_once("): ").map(|(_, r)| r.to_string()))
            .filter(|r| r.starts_with("GET ") || r.starts_with("CONNECT "))
            .collect()
    }
}

impl Drop for Tinyproxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// stunnel in front of `to` (a loopback port): TLS with `cert`/`key` on a
/// free loopback port; killed (by its PID) on drop.
struct Stunnel {
    child: Child,
    port: u16,
}

impl Stunnel {
    fn start(dir: &Path, to: u16, cert: &Path, key: &Path) -> Self {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let conf = dir.join("stunnel.conf");
        std::fs::write(
            &conf,
            format!(
                "foreground = yes\npid =\noutput = {}\n[proxy]\naccept = 127.0.0.1:{port}\nconnect = 127.0.0.1:{to}\ncert = {}\nkey = {}\n",
                dir.join("stunnel.log").display(),
                cert.display(),
                key.display()
            ),
        )
        .unwrap();
        let child = Command::new("stunnel4")
            .arg(&conf)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("stunnel4 (ci/install-deps installs it)");
        let s = Stunnel { child, port };
        let until = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < until, "stunnel did not listen");
            std::thread::sleep(Duration::from_millis(50));
        }
        s
    }
}

impl Drop for Stunnel {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An HTTPS server for 127.0.0.1 answering every GET with `data`; returns
/// its address and the CA file that trusts it.
fn https_server(dir: &Path, data: Arc<Vec<u8>>) -> (std::net::SocketAddr, PathBuf) {
    let ck = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string()]).unwrap();
    let ca = dir.join("ca.pem");
    std::fs::write(&ca, ck.cert.pem()).unwrap();
    let cfg = Arc::new(
        rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![CertificateDer::from(ck.cert.der().to_vec())],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(ck.signing_key.serialize_der())),
        )
        .unwrap(),
    );
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    // The thread ends with the test process.
    std::thread::spawn(move || {
        for sock in listener.incoming().flatten() {
            let conn = rustls::ServerConnection::new(Arc::clone(&cfg)).unwrap();
            let mut s = rustls::StreamOwned::new(conn, sock);
            let mut head = Vec::new();
            let mut b = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") {
                match s.read(&mut b) {
                    Ok(1) => head.push(b[0]),
                    _ => break,
                }
            }
            let _ = write!(
                s,
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                data.len()
            );
            let _ = s.write_all(&data);
            s.conn.send_close_notify();
            let _ = s.flush();
        }
    });
    (addr, ca)
}

fn get(url: &str, opts: &HttpOptions) -> Result<Vec<u8>, ImageError> {
    let pool = Pool::new(4, MIB);
    let progress = Progress::default();
    let mut data = Vec::new();
    match fetch(&[url.to_string()], opts, &pool, &progress, &mut |b| {
        data.extend_from_slice(&b);
        true
    }) {
        Ok(_) => Ok(data),
        Err(FetchEnd::Failed(e)) => Err(e),
        Err(FetchEnd::Stopped) => panic!("nothing stops this fetch"),
    }
}

#[test]
fn images_come_through_tinyproxy_over_http_and_a_connect_tunnel() {
    let dir = tempfile::tempdir().unwrap();
    let data: Vec<u8> = (0..6 * MIB).map(|i| (i * 31 % 253) as u8).collect();
    let file = dir.path().join("disk.img");
    std::fs::write(&file, &data).unwrap();
    let server = ImageServer::start().unwrap();
    server.route(
        "/disk.img",
        &file,
        &[Fault::DropAfter(2 * MIB as u64 + 5)],
        Fault::None,
    );
    let url = server.url("/disk.img");
    let (tls_addr, ca) = https_server(dir.path(), Arc::new(data.clone()));
    let proxy = Tinyproxy::start(dir.path());
    let opts = HttpOptions {
        http_proxy: Some(proxy.url("agent:s3cret")),
        https_proxy: Some(proxy.url("agent:s3cret")),
        cafile: Some(ca),
        stall_timeout: Duration::from_secs(5),
        retries: 2,
        retry_interval: Duration::from_millis(100),
        ..HttpOptions::default()
    };

    // http: absolute-form through the proxy, resumed through it too.
    assert!(get(&url, &opts).unwrap() == data, "http image differs");
    let ranges: Vec<_> = server.seen().into_iter().map(|s| s.range).collect();
    assert_eq!(
        ranges,
        [None, Some(format!("bytes={}-", 2 * MIB + 5))],
        "the second request resumed"
    );
    // https: a CONNECT tunnel, then TLS to the image server.
    let https = format!("https://{tls_addr}/disk.img");
    assert!(get(&https, &opts).unwrap() == data, "https image differs");
    let logged = proxy.requests();
    assert_eq!(
        logged,
        [
            format!("GET {url} HTTP/1.1"),
            format!("GET {url} HTTP/1.1"),
            format!("CONNECT {tls_addr} HTTP/1.1"),
        ],
        "what tinyproxy forwarded"
    );

    // Wrong proxy credentials: tinyproxy 1.11 answers 401 to the GET
    // (407 when none are sent), final for http; a refused tunnel is
    // retried, then reported with the proxy's status.
    let wrong = HttpOptions {
        http_proxy: Some(proxy.url("agent:wrong")),
        https_proxy: Some(proxy.url("agent:wrong")),
        retries: 1,
        ..opts.clone()
    };
    let err = get(&url, &wrong).unwrap_err();
    assert!(
        matches!(
            err,
            ImageError::HttpStatus {
                status: 401 | 407,
                ..
            }
        ),
        "{err}"
    );
    let err = get(&https, &wrong).unwrap_err().to_string();
    assert!(
        err.contains(&format!("refused the tunnel to {tls_addr}: HTTP 40")),
        "{err}"
    );

    // no_proxy: straight to the server, the proxy (and its wrong
    // credentials) not asked.
    let before = proxy.requests().len();
    let bypass = HttpOptions {
        no_proxy: Some("localhost, 127.0.0.1".into()),
        ..wrong
    };
    assert!(get(&https, &bypass).unwrap() == data);
    assert_eq!(proxy.requests().len(), before);
}

#[test]
fn an_https_proxy_carries_http_images_and_tunnels_https_ones_tls_in_tls() {
    let dir = tempfile::tempdir().unwrap();
    let data: Vec<u8> = (0..3 * MIB).map(|i| (i * 7 % 251) as u8).collect();
    let file = dir.path().join("disk.img");
    std::fs::write(&file, &data).unwrap();
    let server = ImageServer::start().unwrap();
    server.route("/disk.img", &file, &[], Fault::None);
    let url = server.url("/disk.img");
    let (tls_addr, image_ca) = https_server(dir.path(), Arc::new(data.clone()));
    let proxy = Tinyproxy::start(dir.path());
    // The proxy's own certificate, for 127.0.0.1, and one CA file that
    // trusts it and the image server.
    let ck = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string()]).unwrap();
    let (cert, key) = (dir.path().join("proxy.pem"), dir.path().join("proxy.key"));
    std::fs::write(&cert, ck.cert.pem()).unwrap();
    std::fs::write(&key, ck.signing_key.serialize_pem()).unwrap();
    let stunnel = Stunnel::start(dir.path(), proxy.port, &cert, &key);
    let ca = dir.path().join("both.pem");
    let both = std::fs::read_to_string(&image_ca).unwrap() + &ck.cert.pem();
    std::fs::write(&ca, both).unwrap();
    let https_proxy = format!("https://agent:s3cret@127.0.0.1:{}", stunnel.port);
    let opts = HttpOptions {
        http_proxy: Some(https_proxy.clone()),
        https_proxy: Some(https_proxy),
        cafile: Some(ca),
        stall_timeout: Duration::from_secs(5),
        retries: 1,
        retry_interval: Duration::from_millis(100),
        ..HttpOptions::default()
    };
    assert!(get(&url, &opts).unwrap() == data, "http image differs");
    let https = format!("https://{tls_addr}/disk.img");
    assert!(get(&https, &opts).unwrap() == data, "https image differs");
    assert_eq!(
        proxy.requests(),
        [
            format!("GET {url} HTTP/1.1"),
            format!("CONNECT {tls_addr} HTTP/1.1"),
        ],
        "what tinyproxy, behind stunnel, forwarded"
    );

    // The proxy's certificate outside the CA file: refused, not retried.
    let untrusted = HttpOptions {
        cafile: Some(image_ca),
        ..opts
    };
    let err = get(&https, &untrusted).unwrap_err().to_string();
    assert!(
        err.contains("the TLS certificate of the proxy 127.0.0.1 was refused"),
        "{err}"
    );
    assert_eq!(proxy.requests().len(), 2, "nothing reached the proxy");
}
