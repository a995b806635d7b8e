//! The image manifest, fetched with a bound on its size: `oci-client`
//! 0.18 reads a manifest whole into memory (`Response::bytes`) and offers
//! no size-limited fetch, so this module makes that one request itself,
//! with the same URL, `Accept` types, TLS settings and credentials
//! (`oci-client` obtains the bearer token; see [`fetch`]), reading the body
//! chunk by chunk up to [`Limits::manifest_bytes`]. Blobs stay with
//! `oci-client`, written through [`super::limits::Bounded`].
//!
//! The body is checked against the reference's digest when it has one,
//! and against the registry's `Docker-Content-Digest` header when sent;
//! an index is resolved to this machine's platform and that manifest
//! fetched the same way.

use anyhow::{bail, Context, Result};
use oci_client::client::current_platform_resolver;
use oci_client::manifest::{OciImageManifest, OciManifest};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference, RegistryOperation};

use super::limits::Limits;
use super::scheme::Scheme;

/// The manifest media types asked for: OCI's and Docker's schema 2, image
/// and index.
const ACCEPT: &str = "application/vnd.oci.image.manifest.v1+json, \
     application/vnd.docker.distribution.manifest.v2+json, \
     application/vnd.oci.image.index.v1+json, \
     application/vnd.docker.distribution.manifest.list.v2+json";

/// Bytes of an error answer's body kept for the message.
const ERROR_BODY: usize = 1024;

/// The image manifest of `image` (an index resolved to this platform) and
/// its digest. `client` authenticates (its token cache is then what its
/// blob pulls use); `http` makes the requests.
pub(crate) async fn fetch(
    client: &Client,
    http: &reqwest::Client,
    scheme: Scheme,
    image: &Reference,
    auth: &RegistryAuth,
    limits: &Limits,
) -> Result<(OciImageManifest, String)> {
    let authorization = match client
        .auth(image, auth, RegistryOperation::Pull)
        .await
        .context("authenticating to the registry")?
    {
        Some(token) => Some(format!("Bearer {token}")),
        // No token: the registry asked for none, or for HTTP basic.
        None => match auth {
            RegistryAuth::Basic(user, password) => Some(basic(user, password)),
            _ => None,
        },
    };
    let (manifest, digest) =
        fetch_one(http, scheme, image, authorization.as_deref(), limits).await?;
    match manifest {
        OciManifest::Image(m) => Ok((m, digest)),
        OciManifest::ImageIndex(index) => {
            let Some(chosen) = current_platform_resolver(&index.manifests) else {
                bail!("the image index {digest} has no manifest for this machine's platform");
            };
            let platform = image.clone_with_digest(chosen.clone());
            match fetch_one(http, scheme, &platform, authorization.as_deref(), limits).await? {
                (OciManifest::Image(m), _) => Ok((m, chosen)),
                (OciManifest::ImageIndex(_), _) => {
                    bail!("the image index {digest} names another index ({chosen})")
                }
            }
        }
    }
}

fn basic(user: &str, password: &str) -> String {
    use base64::Engine;
    let pair = format!("{user}:{password}");
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(pair)
    )
}

/// `oci-client`'s manifest URL for `image`.
fn url(scheme: Scheme, image: &Reference) -> String {
    let reference = image
        .digest()
        .unwrap_or_else(|| image.tag().unwrap_or("latest"));
    let ns = image
        .namespace()
        .map(|ns| format!("?ns={ns}"))
        .unwrap_or_default();
    format!(
        "{}://{}/v2/{}/manifests/{reference}{ns}",
        scheme.as_str(),
        image.resolve_registry(),
        image.repository()
    )
}

async fn fetch_one(
    http: &reqwest::Client,
    scheme: Scheme,
    image: &Reference,
    authorization: Option<&str>,
    limits: &Limits,
) -> Result<(OciManifest, String)> {
    let url = url(scheme, image);
    let mut request = http.get(&url).header(reqwest::header::ACCEPT, ACCEPT);
    if let Some(a) = authorization {
        request = request.header(reqwest::header::AUTHORIZATION, a);
    }
    let mut response = request
        .send()
        .await
        .with_context(|| format!("requesting {url}"))?;
    let status = response.status();
    let header_digest = response
        .headers()
        .get("Docker-Content-Digest")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    if !status.is_success() {
        let body = read_bounded(&mut response, ERROR_BODY as u64, true).await?;
        let text = String::from_utf8_lossy(&body);
        let why = if status == reqwest::StatusCode::UNAUTHORIZED {
            "Not authorized (give credentials with --creds or --authfile)"
        } else {
            "the registry refused"
        };
        bail!("{why}: {url} answered {status}: {}", text.trim());
    }
    let max = limits.manifest_bytes;
    if response.content_length().is_some_and(|n| n > max) {
        bail!("the manifest at {url} is larger than {max} bytes (the manifest-size limit)");
    }
    let body = read_bounded(&mut response, max, false)
        .await
        .with_context(|| format!("reading the manifest at {url}"))?;
    let digest = verify_digest(&body, image.digest(), header_digest.as_deref())
        .with_context(|| format!("the manifest at {url}"))?;
    Ok((
        parse(&body).with_context(|| format!("the manifest at {url}"))?,
        digest,
    ))
}

