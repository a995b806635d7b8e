//! TLS for both directions.
//!
//! * Auto-TLS (PROTOCOL.md §8): at start the agent makes an EC P-384 key and a
//!   self-signed certificate whose SubjectAltName is the advertised IP, valid
//!   from one hour ago (clock skew) for 30 days, serves HTTPS with it at the
//!   TLS minimum the conductor asks for, and sends the PEM as
//!   `agent_verify_ca`. Ironic pins that certificate and checks the IP.
//! * Outbound (conductor, images): the CA bundle given (`cafile`), else the
//!   system bundle, else none; `ipa-insecure` disables verification. A
//!   server certificate that is itself in the `cafile` is accepted even when
//!   it is marked as a CA, as OpenSSL does ([`pinned`]). [`certificate_error`]
//!   tells a refused certificate (permanent) from other connection errors.

pub mod pinned;

use std::net::IpAddr;
use std::path::Path;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use rcgen::{CertificateParams, DistinguishedName, DnType, KeyPair, SanType, SerialNumber};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// A certificate and its key.
#[derive(Debug, Clone)]
pub struct AgentCertificate {
    /// PEM text, sent as `agent_verify_ca`.
    pub pem: String,
    /// DER of the certificate.
    pub der: CertificateDer<'static>,
    key: Arc<PrivatePkcs8KeyDer<'static>>,
}

/// Where system CA bundles live on Debian-, Red Hat- and SUSE-like systems.
const SYSTEM_BUNDLES: [&str; 3] = [
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/ca-bundle.pem",
];

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Generates the self-signed certificate for `ip`.
pub fn generate_certificate(
    ip: IpAddr,
    hostname: &str,
    curve: crate::config::TlsCurve,
) -> Result<AgentCertificate> {
    let alg = match curve {
        crate::config::TlsCurve::P256 => &rcgen::PKCS_ECDSA_P256_SHA256,
        crate::config::TlsCurve::P384 => &rcgen::PKCS_ECDSA_P384_SHA384,
    };
    let key = KeyPair::generate_for(alg).context("generating the TLS key")?;
    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, hostname);
    params.distinguished_name = dn;
    params.subject_alt_names = vec![SanType::IpAddress(ip)];
    let now = time::OffsetDateTime::now_utc();
    params.not_before = now - time::Duration::hours(1);
    params.not_after = now + time::Duration::days(30);
    let mut serial = [0u8; 16];
    serial[..].copy_from_slice(uuid::Uuid::new_v4().as_bytes());
    serial[0] &= 0x7f;
    params.serial_number = Some(SerialNumber::from_slice(&serial));
    let cert = params
        .self_signed(&key)
        .context("signing the TLS certificate")?;
    Ok(AgentCertificate {
        pem: cert.pem(),
        der: cert.der().clone(),
        key: Arc::new(PrivatePkcs8KeyDer::from(key.serialize_der())),
    })
}

/// The TLS versions for a conductor-requested minimum (`"1.2"` or `"1.3"`).
fn versions(min: Option<&str>) -> Result<&'static [&'static rustls::SupportedProtocolVersion]> {
    static TLS13: [&rustls::SupportedProtocolVersion; 1] = [&rustls::version::TLS13];
    static TLS12_13: [&rustls::SupportedProtocolVersion; 2] =
        [&rustls::version::TLS13, &rustls::version::TLS12];
    match min.map(str::trim) {
        None | Some("") | Some("1.2") => Ok(&TLS12_13),
        Some("1.3") => Ok(&TLS13),
        Some(other) => bail!("unsupported TLS minimum version {other:?} (expected 1.2 or 1.3)"),
    }
}

