//! The live system's host name at the container's start (what OpenShift's
//! hardware manager does in `_fix_hostname` when IPA loads it): a host
//! still called `localhost` or `localhost.localdomain` is renamed to the
//! BareMetalHost's name from `IPA_DEFAULT_HOSTNAME` with the host's
//! `hostnamectl set-hostname --static --transient`, and the container's own
//! `/etc/hostname` gets the name too (the container does not see the
//! host's). Any other name is left alone; without `IPA_DEFAULT_HOSTNAME`
//! a warning says the name cannot be fixed. The current name comes from the
//! host's `hostnamectl hostname`, else (with a warning) from the
//! container's `/etc/hostname`.

use std::path::Path;

use agent_base::tool::ToolError;

/// The environment variable with the BareMetalHost's name.
pub const DEFAULT_HOSTNAME_ENV: &str = "IPA_DEFAULT_HOSTNAME";

/// Names that mean "not set yet".
const LOCAL_NAMES: [&str; 2] = ["localhost", "localhost.localdomain"];

/// Why the host name could not be fixed.
#[derive(Debug, thiserror::Error)]
pub enum HostnameError {
    /// Neither `hostnamectl` nor `/etc/hostname` told the current name.
    #[error("reading the current hostname from {path} (hostnamectl failed: {tool}): {source}")]
    Current {
        /// The file read instead.
        path: String,
        /// Why `hostnamectl hostname` failed.
        tool: ToolError,
        /// Why the file could not be read.
        source: std::io::Error,
    },
    /// `hostnamectl set-hostname` failed.
    #[error("Failed to update hostname: {0}")]
    Set(ToolError),
    /// The container's `/etc/hostname` could not be written.
    #[error("Failed to update hostname: writing {path}: {source}")]
    Write {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
}

/// What [`fix`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The host already has a name of its own.
    Kept(String),
    /// It is a local name and no BareMetalHost name was given.
    NoName(String),
    /// Renamed from the first to the second.
    Renamed(String, String),
}

/// The host's `hostnamectl`.
pub trait Hostnamectl {
    /// `hostnamectl hostname`.
    fn current(&mut self) -> Result<String, ToolError>;
    /// `hostnamectl set-hostname --static --transient NAME`.
    fn set(&mut self, name: &str) -> Result<(), ToolError>;
}

/// `hostnamectl` run chrooted into the host's root.
#[derive(Debug)]
pub struct Chrooted<'a>(pub &'a Path);

impl Hostnamectl for Chrooted<'_> {
    fn current(&mut self) -> Result<String, ToolError> {
        let out = agent_base::tool::run(super::command(self.0, "hostnamectl").arg("hostname"))?;
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    fn set(&mut self, name: &str) -> Result<(), ToolError> {
        agent_base::tool::run(super::command(self.0, "hostnamectl").args([
            "set-hostname",
            "--static",
            "--transient",
            name,
        ]))
        .map(|_| ())
    }
}

/// The container start's hostname fix for the host at `host_root`, with
/// `IPA_DEFAULT_HOSTNAME` from the environment and the container's
/// `/etc/hostname`. An error means the agent should not start (IPA's
/// manager then fails to load).
pub fn fix_at_start(host_root: &Path) -> Result<Outcome, HostnameError> {
    let default = std::env::var(DEFAULT_HOSTNAME_ENV).ok();
    fix(
        &mut Chrooted(host_root),
        default.as_deref(),
        Path::new("/etc/hostname"),
    )
}

