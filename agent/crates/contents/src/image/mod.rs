//! Streaming image write (PROTOCOL.md §5): download, decompress or convert, hash
//! and write to the target device at once, in bounded memory, and leave the
//! disk bootable only when the checksum matched.
//!
//! Pipeline (threads joined by bounded channels; buffers from fixed pools):
//!
//! ```text
//!            ┌─▶ hash (the bytes as downloaded) ───────────────┐
//! fetch ─────┤                                                 ├─▶ verify ─▶ commit | abort
//!            └─▶ decode (raw │ gzip │ zstd │ xz │ qcow2) ─▶ write┘
//! ```
//!
//! [`fetch`] owns sources and resumption, [`checksum`] the digests,
//! [`format`] and [`decode`] the formats, [`target`] the fail-closed device
//! protocol (first MiB held back until verified, the backup GPT moved by
//! [`agent_devices::disk::gpt`]), [`progress`] the counters shown by the API and the CLI, [`info`]
//! the conductor's `image_info`.

pub mod buffers;
pub mod checksum;
pub mod decode;
pub(crate) mod error;
pub mod fetch;
pub mod format;
pub mod info;
pub mod policy;
pub mod progress;
pub mod qcow2;
mod reread;
mod streams;
pub(crate) mod target;

use std::path::Path;
use std::sync::mpsc::sync_channel;
use std::time::Instant;

pub use error::ImageError;
pub use policy::FormatPolicy;

use buffers::{Block, Pool};
use checksum::{ChecksumSource, ChecksumSpec, Expected, Hasher};
use decode::{DecodeEnd, WriteOp};
use fetch::{FetchEnd, HttpOptions};
use format::Format;
use progress::{Phase, Progress};
use target::Target;

use agent_devices::disk::{Device, WritePolicy};

/// Download buffers: 8 × 2 MiB.
const FETCH_BUFFERS: (usize, usize) = (8, 2 << 20);
/// Decoded-output buffers: 4 × 1 MiB. Small enough to stay in the CPU's
/// cache between the decompressor that fills them, the zero scan and the
/// device's copy: with 4 × 4 MiB a 1 GiB zstd write took about 7% longer
/// (agent/docs/image-writing.md).
const OUTPUT_BUFFERS: (usize, usize) = (4, 1 << 20);
/// Largest checksum file accepted.
const CHECKSUM_FILE_LIMIT: usize = 1 << 20;

/// What to write.
#[derive(Debug, Clone)]
pub struct WriteRequest {
    /// Image locations, tried in order.
    pub urls: Vec<String>,
    /// The checksum to verify.
    pub checksum: ChecksumSpec,
    /// Whether MD5 checksums are acceptable.
    pub md5_allowed: bool,
    /// A format the caller insists on; `None` detects it.
    pub format: Option<Format>,
    /// The formats the conductor permits (deep image inspection).
    pub formats: FormatPolicy,
    /// Network settings.
    pub http: HttpOptions,
}

/// What was written.
#[derive(Debug, Clone, PartialEq)]
pub struct WriteReport {
    /// Device written.
    pub device: String,
    /// Bytes of disk content the image defines.
    pub image_size: u64,
    /// Bytes downloaded (and hashed).
    pub downloaded: u64,
    /// Detected format.
    pub format: Format,
    /// A qcow2 found inside a compressed stream.
    pub inner: Option<Format>,
    /// The verified digest.
    pub digest: Expected,
    /// Wall time.
    pub seconds: f64,
    /// MBR disk signature (`root uuid` of whole-disk images).
    pub mbr_signature: u32,
    /// True when the backup GPT was moved to the disk's end.
    pub gpt_moved: bool,
    /// Connections resumed.
    pub resumes: u64,
}

/// Resolves the expected digest, fetching a checksum file if needed.
pub fn resolve_checksum(req: &WriteRequest) -> Result<Expected, ImageError> {
    match &req.checksum.source {
        ChecksumSource::Literal(hex) => Expected::new(req.checksum.algo, hex, req.md5_allowed),
        ChecksumSource::Unverified => Ok(Expected::unverified()),
        ChecksumSource::Url(url) => {
            let file_err = |reason: String| ImageError::ChecksumFile {
                url: url.clone(),
                reason,
            };
            let data = fetch::fetch_small(url, &req.http, CHECKSUM_FILE_LIMIT)
                .map_err(|e| file_err(e.to_string()))?
                .ok_or_else(|| {
                    file_err(format!(
                        "larger than {CHECKSUM_FILE_LIMIT} bytes; not a checksum file"
                    ))
                })?;
            let text = String::from_utf8_lossy(&data);
            let name =
                checksum::file_name_of(req.urls.first().map(String::as_str).unwrap_or_default());
            let hex = checksum::find_in_checksum_file(&text, &name)
                .ok_or_else(|| file_err(format!("no checksum listed for {name:?}")))?;
            Expected::new(req.checksum.algo, &hex, req.md5_allowed)
                .map_err(|e| file_err(e.to_string()))
        }
    }
}

