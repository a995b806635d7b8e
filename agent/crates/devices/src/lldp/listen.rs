//! Listening for LLDP on many interfaces at once: one socket per interface,
//! each finished by its first valid LLDP frame, all of them by one deadline.
//! One interface failing (no permission, vanished) never stops the others.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::unix::AsyncFd;
use tokio::time::Instant;

use super::socket::PacketSocket;
use super::tlv::{self, Frame, ETHERTYPE, MULTICAST};

/// What one interface heard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Heard {
    /// The first valid LLDP frame, split.
    Frame(Frame),
    /// Nothing valid before the deadline.
    Nothing {
        /// LLDP-typed frames received that were not usable.
        malformed: usize,
    },
    /// The interface could not be listened on.
    Failed(String),
}

/// Listens on `interfaces` (kernel names) until each has a frame or
/// `timeout` passes. Interface names are resolved in the calling thread's
/// network namespace.
pub async fn listen(interfaces: &[String], timeout: Duration) -> BTreeMap<String, Heard> {
    let deadline = Instant::now() + timeout;
    let mut set = tokio::task::JoinSet::new();
    let mut out = BTreeMap::new();
    for name in interfaces {
        match open(name) {
            Ok(sock) => {
                let name = name.clone();
                set.spawn(async move {
                    let malformed = Arc::new(AtomicUsize::new(0));
                    let heard =
                        tokio::time::timeout_at(deadline, first_frame(sock, malformed.clone()))
                            .await
                            .unwrap_or_else(|_| Heard::Nothing {
                                malformed: malformed.load(Ordering::Relaxed),
                            });
                    (name, heard)
                });
            }
            Err(e) => {
                tracing::warn!(interface = %name, "cannot listen for LLDP: {e}");
                out.insert(name.clone(), Heard::Failed(e.to_string()));
            }
        }
    }
    while let Some(joined) = set.join_next().await {
        match joined {
            Ok((name, heard)) => {
                match &heard {
                    Heard::Frame(f) => {
                        tracing::info!(interface = %name, tlvs = f.tlvs.len(), "LLDP frame received")
                    }
                    Heard::Nothing { .. } => {
                        tracing::info!(interface = %name, "no LLDP frame before the deadline")
                    }
                    Heard::Failed(e) => tracing::warn!(interface = %name, "LLDP failed: {e}"),
                }
                out.insert(name, heard);
            }
            Err(e) => tracing::warn!("an LLDP listener task failed: {e}"),
        }
    }
    out
}

/// Why an interface cannot be listened on.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// No interface by that name.
    #[error("no interface {name}: {source}")]
    NoInterface {
        /// The interface name.
        name: String,
        /// The lookup's error.
        source: nix::Error,
    },
    /// A step of setting up the socket failed.
    #[error("{step}: {source}")]
    Socket {
        /// What was being done.
        step: &'static str,
        /// The system's error.
        source: std::io::Error,
    },
}

fn open(name: &str) -> Result<AsyncFd<PacketSocket>, OpenError> {
    let step = |step| move |source| OpenError::Socket { step, source };
    let ifindex = nix::net::if_::if_nametoindex(name).map_err(|source| OpenError::NoInterface {
        name: name.to_string(),
        source,
    })?;
    let sock = PacketSocket::open(ifindex, ETHERTYPE).map_err(step("opening a packet socket"))?;
    for group in MULTICAST {
        sock.join_multicast(ifindex, group)
            .map_err(step("joining the LLDP multicast group"))?;
    }
    sock.into_async().map_err(step("registering the socket"))
}

async fn first_frame(sock: AsyncFd<PacketSocket>, malformed: Arc<AtomicUsize>) -> Heard {
    let mut buf = vec![0u8; 9216];
    loop {
        let mut guard = match sock.readable().await {
            Ok(g) => g,
            Err(e) => return Heard::Failed(format!("waiting for frames: {e}")),
        };
        match guard.try_io(|s| s.get_ref().recv(&mut buf)) {
            Ok(Ok(Some(n))) => match tlv::parse_frame(&buf[..n]) {
                Ok(f) => return Heard::Frame(f),
                Err(e) => {
                    malformed.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!("ignoring a malformed LLDP frame: {e}");
                }
            },
            Ok(Ok(None)) => {}
            Ok(Err(e)) => return Heard::Failed(format!("receiving: {e}")),
            Err(_would_block) => {}
        }
    }
}
