//! Pulling an image from an OCI registry with `oci-client`: the manifest
//! (an index resolved to this machine's platform; fetched with a size
//! bound by [`super::manifest`]), the image config and every layer, each
//! blob's digest verified by the client while it streams and its size held
//! to its descriptor's and to [`Limits`], each layer unpacked
//! ([`super::unpack`]) into a root directory on tmpfs within the image's
//! unpacking [`Budget`] and its blob removed at once. A stop flag (abort,
//! or the time limit in [`super::runtime`]) ends the pull at its next
//! chunk.
//!
//! TLS is verified by default against the system roots plus the agent's
//! `cafile`; `--tls-verify=false` turns verification off (the connection
//! stays HTTPS unless the registry speaks only plain HTTP, where podman
//! falls back to HTTP too: [`super::scheme`], logged as a warning naming
//! the registry): each such pull is logged as a warning naming the image,
//! and credentials are then refused rather than sent to a peer nobody
//! checked. Credentials come from `--creds` or an `--authfile` in
//! containers-auth.json(5) format.

use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use base64::Engine;
use oci_client::client::{Certificate, CertificateEncoding, ClientConfig, ClientProtocol};
use oci_client::manifest::OciDescriptor;
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};
use oci_spec::image::ImageConfiguration;
use serde_json::Value;

use super::limits::{Bounded, Budget, Limits};
use super::options::{Auth, PullOptions};
use super::scheme::Scheme;

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
pub(crate) struct PulledImage {
    /// The image's config (entrypoint, command, environment...).
    pub config: ImageConfiguration,
    /// The manifest's digest.
    pub digest: String,
}

/// The certificates of the agent's `cafile` (a PEM bundle), DER.
fn extra_roots(cafile: Option<&Path>) -> Result<Vec<Vec<u8>>> {
    let Some(ca) = cafile else {
        return Ok(Vec::new());
    };
    let data =
        std::fs::read(ca).with_context(|| format!("reading the CA file {}", ca.display()))?;
    let certs = agent_base::tls::pem_certificates(&data)
        .with_context(|| format!("reading the certificates of {}", ca.display()))?;
    Ok(certs.iter().map(|c| c.as_ref().to_vec()).collect())
}

/// The HTTP client of the manifest request and the scheme probes, with
/// `opts`' TLS settings, trusting `roots` in addition to the system roots.
fn http_client(opts: &PullOptions, roots: &[Vec<u8>], user_agent: &str) -> Result<reqwest::Client> {
    let certs = roots
        .iter()
        .map(|der| reqwest::Certificate::from_der(der))
        .collect::<Result<Vec<_>, _>>()
        .context("the CA file's certificates")?;
    reqwest::Client::builder()
        .danger_accept_invalid_certs(!opts.tls_verify)
        .tls_certs_merge(certs)
        .user_agent(user_agent)
        .build()
        .context("setting up the manifest client")
}

/// The registry client for `opts`, speaking `scheme` to `registry`, with
/// the same TLS settings and roots.
fn registry_client(
    opts: &PullOptions,
    roots: &[Vec<u8>],
    scheme: Scheme,
    registry: &str,
) -> Result<Client> {
    let config = ClientConfig {
        protocol: match scheme {
            Scheme::Https => ClientProtocol::Https,
            Scheme::Http => ClientProtocol::HttpsExcept(vec![registry.to_string()]),
        },
        accept_invalid_certificates: !opts.tls_verify,
        extra_root_certificates: roots
            .iter()
            .map(|der| Certificate {
                encoding: CertificateEncoding::Der,
                data: der.clone(),
            })
            .collect(),
        ..ClientConfig::default()
    };
    Client::try_from(config).context("setting up the registry client")
}

