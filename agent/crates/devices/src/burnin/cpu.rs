//! CPU burn-in (IPA's `burnin_cpu`, there `stress-ng --cpu N --timeout T`):
//! one worker thread per CPU (or the number asked for, spread over the
//! CPUs round-robin), each pinned to its CPU and running rounds of an
//! integer, a floating-point and a SHA-256 kernel until the deadline. Every
//! round's results must equal the reference computed before the workers
//! started; a difference names the CPU, the kernel and the round.

use std::hint::black_box;
use std::time::Instant;

use serde::Serialize;

use super::{BurninError, Stop};

/// What one worker did.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct WorkerReport {
    /// The CPU it was pinned to (`None`: pinning failed, it ran anywhere).
    pub cpu: Option<usize>,
    /// Rounds of the three kernels, all checked.
    pub rounds: u64,
}

/// The CPU burn-in's result.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct CpuReport {
    /// Seconds run.
    pub seconds: f64,
    /// Per worker.
    pub workers: Vec<WorkerReport>,
    /// Checked rounds per second, all workers together.
    pub rounds_per_second: f64,
}

/// The three kernels' results for one round.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Round {
    int: u64,
    float: u64,
    sha: [u8; 32],
}

fn integer_kernel(seed: u64) -> u64 {
    let mut x = black_box(seed) | 1;
    let mut acc = 0u64;
    for i in 0..4096u64 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        acc = acc.wrapping_add(x.wrapping_mul(i | 1)).rotate_left(5) ^ (x / (i + 3));
    }
    acc
}

fn float_kernel(seed: u64) -> u64 {
    let mut a = black_box(seed as f64) / 1e9 + 1.5;
    let mut s = 0.0f64;
    for i in 1..2048 {
        let f = i as f64;
        a = (a * 1.000_001 + f.sqrt()).sqrt() + (f / (a + 1.0));
        s += a.mul_add(0.5, -f.ln_1p() / 7.0);
    }
    (s + a).to_bits()
}

fn sha_kernel(seed: u64) -> [u8; 32] {
    let mut buf = [0u8; 4096];
    for (i, c) in buf.chunks_exact_mut(8).enumerate() {
        c.copy_from_slice(&super::pattern_word(seed, i as u64).to_le_bytes());
    }
    let d = ring::digest::digest(&ring::digest::SHA256, black_box(&buf));
    d.as_ref().try_into().expect("32 bytes")
}

fn round(seed: u64) -> Round {
    Round {
        int: integer_kernel(seed),
        float: float_kernel(seed),
        sha: sha_kernel(seed),
    }
}

/// Seeds the rounds cycle through (each worker checks against the
/// reference for the same seed).
const SEEDS: u64 = 8;

/// The CPUs this process may run on, in order.
pub fn usable_cpus() -> Vec<usize> {
    match nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0)) {
        Ok(set) => (0..nix::sched::CpuSet::count())
            .filter(|c| set.is_set(*c).unwrap_or(false))
            .collect(),
        Err(_) => (0..std::thread::available_parallelism().map_or(1, |n| n.get())).collect(),
    }
}

/// Runs `workers` workers (0: one per usable CPU) until `stop`.
pub fn run(workers: usize, stop: Stop<'_>) -> Result<CpuReport, BurninError> {
    let cpus = usable_cpus();
    let workers = if workers == 0 {
        cpus.len().max(1)
    } else {
        workers
    };
    let reference: Vec<Round> = (0..SEEDS).map(round).collect();
    let start = Instant::now();
    tracing::info!(workers, cpus = ?cpus, "CPU burn-in started");
    let results: Vec<Result<WorkerReport, BurninError>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..workers)
            .map(|w| {
                let cpu = cpus.get(w % cpus.len().max(1)).copied();
                let reference = &reference;
                s.spawn(move || worker(w, cpu, reference, stop))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|_| {
                    Err(BurninError::failed("CPU burn-in", "a worker panicked"))
                })
            })
            .collect()
    });
    let seconds = start.elapsed().as_secs_f64();
    if stop.aborted() {
        return Err(BurninError::Aborted(seconds));
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
        return Err(BurninError::failed(
            "CPU burn-in",
            format!(
                "{} of {workers} workers failed: {}",
                failures.len(),
                failures.join("; ")
            ),
        ));
    }
    let total: u64 = reports.iter().map(|r| r.rounds).sum();
    let report = CpuReport {
        seconds,
        rounds_per_second: total as f64 / seconds.max(1e-9),
        workers: reports,
    };
    tracing::info!(
        seconds = format!("{seconds:.1}"),
        rounds = total,
        "CPU burn-in passed"
    );
    Ok(report)
}

