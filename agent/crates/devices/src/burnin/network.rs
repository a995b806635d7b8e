//! Network burn-in between two nodes (IPA's `burnin_network`, there fio's
//! `net` engine): the *writer* listens on `streams` consecutive TCP ports
//! from `port` (fio: port 9000, 16 jobs, each on its own port) and sends
//! for `runtime`; the *reader* connects to its partner on the same ports
//! and reads until the writer closes. Then the roles swap. The bytes are
//! plain TCP payload as fio's `net` engine sends, so either side may be IPA.
//!
//! The reader retries refused connections (the partner may not listen
//! yet) every [`Plan::retry`] until [`Plan::pairing_timeout`]; IPA waits
//! 30 s between tries and forever. A stream that moves no byte, a writer
//! that no reader joins in time, or a connection broken before the end
//! fails the step naming the partner and the port.

use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, Ipv6Addr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use serde::Serialize;

use super::{BurninError, Stop};

/// The two roles, as `agent_burnin_fio_network_config.role` names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Listens and sends.
    Writer,
    /// Connects and receives.
    Reader,
}

impl Role {
    /// `writer` or `reader`.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "writer" => Some(Self::Writer),
            "reader" => Some(Self::Reader),
            _ => None,
        }
    }

    fn other(self) -> Self {
        match self {
            Self::Writer => Self::Reader,
            Self::Reader => Self::Writer,
        }
    }
}

/// What to run.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Our role in the first half.
    pub role: Role,
    /// The partner's host name or address.
    pub partner: String,
    /// How long the writer sends.
    pub runtime: Duration,
    /// First port.
    pub port: u16,
    /// Parallel streams (one port each).
    pub streams: u16,
    /// Address the writer listens on.
    pub listen: IpAddr,
    /// Pause between refused connections.
    pub retry: Duration,
    /// How long to wait for the partner.
    pub pairing_timeout: Duration,
}

impl Plan {
    /// IPA's fio job: port 9000, 16 streams, listening on every address.
    pub fn ipa(role: Role, partner: String, runtime: Duration, pairing_timeout: Duration) -> Self {
        Self {
            role,
            partner,
            runtime,
            port: 9000,
            streams: 16,
            listen: IpAddr::V6(Ipv6Addr::UNSPECIFIED),
            retry: Duration::from_secs(1),
            pairing_timeout,
        }
    }
}

/// One direction's result.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Direction {
    /// Our role.
    pub role: Role,
    /// Bytes moved over all streams.
    pub bytes: u64,
    /// Seconds from the first connection to the last close.
    pub seconds: f64,
    /// Bytes per second.
    pub bytes_per_second: f64,
}

/// Both directions.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct NetworkReport {
    /// The partner.
    pub partner: String,
    /// First our role, then the other.
    pub directions: Vec<Direction>,
}

/// Runs both halves with the partner.
pub fn run(plan: &Plan, stop: Stop<'_>) -> Result<NetworkReport, BurninError> {
    let mut directions = Vec::new();
    for role in [plan.role, plan.role.other()] {
        tracing::info!(?role, partner = %plan.partner, "network burn-in: starting a direction");
        let d = match role {
            Role::Writer => write(plan, stop)?,
            Role::Reader => read(plan, stop)?,
        };
        tracing::info!(
            ?role,
            bytes = d.bytes,
            rate = d.bytes_per_second,
            "network burn-in: direction done"
        );
        directions.push(d);
    }
    Ok(NetworkReport {
        partner: plan.partner.clone(),
        directions,
    })
}

fn direction(role: Role, bytes: u64, t: Instant) -> Direction {
    let seconds = t.elapsed().as_secs_f64();
    Direction {
        role,
        bytes,
        seconds,
        bytes_per_second: bytes as f64 / seconds.max(1e-9),
    }
}

