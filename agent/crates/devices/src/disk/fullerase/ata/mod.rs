//! ATA security erase (issue 6 item 7, PROTOCOL.md §7.2; what IPA's `_ata_erase`
//! does with hdparm): IDENTIFY DEVICE through ATA PASS-THROUGH(16) over
//! SG_IO; refused when the drive sits behind a USB or SAS bridge (whose
//! translation of security commands cannot be trusted), when it is frozen,
//! or when its password attempt counter expired; then SECURITY SET
//! PASSWORD (user password, the temporary password [`PASSWORD`]), SECURITY
//! ERASE PREPARE and SECURITY ERASE UNIT (enhanced when supported), and a
//! second IDENTIFY that must show security disabled again (the erase
//! clears the user password). After any failure once the password was set,
//! SECURITY DISABLE PASSWORD (after an UNLOCK if the drive is locked) is
//! attempted so the drive is never left locked.
//!
//! The SG_IO call sits behind [`AtaTransport`], so the flow and the
//! command encoding are tested against a simulated drive; a device without
//! SG_IO (loop, virtio-blk, NVMe) answers [`AtaError::NoPassThrough`],
//! which [`try_secure_erase`] turns into "not applicable: next method".
//!
//! Design: the temporary password is IPA's `NULL`, so an operator (or IPA's
//! own unlock attempts) can recover a drive left locked by a power loss
//! mid-erase.

pub(crate) mod cdb;
pub(crate) mod identify;
pub(crate) mod sgio;

use std::path::Path;
use std::time::Duration;

use anyhow::Context;

use cdb::{
    AtaCommand, SECURITY_DISABLE_PASSWORD, SECURITY_ERASE_UNIT, SECURITY_SET_PASSWORD,
    SECURITY_UNLOCK,
};
use identify::Identify;

/// The temporary user password (IPA's choice).
pub const PASSWORD: &[u8] = b"NULL";
/// Timeout of the quick commands.
const SHORT: Duration = Duration::from_secs(30);
/// Erase timeout when the drive does not report its erase time.
const DEFAULT_ERASE: Duration = Duration::from_secs(24 * 3600);

/// Why a pass-through command did not succeed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AtaError {
    /// The device has no ATA pass-through (no SG_IO, or a SCSI device).
    #[error("no ATA pass-through: {0}")]
    NoPassThrough(String),
    /// The command was sent and failed.
    #[error("{0}")]
    Failed(String),
    /// The IDENTIFY DEVICE answer is not usable.
    #[error(transparent)]
    Identify(#[from] identify::IdentifyError),
}

/// Sends one ATA command; returns the 512-byte data-in block (zeros for
/// other commands).
pub trait AtaTransport {
    /// Executes `cmd` within `timeout`.
    fn execute(&self, cmd: &AtaCommand, timeout: Duration) -> Result<[u8; 512], AtaError>;
}

/// How the disk is attached, from its sysfs device path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attachment {
    /// Behind a USB bridge.
    Usb,
    /// Behind a SAS HBA or expander (SATA tunnelled through SAS).
    Sas,
    /// Anything else (libata, or not a SCSI disk at all).
    Other,
}

impl Attachment {
    /// From the resolved `/sys/block/<name>/device` path.
    pub fn from_sys_path(path: &str) -> Self {
        if path.split('/').any(|c| c.starts_with("usb")) {
            Self::Usb
        } else if path
            .split('/')
            .any(|c| c.starts_with("end_device-") || c.starts_with("expander-"))
        {
            Self::Sas
        } else {
            Self::Other
        }
    }

    /// Of the block device `kernel_name` (`sda`).
    pub fn of(kernel_name: &str) -> Self {
        std::fs::canonicalize(format!("/sys/block/{kernel_name}/device"))
            .map(|p| Self::from_sys_path(&p.to_string_lossy()))
            .unwrap_or(Self::Other)
    }
}

/// What [`secure_erase`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Erased; `enhanced` when the enhanced mode was used.
    Erased {
        /// Enhanced erase used.
        enhanced: bool,
    },
    /// The method does not apply to this device (why); try the next one.
    NotApplicable(String),
}

fn fail(msg: impl Into<String>) -> anyhow::Error {
    anyhow::anyhow!(msg.into())
}

fn identify(t: &dyn AtaTransport) -> Result<Identify, AtaError> {
    let block = t.execute(&AtaCommand::identify(), SHORT)?;
    Ok(identify::parse(&block)?)
}

/// The erase timeout: the drive's own estimate plus half, at least 10 min.
fn erase_timeout(minutes: Option<u32>) -> Duration {
    match minutes {
        Some(m) => Duration::from_secs(u64::from(m) * 60 * 3 / 2).max(Duration::from_secs(600)),
        None => DEFAULT_ERASE,
    }
}

