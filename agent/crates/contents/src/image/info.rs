//! The conductor's `image_info` (PROTOCOL.md §5.1–5.3): validation as IPA does it
//! before anything is touched, and translation into a [`WriteRequest`].

use base64::Engine as _;
use serde_json::Value;

use super::checksum::{is_url, Algo, ChecksumSource, ChecksumSpec};
use super::fetch::HttpOptions;
use super::{ImageError, WriteRequest};

/// A validated `image_info`.
#[derive(Debug, Clone)]
pub struct ImageInfo {
    /// `id` (the image's name in logs and results).
    pub id: String,
    /// What to write.
    pub request: WriteRequest,
    /// The conductor's `disk_format` (a hint; the bytes decide).
    pub disk_format: Option<String>,
    /// `image_type: partition` (PROTOCOL.md §5.6).
    pub partition: bool,
}

fn invalid(msg: impl Into<String>) -> ImageError {
    ImageError::InvalidParams(msg.into())
}

fn opt_str<'a>(info: &'a Value, key: &str) -> Result<Option<&'a str>, ImageError> {
    match info.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(other) => Err(invalid(format!(
            "image_info.{key} must be a string, not {other}"
        ))),
    }
}

/// Whether `url` is http(s), the only image sources the API accepts.
fn is_remote(url: &str) -> bool {
    let lower = url.get(..8).unwrap_or(url).to_ascii_lowercase();
    lower.starts_with("http://") || lower.starts_with("https://")
}

/// Validates `image_info`. `http` carries the agent's TLS settings;
/// `md5_allowed` the conductor's `agent_md5_checksum_enable`.
pub fn parse(info: &Value, http: HttpOptions, md5_allowed: bool) -> Result<ImageInfo, ImageError> {
    parse_with(info, http, md5_allowed, false)
}

/// [`parse`], but an image without any checksum is accepted and written
/// unverified ([`ChecksumSource::Unverified`], coreos-installer's
/// `--insecure`); only `install_coreos` asks for this, and logs it.
pub fn parse_allowing_unverified(
    info: &Value,
    http: HttpOptions,
    md5_allowed: bool,
) -> Result<ImageInfo, ImageError> {
    parse_with(info, http, md5_allowed, true)
}

