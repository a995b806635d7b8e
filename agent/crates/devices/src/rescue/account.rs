//! The `rescue` account, as IPA's ramdisk provides it after
//! `finalize_rescue`: a login named `rescue` with the password hash Ironic
//! sent, for the console and SSH. IPA's ramdisk gives that user
//! passwordless sudo; this ramdisk has no sudo, so `rescue` is a uid-0
//! account. Written into `passwd`, `shadow` and `group` under a root
//! directory (tests use a scratch one), with IPA's password file and its
//! `/etc/.rescued` marker.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use anyhow::{Context, Result};

use super::crypt;

/// The user Ironic's rescue hands to the tenant.
pub const USER: &str = "rescue";
/// IPA's marker that the ramdisk is rescued (the agent stays stopped).
pub const RESCUED_MARKER: &str = "etc/.rescued";
/// Where IPA writes the hash for its ramdisk's rescue script.
pub const PASSWORD_FILE: &str = "etc/ipa-rescue-config/ipa-rescue-password";

/// `text` without the lines for `name` (`name:` first field), plus `line`.
fn replace_entry(text: &str, name: &str, line: &str) -> String {
    let mut out: String = text
        .lines()
        .filter(|l| l.split(':').next() != Some(name))
        .map(|l| format!("{l}\n"))
        .collect();
    out.push_str(line);
    out.push('\n');
    out
}

fn edit(path: &Path, mode: u32, f: impl FnOnce(&str) -> String) -> Result<()> {
    let old = match fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    let tmp = path.with_extension("rescue-tmp");
    fs::write(&tmp, f(&old)).with_context(|| format!("writing {}", tmp.display()))?;
    fs::set_permissions(&tmp, fs::Permissions::from_mode(mode))?;
    fs::rename(&tmp, path).with_context(|| format!("replacing {}", path.display()))
}

/// Days since 1970 (shadow's last-change field).
fn today() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() / 86400)
}

/// Creates (or replaces) the `rescue` account under `root` with `hash` (a
/// `$5$`/`$6$` hash, checked again here), gives root a locked entry when it
/// has none, writes IPA's password file and the rescued marker. A
/// `rootpwd=` password root already has is left to PID 1, which locks it
/// before its SSH server takes passwords ([`lock_root_password`]).
pub fn install(root: &Path, hash: &str) -> Result<()> {
    crypt::check_hash(hash).context("the rescue password hash")?;
    let etc = root.join("etc");
    fs::create_dir_all(&etc)?;
    let home = root.join("home").join(USER);
    fs::create_dir_all(&home)?;
    fs::set_permissions(&home, fs::Permissions::from_mode(0o700))?;
    edit(&etc.join("passwd"), 0o644, |t| {
        let t = if t.lines().any(|l| l.starts_with("root:")) {
            t.to_string()
        } else {
            replace_entry(t, "root", "root:x:0:0:root:/root:/bin/sh")
        };
        replace_entry(
            &t,
            USER,
            &format!("{USER}:x:0:0:rescue:/home/{USER}:/bin/sh"),
        )
    })?;
    edit(&etc.join("group"), 0o644, |t| {
        if t.lines().any(|l| l.starts_with("root:")) {
            t.to_string()
        } else {
            replace_entry(t, "root", "root:x:0:")
        }
    })?;
    let day = today();
    edit(&etc.join("shadow"), 0o600, |t| {
        let t = if t.lines().any(|l| l.starts_with("root:")) {
            t.to_string()
        } else {
            replace_entry(t, "root", &format!("root:*:{day}:0:99999:7:::"))
        };
        replace_entry(&t, USER, &format!("{USER}:{hash}:{day}:0:99999:7:::"))
    })?;
    let pw = root.join(PASSWORD_FILE);
    fs::create_dir_all(pw.parent().expect("has a parent"))?;
    fs::write(&pw, hash).with_context(|| format!("writing {}", pw.display()))?;
    fs::set_permissions(&pw, fs::Permissions::from_mode(0o600))?;
    fs::write(root.join(RESCUED_MARKER), b"")
        .with_context(|| format!("writing {}", root.join(RESCUED_MARKER).display()))?;
    Ok(())
}

