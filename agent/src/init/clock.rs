//! Boot phase timestamps: seconds since the kernel started (CLOCK_BOOTTIME,
//! the clock of the kernel's own log), printed on the console per phase.

/// Seconds since boot.
pub fn since_boot() -> f64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_BOOTTIME)
        .map(|t| t.tv_sec() as f64 + t.tv_nsec() as f64 / 1e9)
        .unwrap_or(0.0)
}

/// Prints one console line `[   3.412] init: <msg>`.
pub fn say(msg: &str) {
    eprintln!("[{:8.3}] init: {msg}", since_boot());
}
