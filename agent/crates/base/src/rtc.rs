//! The hardware clock: the system time written to the RTC in UTC, as
//! `hwclock --systohc` does (IPA 13 runs it before a power action, so the
//! deployed OS boots with the right time). Only PID 1's ramdisk calls this.
#![allow(unsafe_code)]

use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};

/// The kernel's `struct rtc_time` (`<linux/rtc.h>`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RtcTime {
    /// Seconds, 0-59.
    pub tm_sec: i32,
    /// Minutes, 0-59.
    pub tm_min: i32,
    /// Hours, 0-23.
    pub tm_hour: i32,
    /// Day of the month, 1-31.
    pub tm_mday: i32,
    /// Month, 0-11.
    pub tm_mon: i32,
    /// Years since 1900.
    pub tm_year: i32,
    /// Day of the week, 0 = Sunday.
    pub tm_wday: i32,
    /// Day of the year, 0-365.
    pub tm_yday: i32,
    /// Unused by RTC drivers.
    pub tm_isdst: i32,
}

nix::ioctl_write_ptr!(rtc_set_time, b'p', 0x0a, RtcTime);

/// `secs` since 1970 as a UTC calendar time (Howard Hinnant's
/// days-to-civil algorithm).
pub fn utc(secs: i64) -> RtcTime {
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy_mar = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy_mar + 2) / 153;
    let day = doy_mar - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    const BEFORE: [i64; 12] = [0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334];
    let yday = BEFORE[(month - 1) as usize] + day - 1 + i64::from(leap && month > 2);
    RtcTime {
        tm_sec: (rem % 60) as i32,
        tm_min: (rem / 60 % 60) as i32,
        tm_hour: (rem / 3600) as i32,
        tm_mday: day as i32,
        tm_mon: (month - 1) as i32,
        tm_year: (year - 1900) as i32,
        tm_wday: (days + 4).rem_euclid(7) as i32,
        tm_yday: yday as i32,
        tm_isdst: 0,
    }
}

/// Writes the system time to the RTC at `device` (`/dev/rtc0`) in UTC.
pub fn set_from_system(device: &Path) -> Result<()> {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .context("the system clock reads before 1970")?
        .as_secs();
    let t = utc(i64::try_from(secs).context("the system clock is out of range")?);
    let f = std::fs::OpenOptions::new()
        .read(true)
        .open(device)
        .with_context(|| format!("opening {}", device.display()))?;
    // SAFETY: a valid RTC descriptor and a fully initialised rtc_time.
    unsafe { rtc_set_time(std::os::fd::AsRawFd::as_raw_fd(&f), &t) }
        .with_context(|| format!("RTC_SET_TIME on {}", device.display()))?;
    tracing::info!(device = %device.display(), ?t, "hardware clock set from the system clock (UTC)");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calendar_times_in_utc() {
        assert_eq!(
            utc(0),
            RtcTime {
                tm_mday: 1,
                tm_year: 70,
                tm_wday: 4,
                ..RtcTime::default()
            }
        );
        // 2026-11-27 09:15:42 UTC, a Friday, day 331 of the year.
        let t = utc(1_795_770_942);
        assert_eq!(
            (
                t.tm_year + 1900,
                t.tm_mon + 1,
                t.tm_mday,
                t.tm_hour,
                t.tm_min,
                t.tm_sec
            ),
            (2026, 11, 27, 9, 15, 42)
        );
        assert_eq!((t.tm_wday, t.tm_yday), (5, 330));
        // A leap day and the day after.
        let t = utc(1_709_164_800); // 2024-02-29 00:00:00
        assert_eq!((t.tm_mon, t.tm_mday, t.tm_yday), (1, 29, 59));
        let t = utc(1_709_251_200); // 2024-03-01
        assert_eq!((t.tm_mon, t.tm_mday, t.tm_yday), (2, 1, 60));
    }

    #[test]
    fn a_missing_rtc_is_an_error_naming_it() {
        let e = set_from_system(Path::new("/nonexistent/rtc9")).unwrap_err();
        assert!(format!("{e:#}").contains("/nonexistent/rtc9"), "{e:#}");
    }
}
