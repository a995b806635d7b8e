//! The configuration read from kernel parameters.

use super::*;

#[test]
fn reads_ipa_parameters() {
    let p = KernelParams::parse(
        "ipa-api-url=https://10.0.0.1:6385/,https://10.0.0.2:6385 BOOTIF=01-52-54-00-12-34-56 \
         ipa-insecure=1 ipa-agent-token=abc ipa-advertise-host=10.0.0.5 ipa-advertise-port=9998 \
         ipa-global-request-id=req-1 ipa-debug=1 ipa-collect-lldp=yes ipa-lldp-timeout=12 \
         ipa-image-download-max-duration=3600 \
         ipa-inspection-callback-url=https://10.0.0.1:6385/v1/continue_inspection \
         ipa-inspection-collectors=default,lldp unknown-thing=1",
    );
    let (c, errors) = Config::from_kernel_params(&p);
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(
        c.api_urls,
        ApiUrls::Urls(vec![
            "https://10.0.0.1:6385".into(),
            "https://10.0.0.2:6385".into()
        ])
    );
    assert_eq!(c.bootif.as_deref(), Some("01-52-54-00-12-34-56"));
    assert!(c.insecure && c.debug && c.collect_lldp);
    assert_eq!(c.agent_token.as_deref(), Some("abc"));
    assert_eq!(c.advertise_host, Some("10.0.0.5".parse().unwrap()));
    assert_eq!(c.advertise_port, 9998);
    assert_eq!(c.global_request_id.as_deref(), Some("req-1"));
    assert_eq!(c.lldp_timeout, Duration::from_secs(12));
    assert_eq!(
        c.image_download_max_duration,
        Some(Duration::from_secs(3600))
    );
    assert_eq!(c.inspection_collectors, vec!["default", "lldp"]);
    assert!(c.inspection_collectors_given);
    assert!(c
        .inspection_callback_url
        .unwrap()
        .ends_with("/v1/continue_inspection"));
}

#[test]
fn mdns_and_defaults() {
    let (c, errors) = Config::from_kernel_params(&KernelParams::parse("ipa-api-url=mdns"));
    assert!(errors.is_empty());
    assert_eq!(c.api_urls, ApiUrls::Mdns);
    assert_eq!(c.advertise_port, 9999);
    assert!(c.auto_tls);
    assert_eq!(c.lookup_timeout, Duration::from_secs(600));
    assert!(!c.collect_lldp);
    assert_eq!(c.lldp_timeout, Duration::from_secs(30)); // IPA's lldp_timeout
}

#[test]
fn malformed_values_keep_defaults_and_are_reported() {
    let (c, errors) = Config::from_kernel_params(&KernelParams::parse(
        "ipa-api-url=ftp://x ipa-advertise-port=http ipa-debug=perhaps ipa-advertise-host=nohost \
         ipa-standalone=1",
    ));
    assert_eq!(c.api_urls, ApiUrls::None);
    assert_eq!(c.advertise_port, 9999);
    assert!(!c.debug);
    let keys: Vec<_> = errors.iter().map(|e| e.key.as_str()).collect();
    assert_eq!(
        keys,
        [
            "ipa-api-url",
            "ipa-advertise-host",
            "ipa-advertise-port",
            "ipa-debug",
            "ipa-standalone"
        ]
    );
    assert!(errors[0].to_string().contains("does not start with http"));
}

#[test]
fn mdns_overrides_are_limited_to_ipas_default_list() {
    let mut c = Config::default();
    let notes = c.apply_mdns_overrides(&[
        ("debug".into(), "1".into()),
        (
            "inspection_callback_url".into(),
            "https://10.0.0.9:5050/v1/continue".into(),
        ),
        ("ntp_server".into(), "bad value".into()),
    ]);
    assert_eq!(
        c.inspection_callback_url.as_deref(),
        Some("https://10.0.0.9:5050/v1/continue")
    );
    assert_eq!(c.ntp_server, None);
    assert!(
        notes[0].contains("ipa_debug skipped: not in the [mdns] allowed_overrides"),
        "{notes:?}"
    );
    assert!(
        notes[2].contains("ipa_ntp_server=\"bad value\" skipped"),
        "{notes:?}"
    );
    c.apply_mdns_overrides(&[("ntp_server".into(), "10.0.0.5".into())]);
    assert_eq!(c.ntp_server.as_deref(), Some("10.0.0.5"));

    // `[mdns] allowed_overrides` decides: an empty list blocks all, an
    // option listed that this agent does not take is skipped, saying so.
    let mut c = Config {
        mdns: groups::MdnsOptions {
            allowed_overrides: vec!["debug".into()],
            ..groups::MdnsOptions::default()
        },
        ..Config::default()
    };
    let notes = c.apply_mdns_overrides(&[
        ("debug".into(), "1".into()),
        ("ntp_server".into(), "10.0.0.5".into()),
    ]);
    assert!(!c.debug && c.ntp_server.is_none(), "{notes:?}");
    assert!(notes[0].contains("this agent takes only"), "{notes:?}");
    assert!(notes[1].contains("not in the [mdns] allowed_overrides (debug)"));
}
