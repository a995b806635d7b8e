//! Serving the command API over plain HTTP or HTTPS. Each connection is
//! handled in its own task; a TLS handshake that does not finish within
//! [`HANDSHAKE_TIMEOUT`] is dropped so a slow client cannot block others.

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
        let listener = bind(addr).with_context(|| format!("binding the command API to {addr}"))?;
        let local_addr = listener.local_addr()?;
        let acceptor = tls.map(|c| TlsAcceptor::from(Arc::new(c)));
        let (shutdown, closed) = tokio::sync::watch::channel(false);
        let task = tokio::spawn(accept_loop(listener, router, acceptor, closed));
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
) {
    loop {
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
            tokio::select! {
                () = serve_one(stream, peer, router, tls) => {}
                _ = closed.wait_for(|c| *c) => tracing::debug!(%peer, "connection closed: server stopped"),
            }
        });
    }
}

async fn serve_one(
    stream: tokio::net::TcpStream,
    peer: SocketAddr,
    router: Router,
    tls: Option<TlsAcceptor>,
) {
    let router = router.layer(axum::Extension(crate::api::PeerAddr(peer)));
    let service = TowerToHyperService::new(router);
    let http = hyper::server::conn::http1::Builder::new();
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
