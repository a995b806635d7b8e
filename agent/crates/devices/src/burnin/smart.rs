//! SMART self-tests after the disk burn-in (`agent_burnin_fio_disk_smart_test`),
//! as IPA 13's `_run_smart_test` runs them with smartctl, natively: the
//! extended self-test started on every disk (ATA SMART EXECUTE OFF-LINE
//! IMMEDIATE, subcommand 2, through SG_IO), then each disk's self-test
//! execution status (SMART READ DATA, byte 363) read until it is no longer
//! in progress. "Completed without error" passes; any other result fails
//! the step naming the disks; a disk whose status cannot be read is left
//! out with a note, as IPA drops it (IPA reads only ATA self-test data, so
//! disks behind USB/SAS bridges are left out there too). NVMe disks get
//! their health log checked around the burn-in instead
//! ([`super::nvme_health`]).

use std::time::{Duration, Instant};

use std::fs::File;
use std::path::Path;

use crate::disk::fullerase::ata::cdb::AtaCommand;
use crate::disk::fullerase::ata::sgio::SgIo;
use crate::disk::fullerase::ata::{AtaTransport, Attachment};

/// A disk's self-test as SMART reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Status {
    /// Completed without error.
    Passed,
    /// Still running, `n` percent left.
    InProgress(u8),
    /// Ended with this result.
    Failed(String),
    /// No self-test status to read (why).
    Unavailable(String),
}

/// The self-test execution status byte of the SMART data (byte 363): the
/// high nibble is the result, the low one the tenths left.
pub(crate) fn decode(data: &[u8; 512]) -> Status {
    let b = data[363];
    let left = (b & 0x0f) * 10;
    let text = match b >> 4 {
        0 => return Status::Passed,
        15 => return Status::InProgress(left),
        1 => "aborted by the host",
        2 => "interrupted by a reset",
        3 => "a fatal error or unknown test error",
        4 => "completed with an unknown failed element",
        5 => "completed with a failed electrical element",
        6 => "completed with a failed servo or seek element",
        7 => "completed with a failed read element",
        8 => "completed with a handling damage failure",
        _ => "reserved result",
    };
    Status::Failed(format!("self-test {text} (status 0x{b:02x})"))
}

/// One disk's SMART access.
pub(crate) trait SelfTester {
    /// Starts the extended self-test.
    fn start(&self) -> anyhow::Result<()>;
    /// Its status now.
    fn status(&self) -> Status;
}

/// ATA SMART through SG_IO on an open disk.
#[derive(Debug)]
pub(crate) struct Ata(File);

impl Ata {
    /// The disk at `path`, or why it gets no ATA self-test: an NVMe
    /// namespace (IPA 13 reads ATA self-test data only), a disk behind a
    /// USB or SAS bridge (no ATA pass-through trusted), one that does not
    /// open.
    pub(crate) fn open(path: &Path) -> Result<Self, NoSelfTest> {
        let kernel = crate::disk::Device::open(path)
            .ok()
            .and_then(|d| d.kernel_name());
        if kernel.as_deref().is_some_and(|k| k.starts_with("nvme")) {
            return Err(NoSelfTest::Nvme);
        }
        if kernel
            .as_deref()
            .map(Attachment::of)
            .is_some_and(|a| a != Attachment::Other)
        {
            return Err(NoSelfTest::Bridged);
        }
        File::open(path).map(Self).map_err(NoSelfTest::Open)
    }

    fn execute(&self, cmd: &AtaCommand) -> anyhow::Result<[u8; 512]> {
        Ok(SgIo { file: &self.0 }.execute(cmd, SHORT)?)
    }
}

/// Why a disk gets no ATA self-test.
#[derive(Debug, thiserror::Error)]
pub(crate) enum NoSelfTest {
    /// An NVMe namespace.
    #[error("an NVMe disk (IPA 13 reads ATA self-test data only)")]
    Nvme,
    /// Behind a USB or SAS bridge.
    #[error("behind a USB or SAS bridge: no ATA pass-through trusted")]
    Bridged,
    /// It does not open.
    #[error("cannot open it: {0}")]
    Open(std::io::Error),
}

const SHORT: Duration = Duration::from_secs(30);

impl SelfTester for Ata {
    fn start(&self) -> anyhow::Result<()> {
        self.execute(&AtaCommand::smart_execute_offline(2))
            .map(drop)
    }

    fn status(&self) -> Status {
        match self.execute(&AtaCommand::smart_read_data()) {
            Ok(data) => decode(&data),
            Err(e) => Status::Unavailable(format!("{e:#}")),
        }
    }
}

/// What the self-tests found: disks that passed, failed (with the
/// result), or were left out (with why).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Outcome {
    /// Passed.
    pub passed: Vec<String>,
    /// Failed, with the result.
    pub failed: Vec<(String, String)>,
    /// Left out, with why.
    pub skipped: Vec<(String, String)>,
}

