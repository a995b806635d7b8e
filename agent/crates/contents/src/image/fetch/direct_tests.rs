//! The image client against real servers on loopback (plain, TLS, IPv6)
//! and a small CONNECT-capable proxy written here: redirects, chunked and
//! unframed bodies, credentials, proxies; each case resumed where it
//! matters.

use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use super::super::{fetch, FetchEnd};
use super::*;
use crate::image::buffers::Pool;
use crate::image::progress::Progress;

type Handler = dyn Fn(&str, usize) -> Vec<u8> + Send + Sync;

/// A server on loopback: each connection's request head is recorded and
/// answered with what the handler returns for it (and the number of
/// requests before it), then the connection is closed.
struct Server {
    addr: std::net::SocketAddr,
    seen: Arc<Mutex<Vec<String>>>,
    stop: Arc<AtomicBool>,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(self.addr);
    }
}

/// Reads a request head byte by byte (nothing after it is consumed); the
/// parallel download's tests read theirs with it too.
pub(crate) fn read_request(conn: &mut (impl Read + ?Sized)) -> Option<String> {
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if conn.read(&mut b).ok()? == 0 {
            return None;
        }
        head.push(b[0]);
    }
    String::from_utf8(head).ok()
}

impl Server {
    fn start(
        bind: &str,
        tls: Option<Arc<rustls::ServerConfig>>,
        handler: impl Fn(&str, usize) -> Vec<u8> + Send + Sync + 'static,
    ) -> Self {
        let listener = TcpListener::bind(bind).unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let handler: Arc<Handler> = Arc::new(handler);
        let (s2, stop2) = (Arc::clone(&seen), Arc::clone(&stop));
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if stop2.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(mut sock) = conn else { continue };
                let reply = |conn: &mut dyn ReadWrite| {
                    let Some(head) = read_request(conn) else {
                        return;
                    };
                    let n = {
                        let mut seen = s2.lock().unwrap();
                        seen.push(head.clone());
                        seen.len() - 1
                    };
                    let _ = conn.write_all(&handler(&head, n));
                    let _ = conn.flush();
                };
                match &tls {
                    Some(cfg) => {
                        let c = rustls::ServerConnection::new(Arc::clone(cfg)).unwrap();
                        let mut s = rustls::StreamOwned::new(c, sock);
                        reply(&mut s);
                        s.conn.send_close_notify();
                        let _ = s.flush();
                    }
                    None => reply(&mut sock),
                }
            }
        });
        Server { addr, seen, stop }
    }

    fn url(&self, path: &str, scheme: &str) -> String {
        format!("{scheme}://{}{path}", self.addr)
    }

    fn seen(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }
}

trait ReadWrite: Read + Write {}
impl<T: Read + Write> ReadWrite for T {}

/// A TLS server configuration for 127.0.0.1 (rustls's default versions),
/// and its certificate as a CA file in `dir`.
fn tls_server(dir: &std::path::Path) -> (Arc<rustls::ServerConfig>, std::path::PathBuf) {
    super::super::tls_conn::tests::loopback_server(dir, rustls::DEFAULT_VERSIONS)
}

/// A forward proxy: `CONNECT` tunnels and absolute-form requests, each
/// request head recorded.
fn proxy() -> Server {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let (s2, stop2) = (Arc::clone(&seen), Arc::clone(&stop));
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            if stop2.load(Ordering::SeqCst) {
                return;
            }
            let Ok(mut client) = conn else { continue };
            let s2 = Arc::clone(&s2);
            std::thread::spawn(move || {
                let Some(head) = read_request(&mut client) else {
                    return;
                };
                s2.lock().unwrap().push(head.clone());
                let target = head.split(' ').nth(1).unwrap_or_default().to_string();
                let connect = head.starts_with("CONNECT ");
                let upstream = if connect {
                    target.clone()
                } else {
                    let rest = target.split_once("://").map_or("", |(_, r)| r);
                    rest.split('/').next().unwrap_or_default().to_string()
                };
                let Ok(mut up) = TcpStream::connect(upstream) else {
                    let _ = client.write_all(b"HTTP/1.1 502 Bad Gateway\r\n\r\n");
                    return;
                };
                if connect {
                    let _ = client.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n");
                } else {
                    let _ = up.write_all(head.as_bytes());
                }
                let (mut c2, mut u2) = (client.try_clone().unwrap(), up.try_clone().unwrap());
                let t = std::thread::spawn(move || {
                    let _ = std::io::copy(&mut c2, &mut u2);
                    let _ = u2.shutdown(Shutdown::Write);
                });
                let _ = std::io::copy(&mut up, &mut client);
                let _ = client.shutdown(Shutdown::Both);
                let _ = t.join();
            });
        }
    });
    Server { addr, seen, stop }
}

fn opts() -> HttpOptions {
    HttpOptions {
        stall_timeout: Duration::from_secs(5),
        retries: 3,
        retry_interval: Duration::from_millis(10),
        ..HttpOptions::default()
    }
}