/// Gives root the password `hash` for console logins (IPA ramdisks'
/// `rootpwd=` kernel argument, DIB's dynamic-login element); only PID 1 in
/// the deploy ramdisk calls this. `$5$`/`$6$` hashes only (`openssl passwd
/// -6`); an MD5 (`$1$`) or malformed one is refused, naming why.
pub fn set_root_password(root: &Path, hash: &str) -> Result<()> {
    if hash.starts_with("$1$") {
        anyhow::bail!(
            "rootpwd: MD5 crypt ($1$) is refused; give a SHA-512 hash (openssl passwd -6)"
        );
    }
    crypt::check_hash(hash).context("rootpwd")?;
    let etc = root.join("etc");
    fs::create_dir_all(&etc)?;
    edit(&etc.join("passwd"), 0o644, |t| {
        if t.lines().any(|l| l.starts_with("root:")) {
            t.to_string()
        } else {
            replace_entry(t, "root", "root:x:0:0:root:/root:/bin/sh")
        }
    })?;
    let day = today();
    edit(&etc.join("shadow"), 0o600, |t| {
        replace_entry(t, "root", &format!("root:{hash}:{day}:0:99999:7:::"))
    })
}

/// Locks root's password under `root` as `passwd -l` does (a `!` before
/// the hash: no password matches, the hash is kept): after a rescue, so
/// that a `rootpwd=` password does not become an SSH password for root
/// once the rescue SSH server takes passwords. Root without a shadow entry
/// gets a locked one. Returns whether root had a usable password.
pub fn lock_root_password(root: &Path) -> Result<bool> {
    let etc = root.join("etc");
    fs::create_dir_all(&etc)?;
    let mut had = false;
    let day = today();
    edit(&etc.join("shadow"), 0o600, |t| {
        let line = match t.lines().find_map(|l| l.strip_prefix("root:")) {
            Some(rest) if password_locked(rest.split(':').next().unwrap_or_default()) => {
                format!("root:{rest}")
            }
            Some(rest) => {
                had = true;
                format!("root:!{rest}")
            }
            // No entry, or one without a password field.
            None => format!("root:*:{day}:0:99999:7:::"),
        };
        replace_entry(t, "root", &line)
    })?;
    Ok(had)
}

/// Whether a shadow password field lets no password in: `!…` (locked, as
/// `passwd -l` writes it) or `*…` (never set). Anything else, an empty field
/// included, may match some password.
fn password_locked(field: &str) -> bool {
    field.starts_with('!') || field.starts_with('*')
}

/// Whether the ramdisk under `root` was rescued.
pub fn rescued(root: &Path) -> bool {
    root.join(RESCUED_MARKER).exists()
}

#[cfg(test)]
mod tests {
    use super::*;

    const HASH: &str = "$6$saltsalt$TVLlQcbpFVof5W3Yz4DTP6gRstiNuHwwTt6GLc1E5n0U0aDehy0S5knV8wiOQSpT0Y77vwPZN.Pq.H91p5hVO1";

