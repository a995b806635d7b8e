//! Disk burn-in (IPA's `burnin_disk`, there one `fio --rw readwrite --bs 4k
//! --direct 1 --verify crc32c --loops L --runtime R --time_based` job per
//! disk): every disk at once, each written whole with a reproducible
//! pattern (every 512-byte sector seeded by the pass and its number) and
//! read back and compared, `loops` times, or pass after pass for `runtime`
//! when that is set. O_DIRECT, 1 MiB at a time; a sector that reads back
//! wrong, or an I/O error, names the disk and the byte. Destructive: the
//! disks end full of the last pattern.
//!
//! The same guards as the erase steps decide what may be written: the write
//! policy (in host mode only the devices named with `--allow-device`, never
//! a mounted or held one), the boot medium and RAID members skipped, shared
//! cluster filesystems refused unless the node allows wiping them;
//! read-only disks are skipped with a note.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Context;
use serde::Serialize;

use super::{pattern_word, BurninError, Stop};
use crate::disk::fullerase::guard;
use crate::disk::{ioctl, Device, WritePolicy};

/// Bytes per read or write.
const CHUNK: usize = 1 << 20;
/// The unit a pattern seed covers.
const SECTOR: u64 = 512;
/// Alignment of the I/O buffer (O_DIRECT, 4 KiB logical sectors).
const ALIGN: usize = 4096;

/// What to do to the disks.
#[derive(Debug, Clone, Copy)]
pub struct Plan {
    /// Write-and-verify passes when no deadline is set (fio's `loops`).
    pub loops: u64,
    /// Allow disks holding shared cluster filesystems.
    pub wipe_special: bool,
}

/// One disk's result.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct DiskReport {
    /// The device.
    pub device: String,
    /// Why it was left alone, if it was.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
    /// Size in bytes.
    pub size: u64,
    /// Complete write-and-verify passes.
    pub passes: u64,
    /// Bytes written (all passes, the last partial one included).
    pub bytes_written: u64,
    /// Bytes read back and compared.
    pub bytes_verified: u64,
    /// Write rate over all passes, bytes per second.
    pub write_bytes_per_second: f64,
    /// Read-back rate, bytes per second.
    pub read_bytes_per_second: f64,
}

impl DiskReport {
    fn skipped(device: &Path, why: String) -> Self {
        tracing::warn!(device = %device.display(), "disk burn-in skips it: {why}");
        Self {
            device: device.display().to_string(),
            skipped: Some(why),
            size: 0,
            passes: 0,
            bytes_written: 0,
            bytes_verified: 0,
            write_bytes_per_second: 0.0,
            read_bytes_per_second: 0.0,
        }
    }
}

/// A heap buffer whose first byte is [`ALIGN`]-aligned.
struct Aligned {
    raw: Vec<u8>,
    start: usize,
}

impl Aligned {
    fn new(len: usize) -> Self {
        let raw = vec![0u8; len + ALIGN];
        let start = (ALIGN - raw.as_ptr() as usize % ALIGN) % ALIGN;
        Self { raw, start }
    }

    fn get(&mut self, len: usize) -> &mut [u8] {
        &mut self.raw[self.start..self.start + len]
    }
}

/// Burns in every disk of `disks` at once; all reports, or the failures.
pub fn run(
    disks: &[PathBuf],
    policy: &WritePolicy,
    plan: Plan,
    stop: Stop<'_>,
) -> Result<Vec<DiskReport>, BurninError> {
    if disks.is_empty() {
        return Err(BurninError::failed(
            "disk burn-in",
            "no disk to burn in (none found, or all skipped)",
        ));
    }
    let start = Instant::now();
    let results: Vec<Result<DiskReport, BurninError>> = std::thread::scope(|s| {
        let handles: Vec<_> = disks
            .iter()
            .map(|d| s.spawn(move || one(d, policy, plan, stop)))
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|_| {
                    Err(BurninError::failed("disk burn-in", "a worker panicked"))
                })
            })
            .collect()
    });
    if stop.aborted() {
        return Err(BurninError::Aborted(start.elapsed().as_secs_f64()));
    }
    let mut reports = Vec::new();
    let mut failures = Vec::new();
    for r in results {
        match r {
            Ok(r) => reports.push(r),
            Err(e) => failures.push(e.to_string()),
        }
    }
    if !failures.is_empty() {
        return Err(BurninError::failed("disk burn-in", failures.join("; ")));
    }
    Ok(reports)
}

fn read_only(dev: &Device) -> bool {
    dev.kernel_name()
        .and_then(|n| std::fs::read_to_string(format!("/sys/class/block/{n}/ro")).ok())
        .is_some_and(|s| s.trim() == "1")
}

