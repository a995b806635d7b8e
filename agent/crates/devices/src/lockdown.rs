//! Secure Boot and the kernel's lockdown, as the running kernel reports
//! them: the `SecureBoot` EFI variable (efivarfs) and
//! `/sys/kernel/security/lockdown` (securityfs), and the wording of errors
//! lockdown causes. Reads take the `/sys` root so they are tested on
//! fixtures.
//!
//! What Debian 6.1's lockdown (integrity mode, entered on Secure Boot)
//! refuses (`security/lockdown`, the `LOCKDOWN_*` reasons up to
//! `LOCKDOWN_INTEGRITY_MAX`): unsigned modules, /dev/mem, /dev/kmem and
//! /dev/port, `ioperm`/`iopl`, MSR writes, `kexec_load` (only signed
//! kernels through `kexec_file_load`), hibernation, PCI BAR access through
//! sysfs, ACPI table overrides and custom methods, module parameters that
//! name hardware addresses (e.g. `ipmi_si ports=`), `TIOCSSERIAL` port
//! changes, debugfs, mmiotrace, BPF writes to user memory and the EFI test
//! driver. Against the agent's own kernel calls:
//!
//! | the agent uses | under lockdown |
//! | --- | --- |
//! | `finit_module` of Debian's signed modules | allowed (unsigned ones are refused: EKEYREJECTED) |
//! | efivarfs: `Boot####`/`BootOrder` writes, `FS_IOC_SETFLAGS` | allowed |
//! | NVMe admin passthrough (`NVME_IOCTL_ADMIN_CMD`: Identify, Format NVM) | allowed |
//! | SG_IO ATA PASS-THROUGH (IDENTIFY, SECURITY …) | allowed |
//! | `/dev/ipmi0` ioctls (`ipmi_si` found by ACPI/SMBIOS, no `ports=`) | allowed |
//! | `BLKDISCARD`, `BLKZEROOUT`, block writes, `reboot(2)` | allowed |
//! | kexec, /dev/mem, I/O ports, MSRs, debugfs | not used |
//!
//! `bed_secure_boot.rs` runs all of the allowed ones but discard under lockdown. When
//! the kernel refuses a call anyway (a future kernel restricting more, a
//! module that is not Debian's), [`explain`] and [`annotate`] put
//! "refused by the kernel's lockdown" into the error the operator sees.

use std::io;
use std::path::Path;

/// The running kernel's sysfs.
pub const SYS: &str = "/sys";

/// `SecureBoot-<EFI global variable GUID>` under efivarfs.
const SECURE_BOOT_VAR: &str =
    "firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c";

/// Whether the firmware booted with Secure Boot on: `None` when not booted
/// by UEFI or efivarfs is not mounted (the variable is 4 attribute bytes,
/// then one byte 0 or 1).
pub fn secure_boot(sys: &Path) -> Option<bool> {
    let v = std::fs::read(sys.join(SECURE_BOOT_VAR)).ok()?;
    v.get(4).map(|b| *b == 1)
}

/// The active lockdown mode (`none`, `integrity`, `confidentiality`):
/// the bracketed word of `kernel/security/lockdown`; `None` when the file
/// is absent (no securityfs, or no lockdown LSM).
pub fn mode(sys: &Path) -> Option<String> {
    let text = std::fs::read_to_string(sys.join("kernel/security/lockdown")).ok()?;
    let start = text.find('[')? + 1;
    let end = start + text[start..].find(']')?;
    Some(text[start..end].to_string())
}

/// Whether the kernel is locked down (any mode but `none`).
pub fn locked(sys: &Path) -> bool {
    mode(sys).is_some_and(|m| m != "none")
}

/// For an error the kernel gave: a sentence naming lockdown when the kernel
/// is locked down and the error is what lockdown answers with (EPERM;
/// EKEYREJECTED/ENOKEY for module signatures), else `None`.
pub fn explain(sys: &Path, errno: i32) -> Option<String> {
    if !matches!(errno, libc::EPERM | libc::EKEYREJECTED | libc::ENOKEY) {
        return None;
    }
    let m = mode(sys).filter(|m| m != "none")?;
    Some(format!(
        "refused by the kernel's lockdown ({m}, Secure Boot): only signed modules load and \
         raw hardware access is forbidden"
    ))
}

