//! HTTP client of the conductor's ramdisk endpoints. Several base URLs may be
//! configured: each request tries them in order, starting with the last one
//! that answered, and promotes the first that answers (PROTOCOL.md §2).

use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use reqwest::header::{HeaderMap, HeaderValue, ACCEPT, CONTENT_TYPE};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use super::inspection::{is_ironic, parse_answer, InspectionAnswer};
use super::lookup::{parse_lookup, LookupResult};
use super::{ironic_error_message, ConductorError};

/// An Ironic API microversion.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct ApiVersion(pub u32, pub u32);

impl fmt::Display for ApiVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.0, self.1)
    }
}

impl ApiVersion {
    /// Tokens are issued from this version on.
    pub const TOKEN: ApiVersion = ApiVersion(1, 62);
    /// Lookup and heartbeat with `agent_verify_ca` (auto-TLS).
    pub const AUTO_TLS: ApiVersion = ApiVersion(1, 68);
    /// `continue_inspection` with a token in the answer.
    pub const INSPECTION: ApiVersion = ApiVersion(1, 84);
}

/// The heartbeat document (PROTOCOL.md §2.3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Heartbeat<'a> {
    /// `https://<ip>:<port>`, never changing within a boot.
    pub callback_url: &'a str,
    /// The agent token.
    pub agent_token: &'a str,
    /// PEM of the auto-TLS certificate.
    pub agent_verify_ca: Option<&'a str>,
}

/// Client of one conductor (possibly reachable at several URLs).
#[derive(Debug)]
pub struct ConductorClient {
    http: reqwest::Client,
    urls: Vec<String>,
    preferred: AtomicUsize,
    request_id: Option<String>,
}

impl ConductorClient {
    /// A client for `urls` using `http` (which carries TLS and timeouts).
    /// With no URLs it serves only [`Self::continue_inspection`], whose
    /// callback URLs are given per call.
    pub fn new(http: reqwest::Client, urls: Vec<String>, request_id: Option<String>) -> Self {
        Self {
            http,
            urls,
            preferred: AtomicUsize::new(0),
            request_id,
        }
    }

    /// The base URL that answered last.
    pub fn current_url(&self) -> &str {
        &self.urls[self.preferred.load(Ordering::Relaxed) % self.urls.len()]
    }

    /// The base URLs.
    pub fn urls(&self) -> &[String] {
        &self.urls
    }

