//! Memory burn-in (IPA's `burnin_memory`, there `stress-ng --vm N
//! --vm-bytes B --timeout T`): `bytes` of memory split over the workers,
//! each filling its share with a reproducible pattern and reading it all
//! back, then the bitwise inverse, pass after pass until the deadline (the
//! pass running at the deadline is finished). A word that reads back
//! different names the worker, its offset and address, and both values.
//! Memory is reserved with `try_reserve`, so a size that cannot be had is
//! an error, not an abort; how much to ask for is the caller's choice
//! ([`available_bytes`] reads what the kernel says is available).

use std::path::Path;
use std::time::Instant;

use serde::Serialize;

use super::{pattern_word, BurninError, Stop};

/// Words between two looks at the stop flags.
const CHUNK_WORDS: usize = 1 << 17;

/// The memory burn-in's result.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct MemoryReport {
    /// Seconds run.
    pub seconds: f64,
    /// Workers.
    pub workers: usize,
    /// Bytes tested (all workers).
    pub bytes: u64,
    /// Write-and-verify passes completed by each worker.
    pub passes: Vec<u64>,
    /// Bytes written and verified per second, all workers together.
    pub verified_bytes_per_second: f64,
}

/// `MemAvailable` from `meminfo` text (`/proc/meminfo`), in bytes.
pub fn parse_mem_available(meminfo: &str) -> Option<u64> {
    meminfo.lines().find_map(|l| {
        let rest = l.strip_prefix("MemAvailable:")?;
        let kib: u64 = rest.trim().trim_end_matches("kB").trim().parse().ok()?;
        kib.checked_mul(1024)
    })
}

/// What the kernel says is available, from `proc_root/meminfo`.
pub fn available_bytes(proc_root: &Path) -> Result<u64, BurninError> {
    let p = proc_root.join("meminfo");
    let text = std::fs::read_to_string(&p)
        .map_err(|e| BurninError::failed("memory", format!("reading {}: {e}", p.display())))?;
    parse_mem_available(&text).ok_or_else(|| {
        BurninError::failed("memory", format!("no MemAvailable line in {}", p.display()))
    })
}

/// Tests `bytes` with `workers` workers until `stop`.
pub fn run(workers: usize, bytes: u64, stop: Stop<'_>) -> Result<MemoryReport, BurninError> {
    let workers = workers.max(1);
    let share_words = usize::try_from(bytes / 8 / workers as u64).map_err(|_| {
        BurninError::failed("memory", format!("{bytes} bytes do not fit in memory"))
    })?;
    if share_words == 0 {
        return Err(BurninError::failed(
            "memory",
            format!("{bytes} bytes are too few for {workers} workers"),
        ));
    }
    tracing::info!(workers, bytes, "memory burn-in started");
    let start = Instant::now();
    let results: Vec<Result<u64, BurninError>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..workers)
            .map(|w| s.spawn(move || worker(w, share_words, stop)))
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(BurninError::failed("memory", "a worker panicked")))
            })
            .collect()
    });
    let seconds = start.elapsed().as_secs_f64();
    if stop.aborted() {
        return Err(BurninError::Aborted(seconds));
    }
    let mut passes = Vec::new();
    let mut failures = Vec::new();
    for r in results {
        match r {
            Ok(p) => passes.push(p),
            Err(e) => failures.push(e.to_string()),
        }
    }
    if !failures.is_empty() {
        return Err(BurninError::failed("memory", failures.join("; ")));
    }
    let tested = share_words as u64 * 8 * workers as u64;
    let verified: u64 = passes.iter().map(|p| p * share_words as u64 * 8).sum();
    let report = MemoryReport {
        seconds,
        workers,
        bytes: tested,
        verified_bytes_per_second: verified as f64 / seconds.max(1e-9),
        passes,
    };
    tracing::info!(seconds = format!("{seconds:.1}"), bytes = tested, passes = ?report.passes, "memory burn-in passed");
    Ok(report)
}

fn worker(w: usize, words: usize, stop: Stop<'_>) -> Result<u64, BurninError> {
    let mut mem: Vec<u64> = Vec::new();
    mem.try_reserve_exact(words).map_err(|e| {
        BurninError::failed(
            format!("memory worker {w}"),
            format!("cannot have {} bytes: {e}", words * 8),
        )
    })?;
    mem.resize(words, 0);
    let mut passes = 0u64;
    loop {
        if stop.aborted() {
            return Ok(passes);
        }
        let seed = (w as u64) << 32 | passes;
        let invert = if passes % 2 == 1 { u64::MAX } else { 0 };
        fill(&mut mem, seed, invert, stop);
        check(w, &mem, seed, invert, passes, stop)?;
        if stop.aborted() {
            return Ok(passes);
        }
        passes += 1;
        let done = match stop.deadline {
            None => passes >= 2,
            Some(_) => stop.expired(),
        };
        if done {
            return Ok(passes);
        }
    }
}

