//! Programs from Debian packages unpacked, not installed (`ci/unpack-debs`):
//! `nmcli --offline` to check NetworkManager keyfiles, `etcd` on loopback
//! for the burn-in pairing tests. Nothing of theirs runs as a service.

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
