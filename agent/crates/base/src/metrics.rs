//! Metrics as IPA 13 sends them (`metrics_lib`): when the lookup's
//! `metrics.backend` is `statsd`, a timer per command-API call — names
//! `[global_prefix.][host.]ironic_python_agent.api.app.{get_status,
//! list_commands, get_command, run_command}`, the host reversed by its dots
//! when `prepend_host_reverse` — sent as `NAME:MILLISECONDS|ms` in one UDP
//! datagram to `metrics_statsd.statsd_host:statsd_port`. Ironic passes
//! these from its `[metrics] agent_*` and `[metrics_statsd] agent_*`
//! options. The statsd host is resolved once, when the settings arrive
//! (each lookup), never per request: a name that does not resolve then
//! means no metrics until the next lookup, with a warning. Sending never
//! blocks and never fails a request; a send error is logged at debug level.

use std::net::{SocketAddr, ToSocketAddrs, UdpSocket};
use std::time::Instant;

use serde_json::Value;

/// IPA's logger prefix for the API timers (`__name__` of its `api.app`).
const API_PREFIX: &str = "ironic_python_agent.api.app";

/// Why the lookup's metrics settings cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MetricsError {
    /// A backend other than `noop`, `statsd` or `collector`.
    #[error("metrics backend {0:?} is not noop, statsd or collector")]
    Backend(String),
    /// `statsd_port` out of range.
    #[error("metrics_statsd.statsd_port {0} is not a port")]
    Port(String),
}

/// What the settings ask for, before anything is resolved or bound
/// ([`Settings::parse`] is pure: it reads no network and no file).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// The timers' name prefix (without the timer's own name).
    pub prefix: String,
    /// `host:port` of the statsd server, an IPv6 host in brackets.
    pub target: String,
}

impl Settings {
    /// From the lookup's `config` (`metrics`, `metrics_statsd`); `None` when
    /// the backend sends nothing (`noop`, or IPA's in-memory `collector`).
    pub fn parse(config: &Value, hostname: &str) -> Result<Option<Self>, MetricsError> {
        let m = &config["metrics"];
        match m["backend"].as_str().unwrap_or("noop") {
            "statsd" => {}
            "noop" | "collector" => return Ok(None),
            other => return Err(MetricsError::Backend(other.into())),
        }
        let flag = |k: &str, d: bool| m[k].as_bool().unwrap_or(d);
        let mut parts: Vec<String> = Vec::new();
        if let Some(g) = m["global_prefix"].as_str().filter(|g| !g.is_empty()) {
            parts.push(g.to_string());
        }
        if flag("prepend_host", false) && !hostname.is_empty() {
            parts.push(if flag("prepend_host_reverse", true) {
                hostname.split('.').rev().collect::<Vec<_>>().join(".")
            } else {
                hostname.to_string()
            });
        }
        parts.push(API_PREFIX.into());
        let s = &config["metrics_statsd"];
        let host = s["statsd_host"].as_str().unwrap_or("localhost");
        let port = match &s["statsd_port"] {
            Value::Null => 8125,
            v => v
                .as_u64()
                .or_else(|| v.as_str().and_then(|t| t.parse().ok()))
                .and_then(|p| u16::try_from(p).ok())
                .filter(|p| *p > 0)
                .ok_or_else(|| MetricsError::Port(v.to_string()))?,
        };
        let target = if host.contains(':') && !host.starts_with('[') {
            format!("[{host}]:{port}")
        } else {
            format!("{host}:{port}")
        };
        Ok(Some(Settings {
            prefix: parts.join("."),
            target,
        }))
    }
}

/// A statsd sink for the command API's timers.
#[derive(Debug)]
pub struct Metrics {
    prefix: String,
    /// `host:port` as configured, for the log.
    target: String,
    /// The resolved address and a socket of its family; `None` when the
    /// host did not resolve or no socket could be had.
    sink: Option<(UdpSocket, SocketAddr)>,
}

impl Metrics {
    /// From the lookup's `config` ([`Settings::parse`]), the statsd host
    /// resolved here, once.
    pub fn from_lookup(config: &Value, hostname: &str) -> Result<Option<Self>, MetricsError> {
        let Some(Settings { prefix, target }) = Settings::parse(config, hostname)? else {
            return Ok(None);
        };
        let sink = resolve(&target).and_then(|addr| {
            let bind = if addr.is_ipv6() {
                "[::]:0"
            } else {
                "0.0.0.0:0"
            };
            UdpSocket::bind(bind)
                .and_then(|s| s.set_nonblocking(true).map(|()| (s, addr)))
                .map_err(|e| tracing::warn!("metrics: no UDP socket: {e}"))
                .ok()
        });
        tracing::info!(%target, %prefix, "sending statsd metrics");
        Ok(Some(Self {
            prefix,
            target,
            sink,
        }))
    }

    /// The full name of timer `name`.
    pub fn name(&self, name: &str) -> String {
        format!("{}.{name}", self.prefix)
    }