/// Downloads `url`: the bytes, and the number of resumptions.
fn get(url: &str, opts: &HttpOptions) -> (Result<Vec<u8>, ImageError>, u64) {
    let pool = Pool::new(4, 4096);
    let progress = Progress::default();
    let mut data = Vec::new();
    let res = fetch(&[url.to_string()], opts, &pool, &progress, &mut |b| {
        data.extend_from_slice(&b);
        true
    });
    let resumes = progress.snapshot().resumes;
    match res {
        Ok(n) => {
            assert_eq!(n, data.len() as u64);
            (Ok(data), resumes)
        }
        Err(FetchEnd::Failed(e)) => (Err(e), resumes),
        Err(FetchEnd::Stopped) => panic!("nothing stops this fetch"),
    }
}

/// An image of `n` bytes.
fn image(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 7 % 251) as u8).collect()
}

/// A response: 200 with the whole body, or 206 from the Range asked for.
fn ranged(head: &str, data: &[u8], extra: &str) -> Vec<u8> {
    let start = head
        .lines()
        .find_map(|l| l.strip_prefix("Range: bytes="))
        .and_then(|r| r.trim_end_matches('-').parse::<usize>().ok());
    let mut r = match start {
        Some(s) => format!(
            "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes {s}-{}/{}\r\nContent-Length: {}\r\n{extra}\r\n",
            data.len() - 1,
            data.len(),
            data.len() - s
        )
        .into_bytes(),
        None => format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n{extra}\r\n", data.len()).into_bytes(),
    };
    r.extend_from_slice(&data[start.unwrap_or(0)..]);
    r
}

fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().find_map(|l| {
        l.split_once(": ")
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v)
    })
}

#[test]
fn redirects_are_followed_and_a_resumption_asks_the_final_url() {
    for code in [301, 302, 303, 307, 308] {
        let data = image(50_000);
        let d = data.clone();
        let s = Server::start("127.0.0.1:0", None, move |head, n| {
            if head.starts_with("GET /a/img ") {
                format!(
                    "HTTP/1.1 {code} Moved\r\nLocation: ../c/real.img\r\nContent-Length: 0\r\n\r\n"
                )
                .into_bytes()
            } else if n == 1 {
                // The first read of the real image: cut after 20000 bytes.
                let mut r = ranged(head, &d, "");
                r.truncate(r.len() - 30_000);
                r
            } else {
                ranged(head, &d, "")
            }
        });
        let (got, resumes) = get(&s.url("/a/img", "http"), &opts());
        assert_eq!(got.unwrap(), data, "{code}");
        assert_eq!(resumes, 1);
        let lines: Vec<String> = s
            .seen()
            .iter()
            .map(|h| {
                let range = header(h, "Range").unwrap_or("-");
                format!("{} {range}", h.lines().next().unwrap())
            })
            .collect();
        assert_eq!(
            lines,
            [
                "GET /a/img HTTP/1.1 -",
                "GET /c/real.img HTTP/1.1 -",
                "GET /c/real.img HTTP/1.1 bytes=20000-",
            ],
            "{code}"
        );
    }
}

#[test]
fn redirect_loops_and_downgrades_to_http_are_refused() {
    let s = Server::start("127.0.0.1:0", None, |_, _| {
        b"HTTP/1.1 302 Found\r\nLocation: /loop\r\nContent-Length: 0\r\n\r\n".to_vec()
    });
    let err = get(&s.url("/loop", "http"), &opts()).0.unwrap_err();
    assert!(
        matches!(&err, ImageError::Download { reason, .. } if reason == "more than 10 redirects"),
        "{err}"
    );
    assert_eq!(s.seen().len(), 11, "the first request and 10 hops");

    let dir = tempfile::tempdir().unwrap();
    let (cfg, ca) = tls_server(dir.path());
    let plain = Server::start("127.0.0.1:0", None, |h, _| ranged(h, b"plain", ""));
    let to = plain.url("/img", "http");
    let s = Server::start("127.0.0.1:0", Some(cfg), move |_, _| {
        format!("HTTP/1.1 301 Moved\r\nLocation: {to}\r\nContent-Length: 0\r\n\r\n").into_bytes()
    });
    let mut o = opts();
    o.cafile = Some(ca);
    let err = get(&s.url("/img", "https"), &o).0.unwrap_err();
    assert!(
        err.to_string()
            .contains("refused a redirect from https to http://"),
        "{err}"
    );
    assert!(plain.seen().is_empty());
}

#[test]
fn authorization_stays_with_its_host_and_url_user_info_is_basic_auth() {
    let data = image(10_000);
    let d = data.clone();
    // Another host: the IPv6 loopback, by its literal.
    let other = Server::start("[::1]:0", None, move |h, _| ranged(h, &d, ""));
    let to = format!("http://u%40s:p%3As@{}/img", other.addr);
    let first = Server::start("127.0.0.1:0", None, move |_, _| {
        format!("HTTP/1.1 307 Moved\r\nLocation: {to}\r\nContent-Length: 0\r\n\r\n").into_bytes()
    });
    let mut o = opts();
    o.authorization = Some("Bearer secret".into());
    assert_eq!(get(&first.url("/img", "http"), &o).0.unwrap(), data);
    assert_eq!(
        header(&first.seen()[0], "Authorization"),
        Some("Bearer secret")
    );
    let theirs = &other.seen()[0];
    assert!(
        theirs.starts_with("GET /img HTTP/1.1\r\nHost: [::1]:"),
        "{theirs}"
    );
    // Only the credentials of the URL it was sent to (u@s:p:s).
    assert_eq!(header(theirs, "Authorization"), Some("Basic dUBzOnA6cw=="));
}

