//! Conductor discovery by mDNS (`ipa-api-url=mdns`, PROTOCOL.md §3.2): browse
//! `_openstack._tcp.local.` for the instance `baremetal` (or
//! `baremetal-introspection`), then build the URL as IPA does: TXT
//! `protocol` (absent ⇒ `http` on port 80, else `https`) and `path`; the
//! host is the address when the SRV target is a `.local.` name, else the
//! SRV host name. Loopback addresses are skipped; IPv4 is preferred.
//!
//! TXT properties named `ipa_<option>` are configuration overrides, as
//! IPA 13 reads them ([`Found::overrides`]; which ones apply is the
//! configuration's business: `Config::apply_mdns_overrides`).
//!
//! The browse runs on mdns-sd's own thread; [`discover`] waits on its
//! channel from a blocking task.

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

/// DNS-SD service type Ironic registers under.
pub const SERVICE_TYPE: &str = "_openstack._tcp.local.";

/// What a resolved advertisement says.
#[derive(Debug, Clone)]
pub struct Advert {
    /// SRV target host name.
    pub host: String,
    /// SRV port.
    pub port: u16,
    /// A and AAAA addresses.
    pub addresses: Vec<IpAddr>,
    /// TXT properties.
    pub txt: HashMap<String, String>,
}

/// The base URL an advertisement names (IPA's rules, PROTOCOL.md §3.2).
/// TXT `protocol` must be `http` or `https`, `path` empty or an absolute
/// path without spaces or control characters, and the SRV host (when its
/// address is not used) a host name: mDNS is not authenticated, and IPA
/// would build whatever URL they spell.
pub fn url_of(a: &Advert) -> Result<String> {
    let protocol = match a.txt.get("protocol").map(String::as_str) {
        None | Some("") => if a.port == 80 { "http" } else { "https" }.to_string(),
        Some(p) if p.eq_ignore_ascii_case("http") || p.eq_ignore_ascii_case("https") => {
            p.to_ascii_lowercase()
        }
        Some(p) => bail!(
            "the advertisement of {}: TXT protocol {p:?} is not http or https",
            a.host
        ),
    };
    let path = a.txt.get("path").map(String::as_str).unwrap_or("");
    if !(path.is_empty()
        || (path.starts_with('/') && !path.chars().any(|c| c.is_whitespace() || c.is_control())))
    {
        bail!(
            "the advertisement of {}: TXT path {path:?} is not an absolute URL path",
            a.host
        );
    }
    let host = if a.host.ends_with(".local.") || a.host.ends_with(".local") {
        let mut addrs: Vec<IpAddr> = a
            .addresses
            .iter()
            .copied()
            .filter(|ip| !ip.is_loopback())
            .collect();
        addrs.sort_by_key(|ip| (ip.is_ipv6(), *ip));
        match addrs.first() {
            Some(IpAddr::V4(v4)) => v4.to_string(),
            Some(IpAddr::V6(v6)) => format!("[{v6}]"),
            None => bail!("the advertisement of {} has no usable address", a.host),
        }
    } else {
        let name = a.host.trim_end_matches('.');
        if name.is_empty()
            || !name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'))
        {
            bail!(
                "the advertisement's SRV host {:?} is not a host name",
                a.host
            );
        }
        name.to_string()
    };
    Ok(format!("{protocol}://{host}:{}{path}", a.port))
}

/// What an advertisement gives the agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    /// The base URL ([`url_of`]).
    pub url: String,
    /// `ipa_<option>` TXT properties as `(option, value)`, sorted.
    pub overrides: Vec<(String, String)>,
}

/// The `ipa_` TXT properties of `a`, prefix removed, sorted by name.
pub fn overrides_of(a: &Advert) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = a
        .txt
        .iter()
        .filter_map(|(k, v)| Some((k.strip_prefix("ipa_")?.to_string(), v.clone())))
        .filter(|(k, _)| !k.is_empty())
        .collect();
    out.sort();
    out
}

/// Browses for `instance` (`baremetal`) for up to `timeout` on the
/// interfaces with the addresses `interfaces` (`[mdns] interfaces`; empty:
/// every interface) and returns its URL (on a blocking thread).
pub async fn discover(instance: &str, timeout: Duration, interfaces: &[IpAddr]) -> Result<String> {
    Ok(find(instance, timeout, interfaces).await?.url)
}

/// [`discover`] with the advertisement's configuration overrides.
pub async fn find(instance: &str, timeout: Duration, interfaces: &[IpAddr]) -> Result<Found> {
    let instance = instance.to_string();
    let interfaces = interfaces.to_vec();
    tokio::task::spawn_blocking(move || find_blocking(&instance, timeout, &interfaces))
        .await
        .context("the mDNS browse task failed")?
}

