//! Real handshakes on loopback against certificates made as operators make
//! them (openssl, as Ironic's documentation shows) and odd ones (rcgen).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use super::*;

/// `openssl req -x509 -newkey rsa:2048 -nodes -subj /CN=<cn> [-addext …]`
/// into `dir`: (certificate, key) paths.
fn openssl_cert(dir: &Path, name: &str, cn: &str, san: Option<&str>) -> (PathBuf, PathBuf) {
    let (cert, key) = (
        dir.join(format!("{name}.crt")),
        dir.join(format!("{name}.key")),
    );
    let mut cmd = std::process::Command::new("openssl");
    cmd.args([
        "req", "-x509", "-newkey", "rsa:2048", "-days", "30", "-nodes",
    ])
    .args(["-subj", &format!("/CN={cn}")])
    .arg("-keyout")
    .arg(&key)
    .arg("-out")
    .arg(&cert);
    if let Some(san) = san {
        cmd.args(["-addext", &format!("subjectAltName = {san}")]);
    }
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (cert, key)
}

/// Serves TLS with `cert`/`key` on loopback, answering every connection
/// with a minimal HTTP reply; returns the port.
async fn serve(cert: Vec<u8>, key: Vec<u8>) -> u16 {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&cert)
        .collect::<Result<_, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_slice(&key).unwrap();
    let cfg = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(certs, key)
    .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(cfg));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                use tokio::io::{AsyncReadExt, AsyncWriteExt};
                if let Ok(mut tls) = acceptor.accept(tcp).await {
                    let mut buf = [0u8; 1024];
                    let _ = tls.read(&mut buf).await;
                    let _ = tls
                        .write_all(
                            b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok",
                        )
                        .await;
                    let _ = tls.shutdown().await;
                }
            });
        }
    });
    port
}

/// GET `https://<host>:<port>/` trusting `cafile`: the body or the error.
async fn get(host: &str, port: u16, cafile: &Path) -> Result<String, String> {
    let client =
        crate::tls::http_client(false, Some(cafile), std::time::Duration::from_secs(10)).unwrap();
    let mut req = client.get(format!("https://{host}:{port}/"));
    if host == "localhost" {
        // reqwest resolves localhost itself; keep the name for SNI and checks.
        req = req.header("host", "localhost");
    }
    match req.send().await {
        Ok(r) => Ok(r.text().await.map_err(|e| e.to_string())?),
        Err(e) => Err(crate::tls::certificate_error(&e)
            .map(|c| format!("certificate: {c}"))
            .unwrap_or_else(|| crate::errfmt::error_chain(&e))),
    }
}

#[tokio::test]
async fn a_self_signed_ca_true_certificate_in_the_ca_file_is_trusted() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = openssl_cert(dir.path(), "ironic", "127.0.0.1", Some("IP:127.0.0.1"));
    let text = std::process::Command::new("openssl")
        .args(["x509", "-noout", "-text", "-in"])
        .arg(&cert)
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&text.stdout).contains("CA:TRUE"),
        "openssl made a CA:TRUE certificate, as the issue describes"
    );
    let port = serve(std::fs::read(&cert).unwrap(), std::fs::read(&key).unwrap()).await;
    assert_eq!(get("127.0.0.1", port, &cert).await, Ok("ok".into()));

    // Another certificate as the CA file: refused, and recognised as a
    // certificate error (permanent, not retried).
    let (other, _) = openssl_cert(dir.path(), "other", "127.0.0.1", Some("IP:127.0.0.1"));
    let e = get("127.0.0.1", port, &other).await.unwrap_err();
    assert!(e.starts_with("certificate: "), "{e}");

    // The pinned certificate still has to name the host.
    let e = get("localhost", port, &cert).await.unwrap_err();
    assert!(
        e.contains("certificate: ") && e.contains("NotValidForName"),
        "{e}"
    );
}

#[tokio::test]
async fn without_a_subject_alt_name_the_cn_names_a_dns_host_as_openssl_allows() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = openssl_cert(dir.path(), "cn-only", "localhost", None);
    let port = serve(std::fs::read(&cert).unwrap(), std::fs::read(&key).unwrap()).await;
    assert_eq!(get("localhost", port, &cert).await, Ok("ok".into()));
    // An IP address is never matched against the CN (OpenSSL neither).
    let e = get("127.0.0.1", port, &cert).await.unwrap_err();
    assert!(e.contains("NotValidForName"), "{e}");
}

#[tokio::test]
async fn an_expired_pinned_certificate_is_refused() {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params.subject_alt_names = vec![rcgen::SanType::IpAddress("127.0.0.1".parse().unwrap())];
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params.not_before = rcgen::date_time_ymd(2020, 1, 1);
    params.not_after = rcgen::date_time_ymd(2021, 1, 1);
    let cert = params.self_signed(&key).unwrap();
    assert_eq!(
        validity(cert.der()),
        Some((1_577_836_800, 1_609_459_200)),
        "notBefore 2020-01-01, notAfter 2021-01-01"
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.crt");
    std::fs::write(&path, cert.pem()).unwrap();
    let port = serve(cert.pem().into_bytes(), key.serialize_pem().into_bytes()).await;
    let e = get("127.0.0.1", port, &path).await.unwrap_err();
    assert!(e.contains("certificate: ") && e.contains("Expired"), "{e}");
}

#[test]
fn malformed_certificates_have_no_validity_or_cn() {
    for bad in [
        &b""[..],
        &[0x30],
        &[0x30, 0x84, 0xff, 0xff, 0xff, 0xff],
        &[0x30, 2, 0x30, 0],
    ] {
        assert_eq!(validity(bad), None);
        assert_eq!(subject_cn(bad), None);
    }
    assert_eq!(time(0x17, b"491231235959Z"), Some(2_524_607_999));
    assert_eq!(time(0x17, b"500101000000Z"), Some(-631_152_000));
    assert_eq!(time(0x18, b"20200101000000Z"), Some(1_577_836_800));
    assert_eq!(time(0x17, b"2001010000+0Z"), None);
    assert_eq!(time(0x18, b"20201301000000Z"), None);
}