    #[test]
    fn rootpwd_sets_roots_hash_and_refuses_md5_and_junk() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        fs::create_dir_all(root.join("etc")).unwrap();
        fs::write(
            root.join("etc/shadow"),
            "root:*:1:0:99999:7:::\nnobody:*:1::::::\n",
        )
        .unwrap();
        set_root_password(root, HASH).unwrap();
        let shadow = fs::read_to_string(root.join("etc/shadow")).unwrap();
        assert!(shadow.contains(&format!("root:{HASH}:")), "{shadow}");
        assert!(shadow.contains("nobody:*:1::::::"), "{shadow}");
        assert_eq!(shadow.matches("root:").count(), 1, "{shadow}");
        assert!(fs::read_to_string(root.join("etc/passwd"))
            .unwrap()
            .starts_with("root:x:0:0:"));
        let md5 = set_root_password(root, "$1$abcdefgh$abcdefghijklmnopqrstuv").unwrap_err();
        assert!(format!("{md5:#}").contains("openssl passwd -6"), "{md5:#}");
        let junk = set_root_password(root, "hunter2").unwrap_err();
        assert!(format!("{junk:#}").starts_with("rootpwd: "), "{junk:#}");
        // Nothing changed by the refusals.
        assert_eq!(fs::read_to_string(root.join("etc/shadow")).unwrap(), shadow);
    }

    #[test]
    fn writes_the_account_as_login_and_dropbear_read_it() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        fs::create_dir_all(root.join("etc")).unwrap();
        fs::write(root.join("etc/passwd"), "root:x:0:0:root:/root:/bin/sh\n").unwrap();
        assert!(!rescued(root));
        install(root, HASH).unwrap();
        // Twice (a second finalize_rescue) leaves one entry.
        install(root, HASH).unwrap();
        let passwd = fs::read_to_string(root.join("etc/passwd")).unwrap();
        assert_eq!(
            passwd,
            "root:x:0:0:root:/root:/bin/sh\nrescue:x:0:0:rescue:/home/rescue:/bin/sh\n"
        );
        let shadow = fs::read_to_string(root.join("etc/shadow")).unwrap();
        let lines: Vec<&str> = shadow.lines().collect();
        assert_eq!(lines.len(), 2, "{shadow}");
        assert!(
            lines[0].starts_with("root:*:"),
            "root stays locked: {shadow}"
        );
        let fields: Vec<&str> = lines[1].split(':').collect();
        assert_eq!((fields[0], fields[1]), ("rescue", HASH));
        assert!(crypt::verify("secret", fields[1]));
        let mode = fs::metadata(root.join("etc/shadow"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(fs::read_to_string(root.join(PASSWORD_FILE)).unwrap(), HASH);
        assert!(root.join("home/rescue").is_dir());
        assert_eq!(
            fs::read_to_string(root.join("etc/group")).unwrap(),
            "root:x:0:\n"
        );
        assert!(rescued(root));
    }

    #[test]
    fn rescue_locks_roots_rootpwd_and_keeps_the_rescue_login() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        set_root_password(root, HASH).unwrap();
        install(root, HASH).unwrap();
        assert!(lock_root_password(root).unwrap(), "root had a password");
        let shadow = fs::read_to_string(root.join("etc/shadow")).unwrap();
        let fields = |user: &str| -> Vec<String> {
            let line = shadow
                .lines()
                .find(|l| l.starts_with(&format!("{user}:")))
                .unwrap_or_else(|| panic!("no {user} in {shadow}"));
            line.split(':').map(String::from).collect()
        };
        let root_fields = fields("root");
        assert_eq!(root_fields[1], format!("!{HASH}"), "{shadow}");
        assert_eq!(root_fields.len(), 9, "the other fields kept: {shadow}");
        assert!(
            !crypt::verify("secret", &root_fields[1]),
            "root still takes its password"
        );
        assert!(
            crypt::verify("secret", &fields(USER)[1]),
            "the rescue login broke"
        );
        // Again: nothing left to lock, nothing changes.
        assert!(!lock_root_password(root).unwrap());
        assert_eq!(fs::read_to_string(root.join("etc/shadow")).unwrap(), shadow);
        let mode = fs::metadata(root.join("etc/shadow"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    #[test]
    fn root_without_a_usable_password_is_locked_too() {
        for (before, had) in [
            ("", false),
            ("root:*:1:0:99999:7:::\n", false),
            ("root::1:0:99999:7:::\n", true),
            ("root\n", false),
            ("root:abJnggxhB/yWI:1::::::\n", true),
        ] {
            let dir = tempfile::tempdir().unwrap();
            let root = dir.path();
            fs::create_dir_all(root.join("etc")).unwrap();
            fs::write(
                root.join("etc/shadow"),
                format!("daemon:*:1::::::\n{before}"),
            )
            .unwrap();
            assert_eq!(lock_root_password(root).unwrap(), had, "{before:?}");
            let shadow = fs::read_to_string(root.join("etc/shadow")).unwrap();
            let roots: Vec<&str> = shadow.lines().filter(|l| l.starts_with("root")).collect();
            assert_eq!(roots.len(), 1, "{before:?} -> {shadow}");
            let field = roots[0].split(':').nth(1).unwrap_or_default();
            assert!(password_locked(field), "{before:?} -> {shadow}");
            assert!(shadow.starts_with("daemon:*:1::::::\n"), "{shadow}");
        }
    }

    #[test]
    fn a_hash_that_could_break_shadow_is_refused_before_anything_is_written() {
        let dir = tempfile::tempdir().unwrap();
        let e = install(dir.path(), &format!("{HASH}:0:0\nroot::")).unwrap_err();
        assert!(format!("{e:#}").contains("rescue password hash"), "{e:#}");
        assert!(!dir.path().join("etc").exists());
    }
}
