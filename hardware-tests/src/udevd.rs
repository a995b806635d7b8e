//! A real systemd-udevd beside the agent, acting only on loop devices whose
//! backing files lie under one directory (the "scope"), as udev acts on
//! every disk of a systemd host.
//!
//! The daemon is Debian's `udev` package's systemd-udevd, unpacked (never
//! installed) into `target/udev` by `ci/udev/install.sh`. It runs in a
//! private mount namespace (`unshare --mount`) where:
//! - `/run` is a fresh tmpfs: its control socket and database are private,
//!   so nothing on this machine sees a udev running;
//! - `/dev` is a fresh tmpfs holding, besides `null`/`zero`/`urandom`,
//!   only the scope's loop devices and their partitions: the real nodes,
//!   bind-mounted by its first rule as each appears (same inodes, so its
//!   inotify watches and probes act on the very devices the agent opens).
//!   The links it makes for every other device of the machine
//!   (`/dev/block/M:m`) land in that private tmpfs;
//! - the machine's rules directories are hidden; its only rules are
//!   Debian's `60-block.rules` (the `watch` option: re-read and re-probe a
//!   disk when a writer closes it) and `60-persistent-storage.rules` (the
//!   libblkid probe and the `/dev/disk/by-*` links) verbatim, behind a first
//!   rule that skips every device but the scope's loop devices.
//!
//! No event is replayed ("coldplug"), no permission of a device node is
//! changed, no rule runs for another device. The daemon is started by PID
//! and stopped by PID (SIGTERM, then SIGKILL) when the [`Udevd`] is dropped;
//! its log stays in its state directory.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::repo_root;

/// A running systemd-udevd; stopped on drop.
#[derive(Debug)]
pub struct Udevd {
    child: Child,
    state: tempfile::TempDir,
    scope: PathBuf,
}

/// The systemd-udevd binary: `$AGENT_TEST_UDEVD`, else `target/udev/systemd-udevd`.
pub fn binary() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("AGENT_TEST_UDEVD") {
        return Some(PathBuf::from(p));
    }
    let p = repo_root().join("target/udev/systemd-udevd");
    p.exists().then_some(p)
}

/// The rules: Debian's block-device rules for the scope's loop devices only.
fn rules(scope: &Path, debian: &Path, node_script: &Path) -> Result<String> {
    let scope = scope.to_str().context("scope path is not UTF-8")?;
    if scope.contains(['"', '*', '?', '[', '|']) {
        bail!("scope path {scope:?} has characters udev rules treat specially");
    }
    let mut r = format!(
        "# hardware-tests/src/udevd.rs: only the loop devices over files under {scope}\n\
         SUBSYSTEM==\"block\", KERNEL==\"loop*\", ATTRS{{loop/backing_file}}==\"{scope}/*\", GOTO=\"agent_test_ours\"\n\
         GOTO=\"agent_test_end\"\n\
         LABEL=\"agent_test_ours\"\n\
         ACTION!=\"remove\", PROGRAM=\"{node} %k\"\n",
        node = node_script.display()
    );
    for f in ["60-block.rules", "60-persistent-storage.rules"] {
        let p = debian.join(f);
        r.push_str(&format!("# ---- Debian's {f}\n"));
        r.push_str(
            &std::fs::read_to_string(&p).with_context(|| format!("reading {}", p.display()))?,
        );
        r.push('\n');
    }
    r.push_str("LABEL=\"agent_test_end\"\n");
    Ok(r)
}

/// Run by the first rule for each of the scope's devices: the real device
/// node bind-mounted at the same path of the private `/dev` (a bind mount
/// keeps the inode, so udevd's inotify watch sees the agent's writes; a
/// symbolic link would not do, as udevd opens nodes with O_NOFOLLOW).
const NODE: &str = r#"#!/bin/sh
k=$1
[ -e "/run/realdev/$k" ] || exit 0
if [ "/dev/$k" -ef "/run/realdev/$k" ]; then exit 0; fi
umount -q "/dev/$k" 2>/dev/null || true
touch "/dev/$k"
exec mount --bind "/run/realdev/$k" "/dev/$k"
"#;

const SETUP: &str = r#"set -eu
rules=$1 bin=$2
if [ -n "${AGENT_TEST_RUN:-}" ]; then
    mount --bind "$AGENT_TEST_RUN" /run
else
    mount -t tmpfs -o mode=0755 agent-test-run /run
