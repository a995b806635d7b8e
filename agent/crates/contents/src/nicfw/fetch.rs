//! A firmware image brought into a scratch directory of its own (IPA's
//! `NvidiaNicFirmwareBinary._process_url`) and hashed on the way: http(s)
//! through the agent's image client (`image::fetch`: its TLS settings,
//! proxies, retries and timeouts), `file://` copied. IPA *moves* a
//! `file://` image, so a second card of the same PSID finds it gone; a copy
//! leaves the source for it. The directory goes when the value is dropped.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use reqwest::Url;

use super::NicFwError;
use crate::image::buffers::{Block, Pool};
use crate::image::checksum::{Algo, Hasher};
use crate::image::fetch::{self, FetchEnd, HttpOptions};
use crate::image::progress::Progress;

/// A downloaded image and the digest of its bytes.
#[derive(Debug)]
pub(crate) struct Downloaded {
    dir: PathBuf,
    /// The image file.
    pub path: PathBuf,
    /// Lower-case hex digest of the bytes as downloaded.
    pub digest: String,
}

impl Drop for Downloaded {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_dir_all(&self.dir) {
            tracing::error!(dir = %self.dir.display(), "Failed to remove the firmware image's directory: {e}");
        }
    }
}

/// Brings `url` into a new directory under `scratch`, hashing it with
/// `algo`. An unsupported scheme is IPA's `InvalidURLScheme`.
pub(crate) fn download(
    url: &str,
    algo: Algo,
    http: &HttpOptions,
    scratch: &Path,
) -> Result<Downloaded, NicFwError> {
    let parsed = Url::parse(url).ok();
    let scheme = parsed.as_ref().map_or("", |u| u.scheme());
    if !["file", "http", "https"].contains(&scheme) {
        return Err(NicFwError::InvalidUrlScheme(format!(
            "Firmware URL scheme {scheme:?} of {url} is not supported. The supported firmware URL schemes are (http://, https://, file://)"
        )));
    }
    let fail = |reason: String| NicFwError::Download {
        url: url.to_string(),
        reason,
    };
    let dir = new_dir(scratch).map_err(|e| {
        fail(format!(
            "creating a directory under {}: {e}",
            scratch.display()
        ))
    })?;
    let name = parsed
        .as_ref()
        .and_then(|u| u.path_segments()?.next_back().map(str::to_string))
        .filter(|n| !n.is_empty() && n != "..")
        .unwrap_or_else(|| "firmware.bin".into());
    let mut done = Downloaded {
        path: dir.join(name),
        dir,
        digest: String::new(),
    };
    let source = if scheme == "file" {
        match parsed.as_ref().and_then(|u| u.to_file_path().ok()) {
            Some(p) => p.to_string_lossy().into_owned(),
            None => return Err(fail("not a local file path".into())),
        }
    } else {
        url.to_string()
    };
    tracing::info!(url, to = %done.path.display(), "Downloading the firmware image");
    done.digest = copy_hashing(&source, &done.path, algo, http).map_err(fail)?;
    Ok(done)
}

/// A new, empty directory under `scratch` (IPA's `mkdtemp` prefix).
fn new_dir(scratch: &Path) -> std::io::Result<PathBuf> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    loop {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = scratch.join(format!("nvidia_firmware-{}-{n}", std::process::id()));
        match std::fs::create_dir(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
}

/// Copies `source` (a URL or a path) into `dest`, returning its digest.
fn copy_hashing(
    source: &str,
    dest: &Path,
    algo: Algo,
    http: &HttpOptions,
) -> Result<String, String> {
    let mut file = File::create(dest).map_err(|e| format!("creating {}: {e}", dest.display()))?;
    let mut hasher = Hasher::new(algo);
    let mut write_error = None;
    let pool = Pool::new(2, 1 << 20);
    let progress = Progress::default();
    let mut emit = |b: Block| {
        hasher.update(&b);
        match file.write_all(&b) {
            Ok(()) => true,
            Err(e) => {
                write_error = Some(format!("writing {}: {e}", dest.display()));
                false
            }
        }
    };
    let got = fetch::fetch(&[source.to_string()], http, &pool, &progress, &mut emit);
    match got {
        Ok(_) => {}
        Err(FetchEnd::Failed(e)) => return Err(e.to_string()),
        Err(FetchEnd::Stopped) => {
            return Err(write_error.unwrap_or_else(|| "the download stopped".into()))
        }
    }
    file.sync_all()
        .map_err(|e| format!("writing {}: {e}", dest.display()))?;
    Ok(hasher.finish_hex())
}