/// Writes the image to `device` (checked against `policy`), verifying its
/// checksum; on any failure the device is left without a partition table.
pub fn write_image(
    req: &WriteRequest,
    device: &Path,
    policy: &WritePolicy,
    progress: &Progress,
) -> Result<WriteReport, ImageError> {
    let started = Instant::now();
    let url = req
        .urls
        .first()
        .cloned()
        .ok_or_else(|| ImageError::InvalidParams("no image URL given".into()))?;
    policy.check(&Device::open(device)?)?;
    // Every setting that can be wrong (TLS, CA file, proxies, credentials)
    // is checked before the device is touched: such errors then truly leave
    // it as it was.
    if req.urls.iter().any(|u| fetch::is_http(u)) {
        req.http.check()?;
    }
    let expected = resolve_checksum(req)?;
    progress.set_phase(Phase::Preparing);
    let mut target = Target::open(device)?;
    tracing::info!(device = %device.display(), url = %url, algo = expected.algo.name(), "writing image");
    progress.set_phase(Phase::Writing);

    let result = run_pipeline(req, &url, &expected, &mut target, progress);
    match result {
        Ok((downloaded, decoded)) => {
            progress.set_phase(Phase::Committing);
            let committed = target
                .commit()
                .inspect_err(|_| progress.set_phase(Phase::Failed))?;
            // A multipath device has no kernel partitions (its BLKRRPART
            // fails): its partitions are dm maps, made from the table just
            // written, now that the exclusive open is closed.
            agent_devices::disk::multipath::sync_partitions(device)
                .map_err(|e| ImageError::Write {
                    device: device.display().to_string(),
                    reason: format!("mapping the multipath device's partitions: {e:#}"),
                })
                .inspect_err(|_| progress.set_phase(Phase::Failed))?;
            progress.set_phase(Phase::Done);
            let report = WriteReport {
                device: device.display().to_string(),
                image_size: committed.image_size,
                downloaded,
                format: decoded.format,
                inner: decoded.inner,
                digest: expected,
                seconds: started.elapsed().as_secs_f64(),
                mbr_signature: committed.mbr_signature,
                gpt_moved: committed.gpt_moved,
                resumes: progress.snapshot().resumes,
            };
            tracing::info!(
                device = %report.device, size = report.image_size, format = %report.format,
                seconds = format!("{:.1}", report.seconds), "image written and verified"
            );
            Ok(report)
        }
        Err(e) => {
            progress.set_phase(Phase::Failed);
            tracing::error!(device = %device.display(), "image write failed: {e}; wiping the partition tables");
            if let Err(wipe) = target.abort() {
                tracing::error!("wiping after the failure also failed: {wipe}");
            }
            Err(e)
        }
    }
}

fn run_pipeline(
    req: &WriteRequest,
    url: &str,
    expected: &Expected,
    target: &mut Target,
    progress: &Progress,
) -> Result<(u64, decode::Decoded), ImageError> {
    let fetch_pool = Pool::new(FETCH_BUFFERS.0, FETCH_BUFFERS.1);
    let out_pool = Pool::new(OUTPUT_BUFFERS.0, OUTPUT_BUFFERS.1);
    let (hash_tx, hash_rx) = sync_channel::<Block>(FETCH_BUFFERS.0);
    let (dec_tx, dec_rx) = sync_channel::<Block>(FETCH_BUFFERS.0);
    let (op_tx, op_rx) = sync_channel::<WriteOp>(OUTPUT_BUFFERS.0);

    std::thread::scope(|s| {
        let fetcher = std::thread::Builder::new()
            .name("image-fetch".into())
            .spawn_scoped(s, move || {
                let mut emit = |b: Block| hash_tx.send(b.clone()).is_ok() && dec_tx.send(b).is_ok();
                fetch::fetch(&req.urls, &req.http, &fetch_pool, progress, &mut emit)
            })
            .expect("spawning the fetch thread");
        let algo = expected.algo;
        let hasher = std::thread::Builder::new()
            .name("image-hash".into())
            .spawn_scoped(s, move || {
                let mut h = Hasher::new(algo);
                let mut n = 0u64;
                for b in hash_rx {
                    if n == 0 && hash_is_the_longest_stage(algo, &b) {
                        favour_this_thread();
                    }
                    h.update(&b);
                    n += b.len() as u64;
                }
                (h.finish_hex(), n)
            })
            .expect("spawning the hash thread");
        let out_pool = &out_pool;
        let decoder = std::thread::Builder::new()
            .name("image-decode".into())
            .spawn_scoped(s, move || {
                decode::decode(dec_rx, op_tx, req, out_pool, url, progress)
            })
            .expect("spawning the decode thread");

        let mut write_err = None;
        for op in op_rx.iter() {
            let r = match op {
                WriteOp::Shared { offset, block } => target.write(offset, &block, progress),
                WriteOp::Owned { offset, buf } => target.write(offset, &buf, progress),
                WriteOp::Zero { offset, len } => target.zero(offset, len, progress),
                WriteOp::Size(n) => target.check_fits(n),
            };
            if let Err(e) = r {
                write_err = Some(e);
                break;
            }
        }
        drop(op_rx);

        let fetched = fetcher.join().expect("fetch thread panicked");
        let decoded = decoder.join().expect("decode thread panicked");
        let (digest, hashed) = hasher.join().expect("hash thread panicked");

        let downloaded = match fetched {
            Err(FetchEnd::Failed(e)) => return Err(e),
            Ok(n) => Some(n),
            Err(FetchEnd::Stopped) => None,
        };
        if let Some(e) = write_err {
            return Err(e);
        }
        let decoded = match decoded {
            Ok(d) => d,
            Err(DecodeEnd::Failed(e)) => return Err(e),
            Err(DecodeEnd::Stopped) => {
                return Err(ImageError::Write {
                    device: String::new(),
                    reason: "the writer stopped without an error (internal)".into(),
                })
            }
        };
        let Some(downloaded) = downloaded else {
            return Err(ImageError::Corrupt {
                format: decoded.format.name(),
                url: url.to_string(),
                reason: "the image ended before the download did".into(),
            });
        };
        if expected.is_unverified() {
            tracing::warn!(url, sha256 = %digest, "image written without a checksum to verify (unverified, as coreos-installer --insecure)");
        } else if digest != expected.hex {
            return Err(ImageError::ChecksumMismatch {
                url: url.to_string(),
                algo: expected.algo.name(),
                expected: expected.hex.clone(),
                actual: digest,
                bytes: hashed,
            });
        }
        Ok((downloaded, decoded))
    })
}

