//! Logging in to a guest on the bed over SSH with a password, from inside
//! the bed's namespace: the password goes through `SSH_ASKPASS` (no
//! terminal needed), host keys are not recorded, one password prompt.

use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::Result;

use crate::run;

/// `ssh user@host command` in namespace `ns` with `password`; `dir` holds
/// the askpass script. The command's output, or why the login failed
/// (`Permission denied` for a wrong password).
pub fn with_password(
    ns: &str,
    dir: &Path,
    user_at_host: &str,
    password: &str,
    command: &str,
) -> Result<String> {
    let askpass = dir.join(format!("askpass-{}", password.len()));
    std::fs::write(&askpass, format!("#!/bin/sh\necho '{password}'\n"))?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&askpass, std::fs::Permissions::from_mode(0o700))?;
    run(Command::new("ip")
        .args(["netns", "exec", ns, "setsid", "-w", "ssh"])
        .args([
            "-o",
            "StrictHostKeyChecking=no",
            "-o",
            "UserKnownHostsFile=/dev/null",
            "-o",
            "PubkeyAuthentication=no",
            "-o",
            "PreferredAuthentications=password,keyboard-interactive",
            "-o",
            "NumberOfPasswordPrompts=1",
            "-o",
            "ConnectTimeout=20",
            user_at_host,
            command,
        ])
        .env("SSH_ASKPASS", &askpass)
        .env("SSH_ASKPASS_REQUIRE", "force")
        .env("DISPLAY", ":0")
        .stdin(Stdio::null()))
}
