//! Pulling an image from an OCI registry with `oci-client`: the manifest
//! (an index resolved to this machine's platform), the image config and
//! every layer, each blob's digest verified by the client while it
//! streams, each layer unpacked ([`super::unpack`]) into a root directory
//! on tmpfs and its blob removed at once.
//!
//! TLS is verified by default against the system roots plus the agent's
//! `cafile`; `--tls-verify=false` turns verification off (the connection
//! stays HTTPS). Credentials come from `--creds` or an `--authfile` in
//! containers-auth.json(5) format.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use base64::Engine;
use oci_client::client::{Certificate, CertificateEncoding, ClientConfig, ClientProtocol};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};
use oci_spec::image::ImageConfiguration;
use serde_json::Value;

use super::options::{Auth, PullOptions};

/// The layer media types unpacked: OCI's tar, tar+gzip, tar+zstd, and
/// Docker's schema 2 gzip layer.
const LAYER_TYPES: [&str; 4] = [
    "application/vnd.oci.image.layer.v1.tar",
    "application/vnd.oci.image.layer.v1.tar+gzip",
    "application/vnd.oci.image.layer.v1.tar+zstd",
    "application/vnd.docker.image.rootfs.diff.tar.gzip",
];

/// An image pulled and unpacked.
#[derive(Debug)]
pub struct PulledImage {
    /// The unpacked root filesystem.
    pub rootfs: PathBuf,
    /// The image's config (entrypoint, command, environment...).
    pub config: ImageConfiguration,
    /// The manifest's digest.
    pub digest: String,
}

/// The registry client for `opts`, trusting `cafile`'s certificates in
/// addition to the system roots.
fn client(opts: &PullOptions, cafile: Option<&Path>) -> Result<Client> {
    // reqwest is built without a default crypto provider (the workspace
    // has ring only); oci-client builds its own reqwest client, so the
    // process default is ring. An error means one is installed already.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut extra = Vec::new();
    if let Some(ca) = cafile {
        let data =
            std::fs::read(ca).with_context(|| format!("reading the CA file {}", ca.display()))?;
        extra.push(Certificate {
            encoding: CertificateEncoding::Pem,
            data,
        });
    }
    let config = ClientConfig {
        protocol: ClientProtocol::Https,
        accept_invalid_certificates: !opts.tls_verify,
        extra_root_certificates: extra,
        ..ClientConfig::default()
    };
    Client::try_from(config).context("setting up the registry client")
}

/// The credentials for `registry`/`repository` that `opts` give.
pub fn registry_auth(opts: &PullOptions, registry: &str, repository: &str) -> Result<RegistryAuth> {
    match &opts.auth {
        None => Ok(RegistryAuth::Anonymous),
        Some(Auth::Creds { user, password }) => {
            Ok(RegistryAuth::Basic(user.clone(), password.clone()))
        }
        Some(Auth::AuthFile(path)) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading the auth file {}", path.display()))?;
            let doc: Value = serde_json::from_str(&text)
                .with_context(|| format!("parsing the auth file {}", path.display()))?;
            match authfile_entry(&doc, registry, repository)? {
                Some((user, password)) => Ok(RegistryAuth::Basic(user, password)),
                None => {
                    tracing::info!(
                        "the auth file {} has no entry for {registry}; pulling anonymously",
                        path.display()
                    );
                    Ok(RegistryAuth::Anonymous)
                }
            }
        }
    }
}

/// The user and password of containers-auth.json's most specific `auths`
/// entry for `registry/repository` (an entry names a registry, or a
/// registry and a namespace; a legacy `https://` prefix is ignored).
pub fn authfile_entry(
    doc: &Value,
    registry: &str,
    repository: &str,
) -> Result<Option<(String, String)>> {
    let Some(auths) = doc.get("auths").and_then(Value::as_object) else {
        return Ok(None);
    };
    let full = format!("{registry}/{repository}");
    let mut best: Option<(usize, &Value)> = None;
    for (key, entry) in auths {
        let k = key
            .trim_start_matches("https://")
            .trim_start_matches("http://")
            .trim_end_matches('/');
        let matches = k == registry
            || full == k
            || (full.starts_with(k)
                && full.as_bytes().get(k.len()) == Some(&b'/')
                && k.contains('/'));
        if matches && best.is_none_or(|(len, _)| k.len() > len) {
            best = Some((k.len(), entry));
        }
    }
    let Some((_, entry)) = best else {
        return Ok(None);
    };
    let Some(auth) = entry.get("auth").and_then(Value::as_str) else {
        bail!("the auth file's entry for {registry} has no \"auth\" (only user:password entries are supported)");
    };
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(auth.trim())
        .context("the auth file's \"auth\" is not base64")?;
    let decoded = String::from_utf8(decoded).context("the auth file's \"auth\" is not text")?;
    let Some((user, password)) = decoded.split_once(':') else {
        bail!("the auth file's \"auth\" for {registry} is not user:password");
    };
    Ok(Some((user.to_string(), password.to_string())))
}

