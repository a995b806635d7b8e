//! Which protocol a registry is spoken to with. HTTPS always when TLS is
//! verified. With `--tls-verify=false` podman (which IPA runs) also uses a
//! registry that speaks plain HTTP (labs, disconnected mirrors): it tries
//! HTTPS first and falls back to HTTP when that fails. This module does
//! the same with one `GET /v2/` each way, and names a plain-HTTP registry
//! in the error when verification is on.
//!
//! A plain-HTTP answer counts only when it is a registry's: status 200 or
//! 401, or the `Docker-Distribution-Api-Version` header. An HTTPS server
//! asked in plain HTTP (Go's "Client sent an HTTP request to an HTTPS
//! server", a 400) does not.

use std::time::Duration;

/// How long each probe may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(30);

/// The protocol of a registry's URLs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scheme {
    /// `https://`.
    Https,
    /// `http://`: only with `--tls-verify=false`.
    Http,
}

impl Scheme {
    /// The URL scheme.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Scheme::Https => "https",
            Scheme::Http => "http",
        }
    }
}

/// Whether a plain-HTTP answer to `GET /v2/` is a registry's.
pub(crate) fn is_registry_answer(status: u16, api_version_header: bool) -> bool {
    status == 200 || status == 401 || api_version_header
}

/// The scheme for `registry` when TLS is not verified: HTTPS when it
/// answers HTTPS at all (any status), else HTTP when it answers there as a
/// registry, else HTTPS (whose error the pull then reports).
pub(crate) async fn unverified(http: &reqwest::Client, registry: &str) -> Scheme {
    let https = http
        .get(format!("https://{registry}/v2/"))
        .timeout(PROBE_TIMEOUT)
        .send()
        .await;
    match https {
        Ok(_) => Scheme::Https,
        Err(e) if answers_plain_http(http, registry).await => {
            tracing::debug!(registry, error = %e, "HTTPS failed; the registry answers plain HTTP");
            Scheme::Http
        }
        Err(_) => Scheme::Https,
    }
}

/// Whether `registry` answers `GET /v2/` in plain HTTP as a registry.
pub(crate) async fn answers_plain_http(http: &reqwest::Client, registry: &str) -> bool {
    match http
        .get(format!("http://{registry}/v2/"))
        .timeout(PROBE_TIMEOUT)
        .send()
        .await
    {
        Ok(r) => is_registry_answer(
            r.status().as_u16(),
            r.headers().contains_key("docker-distribution-api-version"),
        ),
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_registrys_answer_counts() {
        assert!(is_registry_answer(200, false));
        assert!(is_registry_answer(401, false));
        assert!(is_registry_answer(404, true));
        // An HTTPS server asked in plain HTTP.
        assert!(!is_registry_answer(400, false));
        assert!(!is_registry_answer(404, false));
    }
}
