//! The live system's root filesystem when the agent runs as OpenShift's
//! `ironic-agent` container (`Config::host_root`, `/mnt/coreos`, where the
//! unit binds the host's `/`). The host's own tools run chrooted there, as
//! OpenShift's hardware manager runs them (`chroot /mnt/coreos …`):
//! `coreos-installer` ([`installer`]), `systemctl` ([`systemd`], the
//! assisted installer's unit), `journalctl` ([`journal`], the host's
//! journal in the log bundle) and `hostnamectl` ([`hostname`]).
//!
//! The agent's container carries no tools (not even `chroot`), so
//! [`command`] makes the chroot itself, in the child just before `exec`;
//! the program is then looked up inside the host's root in the agent's
//! `PATH` (as `chroot` keeps its caller's), or [`HOST_PATH`] when the
//! agent has none.

pub mod hostname;
pub mod installer;
pub(crate) mod journal;
pub mod systemd;

use std::path::Path;
use std::process::Command;

/// `PATH` inside the host's root when the agent has none (CoreOS keeps its
/// tools in `/usr/bin` and `/usr/sbin`).
pub const HOST_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// `program` to be run chrooted into `root` (cwd `/`). A `root` that
/// cannot be entered, or a `program` not found there, fails the spawn
/// (`NotFound` for a missing program).
#[allow(unsafe_code)]
pub fn command(root: &Path, program: &str) -> Command {
    use std::os::unix::process::CommandExt;
    let mut cmd = Command::new(program);
    if std::env::var_os("PATH").is_none() {
        cmd.env("PATH", HOST_PATH);
    }
    let root = std::ffi::CString::new(root.as_os_str().as_encoded_bytes())
        .unwrap_or_else(|_| c"/nonexistent-host-root".into());
    // SAFETY: runs in the forked child before exec; it only calls chroot(2)
    // and chdir(2), which are async-signal-safe, on a CString made before
    // the fork, and touches no lock or allocation.
    unsafe {
        cmd.pre_exec(move || {
            if libc::chroot(root.as_ptr()) != 0 || libc::chdir(c"/".as_ptr()) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd
}

/// The command line of a chrooted `cmd` as IPA logs it
/// (`chroot ROOT program args…`).
pub fn cmdline(root: &Path, cmd: &Command) -> String {
    format!(
        "chroot {} {}",
        root.display(),
        agent_base::tool::cmdline(cmd)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_root_that_cannot_be_entered_fails_the_spawn() {
        // As any user: chroot(2) into a missing directory fails with
        // ENOENT (or EPERM for a non-root user) before the exec.
        let e = command(Path::new("/nonexistent/host/root"), "true")
            .output()
            .unwrap_err();
        assert!(
            matches!(
                e.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::PermissionDenied
            ),
            "{e:?}"
        );
    }

    #[test]
    fn the_command_line_names_the_chroot() {
        let mut c = command(Path::new("/mnt/coreos"), "coreos-installer");
        c.args(["install", "/dev/sda"]);
        assert_eq!(
            cmdline(Path::new("/mnt/coreos"), &c),
            "chroot /mnt/coreos coreos-installer install /dev/sda"
        );
    }
}
