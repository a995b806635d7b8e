//! The config drive as the conductor sends it (PROTOCOL.md §6.1): null, an inline
//! gzip+base64 string, or an `http(s)` URL whose body is either gzip+base64
//! or the raw image. Decoded here, before any disk is touched, into the
//! bytes to write (at most [`MAX_SIZE`]).

use std::io::Read;

use base64::Engine;
use serde_json::Value;

use super::ConfigDriveError;
use crate::image::buffers::{Block, Pool};
use crate::image::fetch::{self, FetchEnd, HttpOptions};
use crate::image::progress::Progress;

/// Largest config drive accepted, uncompressed (IPA's whole-disk limit).
pub const MAX_SIZE: usize = 64 << 20;
/// Largest download accepted: base64 of a gzip of at most [`MAX_SIZE`] is
/// about 4/3 of it, a raw image exactly it.
const MAX_DOWNLOAD: usize = MAX_SIZE / 3 * 4 + (1 << 20);

/// Decodes the `configdrive` parameter. `Ok(None)`: no config drive.
pub fn load(value: &Value, http: &HttpOptions) -> Result<Option<Vec<u8>>, ConfigDriveError> {
    let text = match value {
        Value::Null => return Ok(None),
        Value::String(s) if s.trim().is_empty() => return Ok(None),
        Value::String(s) => s.trim(),
        other => {
            return Err(ConfigDriveError::Invalid(format!(
                "expected a gzip+base64 string or a URL, got a JSON {}",
                json_kind(other)
            )))
        }
    };
    if fetch::is_http(text) {
        let body = download(text, http)?;
        // A body that is not base64 is the raw image (IPA's rule).
        return match decode_base64(&body) {
            Some(gz) => gunzip(&gz).map(Some),
            None => check_size(body).map(Some),
        };
    }
    let gz = decode_base64(text.as_bytes()).ok_or_else(|| {
        ConfigDriveError::Invalid("the inline config drive is not valid base64".into())
    })?;
    gunzip(&gz).map(Some)
}

fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Object(_) => "object (Ironic renders dicts to an ISO before sending)",
        Value::Array(_) => "array",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        _ => "value",
    }
}

/// Standard base64, line breaks and surrounding blanks ignored.
fn decode_base64(data: &[u8]) -> Option<Vec<u8>> {
    let compact: Vec<u8> = data
        .iter()
        .copied()
        .filter(|b| !b.is_ascii_whitespace())
        .collect();
    if compact.is_empty() {
        return None;
    }
    base64::engine::general_purpose::STANDARD
        .decode(&compact)
        .ok()
}

fn gunzip(gz: &[u8]) -> Result<Vec<u8>, ConfigDriveError> {
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(gz)
        .take(MAX_SIZE as u64 + 1)
        .read_to_end(&mut out)
        .map_err(|e| ConfigDriveError::Invalid(format!("not gzip data: {e}")))?;
    check_size(out)
}

fn check_size(data: Vec<u8>) -> Result<Vec<u8>, ConfigDriveError> {
    if data.len() > MAX_SIZE {
        return Err(ConfigDriveError::TooLarge {
            limit: MAX_SIZE as u64,
        });
    }
    if data.is_empty() {
        return Err(ConfigDriveError::Invalid(
            "the config drive is empty".into(),
        ));
    }
    Ok(data)
}

fn download(url: &str, http: &HttpOptions) -> Result<Vec<u8>, ConfigDriveError> {
    let pool = Pool::new(2, 1 << 20);
    let progress = Progress::default();
    let mut data = Vec::new();
    let mut emit = |b: Block| {
        data.extend_from_slice(&b);
        data.len() <= MAX_DOWNLOAD
    };
    match fetch::fetch(&[url.to_string()], http, &pool, &progress, &mut emit) {
        Ok(_) => Ok(data),
        Err(FetchEnd::Stopped) => Err(ConfigDriveError::TooLarge {
            limit: MAX_SIZE as u64,
        }),
        Err(FetchEnd::Failed(e)) => Err(ConfigDriveError::Download {
            url: url.to_string(),
            reason: e.to_string(),
        }),
    }
}

/// gzip+base64 of `data`, as Ironic sends a rendered config drive.
pub fn encode(data: &[u8]) -> String {
    use std::io::Write;
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(data).expect("writing to memory");
    let gz = gz.finish().expect("writing to memory");
    base64::engine::general_purpose::STANDARD.encode(gz)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn inline_gzip_base64_round_trips_and_null_means_none() {
        let http = HttpOptions::default();
        let data = b"config drive bytes".repeat(100);
        let got = load(&json!(encode(&data)), &http).unwrap().unwrap();
        assert_eq!(got, data);
        assert_eq!(load(&Value::Null, &http).unwrap(), None);
        assert_eq!(load(&json!(""), &http).unwrap(), None);
    }

    #[test]
    fn wrong_forms_and_oversize_are_refused_with_the_reason() {
        let http = HttpOptions::default();
        let e = load(&json!({"user_data": "x"}), &http).unwrap_err();
        assert!(e.to_string().contains("object"), "{e}");
        let e = load(&json!("not base64 !!"), &http).unwrap_err();
        assert!(e.to_string().contains("base64"), "{e}");
        let plain = base64::engine::general_purpose::STANDARD.encode(b"plain");
        let e = load(&json!(plain), &http).unwrap_err();
        assert!(e.to_string().contains("gzip"), "{e}");
        let big = vec![0u8; MAX_SIZE + 1];
        let e = load(&json!(encode(&big)), &http).unwrap_err();
        assert!(e.to_string().contains("64 MiB"), "{e}");
    }
}
