//! NVMe health around the disk burn-in (`agent_burnin_fio_disk_smart_test`):
//! an NVMe disk runs no ATA self-test (IPA 13's smartctl reads
//! `ata_smart_data` only and drops the disk), so the agent reads the
//! controller's SMART / Health Information log page before and after the
//! burn-in, as `nvme smart-log` does, and fails the step when the
//! controller raises a critical warning or counts new media and data
//! integrity errors during the burn-in. The page is parsed here (pure,
//! tested on fixtures); it is read through [`crate::disk::nvme_admin`].

use std::fs::File;
use std::path::Path;

use serde::Serialize;

/// What the log page says (NVMe base specification, "SMART / Health
/// Information").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Health {
    /// Critical Warning (byte 0): one bit per condition.
    pub critical_warning: u8,
    /// Composite Temperature (bytes 1-2), in degrees Celsius.
    pub temperature_celsius: i32,
    /// Available Spare (byte 3), percent.
    pub available_spare: u8,
    /// Available Spare Threshold (byte 4), percent.
    pub available_spare_threshold: u8,
    /// Percentage Used (byte 5): the vendor's estimate of life used.
    pub percentage_used: u8,
    /// Data Units Read (bytes 32-47), in thousands of 512-byte units.
    pub data_units_read: u128,
    /// Data Units Written (bytes 48-63), likewise.
    pub data_units_written: u128,
    /// Media and Data Integrity Errors (bytes 160-175).
    pub media_errors: u128,
    /// Number of Error Information Log Entries (bytes 176-191).
    pub error_log_entries: u128,
}

/// The conditions of the Critical Warning bits.
const WARNINGS: [&str; 6] = [
    "the available spare is below its threshold",
    "a temperature is outside its threshold",
    "the NVM subsystem's reliability is degraded",
    "the media are read-only",
    "the volatile memory backup failed",
    "the persistent memory region is read-only",
];

/// A little-endian counter of `page` at `at`, `len` bytes (0 when the page
/// is short).
fn le(page: &[u8], at: usize, len: usize) -> u128 {
    page.get(at..at + len)
        .map(|b| {
            b.iter()
                .rev()
                .fold(0u128, |acc, &x| (acc << 8) | u128::from(x))
        })
        .unwrap_or(0)
}

impl Health {
    /// Parses a SMART / Health Information log page.
    pub fn parse(page: &[u8]) -> Self {
        let byte = |i: usize| page.get(i).copied().unwrap_or(0);
        Health {
            critical_warning: byte(0),
            temperature_celsius: le(page, 1, 2) as i32 - 273,
            available_spare: byte(3),
            available_spare_threshold: byte(4),
            percentage_used: byte(5),
            data_units_read: le(page, 32, 16),
            data_units_written: le(page, 48, 16),
            media_errors: le(page, 160, 16),
            error_log_entries: le(page, 176, 16),
        }
    }

    /// The critical warnings raised, in words.
    pub fn warnings(&self) -> Vec<&'static str> {
        WARNINGS
            .iter()
            .enumerate()
            .filter(|(bit, _)| self.critical_warning & (1 << bit) != 0)
            .map(|(_, w)| *w)
            .collect()
    }
}

/// One disk's health before and after the burn-in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Checked {
    /// Before.
    pub before: Health,
    /// After.
    pub after: Health,
}

impl Checked {
    /// Why the disk fails, if it does: a critical warning after the
    /// burn-in, or media errors counted during it.
    pub fn problems(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .after
            .warnings()
            .into_iter()
            .map(|w| format!("critical warning: {w}"))
            .collect();
        if self.after.media_errors > self.before.media_errors {
            out.push(format!(
                "{} new media and data integrity errors during the burn-in",
                self.after.media_errors - self.before.media_errors
            ));
        }
        out
    }
}

/// Whether `path` is an NVMe namespace.
pub fn is_nvme(path: &Path) -> bool {
    crate::disk::Device::open(path)
        .ok()
        .and_then(|d| d.kernel_name())
        .is_some_and(|k| k.starts_with("nvme"))
}

/// The health log of the NVMe disk at `path`.
pub fn read(path: &Path) -> anyhow::Result<Health> {
    use anyhow::Context;
    let f = File::open(path).with_context(|| format!("opening {}", path.display()))?;
    Ok(Health::parse(&crate::disk::nvme_admin::smart_log(&f)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page() -> [u8; 512] {
        let mut p = [0u8; 512];
        p[1..3].copy_from_slice(&310u16.to_le_bytes()); // 37 °C
        p[3] = 100;
        p[4] = 10;
        p[5] = 3;
        p[32..40].copy_from_slice(&1234u64.to_le_bytes());
        p[48..56].copy_from_slice(&5678u64.to_le_bytes());
        p[56] = 1; // bit 64 of Data Units Written
        p[160] = 2;
        p[176] = 7;
        p
    }

    #[test]
    fn the_page_is_read_field_by_field() {
        let h = Health::parse(&page());
        assert_eq!(h.temperature_celsius, 37);
        assert_eq!((h.available_spare, h.available_spare_threshold), (100, 10));
        assert_eq!(h.percentage_used, 3);
        assert_eq!(h.data_units_read, 1234);
        assert_eq!(h.data_units_written, 5678 + (1u128 << 64));
        assert_eq!((h.media_errors, h.error_log_entries), (2, 7));
        assert!(h.warnings().is_empty());
    }

    #[test]
    fn a_healthy_disk_has_no_problems_and_a_short_page_reads_as_zeros() {
        let h = Health::parse(&page());
        let c = Checked {
            before: h,
            after: h,
        };
        assert!(c.problems().is_empty());
        let short = Health::parse(&[0u8; 10]);
        assert_eq!(short.media_errors, 0);
        assert_eq!(short.data_units_written, 0);
    }

    #[test]
    fn warnings_and_new_media_errors_fail_the_disk() {
        let before = Health::parse(&page());
        let mut p = page();
        p[0] = 0b0000_1001;
        p[160] = 5;
        let after = Health::parse(&p);
        let c = Checked { before, after };
        assert_eq!(
            c.problems(),
            [
                "critical warning: the available spare is below its threshold",
                "critical warning: the media are read-only",
                "3 new media and data integrity errors during the burn-in",
            ]
        );
    }
}
