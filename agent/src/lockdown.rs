//! Secure Boot and the kernel's lockdown, as the running kernel reports
//! them: the `SecureBoot` EFI variable (efivarfs) and
//! `/sys/kernel/security/lockdown` (securityfs). Under Secure Boot,
//! Debian's kernel locks itself down (integrity): it loads only signed
//! modules and refuses /dev/mem, raw I/O ports, unsigned kexec and
//! hardware-address module parameters. The agent uses none of those; when
//! the kernel still refuses something, [`explain`] names lockdown as the
//! reason. Reads take the `/sys` root so they are tested on fixtures.

use std::path::Path;

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
}
