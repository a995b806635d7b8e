//! What `install_coreos` left on a bed machine's disk, read from the host
//! side after the machine is powered off: the disk file attached as a
//! read-only loop device the test owns (partitions scanned, detached on
//! drop), the CoreOS `boot` filesystem's files, byte ranges, and whatever
//! would still make the disk boot.

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result};

use crate::run;

/// A disk file attached read-only (`losetup --read-only --partscan`).
#[derive(Debug)]
pub struct ReadOnlyDisk {
    /// `/dev/loopN`.
    pub path: PathBuf,
}

impl ReadOnlyDisk {
    /// Attaches `file` (the machine must be off).
    pub fn attach(file: &Path) -> Result<Self> {
        let dev = run(Command::new("losetup")
            .args(["--find", "--show", "--read-only", "--partscan"])
            .arg(file))
        .with_context(|| format!("attaching {} read-only", file.display()))?;
        Ok(Self {
            path: PathBuf::from(dev.trim()),
        })
    }

    /// The files `rel` (paths inside the filesystem) of the partition whose
    /// filesystem or GPT name is `boot`, mounted read-only as `fstype`
    /// meanwhile; a `vfat` one is read with mtools instead (this machine's
    /// kernel has no vfat).
    pub fn boot_files(&self, fstype: &str, rel: &[&str]) -> Result<Vec<String>> {
        let boot = agent_contents::ignition::boot_partition(&self.path)?
            .with_context(|| format!("no boot partition on {}", self.path.display()))?;
        if fstype == "vfat" {
            let image = format!("{}@@{}", self.path.display(), boot.start);
            return rel
                .iter()
                .map(|r| {
                    let out = crate::mtools("mtype", &image)
                        .arg(format!("::{r}"))
                        .output()
                        .context("running mtype (ci/install-deps installs mtools)")?;
                    anyhow::ensure!(
                        out.status.success(),
                        "reading {r} from the boot filesystem: {}",
                        String::from_utf8_lossy(&out.stderr).trim()
                    );
                    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
                })
                .collect();
        }
        let m = agent_contents::ignition::mount::Mounted::new(
            &self.path, boot.start, boot.len, fstype, true,
        )?;
        let read: Result<Vec<String>> = rel
            .iter()
            .map(|r| {
                std::fs::read_to_string(m.path().join(r))
                    .with_context(|| format!("reading {r} from the boot filesystem"))
            })
            .collect();
        m.unmount()?;
        read
    }

    /// `len` bytes at `offset`.
    pub fn read_at(&self, offset: u64, len: usize) -> Result<Vec<u8>> {
        let f = std::fs::File::open(&self.path)?;
        let mut buf = vec![0u8; len];
        f.read_exact_at(&mut buf, offset).with_context(|| {
            format!("reading {len} bytes at {offset} of {}", self.path.display())
        })?;
        Ok(buf)
    }

    /// What would still make the disk boot: libblkid's signatures (a
    /// partition table, filesystems) and the GPT headers; empty when none.
    pub fn bootable_leftovers(&self) -> Result<Vec<String>> {
        let f = std::fs::File::open(&self.path)?;
        let size = agent_devices::disk::ioctl::size_bytes(&f)?;
        let mut found = agent_devices::disk::erase::probe_signatures(&f)?;
        let mut head = [0u8; 8];
        for (at, what) in [
            (512, "primary GPT header"),
            (size - 512, "backup GPT header"),
        ] {
            f.read_exact_at(&mut head, at)?;
            if &head == b"EFI PART" {
                found.push(what.into());
            }
        }
        Ok(found)
    }
}

impl Drop for ReadOnlyDisk {
    fn drop(&mut self) {
        if let Err(e) = run(Command::new("losetup").arg("-d").arg(&self.path)) {
            eprintln!("detaching {}: {e:#}", self.path.display());
        }
    }
}

/// The agent's log from every log bundle Ironic stored under `[agent]
/// deploy_logs_local_path`, concatenated: in the container form the live
/// system's `journal` (which holds the container's output), else
/// `agent.log`.
pub fn agent_logs(bundles: &[PathBuf]) -> String {
    let mut all = String::new();
    let mut bundles = bundles.to_vec();
    bundles.sort();
    for b in bundles {
        let part = |name: &str| run(Command::new("tar").arg("-xzOf").arg(&b).arg(name));
        match part("journal").or_else(|_| part("agent.log")) {
            Ok(log) => all.push_str(&log),
            Err(e) => all.push_str(&format!("({}: {e:#})\n", b.display())),
        }
        all.push('\n');
    }
    all
}
