//! A TCP relay on loopback that forwards to another address and slows the
//! answers down to a fixed rate: a registry that takes its time, for the
//! container pull's time limit and abort tests. TLS passes through it
//! untouched. Threads only; dropping it stops accepting, and each
//! connection's threads end when either side closes.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;

/// The running relay.
#[derive(Debug)]
pub struct SlowProxy {
    /// `127.0.0.1:PORT`.
    pub addr: String,
    done: Arc<AtomicBool>,
}

impl SlowProxy {
    /// Relays connections to `upstream`, its answers at `bytes_per_second`.
    pub fn start(upstream: &str, bytes_per_second: usize) -> Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?.to_string();
        let done = Arc::new(AtomicBool::new(false));
        let (up, stop) = (upstream.to_string(), done.clone());
        std::thread::spawn(move || {
            for client in listener.incoming() {
                if stop.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(client) = client else { continue };
                let Ok(server) = TcpStream::connect(&up) else {
                    continue;
                };
                let _ = relay(client, server, bytes_per_second);
            }
        });
        Ok(SlowProxy { addr, done })
    }
}

impl Drop for SlowProxy {
    fn drop(&mut self) {
        self.done.store(true, Ordering::SeqCst);
        // Wakes the accepting thread, which then sees the flag.
        let _ = TcpStream::connect(&self.addr);
    }
}

fn relay(client: TcpStream, server: TcpStream, rate: usize) -> Result<()> {
    let (mut c_in, mut s_out) = (client.try_clone()?, server.try_clone()?);
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut c_in, &mut s_out);
        let _ = s_out.shutdown(Shutdown::Write);
    });
    let (mut s_in, mut c_out) = (server, client);
    std::thread::spawn(move || {
        let chunk = (rate / 10).max(1);
        let mut buf = vec![0; chunk];
        loop {
            let n = match s_in.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            if c_out.write_all(&buf[..n]).is_err() {
                break;
            }
            std::thread::sleep(Duration::from_secs_f64(n as f64 / rate as f64));
        }
        let _ = c_out.shutdown(Shutdown::Both);
        let _ = s_in.shutdown(Shutdown::Both);
    });
    Ok(())
}
