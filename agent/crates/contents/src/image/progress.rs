//! Progress of an image write, shared between the pipeline (which counts)
//! and whoever shows it: the running command's status in the API, and the
//! CLI's progress bar. Plain atomics: readers never slow the writers.

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::time::Instant;

use serde_json::{json, Value};

/// What the pipeline is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Phase {
    /// Preparing the target and resolving the checksum.
    Preparing = 0,
    /// Downloading, verifying and writing.
    Writing = 1,
    /// Checksum matched; flushing and committing the first MiB.
    Committing = 2,
    /// Done.
    Done = 3,
    /// Failed; the target was wiped.
    Failed = 4,
}

impl Phase {
    fn from_u8(v: u8) -> Self {
        match v {
            0 => Self::Preparing,
            1 => Self::Writing,
            2 => Self::Committing,
            3 => Self::Done,
            _ => Self::Failed,
        }
    }

    /// Lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Preparing => "preparing",
            Self::Writing => "writing",
            Self::Committing => "committing",
            Self::Done => "done",
            Self::Failed => "failed",
        }
    }
}

/// Counters of one image write.
#[derive(Debug)]
pub struct Progress {
    started: Instant,
    phase: AtomicU8,
    downloaded: AtomicU64,
    download_total: AtomicU64,
    written: AtomicU64,
    resumes: AtomicU64,
}

impl Default for Progress {
    fn default() -> Self {
        Self {
            started: Instant::now(),
            phase: AtomicU8::new(Phase::Preparing as u8),
            downloaded: AtomicU64::new(0),
            download_total: AtomicU64::new(0),
            written: AtomicU64::new(0),
            resumes: AtomicU64::new(0),
        }
    }
}

/// A consistent-enough copy of the counters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Snapshot {
    /// Current phase.
    pub phase: Phase,
    /// Image bytes received (compressed bytes for compressed images).
    pub downloaded: u64,
    /// Size of the download if the server said so.
    pub download_total: Option<u64>,
    /// Bytes of disk content handled (written or zeroed).
    pub written: u64,
    /// Connections resumed after a drop or stall.
    pub resumes: u64,
    /// Seconds since the write started.
    pub elapsed: f64,
}

impl Snapshot {
    /// Download rate in bytes per second.
    pub fn rate(&self) -> f64 {
        if self.elapsed > 0.0 {
            self.downloaded as f64 / self.elapsed
        } else {
            0.0
        }
    }

    /// Fraction done, when the total is known.
    pub fn fraction(&self) -> Option<f64> {
        self.download_total
            .filter(|t| *t > 0)
            .map(|t| (self.downloaded as f64 / t as f64).min(1.0))
    }

    /// The JSON shown in a running command's `command_result`.
    pub fn to_json(&self) -> Value {
        json!({"progress": {
            "phase": self.phase.name(),
            "bytes_downloaded": self.downloaded,
            "bytes_total": self.download_total,
            "bytes_written": self.written,
            "resumes": self.resumes,
            "rate_bytes_per_second": self.rate().round() as u64,
            "elapsed_seconds": (self.elapsed * 10.0).round() / 10.0,
        }})
    }

    /// One line for humans: `writing  1.2 GiB / 2.0 GiB (60%)  850 MB/s`.
    pub fn line(&self) -> String {
        let total = match self.download_total {
            Some(t) => format!(" / {}", human_bytes(t)),
            None => String::new(),
        };
        let pct = self
            .fraction()
            .map(|f| format!(" ({:.0}%)", f * 100.0))
            .unwrap_or_default();
        format!(
            "{:<10} {}{}{}  {:.0} MB/s  {} on disk",
            self.phase.name(),
            human_bytes(self.downloaded),
            total,
            pct,
            self.rate() / 1e6,
            human_bytes(self.written)
        )
    }

    /// A bar of `width` cells followed by [`Snapshot::line`].
    pub fn bar(&self, width: usize) -> String {
        format!("{} {}", bar_cells(self.fraction(), width), self.line())
    }
}

/// `[####------]`: `width` cells, filled for `fraction` (none when unknown).
pub fn bar_cells(fraction: Option<f64>, width: usize) -> String {
    let filled = fraction
        .map(|f| (f.clamp(0.0, 1.0) * width as f64) as usize)
        .unwrap_or(0);
    let bar: String = (0..width)
        .map(|i| if i < filled { '#' } else { '-' })
        .collect();
    format!("[{bar}]")
}

/// `1536` → `1.5 KiB`.
pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit < UNITS.len() - 1 {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}

impl Progress {
    /// Moves to `phase`.
    pub fn set_phase(&self, phase: Phase) {
        self.phase.store(phase as u8, Ordering::Relaxed);
    }

    /// Records received bytes.
    pub fn add_downloaded(&self, n: u64) {
        self.downloaded.fetch_add(n, Ordering::Relaxed);
    }

    /// Records the announced download size.
    pub fn set_download_total(&self, n: u64) {
        self.download_total.store(n, Ordering::Relaxed);
    }

    /// Records bytes of disk content handled.
    pub fn add_written(&self, n: u64) {
        self.written.fetch_add(n, Ordering::Relaxed);
    }

    /// Records a resumed connection.
    pub fn add_resume(&self) {
        self.resumes.fetch_add(1, Ordering::Relaxed);
    }

    /// The counters now.
    pub fn snapshot(&self) -> Snapshot {
        let total = self.download_total.load(Ordering::Relaxed);
        Snapshot {
            phase: Phase::from_u8(self.phase.load(Ordering::Relaxed)),
            downloaded: self.downloaded.load(Ordering::Relaxed),
            download_total: (total > 0).then_some(total),
            written: self.written.load(Ordering::Relaxed),
            resumes: self.resumes.load(Ordering::Relaxed),
            elapsed: self.started.elapsed().as_secs_f64(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_reports_fraction_and_json() {
        let p = Progress::default();
        p.set_download_total(4 << 20);
        p.add_downloaded(1 << 20);
        p.add_written(2 << 20);
        p.set_phase(Phase::Writing);
        let s = p.snapshot();
        assert_eq!(s.fraction(), Some(0.25));
        let j = s.to_json();
        assert_eq!(j["progress"]["phase"], "writing");
        assert_eq!(j["progress"]["bytes_written"], 2 << 20);
        assert!(s.bar(8).starts_with("[##------] writing"), "{}", s.bar(8));
        assert_eq!(human_bytes(1536), "1.5 KiB");
    }
}
