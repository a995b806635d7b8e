//! How an image request reaches its server: straight, or through an HTTP
//! proxy (`image_info.proxies`, else the `http_proxy`/`https_proxy`/
//! `all_proxy` environment, as reqwest chose before), skipped for the hosts
//! of `no_proxy`; and the credentials it carries (`Authorization`, basic
//! auth from user info in the image URL, `Proxy-Authorization` from the
//! proxy URL's).
//!
//! `no_proxy` matching is reqwest's: comma-separated entries, `*` for
//! every host, an IP address for that address, a domain (with or without a
//! leading dot) for itself and its subdomains; no CIDR ranges.

use base64::Engine as _;
use percent_encoding::percent_decode_str;
use reqwest::Url;

use crate::image::ImageError;

/// An HTTP proxy to send a request through.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Proxy {
    /// Host (an IPv6 address in brackets).
    pub host: String,
    /// Port.
    pub port: u16,
    /// `Proxy-Authorization` value, from the proxy URL's user info.
    pub authorization: Option<String>,
    /// An `https://` proxy: reached over TLS.
    pub tls: bool,
}

/// `Basic` credentials from a percent-encoded user and password.
fn basic(user: &str, password: Option<&str>) -> String {
    let user = percent_decode_str(user).decode_utf8_lossy();
    let password = password
        .map(|p| percent_decode_str(p).decode_utf8_lossy())
        .unwrap_or_default();
    let token = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    format!("Basic {token}")
}

/// The URL's user info as an `Authorization` value (reqwest did the same:
/// an explicit `Authorization` setting takes precedence).
pub(super) fn userinfo_authorization(url: &Url) -> Option<String> {
    (!url.username().is_empty() || url.password().is_some())
        .then(|| basic(url.username(), url.password()))
}

/// Parses a proxy setting: `http://[user:pass@]host[:port]`,
/// `https://…` (the proxy is reached over TLS), or the same without a
/// scheme (http). Other schemes (socks) are refused.
pub(super) fn parse_proxy(spec: &str) -> Result<Proxy, ImageError> {
    let bad = |why: String| ImageError::InvalidParams(format!("proxy {spec:?}: {why}"));
    let with_scheme = if spec.contains("://") {
        spec.to_string()
    } else {
        format!("http://{spec}")
    };
    let url = Url::parse(&with_scheme).map_err(|e| bad(e.to_string()))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(bad(format!(
            "only http:// and https:// proxies are supported, not {}://",
            url.scheme()
        )));
    }
    let host = url
        .host_str()
        .filter(|h| !h.is_empty())
        .ok_or_else(|| bad("no host".into()))?;
    Ok(Proxy {
        host: host.to_string(),
        port: url.port_or_known_default().unwrap_or(80),
        authorization: userinfo_authorization(&url),
        tls: url.scheme() == "https",
    })
}

/// The first non-empty one of these environment variables.
fn env_var(names: &[&str]) -> Option<String> {
    names
        .iter()
        .filter_map(|n| std::env::var(n).ok())
        .find(|v| !v.trim().is_empty())
}

/// Whether `host` (as in a URL: IPv6 in brackets) is listed in `no_proxy`.
pub(super) fn no_proxy_matches(no_proxy: &str, host: &str) -> bool {
    let host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_ascii_lowercase();
    let host_ip = host.parse::<std::net::IpAddr>().ok();
    no_proxy.split(',').map(str::trim).any(|entry| {
        if entry == "*" {
            return true;
        }
        let entry = entry
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_ascii_lowercase();
        if let Ok(ip) = entry.parse::<std::net::IpAddr>() {
            return host_ip == Some(ip);
        }
        let domain = entry.trim_start_matches('.');
        !domain.is_empty()
            && host_ip.is_none()
            && (host == domain
                || host
                    .strip_suffix(domain)
                    .is_some_and(|rest| rest.ends_with('.')))
    })
}

/// The proxies the download was given (`image_info.proxies`,
/// `image_info.no_proxy`).
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Configured<'a> {
    pub(super) http: Option<&'a str>,
    pub(super) https: Option<&'a str>,
    pub(super) no_proxy: Option<&'a str>,
}