/// OpenSSL names of the TLS 1.2 suites rustls offers, with rustls' names.
const TLS12_SUITES: [(&str, rustls::CipherSuite); 6] = [
    (
        "ECDHE-ECDSA-AES256-GCM-SHA384",
        rustls::CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
    ),
    (
        "ECDHE-ECDSA-AES128-GCM-SHA256",
        rustls::CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
    ),
    (
        "ECDHE-ECDSA-CHACHA20-POLY1305",
        rustls::CipherSuite::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
    ),
    (
        "ECDHE-RSA-AES256-GCM-SHA384",
        rustls::CipherSuite::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
    ),
    (
        "ECDHE-RSA-AES128-GCM-SHA256",
        rustls::CipherSuite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
    ),
    (
        "ECDHE-RSA-CHACHA20-POLY1305",
        rustls::CipherSuite::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
    ),
];

/// The provider for the lookup's `tls_cipher_suites` (an OpenSSL cipher
/// list for TLS 1.2, as IPA hands it to `SSLContext.set_ciphers`): the TLS
/// 1.2 suites it names, in its order, and every TLS 1.3 suite (OpenSSL's
/// cipher list does not touch TLS 1.3 either). Names may also be the IANA
/// ones; OpenSSL aliases and operators (`HIGH`, `!aNULL`, `@STRENGTH`) and
/// suites rustls lacks are skipped. A list that names none of the suites
/// rustls has is refused, as OpenSSL refuses it ("no cipher match"):
/// serving with other suites than the operator allowed would be worse.
fn provider_for(cipher_suites: Option<&str>) -> Result<Arc<rustls::crypto::CryptoProvider>> {
    let base = rustls::crypto::ring::default_provider();
    let Some(list) = cipher_suites.map(str::trim).filter(|l| !l.is_empty()) else {
        return Ok(Arc::new(base));
    };
    let mut chosen: Vec<rustls::SupportedCipherSuite> = Vec::new();
    for name in list.split([':', ',', ' ']).map(str::trim) {
        let wanted = TLS12_SUITES
            .iter()
            .find(|(openssl, suite)| {
                name.eq_ignore_ascii_case(openssl)
                    || suite
                        .as_str()
                        .is_some_and(|iana| name.eq_ignore_ascii_case(iana))
            })
            .map(|(_, suite)| *suite);
        let found = base
            .cipher_suites
            .iter()
            .find(|s| Some(s.suite()) == wanted && !chosen.contains(s));
        if let Some(s) = found {
            chosen.push(*s);
        }
    }
    if chosen.is_empty() {
        bail!(
            "tls_cipher_suites {list:?} names no TLS 1.2 cipher suite this agent has (it has {})",
            TLS12_SUITES.map(|(n, _)| n).join(":")
        );
    }
    chosen.extend(
        base.cipher_suites
            .iter()
            .filter(|s| s.version() == &rustls::version::TLS13),
    );
    Ok(Arc::new(rustls::crypto::CryptoProvider {
        cipher_suites: chosen,
        ..base
    }))
}

/// Server configuration for the command API: the TLS minimum version
/// (`tls_min_version`) and TLS 1.2 cipher suites (`tls_cipher_suites`) the
/// lookup asked for.
pub fn server_config(
    cert: &AgentCertificate,
    min_version: Option<&str>,
    cipher_suites: Option<&str>,
) -> Result<rustls::ServerConfig> {
    let key = PrivateKeyDer::Pkcs8(cert.key.clone_key());
    serving(
        vec![cert.der.clone()],
        key,
        min_version,
        cipher_suites,
        || "loading the TLS certificate".into(),
    )
}

/// The command API's configuration serving `certs` with `key`; a pair
/// rustls refuses is said with `refused`'s words.
fn serving(
    certs: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
    min_version: Option<&str>,
    cipher_suites: Option<&str>,
    refused: impl FnOnce() -> String,
) -> Result<rustls::ServerConfig> {
    let mut cfg = rustls::ServerConfig::builder_with_provider(provider_for(cipher_suites)?)
        .with_protocol_versions(versions(min_version)?)
        .context("choosing TLS versions")?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .with_context(refused)?;
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(cfg)
}

