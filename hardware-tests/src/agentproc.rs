//! The agent as its own process (`target/debug/agent serve`, host mode),
//! for tests that measure it (resident memory, open files) or run many at
//! once: started by the test, optionally inside a network namespace the
//! test created, its output in a log file, killed by PID on drop.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use anyhow::{Context, Result};

/// The agent binary the test suite runs: `$AGENT_BIN` as it is, else
/// `target/debug/agent` beside the test executable's directory (built by
/// `cargo build -p agent --bin agent`, and by `cargo test -p agent`, which
/// ci/test runs first), refused when older than the agent's sources.
pub fn agent_binary() -> Result<PathBuf> {
    if let Some(p) = std::env::var_os("AGENT_BIN") {
        return Ok(PathBuf::from(p));
    }
    let exe = std::env::current_exe()?;
    let bin = exe
        .parent()
        .and_then(Path::parent)
        .context("the test executable is not in target/<profile>/deps")?
        .join("agent");
    let built = std::fs::metadata(&bin)
        .and_then(|m| m.modified())
        .with_context(|| {
            format!(
                "{} is missing: build it with `cargo build -p agent --bin agent`",
                bin.display()
            )
        })?;
    // Refuse a binary older than the agent's sources (the test conductor
    // and the test kit are not part of it).
    let mut stack = vec![
        crate::repo_root().join("agent/src"),
        crate::repo_root().join("agent/crates"),
    ];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir)?.flatten() {
            let p = e.path();
            if p.is_dir() {
                if !p.ends_with("testconductor") && !p.ends_with("testkit") {
                    stack.push(p);
                }
            } else if p.extension().is_some_and(|x| x == "rs") && e.metadata()?.modified()? > built
            {
                anyhow::bail!(
                    "{} is older than {}: rebuild it with `cargo build -p agent --bin agent`",
                    bin.display(),
                    p.display()
                );
            }
        }
    }
    Ok(bin)
}

/// The `agent serve` flags of a host-mode agent on loopback for the
/// conductor at `api_url`: node port `mac`, allowed to write `device`, any
/// free port, looking up for ever at most 2 s apart, heartbeats at least
/// 1 s apart; kernel parameters from `cmdline_file` when given.
pub fn loopback_args(
    api_url: &str,
    mac: &str,
    device: &Path,
    cmdline_file: Option<&Path>,
) -> Vec<String> {
    let mut args: Vec<String> = ["--api-url", api_url, "--mac", mac]
        .iter()
        .map(|s| s.to_string())
        .collect();
    if let Some(f) = cmdline_file {
        args.push("--cmdline-file".into());
        args.push(f.display().to_string());
    }
    args.extend(
        [
            "--advertise-host",
            "127.0.0.1",
            "--listen-host",
            "127.0.0.1",
            "--listen-port",
            "0",
            "--advertise-port",
            "0",
            "--allow-device",
            &device.display().to_string(),
            "--lookup-timeout",
            "0",
            "--lookup-max-interval",
            "2",
            "--min-heartbeat-interval",
            "1",
        ]
        .iter()
        .map(|s| s.to_string()),
    );
    args
}

/// A running `agent serve`; killed on drop.
#[derive(Debug)]
pub struct AgentProcess {
    child: Child,
    log: PathBuf,
}

impl AgentProcess {
    /// Starts `agent serve ARGS` (inside network namespace `netns` when
    /// given, through `ip netns exec`, which keeps the PID), its standard
    /// output and error going to `log`.
    pub fn serve(args: &[String], log: &Path, netns: Option<&str>) -> Result<Self> {
        Self::serve_env(args, log, netns, &[])
    }

    /// [`AgentProcess::serve`] with extra environment variables (`RUST_LOG`).
    pub fn serve_env(
        args: &[String],
        log: &Path,
        netns: Option<&str>,
        env: &[(&str, &str)],
    ) -> Result<Self> {
        let bin = agent_binary()?;
        let mut cmd = match netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns]).arg(&bin);
                c
            }
            None => Command::new(&bin),
        };
        let out =
            std::fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
        let child = cmd
            .arg("serve")
            .args(args)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        Ok(Self {
            child,
            log: log.to_path_buf(),
        })
    }

    /// Its PID.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether it is still running.
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Its log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Resident memory in KiB (`VmRSS` of /proc/PID/status).
    pub fn rss_kib(&self) -> Result<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid()))?;
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .context("no VmRSS in /proc/PID/status")
    }

    /// Open file descriptors (entries of /proc/PID/fd).
    pub fn open_fds(&self) -> Result<usize> {
        Ok(std::fs::read_dir(format!("/proc/{}/fd", self.pid()))?.count())
    }

    /// Its threads (`Threads` of /proc/PID/status).
    pub fn threads(&self) -> Result<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid()))?;
        status
            .lines()
            .find_map(|l| l.strip_prefix("Threads:"))
            .and_then(|v| v.trim().parse().ok())
            .context("no Threads in /proc/PID/status")
    }
}

impl Drop for AgentProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
