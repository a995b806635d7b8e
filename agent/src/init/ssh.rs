//! SSH into the ramdisk for debugging: with IPA's `sshkey="ssh-ed25519 AAAA… comment"`
//! on the kernel command line, the key is authorized for root and dropbear
//! (shipped with its libraries by `image-builder/fetch-ssh.sh`) serves port
//! 22 for public-key logins only, with host keys made at the first
//! connection. PID 1 supervises it like the agent.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use anyhow::{bail, Context, Result};

/// The SSH server in the ramdisk.
pub(crate) const DROPBEAR: &str = "/usr/sbin/dropbear";

/// Its arguments: foreground, log to stderr (the console), make host keys
/// when first needed, no password logins, port 22.
pub(crate) const DROPBEAR_ARGS: &[&str] = &["-F", "-E", "-R", "-s", "-p", "22"];

/// In rescue mode: the same, with password logins (the `rescue` user's).
/// PID 1 locks root's password before starting it (`supervise.rs`,
/// `rescue_root`). Not `-g`/`-w`: dropbear applies them to every uid 0,
/// and the `rescue` user is uid 0 (no sudo here), so they would lock the
/// tenant out.
pub(crate) const DROPBEAR_RESCUE_ARGS: &[&str] = &["-F", "-E", "-R", "-p", "22"];

/// The `sshkey` value of a kernel command line. The kernel keeps
/// `sshkey="TYPE BASE64 comment"` together, but boot loaders such as iPXE
/// strip the quotes on the way, leaving `sshkey=TYPE BASE64 comment` as
/// separate words: then the key type and the next word are joined.
pub(crate) fn key_from_cmdline(cmdline: &str) -> Option<String> {
    let start = cmdline.find("sshkey=")? + "sshkey=".len();
    if !(start == 7 || cmdline[..start - 7].ends_with(char::is_whitespace)) {
        return None;
    }
    let rest = &cmdline[start..];
    if let Some(q) = rest.strip_prefix('"') {
        return Some(q.split('"').next().unwrap_or_default().trim().to_string());
    }
    let mut words = rest.split_whitespace();
    let first = words.next()?;
    if validate_key(first).is_ok() {
        return Some(first.to_string());
    }
    match words.next() {
        Some(blob) if validate_key(&format!("{first} {blob}")).is_ok() => {
            Some(format!("{first} {blob}"))
        }
        _ => Some(first.to_string()),
    }
}

/// Checks that `key` looks like one OpenSSH public key line.
pub(crate) fn validate_key(key: &str) -> Result<()> {
    let mut parts = key.split_whitespace();
    let (Some(kind), Some(blob)) = (parts.next(), parts.next()) else {
        bail!("sshkey must be \"TYPE BASE64 [comment]\" (quote it on the kernel command line)");
    };
    let known = kind.starts_with("ssh-")
        || kind.starts_with("ecdsa-sha2-")
        || kind.starts_with("sk-ssh-")
        || kind.starts_with("sk-ecdsa-");
    if !known {
        bail!("sshkey: unknown key type {kind:?}");
    }
    if blob.len() < 16
        || !blob
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'='))
    {
        bail!("sshkey: the key data is not base64");
    }
    Ok(())
}

/// Writes `key` as root's only authorized key under `root` (`/` in the
/// ramdisk) with the modes sshd-style servers insist on.
pub(crate) fn authorize(root: &Path, key: &str) -> Result<()> {
    validate_key(key)?;
    let dir = root.join("root/.ssh");
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    std::fs::set_permissions(root.join("root"), std::fs::Permissions::from_mode(0o700))?;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))?;
    let file = dir.join("authorized_keys");
    std::fs::write(&file, format!("{}\n", key.trim()))
        .with_context(|| format!("writing {}", file.display()))?;
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600))?;
    std::fs::create_dir_all(root.join("etc/dropbear"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str =
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIB8xvzP0Bq6pV2Uw0oXq1o3m8a5C3M4D9pQx2rT6yKpS op@host";

    #[test]
    fn key_with_or_without_quotes() {
        let (kind, blob) = KEY.split_once(' ').unwrap();
        let blob = blob.split_whitespace().next().unwrap();
        let want = format!("{kind} {blob}");
        let quoted = format!("console=ttyS0 sshkey=\"{KEY}\" quiet");
        assert_eq!(key_from_cmdline(&quoted).as_deref(), Some(KEY));
        // iPXE dropped the quotes.
        let bare = format!("console=ttyS0 sshkey={KEY} quiet");
        assert_eq!(key_from_cmdline(&bare), Some(want));
        assert_eq!(key_from_cmdline("xsshkey=ssh-ed25519 AAAA"), None);
        assert_eq!(key_from_cmdline("quiet"), None);
        assert_eq!(key_from_cmdline("sshkey=junk").as_deref(), Some("junk"));
    }

    #[test]
    fn passwords_only_in_rescue() {
        assert!(
            DROPBEAR_ARGS.contains(&"-s"),
            "no password logins before rescue"
        );
        assert!(!DROPBEAR_RESCUE_ARGS.contains(&"-s"));
        // The rescue user is uid 0: dropbear's per-uid root switches would refuse it.
        for a in ["-g", "-w"] {
            assert!(!DROPBEAR_RESCUE_ARGS.contains(&a), "{a}");
        }
    }

    #[test]
    fn keys_are_checked_and_written_private() {
        let t = tempfile::tempdir().unwrap();
        authorize(t.path(), KEY).unwrap();
        let f = t.path().join("root/.ssh/authorized_keys");
        assert_eq!(std::fs::read_to_string(&f).unwrap(), format!("{KEY}\n"));
        assert_eq!(
            std::fs::metadata(&f).unwrap().permissions().mode() & 0o777,
            0o600
        );
        let d = t.path().join("root/.ssh");
        assert_eq!(
            std::fs::metadata(d).unwrap().permissions().mode() & 0o777,
            0o700
        );
        assert!(t.path().join("etc/dropbear").is_dir());
        for bad in [
            "",
            "ssh-ed25519",
            "rsa AAAAB3NzaC1yc2EAAAADAQABAAAB",
            "ssh-rsa not*base64!",
        ] {
            assert!(authorize(t.path(), bad).is_err(), "{bad:?} accepted");
        }
    }
}
