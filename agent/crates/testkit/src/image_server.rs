//! A stand-in image server for tests, the demo and the benchmark: HTTP/1.1
//! GET and HEAD on loopback (or any address, e.g. inside a test's network
//! namespace), files sent with sendfile(2), byte ranges, keep-alive, and
//! scripted faults per request (drop or reset the connection after N bytes, stall,
//! ignore Range, answer an error status, serve one byte changed) to
//! exercise resumption and the error paths of the image pipeline.

use std::collections::{HashMap, VecDeque};
use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsFd, AsRawFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What the server does with one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Serve normally.
    None,
    /// Send this many body bytes, then close the connection.
    DropAfter(u64),
    /// Send this many body bytes, then reset the connection (RST: closed
    /// with a zero linger time, no FIN).
    ResetAfter(u64),
    /// Send the file up to this byte offset, then send nothing more (until
    /// the client gives up or the server stops).
    StallAt(u64),
    /// Answer 200 with the whole file even when a range was asked for.
    IgnoreRange,
    /// Answer with this status and no body.
    Status(u16),
    /// Answer `302 Found` with this `Location`.
    Redirect(&'static str),
    /// Serve normally (ranges honoured), but with the byte at this file
    /// offset XORed with 0x01 whenever the response covers it: a server
    /// whose file changed between two requests.
    FlipByteAt(u64),
}

#[derive(Debug)]
struct Route {
    file: PathBuf,
    script: VecDeque<Fault>,
    then: Fault,
    /// HEAD requests are served normally and leave the script alone.
    gets_only: bool,
}

/// One request as the server saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    /// Path.
    pub path: String,
    /// `Range` header, if any.
    pub range: Option<String>,
    /// `Authorization` header, if any.
    pub authorization: Option<String>,
    /// `User-Agent` header, if any.
    pub user_agent: Option<String>,
}

#[derive(Debug, Default)]
struct Shared {
    routes: Mutex<HashMap<String, Route>>,
    seen: Mutex<Vec<Seen>>,
    stop: AtomicBool,
    /// Body bytes sent, all requests together.
    sent: std::sync::atomic::AtomicU64,
    /// Body bytes a second one response may send (0: no limit).
    rate: std::sync::atomic::AtomicU64,
}

/// A running server; stopped on drop.
#[derive(Debug)]
pub struct ImageServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    /// The listening socket, kept to wake the accept loop on drop.
    listener: TcpListener,
}

impl ImageServer {
    /// Starts on a free loopback port.
    pub fn start() -> std::io::Result<Self> {
        Self::start_on("127.0.0.1:0".parse().expect("a socket address"))
    }

    /// Starts on `addr` (port 0: a free one). The socket is bound by the
    /// calling thread, so a thread inside a network namespace binds there;
    /// the server then runs in that namespace whatever thread drops it.
    pub fn start_on(addr: SocketAddr) -> std::io::Result<Self> {
        let listener = TcpListener::bind(addr)?;
        let addr = listener.local_addr()?;
        let accept = listener.try_clone()?;
        let shared = Arc::new(Shared::default());
        let s = shared.clone();
        std::thread::Builder::new()
            .name("image-server".into())
            .spawn(move || {
                for conn in accept.incoming() {
                    if s.stop.load(Ordering::Relaxed) {
                        break;
                    }
                    if let Ok(conn) = conn {
                        let s = s.clone();
                        std::thread::spawn(move || serve(conn, &s));
                    }
                }
            })?;
        Ok(Self {
            addr,
            shared,
            listener,
        })
    }

    /// `http://ADDRESS:PORT{path}`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Holds every response's body to `bytes_per_second` (0: no limit),
    /// as a long path holds each TCP stream whatever the link: a client
    /// with several connections gets more.
    pub fn limit_rate(&self, bytes_per_second: u64) {
        self.shared.rate.store(bytes_per_second, Ordering::Relaxed);
    }

    /// Serves `file` at `path`: the faults in `script` apply to the first
    /// requests in turn, `then` to every later one.
    pub fn route(&self, path: &str, file: impl Into<PathBuf>, script: &[Fault], then: Fault) {
        self.insert(path, file.into(), script, then, false);
    }

