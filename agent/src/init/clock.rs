//! Boot phase timestamps: seconds since the kernel started (CLOCK_BOOTTIME,
//! the clock of the kernel's own log), printed on the console per phase.

pub(crate) use agent_base::bootphases::since_boot;

/// Prints one console line `[   3.412] init: <msg>`.
pub(crate) fn say(msg: &str) {
    eprintln!("[{:8.3}] init: {msg}", since_boot());
}