/// The command API's configuration with the operator's own certificate
/// chain and key (`listen_tls`), as [`server_config`] otherwise.
pub fn server_config_from_files(
    files: &crate::config::TlsFiles,
    min_version: Option<&str>,
    cipher_suites: Option<&str>,
) -> Result<rustls::ServerConfig> {
    let (certs, key) = load_pair(files)?;
    serving(certs, key, min_version, cipher_suites, || {
        format!(
            "{} does not go with {}",
            files.key.display(),
            files.cert.display()
        )
    })
}

/// A PEM certificate chain and its private key, read and checked.
pub fn load_pair(
    files: &crate::config::TlsFiles,
) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)> {
    use rustls::pki_types::pem::PemObject;
    let pem = std::fs::read(&files.cert)
        .with_context(|| format!("reading the certificate {}", files.cert.display()))?;
    let certs = pem_certificates(&pem)
        .with_context(|| format!("loading the certificate {}", files.cert.display()))?;
    let key = PrivateKeyDer::from_pem_file(&files.key)
        .with_context(|| format!("loading the private key {}", files.key.display()))?;
    Ok((certs, key))
}

/// Client configuration for talking to the conductor and image servers.
pub fn client_config(insecure: bool, cafile: Option<&Path>) -> Result<rustls::ClientConfig> {
    client_config_with(insecure, cafile, None)
}

/// [`client_config`] presenting the client certificate `identity`
/// (IPA's `certfile`/`keyfile`) when a server asks for one.
pub fn client_config_with(
    insecure: bool,
    cafile: Option<&Path>,
    identity: Option<&crate::config::TlsFiles>,
) -> Result<rustls::ClientConfig> {
    let mut cfg = server_verified(insecure, cafile)?;
    if let Some(files) = identity {
        let (certs, key) = load_pair(files)?;
        let signer = provider()
            .key_provider
            .load_private_key(key)
            .with_context(|| format!("using the private key {}", files.key.display()))?;
        cfg.client_auth_cert_resolver = Arc::new(SingleClientCert(Arc::new(
            rustls::sign::CertifiedKey::new(certs, signer),
        )));
    }
    Ok(cfg)
}

/// Presents one certificate to every server that asks.
#[derive(Debug)]
struct SingleClientCert(Arc<rustls::sign::CertifiedKey>);

impl rustls::client::ResolvesClientCert for SingleClientCert {
    fn resolve(
        &self,
        _root_hint_subjects: &[&[u8]],
        _sigschemes: &[rustls::SignatureScheme],
    ) -> Option<Arc<rustls::sign::CertifiedKey>> {
        Some(self.0.clone())
    }

    fn has_certs(&self) -> bool {
        true
    }
}

/// The server verification part of [`client_config_with`].
fn server_verified(insecure: bool, cafile: Option<&Path>) -> Result<rustls::ClientConfig> {
    let builder = rustls::ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(versions(None)?)
        .context("choosing TLS versions")?;
    if insecure {
        return Ok(builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(NoVerification(provider())))
            .with_no_client_auth());
    }
    let mut roots = rustls::RootCertStore::empty();
    if let Some(path) = cafile {
        let pem =
            std::fs::read(path).with_context(|| format!("reading CA bundle {}", path.display()))?;
        let verifier = ca_file_verifier(&pem)
            .with_context(|| format!("using CA bundle {}", path.display()))?;
        return Ok(builder
            .dangerous()
            .with_custom_certificate_verifier(verifier)
            .with_no_client_auth());
    }
    let bundle = SYSTEM_BUNDLES.iter().map(Path::new).find(|p| p.exists());
    if let Some(path) = bundle {
        let pem =
            std::fs::read(path).with_context(|| format!("reading CA bundle {}", path.display()))?;
        add_pem_roots(&mut roots, &pem)
            .with_context(|| format!("loading CA bundle {}", path.display()))?;
    }
    Ok(builder.with_root_certificates(roots).with_no_client_auth())
}

