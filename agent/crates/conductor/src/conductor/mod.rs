//! Talking to the conductor (Ironic's ramdisk endpoints, PROTOCOL.md §2): API
//! version negotiation, lookup, heartbeat, and the inspection callback
//! (§4.4). Errors are typed so the main loop can tell "look up again" (token
//! wiped) from "retry later".

pub(crate) mod client;
#[cfg(any(test, feature = "test-support"))]
pub mod fake;
pub mod inspection;
pub mod lookup;
pub mod lookup_keys;

use std::future::Future;

pub use client::{ApiVersion, ConductorClient, Heartbeat};
pub use inspection::InspectionAnswer;
pub use lookup::{LookupConfig, LookupResult};

/// What the agent needs from the conductor: the seam between the
/// lookup/heartbeat logic (`agent::agent`) or the inspection's retries
/// (`agent::inspect`) and HTTP. [`ConductorClient`] is the real one; tests
/// script a fake (`fake::ScriptedConductor`).
pub trait Conductor: Send + Sync + 'static {
    /// The conductor URLs, in the order they are tried.
    fn urls(&self) -> &[String];
    /// The highest API version the conductor supports.
    fn max_version(&self) -> impl Future<Output = Result<ApiVersion, ConductorError>> + Send;
    /// `GET /v1/lookup` by MACs (and node UUID).
    fn lookup(
        &self,
        version: ApiVersion,
        macs: &[String],
        node_uuid: Option<&str>,
    ) -> impl Future<Output = Result<LookupResult, ConductorError>> + Send;
    /// `POST /v1/heartbeat/{node_uuid}`.
    fn heartbeat(
        &self,
        version: ApiVersion,
        node_uuid: &str,
        hb: &Heartbeat<'_>,
    ) -> impl Future<Output = Result<(), ConductorError>> + Send;
    /// `POST` of the inspection document (`body`, JSON text) to one
    /// callback URL: Ironic's `/v1/continue_inspection` at API 1.84 (once
    /// more without a version if it answers 406), any other URL without a
    /// version. One attempt; retrying is the caller's.
    fn continue_inspection(
        &self,
        url: &str,
        body: &str,
    ) -> impl Future<Output = Result<InspectionAnswer, ConductorError>> + Send;
}

/// A shared conductor (the session owns one; tests keep a handle on it).
impl<T: Conductor> Conductor for std::sync::Arc<T> {
    fn urls(&self) -> &[String] {
        (**self).urls()
    }

    fn max_version(&self) -> impl Future<Output = Result<ApiVersion, ConductorError>> + Send {
        (**self).max_version()
    }

    fn lookup(
        &self,
        version: ApiVersion,
        macs: &[String],
        node_uuid: Option<&str>,
    ) -> impl Future<Output = Result<LookupResult, ConductorError>> + Send {
        (**self).lookup(version, macs, node_uuid)
    }

    fn heartbeat(
        &self,
        version: ApiVersion,
        node_uuid: &str,
        hb: &Heartbeat<'_>,
    ) -> impl Future<Output = Result<(), ConductorError>> + Send {
        (**self).heartbeat(version, node_uuid, hb)
    }

    fn continue_inspection(
        &self,
        url: &str,
        body: &str,
    ) -> impl Future<Output = Result<InspectionAnswer, ConductorError>> + Send {
        (**self).continue_inspection(url, body)
    }
}

impl Conductor for ConductorClient {
    fn urls(&self) -> &[String] {
        ConductorClient::urls(self)
    }

    fn max_version(&self) -> impl Future<Output = Result<ApiVersion, ConductorError>> + Send {
        ConductorClient::max_version(self)
    }

    fn lookup(
        &self,
        version: ApiVersion,
        macs: &[String],
        node_uuid: Option<&str>,
    ) -> impl Future<Output = Result<LookupResult, ConductorError>> + Send {
        ConductorClient::lookup(self, version, macs, node_uuid)
    }

    fn heartbeat(
        &self,
        version: ApiVersion,
        node_uuid: &str,
        hb: &Heartbeat<'_>,
    ) -> impl Future<Output = Result<(), ConductorError>> + Send {
        ConductorClient::heartbeat(self, version, node_uuid, hb)
    }

    fn continue_inspection(
        &self,
        url: &str,
        body: &str,
    ) -> impl Future<Output = Result<InspectionAnswer, ConductorError>> + Send {
        ConductorClient::continue_inspection(self, url, body)
    }
}

/// A failed conductor call.
#[derive(Debug, thiserror::Error)]
pub enum ConductorError {
    /// No answer (DNS, connect, TLS, timeout).
    #[error("cannot reach the conductor at {url}: {reason}")]
    Unreachable {
        /// Request URL.
        url: String,
        /// Cause, with its chain.
        reason: String,
    },
    /// An HTTP error status.
    #[error("{url} answered HTTP {status}: {message}")]
    Http {
        /// Request URL.
        url: String,
        /// Status code.
        status: u16,
        /// Ironic's `faultstring`, else the body.
        message: String,
    },
    /// A 2xx answer we cannot use.
    #[error("unusable answer from {url}: {reason}")]
    Invalid {
        /// Request URL.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The conductor's API is too old for agent tokens.
    #[error("the conductor's API version {0} is older than 1.62 and cannot issue agent tokens")]
    TooOld(ApiVersion),
}

impl ConductorError {
    /// HTTP status, if the conductor answered.
    pub fn status(&self) -> Option<u16> {
        match self {
            Self::Http { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// Whether the conductor no longer knows our token (it was wiped at a power
    /// action or the end of an operation): the agent must look up again.
    pub fn is_invalid_token(&self) -> bool {
        match self {
            Self::Http {
                status: 400,
                message,
                ..
            } => {
                let m = message.to_ascii_lowercase();
                m.contains("invalid or missing agent token")
                    || m.contains("agent token is required")
            }
            _ => false,
        }
    }
}

/// Extracts Ironic's error text: `{"error_message": "<json with faultstring>"}`,
/// or `{"error": "..."}`, else the raw body (shortened).
pub fn ironic_error_message(body: &str) -> String {
    if let Ok(v) = serde_json::from_str::<serde_json::Value>(body) {
        if let Some(inner) = v.get("error_message") {
            let parsed = inner
                .as_str()
                .and_then(|s| serde_json::from_str::<serde_json::Value>(s).ok())
                .unwrap_or_else(|| inner.clone());
            if let Some(f) = parsed.get("faultstring").and_then(|f| f.as_str()) {
                return f.to_string();
            }
            if let Some(s) = inner.as_str() {
                return s.to_string();
            }
        }
        if let Some(e) = v.get("error").and_then(|e| e.as_str()) {
            return e.to_string();
        }
    }
    let mut s: String = body.chars().take(300).collect();
    if s.len() < body.len() {
        s.push('…');
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_ironic_error_bodies() {
        let body = r#"{"error_message": "{\"faultcode\": \"Client\", \"faultstring\": \"Invalid or missing agent token received.\", \"debuginfo\": null}"}"#;
        assert_eq!(
            ironic_error_message(body),
            "Invalid or missing agent token received."
        );
        assert_eq!(
            ironic_error_message(r#"{"error": "Resource could not be found."}"#),
            "Resource could not be found."
        );
        assert_eq!(ironic_error_message("plain"), "plain");
        let e = ConductorError::Http {
            url: "u".into(),
            status: 400,
            message: ironic_error_message(body),
        };
        assert!(e.is_invalid_token());
    }
}
