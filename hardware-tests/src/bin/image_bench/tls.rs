//! HTTPS for the benchmark: a loopback HTTPS file server (rustls, one TLS
//! version: 1.3, or 1.2 as Debian 12's nginx negotiates by default; an
//! RSA-2048 certificate made by `openssl req -x509` as operators' image
//! servers often have one, trusted by the agent through `--cafile`) serving the
//! image files from their directory as a static web server does (a thread
//! per connection: read the file, encrypt, send), and the client half of
//! the floor: the same image read over TLS with no hash.
//!
//! It serves the files itself rather than relaying a plain server: on this
//! 2-core machine the server shares the cores with the agent, and a relay
//! hop (a second loopback connection, its receive copy and wake-ups) is CPU
//! no real image server costs the deploying machine.

use std::fs::File;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{bail, Context, Result};

/// Bytes read from the file and handed to rustls per write.
const CHUNK: usize = 256 << 10;

/// A running HTTPS server; runs until the process ends.
pub(crate) struct Front {
    /// `https://127.0.0.1:PORT`.
    pub base: String,
    /// The certificate (PEM) to trust.
    pub cafile: PathBuf,
}

/// Starts an HTTPS server speaking only `version` on a free loopback port
/// for the files in `dir` (`GET /NAME` answers `dir/NAME`), with a
/// certificate made in `dir` (named by `tag`).
pub(crate) fn start(
    dir: &Path,
    version: &'static rustls::SupportedProtocolVersion,
    tag: &str,
) -> Result<Front> {
    let (cert, key) = (
        dir.join(format!("bench-{tag}.crt")),
        dir.join(format!("bench-{tag}.key")),
    );
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
    let config = server_config(&std::fs::read(&cert)?, &std::fs::read(&key)?, version)?;
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let base = format!("https://{}", listener.local_addr()?);
    let root = dir.to_path_buf();
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            let (config, root) = (config.clone(), root.clone());
            std::thread::spawn(move || {
                if let Err(e) = serve(conn, config, &root) {
                    eprintln!("bench HTTPS server: {e:#}");
                }
            });
        }
    });
    Ok(Front { base, cafile: cert })
}

/// The server's TLS configuration: the PEM certificate and key, `version` only.
fn server_config(
    cert: &[u8],
    key: &[u8],
    version: &'static rustls::SupportedProtocolVersion,
) -> Result<Arc<rustls::ServerConfig>> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let certs: Vec<CertificateDer<'static>> =
        CertificateDer::pem_slice_iter(cert).collect::<Result<_, _>>()?;
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_protocol_versions(&[version])?
    .with_no_client_auth()
    .with_single_cert(certs, PrivateKeyDer::from_pem_slice(key)?)
    .context("the bench certificate")?;
    Ok(Arc::new(config))
}

/// One connection: GET requests (no body), each answered with the whole
/// file or 404, until the client closes.
fn serve(conn: TcpStream, config: Arc<rustls::ServerConfig>, root: &Path) -> Result<()> {
    let _ = conn.set_nodelay(true);
    let tls = rustls::ServerConnection::new(config)?;
    let mut client = rustls::StreamOwned::new(tls, conn.try_clone()?);
    let mut buf = vec![0u8; CHUNK];
    let mut request = Vec::new();
    loop {
        // A request may arrive in several TLS records.
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
        let head = String::from_utf8_lossy(&request[..end]).into_owned();
        request.drain(..end + 4);
        let path = head
            .lines()
            .next()
            .and_then(|l| l.strip_prefix("GET "))
            .and_then(|l| l.split(' ').next())
            .unwrap_or("");
        let name = path.trim_start_matches('/');
        let file = (!name.is_empty() && !name.contains('/'))
            .then(|| File::open(root.join(name)).ok())
            .flatten();
        let Some(file) = file else {
            client.write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")?;
            client.flush()?;
            continue;
        };
        send_file(&file, &mut client, &mut buf)?;
        if head.to_ascii_lowercase().contains("connection: close") {
            break;
        }
    }
    client.conn.send_close_notify();
    let _ = client.flush();
    let _ = conn.shutdown(Shutdown::Both);
    Ok(())
}

/// A 200 answer with the whole of `file`.
fn send_file(file: &File, to: &mut impl Write, buf: &mut [u8]) -> Result<()> {
    let len = file.metadata()?.len();
    write!(
        to,
        "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: {len}\r\n\r\n"
    )?;
    let mut offset = 0u64;
    while offset < len {
        let want = buf.len().min((len - offset) as usize);
        let n = file.read_at(&mut buf[..want], offset)?;
        if n == 0 {
            bail!("the file ended {} bytes early", len - offset);
        }
        to.write_all(&buf[..n])?;
        offset += n as u64;
    }
    to.flush()?;
    Ok(())
}

/// The body of `GET url` over TLS, trusting `cafile`, unhashed: through
/// the agent's own direct-path TLS client (rustls's unbuffered API, records
/// opened in place in its read buffer), so the floor moves the bytes as
/// cheaply as the agent can.
pub(crate) fn https_body(url: &str, cafile: &Path) -> Result<impl Read> {
    let rest = url
        .strip_prefix("https://")
        .with_context(|| format!("{url}: not https"))?;
    let (host, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let config = Arc::new(agent_base::tls::client_config(false, Some(cafile))?);
    let bare = host.rsplit_once(':').map_or(host, |(h, _)| h);
    let conn = agent_contents::image::fetch::connect_tls(TcpStream::connect(host)?, bare, &config)
        .map_err(|e| anyhow::anyhow!("{url}: {e}"))?;
    crate::floor::get_body(
        conn,
        url,
        &format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"),
    )
}
