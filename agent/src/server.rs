//! Serving the command API over plain HTTP or HTTPS. Each connection is
//! handled in its own task. Anyone on the provisioning network can connect,
//! so what a connection may hold is bounded ([`Limits`]): a TLS handshake
//! or a request head that does not arrive in time closes it (an idle
//! kept-alive connection too), no connection lives for ever, and at most
//! `max_connections` are served at once (more wait in the listen backlog
//! until one ends). The agent also raises its open-file limit at start
//! ([`raise_open_file_limit`]).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use axum::Router;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;

/// Longest time a client may take to finish the TLS handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// What one client may hold of the server.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Longest wait for a request head (also between kept-alive requests).
    pub header_read_timeout: Duration,
    /// Longest life of one connection, whatever it does.
    pub max_lifetime: Duration,
    /// Connections served at once.
    pub max_connections: usize,
}

impl Default for Limits {
    /// 10 s for a request head, 30 min per connection, 64 at once.
    fn default() -> Self {
        Limits {
            header_read_timeout: Duration::from_secs(10),
            max_lifetime: Duration::from_secs(30 * 60),
            max_connections: 64,
        }
    }
}

/// Raises this process's open-file limit to its hard limit, so a flood of
/// connections cannot starve the agent of descriptors (logged either way).
pub fn raise_open_file_limit() {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    match getrlimit(Resource::RLIMIT_NOFILE) {
        Ok((soft, hard)) if soft < hard => match setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
            Ok(()) => tracing::debug!(from = soft, to = hard, "open-file limit raised"),
            Err(e) => tracing::warn!(soft, hard, "cannot raise the open-file limit: {e}"),
        },
        Ok(_) => {}
        Err(e) => tracing::warn!("cannot read the open-file limit: {e}"),
    }
}

/// A running API server; dropping it does not stop it, [`Server::stop`] does.
#[derive(Debug)]
pub struct Server {
    /// The address actually bound.
    pub local_addr: SocketAddr,
    task: JoinHandle<()>,
    shutdown: tokio::sync::watch::Sender<bool>,
}

impl Server {
    /// Binds `addr` and serves `router`, over TLS when `tls` is given.
    pub async fn start(
        addr: SocketAddr,
        router: Router,
        tls: Option<rustls::ServerConfig>,
    ) -> Result<Self> {
        Self::start_with(addr, router, tls, Limits::default()).await
    }

    /// [`Server::start`] with other [`Limits`].
    pub async fn start_with(
        addr: SocketAddr,
        router: Router,
        tls: Option<rustls::ServerConfig>,
        limits: Limits,
    ) -> Result<Self> {
        let listener = bind(addr).with_context(|| format!("binding the command API to {addr}"))?;
        let local_addr = listener.local_addr()?;
        let acceptor = tls.map(|c| TlsAcceptor::from(Arc::new(c)));
        let (shutdown, closed) = tokio::sync::watch::channel(false);
        let task = tokio::spawn(accept_loop(listener, router, acceptor, closed, limits));
        Ok(Self {
            local_addr,
            task,
            shutdown,
        })
    }

    /// Stops accepting connections and closes the open ones (kept-alive
    /// connections would otherwise go on serving, e.g. after a lockdown).
    pub fn stop(&self) {
        self.task.abort();
        let _ = self.shutdown.send(true);
    }
}

fn bind(addr: SocketAddr) -> Result<TcpListener> {
    let socket = if addr.is_ipv6() {
        tokio::net::TcpSocket::new_v6()?
    } else {
        tokio::net::TcpSocket::new_v4()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    Ok(socket.listen(128)?)
}

async fn accept_loop(
    listener: TcpListener,
    router: Router,
    tls: Option<TlsAcceptor>,
    closed: tokio::sync::watch::Receiver<bool>,
    limits: Limits,
) {
    let slots = Arc::new(tokio::sync::Semaphore::new(limits.max_connections.max(1)));
    loop {
        // Wait for a free slot before accepting: extra clients queue in the
        // backlog instead of taking descriptors and tasks.
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        let (stream, peer) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, "accepting a connection failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let router = router.clone();
        let tls = tls.clone();
        let mut closed = closed.clone();
        tokio::spawn(async move {
            let _slot = slot;
            tokio::select! {
                () = serve_one(stream, peer, router, tls, limits.header_read_timeout) => {}
                _ = closed.wait_for(|c| *c) => tracing::debug!(%peer, "connection closed: server stopped"),
                () = tokio::time::sleep(limits.max_lifetime) => tracing::debug!(%peer, "connection closed: too old"),
            }
        });
    }
}

async fn serve_one(
    stream: tokio::net::TcpStream,
    peer: SocketAddr,
    router: Router,
    tls: Option<TlsAcceptor>,
    header_read_timeout: Duration,
) {
    let router = router.layer(axum::Extension(crate::api::PeerAddr(peer)));
    let service = TowerToHyperService::new(router);
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(header_read_timeout);
    let result = match tls {
        Some(acceptor) => {
            match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                Ok(Ok(s)) => http.serve_connection(TokioIo::new(s), service).await,
                Ok(Err(e)) => {
                    tracing::debug!(%peer, error = %e, "TLS handshake failed");
                    return;
                }
                Err(_) => {
                    tracing::debug!(%peer, "TLS handshake timed out");
                    return;
                }
            }
        }
        None => http.serve_connection(TokioIo::new(stream), service).await,
    };
    if let Err(e) = result {
        tracing::debug!(%peer, error = %e, "connection ended with an error");
    }
}

#[cfg(test)]
mod tests {
    //! Idle clients cannot hold the API: heads time out, slots are capped.

    use std::time::Instant;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    use super::*;

    #[tokio::test]
    async fn idle_connections_are_closed_and_extra_ones_wait_for_a_slot() {
        let router = Router::new().route("/", axum::routing::get(|| async { "ok" }));
        let limits = Limits {
            header_read_timeout: Duration::from_secs(1),
            max_lifetime: Duration::from_secs(60),
            max_connections: 4,
        };
        let server = Server::start_with("127.0.0.1:0".parse().unwrap(), router, None, limits)
            .await
            .unwrap();
        let addr = server.local_addr;
        // Eight clients that connect and say nothing.
        let mut idle = Vec::new();
        for _ in 0..8 {
            idle.push(TcpStream::connect(addr).await.unwrap());
        }
        // The served ones are closed once the head does not come.
        let mut buf = [0u8; 64];
        let n = tokio::time::timeout(Duration::from_secs(5), idle[0].read(&mut buf))
            .await
            .expect("an idle connection was not closed")
            .unwrap_or(0);
        assert_eq!(n, 0, "expected the server to close the idle connection");
        // A real client gets its answer within a few head timeouts.
        let started = Instant::now();
        let mut c = TcpStream::connect(addr).await.unwrap();
        c.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut reply = Vec::new();
        tokio::time::timeout(Duration::from_secs(10), c.read_to_end(&mut reply))
            .await
            .expect("no answer while idle clients wait")
            .unwrap();
        assert!(String::from_utf8_lossy(&reply).ends_with("ok"), "{reply:?}");
        assert!(
            started.elapsed() < Duration::from_secs(6),
            "{:?}",
            started.elapsed()
        );
        server.stop();
    }

    #[test]
    fn the_open_file_limit_is_raised_to_the_hard_limit() {
        use nix::sys::resource::{getrlimit, Resource};
        raise_open_file_limit();
        let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
        assert_eq!(soft, hard);
    }
}