    /// [`ImageServer::route`], but HEAD requests (Ironic checks the image
    /// URL before deploying, a varying number of times) are answered
    /// normally and take no entry of the script: the faults hit the GETs.
    pub fn route_gets(&self, path: &str, file: impl Into<PathBuf>, script: &[Fault], then: Fault) {
        self.insert(path, file.into(), script, then, true);
    }

    fn insert(&self, path: &str, file: PathBuf, script: &[Fault], then: Fault, gets_only: bool) {
        let route = Route {
            file,
            script: script.iter().copied().collect(),
            then,
            gets_only,
        };
        self.shared
            .routes
            .lock()
            .expect("routes")
            .insert(path.to_string(), route);
    }

    /// Every request so far.
    pub fn seen(&self) -> Vec<Seen> {
        self.shared.seen.lock().expect("seen").clone()
    }

    /// Body bytes sent so far, all requests together.
    pub fn bytes_sent(&self) -> u64 {
        self.shared.sent.load(Ordering::Relaxed)
    }
}

impl Drop for ImageServer {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        // Wake the accept loop: shutting a listening socket down makes a
        // blocked accept(2) fail at once. (Connecting to it instead would
        // leave this namespace when the server runs in another one.)
        let _ =
            nix::sys::socket::shutdown(self.listener.as_raw_fd(), nix::sys::socket::Shutdown::Read);
    }
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

fn serve(conn: TcpStream, shared: &Shared) {
    let Ok(read_half) = conn.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(read_half);
    loop {
        let mut request_line = String::new();
        if reader.read_line(&mut request_line).unwrap_or(0) == 0 {
            return;
        }
        let mut headers = Vec::new();
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            if let Some((k, v)) = line.split_once(':') {
                headers.push((k.trim().to_string(), v.trim().to_string()));
            }
        }
        let path = request_line
            .split_whitespace()
            .nth(1)
            .unwrap_or("/")
            .to_string();
        let head_only = request_line.starts_with("HEAD ");
        let range = header(&headers, "range").map(str::to_string);
        shared.seen.lock().expect("seen").push(Seen {
            path: path.clone(),
            range: range.clone(),
            authorization: header(&headers, "authorization").map(str::to_string),
            user_agent: header(&headers, "user-agent").map(str::to_string),
        });
        let (file, fault) = {
            let mut routes = shared.routes.lock().expect("routes");
            match routes.get_mut(&path) {
                Some(r) if head_only && r.gets_only => (r.file.clone(), Fault::None),
                Some(r) => (r.file.clone(), r.script.pop_front().unwrap_or(r.then)),
                None => (PathBuf::new(), Fault::Status(404)),
            }
        };
        if !respond(&conn, &file, range.as_deref(), fault, head_only, shared) {
            if let Fault::ResetAfter(_) = fault {
                // Closing both descriptors with a zero linger sends RST.
                let _ = nix::sys::socket::setsockopt(
                    &conn,
                    nix::sys::socket::sockopt::Linger,
                    &libc::linger {
                        l_onoff: 1,
                        l_linger: 0,
                    },
                );
            } else {
                let _ = conn.shutdown(Shutdown::Both);
            }
            return;
        }
    }
}

