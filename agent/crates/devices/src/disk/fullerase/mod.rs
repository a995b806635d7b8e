//! Full disk erase: the mechanics of the `erase_devices` and
//! `erase_devices_express` clean steps (PROTOCOL.md §7.2, §7.3; the steps are
//! `commands/erase.rs`).
//!
//! Per disk, IPA 13's decision ([`tree`]): the secure erase of the disk's
//! kind — NVMe Format NVM ([`nvme`]) or ATA security erase through SG_IO
//! ([`ata`]; not behind USB/SAS bridges) — then, when it does not apply,
//! overwrite with the passes and final zeroing the conductor asked for
//! ([`knobs`]); when it failed (a frozen drive), discard with a sampled
//! read-back that proves zeros ([`methods`], when
//! `agent_enable_discard_erase` or `ipa-enable-discard-erase` allow it),
//! else overwrite when `agent_continue_if_secure_erase_failed` allows it,
//! else the step fails. Disks are
//! erased in parallel, at most `disk_erasure_concurrency` at once; progress
//! is logged per disk every 10 %; the agent's abort flag (raised on reboot
//! or when the token is wiped, which is how Ironic aborts a clean) stops
//! it between chunks.
//! Read-only disks are skipped (with a note) or fail, per the knob.
//!
//! Not yet: NVMe sanitize.
//! `erase_devices_express`: NVMe format where possible, then the metadata
//! wipe on every device.

pub mod ata;
pub mod guard;
pub(crate) mod knobs;
pub mod methods;
pub(crate) mod nvme;
pub(crate) mod tree;

use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use anyhow::{Context, Result};

use super::{ioctl, Device, WritePolicy};
pub use knobs::Knobs;

/// How one disk was erased.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Erased {
    /// NVMe Format NVM with secure erase (1 user data, 2 cryptographic).
    NvmeFormat(u32),
    /// ATA SECURITY ERASE UNIT (enhanced or normal).
    AtaSecurityErase {
        /// The enhanced mode was used.
        enhanced: bool,
    },
    /// Discarded and read back as zeros.
    Discard,
    /// Overwritten (random passes, zero pass).
    Overwrite {
        /// Random passes.
        passes: u32,
        /// Whether a verified zero pass followed.
        zeroed: bool,
    },
    /// Metadata wiped (number of signatures libblkid removed).
    Metadata(usize),
    /// Skipped, with the reason.
    Skipped(String),
}

impl Erased {
    /// One line for logs and results.
    pub fn describe(&self) -> String {
        match self {
            Self::Metadata(n) => format!("metadata wiped ({n} signature(s))"),
            Self::AtaSecurityErase { enhanced } => format!(
                "ATA security erase{}",
                if *enhanced { " (enhanced)" } else { "" }
            ),
            Self::NvmeFormat(ses) => format!("NVMe format, secure erase setting {ses}"),
            Self::Discard => "discard, verified zeros".into(),
            Self::Overwrite { passes, zeroed } => format!(
                "overwrite: {passes} random pass(es){}",
                if *zeroed { ", zeroed and verified" } else { "" }
            ),
            Self::Skipped(why) => format!("skipped: {why}"),
        }
    }
}

/// One disk's erase as the step reports it: how, and how fast.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// The method that erased it.
    pub erased: Erased,
    /// The disk's size in bytes.
    pub bytes: u64,
    /// Wall time of the whole erase of this disk, checks included.
    pub seconds: f64,
}

impl Outcome {
    /// Disk bytes per second of wall time, in MB/s.
    pub fn mb_per_s(&self) -> f64 {
        self.bytes as f64 / self.seconds.max(1e-6) / 1e6
    }

    /// One line for logs and results: the method, then
    /// `8.0 GiB in 1.2 s (7158 MB/s)`.
    pub fn describe(&self) -> String {
        format!(
            "{}; {:.1} GiB in {:.1} s ({:.0} MB/s)",
            self.erased.describe(),
            self.bytes as f64 / f64::from(1u32 << 30),
            self.seconds,
            self.mb_per_s()
        )
    }
}