    fn headers(&self, version: Option<ApiVersion>) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        h.insert(ACCEPT, HeaderValue::from_static("application/json"));
        if let Some(v) = version {
            if let Ok(v) = HeaderValue::from_str(&v.to_string()) {
                h.insert("X-OpenStack-Ironic-API-Version", v);
            }
        }
        if let Some(id) = self.request_id.as_deref() {
            if let Ok(v) = HeaderValue::from_str(id) {
                h.insert("X-OpenStack-Request-ID", v);
            }
        }
        h
    }

    /// Sends a request to each URL in turn until one answers at the HTTP level.
    async fn send(
        &self,
        method: Method,
        path_and_query: &str,
        version: Option<ApiVersion>,
        body: Option<&Value>,
    ) -> Result<(String, StatusCode, String), ConductorError> {
        let n = self.urls.len();
        let start = self.preferred.load(Ordering::Relaxed);
        let mut last_err = None;
        for i in 0..n {
            let idx = (start + i) % n;
            let url = format!("{}{}", self.urls[idx], path_and_query);
            let mut req = self
                .http
                .request(method.clone(), &url)
                .headers(self.headers(version));
            if let Some(b) = body {
                req = req.body(b.to_string());
            }
            match req.send().await {
                Ok(resp) => {
                    self.preferred.store(idx, Ordering::Relaxed);
                    let status = resp.status();
                    let text = resp.text().await.map_err(|e| ConductorError::Unreachable {
                        url: url.clone(),
                        reason: error_chain(&e),
                    })?;
                    return Ok((url, status, text));
                }
                Err(e) => {
                    last_err = Some(ConductorError::Unreachable {
                        url,
                        reason: error_chain(&e),
                    })
                }
            }
        }
        Err(last_err.unwrap_or_else(|| ConductorError::Invalid {
            url: String::new(),
            reason: "no conductor URL configured".into(),
        }))
    }

    fn check(url: String, status: StatusCode, text: &str) -> Result<(), ConductorError> {
        if status.is_success() {
            Ok(())
        } else {
            Err(ConductorError::Http {
                url,
                status: status.as_u16(),
                message: ironic_error_message(text),
            })
        }
    }

    /// `GET /`: the highest API version the conductor supports.
    pub async fn max_version(&self) -> Result<ApiVersion, ConductorError> {
        let (url, status, text) = self.send(Method::GET, "/", None, None).await?;
        Self::check(url.clone(), status, &text)?;
        let doc: Value = serde_json::from_str(&text).map_err(|e| ConductorError::Invalid {
            url: url.clone(),
            reason: format!("not JSON: {e}"),
        })?;
        let raw = doc
            .pointer("/default_version/version")
            .and_then(Value::as_str)
            .ok_or_else(|| ConductorError::Invalid {
                url: url.clone(),
                reason: "no default_version.version".into(),
            })?;
        agent_base::config::parse_version(raw)
            .map(|(a, b)| ApiVersion(a, b))
            .ok_or(ConductorError::Invalid {
                url,
                reason: format!("unparsable version {raw:?}"),
            })
    }

    /// `GET /v1/lookup`.
    pub async fn lookup(
        &self,
        version: ApiVersion,
        macs: &[String],
        node_uuid: Option<&str>,
    ) -> Result<LookupResult, ConductorError> {
        let mut query = vec![];
        if !macs.is_empty() {
            query.push(format!("addresses={}", macs.join(",")));
        }
        if let Some(u) = node_uuid {
            query.push(format!("node_uuid={u}"));
        }
        let path = format!("/v1/lookup?{}", query.join("&"));
        let (url, status, text) = self.send(Method::GET, &path, Some(version), None).await?;
        Self::check(url.clone(), status, &text)?;
        let doc: Value = serde_json::from_str(&text).map_err(|e| ConductorError::Invalid {
            url: url.clone(),
            reason: format!("not JSON: {e}"),
        })?;
        parse_lookup(&doc).map_err(|e| ConductorError::Invalid {
            url,
            reason: e.to_string(),
        })
    }

    /// `POST /v1/heartbeat/{uuid}`.
    pub async fn heartbeat(
        &self,
        version: ApiVersion,
        node_uuid: &str,
        hb: &Heartbeat<'_>,
    ) -> Result<(), ConductorError> {
        let mut body = json!({
            "callback_url": hb.callback_url,
            "agent_token": hb.agent_token,
            "agent_version": agent_base::AGENT_VERSION,
        });
        if let Some(ca) = hb.agent_verify_ca {
            body["agent_verify_ca"] = json!(ca);
        }
        let path = format!("/v1/heartbeat/{node_uuid}");
        let (url, status, text) = self
            .send(Method::POST, &path, Some(version), Some(&body))
            .await?;
        Self::check(url, status, &text)
    }

    /// `POST` of the inspection document to the callback `url` (not one of
    /// the conductor URLs): at API 1.84 for Ironic's own endpoint, again
    /// without a version when it answers 406 (IPA's way).
    pub async fn continue_inspection(
        &self,
        url: &str,
        body: &str,
    ) -> Result<InspectionAnswer, ConductorError> {
        let mut version = is_ironic(url).then_some(ApiVersion::INSPECTION);
        loop {
            let resp = self
                .http
                .post(url)
                .headers(self.headers(version))
                .body(body.to_string())
                .send()
                .await
                .map_err(|e| ConductorError::Unreachable {
                    url: url.to_string(),
                    reason: error_chain(&e),
                })?;
            let status = resp.status();
            let text = resp.text().await.unwrap_or_default();
            if status == StatusCode::NOT_ACCEPTABLE && version.is_some() {
                tracing::info!(
                    "{url} does not speak API 1.84; posting without a version as IPA does"
                );
                version = None;
                continue;
            }
            Self::check(url.to_string(), status, &text)?;
            return Ok(parse_answer(&text));
        }
    }

    /// Probes each URL until one answers at all (for the advertised address).
    pub async fn probe(&self, timeout: Duration) -> Option<String> {
        for u in &self.urls {
            if tokio::time::timeout(timeout, self.http.get(u).send())
                .await
                .is_ok_and(|r| r.is_ok())
            {
                return Some(u.clone());
            }
        }
        None
    }
}

pub(crate) use agent_base::errfmt::error_chain;