fi
mkdir -p /run/realdev /run/udev/rules.d
mount --bind /dev /run/realdev
mount -t tmpfs -o mode=0755 agent-test-dev /dev
for n in null zero full random urandom; do ln -s /run/realdev/$n /dev/$n; done
for d in /etc/udev/rules.d /lib/udev/rules.d /usr/lib/udev/rules.d /usr/local/lib/udev/rules.d; do
    if [ -d "$d" ]; then mount -t tmpfs -o mode=0755 agent-test-norules "$d"; fi
done
cp "$rules" /run/udev/rules.d/99-agent-test.rules
exec -a systemd-udevd "$bin"
"#;

impl Udevd {
    /// Starts systemd-udevd for the loop devices whose backing files lie
    /// under `scope` (an absolute path without symbolic links).
    pub fn start(scope: &Path) -> Result<Self> {
        Self::start_with_run(scope, None)
    }

    /// [`Udevd::start`], with `run` (a private tmpfs mount of the caller's)
    /// as its `/run` instead of a fresh tmpfs: its control socket and
    /// database are then also seen there, by tools chrooted into a root
    /// holding `run` (hardware-tests/src/liveroot.rs).
    pub fn start_with_run(scope: &Path, run: Option<&Path>) -> Result<Self> {
        let bin = binary()
            .context("no systemd-udevd: run ci/udev/install.sh (or set AGENT_TEST_UDEVD)")?;
        let scope = scope
            .canonicalize()
            .with_context(|| format!("resolving {}", scope.display()))?;
        let state = tempfile::Builder::new().prefix("udevd-").tempdir()?;
        let debian = bin.parent().expect("binary in a directory").join("rules.d");
        let rules_file = state.path().join("99-agent-test.rules");
        let node_script = state.path().join("node.sh");
        std::fs::write(&node_script, NODE)?;
        std::fs::set_permissions(
            &node_script,
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )?;
        std::fs::write(&rules_file, rules(&scope, &debian, &node_script)?)?;
        let log = std::fs::File::create(state.path().join("udevd.log"))?;
        let child = Command::new("unshare")
            .args([
                "--mount",
                "--propagation",
                "private",
                "--",
                "bash",
                "-c",
                SETUP,
                "setup",
            ])
            .arg(&rules_file)
            .arg(&bin)
            .env(
                "AGENT_TEST_RUN",
                run.map(Path::as_os_str).unwrap_or_default(),
            )
            .env("SYSTEMD_LOG_LEVEL", "debug")
            .env("SYSTEMD_LOG_TARGET", "console")
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("starting systemd-udevd in its own mount namespace")?;
        let mut me = Udevd {
            child,
            state,
            scope,
        };
        // Ready once its control socket exists (seen through its root).
        let control = PathBuf::from(format!("/proc/{}/root/run/udev/control", me.pid()));
        let start = Instant::now();
        while !control.exists() {
            if let Some(status) = me.child.try_wait()? {
                bail!("systemd-udevd exited ({status}) at start:\n{}", me.log());
            }
            if start.elapsed() > Duration::from_secs(20) {
                bail!("systemd-udevd not ready after 20 s:\n{}", me.log());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        tracing::info!(pid = me.pid(), scope = %me.scope.display(), "systemd-udevd running");
        Ok(me)
    }

    /// The daemon's PID.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The directory whose loop devices it acts on.
    pub fn scope(&self) -> &Path {
        &self.scope
    }

    /// Its log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.state.path().join("udevd.log")).unwrap_or_default()
    }

    /// Its database entry for block device `major:minor` (`E:ID_FS_TYPE=…`
    /// lines), if it processed one.
    pub fn db_entry(&self, major: u64, minor: u64) -> Option<String> {
        std::fs::read_to_string(format!(
            "/proc/{}/root/run/udev/data/b{major}:{minor}",
            self.pid()
        ))
        .ok()
    }

    /// Whether it watches block device `major:minor` for writers closing it.
    pub fn watches(&self, major: u64, minor: u64) -> bool {
        std::fs::read_dir(format!("/proc/{}/root/run/udev/watch", self.pid()))
            .map(|d| {
                d.flatten().any(|e| {
                    std::fs::read_link(e.path())
                        .map(|t| t.to_string_lossy() == format!("b{major}:{minor}"))
                        .unwrap_or(false)
                })
            })
            .unwrap_or(false)
    }

    /// Stops the daemon (SIGTERM, SIGKILL after 10 s); returns its log.
    pub fn stop(mut self) -> String {
        self.terminate();
        self.log()
    }

    fn terminate(&mut self) {
        if self.child.try_wait().ok().flatten().is_some() {
            return;
        }
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(10) {
            if self.child.try_wait().ok().flatten().is_some() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Udevd {
    fn drop(&mut self) {
        self.terminate();
    }
}