/// The fix, with the tool and the container's hostname file given.
pub fn fix(
    tool: &mut dyn Hostnamectl,
    default: Option<&str>,
    etc_hostname: &Path,
) -> Result<Outcome, HostnameError> {
    let current = match tool.current() {
        Ok(name) => name,
        Err(e) => {
            tracing::warn!(
                "Failed to call hostnamectl, will use {} instead. Error: {e}",
                etc_hostname.display()
            );
            std::fs::read_to_string(etc_hostname).map_err(|source| HostnameError::Current {
                path: etc_hostname.display().to_string(),
                tool: e,
                source,
            })?
        }
    };
    let current = current.trim().to_string();
    tracing::debug!(hostname = %current, "the current hostname");
    if !LOCAL_NAMES.contains(&current.as_str()) {
        return Ok(Outcome::Kept(current));
    }
    let Some(new) = default.map(str::trim).filter(|n| !n.is_empty()) else {
        tracing::warn!(
            "This host has a local hostname {current}, but the BareMetalHost name is not provided to fix it ({DEFAULT_HOSTNAME_ENV})"
        );
        return Ok(Outcome::NoName(current));
    };
    tracing::info!("Fixing local hostname {current} to BareMetalHost name {new}");
    tool.set(new).map_err(HostnameError::Set)?;
    std::fs::write(etc_hostname, new).map_err(|source| HostnameError::Write {
        path: etc_hostname.display().to_string(),
        source,
    })?;
    Ok(Outcome::Renamed(current, new.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A scripted `hostnamectl`: its current name (or a failure) and the
    /// names it was asked to set.
    struct Fake {
        current: Option<String>,
        set: Vec<String>,
        set_fails: bool,
    }

    fn failed() -> ToolError {
        ToolError::Spawn {
            cmdline: "hostnamectl hostname".into(),
            source: std::io::Error::from(std::io::ErrorKind::NotFound),
        }
    }

    impl Hostnamectl for Fake {
        fn current(&mut self) -> Result<String, ToolError> {
            self.current.clone().ok_or_else(failed)
        }
        fn set(&mut self, name: &str) -> Result<(), ToolError> {
            if self.set_fails {
                return Err(failed());
            }
            self.set.push(name.to_string());
            Ok(())
        }
    }

    fn fake(current: Option<&str>) -> Fake {
        Fake {
            current: current.map(String::from),
            set: Vec::new(),
            set_fails: false,
        }
    }

    #[test]
    fn a_local_name_becomes_the_baremetalhost_name() {
        let dir = tempfile::tempdir().unwrap();
        let etc = dir.path().join("hostname");
        let mut t = fake(Some("localhost\n"));
        let got = fix(&mut t, Some("worker-0"), &etc).unwrap();
        assert_eq!(got, Outcome::Renamed("localhost".into(), "worker-0".into()));
        assert_eq!(t.set, ["worker-0"]);
        assert_eq!(std::fs::read_to_string(&etc).unwrap(), "worker-0");
    }

    #[test]
    fn a_real_name_is_kept_and_no_name_only_warns() {
        let dir = tempfile::tempdir().unwrap();
        let etc = dir.path().join("hostname");
        let mut t = fake(Some("master-1.example.com"));
        assert_eq!(
            fix(&mut t, Some("worker-0"), &etc).unwrap(),
            Outcome::Kept("master-1.example.com".into())
        );
        let mut t = fake(Some("localhost.localdomain"));
        assert_eq!(
            fix(&mut t, None, &etc).unwrap(),
            Outcome::NoName("localhost.localdomain".into())
        );
        assert_eq!(
            fix(&mut t, Some("  "), &etc).unwrap(),
            Outcome::NoName("localhost.localdomain".into())
        );
        assert!(t.set.is_empty());
        assert!(!etc.exists());
    }

    #[test]
    fn without_hostnamectl_the_file_tells_the_name() {
        let dir = tempfile::tempdir().unwrap();
        let etc = dir.path().join("hostname");
        std::fs::write(&etc, "localhost\n").unwrap();
        let mut t = fake(None);
        assert_eq!(
            fix(&mut t, Some("w1"), &etc).unwrap(),
            Outcome::Renamed("localhost".into(), "w1".into())
        );
        std::fs::remove_file(&etc).unwrap();
        let e = fix(&mut fake(None), Some("w1"), &etc).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("reading the current hostname from"),
            "{e}"
        );
        let mut t = fake(Some("localhost"));
        t.set_fails = true;
        let e = fix(&mut t, Some("w1"), &etc).unwrap_err();
        assert!(
            e.to_string().starts_with("Failed to update hostname: "),
            "{e}"
        );
    }
}