/// Starts the extended self-test on every disk and waits, polling every
/// `every`, until each has a result; `stop` ends the wait early (an
/// aborted or timed-out step), reporting the disks still running as
/// failed.
pub(crate) fn run(
    disks: &[(String, &dyn SelfTester)],
    every: Duration,
    stop: &dyn Fn() -> bool,
) -> Outcome {
    let mut out = Outcome::default();
    let mut running: Vec<(String, &dyn SelfTester)> = Vec::new();
    for (name, t) in disks {
        if let Status::Unavailable(why) = t.status() {
            tracing::info!(disk = %name, "no SMART self-test: {why}");
            out.skipped.push((name.clone(), why));
            continue;
        }
        match t.start() {
            Ok(()) => {
                tracing::info!(disk = %name, "SMART extended self-test started");
                running.push((name.clone(), *t));
            }
            Err(e) => out
                .failed
                .push((name.clone(), format!("starting the self-test: {e:#}"))),
        }
    }
    let started = Instant::now();
    while !running.is_empty() {
        running.retain(|(name, t)| match t.status() {
            Status::Passed => {
                tracing::info!(disk = %name, "passed the SMART self-test");
                out.passed.push(name.clone());
                false
            }
            Status::InProgress(left) => {
                tracing::debug!(disk = %name, left, "SMART self-test still running");
                true
            }
            Status::Failed(why) => {
                tracing::warn!(disk = %name, "failed the SMART self-test: {why}");
                out.failed.push((name.clone(), why));
                false
            }
            Status::Unavailable(why) => {
                out.skipped.push((name.clone(), why));
                false
            }
        });
        if running.is_empty() {
            break;
        }
        if stop() {
            for (name, _) in running.drain(..) {
                out.failed.push((
                    name,
                    format!(
                        "still running after {:.0} s when the step ended",
                        started.elapsed().as_secs_f64()
                    ),
                ));
            }
            break;
        }
        tracing::info!(disks = running.len(), "SMART self-tests still running");
        std::thread::sleep(every);
    }
    out
}

#[cfg(test)]
mod tests {
    use std::cell::{Cell, RefCell};

    use super::*;

    struct Fake {
        statuses: RefCell<Vec<Status>>,
        started: Cell<bool>,
        start_fails: bool,
    }

    impl Fake {
        fn new(statuses: Vec<Status>) -> Self {
            Self {
                statuses: RefCell::new(statuses),
                started: Cell::new(false),
                start_fails: false,
            }
        }
    }

    impl SelfTester for Fake {
        fn start(&self) -> anyhow::Result<()> {
            self.started.set(true);
            if self.start_fails {
                Err(anyhow::anyhow!("ABRT"))
            } else {
                Ok(())
            }
        }
        fn status(&self) -> Status {
            let mut s = self.statuses.borrow_mut();
            if s.len() > 1 {
                s.remove(0)
            } else {
                s[0].clone()
            }
        }
    }

    #[test]
    fn the_status_byte_decodes_as_smartctl_reads_it() {
        let mut d = [0u8; 512];
        assert_eq!(decode(&d), Status::Passed);
        d[363] = 0xf9;
        assert_eq!(decode(&d), Status::InProgress(90));
        d[363] = 0x73;
        assert_eq!(
            decode(&d),
            Status::Failed("self-test completed with a failed read element (status 0x73)".into())
        );
    }

    #[test]
    fn passing_failing_running_and_unavailable_disks() {
        let pass = Fake::new(vec![Status::Passed, Status::InProgress(50), Status::Passed]);
        let fail = Fake::new(vec![
            Status::Passed,
            Status::Failed("self-test read failure".into()),
        ]);
        let none = Fake::new(vec![Status::Unavailable("no SG_IO".into())]);
        let mut refuses = Fake::new(vec![Status::Passed]);
        refuses.start_fails = true;
        let disks: Vec<(String, &dyn SelfTester)> = vec![
            ("/dev/sda".into(), &pass),
            ("/dev/sdb".into(), &fail),
            ("/dev/nvme0n1".into(), &none),
            ("/dev/sdc".into(), &refuses),
        ];
        let out = run(&disks, Duration::ZERO, &|| false);
        assert_eq!(out.passed, ["/dev/sda"]);
        assert_eq!(
            out.failed,
            [
                (
                    "/dev/sdc".to_string(),
                    "starting the self-test: ABRT".to_string()
                ),
                ("/dev/sdb".to_string(), "self-test read failure".to_string()),
            ]
        );
        assert_eq!(
            out.skipped,
            [("/dev/nvme0n1".to_string(), "no SG_IO".to_string())]
        );
        assert!(
            !none.started.get(),
            "no self-test is started where none can be read"
        );
        // A step that ends while a test runs reports it.
        let slow = Fake::new(vec![Status::Passed, Status::InProgress(90)]);
        let out = run(
            &[("/dev/sdd".into(), &slow as &dyn SelfTester)],
            Duration::ZERO,
            &|| true,
        );
        assert!(
            out.failed[0].1.starts_with("still running after"),
            "{out:?}"
        );
    }
}
