//! HTTPS for the benchmark: a loopback TLS front (rustls, RSA-2048
//! certificate made by `openssl req -x509` as operators' image servers
//! often have one, trusted by the agent through `--cafile`) before the
//! plain image server, one thread pair per connection, and the client half
//! of the floor: the same image read over TLS with no hash.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{bail, Context, Result};

/// A TLS front for `backend`; runs until the process ends.
pub struct Front {
    /// `https://127.0.0.1:PORT`.
    pub base: String,
    /// The certificate (PEM) to trust.
    pub cafile: PathBuf,
}

/// Starts a TLS front on a free loopback port for the plain server at
/// `backend`, with a certificate made in `dir`.
pub fn start(dir: &Path, backend: SocketAddr) -> Result<Front> {
    let (cert, key) = (dir.join("bench.crt"), dir.join("bench.key"));
    hardware_tests::run(
        std::process::Command::new("openssl")
            .args([
                "req", "-x509", "-newkey", "rsa:2048", "-days", "2", "-nodes",
            ])
            .args([
                "-subj",
                "/CN=127.0.0.1",
                "-addext",
                "subjectAltName = IP:127.0.0.1",
            ])
            .arg("-keyout")
            .arg(&key)
            .arg("-out")
            .arg(&cert),
    )?;
    let config = hardware_tests::bed::vmedia_disc::server_tls(
        &std::fs::read(&cert)?,
        &std::fs::read(&key)?,
    )?;
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let base = format!("https://{}", listener.local_addr()?);
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            let config = config.clone();
            std::thread::spawn(move || {
                if let Err(e) = serve(conn, config, backend) {
                    eprintln!("bench TLS front: {e:#}");
                }
            });
        }
    });
    Ok(Front { base, cafile: cert })
}

/// One connection: TLS from the client, plain bytes to the backend, both
/// ways until either side closes.
fn serve(conn: TcpStream, config: Arc<rustls::ServerConfig>, backend: SocketAddr) -> Result<()> {
    let tls = rustls::ServerConnection::new(config)?;
    let mut client = rustls::StreamOwned::new(tls, conn.try_clone()?);
    let plain = TcpStream::connect(backend)?;
    let mut to_backend = plain.try_clone()?;
    let mut from_backend = plain;
    // Requests are small: read them here and hand them on; responses go
    // back on the same thread, so rustls is used from one thread only.
    let mut buf = vec![0u8; 256 << 10];
    let mut request = Vec::new();
    loop {
        // A request (headers only, no body) may arrive in several TLS
        // records: hand it on whole, or the backend waits for its end
        // while this thread waits for the response.
        let n = match client.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => break,
            Err(e) => return Err(e.into()),
        };
        request.extend_from_slice(&buf[..n]);
        let Some(end) = request.windows(4).position(|w| w == b"\r\n\r\n") else {
            continue;
        };
        to_backend.write_all(&request[..end + 4])?;
        request.drain(..end + 4);
        // One response per request (the benchmark's clients send one
        // request and read the whole body): relay until the body ends.
        relay_response(&mut from_backend, &mut client, &mut buf)?;
    }
    let _ = to_backend.shutdown(Shutdown::Both);
    let _ = conn.shutdown(Shutdown::Both);
    Ok(())
}

/// Copies one HTTP response (headers, then Content-Length bytes).
fn relay_response(from: &mut TcpStream, to: &mut impl Write, buf: &mut [u8]) -> Result<()> {
    let mut head = Vec::new();
    let body_start = loop {
        let n = from.read(buf)?;
        if n == 0 {
            bail!("the backend closed inside the headers");
        }
        head.extend_from_slice(&buf[..n]);
        if let Some(i) = head.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
    };
    let text = String::from_utf8_lossy(&head[..body_start]).to_ascii_lowercase();
    let len: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    to.write_all(&head)?;
    let mut left = len.saturating_sub((head.len() - body_start) as u64);
    while left > 0 {
        let want = buf.len().min(left as usize);
        let n = from.read(&mut buf[..want])?;
        if n == 0 {
            bail!("the backend closed with {left} body bytes to go");
        }
        to.write_all(&buf[..n])?;
        left -= n as u64;
    }
    to.flush()?;
    Ok(())
}

/// The body of `GET url` over TLS, trusting `cafile`, unhashed.
pub fn https_body(url: &str, cafile: &Path) -> Result<impl Read> {
    let rest = url
        .strip_prefix("https://")
        .with_context(|| format!("{url}: not https"))?;
    let (host, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let config = Arc::new(agent::tls::client_config(false, Some(cafile))?);
    let name = rustls::pki_types::ServerName::try_from(
        host.rsplit_once(':').map_or(host, |(h, _)| h).to_string(),
    )?;
    let tls = rustls::ClientConnection::new(config, name)?;
    let mut s = rustls::StreamOwned::new(tls, TcpStream::connect(host)?);
    // One write, so one TLS record.
    let request = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    s.write_all(request.as_bytes())?;
    s.flush()?;
    // Skip the headers byte by byte through a small buffer.
    let mut head = Vec::new();
    let mut one = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if s.read(&mut one)? == 0 {
            bail!("{url}: closed inside the headers");
        }
        head.push(one[0]);
    }
    if !head.starts_with(b"HTTP/1.1 200") {
        bail!(
            "{url}: {}",
            String::from_utf8_lossy(&head[..head.len().min(40)])
        );
    }
    let len: u64 = String::from_utf8_lossy(&head)
        .to_ascii_lowercase()
        .lines()
        .find_map(|l| {
            l.strip_prefix("content-length:")
                .map(|v| v.trim().to_string())
        })
        .and_then(|v| v.parse().ok())
        .with_context(|| format!("{url}: no Content-Length"))?;
    Ok(s.take(len))
}