/// The server verifier of a CA file's PEM text (`ipa-cafile`): WebPKI
/// over its certificates, and exact matches of them ([`pinned`]).
pub fn ca_file_verifier(pem: &[u8]) -> Result<Arc<pinned::PinnedOrWebPki>> {
    let certs = pem_certificates(pem)?;
    let mut roots = rustls::RootCertStore::empty();
    for c in &certs {
        roots.add(c.clone()).context("adding a certificate")?;
    }
    let webpki =
        rustls::client::WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider())
            .build()
            .context("building the verifier")?;
    Ok(Arc::new(pinned::PinnedOrWebPki::new(webpki, certs)))
}

/// Every certificate of a PEM bundle (at least one).
pub fn pem_certificates(pem: &[u8]) -> Result<Vec<CertificateDer<'static>>> {
    use rustls::pki_types::pem::PemObject;
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .context("parsing a certificate")?;
    if certs.is_empty() {
        bail!("no certificate found");
    }
    Ok(certs)
}

/// Adds every certificate of a PEM bundle to `roots`.
pub fn add_pem_roots(roots: &mut rustls::RootCertStore, pem: &[u8]) -> Result<usize> {
    let certs = pem_certificates(pem)?;
    let n = certs.len();
    for cert in certs {
        roots.add(cert)?;
    }
    Ok(n)
}