    /// Sends timer `name` of `ms` milliseconds.
    pub fn timer(&self, name: &str, ms: f64) {
        let line = format!("{}:{ms:.3}|ms", self.name(name));
        if let Some((s, addr)) = &self.sink {
            if let Err(e) = s.send_to(line.as_bytes(), addr) {
                tracing::debug!(target = %self.target, "metrics: {e}");
            }
        }
    }

    /// A timer that sends when dropped.
    pub fn time(self: &std::sync::Arc<Self>, name: &'static str) -> Timer {
        Timer {
            metrics: self.clone(),
            name,
            started: Instant::now(),
        }
    }
}

/// The first address `target` (`host:port`) resolves to, once; `None`
/// (with a warning) when it does not resolve.
fn resolve(target: &str) -> Option<SocketAddr> {
    match target.to_socket_addrs().map(|mut a| a.next()) {
        Ok(Some(addr)) => Some(addr),
        Ok(None) => {
            tracing::warn!(%target, "metrics: the statsd host has no address; no metrics are sent until the next lookup");
            None
        }
        Err(e) => {
            tracing::warn!(%target, "metrics: resolving the statsd host: {e}; no metrics are sent until the next lookup");
            None
        }
    }
}

/// Sends its elapsed time when dropped ([`Metrics::time`]).
#[derive(Debug)]
pub struct Timer {
    metrics: std::sync::Arc<Metrics>,
    name: &'static str,
    started: Instant,
}

impl Drop for Timer {
    fn drop(&mut self) {
        self.metrics
            .timer(self.name, self.started.elapsed().as_secs_f64() * 1000.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn names_and_the_datagram_are_ipas() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let port = rx.local_addr().unwrap().port();
        let cfg = json!({"metrics": {"backend": "statsd", "prepend_host": true,
                                     "prepend_host_reverse": true, "global_prefix": "ironic"},
                         "metrics_statsd": {"statsd_host": "127.0.0.1", "statsd_port": port}});
        let m = Metrics::from_lookup(&cfg, "node1.rack2.example")
            .unwrap()
            .unwrap();
        assert_eq!(
            m.name("run_command"),
            "ironic.example.rack2.node1.ironic_python_agent.api.app.run_command"
        );
        m.timer("get_status", 1.5);
        let mut buf = [0u8; 256];
        rx.set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .unwrap();
        let n = rx.recv(&mut buf).unwrap();
        assert_eq!(
            std::str::from_utf8(&buf[..n]).unwrap(),
            "ironic.example.rack2.node1.ironic_python_agent.api.app.get_status:1.500|ms"
        );
        let plain = json!({"metrics": {"backend": "statsd"}, "metrics_statsd": {}});
        let m = Metrics::from_lookup(&plain, "h").unwrap().unwrap();
        assert_eq!(m.name("x"), "ironic_python_agent.api.app.x");
        assert_eq!(m.target, "localhost:8125");
    }

    #[test]
    fn the_host_is_resolved_once_when_the_settings_arrive() {
        // The address is kept, not the name: a send resolves nothing.
        let cfg = |host: &str| {
            json!({"metrics": {"backend": "statsd"},
                   "metrics_statsd": {"statsd_host": host, "statsd_port": 8125}})
        };
        for (host, want) in [
            ("127.0.0.1", "127.0.0.1:8125"),
            ("::1", "[::1]:8125"),
            ("[::1]", "[::1]:8125"),
        ] {
            let m = Metrics::from_lookup(&cfg(host), "h").unwrap().unwrap();
            let (sock, addr) = m.sink.as_ref().expect("a resolved sink");
            assert_eq!(addr.to_string(), want, "{host}");
            assert_eq!(sock.local_addr().unwrap().is_ipv6(), addr.is_ipv6());
        }
        // /etc/hosts answers for localhost: no DNS query leaves the machine.
        let m = Metrics::from_lookup(&cfg("localhost"), "h")
            .unwrap()
            .unwrap();
        assert!(m.sink.as_ref().unwrap().1.ip().is_loopback());
    }

    #[test]
    fn noop_sends_nothing_and_bad_settings_are_named() {
        assert!(Metrics::from_lookup(&json!({}), "h").unwrap().is_none());
        assert!(
            Metrics::from_lookup(&json!({"metrics": {"backend": "noop"}}), "h")
                .unwrap()
                .is_none()
        );
        let e =
            Metrics::from_lookup(&json!({"metrics": {"backend": "graphite"}}), "h").unwrap_err();
        assert_eq!(
            e.to_string(),
            "metrics backend \"graphite\" is not noop, statsd or collector"
        );
        let e = Metrics::from_lookup(
            &json!({"metrics": {"backend": "statsd"}, "metrics_statsd": {"statsd_port": 70000}}),
            "h",
        )
        .unwrap_err();
        assert!(e.to_string().contains("70000"), "{e}");
    }
}
