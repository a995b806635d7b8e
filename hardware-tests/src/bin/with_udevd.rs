//! `with_udevd COMMAND [ARGS…]`: runs COMMAND with a real systemd-udevd
//! beside it ([`hardware_tests::udevd`]), as on every systemd host. udevd
//! acts on the loop devices over files in a fresh directory, given to
//! COMMAND as `TMPDIR` (the test fixtures create their loop devices' files
//! under it), and on nothing else; it is stopped by PID when COMMAND ends.
//! Exits with COMMAND's status. Root only (ci/test runs the loop-device and
//! deploy suites under it).

use std::process::Command;

use anyhow::{bail, Context, Result};
use hardware_tests::udevd::Udevd;

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some((cmd, rest)) = args.split_first() else {
        bail!("usage: with_udevd COMMAND [ARGS…]");
    };
    let scope = tempfile::Builder::new()
        .prefix("with-udevd-")
        .tempdir()
        .context("creating the directory udevd acts in")?;
    let udevd = Udevd::start(scope.path())?;
    eprintln!(
        "with_udevd: systemd-udevd (PID {}) acts on loop devices over files under {} (TMPDIR)",
        udevd.pid(),
        udevd.scope().display()
    );
    let status = Command::new(cmd)
        .args(rest)
        .env("TMPDIR", udevd.scope())
        .status()
        .with_context(|| format!("running {cmd}"))?;
    let log = udevd.stop();
    // Its first rule runs a program for each event of the scope's devices.
    let events = log.matches("Running PROGRAM").count();
    eprintln!(
        "with_udevd: udevd processed {events} events of the loop devices; {cmd} exited {status}"
    );
    drop(scope);
    std::process::exit(status.code().unwrap_or(1));
}