/// Runs the whole security erase on the drive behind `t` (attached as
/// `attachment`). `Err`: the erase was attempted or refused for a reason
/// the operator must see (frozen, failed); the drive is left unlocked
/// whenever possible.
pub fn secure_erase(t: &dyn AtaTransport, attachment: Attachment) -> anyhow::Result<Outcome> {
    match attachment {
        Attachment::Usb => {
            return Ok(Outcome::NotApplicable(
                "behind a USB bridge: ATA security commands are not trusted there".into(),
            ))
        }
        Attachment::Sas => {
            return Ok(Outcome::NotApplicable(
                "behind a SAS bridge: ATA security commands are not trusted there".into(),
            ))
        }
        Attachment::Other => {}
    }
    let id = match identify(t) {
        Ok(id) => id,
        Err(AtaError::NoPassThrough(why)) => return Ok(Outcome::NotApplicable(why)),
        Err(why @ (AtaError::Failed(_) | AtaError::Identify(_))) => {
            return Err(fail(format!("IDENTIFY DEVICE: {why}")))
        }
    };
    let s = &id.security;
    if !s.supported {
        return Ok(Outcome::NotApplicable(format!(
            "{}: the security feature set is not supported",
            id.model
        )));
    }
    if s.frozen {
        return Err(fail(format!(
            "{}: security is frozen (the firmware froze it at boot; a power cycle or hot-plug unfreezes it)",
            id.model
        )));
    }
    if s.count_expired {
        return Err(fail(format!(
            "{}: the password attempt counter expired; power-cycle the drive",
            id.model
        )));
    }
    if s.enabled {
        // Left enabled by an earlier interrupted erase: clear it with our
        // password, or give up (someone else's password).
        disable(t, s.locked).map_err(|e| {
            fail(format!(
                "{}: security is already enabled with a password that is not ours ({e})",
                id.model
            ))
        })?;
    }
    let enhanced = s.enhanced_supported;
    let minutes = if enhanced {
        s.enhanced_erase_minutes
    } else {
        s.erase_minutes
    };
    tracing::info!(model = %id.model, enhanced, ?minutes, "ATA security erase");
    t.execute(
        &AtaCommand::with_password(SECURITY_SET_PASSWORD, 0, PASSWORD),
        SHORT,
    )
    .map_err(|e| fail(format!("{}: SECURITY SET PASSWORD: {e}", id.model)))?;
    let erased = (|| -> anyhow::Result<()> {
        t.execute(&AtaCommand::erase_prepare(), SHORT)
            .context("SECURITY ERASE PREPARE")?;
        let control = if enhanced { 0x2 } else { 0x0 };
        t.execute(
            &AtaCommand::with_password(SECURITY_ERASE_UNIT, control, PASSWORD),
            erase_timeout(minutes),
        )
        .context("SECURITY ERASE UNIT")?;
        let after = identify(t).context("IDENTIFY after the erase")?;
        if after.security.enabled {
            anyhow::bail!("security is still enabled after SECURITY ERASE UNIT");
        }
        Ok(())
    })();
    match erased {
        Ok(()) => Ok(Outcome::Erased { enhanced }),
        Err(why) => {
            let why = format!("{why:#}");
            let cleanup = identify(t)
                .map(|now| now.security)
                .map_err(|e| e.to_string())
                .and_then(|now| {
                    if now.enabled {
                        disable(t, now.locked).map_err(|e| e.to_string())
                    } else {
                        Ok(())
                    }
                });
            match cleanup {
                Ok(()) => Err(fail(format!("{}: {why}; the password was removed again", id.model))),
                Err(e) => Err(fail(format!(
                    "{}: {why}; removing the temporary password failed too ({e}): the drive may be locked with user password {:?}",
                    id.model,
                    String::from_utf8_lossy(PASSWORD)
                ))),
            }
        }
    }
}

/// SECURITY UNLOCK (when locked) and SECURITY DISABLE PASSWORD with ours.
fn disable(t: &dyn AtaTransport, locked: bool) -> Result<(), AtaError> {
    if locked {
        t.execute(
            &AtaCommand::with_password(SECURITY_UNLOCK, 0, PASSWORD),
            SHORT,
        )?;
    }
    t.execute(
        &AtaCommand::with_password(SECURITY_DISABLE_PASSWORD, 0, PASSWORD),
        SHORT,
    )?;
    Ok(())
}

/// The `erase_devices` entry: the security erase of the block device at
/// `path` (opened as `file`).
pub fn try_secure_erase(
    path: &Path,
    kernel_name: Option<&str>,
    file: &std::fs::File,
) -> anyhow::Result<Outcome> {
    let attachment = kernel_name.map_or(Attachment::Other, Attachment::of);
    tracing::debug!(device = %path.display(), ?attachment, "trying ATA security erase");
    secure_erase(&sgio::SgIo { file }, attachment)
}

#[cfg(test)]
mod tests;