fn join_all<T: Send>(
    f: impl Fn(u16) -> Result<T, BurninError> + Sync,
    plan: &Plan,
) -> Result<Vec<T>, BurninError> {
    std::thread::scope(|s| {
        let f = &f;
        let handles: Vec<_> = (0..plan.streams)
            .map(|i| s.spawn(move || f(plan.port.wrapping_add(i))))
            .collect();
        let mut out = Vec::new();
        let mut errors = Vec::new();
        for h in handles {
            match h.join() {
                Ok(Ok(v)) => out.push(v),
                Ok(Err(e)) => errors.push(e.to_string()),
                Err(_) => errors.push("a stream's thread panicked".into()),
            }
        }
        if errors.is_empty() {
            Ok(out)
        } else {
            Err(BurninError::failed(
                format!("network burn-in with {}", plan.partner),
                errors.join("; "),
            ))
        }
    })
}

/// The writer: listens on every port, sends for `runtime` once connected.
fn write(plan: &Plan, stop: Stop<'_>) -> Result<Direction, BurninError> {
    let t = Instant::now();
    let sent = join_all(
        |port| {
            let addr = SocketAddr::new(plan.listen, port);
            let until = Instant::now() + plan.pairing_timeout;
            let listener = loop {
                let bound = TcpListener::bind(addr).or_else(|e| {
                    // No IPv6 here: every IPv4 address instead.
                    if plan.listen == IpAddr::V6(Ipv6Addr::UNSPECIFIED) {
                        TcpListener::bind(SocketAddr::from(([0, 0, 0, 0], port)))
                    } else {
                        Err(e)
                    }
                });
                match bound {
                    Ok(l) => break l,
                    // The port is still held (a partner on this host that
                    // has not let go yet): try again for a while.
                    Err(e)
                        if e.kind() == ErrorKind::AddrInUse
                            && Instant::now() < until
                            && !stop.aborted() =>
                    {
                        std::thread::sleep(Duration::from_millis(100));
                    }
                    Err(e) => {
                        return Err(BurninError::failed(
                            format!("port {port}"),
                            format!("cannot listen: {e}"),
                        ))
                    }
                }
            };
            listener
                .set_nonblocking(true)
                .map_err(|e| BurninError::failed(format!("port {port}"), e.to_string()))?;
            let mut conn = loop {
                match listener.accept() {
                    Ok((c, _)) => break c,
                    Err(e) if e.kind() == ErrorKind::WouldBlock => {
                        if stop.aborted() {
                            return Ok(0);
                        }
                        if Instant::now() >= until {
                            return Err(BurninError::failed(
                                format!("port {port}"),
                                format!("no reader connected within {:?}", plan.pairing_timeout),
                            ));
                        }
                        std::thread::sleep(Duration::from_millis(50));
                    }
                    Err(e) => {
                        return Err(BurninError::failed(
                            format!("port {port}"),
                            format!("accepting: {e}"),
                        ))
                    }
                }
            };
            // One reader per port: the port is free again at once.
            drop(listener);
            conn.set_nonblocking(false).ok();
            conn.set_write_timeout(Some(Duration::from_secs(30))).ok();
            let buf: Vec<u8> = (0..(128 << 10) / 8)
                .flat_map(|i| super::pattern_word(u64::from(port), i).to_le_bytes())
                .collect();
            let end = Instant::now() + plan.runtime;
            let mut sent = 0u64;
            while Instant::now() < end && !stop.aborted() {
                conn.write_all(&buf).map_err(|e| {
                    BurninError::failed(
                        format!("port {port}"),
                        format!("sending after {sent} bytes: {e}"),
                    )
                })?;
                sent += buf.len() as u64;
            }
            let _ = conn.shutdown(std::net::Shutdown::Write);
            // Wait for the reader to close, so it has everything.
            let mut sink = [0u8; 64];
            conn.set_read_timeout(Some(Duration::from_secs(10))).ok();
            let _ = conn.read(&mut sink);
            Ok(sent)
        },
        plan,
    )?;
    if stop.aborted() {
        return Err(BurninError::Aborted(t.elapsed().as_secs_f64()));
    }
    Ok(direction(Role::Writer, sent.iter().sum(), t))
}