/// When `e` (or an error it wraps) is a refused server certificate, why:
/// a permanent failure, not worth a retry.
pub fn certificate_error(e: &(dyn std::error::Error + 'static)) -> Option<String> {
    let mut cur = Some(e);
    while let Some(err) = cur {
        if let Some(r) = err.downcast_ref::<rustls::Error>() {
            return matches!(
                r,
                rustls::Error::InvalidCertificate(_) | rustls::Error::NoCertificatesPresented
            )
            .then(|| r.to_string());
        }
        // io::Error::source skips the error it wraps: step into it instead.
        cur = match err
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
        {
            Some(inner) => Some(inner as &(dyn std::error::Error + 'static)),
            None => err.source(),
        };
    }
    None
}

/// `ipa-insecure`: accept any server certificate (signatures are still checked
/// for well-formedness of the handshake).
#[derive(Debug)]
struct NoVerification(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for NoVerification {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &rustls::pki_types::ServerName<'_>,
        _ocsp: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// How long an idle connection to Ironic is kept for reuse: under the
/// shortest keep-alive of the servers in front of Ironic (cheroot's 10 s,
/// Apache's 5 s).
pub const POOL_IDLE: std::time::Duration = std::time::Duration::from_secs(4);

/// An HTTP client for the conductor or image servers.
pub fn http_client(
    insecure: bool,
    cafile: Option<&Path>,
    timeout: std::time::Duration,
) -> Result<reqwest::Client> {
    http_client_with(insecure, cafile, None, timeout)
}

/// [`http_client`] presenting the client certificate `identity`.
pub fn http_client_with(
    insecure: bool,
    cafile: Option<&Path>,
    identity: Option<&crate::config::TlsFiles>,
    timeout: std::time::Duration,
) -> Result<reqwest::Client> {
    reqwest::Client::builder()
        .tls_backend_preconfigured(client_config_with(insecure, cafile, identity)?)
        .connect_timeout(timeout)
        .timeout(timeout)
        // Ironic 39's API server (cheroot) closes a keep-alive connection
        // after 10 s idle; a request sent on it as it closes fails with
        // "connection closed before message completed" (seen on the bed).
        // Connections idle longer than this are not reused.
        .pool_idle_timeout(POOL_IDLE)
        .build()
        .context("building the HTTP client")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn certificate_names_the_advertised_ip_and_is_a_pem() {
        let cert = generate_certificate(
            "10.1.2.3".parse().unwrap(),
            "agent-host",
            Default::default(),
        )
        .unwrap();
        assert!(cert.pem.starts_with("-----BEGIN CERTIFICATE-----"));
        let mut roots = rustls::RootCertStore::empty();
        assert_eq!(add_pem_roots(&mut roots, cert.pem.as_bytes()).unwrap(), 1);
        // The IP SAN is in the DER (4 bytes of 10.1.2.3 after the IP tag 0x87 0x04).
        let der = cert.der.as_ref();
        assert!(der.windows(6).any(|w| w == [0x87, 4, 10, 1, 2, 3]));
        server_config(&cert, Some("1.3"), None).unwrap();
        assert!(server_config(&cert, Some("1.1"), None).is_err());
    }

    fn suites(cfg: &rustls::ServerConfig) -> Vec<rustls::CipherSuite> {
        cfg.crypto_provider()
            .cipher_suites
            .iter()
            .map(|s| s.suite())
            .collect()
    }

    #[test]
    fn the_lookups_cipher_suites_limit_tls_1_2_and_leave_tls_1_3() {
        use rustls::CipherSuite as C;
        let cert = generate_certificate(
            "10.1.2.3".parse().unwrap(),
            "agent-host",
            Default::default(),
        )
        .unwrap();
        let all = suites(&server_config(&cert, Some("1.2"), None).unwrap());
        assert!(all.contains(&C::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256));
        assert_eq!(
            all,
            suites(&server_config(&cert, Some("1.2"), Some(" ")).unwrap())
        );
        // IPA's documented default list, in its order, with an alias and an
        // IANA name; unknown names are skipped.
        let cfg = server_config(
            &cert,
            Some("1.2"),
            Some("ECDHE-ECDSA-AES256-GCM-SHA384:!aNULL:TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256:DHE-RSA-AES256-SHA:HIGH"),
        )
        .unwrap();
        assert_eq!(
            suites(&cfg),
            [
                C::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
                C::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
                C::TLS13_AES_256_GCM_SHA384,
                C::TLS13_AES_128_GCM_SHA256,
                C::TLS13_CHACHA20_POLY1305_SHA256,
            ]
        );
        // A list naming nothing usable is refused, not silently widened.
        let e = server_config(&cert, Some("1.2"), Some("DHE-RSA-AES256-SHA:RC4"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("names no TLS 1.2 cipher suite"), "{e}");
    }

    #[test]
    fn two_certificates_differ() {
        let a =
            generate_certificate("127.0.0.1".parse().unwrap(), "h", Default::default()).unwrap();
        let b =
            generate_certificate("127.0.0.1".parse().unwrap(), "h", Default::default()).unwrap();
        assert_ne!(a.pem, b.pem);
    }

    #[test]
    fn the_certificate_curve_follows_the_setting() {
        let ip = "10.1.2.3".parse().unwrap();
        let p384 = [0x06, 0x05, 0x2b, 0x81, 0x04, 0x00, 0x22];
        let p256 = [0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07];
        let has = |der: &[u8], oid: &[u8]| der.windows(oid.len()).any(|w| w == oid);
        let c = generate_certificate(ip, "h", crate::config::TlsCurve::P384).unwrap();
        assert!(has(c.der.as_ref(), &p384) && !has(c.der.as_ref(), &p256));
        let c = generate_certificate(ip, "h", crate::config::TlsCurve::P256).unwrap();
        assert!(has(c.der.as_ref(), &p256) && !has(c.der.as_ref(), &p384));
    }
}

#[cfg(test)]
mod own_certificate_tests {
    //! `listen_tls` with the operator's certificate and `certfile`/`keyfile`:
    //! a TLS handshake in memory between the two configurations, the
    //! server asking for a client certificate signed by the same CA.

    use super::*;
    use crate::config::TlsFiles;

    /// A CA and two leaves it signed (server for 127.0.0.1, client),
    /// written as PEM files under `dir`; returns (server, client, CA path).
    fn pki(dir: &Path) -> (TlsFiles, TlsFiles, std::path::PathBuf) {
        let ca_key = KeyPair::generate().unwrap();
        let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca.distinguished_name.push(DnType::CommonName, "test CA");
        let ca_cert = ca.self_signed(&ca_key).unwrap();
        let issuer = rcgen::Issuer::new(ca, ca_key);
        let write = |name: &str, text: String| {
            let p = dir.join(name);
            std::fs::write(&p, text).unwrap();
            p
        };
        let leaf = |sans: Vec<SanType>, name: &str| {
            let key = KeyPair::generate().unwrap();
            let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
            p.subject_alt_names = sans;
            p.distinguished_name.push(DnType::CommonName, name);
            let cert = p.signed_by(&key, &issuer).unwrap();
            TlsFiles {
                cert: write(&format!("{name}.pem"), cert.pem()),
                key: write(&format!("{name}.key"), key.serialize_pem()),
            }
        };
        let server = leaf(
            vec![SanType::IpAddress("127.0.0.1".parse().unwrap())],
            "server",
        );
        let client = leaf(Vec::new(), "client");
        (server, client, write("ca.pem", ca_cert.pem()))
    }

    fn handshake(
        client: rustls::ClientConfig,
        server: rustls::ServerConfig,
    ) -> Result<rustls::ServerConnection> {
        let mut c = rustls::ClientConnection::new(
            Arc::new(client),
            rustls::pki_types::ServerName::try_from("127.0.0.1")?.to_owned(),
        )?;
        let mut s = rustls::ServerConnection::new(Arc::new(server))?;
        for _ in 0..10 {
            let mut buf = Vec::new();
            c.write_tls(&mut buf)?;
            s.read_tls(&mut buf.as_slice())?;
            s.process_new_packets()?;
            let mut buf = Vec::new();
            s.write_tls(&mut buf)?;
            c.read_tls(&mut buf.as_slice())?;
            c.process_new_packets()?;
            if !c.is_handshaking() && !s.is_handshaking() {
                return Ok(s);
            }
        }
        bail!("the handshake did not finish")
    }

    #[test]
    fn the_operators_certificate_serves_and_the_client_certificate_is_presented() {
        let dir = tempfile::tempdir().unwrap();
        let (server_files, client_files, ca) = pki(dir.path());
        let server = server_config_from_files(&server_files, None, None).unwrap();
        let client = client_config_with(false, Some(&ca), Some(&client_files)).unwrap();
        handshake(client, server.clone()).unwrap();

        // A server that requires a client certificate from the CA.
        let mut roots = rustls::RootCertStore::empty();
        add_pem_roots(&mut roots, &std::fs::read(&ca).unwrap()).unwrap();
        let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
            Arc::new(roots),
            provider(),
        )
        .build()
        .unwrap();
        let (certs, key) = load_pair(&server_files).unwrap();
        let strict = rustls::ServerConfig::builder_with_provider(provider())
            .with_protocol_versions(versions(None).unwrap())
            .unwrap()
            .with_client_cert_verifier(verifier)
            .with_single_cert(certs, key)
            .unwrap();
        let s = handshake(
            client_config_with(false, Some(&ca), Some(&client_files)).unwrap(),
            strict.clone(),
        )
        .unwrap();
        let presented = s.peer_certificates().unwrap();
        assert_eq!(presented[0], load_pair(&client_files).unwrap().0[0]);
        // Without the client certificate the strict server refuses.
        let e = handshake(client_config(false, Some(&ca)).unwrap(), strict).unwrap_err();
        assert!(
            format!("{e:#}").to_lowercase().contains("certificate"),
            "{e:#}"
        );
    }

    #[test]
    fn mismatched_or_missing_files_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let (server_files, client_files, _) = pki(dir.path());
        let crossed = TlsFiles {
            cert: server_files.cert.clone(),
            key: client_files.key.clone(),
        };
        let e = format!(
            "{:#}",
            server_config_from_files(&crossed, None, None).unwrap_err()
        );
        assert!(
            e.contains("client.key does not go with") && e.contains("server.pem"),
            "{e}"
        );
        let missing = TlsFiles {
            cert: dir.path().join("nope.pem"),
            key: server_files.key,
        };
        let e = format!(
            "{:#}",
            client_config_with(false, None, Some(&missing)).unwrap_err()
        );
        assert!(e.contains("nope.pem"), "{e}");
    }
}