/// The checks, then the passes, on one disk.
fn one(
    path: &Path,
    policy: &WritePolicy,
    plan: Plan,
    stop: Stop<'_>,
) -> Result<DiskReport, BurninError> {
    let name = path.display().to_string();
    let fail = |reason: String| BurninError::failed(name.clone(), reason);
    let dev = Device::open(path).map_err(|e| fail(e.to_string()))?;
    if read_only(&dev) {
        return Ok(DiskReport::skipped(path, "read-only device".into()));
    }
    policy.check(&dev).map_err(|e| fail(e.to_string()))?;
    let is_block = dev.devno.is_some();
    let file = crate::disk::busy::retry(path, "opening it exclusively", || {
        OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(if is_block {
                libc::O_EXCL | libc::O_DIRECT
            } else {
                0
            })
            .open(path)
    })
    .map_err(|e| fail(format!("opening it exclusively: {e}")))?;
    let size = if is_block {
        ioctl::size_bytes(&file).map_err(|e| fail(format!("reading its size: {e}")))?
    } else {
        file.metadata().map_err(|e| fail(e.to_string()))?.len()
    };
    if let Some(why) = guard::skip_reason(path, &file, size) {
        return Ok(DiskReport::skipped(path, why));
    }
    if !plan.wipe_special {
        let sector = if is_block {
            ioctl::logical_sector_size(&file).map_or(512, u64::from)
        } else {
            512
        };
        if let Some(why) = guard::special_filesystem(&file, size, sector) {
            return Err(fail(format!(
                "protected device: {why}; to burn it in, {}",
                guard::HOW_TO_ALLOW
            )));
        }
    }
    let size = size / SECTOR * SECTOR;
    if size == 0 {
        return Err(fail("the device is empty".into()));
    }
    tracing::info!(device = %name, size, "disk burn-in started");
    let mut report = DiskReport {
        device: name.clone(),
        skipped: None,
        size,
        passes: 0,
        bytes_written: 0,
        bytes_verified: 0,
        write_bytes_per_second: 0.0,
        read_bytes_per_second: 0.0,
    };
    let mut buf = Aligned::new(CHUNK);
    let (mut write_s, mut read_s) = (0.0f64, 0.0f64);
    loop {
        let seed = pattern_word(0x6275_726e, report.passes);
        let t = Instant::now();
        let written =
            write_pass(&file, size, seed, &mut buf, stop).map_err(|e| fail(format!("{e:#}")))?;
        if is_block {
            let _ = ioctl::flush_buffers(&file);
        } else {
            file.sync_data()
                .map_err(|e| fail(format!("flushing: {e}")))?;
        }
        write_s += t.elapsed().as_secs_f64();
        report.bytes_written += written;
        if stop.aborted() {
            break;
        }
        let t = Instant::now();
        let verified = verify_pass(&file, written, seed, &mut buf, stop)
            .map_err(|e| fail(format!("{e:#}")))?;
        read_s += t.elapsed().as_secs_f64();
        report.bytes_verified += verified;
        if written == size && verified == size {
            report.passes += 1;
        }
        let done = match stop.deadline {
            None => report.passes >= plan.loops.max(1),
            Some(_) => stop.expired(),
        };
        if done || stop.aborted() || written < size {
            break;
        }
        tracing::info!(device = %name, passes = report.passes, "disk burn-in pass done");
    }
    report.write_bytes_per_second = report.bytes_written as f64 / write_s.max(1e-9);
    report.read_bytes_per_second = report.bytes_verified as f64 / read_s.max(1e-9);
    tracing::info!(device = %name, passes = report.passes, written = report.bytes_written, verified = report.bytes_verified, "disk burn-in done");
    Ok(report)
}

fn fill(buf: &mut [u8], seed: u64, offset: u64) {
    for (s, sector) in buf.chunks_exact_mut(SECTOR as usize).enumerate() {
        let n = offset / SECTOR + s as u64;
        let sector_seed = pattern_word(seed, n);
        for (i, w) in sector.chunks_exact_mut(8).enumerate() {
            w.copy_from_slice(&pattern_word(sector_seed, i as u64).to_le_bytes());
        }
    }
}

/// Writes the pattern from the start; stops early at the deadline or an
/// abort. Returns the bytes written.
fn write_pass(
    file: &File,
    size: u64,
    seed: u64,
    buf: &mut Aligned,
    stop: Stop<'_>,
) -> anyhow::Result<u64> {
    let mut off = 0u64;
    while off < size {
        if stop.aborted() || stop.expired() {
            break;
        }
        let n = (size - off).min(CHUNK as u64) as usize;
        let b = buf.get(n);
        fill(b, seed, off);
        file.write_all_at(b, off)
            .with_context(|| format!("writing at byte {off}"))?;
        off += n as u64;
    }
    Ok(off)
}

