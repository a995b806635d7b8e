//! What Ironic hands a ramdisk over virtual media, for tests that boot the
//! ramdisk with QEMU directly: a conductor certificate made as Ironic's
//! documentation shows (`openssl req -x509 -newkey … -nodes`, so
//! `CA:TRUE`, valid 30 days from now, for [`BRIDGE_IP`]), the rustls
//! server configuration that serves it, and a `config-2` disc carrying the
//! CA as Ironic's `prepare_deploy_iso` injects it (plus any other files).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use anyhow::{Context, Result};

use super::BRIDGE_IP;
use crate::run;

/// A self-signed certificate for the address `ip` as Ironic's
/// documentation makes one (`CA:TRUE`, valid 30 days), written to
/// `dir/STEM.crt` and its key to `dir/STEM.key`; returns both paths.
pub fn openssl_cert_for(dir: &Path, stem: &str, ip: &str) -> Result<(PathBuf, PathBuf)> {
    let (cert, key) = (
        dir.join(format!("{stem}.crt")),
        dir.join(format!("{stem}.key")),
    );
    run(Command::new("openssl")
        .args([
            "req", "-x509", "-newkey", "rsa:2048", "-days", "30", "-nodes",
        ])
        .args(["-subj", &format!("/CN={ip}")])
        .args(["-addext", &format!("subjectAltName = IP:{ip}")])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert))?;
    Ok((cert, key))
}

/// The conductor's certificate and key (PEM), made with openssl in `dir`.
pub fn openssl_cert(dir: &Path) -> Result<(Vec<u8>, Vec<u8>)> {
    let (cert, key) = openssl_cert_for(dir, "ironic", BRIDGE_IP)?;
    Ok((std::fs::read(cert)?, std::fs::read(key)?))
}

/// A TLS server configuration presenting `cert` with `key` (PEM).
pub fn server_tls(cert: &[u8], key: &[u8]) -> Result<Arc<rustls::ServerConfig>> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let certs: Vec<CertificateDer<'static>> =
        CertificateDer::pem_slice_iter(cert).collect::<Result<_, _>>()?;
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_no_client_auth()
    .with_single_cert(certs, PrivateKeyDer::from_pem_slice(key)?)
    .context("the conductor's certificate")?;
    Ok(Arc::new(config))
}

/// A `config-2` disc (genisoimage with Ironic's flags `-r -J -l`) in
/// `dir` holding the CA at `etc/ironic-python-agent/ironic.crt`, the
/// `ironic-tls.conf` that names it, and `extra` files (path, bytes).
pub fn disc(dir: &Path, ca: &[u8], extra: &[(&str, Vec<u8>)]) -> Result<PathBuf> {
    let tree = dir.join("iso");
    let tls_conf = b"[DEFAULT]\ncafile = /etc/ironic-python-agent/ironic.crt\n".to_vec();
    let mut files = vec![
        ("etc/ironic-python-agent/ironic.crt", ca.to_vec()),
        ("etc/ironic-python-agent.d/ironic-tls.conf", tls_conf),
    ];
    files.extend(extra.iter().cloned());
    for (path, bytes) in files {
        let p = tree.join(path);
        std::fs::create_dir_all(p.parent().context("a file path")?)?;
        std::fs::write(p, bytes)?;
    }
    let iso = dir.join("vmedia.iso");
    run(Command::new("genisoimage")
        .args(["-quiet", "-r", "-V", "config-2", "-J", "-l", "-o"])
        .arg(&iso)
        .arg(&tree))?;
    Ok(iso)
}
