//! An mDNS advertisement as the browse hands it over (SRV host and port,
//! addresses, TXT properties): the conductor URL built from it and the
//! `ipa_` overrides applied to a default configuration. An accepted URL is
//! an http(s) URL on the advertised port; overrides change only the two
//! options IPA lets mDNS set.
#![no_main]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use agent_base::config::Config;
use agent_base::discovery::{overrides_of, url_of, Advert};
use libfuzzer_sys::fuzz_target;

/// `[port u16][n addresses u8][n × (kind u8, 4 or 16 bytes)][host\0][k=v\0]…`
fn advert(data: &[u8]) -> Option<Advert> {
    let (port, mut rest) = data.split_first_chunk::<2>()?;
    let (&n, r) = rest.split_first()?;
    rest = r;
    let mut addresses = Vec::new();
    for _ in 0..n.min(8) {
        let (&kind, r) = rest.split_first()?;
        if kind & 1 == 0 {
            let (b, r) = r.split_first_chunk::<4>()?;
            addresses.push(IpAddr::V4(Ipv4Addr::from(*b)));
            rest = r;
        } else {
            let (b, r) = r.split_first_chunk::<16>()?;
            addresses.push(IpAddr::V6(Ipv6Addr::from(*b)));
            rest = r;
        }
    }
    let text = String::from_utf8_lossy(rest);
    let mut fields = text.split('\0');
    let host = fields.next()?.to_string();
    let txt = fields
        .map(|kv| match kv.split_once('=') {
            Some((k, v)) => (k.to_string(), v.to_string()),
            None => (kv.to_string(), String::new()),
        })
        .collect();
    Some(Advert {
        host,
        port: u16::from_be_bytes(*port),
        addresses,
        txt,
    })
}

fuzz_target!(|data: &[u8]| {
    let Some(a) = advert(data) else { return };
    if let Ok(url) = url_of(&a) {
        let (scheme, rest) = url.split_once("://").expect("a scheme");
        assert!(scheme == "http" || scheme == "https", "{url}");
        assert!(!url.chars().any(|c| c.is_whitespace() || c.is_control()), "{url}");
        let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
        assert!(authority.ends_with(&format!(":{}", a.port)), "{url}");
        assert!(!authority.contains(['@', '?', '#']), "{url}");
        assert_eq!(path, a.txt.get("path").map(String::as_str).unwrap_or(""));
    }
    let overrides = overrides_of(&a);
    assert!(overrides.windows(2).all(|w| w[0] <= w[1]));
    let mut config = Config::default();
    let before = format!("{config:?}");
    let lines = config.apply_mdns_overrides(&overrides);
    assert_eq!(lines.len(), overrides.len());
    let mut reset = config.clone();
    reset.inspection_callback_url = Config::default().inspection_callback_url;
    reset.ntp_server = Config::default().ntp_server;
    assert_eq!(format!("{reset:?}"), before, "an override set another option");
});