/// Pulls `reference` (no transport) into `dir`: `dir/rootfs` holds the
/// unpacked layers.
pub async fn pull(
    reference: &str,
    opts: &PullOptions,
    cafile: Option<&Path>,
    dir: &Path,
) -> Result<PulledImage> {
    let image = Reference::try_from(reference)
        .with_context(|| format!("{reference:?} is not an image reference"))?;
    let client = client(opts, cafile)?;
    let auth = registry_auth(opts, image.resolve_registry(), image.repository())?;
    let (manifest, digest, config) = client
        .pull_manifest_and_config(&image, &auth)
        .await
        .context("fetching the manifest and the image config")?;
    let config: ImageConfiguration =
        serde_json::from_str(&config).context("parsing the image config")?;
    tracing::info!(
        image = reference,
        digest,
        layers = manifest.layers.len(),
        "pulling the container image"
    );
    let rootfs = dir.join("rootfs");
    tokio::fs::create_dir_all(&rootfs)
        .await
        .with_context(|| format!("creating {}", rootfs.display()))?;
    for (n, layer) in manifest.layers.iter().enumerate() {
        if !LAYER_TYPES.contains(&layer.media_type.as_str()) {
            bail!(
                "layer {} has the unsupported media type {}",
                layer.digest,
                layer.media_type
            );
        }
        let blob = dir.join(format!("layer-{n}"));
        let file = tokio::fs::File::create(&blob)
            .await
            .with_context(|| format!("creating {}", blob.display()))?;
        client
            .pull_blob(&image, layer, file)
            .await
            .with_context(|| format!("fetching layer {}", layer.digest))?;
        let (root, path) = (rootfs.clone(), blob.clone());
        let unpacked = tokio::task::spawn_blocking(move || {
            let f = std::fs::File::open(&path)
                .with_context(|| format!("opening {}", path.display()))?;
            super::unpack::unpack_layer(f, &root)
        })
        .await
        .context("the unpacking task")?
        .with_context(|| format!("unpacking layer {}", layer.digest))?;
        tokio::fs::remove_file(&blob)
            .await
            .with_context(|| format!("removing {}", blob.display()))?;
        tracing::debug!(layer = %layer.digest, ?unpacked, "layer unpacked");
    }
    Ok(PulledImage {
        rootfs,
        config,
        digest,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn b64(s: &str) -> String {
        base64::engine::general_purpose::STANDARD.encode(s)
    }

    #[test]
    fn the_most_specific_authfile_entry_wins() {
        let doc = json!({"auths": {
            "r.example:5000": {"auth": b64("reg:1")},
            "r.example:5000/team": {"auth": b64("team:2")},
            "https://other.example": {"auth": b64("o:3")},
            "r.example:5000/teamwork": {"auth": b64("wrong:4")},
        }});
        let e = |r, p| authfile_entry(&doc, r, p).unwrap();
        assert_eq!(
            e("r.example:5000", "team/tool"),
            Some(("team".into(), "2".into()))
        );
        assert_eq!(
            e("r.example:5000", "solo/tool"),
            Some(("reg".into(), "1".into()))
        );
        assert_eq!(e("other.example", "x"), Some(("o".into(), "3".into())));
        assert_eq!(e("third.example", "x"), None);
        let bad = json!({"auths": {"r": {"auth": "!!"}}});
        assert!(authfile_entry(&bad, "r", "x").is_err());
        let token = json!({"auths": {"r": {"identitytoken": "t"}}});
        assert!(authfile_entry(&token, "r", "x").is_err());
    }

    #[test]
    fn creds_and_anonymous() {
        let o = PullOptions::default();
        assert!(matches!(
            registry_auth(&o, "r", "x").unwrap(),
            RegistryAuth::Anonymous
        ));
        let o = PullOptions {
            auth: Some(Auth::Creds {
                user: "u".into(),
                password: "p".into(),
            }),
            ..o
        };
        let RegistryAuth::Basic(u, p) = registry_auth(&o, "r", "x").unwrap() else {
            panic!("not basic")
        };
        assert_eq!((u.as_str(), p.as_str()), ("u", "p"));
    }
}
