//! Transient `EBUSY` on block devices: a bounded, logged wait before failing.
//!
//! udev (systemd-udevd on every systemd host, and whatever probes disks in
//! a ramdisk) watches disks the agent writes: when the agent closes a device
//! it had open for writing, udev re-reads its partition table (BLKRRPART)
//! and probes it and its partitions with libblkid. While it does, the
//! kernel answers `EBUSY` to the agent's own BLKRRPART (a partition is open,
//! or udev holds the disk for its re-read) and to an exclusive (`O_EXCL`)
//! open of the disk or a partition. These last milliseconds. IPA waits for
//! them with `udevadm settle`; the agent, which ships no udevadm, retries
//! the operation on `EBUSY` for up to [`BUSY_WAIT`], backing off from 20 ms
//! to 500 ms, logs the wait, and fails only after it with an error naming
//! the operation, the device, how long and how often it tried. Any other
//! error is returned at once, unchanged (callers still see `EINVAL` etc.).
//! A device that stays busy (mounted, held by device-mapper) is refused
//! before any of this by the write policy ([`super::WritePolicy`]).

use std::fmt;
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How long an operation is retried while the device answers `EBUSY`.
pub const BUSY_WAIT: Duration = Duration::from_secs(30);

/// First pause between attempts; doubled each time up to [`MAX_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_millis(20);
/// Longest pause between attempts.
const MAX_PAUSE: Duration = Duration::from_millis(500);

/// Operations that met `EBUSY` at least once, since the agent started.
static WAITED: AtomicU64 = AtomicU64::new(0);

/// How many operations met `EBUSY` at least once (and waited) so far.
pub fn waits() -> u64 {
    WAITED.load(Ordering::Relaxed)
}

/// The device stayed busy for the whole wait.
#[derive(Debug)]
pub struct StillBusy {
    /// What was tried (`re-reading the partition table`).
    pub what: String,
    /// The device.
    pub device: String,
    /// Attempts made.
    pub attempts: u32,
    /// Time spent.
    pub waited: Duration,
}

impl fmt::Display for StillBusy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} stayed busy while {}: Device or resource busy (os error 16) on each of {} attempts over {:.1} s (something other than the agent kept it open: udev, a mount, device-mapper)",
            self.device,
            self.what,
            self.attempts,
            self.waited.as_secs_f64()
        )
    }
}

impl std::error::Error for StillBusy {}

/// Runs `op` until it does not fail with `EBUSY`, for up to [`BUSY_WAIT`].
/// See the module docs. The error after the wait is an `io::Error` of kind
/// `ResourceBusy` whose message is a [`StillBusy`].
pub fn retry<T>(device: &Path, what: &str, op: impl FnMut() -> io::Result<T>) -> io::Result<T> {
    retry_for(device, what, BUSY_WAIT, op)
}

/// [`retry`] with an explicit wait (tests).
pub fn retry_for<T>(
    device: &Path,
    what: &str,
    wait: Duration,
    mut op: impl FnMut() -> io::Result<T>,
) -> io::Result<T> {
    let start = Instant::now();
    let mut pause = FIRST_PAUSE;
    let mut attempts = 0u32;
    loop {
        attempts += 1;
        match op() {
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                let waited = start.elapsed();
                if waited >= wait {
                    let busy = StillBusy {
                        what: what.to_string(),
                        device: device.display().to_string(),
                        attempts,
                        waited,
                    };
                    tracing::warn!("{busy}");
                    return Err(io::Error::new(io::ErrorKind::ResourceBusy, busy));
                }
                if attempts == 1 {
                    WAITED.fetch_add(1, Ordering::Relaxed);
                    tracing::info!(
                        device = %device.display(),
                        "{what}: device busy (udev probing it?); retrying for up to {:.0} s",
                        wait.as_secs_f64()
                    );
                }
                std::thread::sleep(pause.min(wait.saturating_sub(waited)));
                pause = (pause * 2).min(MAX_PAUSE);
            }
            Ok(v) => {
                if attempts > 1 {
                    tracing::info!(
                        device = %device.display(),
                        attempts,
                        waited_ms = start.elapsed().as_millis() as u64,
                        "{what}: done once the device was no longer busy"
                    );
                }
                return Ok(v);
            }
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    //! The retry's decisions on a fake operation.

    use super::*;

    fn busy() -> io::Error {
        io::Error::from_raw_os_error(libc::EBUSY)
    }

    #[test]
    fn busy_then_done_returns_the_value() {
        let mut n = 0;
        let v = retry_for(
            Path::new("/dev/x"),
            "re-reading",
            Duration::from_secs(5),
            || {
                n += 1;
                if n < 4 {
                    Err(busy())
                } else {
                    Ok(n)
                }
            },
        )
        .unwrap();
        assert_eq!(v, 4);
    }

    #[test]
    fn other_errors_return_at_once_unchanged() {
        let mut n = 0;
        let e = retry_for(
            Path::new("/dev/x"),
            "re-reading",
            Duration::from_secs(5),
            || {
                n += 1;
                Err::<(), _>(io::Error::from_raw_os_error(libc::EINVAL))
            },
        )
        .unwrap_err();
        assert_eq!(n, 1);
        assert_eq!(e.raw_os_error(), Some(libc::EINVAL));
    }

    #[test]
    fn always_busy_fails_after_the_wait_naming_device_operation_and_attempts() {
        let start = Instant::now();
        let mut n = 0u32;
        let e = retry_for(
            Path::new("/dev/loop9"),
            "re-reading the partition table",
            Duration::from_millis(300),
            || {
                n += 1;
                Err::<(), _>(busy())
            },
        )
        .unwrap_err();
        let took = start.elapsed();
        assert!(took >= Duration::from_millis(300), "{took:?}");
        assert!(took < Duration::from_secs(2), "{took:?}");
        assert_eq!(e.kind(), io::ErrorKind::ResourceBusy);
        let msg = e.to_string();
        assert!(
            msg.starts_with("/dev/loop9 stayed busy while re-reading the partition table"),
            "{msg}"
        );
        assert!(msg.contains(&format!("each of {n} attempts")), "{msg}");
        assert!(n >= 3, "{n}");
    }
}