/// Reads back the first `len` bytes and compares every sector. Returns the
/// bytes compared; a sector that differs is an error naming the first one.
fn verify_pass(
    file: &File,
    len: u64,
    seed: u64,
    buf: &mut Aligned,
    stop: Stop<'_>,
) -> anyhow::Result<u64> {
    let mut want = vec![0u8; CHUNK];
    let mut off = 0u64;
    let mut bad = 0u64;
    let mut first = None;
    while off < len {
        if stop.aborted() {
            break;
        }
        let n = (len - off).min(CHUNK as u64) as usize;
        let b = buf.get(n);
        file.read_exact_at(b, off)
            .with_context(|| format!("reading back at byte {off}"))?;
        fill(&mut want[..n], seed, off);
        if b != &want[..n] {
            for (s, (got, exp)) in b
                .chunks_exact(SECTOR as usize)
                .zip(want.chunks_exact(SECTOR as usize))
                .enumerate()
            {
                if got != exp {
                    bad += 1;
                    first.get_or_insert(off + s as u64 * SECTOR);
                }
            }
        }
        off += n as u64;
    }
    match first {
        None => Ok(off),
        Some(at) => Err(anyhow::anyhow!(
            "{bad} sectors read back different from what was written; the first at byte {at}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicBool;
    use std::time::Duration;

    use super::*;
    use agent_base::config::Config;

    fn policy(allowed: &[PathBuf]) -> WritePolicy {
        WritePolicy::from_config(&Config {
            allowed_devices: allowed.to_vec(),
            ..Config::default()
        })
    }

    const PLAN: Plan = Plan {
        loops: 2,
        wipe_special: false,
    };

    #[test]
    fn writes_and_verifies_each_disk_loops_times() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        std::fs::write(&a, vec![0u8; 3 << 20]).unwrap();
        std::fs::write(&b, vec![0u8; (1 << 20) + 512 * 3]).unwrap();
        let cancel = AtomicBool::new(false);
        let stop = Stop {
            deadline: None,
            cancel: &cancel,
        };
        let disks = [a.clone(), b.clone()];
        let r = run(&disks, &policy(&disks), PLAN, stop).unwrap();
        assert_eq!(r.len(), 2);
        assert_eq!(r[0].passes, 2);
        assert_eq!(r[0].bytes_written, 2 * (3 << 20));
        assert_eq!(r[1].bytes_verified, 2 * ((1 << 20) + 1536));
        // The disk holds the last pass's pattern.
        let data = std::fs::read(&b).unwrap();
        let mut want = vec![0u8; data.len()];
        fill(&mut want, pattern_word(0x6275_726e, 1), 0);
        assert!(data == want);
    }

    #[test]
    fn a_deadline_ends_the_passes() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a");
        std::fs::write(&a, vec![0u8; 1 << 20]).unwrap();
        let cancel = AtomicBool::new(false);
        let stop = Stop {
            deadline: Some(Instant::now() + Duration::from_millis(200)),
            cancel: &cancel,
        };
        let disks = [a];
        let r = run(&disks, &policy(&disks), PLAN, stop).unwrap();
        assert!(r[0].passes >= 1, "{r:?}");
    }

    #[test]
    fn a_sector_that_changed_is_named_by_its_byte() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a");
        std::fs::write(&a, vec![0u8; 2 << 20]).unwrap();
        let f = OpenOptions::new().read(true).write(true).open(&a).unwrap();
        let cancel = AtomicBool::new(false);
        let stop = Stop {
            deadline: None,
            cancel: &cancel,
        };
        let mut buf = Aligned::new(CHUNK);
        assert_eq!(write_pass(&f, 2 << 20, 9, &mut buf, stop).unwrap(), 2 << 20);
        f.write_all_at(b"x", (1 << 20) + 5000).unwrap();
        let e = verify_pass(&f, 2 << 20, 9, &mut buf, stop)
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            format!(
                "1 sectors read back different from what was written; the first at byte {}",
                (1 << 20) + 4608
            )
        );
    }

    #[test]
    fn devices_not_allowed_are_refused_and_none_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a");
        std::fs::write(&a, vec![7u8; 1 << 20]).unwrap();
        let cancel = AtomicBool::new(false);
        let stop = Stop {
            deadline: None,
            cancel: &cancel,
        };
        let e = run(std::slice::from_ref(&a), &policy(&[]), PLAN, stop)
            .unwrap_err()
            .to_string();
        assert!(e.contains("--allow-device"), "{e}");
        assert_eq!(std::fs::read(&a).unwrap(), vec![7u8; 1 << 20], "untouched");
        assert!(run(&[], &policy(&[]), PLAN, stop).is_err());
    }
}