/// The NVMe half of `erase_devices_express`: a secure format of each of
/// `disks` that supports it, when the knobs enable it (the metadata wipe of
/// every device follows in the step).
pub fn express_erase(disks: &[PathBuf], policy: &WritePolicy, knobs: &Knobs) -> Result<()> {
    for disk in disks {
        let dev = Device::open(disk)?;
        policy.check(&dev)?;
        let file = open(disk, dev.devno.is_some())?;
        // IPA 13: a failed NVMe erase falls back to the metadata wipe.
        match nvme_attempt(&dev, &file, knobs) {
            tree::Secure::Erased(e) => {
                tracing::info!(device = %disk.display(), method = %e.describe(), "express erase")
            }
            tree::Secure::NotApplicable(_) => {}
            tree::Secure::Failed(e) => tracing::error!(
                device = %disk.display(),
                "NVMe secure erase failed ({e:#}); falling back to the metadata wipe"
            ),
        }
    }
    Ok(())
}

/// Erases `disks` in parallel (at most `knobs.concurrency` at once); all
/// failures are reported together, naming each disk.
pub fn erase_disks(
    disks: &[PathBuf],
    policy: &WritePolicy,
    knobs: &Knobs,
    cancel: &AtomicBool,
) -> Result<Vec<(PathBuf, Outcome)>> {
    let queue = Mutex::new(disks.iter().cloned().collect::<VecDeque<_>>());
    let results = Mutex::new(Vec::new());
    let workers = knobs.concurrency.clamp(1, disks.len().max(1));
    std::thread::scope(|s| {
        for _ in 0..workers {
            s.spawn(|| loop {
                let Some(disk) = queue.lock().expect("queue").pop_front() else {
                    break;
                };
                let r = erase_one(&disk, policy, knobs, cancel);
                results.lock().expect("results").push((disk, r));
            });
        }
    });
    let mut results = results.into_inner().expect("results");
    results.sort_by(|a, b| a.0.cmp(&b.0));
    let failures: Vec<String> = results
        .iter()
        .filter_map(|(d, r)| r.as_ref().err().map(|e| format!("{}: {e:#}", d.display())))
        .collect();
    if !failures.is_empty() {
        anyhow::bail!("erasing failed on {}", failures.join("; "));
    }
    Ok(results
        .into_iter()
        .map(|(d, r)| (d, r.expect("checked")))
        .collect())
}

fn read_only(dev: &Device) -> bool {
    dev.kernel_name()
        .and_then(|n| std::fs::read_to_string(format!("/sys/class/block/{n}/ro")).ok())
        .is_some_and(|s| s.trim() == "1")
}

/// Which method to use on one disk (the `agent erase --method` choice).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// The best available: NVMe format, ATA security erase, discard, overwrite.
    Auto,
    /// Only the metadata wipe (signatures, both GPT copies).
    Metadata,
    /// Discard with a sampled read-back; fails when the device cannot.
    Discard,
    /// Overwrite passes (and the zero pass) from the knobs.
    Overwrite,
    /// NVMe Format NVM with secure erase; fails when not possible.
    Nvme,
    /// ATA security erase; fails when not possible.
    Ata,
}

impl Method {
    /// Parses `auto|metadata|discard|overwrite|nvme`.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "auto" => Self::Auto,
            "metadata" => Self::Metadata,
            "discard" => Self::Discard,
            "overwrite" => Self::Overwrite,
            "nvme" => Self::Nvme,
            "ata" => Self::Ata,
            _ => return None,
        })
    }
}

fn erase_one(
    path: &Path,
    policy: &WritePolicy,
    knobs: &Knobs,
    cancel: &AtomicBool,
) -> Result<Outcome> {
    let started = std::time::Instant::now();
    let done = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let size = std::fs::File::open(path)
        .ok()
        .and_then(|f| {
            ioctl::size_bytes(&f)
                .or_else(|_| f.metadata().map(|m| m.len()))
                .ok()
        })
        .unwrap_or(0);
    let passes = u64::from(knobs.iterations) + u64::from(knobs.zeroize);
    let reporter = progress_logger(path, size.saturating_mul(passes.max(1)), &done, &stop);
    let result = erase_with(path, policy, knobs, Method::Auto, cancel, &done);
    stop.store(true, Ordering::Relaxed);
    let _ = reporter.join();
    let outcome = Outcome {
        erased: result?,
        bytes: size,
        seconds: started.elapsed().as_secs_f64(),
    };
    tracing::info!(
        device = %path.display(),
        seconds = format_args!("{:.2}", outcome.seconds),
        mb_per_s = format_args!("{:.0}", outcome.mb_per_s()),
        method = %outcome.erased.describe(),
        "disk erase done"
    );
    Ok(outcome)
}

