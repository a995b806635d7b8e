//! The agent's foundations, below everything that touches hardware:
//! [`config`] (kernel command line, IPA's config files and flags),
//! [`tls`] (with the pinned self-signed certificate rule), [`net`],
//! [`discovery`] (finding the conductor by mDNS), [`errfmt`], [`tool`]
//! (running external tools), [`timesync`] (the clock before TLS), [`rtc`]
//! (the hardware clock), [`metrics`] (statsd timers), [`bootphases`] (the
//! seconds since boot of each start-up phase).

pub mod bootphases;
pub mod config;
pub mod discovery;
pub mod errfmt;
pub mod metrics;
pub mod net;
pub mod rtc;
pub mod timesync;
pub mod tls;
pub mod tool;

/// The agent's version, as reported to the conductor and on `GET /v1`.
pub const AGENT_VERSION: &str = env!("CARGO_PKG_VERSION");