/// Sends one response; false when the connection must close.
fn respond(
    mut conn: &TcpStream,
    path: &PathBuf,
    range: Option<&str>,
    fault: Fault,
    head_only: bool,
    shared: &Shared,
) -> bool {
    if let Fault::Status(code) = fault {
        let _ = write!(conn, "HTTP/1.1 {code} Fault\r\nContent-Length: 0\r\n\r\n");
        return true;
    }
    if let Fault::Redirect(location) = fault {
        let _ = write!(
            conn,
            "HTTP/1.1 302 Found\r\nLocation: {location}\r\nContent-Length: 0\r\n\r\n"
        );
        return true;
    }
    let Ok(file) = File::open(path) else {
        let _ = write!(conn, "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n");
        return true;
    };
    let size = file.metadata().map(|m| m.len()).unwrap_or(0);
    // `bytes=A-` or `bytes=A-B` (B past the end counts as the end).
    let asked = range
        .filter(|_| fault != Fault::IgnoreRange)
        .and_then(|r| r.strip_prefix("bytes="))
        .and_then(|r| r.split_once('-'))
        .map(|(a, b)| {
            let start = a.trim().parse::<u64>().unwrap_or(0);
            let last = b.trim().parse::<u64>().unwrap_or(u64::MAX);
            (start, last)
        });
    let etag = format!("\"{size:x}\"");
    let (start, stop) = match asked {
        Some((start, _)) if start >= size => {
            let _ = write!(conn, "HTTP/1.1 416 Range Not Satisfiable\r\nContent-Range: bytes */{size}\r\nContent-Length: 0\r\n\r\n");
            return true;
        }
        Some((start, last)) => (start, last.min(size - 1) + 1),
        None => (0, size),
    };
    let head = if asked.is_some() {
        format!(
            "HTTP/1.1 206 Partial Content\r\nContent-Length: {}\r\nContent-Range: bytes {start}-{}/{size}\r\nETag: {etag}\r\nAccept-Ranges: bytes\r\n\r\n",
            stop - start,
            stop - 1
        )
    } else {
        format!("HTTP/1.1 200 OK\r\nContent-Length: {size}\r\nETag: {etag}\r\nAccept-Ranges: bytes\r\n\r\n")
    };
    if conn.write_all(head.as_bytes()).is_err() {
        return false;
    }
    if head_only {
        // HEAD (Ironic checks the image URL before deploying): headers only.
        return true;
    }
    let limit = match fault {
        Fault::DropAfter(n) | Fault::ResetAfter(n) => n.min(stop - start),
        Fault::StallAt(n) => n.saturating_sub(start).min(stop - start),
        _ => stop - start,
    };
    let mut offset = start as i64;
    let end = start + limit;
    let rate = shared.rate.load(Ordering::Relaxed);
    let began = std::time::Instant::now();
    while (offset as u64) < end {
        if rate > 0 {
            let due = Duration::from_secs_f64((offset as u64 - start) as f64 / rate as f64);
            std::thread::sleep(due.saturating_sub(began.elapsed()));
        }
        if let Fault::FlipByteAt(at) = fault {
            if at == offset as u64 {
                let mut byte = [0u8; 1];
                if std::os::unix::fs::FileExt::read_exact_at(&file, &mut byte, at).is_err()
                    || conn.write_all(&[byte[0] ^ 0x01]).is_err()
                {
                    return false;
                }
                shared.sent.fetch_add(1, Ordering::Relaxed);
                offset += 1;
                continue;
            }
        }
        let mut count = ((end - offset as u64) as usize).min(4 << 20);
        if rate > 0 {
            // An eighth of a second's worth at a time.
            count = count.min((rate / 8).max(4096) as usize);
        }
        if let Fault::FlipByteAt(at) = fault {
            if at > offset as u64 && at < end {
                // Stop just before the byte to change.
                count = count.min((at - offset as u64) as usize);
            }
        }
        match nix::sys::sendfile::sendfile64(conn.as_fd(), file.as_fd(), Some(&mut offset), count) {
            Ok(0) | Err(_) => return false,
            Ok(n) => {
                shared.sent.fetch_add(n as u64, Ordering::Relaxed);
            }
        }
    }
    match fault {
        Fault::DropAfter(_) | Fault::ResetAfter(_) => false,
        Fault::StallAt(_) => {
            while !shared.stop.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(50));
                // The client gave up and closed: stop stalling.
                let mut probe = [0u8; 1];
                conn.set_nonblocking(true).ok();
                let gone = matches!(std::io::Read::read(&mut conn, &mut probe), Ok(0));
                conn.set_nonblocking(false).ok();
                if gone {
                    break;
                }
            }
            false
        }
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    #[test]
    fn serves_head_and_stops_accepting_when_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("img");
        std::fs::write(&file, b"0123456789").unwrap();
        let server = ImageServer::start().unwrap();
        server.route("/img", &file, &[], Fault::None);
        let addr = server.addr;
        let mut c = TcpStream::connect(addr).unwrap();
        c.write_all(b"HEAD /img HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .unwrap();
        // The server keeps the connection open: read up to the blank line.
        let mut answer = Vec::new();
        let mut byte = [0u8; 1];
        while !answer.ends_with(b"\r\n\r\n") {
            assert_eq!(c.read(&mut byte).unwrap(), 1, "connection closed early");
            answer.push(byte[0]);
        }
        let answer = String::from_utf8(answer).unwrap();
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(answer.contains("Content-Length: 10"), "{answer}");
        drop(server);
        // The accept loop ends and closes the socket: connections are refused.
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while TcpStream::connect(addr).is_ok() {
            assert!(std::time::Instant::now() < deadline, "still accepting");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}