/// Whether the hash, which sees every downloaded byte, is the stage that
/// bounds the write. For raw and qcow2 images it is. For a compressed image
/// it hashes about a third of the bytes the decompressor produces: with
/// SHA-256 (at about 1.5 GB/s with the CPU's SHA instructions) that takes
/// as long as zstd's decompression and less than gzip's or xz's; SHA-384
/// and SHA-512 (about 0.75 GB/s, no such instructions) take twice as long
/// as zstd, still less than gzip or xz. Measured on this project's bench
/// machine (agent/docs/image-writing.md), not at run time.
fn hash_is_the_longest_stage(algo: checksum::Algo, first: &[u8]) -> bool {
    let head = &first[..first.len().min(format::DETECT_BYTES)];
    match format::detect(head) {
        Ok(Format::Zstd) => matches!(algo, checksum::Algo::Sha384 | checksum::Algo::Sha512),
        Ok(f) => !f.is_compressed(),
        Err(_) => true,
    }
}

/// The hash is the one stage that cannot be split across cores, so where it
/// bounds the write it should be the last to wait when the CPUs are busy:
/// the calling thread gets a higher scheduling weight (nice -5). Not where
/// another stage is as long: the load balancer counts that weight as about three
/// threads, so it keeps the decompressor, the writer and the device's
/// worker off the hash's core while the hash waits for data, and that core
/// idles (`perf sched`: a third of a 1 GiB zstd write's second half idle
/// there, with the other core's run queue backed up; interleaved runs were
/// 4–6% faster for zstd and gzip with SHA-256 without it, 3–4% slower for
/// raw and qcow2, and `ci/bench`'s zstd with SHA-512 went from 0.89–0.92 of
/// its floor to 0.87–0.89). Without the privilege the thread stays as it is.
#[allow(unsafe_code)]
fn favour_this_thread() {
    // SAFETY: plain syscall; who = 0 is the calling thread on Linux.
    let r = unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, -5) };
    if r != 0 {
        tracing::debug!(
            "could not raise the hash thread's priority: {}",
            std::io::Error::last_os_error()
        );
    }
}

#[cfg(test)]
mod tests {
    //! Which images give the hash thread the higher weight.

    use super::checksum::Algo;
    use super::hash_is_the_longest_stage as favoured;

    #[test]
    fn the_hash_is_favoured_where_it_bounds_the_write() {
        let raw = [0u8; 512];
        let qcow2 = *b"QFI\xfb\0\0\0\x03";
        let zstd = [0x28, 0xb5, 0x2f, 0xfd, 0x04, 0x58];
        let gzip = [0x1f, 0x8b, 0x08, 0, 0, 0, 0, 0];
        for algo in [Algo::Sha256, Algo::Sha512] {
            assert!(favoured(algo, &raw), "raw, {algo:?}");
            assert!(favoured(algo, &qcow2), "qcow2, {algo:?}");
            assert!(!favoured(algo, &gzip), "gzip, {algo:?}");
        }
        assert!(!favoured(Algo::Sha256, &zstd));
        assert!(favoured(Algo::Sha512, &zstd));
        assert!(favoured(Algo::Sha384, &zstd));
    }
}
