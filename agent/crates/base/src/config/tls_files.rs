//! The certificate files of IPA's TLS options: the command API's own
//! certificate (`listen_tls` with `tls_cert_file`/`tls_key_file`) and the
//! client certificate presented to Ironic and image servers
//! (`certfile`/`keyfile`).

use std::path::PathBuf;

use super::cmdline::KernelParams;
use super::from_params::take;
use super::{Config, ParamError};

/// A PEM certificate (chain) and its private key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// The certificate (chain), PEM.
    pub cert: PathBuf,
    /// The private key, PEM.
    pub key: PathBuf,
}

/// IPA's `listen_tls`, `tls_cert_file`, `tls_key_file`, `certfile` and
/// `keyfile` (configuration-file options in IPA; kernel parameters
/// `ipa-listen-tls`, `ipa-tls-cert-file`, `ipa-tls-key-file`,
/// `ipa-certfile`, `ipa-keyfile` here, which the files map onto).
pub(super) fn tls_files(p: &KernelParams, c: &mut Config, errors: &mut Vec<ParamError>) {
    let path = |k: &str| {
        p.get(k)
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    if let Some(v) = take(errors, p.bool("ipa-listen-tls")) {
        c.listen_tls = v;
    }
    c.tls_cert_file = path("ipa-tls-cert-file");
    c.tls_key_file = path("ipa-tls-key-file");
    c.certfile = path("ipa-certfile");
    c.keyfile = path("ipa-keyfile");
}

impl Config {
    /// The command API's own certificate and key when `listen_tls` asks for
    /// them; an error names what is missing.
    pub fn own_server_certificate(&self) -> anyhow::Result<Option<TlsFiles>> {
        if !self.listen_tls {
            return Ok(None);
        }
        match (&self.tls_cert_file, &self.tls_key_file) {
            (Some(cert), Some(key)) => Ok(Some(TlsFiles {
                cert: cert.clone(),
                key: key.clone(),
            })),
            _ => anyhow::bail!(
                "listen_tls needs both tls_cert_file and tls_key_file (ipa-tls-cert-file, ipa-tls-key-file)"
            ),
        }
    }

    /// The client certificate when both `certfile` and `keyfile` are given
    /// (one alone is logged and ignored, as IPA does).
    pub fn client_certificate(&self) -> Option<TlsFiles> {
        match (&self.certfile, &self.keyfile) {
            (Some(cert), Some(key)) => Some(TlsFiles {
                cert: cert.clone(),
                key: key.clone(),
            }),
            (None, None) => None,
            _ => {
                tracing::warn!(
                    "only one of certfile and keyfile is set: no client certificate is presented"
                );
                None
            }
        }
    }
}
