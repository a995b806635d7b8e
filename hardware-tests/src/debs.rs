//! Programs from Debian packages unpacked, not installed (`ci/unpack-debs`):
//! `nmcli --offline` to check NetworkManager keyfiles, `etcd` on loopback
//! for the burn-in pairing tests, `lldpd` as a switch's LLDP sender inside
//! a test's network namespace. Nothing of theirs runs as a service.

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::{repo_root, run};

/// Unpacks `packages` as `name` and returns the unpacked root.
pub fn unpacked(name: &str, packages: &[&str]) -> Result<PathBuf> {
    let out = run(Command::new(repo_root().join("ci/unpack-debs"))
        .arg(name)
        .args(packages))?;
    Ok(PathBuf::from(out.trim()))
}

/// Debian's `nmcli`, ready to run (`--offline` needs no daemon).
pub fn nmcli() -> Result<Command> {
    let root = unpacked("nmcli", &["network-manager", "libnm0"])?;
    let mut c = Command::new(root.join("usr/bin/nmcli"));
    c.env("LD_LIBRARY_PATH", root.join("usr/lib/x86_64-linux-gnu"));
    Ok(c)
}

/// Debian's etcd, serving on loopback from a temporary data directory;
/// killed (by PID) when dropped.
#[derive(Debug)]
pub struct Etcd {
    child: Child,
    _data: tempfile::TempDir,
    /// `127.0.0.1:PORT` of the client API and its JSON gateway.
    pub addr: String,
}

impl Etcd {
    /// Starts etcd with its client port at `port` (peer port `port + 1`)
    /// and waits until it answers.
    pub fn start(port: u16) -> Result<Self> {
        let root = unpacked("etcd", &["etcd-server"])?;
        let data = tempfile::tempdir()?;
        let addr = format!("127.0.0.1:{port}");
        let peer = format!("http://127.0.0.1:{}", port + 1);
        let log = std::fs::File::create(data.path().join("etcd.log"))?;
        let child = Command::new(root.join("usr/bin/etcd"))
            .arg("--data-dir")
            .arg(data.path().join("data"))
            .args(["--listen-client-urls", &format!("http://{addr}")])
            .args(["--advertise-client-urls", &format!("http://{addr}")])
            .args(["--listen-peer-urls", &peer])
            .args(["--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &format!("default={peer}")])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .context("starting etcd")?;
        let etcd = Etcd {
            child,
            _data: data,
            addr,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(&etcd.addr).is_err() {
            if Instant::now() > deadline {
                bail!("etcd did not listen on {} within 30 s", etcd.addr);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(etcd)
    }

    /// The tooz URL of its gateway.
    pub fn tooz_url(&self) -> String {
        format!("etcd3+http://{}", self.addr)
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Debian's lldpd sending LLDP on one interface of a test's network
/// namespace, as a switch port on the 802.1AB timer does (every 30 s, its
/// default `tx-interval`). lldpd separates privileges into its `_lldpd`
/// user and chroots into `/run/lldpd`; neither exists on this machine, so
/// it runs in a mount namespace of its own (`unshare -m`) where a passwd
/// and group file naming that user are bound over `/etc`'s and `/run` is a
/// fresh tmpfs: nothing of this machine's changes. Killed (its process
/// group, by PID) when dropped.
#[derive(Debug)]
pub struct Lldpd {
    child: Child,
    dir: tempfile::TempDir,
}

impl Lldpd {
    /// Starts lldpd in namespace `netns`, sending on `ifname` only, with
    /// system description `name`.
    pub fn start(netns: &str, ifname: &str, name: &str) -> Result<Self> {
        let root = unpacked("lldpd", &["lldpd", "libsnmp40", "libsensors5", "libpci3"])?;
        let dir = tempfile::tempdir()?;
        std::fs::write(
            dir.path().join("passwd"),
            "root:x:0:0:root:/root:/bin/sh\n_lldpd:x:900:900::/run/lldpd:/usr/sbin/nologin\n",
        )?;
        std::fs::write(dir.path().join("group"), "root:x:0:\n_lldpd:x:900:\n")?;
        let log = std::fs::File::create(dir.path().join("lldpd.log"))?;
        let script = "mount --bind \"$1/passwd\" /etc/passwd && mount --bind \"$1/group\" /etc/group \
             && mount -t tmpfs lldpd /run && mkdir /run/lldpd \
             && LD_LIBRARY_PATH=\"$2/usr/lib/x86_64-linux-gnu\" exec \"$2/usr/sbin/lldpd\" -d -I \"$3\" \
             -S \"$4\" -u /run/lldpd.socket -L \"$2/usr/sbin/lldpcli\" -O /dev/null";
        let child = Command::new("ip")
            .args([
                "netns", "exec", netns, "unshare", "-m", "bash", "-c", script, "lldpd",
            ])
            .arg(dir.path())
            .arg(&root)
            .args([ifname, name])
            .process_group(0)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .context("starting lldpd")?;
        Ok(Lldpd { child, dir })
    }

    /// What lldpd logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("lldpd.log")).unwrap_or_default()
    }
}

impl Drop for Lldpd {
    fn drop(&mut self) {
        let pgid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::killpg(pgid, nix::sys::signal::Signal::SIGTERM);
        let _ = self.child.wait();
    }
}