/// The body, at most `max` bytes: more is an error, or cut off when
/// `truncate`.
async fn read_bounded(
    response: &mut reqwest::Response,
    max: u64,
    truncate: bool,
) -> Result<Vec<u8>> {
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await? {
        if (body.len() + chunk.len()) as u64 > max {
            if truncate {
                body.extend_from_slice(&chunk[..max as usize - body.len()]);
                break;
            }
            bail!("larger than {max} bytes (the manifest-size limit)");
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// The digest of `body` (`sha256:` or `sha512:` hex), which must be
/// `expected` (the reference's) and the registry's `header` when given.
pub(crate) fn verify_digest(
    body: &[u8],
    expected: Option<&str>,
    header: Option<&str>,
) -> Result<String> {
    let of = |algorithm: &str| -> Result<String> {
        let alg = match algorithm {
            "sha256" => &ring::digest::SHA256,
            "sha512" => &ring::digest::SHA512,
            other => bail!("unsupported digest algorithm {other:?}"),
        };
        let d = ring::digest::digest(alg, body);
        let hex: String = d.as_ref().iter().map(|b| format!("{b:02x}")).collect();
        Ok(format!("{algorithm}:{hex}"))
    };
    let algorithm = |d: &str| d.split_once(':').map_or("", |(a, _)| a).to_string();
    let digest = match expected {
        Some(e) => {
            let actual = of(&algorithm(e))?;
            if actual != e {
                bail!("its digest is {actual}, not the {e} the reference names");
            }
            actual
        }
        None => of("sha256")?,
    };
    if let Some(h) = header {
        let actual = of(&algorithm(h))?;
        if actual != h {
            bail!("its digest is {actual}, not the {h} the registry announced");
        }
    }
    Ok(digest)
}

/// A schema 2 manifest or index.
pub(crate) fn parse(body: &[u8]) -> Result<OciManifest> {
    let manifest: OciManifest = serde_json::from_slice(body).context("not a manifest")?;
    let version = match &manifest {
        OciManifest::Image(m) => m.schema_version,
        OciManifest::ImageIndex(i) => i.schema_version,
    };
    if version != 2 {
        bail!("schema version {version}, only 2 is supported");
    }
    Ok(manifest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_are_checked_against_the_reference_and_the_header() {
        let body = b"{}";
        let sha256 = "sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a";
        assert_eq!(verify_digest(body, None, None).unwrap(), sha256);
        assert_eq!(
            verify_digest(body, Some(sha256), Some(sha256)).unwrap(),
            sha256
        );
        let other = "sha256:0000000000000000000000000000000000000000000000000000000000000000";
        let e = verify_digest(body, Some(other), None).unwrap_err();
        assert!(e.to_string().contains("the reference names"), "{e}");
        let e = verify_digest(body, None, Some(other)).unwrap_err();
        assert!(e.to_string().contains("the registry announced"), "{e}");
        assert!(verify_digest(body, Some("md5:x"), None).is_err());
        assert!(verify_digest(body, Some("nocolon"), None).is_err());
        let sha512 = verify_digest(body, None, None).map(|_| ()).and_then(|()| {
            let d = ring::digest::digest(&ring::digest::SHA512, body);
            let hex: String = d.as_ref().iter().map(|b| format!("{b:02x}")).collect();
            verify_digest(body, Some(&format!("sha512:{hex}")), None)
        });
        assert!(sha512.unwrap().starts_with("sha512:"));
    }

    #[test]
    fn only_schema_2_parses() {
        let image = br#"{"schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                       "digest": "sha256:aa", "size": 2},
            "layers": []}"#;
        assert!(matches!(parse(image).unwrap(), OciManifest::Image(_)));
        let v1 = String::from_utf8_lossy(image).replace("2,", "1,");
        assert!(parse(v1.as_bytes()).is_err());
        assert!(parse(b"[]").is_err());
    }

    #[test]
    fn the_url_is_oci_clients() {
        let r: Reference = "r.example:5000/team/tool:1".parse().unwrap();
        assert_eq!(
            url(Scheme::Https, &r),
            "https://r.example:5000/v2/team/tool/manifests/1"
        );
        assert_eq!(
            url(Scheme::Http, &r),
            "http://r.example:5000/v2/team/tool/manifests/1"
        );
        let d = format!("sha256:{}", "ab".repeat(32));
        let r: Reference = format!("r.example/tool@{d}").parse().unwrap();
        assert_eq!(
            url(Scheme::Https, &r),
            format!("https://r.example/v2/tool/manifests/{d}")
        );
    }
}