fn parse_with(
    info: &Value,
    mut http: HttpOptions,
    md5_allowed: bool,
    allow_unverified: bool,
) -> Result<ImageInfo, ImageError> {
    if !info.is_object() {
        return Err(invalid("image_info must be an object"));
    }
    let id = opt_str(info, "id")?
        .filter(|s| !s.is_empty())
        .ok_or_else(|| invalid("image_info.id is missing"))?;
    let urls: Vec<String> = match info.get("urls") {
        Some(Value::Array(a)) if !a.is_empty() => a
            .iter()
            .map(|u| {
                u.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| invalid("image_info.urls must hold strings"))
            })
            .collect::<Result<_, _>>()?,
        _ => return Err(invalid("image_info.urls must be a non-empty list")),
    };
    // The conductor hands out image servers; a path or file:// URL from the
    // API would write (and checksum) this machine's own files.
    if let Some(u) = urls.iter().find(|u| !is_remote(u)) {
        return Err(invalid(format!(
            "image_info.urls: {u:?} is not an http:// or https:// URL"
        )));
    }
    // Only "partition" is a partition image (whose layout keys the
    // partition image code reads); Ironic sends no image_type otherwise.
    let partition = opt_str(info, "image_type")? == Some("partition");

    let checksum = opt_str(info, "checksum")?;
    if checksum == Some("") {
        return Err(invalid("image_info.checksum is empty"));
    }
    let algo_name = opt_str(info, "os_hash_algo")?;
    let hash_value = opt_str(info, "os_hash_value")?;
    if algo_name.is_some() != hash_value.is_some()
        || algo_name == Some("")
        || hash_value == Some("")
    {
        return Err(invalid(
            "image_info.os_hash_algo and os_hash_value must both be given, non-empty",
        ));
    }
    if let Some(c) = checksum.filter(|c| c.starts_with("file://")) {
        return Err(invalid(format!(
            "image_info.checksum: {c:?} is a local file; only http(s) checksum URLs are fetched"
        )));
    }
    let source = |v: &str| {
        if is_url(v) {
            ChecksumSource::Url(v.to_string())
        } else {
            ChecksumSource::Literal(v.to_string())
        }
    };
    let spec = match (algo_name.map(|a| (a, Algo::parse(a))), hash_value, checksum) {
        (Some((_, Some(algo))), Some(v), _) => ChecksumSpec {
            algo: Some(algo),
            source: source(v),
        },
        (Some((name, None)), _, None) => {
            return Err(invalid(format!(
                "image_info.os_hash_algo {name:?} is not supported (use sha256 or sha512)"
            )))
        }
        (_, _, Some(c)) => ChecksumSpec {
            algo: None,
            source: source(c),
        },
        (None, _, None) if allow_unverified => ChecksumSpec {
            algo: None,
            source: ChecksumSource::Unverified,
        },
        (None, _, None) => {
            return Err(invalid(
                "image_info has no checksum: give os_hash_algo and os_hash_value, or checksum",
            ))
        }
        (Some(_), None, _) => unreachable!("checked above"),
    };
    if let ChecksumSource::Literal(hex) = &spec.source {
        if hex.len() == 32 && spec.algo.is_none() && !md5_allowed {
            return Err(invalid(
                "image_info.checksum is an MD5 digest, which the conductor disabled (agent_md5_checksum_enable)",
            ));
        }
    }

    if let Some(p) = info.get("proxies").filter(|p| !p.is_null()) {
        let p = p
            .as_object()
            .ok_or_else(|| invalid("image_info.proxies must be an object"))?;
        http.http_proxy = p.get("http").and_then(Value::as_str).map(str::to_string);
        http.https_proxy = p.get("https").and_then(Value::as_str).map(str::to_string);
    }
    http.no_proxy = opt_str(info, "no_proxy")?.map(str::to_string);
    if opt_str(info, "image_server_auth_strategy")? == Some("http_basic") {
        let user = opt_str(info, "image_server_user")?.unwrap_or_default();
        let password = opt_str(info, "image_server_password")?.unwrap_or_default();
        if user.is_empty() || password.is_empty() {
            return Err(invalid("http_basic image server authentication needs image_server_user and image_server_password"));
        }
        http.set_basic_auth(user, password);
    }
    if let Some(auth) = opt_str(info, "image_request_authorization")? {
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(auth)
            .ok()
            .and_then(|b| String::from_utf8(b).ok())
            .ok_or_else(|| invalid("image_info.image_request_authorization is not base64 text"))?;
        http.authorization = Some(decoded);
    }

    Ok(ImageInfo {
        id: id.to_string(),
        disk_format: opt_str(info, "disk_format")?.map(str::to_string),
        partition,
        request: WriteRequest {
            urls,
            checksum: spec,
            md5_allowed,
            format: None,
            formats: Default::default(),
            http,
        },
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const SHA: &str = "1b265f9dbb875c7efe7a36aede88e97fc9606beb54674bdc997b405a99bc9d31";

    fn p(v: Value) -> Result<ImageInfo, ImageError> {
        parse(&v, HttpOptions::default(), false)
    }

    #[test]
    fn ironic_write_image_info_is_accepted() {
        let info = p(
            json!({"id": "test.raw", "urls": ["http://127.0.0.1:8088/images/test.raw"],
            "disk_format": "raw", "container_format": null, "stream_raw_images": true,
            "os_hash_algo": "sha256", "os_hash_value": SHA, "node_uuid": "x"}),
        )
        .unwrap();
        assert_eq!(info.id, "test.raw");
        assert_eq!(info.request.checksum.algo, Some(Algo::Sha256));
        assert_eq!(
            info.request.checksum.source,
            ChecksumSource::Literal(SHA.into())
        );
        assert_eq!(info.disk_format.as_deref(), Some("raw"));
        assert!(!info.partition);
    }

    #[test]
    fn partition_images_are_recognised_by_image_type() {
        let info = p(
            json!({"id": "p.img", "urls": ["http://h/p.img"], "checksum": SHA,
            "image_type": "partition", "root_mb": 2048, "swap_mb": 0, "ephemeral_mb": 0,
            "ephemeral_format": null, "preserve_ephemeral": false, "deploy_boot_mode": "bios"}),
        )
        .unwrap();
        assert!(info.partition);
        // Any other image_type is a whole disk (Ironic sends none for those).
        let info = p(
            json!({"id": "a", "urls": ["http://h/a"], "checksum": SHA, "image_type": "whole-disk"}),
        )
        .unwrap();
        assert!(!info.partition);
    }

    #[test]
    fn invalid_image_info_is_refused_with_the_reason() {
        let cases = [
            (
                json!({"urls": ["http://h/u"], "checksum": SHA}),
                "id is missing",
            ),
            (
                json!({"id": "a", "urls": ["/etc/shadow"], "checksum": SHA}),
                "is not an http:// or https:// URL",
            ),
            (
                json!({"id": "a", "urls": ["http://h/a", "file:///etc/shadow"], "checksum": SHA}),
                "\"file:///etc/shadow\" is not an http",
            ),
            (
                json!({"id": "a", "urls": ["http://h/a"], "checksum": "file:///etc/SHA256SUMS"}),
                "is a local file",
            ),
            (
                json!({"id": "a", "urls": [], "checksum": SHA}),
                "non-empty list",
            ),
            (json!({"id": "a", "urls": ["http://h/u"]}), "no checksum"),
            (
                json!({"id": "a", "urls": ["http://h/u"], "checksum": ""}),
                "checksum is empty",
            ),
            (
                json!({"id": "a", "urls": ["http://h/u"], "os_hash_algo": "sha256"}),
                "both be given",
            ),
            (
                json!({"id": "a", "urls": ["http://h/u"], "os_hash_algo": "sha3_256", "os_hash_value": SHA}),
                "not supported",
            ),
            (
                json!({"id": "a", "urls": ["http://h/u"], "checksum": "0".repeat(32)}),
                "MD5",
            ),
            (
                json!({"id": "a", "urls": ["http://h/u"], "checksum": SHA, "image_server_auth_strategy": "http_basic"}),
                "image_server_user",
            ),
        ];
        for (v, want) in cases {
            let err = p(v.clone()).unwrap_err().to_string();
            assert!(err.contains(want), "{v}: {err}");
        }
    }

    #[test]
    fn checksum_url_proxies_and_auth() {
        let auth = base64::engine::general_purpose::STANDARD.encode("Bearer abc");
        let info = p(
            json!({"id": "a", "urls": ["http://h/a.img"], "checksum": "http://h/SHA256SUMS",
            "proxies": {"http": "http://proxy:3128"}, "no_proxy": "10.0.0.1",
            "image_request_authorization": auth}),
        )
        .unwrap();
        assert_eq!(
            info.request.checksum.source,
            ChecksumSource::Url("http://h/SHA256SUMS".into())
        );
        assert_eq!(
            info.request.http.http_proxy.as_deref(),
            Some("http://proxy:3128")
        );
        assert_eq!(info.request.http.no_proxy.as_deref(), Some("10.0.0.1"));
        assert_eq!(
            info.request.http.authorization.as_deref(),
            Some("Bearer abc")
        );
        // Unknown os_hash_algo falls back to `checksum`.
        let info = p(json!({"id": "a", "urls": ["http://h/u"], "os_hash_algo": "blake2b", "os_hash_value": "x", "checksum": SHA}))
            .unwrap();
        assert_eq!(info.request.checksum.algo, None);
    }
}
