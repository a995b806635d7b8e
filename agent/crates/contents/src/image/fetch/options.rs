//! How the image download reaches its server: TLS settings, proxies,
//! credentials, timeouts and retries (`HttpOptions`), checked before
//! anything is downloaded.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use reqwest::header::HeaderValue;

use super::route;
use crate::image::ImageError;

/// How to reach the image server.
#[derive(Debug, Clone)]
pub struct HttpOptions {
    /// Skip TLS verification (`ipa-insecure`).
    pub insecure: bool,
    /// CA bundle to trust instead of the system's.
    pub cafile: Option<PathBuf>,
    /// Client certificate presented when a server asks (IPA's
    /// `certfile`/`keyfile`).
    pub client_certificate: Option<agent_base::config::TlsFiles>,
    /// Proxy for http URLs (`image_info.proxies.http`).
    pub http_proxy: Option<String>,
    /// Proxy for https URLs.
    pub https_proxy: Option<String>,
    /// Hosts that bypass the proxies (`image_info.no_proxy`).
    pub no_proxy: Option<String>,
    /// Full `Authorization` header value.
    pub authorization: Option<String>,
    /// Longest time without a byte before the connection counts as dropped.
    pub stall_timeout: Duration,
    /// Limit on the whole download (`ipa-image-download-max-duration`).
    pub total_timeout: Option<Duration>,
    /// Retries after a failure that made no progress.
    pub retries: u32,
    /// Longest wait between retries (back-off starts at a second).
    pub retry_interval: Duration,
    /// Most connections one image download opens (`parallel.rs`; 1: a
    /// single stream, as IPA's).
    pub connections: usize,
}

impl Default for HttpOptions {
    fn default() -> Self {
        Self {
            insecure: false,
            cafile: None,
            client_certificate: None,
            http_proxy: None,
            https_proxy: None,
            no_proxy: None,
            authorization: None,
            stall_timeout: Duration::from_secs(60),
            total_timeout: None,
            retries: 9,
            retry_interval: Duration::from_secs(10),
            connections: agent_base::config::DEFAULT_IMAGE_DOWNLOAD_CONNECTIONS as usize,
        }
    }
}

impl HttpOptions {
    /// The proxies of the agent's environment (`http_proxy`, `https_proxy`,
    /// `no_proxy`, lower case first, as curl and Python's requests and
    /// urlopen read them) in place of any set: for downloads IPA makes with
    /// its environment's proxies (`inject_files`' URLs, NIC firmware).
    pub fn use_environment_proxies(&mut self) {
        self.http_proxy = env_proxy("http_proxy");
        self.https_proxy = env_proxy("https_proxy");
        self.no_proxy = env_proxy("no_proxy");
    }

    /// `Authorization: Basic …` from a user and password.
    pub fn set_basic_auth(&mut self, user: &str, password: &str) {
        let token = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        self.authorization = Some(format!("Basic {token}"));
    }

    /// Checks that the `Authorization` value can be sent as a header (no
    /// CR, LF or other control bytes).
    pub fn check_authorization(&self) -> Result<(), ImageError> {
        match &self.authorization {
            Some(a) if HeaderValue::from_str(a).is_err() => Err(ImageError::InvalidParams(
                "the Authorization value is not a valid header".into(),
            )),
            _ => Ok(()),
        }
    }

    /// The proxies given, as `route.rs` reads them.
    pub(super) fn proxies(&self) -> route::Configured<'_> {
        route::Configured {
            http: self.http_proxy.as_deref(),
            https: self.https_proxy.as_deref(),
            no_proxy: self.no_proxy.as_deref(),
        }
    }

    /// Checks every setting that can be wrong before anything is
    /// downloaded: the TLS settings (CA file, client certificate) and the
    /// proxies; returns the TLS client configuration.
    pub fn check(&self) -> Result<Arc<rustls::ClientConfig>, ImageError> {
        for p in [&self.http_proxy, &self.https_proxy].into_iter().flatten() {
            route::parse_proxy(p)?;
        }
        self.check_authorization()?;
        agent_base::tls::client_config_with(
            self.insecure,
            self.cafile.as_deref(),
            self.client_certificate.as_ref(),
        )
        .map(Arc::new)
        .map_err(|e| ImageError::InvalidParams(format!("TLS settings: {e:#}")))
    }
}

/// The environment variable `name` (else its upper-case form), if set
/// and not empty.
fn env_proxy(name: &str) -> Option<String> {
    [name.to_string(), name.to_uppercase()]
        .iter()
        .find_map(|n| std::env::var(n).ok())
        .filter(|v| !v.trim().is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_are_checked_before_any_download() {
        let ok = HttpOptions {
            http_proxy: Some("http://u:p@[::1]:3128".into()),
            https_proxy: Some("https://proxy.local:3129".into()),
            ..HttpOptions::default()
        };
        assert!(ok.check().is_ok());
        for bad in [
            HttpOptions {
                http_proxy: Some("socks5://proxy.local:1080".into()),
                ..HttpOptions::default()
            },
            HttpOptions {
                authorization: Some("Basic x\r\nX-Injected: 1".into()),
                ..HttpOptions::default()
            },
            HttpOptions {
                cafile: Some("/nonexistent/ca.pem".into()),
                ..HttpOptions::default()
            },
        ] {
            let err = bad.check().unwrap_err();
            assert!(matches!(err, ImageError::InvalidParams(_)), "{err}");
        }
    }

    #[test]
    fn basic_auth_header() {
        let mut o = HttpOptions::default();
        o.set_basic_auth("user", "pass");
        assert_eq!(o.authorization.as_deref(), Some("Basic dXNlcjpwYXNz"));
    }
}