/// `err` with [`explain`]'s sentence appended when lockdown (read under
/// `sys`) is the reason for its errno; else `err` unchanged. The kind is
/// kept; call it where the error becomes a message, after any checks of
/// the raw errno.
pub fn annotate_in(sys: &Path, err: io::Error) -> io::Error {
    match err.raw_os_error().and_then(|n| explain(sys, n)) {
        Some(why) => io::Error::new(err.kind(), format!("{err}: {why}")),
        None => err,
    }
}

/// [`annotate_in`] for the running kernel.
pub fn annotate(err: io::Error) -> io::Error {
    annotate_in(Path::new(SYS), err)
}

/// [`annotate`] for a `nix` errno.
pub fn annotate_errno(errno: nix::errno::Errno) -> io::Error {
    annotate(io::Error::from(errno))
}

/// One line for the console: `secure boot on, lockdown integrity`.
pub fn describe(sys: &Path) -> String {
    let sb = match secure_boot(sys) {
        Some(true) => "on",
        Some(false) => "off",
        None => "unknown (not UEFI or no efivarfs)",
    };
    let ld = mode(sys).unwrap_or_else(|| "unknown".into());
    format!("secure boot {sb}, lockdown {ld}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sys(secure_boot: Option<u8>, lockdown: Option<&str>) -> tempfile::TempDir {
        let t = tempfile::tempdir().unwrap();
        if let Some(b) = secure_boot {
            let p = t.path().join(SECURE_BOOT_VAR);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, [6, 0, 0, 0, b]).unwrap();
        }
        if let Some(l) = lockdown {
            std::fs::create_dir_all(t.path().join("kernel/security")).unwrap();
            std::fs::write(t.path().join("kernel/security/lockdown"), l).unwrap();
        }
        t
    }

    #[test]
    fn secure_boot_and_lockdown_as_the_kernel_shows_them() {
        let on = sys(Some(1), Some("none [integrity] confidentiality\n"));
        assert_eq!(secure_boot(on.path()), Some(true));
        assert_eq!(mode(on.path()).as_deref(), Some("integrity"));
        assert!(locked(on.path()));
        assert_eq!(describe(on.path()), "secure boot on, lockdown integrity");
        let off = sys(Some(0), Some("[none] integrity confidentiality\n"));
        assert_eq!(secure_boot(off.path()), Some(false));
        assert!(!locked(off.path()));
        let bios = sys(None, None);
        assert_eq!(secure_boot(bios.path()), None);
        assert_eq!(mode(bios.path()), None);
        let short = tempfile::tempdir().unwrap();
        let p = short.path().join(SECURE_BOOT_VAR);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, [6, 0]).unwrap();
        assert_eq!(secure_boot(short.path()), None, "truncated variable");
    }

    #[test]
    fn errors_name_lockdown_only_when_it_is_the_reason() {
        let on = sys(Some(1), Some("none [integrity] confidentiality\n"));
        let why = explain(on.path(), libc::EKEYREJECTED).unwrap();
        assert!(why.contains("lockdown (integrity"), "{why}");
        assert!(explain(on.path(), libc::EPERM).is_some());
        assert!(explain(on.path(), libc::ENOENT).is_none());
        let off = sys(Some(0), Some("[none] integrity confidentiality\n"));
        assert!(explain(off.path(), libc::EPERM).is_none());
    }

    #[test]
    fn annotated_errors_keep_their_kind_and_name_lockdown() {
        let on = sys(Some(1), Some("none [integrity] confidentiality\n"));
        let e = annotate_in(on.path(), io::Error::from_raw_os_error(libc::EPERM));
        assert_eq!(e.kind(), io::ErrorKind::PermissionDenied);
        let msg = e.to_string();
        assert!(
            msg.contains("Operation not permitted")
                && msg.contains("refused by the kernel's lockdown (integrity"),
            "{msg}"
        );
        let other = annotate_in(on.path(), io::Error::from_raw_os_error(libc::EIO));
        assert_eq!(
            other.raw_os_error(),
            Some(libc::EIO),
            "other errors untouched"
        );
        let off = sys(Some(0), Some("[none] integrity confidentiality\n"));
        let plain = annotate_in(off.path(), io::Error::from_raw_os_error(libc::EPERM));
        assert_eq!(
            plain.raw_os_error(),
            Some(libc::EPERM),
            "no lockdown, no note"
        );
        let synthetic = annotate_in(on.path(), io::Error::other("no errno"));
        assert_eq!(synthetic.to_string(), "no errno");
    }
}
