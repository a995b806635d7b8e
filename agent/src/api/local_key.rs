//! The key of `GET /v1/local/status`: a random secret of this start
//! ([`agent_core::state::AgentState::local_key`]) that the agent writes, once
//! its API listens, into a file only root reads ([`path`]: under
//! `/run/ironic-agent` ([`dir`]), named by the API's port, mode 0600), and that
//! `agent status` reads and sends in the [`HEADER`] header. A loopback
//! peer without it is refused: a container step with `--network=host`
//! shares the loopback interface but not `/run` (its own mount namespace),
//! so it cannot read the agent's state although the port answers it.

use std::io::Write;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

/// The request header that carries the key.
pub const HEADER: &str = "x-agent-local-key";

/// The directory of root's key files (the ramdisk's, a host's as root).
pub const DIR: &str = "/run/ironic-agent";

/// The directory of this user's key files: [`DIR`] for root; for another
/// user (host mode, tests) `$XDG_RUNTIME_DIR/ironic-agent`, else
/// `ironic-agent-UID` in the temporary directory.
pub fn dir() -> PathBuf {
    let uid = nix::unistd::geteuid();
    if uid.is_root() {
        return PathBuf::from(DIR);
    }
    match std::env::var_os("XDG_RUNTIME_DIR") {
        Some(d) if !d.is_empty() => PathBuf::from(d).join("ironic-agent"),
        _ => std::env::temp_dir().join(format!("ironic-agent-{uid}")),
    }
}

/// The key file of the API listening on `port`, under `dir`.
pub fn path(dir: &Path, port: u16) -> PathBuf {
    dir.join(format!("local-status-{port}.key"))
}

/// A key file written by [`write`], removed when dropped (when the API
/// it opens is gone).
#[derive(Debug)]
pub struct KeyFile(PathBuf);

impl KeyFile {
    /// Where it is.
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for KeyFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Writes `key` to [`path`]`(dir, port)`, readable by its owner only
/// (replacing any file there, whatever its mode).
pub fn write(dir: &Path, port: u16, key: &str) -> Result<KeyFile> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    // A directory someone else made (a shared temporary directory) is
    // not ours to put the key in.
    let owner = std::fs::metadata(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .uid();
    let me = nix::unistd::geteuid().as_raw();
    anyhow::ensure!(
        owner == me,
        "{} belongs to uid {owner}, not {me}",
        dir.display()
    );
    let file = path(dir, port);
    let tmp = dir.join(format!(".local-status-{port}.key.tmp"));
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .with_context(|| format!("creating {}", tmp.display()))?;
    // The mode is the umask's too: make sure it is 0600.
    f.set_permissions(std::fs::Permissions::from_mode(0o600))
        .with_context(|| format!("chmod {}", tmp.display()))?;
    f.write_all(key.as_bytes())
        .with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, &file).with_context(|| format!("renaming to {}", file.display()))?;
    Ok(KeyFile(file))
}

/// Reads the key of the API on `port` from `dir`.
pub fn read(dir: &Path, port: u16) -> Result<String> {
    let file = path(dir, port);
    let key = std::fs::read_to_string(&file).with_context(|| {
        format!(
            "reading the local status key {} (root only; is the agent on port {port} running?)",
            file.display()
        )
    })?;
    Ok(key.trim().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_file_is_owner_only_and_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let sub = dir.path().join("run");
        let f = write(&sub, 9999, "abc").unwrap();
        let p = f.path().to_path_buf();
        assert_eq!(p, sub.join("local-status-9999.key"));
        assert_eq!(std::fs::metadata(&p).unwrap().mode() & 0o777, 0o600);
        assert_eq!(read(&sub, 9999).unwrap(), "abc");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        std::mem::forget(f);
        let f = write(&sub, 9999, "def").unwrap();
        assert_eq!(std::fs::metadata(&p).unwrap().mode() & 0o777, 0o600);
        assert_eq!(read(&sub, 9999).unwrap(), "def");
        drop(f);
        assert!(!p.exists(), "removed with the API");
        let e = read(&sub, 1234).unwrap_err();
        assert!(format!("{e:#}").contains("local-status-1234.key"), "{e:#}");
    }
}