/// Writes the pattern for `seed` (xor `invert`) everywhere.
fn fill(mem: &mut [u64], seed: u64, invert: u64, stop: Stop<'_>) {
    for (c, chunk) in mem.chunks_mut(CHUNK_WORDS).enumerate() {
        if stop.aborted() {
            return;
        }
        let base = (c * CHUNK_WORDS) as u64;
        for (i, word) in chunk.iter_mut().enumerate() {
            *word = pattern_word(seed, base + i as u64) ^ invert;
        }
    }
}

/// Reads every word back; pass `pass` of worker `w`.
fn check(
    w: usize,
    mem: &[u64],
    seed: u64,
    invert: u64,
    pass: u64,
    stop: Stop<'_>,
) -> Result<(), BurninError> {
    // Opaque to the optimiser: the words are read from memory, not
    // assumed equal to what `fill` wrote.
    let mem = std::hint::black_box(mem);
    let mut bad = 0u64;
    let mut first = None;
    for (c, chunk) in mem.chunks(CHUNK_WORDS).enumerate() {
        if stop.aborted() {
            return Ok(());
        }
        let base = c * CHUNK_WORDS;
        for (i, word) in chunk.iter().enumerate() {
            let got = *word;
            let want = pattern_word(seed, (base + i) as u64) ^ invert;
            if got != want {
                bad += 1;
                if first.is_none() {
                    first = Some((base + i, word as *const u64 as usize, got, want));
                }
            }
        }
    }
    match first {
        None => Ok(()),
        Some((i, addr, got, want)) => Err(BurninError::failed(
            format!("memory worker {w}"),
            format!(
                "{bad} words read back wrong in pass {pass}; the first at offset {:#x} (address {addr:#x}) read {got:#018x}, written {want:#018x}",
                i * 8
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicBool;
    use std::time::Duration;

    use super::*;

    #[test]
    fn mem_available_from_meminfo() {
        let t = "MemTotal:       16316412 kB\nMemFree:  100 kB\nMemAvailable:   12000000 kB\n";
        assert_eq!(parse_mem_available(t), Some(12_000_000 * 1024));
        assert_eq!(parse_mem_available("MemTotal: 5 kB\n"), None);
        assert_eq!(parse_mem_available("MemAvailable: lots\n"), None);
        assert!(available_bytes(Path::new("/proc")).unwrap() > 0);
    }

    #[test]
    fn tests_memory_until_the_deadline() {
        let cancel = AtomicBool::new(false);
        let t = Instant::now();
        let stop = Stop {
            deadline: Some(t + Duration::from_millis(300)),
            cancel: &cancel,
        };
        let r = run(2, 8 << 20, stop).unwrap();
        assert_eq!(r.bytes, 8 << 20);
        assert_eq!(r.passes.len(), 2);
        assert!(r.passes.iter().all(|p| *p >= 1), "{r:?}");
        assert!(t.elapsed() < Duration::from_secs(20));
    }

    #[test]
    fn impossible_sizes_fail_without_aborting() {
        let cancel = AtomicBool::new(false);
        let stop = Stop {
            deadline: Some(Instant::now() + Duration::from_secs(1)),
            cancel: &cancel,
        };
        let e = run(1, 1 << 62, stop).unwrap_err().to_string();
        assert!(e.contains("cannot have"), "{e}");
        assert!(run(4, 16, stop).is_err());
    }

    #[test]
    fn a_word_that_changed_is_named() {
        let cancel = AtomicBool::new(false);
        let stop = Stop {
            deadline: None,
            cancel: &cancel,
        };
        let mut mem = vec![0u64; 3 * CHUNK_WORDS / 2];
        fill(&mut mem, 5, u64::MAX, stop);
        check(0, &mem, 5, u64::MAX, 1, stop).unwrap();
        mem[CHUNK_WORDS + 100] ^= 1 << 7;
        let e = check(3, &mem, 5, u64::MAX, 1, stop)
            .unwrap_err()
            .to_string();
        let off = format!("offset {:#x}", (CHUNK_WORDS + 100) * 8);
        assert!(
            e.starts_with("memory worker 3: 1 words read back wrong in pass 1"),
            "{e}"
        );
        assert!(e.contains(&off), "{e}");
    }
}
