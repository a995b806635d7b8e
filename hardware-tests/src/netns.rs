//! Network namespaces a test creates (`ip netns add`), deleted on drop with
//! everything in them, and a way to run code inside one: a thread that
//! `setns`es into it, so the test process itself never leaves its own
//! namespace and no traffic reaches the host's network.

use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

use anyhow::{Context, Result};

use crate::run;

static COUNTER: AtomicUsize = AtomicUsize::new(0);

/// A named network namespace; deleted (with its interfaces) on drop.
#[derive(Debug)]
pub struct NetNs {
    /// Name under `/run/netns`.
    pub name: String,
}

impl NetNs {
    /// Creates a fresh namespace with loopback up.
    pub fn new(prefix: &str) -> Result<Self> {
        let name = format!(
            "{prefix}-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        );
        run(Command::new("ip").args(["netns", "add", &name]))?;
        let ns = Self { name };
        ns.ip(&["link", "set", "lo", "up"])?;
        Ok(ns)
    }

    /// Runs `ip -n <ns> <args>`.
    pub fn ip(&self, args: &[&str]) -> Result<String> {
        run(Command::new("ip").arg("-n").arg(&self.name).args(args))
    }

    /// Creates a veth pair `a`–`b` inside the namespace, both up.
    pub fn veth(&self, a: &str, b: &str) -> Result<()> {
        self.ip(&["link", "add", a, "type", "veth", "peer", "name", b])?;
        self.ip(&["link", "set", a, "up"])?;
        self.ip(&["link", "set", b, "up"])?;
        Ok(())
    }

    /// Runs `f` on a thread that has entered the namespace; sockets it
    /// opens belong to the namespace and may be used from any thread.
    pub fn enter<T: Send>(&self, f: impl FnOnce() -> T + Send) -> Result<T> {
        let path = format!("/run/netns/{}", self.name);
        let file = std::fs::File::open(&path).with_context(|| format!("opening {path}"))?;
        std::thread::scope(|s| {
            s.spawn(move || -> Result<T> {
                nix::sched::setns(&file, nix::sched::CloneFlags::CLONE_NEWNET)
                    .context("entering the network namespace")?;
                Ok(f())
            })
            .join()
            .map_err(|_| anyhow::anyhow!("the thread inside the namespace panicked"))?
        })
    }
}

impl Drop for NetNs {
    fn drop(&mut self) {
        if let Err(e) = run(Command::new("ip").args(["netns", "del", &self.name])) {
            eprintln!("warning: deleting network namespace {}: {e:#}", self.name);
        }
    }
}