/// The proxy for `url`, if one applies: the configured ones when any is
/// set (and then the environment is not read, as with reqwest), else the
/// environment's.
pub(super) fn proxy_for(url: &Url, given: Configured<'_>) -> Result<Option<Proxy>, ImageError> {
    let host = url.host_str().unwrap_or_default();
    let https = url.scheme() == "https";
    let (spec, no_proxy) = if given.http.is_some() || given.https.is_some() {
        let spec = if https { given.https } else { given.http };
        (spec.map(str::to_string), given.no_proxy.map(str::to_string))
    } else {
        let spec = if https {
            env_var(&["https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"])
        } else {
            env_var(&["http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"])
        };
        (spec, env_var(&["no_proxy", "NO_PROXY"]))
    };
    let Some(spec) = spec else {
        return Ok(None);
    };
    if no_proxy.is_some_and(|n| no_proxy_matches(&n, host)) {
        return Ok(None);
    }
    parse_proxy(&spec).map(Some)
}

/// `host:port` as a request target or `Host` value (IPv6 in brackets, as
/// the URL has it).
pub(super) fn authority(url: &Url) -> String {
    let host = url.host_str().unwrap_or_default();
    match url.port() {
        Some(p) => format!("{host}:{p}"),
        None => host.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_proxy_matches_hosts_domains_and_addresses() {
        let list = "localhost, .example.org,example.net,10.0.0.1,[::1]";
        for host in [
            "localhost",
            "a.example.org",
            "example.org",
            "b.c.example.net",
            "example.net",
            "10.0.0.1",
            "[::1]",
            "LOCALHOST",
        ] {
            assert!(no_proxy_matches(list, host), "{host}");
        }
        for host in [
            "notexample.net",
            "example.com",
            "10.0.0.2",
            "[::2]",
            "localhost.other",
        ] {
            assert!(!no_proxy_matches(list, host), "{host}");
        }
        assert!(no_proxy_matches("*", "anything"));
        assert!(!no_proxy_matches("", "anything"));
    }

    #[test]
    fn proxies_and_their_credentials_are_parsed() {
        assert_eq!(
            parse_proxy("http://u%40x:p%3Aw@[::1]:3128").unwrap(),
            Proxy {
                host: "[::1]".into(),
                port: 3128,
                authorization: Some(format!(
                    "Basic {}",
                    base64::engine::general_purpose::STANDARD.encode("u@x:p:w")
                )),
                tls: false,
            }
        );
        assert_eq!(parse_proxy("proxy.local:8080").unwrap().port, 8080);
        assert_eq!(parse_proxy("http://proxy.local").unwrap().port, 80);
        let https = parse_proxy("https://proxy.local").unwrap();
        assert_eq!((https.port, https.tls), (443, true));
        let err = parse_proxy("socks5://proxy.local:1080").unwrap_err();
        assert!(
            err.to_string().contains("only http:// and https://"),
            "{err}"
        );
    }

    #[test]
    fn the_configured_proxy_applies_per_scheme_unless_no_proxy_lists_the_host() {
        let given = Configured {
            http: Some("http://p1:3128"),
            https: Some("http://p2:3129"),
            no_proxy: Some("images.local"),
        };
        let get = |u: &str| proxy_for(&Url::parse(u).unwrap(), given).unwrap();
        assert_eq!(get("http://a/x").unwrap().host, "p1");
        assert_eq!(get("https://a/x").unwrap().port, 3129);
        assert_eq!(get("https://images.local/x"), None);
        let only_http = Configured {
            http: Some("http://p1:3128"),
            ..Configured::default()
        };
        assert_eq!(
            proxy_for(&Url::parse("https://a/x").unwrap(), only_http).unwrap(),
            None
        );
    }

    #[test]
    fn url_user_info_becomes_basic_auth() {
        let u = Url::parse("http://us%20er:pa%2Fss@h/x").unwrap();
        assert_eq!(
            userinfo_authorization(&u).unwrap(),
            format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode("us er:pa/ss")
            )
        );
        assert_eq!(
            userinfo_authorization(&Url::parse("http://h/x").unwrap()),
            None
        );
        assert_eq!(
            authority(&Url::parse("http://[::1]:81/x").unwrap()),
            "[::1]:81"
        );
        assert_eq!(authority(&Url::parse("https://h/x").unwrap()), "h");
    }
}
