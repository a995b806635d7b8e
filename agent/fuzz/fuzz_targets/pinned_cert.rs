//! The CA file (`ipa-cafile`, PEM) read into the agent's server verifier:
//! WebPKI over its certificates plus exact matches of them
//! (`tls::pinned`), then each of its certificates presented as a server's
//! for a DNS name and an address at a time from the input. A pinned
//! certificate accepted that WebPKI would refuse is within its validity
//! period.
#![no_main]

use agent_base::tls::{ca_file_verifier, pinned::validity};
use libfuzzer_sys::fuzz_target;
use rustls::client::danger::ServerCertVerifier;
use rustls::pki_types::{ServerName, UnixTime};

// The input: `[now: u32 seconds since 2000][PEM text]`
fuzz_target!(|data: &[u8]| {
    let Some((now, pem)) = data.split_first_chunk::<4>() else {
        return;
    };
    let now = 946_684_800 + u64::from(u32::from_be_bytes(*now));
    let Ok(verifier) = ca_file_verifier(pem) else {
        return;
    };
    let Ok(certs) = agent_base::tls::pem_certificates(pem) else {
        panic!("the verifier was built from certificates that do not parse");
    };
    let names = [
        ServerName::try_from("ironic.example").expect("a name"),
        ServerName::IpAddress(std::net::IpAddr::from([192, 0, 2, 1]).into()),
    ];
    for cert in &certs {
        for name in &names {
            let at = UnixTime::since_unix_epoch(std::time::Duration::from_secs(now));
            if verifier.verify_server_cert(cert, &[], name, &[], at).is_ok() {
                if let Some((not_before, not_after)) = validity(cert.as_ref()) {
                    let now = now as i64;
                    assert!(
                        not_before <= now && now <= not_after,
                        "accepted outside {not_before}..{not_after} at {now}"
                    );
                }
            }
        }
    }
});