fn worker(
    w: usize,
    cpu: Option<usize>,
    reference: &[Round],
    stop: Stop<'_>,
) -> Result<WorkerReport, BurninError> {
    let pinned = cpu.and_then(|c| {
        let mut set = nix::sched::CpuSet::new();
        set.set(c).ok()?;
        match nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set) {
            Ok(()) => Some(c),
            Err(e) => {
                tracing::warn!(worker = w, cpu = c, "cannot pin the worker: {e}");
                None
            }
        }
    });
    let name = match pinned {
        Some(c) => format!("CPU {c}"),
        None => format!("CPU burn-in worker {w}"),
    };
    let mut rounds = 0u64;
    loop {
        if stop.aborted() || stop.expired() {
            break;
        }
        let seed = rounds % SEEDS;
        let got = round(seed);
        let want = reference[seed as usize];
        if got.int != want.int {
            return Err(BurninError::failed(
                name,
                format!(
                    "integer kernel gave {:#018x}, expected {:#018x} (round {rounds})",
                    got.int, want.int
                ),
            ));
        }
        if got.float != want.float {
            return Err(BurninError::failed(
                name,
                format!(
                    "floating-point kernel gave {:#018x}, expected {:#018x} (round {rounds})",
                    got.float, want.float
                ),
            ));
        }
        if got.sha != want.sha {
            return Err(BurninError::failed(
                name,
                format!("SHA-256 kernel gave a different digest (round {rounds})"),
            ));
        }
        rounds += 1;
        if stop.deadline.is_none() && rounds >= SEEDS {
            break;
        }
    }
    Ok(WorkerReport {
        cpu: pinned,
        rounds,
    })
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicBool;
    use std::time::Duration;

    use super::*;

    #[test]
    fn kernels_are_deterministic_and_seed_dependent() {
        assert_eq!(round(3), round(3));
        assert_ne!(round(3).int, round(4).int);
        assert_ne!(round(3).float, round(4).float);
        assert_ne!(round(3).sha, round(4).sha);
    }

    #[test]
    fn runs_every_worker_until_the_deadline() {
        let cancel = AtomicBool::new(false);
        let t = Instant::now();
        let stop = Stop {
            deadline: Some(t + Duration::from_millis(300)),
            cancel: &cancel,
        };
        let r = run(3, stop).unwrap();
        assert!(t.elapsed() >= Duration::from_millis(300));
        assert!(t.elapsed() < Duration::from_secs(10));
        assert_eq!(r.workers.len(), 3);
        assert!(r.workers.iter().all(|w| w.rounds > 0), "{r:?}");
        assert!(r.rounds_per_second > 0.0);
    }

    #[test]
    fn an_abort_ends_it_as_aborted() {
        let cancel = AtomicBool::new(true);
        let stop = Stop {
            deadline: Some(Instant::now() + Duration::from_secs(60)),
            cancel: &cancel,
        };
        assert!(matches!(run(1, stop), Err(BurninError::Aborted(_))));
    }

    #[test]
    fn a_wrong_result_names_the_cpu_and_kernel() {
        let cancel = AtomicBool::new(false);
        let stop = Stop {
            deadline: Some(Instant::now() + Duration::from_secs(5)),
            cancel: &cancel,
        };
        let mut bad: Vec<Round> = (0..SEEDS).map(round).collect();
        bad[0].float ^= 1;
        let e = worker(0, usable_cpus().first().copied(), &bad, stop).unwrap_err();
        let s = e.to_string();
        assert!(s.contains("floating-point kernel"), "{s}");
        assert!(s.starts_with("CPU "), "{s}");
    }
}