/// [`find`] on the calling thread (which decides the network namespace).
pub fn find_blocking(instance: &str, timeout: Duration, interfaces: &[IpAddr]) -> Result<Found> {
    let daemon = mdns_sd::ServiceDaemon::new().context("starting mDNS")?;
    if !interfaces.is_empty() {
        // IPA's `[mdns] interfaces`: only the interfaces with these addresses.
        daemon
            .disable_interface(mdns_sd::IfKind::All)
            .context("restricting mDNS to [mdns] interfaces")?;
        for ip in interfaces {
            daemon
                .enable_interface(mdns_sd::IfKind::Addr(*ip))
                .with_context(|| format!("enabling mDNS on the interface of {ip}"))?;
        }
        tracing::info!(?interfaces, "mDNS browses only on the [mdns] interfaces");
    }
    let events = daemon.browse(SERVICE_TYPE).context("browsing mDNS")?;
    let want = format!("{instance}.{SERVICE_TYPE}");
    let deadline = Instant::now() + timeout;
    let result = loop {
        match events.recv_deadline(deadline) {
            Ok(mdns_sd::ServiceEvent::ServiceResolved(s)) if s.fullname == want => {
                let advert = Advert {
                    host: s.host.clone(),
                    port: s.port,
                    addresses: s.addresses.iter().map(|a| a.to_ip_addr()).collect(),
                    txt: s
                        .txt_properties
                        .iter()
                        .map(|p| (p.key().to_string(), p.val_str().to_string()))
                        .collect(),
                };
                tracing::info!(?advert, "mDNS advertisement found");
                break url_of(&advert).map(|url| Found {
                    url,
                    overrides: overrides_of(&advert),
                });
            }
            Ok(_) => {}
            Err(_) => {
                break Err(anyhow::anyhow!(
                    "no {want} advertisement within {timeout:?}"
                ))
            }
        }
    };
    let _ = daemon.shutdown();
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    fn advert(host: &str, port: u16, txt: &[(&str, &str)]) -> Advert {
        Advert {
            host: host.into(),
            port,
            addresses: vec![
                "127.0.0.1".parse().unwrap(),
                "fd00::5".parse().unwrap(),
                "192.0.2.5".parse().unwrap(),
            ],
            txt: txt
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }

    #[test]
    fn urls_follow_ipa_rules() {
        assert_eq!(
            url_of(&advert("conductor.local.", 6385, &[("protocol", "http")])).unwrap(),
            "http://192.0.2.5:6385"
        );
        assert_eq!(
            url_of(&advert("conductor.local.", 443, &[("path", "/baremetal")])).unwrap(),
            "https://192.0.2.5:443/baremetal"
        );
        assert_eq!(
            url_of(&advert("conductor.local.", 80, &[])).unwrap(),
            "http://192.0.2.5:80"
        );
        assert_eq!(
            url_of(&advert("ironic.example.com.", 6385, &[])).unwrap(),
            "https://ironic.example.com:6385"
        );
        let mut v6 = advert("c.local.", 6385, &[("protocol", "http")]);
        v6.addresses = vec!["fd00::5".parse().unwrap()];
        assert_eq!(url_of(&v6).unwrap(), "http://[fd00::5]:6385");
        v6.addresses = vec!["127.0.0.1".parse().unwrap()];
        assert!(url_of(&v6).is_err());
    }

    #[test]
    fn txt_protocol_and_path_must_make_an_http_url() {
        // An empty protocol is IPA's "not given".
        assert_eq!(
            url_of(&advert("c.local.", 80, &[("protocol", "")])).unwrap(),
            "http://192.0.2.5:80"
        );
        assert_eq!(
            url_of(&advert("c.local.", 6385, &[("protocol", "HTTPS")])).unwrap(),
            "https://192.0.2.5:6385"
        );
        for (k, v) in [
            ("protocol", "file"),
            ("protocol", "http://evil/"),
            ("path", "baremetal"),
            ("path", "/a b"),
            ("path", "/a\nHost: x"),
        ] {
            let e = url_of(&advert("c.local.", 6385, &[(k, v)])).unwrap_err();
            assert!(
                e.to_string().contains(&format!("TXT {k}")),
                "{k}={v:?}: {e}"
            );
        }
        for host in ["evil.example/x@", "a b.example.", "."] {
            let e = url_of(&advert(host, 6385, &[])).unwrap_err();
            assert!(e.to_string().contains("SRV host"), "{host}: {e}");
        }
    }

    #[test]
    fn ipa_txt_properties_are_overrides() {
        let a = advert(
            "conductor.local.",
            6385,
            &[
                ("protocol", "https"),
                ("ipa_ntp_server", "10.0.0.5"),
                ("ipa_debug", "1"),
                ("ipa_", "x"),
            ],
        );
        assert_eq!(
            overrides_of(&a),
            [
                ("debug".to_string(), "1".to_string()),
                ("ntp_server".into(), "10.0.0.5".into())
            ]
        );
    }
}
