//! The machine a [`super::Flow`] watches: the libvirt domain behind the
//! bed's BMC, its first disk and its serial console (one file appended to
//! across all boots): power state and boot order as libvirt has them,
//! ramdisk boots counted on the console, and the deployed system's boot
//! after a deploy.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use serde_json::Value;

use super::{POWER_DOWN, RAMDISK_START};
use crate::bed::redfish::{Bmc, System};
use crate::testimage;

/// The machine as the bed sees it: the libvirt domain behind the BMC, its
/// disk and its serial console (appended to across boots).
#[derive(Debug)]
pub struct Machine<'b> {
    bmc: &'b Bmc<'b>,
    system: System,
    disk: PathBuf,
}

/// What the deployed system showed when it booted from disk.
#[derive(Debug)]
pub struct DiskBoot {
    /// From `active` to the image's marker line.
    pub marker_after: Duration,
    /// Its config drive's `meta_data.json`.
    pub meta: Value,
    /// The console of that boot (from the ramdisk's power-off on).
    pub console: String,
}

impl<'b> Machine<'b> {
    /// The domain `system` of `bmc`, whose first disk's file is `disk`.
    pub fn new(bmc: &'b Bmc<'b>, system: System, disk: &Path) -> Self {
        Self {
            bmc,
            system,
            disk: disk.to_path_buf(),
        }
    }

    /// The first disk's backing file.
    pub fn disk(&self) -> &Path {
        &self.disk
    }

    /// The domain behind the BMC.
    pub fn system(&self) -> &System {
        &self.system
    }

    /// The console file (all boots).
    pub fn console_path(&self) -> &Path {
        &self.system.console
    }

    /// The console's bytes so far, as text (firmware writes escapes and
    /// bytes that are not UTF-8).
    pub fn console(&self) -> String {
        String::from_utf8_lossy(&std::fs::read(&self.system.console).unwrap_or_default())
            .into_owned()
    }

    /// The console's length in bytes: a mark for [`Machine::console_since`].
    pub fn console_len(&self) -> usize {
        std::fs::metadata(&self.system.console).map_or(0, |m| m.len() as usize)
    }

    /// The console from byte `mark` on.
    pub fn console_since(&self, mark: usize) -> String {
        let bytes = std::fs::read(&self.system.console).unwrap_or_default();
        String::from_utf8_lossy(&bytes[mark.min(bytes.len())..]).into_owned()
    }

    /// How often the deploy ramdisk started, from the console.
    pub fn ramdisk_boots(&self) -> usize {
        self.console().matches(RAMDISK_START).count()
    }

    /// libvirt's state of the domain (`running`, `shut off`).
    pub fn state(&self) -> Result<String> {
        self.bmc.domain_state(&self.system.name)
    }

    /// Fails unless the domain boots `device` first (`network`, `disk`),
    /// as Ironic set it through the BMC.
    pub fn expect_boot_device(&self, device: &str, when: &str) -> Result<()> {
        let first = self.bmc.first_boot_device(&self.system.name)?;
        ensure!(
            first.as_deref() == Some(device),
            "{when}: the domain boots {first:?} first, not {device:?} (Ironic sets it through the BMC)"
        );
        Ok(())
    }

    /// Waits until libvirt reports the domain shut off.
    pub fn wait_shut_off(&self, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            let state = self.state()?;
            if state == "shut off" {
                return Ok(());
            }
            if Instant::now() >= deadline {
                bail!(
                    "the domain is still {state:?} after {timeout:?}; console: {}",
                    self.console_path().display()
                );
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Waits (blocking) until the console from `mark` on shows the agent
    /// powering the ramdisk off, then the deployed system's `marker` line
    /// and its config drive's `meta_data.json`, and the domain shut off
    /// (the test system powers off after printing them). `since` is when
    /// the node became `active`.
    pub fn wait_disk_boot(
        &self,
        mark: usize,
        marker: &str,
        since: Instant,
        timeout: Duration,
    ) -> Result<DiskBoot> {
        let (marker_after, console) = self.wait_marker_boot(mark, marker, since, timeout)?;
        let meta = testimage::meta_data(&console).with_context(|| {
            format!(
                "the deployed system printed no config drive; console: {}",
                self.console_path().display()
            )
        })?;
        let meta =
            serde_json::from_str(&meta).with_context(|| format!("meta_data.json {meta:?}"))?;
        Ok(DiskBoot {
            marker_after,
            meta,
            console,
        })
    }

    /// [`Machine::wait_disk_boot`] without the config drive: the agent's
    /// power-off, then the deployed system's `marker` line, and the domain
    /// shut off. Returns the time from `since` to the marker and the
    /// console from the power-off on.
    pub fn wait_marker_boot(
        &self,
        mark: usize,
        marker: &str,
        since: Instant,
        timeout: Duration,
    ) -> Result<(Duration, String)> {
        let line = testimage::marker_line(marker);
        let deadline = Instant::now() + timeout;
        let marker_after = loop {
            if self.console_since(mark).contains(&line) {
                break since.elapsed();
            }
            if Instant::now() >= deadline {
                bail!(
                    "the deployed system printed no {line:?} within {timeout:?} of `active`; console: {}",
                    self.console_path().display()
                );
            }
            std::thread::sleep(Duration::from_millis(200));
        };
        self.wait_shut_off(Duration::from_secs(60))
            .context("the deployed system did not power off after its marker")?;
        let text = self.console_since(mark);
        // The ramdisk powered itself off (standby.power_off) before the
        // disk boot: Ironic's hard power off would print nothing.
        let off = text.find(POWER_DOWN).with_context(|| {
            format!(
                "the ramdisk never powered the machine off (no {POWER_DOWN:?}); console: {}",
                self.console_path().display()
            )
        })?;
        ensure!(
            text.find(&line).is_some_and(|at| off < at),
            "the deployed system booted before the ramdisk powered off; console: {}",
            self.console_path().display()
        );
        Ok((marker_after, text[off..].to_string()))
    }
}