/// The reader: connects to every port (retrying while refused), reads to
/// the end.
fn read(plan: &Plan, stop: Stop<'_>) -> Result<Direction, BurninError> {
    let t = Instant::now();
    let got = join_all(
        |port| {
            let name = format!("{}:{port}", plan.partner);
            let addrs: Vec<SocketAddr> = (plan.partner.as_str(), port)
                .to_socket_addrs()
                .map_err(|e| BurninError::failed(&name, format!("cannot resolve: {e}")))?
                .collect();
            let until = Instant::now() + plan.pairing_timeout;
            let mut conn = loop {
                let mut last = None;
                let mut found = None;
                for a in &addrs {
                    match TcpStream::connect_timeout(a, Duration::from_secs(5)) {
                        Ok(c) => {
                            found = Some(c);
                            break;
                        }
                        Err(e) => last = Some(e),
                    }
                }
                if let Some(c) = found {
                    break c;
                }
                if stop.aborted() {
                    return Ok(0);
                }
                if Instant::now() >= until {
                    return Err(BurninError::failed(
                        &name,
                        format!(
                            "no writer to connect to within {:?} (last error: {})",
                            plan.pairing_timeout,
                            last.map_or("none".into(), |e| e.to_string())
                        ),
                    ));
                }
                std::thread::sleep(plan.retry);
            };
            conn.set_read_timeout(Some(Duration::from_secs(30))).ok();
            let mut buf = vec![0u8; 128 << 10];
            let mut got = 0u64;
            loop {
                if stop.aborted() {
                    return Ok(got);
                }
                match conn.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => got += n as u64,
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(e) => {
                        return Err(BurninError::failed(
                            &name,
                            format!("receiving after {got} bytes: {e}"),
                        ))
                    }
                }
            }
            if got == 0 {
                return Err(BurninError::failed(
                    &name,
                    "the writer closed without sending",
                ));
            }
            Ok(got)
        },
        plan,
    )?;
    if stop.aborted() {
        return Err(BurninError::Aborted(t.elapsed().as_secs_f64()));
    }
    Ok(direction(Role::Reader, got.iter().sum(), t))
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicBool;

    use super::*;

    /// A first port with `n` free ports after it on loopback.
    fn free_ports(n: u16) -> u16 {
        loop {
            let base = fastrand::u16(20000..60000);
            let ok = (0..n).all(|i| TcpListener::bind(("127.0.0.1", base + i)).is_ok());
            if ok {
                return base;
            }
        }
    }

    fn plan(role: Role, port: u16) -> Plan {
        Plan {
            role,
            partner: "127.0.0.1".into(),
            runtime: Duration::from_millis(300),
            port,
            streams: 3,
            listen: IpAddr::from([127, 0, 0, 1]),
            retry: Duration::from_millis(50),
            pairing_timeout: Duration::from_secs(20),
        }
    }

    #[test]
    fn two_partners_swap_roles_and_both_directions_move_data() {
        let port = free_ports(3);
        let cancel = AtomicBool::new(false);
        let stop = Stop {
            deadline: None,
            cancel: &cancel,
        };
        let (a, b) = std::thread::scope(|s| {
            let a = s.spawn(|| run(&plan(Role::Writer, port), stop));
            let b = s.spawn(|| run(&plan(Role::Reader, port), stop));
            (a.join().unwrap(), b.join().unwrap())
        });
        let (a, b) = (a.unwrap(), b.unwrap());
        assert_eq!(a.directions[0].role, Role::Writer);
        assert_eq!(b.directions[0].role, Role::Reader);
        // What one side sent, the other received, in both directions.
        assert_eq!(a.directions[0].bytes, b.directions[0].bytes);
        assert_eq!(a.directions[1].bytes, b.directions[1].bytes);
        assert!(a.directions[0].bytes > 0 && a.directions[1].bytes > 0);
    }

    #[test]
    fn a_missing_partner_fails_naming_it() {
        let port = free_ports(3);
        let cancel = AtomicBool::new(false);
        let stop = Stop {
            deadline: None,
            cancel: &cancel,
        };
        let mut p = plan(Role::Reader, port);
        p.pairing_timeout = Duration::from_millis(300);
        let e = run(&p, stop).unwrap_err().to_string();
        assert!(e.contains(&format!("127.0.0.1:{port}")), "{e}");
        assert!(e.contains("no writer to connect to"), "{e}");
        let mut p = plan(Role::Writer, port);
        p.pairing_timeout = Duration::from_millis(300);
        let e = run(&p, stop).unwrap_err().to_string();
        assert!(e.contains("no reader connected"), "{e}");
    }
}