/// The credentials for `registry`/`repository` that `opts` give.
pub(crate) fn registry_auth(
    opts: &PullOptions,
    registry: &str,
    repository: &str,
) -> Result<RegistryAuth> {
    match &opts.auth {
        None => Ok(RegistryAuth::Anonymous),
        Some(Auth::Creds { user, password }) => {
            Ok(RegistryAuth::Basic(user.clone(), password.clone()))
        }
        Some(Auth::AuthFile(path)) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading the auth file {}", path.display()))?;
            let found = authfile_credentials(&text, registry, repository)
                .with_context(|| format!("the auth file {}", path.display()))?;
            match found {
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

/// The user and password that an auth file's `text` (containers-auth.json)
/// gives for `registry/repository`, if any.
pub fn authfile_credentials(
    text: &str,
    registry: &str,
    repository: &str,
) -> Result<Option<(String, String)>> {
    let doc: Value = serde_json::from_str(text).context("not JSON")?;
    authfile_entry(&doc, registry, repository)
}

/// The user and password of containers-auth.json's most specific `auths`
/// entry for `registry/repository` (an entry names a registry, or a
/// registry and a namespace; a legacy `https://` prefix is ignored).
pub(crate) fn authfile_entry(
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

/// Pulls `reference` (no transport) into `dir` within `limits`:
/// `dir/rootfs` holds the unpacked layers. Setting `stop` ends the pull
/// at its next chunk of network data or of unpacking.
pub(crate) async fn pull(
    reference: &str,
    opts: &PullOptions,
    cafile: Option<&Path>,
    dir: &Path,
    limits: &Limits,
    stop: &Arc<AtomicBool>,
) -> Result<PulledImage> {
    let image = Reference::try_from(reference)
        .with_context(|| format!("{reference:?} is not an image reference"))?;
    let registry = image.resolve_registry();
    let auth = registry_auth(opts, registry, image.repository())?;
    if !opts.tls_verify {
        if !matches!(auth, RegistryAuth::Anonymous) {
            bail!(
                "refusing to send credentials for {registry} without TLS verification \
                 (--tls-verify=false in pull_options): give the registry's CA in the \
                 agent's cafile and verify instead"
            );
        }
        tracing::warn!(
            image = reference,
            "pulling the container image {reference} WITHOUT TLS verification \
             (--tls-verify=false): the registry's certificate is not checked{}",
            if image.digest().is_some() {
                "; the content is still checked against the digest the reference pins"
            } else {
                ", so anyone on the path can substitute the image"
            }
        );
    }
    // reqwest is built without a default crypto provider (the workspace
    // has ring only); oci-client builds its own reqwest client, so the
    // process default is ring. An error means one is installed already.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let roots = extra_roots(cafile)?;
    let http = http_client(opts, &roots, ClientConfig::default().user_agent)?;
    let scheme = if opts.tls_verify {
        Scheme::Https
    } else {
        super::scheme::unverified(&http, registry).await
    };
    if scheme == Scheme::Http {
        tracing::warn!(
            image = reference,
            registry,
            "the registry {registry} speaks plain HTTP: pulling {reference} over HTTP, \
             unencrypted, as podman does with --tls-verify=false"
        );
    }
    let client = registry_client(opts, &roots, scheme, registry)?;
    let (manifest, digest) =
        match super::manifest::fetch(&client, &http, scheme, &image, &auth, limits).await {
            Ok(fetched) => fetched,
            Err(e)
                if opts.tls_verify && super::scheme::answers_plain_http(&http, registry).await =>
            {
                bail!(
                    "the registry {registry} speaks plain HTTP, not HTTPS, and TLS is \
                     verified: a plain-HTTP registry is used only with --tls-verify=false \
                     in pull_options, as podman does ({e:#})"
                )
            }
            Err(e) => return Err(e.context("fetching the manifest")),
        };
    let config = fetch_config(&client, &image, &manifest.config, limits, stop).await?;
    let config: ImageConfiguration =
        serde_json::from_slice(&config).context("parsing the image config")?;
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
    let mut budget = Budget::new(limits, stop.clone());
    for (n, layer) in manifest.layers.iter().enumerate() {
        if !LAYER_TYPES.contains(&layer.media_type.as_str()) {
            bail!(
                "layer {} has the unsupported media type {}",
                layer.digest,
                layer.media_type
            );
        }
        let size = declared_size(layer, limits.blob_bytes, "layer", "layer-size")?;
        let blob = dir.join(format!("layer-{n}"));
        let file = tokio::fs::File::create(&blob)
            .await
            .with_context(|| format!("creating {}", blob.display()))?;
        let mut out = Bounded::new(file, size, stop.clone());
        let fetched = client.pull_blob(&image, layer, &mut out).await;
        check_fetched(fetched, &out, size)
            .with_context(|| format!("fetching layer {}", layer.digest))?;
        let (root, path) = (rootfs.clone(), blob.clone());
        let (unpacked, returned) = tokio::task::spawn_blocking(move || {
            let result = std::fs::File::open(&path)
                .with_context(|| format!("opening {}", path.display()))
                .and_then(|f| super::unpack::unpack_layer(f, &root, &budget));
            (result, budget)
        })
        .await
        .context("the unpacking task")?;
        budget = returned;
        let unpacked = unpacked.with_context(|| format!("unpacking layer {}", layer.digest))?;
        tokio::fs::remove_file(&blob)
            .await
            .with_context(|| format!("removing {}", blob.display()))?;
        tracing::debug!(layer = %layer.digest, ?unpacked, "layer unpacked");
    }
    let (bytes, entries) = budget.used();
    tracing::info!(
        image = reference,
        bytes,
        entries,
        "container image unpacked"
    );
    Ok(PulledImage { config, digest })
}

/// A descriptor's size, refused when negative or over `max`.
fn declared_size(d: &OciDescriptor, max: u64, what: &str, limit: &str) -> Result<u64> {
    let Ok(size) = u64::try_from(d.size) else {
        bail!("the {what} {} declares the size {}", d.digest, d.size);
    };
    if size > max {
        bail!(
            "the {what} {} is {size} bytes, over the {max}-byte {limit} limit",
            d.digest
        );
    }
    Ok(size)
}

/// The blob pull's outcome with the size checked: exactly `size` bytes.
fn check_fetched<W>(
    fetched: oci_client::errors::Result<()>,
    out: &Bounded<W>,
    size: u64,
) -> Result<()> {
    if out.exceeded() {
        bail!("the registry sent more than the {size} bytes the manifest declares");
    }
    fetched?;
    if out.written() != size {
        bail!(
            "the registry sent {} bytes, not the {size} the manifest declares",
            out.written()
        );
    }
    Ok(())
}

/// The image config, at most [`Limits::config_bytes`].
async fn fetch_config(
    client: &Client,
    image: &Reference,
    config: &OciDescriptor,
    limits: &Limits,
    stop: &Arc<AtomicBool>,
) -> Result<Vec<u8>> {
    let size = declared_size(config, limits.config_bytes, "image config", "config-size")?;
    let mut out = Bounded::new(Vec::new(), size, stop.clone());
    let fetched = client.pull_blob(image, config, &mut out).await;
    check_fetched(fetched, &out, size).context("fetching the image config")?;
    Ok(out.into_inner())
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