/// Erases one disk with `method` after the same checks as `erase_devices`
/// (the write policy, read-only devices, the boot medium and RAID members,
/// special filesystems); `done` counts the bytes processed (all passes;
/// reset to 0 when auto falls back from discard to overwrite).
pub fn erase_with(
    path: &Path,
    policy: &WritePolicy,
    knobs: &Knobs,
    method: Method,
    cancel: &AtomicBool,
    done: &AtomicU64,
) -> Result<Erased> {
    let dev = Device::open(path)?;
    if read_only(&dev) {
        if knobs.skip_read_only {
            tracing::warn!(device = %path.display(), "read-only; skipped");
            return Ok(Erased::Skipped("read-only device".into()));
        }
        anyhow::bail!("the device is read-only (set agent_erase_skip_read_only to skip it)");
    }
    policy.check(&dev)?;
    let is_block = dev.devno.is_some();
    let file = open(path, is_block)?;
    let size = if is_block {
        ioctl::size_bytes(&file).context("reading the size")?
    } else {
        file.metadata()?.len()
    };
    if let Some(why) = guard::skip_reason(path, &file, size) {
        tracing::warn!(device = %path.display(), "skipped: {why}");
        return Ok(Erased::Skipped(why));
    }
    if !knobs.wipe_special {
        let sector = if is_block {
            ioctl::logical_sector_size(&file).map_or(512, u64::from)
        } else {
            512
        };
        if let Some(why) = guard::special_filesystem(&file, size, sector) {
            anyhow::bail!(
                "protected device: {why}; to erase it, {}",
                guard::HOW_TO_ALLOW
            );
        }
    }
    tracing::info!(device = %path.display(), size, ?method, "erasing");
    if method == Method::Metadata {
        // erase_metadata opens the device exclusively itself.
        drop(file);
        let w = super::erase::erase_metadata(path)?;
        done.store(size, Ordering::Relaxed);
        let e = Erased::Metadata(w.signatures.len());
        tracing::info!(device = %path.display(), method = %e.describe(), "erased");
        return Ok(e);
    }
    let target = methods::Target {
        file: &file,
        size,
        is_block,
        cancel,
        done,
    };
    let overwrite = || -> Result<Erased> {
        done.store(0, Ordering::Relaxed);
        target.overwrite(knobs.iterations, knobs.zeroize)?;
        Ok(Erased::Overwrite {
            passes: knobs.iterations,
            zeroed: knobs.zeroize,
        })
    };
    let result = match method {
        Method::Auto => {
            let secure = if is_nvme(&dev) {
                nvme_attempt(&dev, &file, knobs)
            } else {
                ata_attempt(&dev, &file, knobs)
            };
            tree::finish(
                &path.display().to_string(),
                secure,
                knobs,
                || target.discard_and_verify(),
                overwrite,
            )
        }
        Method::Metadata => unreachable!("handled above"),
        Method::Discard => match target.discard_and_verify()? {
            true => Ok(Erased::Discard),
            false => Err(anyhow::anyhow!(
                "the device cannot discard, or does not read back zeros after a discard"
            )),
        },
        Method::Overwrite => overwrite(),
        Method::Ata => {
            let forced = Knobs {
                enable_ata_secure_erase: true,
                continue_if_secure_erase_failed: false,
                ..knobs.clone()
            };
            forced_only(ata_attempt(&dev, &file, &forced), "ATA security erase")
        }
        Method::Nvme => {
            let forced = Knobs {
                enable_nvme_secure_erase: true,
                continue_if_secure_erase_failed: false,
                ..knobs.clone()
            };
            forced_only(nvme_attempt(&dev, &file, &forced), "NVMe secure format")
        }
    };
    if let Ok(e) = &result {
        tracing::info!(device = %path.display(), method = %e.describe(), "erased");
    }
    result
}

