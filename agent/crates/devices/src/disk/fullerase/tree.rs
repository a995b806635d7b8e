//! IPA 13's erase decision for one disk (`erase_block_device`), branch by
//! branch, apart from the I/O so each branch is tested:
//!
//! 1. The secure erase of the disk's kind: NVMe Format NVM on an NVMe
//!    namespace (`agent_enable_nvme_secure_erase`, default on), else ATA
//!    security erase (`agent_enable_ata_secure_erase`, default on).
//! 2. It erased the disk: done.
//! 3. It does not apply (the knob is off; the drive has no ATA security
//!    feature set or sits behind a bridge): overwrite, as IPA shreds. No
//!    discard here: IPA discards only when a secure erase *failed*.
//! 4. It failed (frozen or locked ATA drive, NVMe without a usable format,
//!    a command error): discard with a verified read-back when
//!    `agent_enable_discard_erase` (or `ipa-enable-discard-erase`) allows
//!    it; else overwrite when `agent_continue_if_secure_erase_failed` (old
//!    name `agent_continue_if_ata_erase_failed`) allows it; else the step
//!    fails with the secure erase's reason and the knobs that would have
//!    let it go on.

use anyhow::Result;

use super::{Erased, Knobs};

/// What the secure erase of step 1 did.
#[derive(Debug)]
pub(crate) enum Secure {
    /// Erased the disk.
    Erased(Erased),
    /// Does not apply to this disk (why).
    NotApplicable(String),
    /// Was tried and failed.
    Failed(anyhow::Error),
}

/// Steps 2 to 4: `discard` tries a verified discard (`Ok(false)`: the disk
/// cannot, or does not read back zeros); `overwrite` overwrites.
pub(crate) fn finish(
    device: &str,
    secure: Secure,
    knobs: &Knobs,
    discard: impl FnOnce() -> Result<bool>,
    overwrite: impl FnOnce() -> Result<Erased>,
) -> Result<Erased> {
    let failure = match secure {
        Secure::Erased(e) => return Ok(e),
        Secure::NotApplicable(why) => {
            tracing::info!(device, "secure erase does not apply ({why}); overwriting");
            return overwrite();
        }
        Secure::Failed(e) => e,
    };
    if knobs.enable_discard {
        if discard()? {
            tracing::info!(
                device,
                "erased by discarding it because secure erase was not available: {failure:#}"
            );
            return Ok(Erased::Discard);
        }
        tracing::warn!(
            device,
            "discard after the failed secure erase did not leave verified zeros"
        );
    }
    if knobs.continue_if_secure_erase_failed {
        tracing::warn!(
            device,
            "secure erase failed ({failure:#}); falling back to overwriting"
        );
        return overwrite();
    }
    Err(failure.context(format!(
        "secure erase failed, and no fallback is enabled: discard {} (agent_enable_discard_erase), \
         overwrite off (agent_continue_if_secure_erase_failed)",
        if knobs.enable_discard {
            "did not leave verified zeros"
        } else {
            "off"
        }
    )))
}

#[cfg(test)]
mod tests {
    //! One test per branch of IPA 13's `erase_block_device`.

    use std::cell::Cell;

    use super::*;

    struct Run {
        discarded: Cell<bool>,
        overwritten: Cell<bool>,
    }

    fn run(secure: Secure, knobs: &Knobs, discard_works: bool) -> (Result<Erased>, Run) {
        let r = Run {
            discarded: Cell::new(false),
            overwritten: Cell::new(false),
        };
        let out = finish(
            "/dev/sdx",
            secure,
            knobs,
            || {
                r.discarded.set(true);
                Ok(discard_works)
            },
            || {
                r.overwritten.set(true);
                Ok(Erased::Overwrite {
                    passes: 1,
                    zeroed: true,
                })
            },
        );
        (out, r)
    }

    fn knobs(discard: bool, cont: bool) -> Knobs {
        Knobs {
            enable_discard: discard,
            continue_if_secure_erase_failed: cont,
            ..Knobs::default()
        }
    }

    fn frozen() -> Secure {
        Secure::Failed(anyhow::anyhow!("QEMU HARDDISK: security is frozen"))
    }

    #[test]
    fn a_secure_erase_that_worked_ends_it() {
        let (out, r) = run(
            Secure::Erased(Erased::AtaSecurityErase { enhanced: true }),
            &knobs(true, true),
            true,
        );
        assert_eq!(out.unwrap(), Erased::AtaSecurityErase { enhanced: true });
        assert!(!r.discarded.get() && !r.overwritten.get());
    }

    #[test]
    fn not_applicable_overwrites_without_discarding_even_when_discard_is_on() {
        let (out, r) = run(
            Secure::NotApplicable("no security feature set".into()),
            &knobs(true, false),
            true,
        );
        assert!(matches!(out.unwrap(), Erased::Overwrite { .. }));
        assert!(
            !r.discarded.get(),
            "IPA discards only after a failed secure erase"
        );
    }

    #[test]
    fn a_failure_discards_when_allowed() {
        let (out, r) = run(frozen(), &knobs(true, false), true);
        assert_eq!(out.unwrap(), Erased::Discard);
        assert!(!r.overwritten.get());
    }

    #[test]
    fn a_discard_without_zeros_falls_to_overwrite_when_allowed() {
        let (out, r) = run(frozen(), &knobs(true, true), false);
        assert!(matches!(out.unwrap(), Erased::Overwrite { .. }));
        assert!(r.discarded.get());
    }

    #[test]
    fn a_failure_overwrites_when_continuing_is_allowed() {
        let (out, r) = run(frozen(), &knobs(false, true), true);
        assert!(matches!(out.unwrap(), Erased::Overwrite { .. }));
        assert!(!r.discarded.get());
    }

    #[test]
    fn a_failure_with_no_fallback_fails_naming_the_reason_and_knobs() {
        let (out, r) = run(frozen(), &knobs(false, false), true);
        let e = format!("{:#}", out.unwrap_err());
        assert!(e.contains("security is frozen"), "{e}");
        assert!(
            e.contains("agent_enable_discard_erase")
                && e.contains("agent_continue_if_secure_erase_failed"),
            "{e}"
        );
        assert!(!r.discarded.get() && !r.overwritten.get());
        let (out, _) = run(frozen(), &knobs(true, false), false);
        let e = format!("{:#}", out.unwrap_err());
        assert!(e.contains("did not leave verified zeros"), "{e}");
    }
}
