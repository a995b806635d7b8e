//! The local image source: a `file://` URL or a plain path, read from a
//! byte offset into the pool buffers.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};

use super::emitter::Emitter;
use super::outcome::FetchEnd;
use crate::image::ImageError;

/// The path of a `file://` URL (or the plain path given).
fn local_path(url: &str) -> &str {
    url.strip_prefix("file://").unwrap_or(url)
}

/// Reads the file `url` names from `out.offset` into `out`, up to its
/// limit or the file's end.
pub(super) fn fetch_file(url: &str, out: &mut Emitter<'_>) -> Result<(), FetchEnd> {
    let fail = |offset: u64, e: std::io::Error| ImageError::Download {
        url: url.to_string(),
        attempts: 1,
        offset,
        reason: e.to_string(),
    };
    let mut file = File::open(local_path(url)).map_err(|e| fail(0, e))?;
    if let Ok(meta) = file.metadata() {
        out.progress.set_download_total(meta.len());
    }
    if out.offset > 0 {
        file.seek(SeekFrom::Start(out.offset))
            .map_err(|e| fail(0, e))?;
    }
    let mut buf = vec![0u8; 1 << 20];
    while !out.reached() {
        let n = match file.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(fail(out.offset, e).into()),
        };
        out.push(&buf[..n])?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::image::buffers::Pool;
    use crate::image::fetch::{fetch, FetchEnd, HttpOptions};
    use crate::image::progress::Progress;
    use crate::image::ImageError;

    #[test]
    fn local_file_is_read_in_full_buffers() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("img");
        let data: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(&path, &data).unwrap();
        let pool = Pool::new(2, 4096);
        let progress = Progress::default();
        let mut got = Vec::new();
        let mut sizes = Vec::new();
        let n = fetch(
            &[format!("file://{}", path.display())],
            &HttpOptions::default(),
            &pool,
            &progress,
            &mut |b| {
                sizes.push(b.len());
                got.extend_from_slice(&b);
                true
            },
        )
        .unwrap();
        assert_eq!(n, 10_000);
        assert_eq!(got, data);
        assert_eq!(sizes, vec![4096, 4096, 1808]);
        let err = fetch(
            &["/nonexistent/img".into()],
            &HttpOptions::default(),
            &pool,
            &progress,
            &mut |_| true,
        )
        .unwrap_err();
        assert!(
            matches!(err, FetchEnd::Failed(ImageError::Download { ref url, .. }) if url == "/nonexistent/img")
        );
    }
}