/// The outcome of a secure erase asked for by name (`agent erase
/// --method`): anything but an erase is an error.
fn forced_only(secure: tree::Secure, what: &str) -> Result<Erased> {
    match secure {
        tree::Secure::Erased(e) => Ok(e),
        tree::Secure::NotApplicable(why) => Err(anyhow::anyhow!("{what} does not apply: {why}")),
        tree::Secure::Failed(e) => Err(e.context(format!("{what} failed"))),
    }
}

fn is_nvme(dev: &Device) -> bool {
    dev.kernel_name().is_some_and(|n| n.starts_with("nvme"))
}

/// ATA security erase when the knob allows it and the drive answers ATA
/// pass-through ([`ata`]).
fn ata_attempt(dev: &Device, file: &File, knobs: &Knobs) -> tree::Secure {
    if !knobs.enable_ata_secure_erase {
        return tree::Secure::NotApplicable("agent_enable_ata_secure_erase is off".into());
    }
    if dev.devno.is_none() {
        return tree::Secure::NotApplicable("not a block device".into());
    }
    match ata::try_secure_erase(&dev.path, dev.kernel_name().as_deref(), file) {
        Ok(ata::Outcome::Erased { enhanced }) => {
            tree::Secure::Erased(Erased::AtaSecurityErase { enhanced })
        }
        Ok(ata::Outcome::NotApplicable(why)) => tree::Secure::NotApplicable(why),
        Err(e) => tree::Secure::Failed(e.context("ATA security erase")),
    }
}

/// NVMe secure format when the disk is NVMe and the knob allows it; a
/// controller that cannot format has failed, as in IPA 13.
fn nvme_attempt(dev: &Device, file: &File, knobs: &Knobs) -> tree::Secure {
    if !is_nvme(dev) {
        return tree::Secure::NotApplicable("not an NVMe namespace".into());
    }
    if !knobs.enable_nvme_secure_erase {
        return tree::Secure::NotApplicable("agent_enable_nvme_secure_erase is off".into());
    }
    let attempt = nvme::caps(file).and_then(|caps| {
        if caps.format {
            nvme::secure_format(file, caps).map(Some)
        } else {
            Ok(None)
        }
    });
    match attempt {
        Ok(Some(ses)) => tree::Secure::Erased(Erased::NvmeFormat(ses)),
        Ok(None) => tree::Secure::Failed(anyhow::anyhow!(
            "NVMe secure erase: the controller supports no Format NVM"
        )),
        Err(e) => tree::Secure::Failed(e.context("NVMe secure erase")),
    }
}

fn open(path: &Path, is_block: bool) -> Result<File> {
    if is_block {
        // A multipath device's partition maps hold it (see erase_metadata).
        crate::disk::multipath::drop_partitions(path)?;
    }
    crate::disk::busy::retry(path, "opening it exclusively", || {
        OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(if is_block { libc::O_EXCL } else { 0 })
            .open(path)
    })
    .with_context(|| format!("opening {} exclusively", path.display()))
}

/// Logs a disk's progress every 10 % (checked ten times a second).
fn progress_logger(
    path: &Path,
    total: u64,
    done: &Arc<AtomicU64>,
    stop: &Arc<AtomicBool>,
) -> std::thread::JoinHandle<()> {
    let (path, done, stop) = (path.display().to_string(), done.clone(), stop.clone());
    std::thread::spawn(move || {
        let mut last = 0;
        while !stop.load(Ordering::Relaxed) {
            std::thread::sleep(std::time::Duration::from_millis(100));
            let pct = done.load(Ordering::Relaxed).saturating_mul(100) / total.max(1);
            if pct / 10 > last / 10 {
                tracing::info!(device = %path, percent = pct.min(100), "erase progress");
                last = pct;
            }
        }
    })
}

#[cfg(test)]
mod tests;