#[test]
fn chunked_bodies_are_decoded_and_resumed_after_a_cut() {
    let data = image(70_000);
    let d = data.clone();
    let s = Server::start("127.0.0.1:0", None, move |head, n| {
        let start = header(head, "Range")
            .and_then(|r| r.strip_prefix("bytes="))
            .and_then(|r| r.trim_end_matches('-').parse::<usize>().ok())
            .unwrap_or(0);
        let mut r = match start {
            0 => b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec(),
            s => format!(
                "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes {s}-{}/{}\r\nTransfer-Encoding: chunked\r\n\r\n",
                d.len() - 1,
                d.len()
            )
            .into_bytes(),
        };
        for (i, c) in d[start..].chunks(3001).enumerate() {
            if n == 0 && i == 10 {
                // The first reply ends in the middle of a chunk.
                r.extend_from_slice(b"bb9;ext=1\r\n");
                r.extend_from_slice(&c[..100]);
                return r;
            }
            r.extend_from_slice(format!("{:x}\r\n", c.len()).as_bytes());
            r.extend_from_slice(c);
            r.extend_from_slice(b"\r\n");
        }
        r.extend_from_slice(b"0\r\nX-Trailer: 1\r\n\r\n");
        r
    });
    let (got, resumes) = get(&s.url("/img", "http"), &opts());
    assert_eq!(got.unwrap(), data);
    assert_eq!(resumes, 1);
    assert_eq!(
        header(&s.seen()[1], "Range"),
        Some(format!("bytes={}-", 10 * 3001 + 100).as_str())
    );

    // Garbage framing is retried, then reported.
    let s = Server::start("127.0.0.1:0", None, |_, _| {
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n".to_vec()
    });
    let err = get(&s.url("/img", "http"), &opts()).0.unwrap_err();
    assert!(err.to_string().contains("chunk-size line"), "{err}");
}

#[test]
fn a_body_without_length_ends_with_the_connection() {
    let data = image(30_000);
    let d = data.clone();
    let s = Server::start("127.0.0.1:0", None, move |_, _| {
        let mut r = b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n".to_vec();
        r.extend_from_slice(&d);
        r
    });
    assert_eq!(get(&s.url("/img", "http"), &opts()).0.unwrap(), data);
    assert_eq!(s.seen().len(), 1);
}

#[test]
fn proxies_carry_http_absolute_and_https_tunnelled_unless_no_proxy() {
    let dir = tempfile::tempdir().unwrap();
    let (cfg, ca) = tls_server(dir.path());
    let data = image(40_000);
    let (d1, d2) = (data.clone(), data.clone());
    let plain = Server::start("127.0.0.1:0", None, move |h, _| ranged(h, &d1, ""));
    let tls = Server::start("127.0.0.1:0", Some(cfg), move |h, _| ranged(h, &d2, ""));
    let p = proxy();
    let mut o = opts();
    o.cafile = Some(ca);
    o.http_proxy = Some(format!("http://pu:pp@{}", p.addr));
    o.https_proxy = Some(format!("{}", p.addr));
    assert_eq!(get(&plain.url("/img?x=1", "http"), &o).0.unwrap(), data);
    assert_eq!(get(&tls.url("/img", "https"), &o).0.unwrap(), data);
    let seen = p.seen();
    let want_get = format!("GET {}/img?x=1 HTTP/1.1\r\n", plain.url("", "http"));
    assert!(seen[0].starts_with(&want_get), "{}", seen[0]);
    assert_eq!(
        header(&seen[0], "Proxy-Authorization"),
        Some("Basic cHU6cHA=")
    );
    let want_connect = format!("CONNECT {} HTTP/1.1\r\nHost: {}\r\n", tls.addr, tls.addr);
    assert!(seen[1].starts_with(&want_connect), "{}", seen[1]);
    assert_eq!(header(&seen[1], "Proxy-Authorization"), None);
    // The origin saw the request through the tunnel, in origin form.
    assert!(tls.seen()[0].starts_with("GET /img HTTP/1.1\r\n"));

    o.no_proxy = Some("localhost,127.0.0.1".into());
    assert_eq!(get(&plain.url("/img", "http"), &o).0.unwrap(), data);
    assert_eq!(p.seen().len(), 2, "no_proxy bypasses the proxy");

    // A proxy that is down is retried, then named in the error.
    o.no_proxy = None;
    o.http_proxy = Some("http://127.0.0.1:9".into());
    o.retries = 1;
    let err = get(&plain.url("/img", "http"), &o).0.unwrap_err();
    assert!(err.to_string().contains("proxy 127.0.0.1:9"), "{err}");
}
