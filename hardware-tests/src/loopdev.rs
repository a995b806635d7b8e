//! Loop devices backed by files in a temporary directory, with a GPT and an
//! ext4 filesystem made by util-linux and e2fsprogs so the signatures are
//! the real thing.

use std::path::PathBuf;
use std::process::Command;

use anyhow::{bail, Context, Result};

use crate::run;

/// A loop device attached with partition scanning; detached on drop.
#[derive(Debug)]
pub struct LoopDevice {
    /// `/dev/loopN`.
    pub path: PathBuf,
    _dir: tempfile::TempDir,
}

impl LoopDevice {
    /// A loop device over a new sparse file of `size` bytes.
    pub fn new(size: u64) -> Result<Self> {
        Self::new_in(&std::env::temp_dir(), size)
    }

    /// Same, with the backing file under `parent` (e.g. a tmpfs, so the
    /// disk is not what limits a benchmark).
    pub fn new_in(parent: &std::path::Path, size: u64) -> Result<Self> {
        Self::create(parent, size, 512)
    }

    /// A loop device with `sector`-byte logical sectors (4096: a 4Kn disk).
    pub fn with_sector_size(size: u64, sector: u32) -> Result<Self> {
        Self::create(&std::env::temp_dir(), size, sector)
    }

    fn create(parent: &std::path::Path, size: u64, sector: u32) -> Result<Self> {
        let dir = tempfile::tempdir_in(parent)?;
        let file = dir.path().join("disk.img");
        std::fs::File::create(&file)?.set_len(size)?;
        let dev = run(Command::new("losetup")
            .args(["--find", "--show", "--partscan", "--sector-size"])
            .arg(sector.to_string())
            .arg(&file))?;
        Ok(Self {
            path: PathBuf::from(dev),
            _dir: dir,
        })
    }

    /// Writes a GPT with two partitions and an ext4 filesystem on the first.
    pub fn partition_and_format(&self) -> Result<()> {
        let mut child = Command::new("sfdisk")
            .args(["--quiet", "--wipe", "always"])
            .arg(&self.path)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .spawn()
            .context("running sfdisk")?;
        use std::io::Write;
        child
            .stdin
            .take()
            .context("sfdisk stdin")?
            .write_all(b"label: gpt\n,16MiB\n,\n")?;
        if !child.wait()?.success() {
            bail!("sfdisk failed on {}", self.path.display());
        }
        let p1 = self.wait_partition(1)?;
        // A udev running beside the tests may also be probing the new
        // partition (mkfs's exclusive open fails meanwhile), or re-read the
        // table once more: retry for up to 15 s, waiting for the node again
        // if it went.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
        loop {
            let result = run(Command::new("mkfs.ext4")
                .args(["-q", "-F", "-L", "testfs"])
                .arg(&p1))
            .map(drop);
            match result {
                Ok(()) => return Ok(()),
                Err(e) if std::time::Instant::now() >= deadline => {
                    return Err(e.context(format!("making ext4 on {} for 15 s", p1.display())))
                }
                Err(_) => {
                    std::thread::sleep(std::time::Duration::from_millis(100));
                    if !p1.exists() {
                        self.wait_partition(1)?;
                    }
                }
            }
        }
    }

    /// `/dev/loopNpK` once the kernel has it, after a change to the table:
    /// the kernel is asked for the table's partitions first. A udev running
    /// beside the tests re-reads the table when a writer closes the disk
    /// (the partition nodes go and come back); on a loaded machine (ci/test
    /// runs two jobs at once) a node was once gone for more than 2 s, and
    /// sometimes for good (a partition still open when udev asked). So the
    /// kernel is asked again each second the node is missing, for up to
    /// 15 s, as `udevadm settle` would wait.
    pub fn wait_partition(&self, k: u32) -> Result<PathBuf> {
        let part = self.partition(k);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
        let update = || run(Command::new("partx").args(["--update"]).arg(&self.path)).ok();
        update();
        let mut next_update = std::time::Instant::now() + std::time::Duration::from_secs(1);
        while !part.exists() {
            let now = std::time::Instant::now();
            if now >= deadline {
                bail!("{} did not appear within 15 s", part.display());
            }
            if now >= next_update {
                update();
                next_update = now + std::time::Duration::from_secs(1);
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        Ok(part)
    }

    /// The kernel's partitions of the device once `n` of them have been
    /// there for half a second: [`Self::wait_partition`] for the `n`th,
    /// then again whenever a udevd's re-read has dropped them meanwhile
    /// (seen in CI: the node appeared, then the partitions were gone), for
    /// up to 15 s.
    pub fn settled_partitions(&self, n: usize) -> Result<Vec<PathBuf>> {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
        loop {
            self.wait_partition(n as u32)?;
            std::thread::sleep(std::time::Duration::from_millis(500));
            let parts = self.kernel_partitions();
            if parts.len() == n {
                return Ok(parts);
            }
            if std::time::Instant::now() >= deadline {
                bail!(
                    "{}: {} partitions after 15 s, not {n}: {parts:?}",
                    self.path.display(),
                    parts.len()
                );
            }
        }
    }

    /// The file behind the device.
    pub fn backing_file(&self) -> PathBuf {
        self._dir.path().join("disk.img")
    }

    /// A fingerprint of the whole device, fast on a sparse one: every data
    /// extent of the backing file (`SEEK_DATA`/`SEEK_HOLE`) with the sha256
    /// of its bytes. Any write through the device, of data or zeros, and
    /// any discard changes it. The device's buffers are flushed first, so
    /// the file holds every write made through the device.
    pub fn fingerprint(&self) -> Result<Vec<(u64, u64, String)>> {
        nix::unistd::sync();
        run(Command::new("blockdev").arg("--flushbufs").arg(&self.path))?;
        let file = self.backing_file();
        let f = std::fs::File::open(&file)?;
        // Extents allocated unwritten (a zeroing through the loop device)
        // count as data while their pages are cached: drop the file's
        // cache so a read through the device changes nothing here.
        nix::fcntl::posix_fadvise(
            &f,
            0,
            0,
            nix::fcntl::PosixFadviseAdvice::POSIX_FADV_DONTNEED,
        )
        .context("dropping the backing file's cache")?;
        let mut out = Vec::new();
        for (start, end) in crate::sparse::data_extents(&f)? {
            let digest = crate::sha256_range(&file, start, end - start)?;
            out.push((start, end - start, digest));
        }
        Ok(out)
    }

    /// `/dev/loopNpK`.
    pub fn partition(&self, k: u32) -> PathBuf {
        PathBuf::from(format!("{}p{k}", self.path.display()))
    }

    /// Partitions the kernel currently knows for this device.
    pub fn kernel_partitions(&self) -> Vec<PathBuf> {
        agent_devices::disk::Device::open(&self.path)
            .map(|d| d.partitions().into_iter().map(|p| p.path).collect())
            .unwrap_or_default()
    }

    /// Signatures libblkid finds on the device.
    pub fn signatures(&self) -> Result<Vec<String>> {
        agent_devices::disk::erase::probe_signatures(&std::fs::File::open(&self.path)?)
    }
}

impl Drop for LoopDevice {
    /// Removes the kernel's partitions of the device before detaching it.
    /// Detaching drops them too, but when one is open at that moment (a
    /// udevd beside the tests probes every partition that changes) the
    /// kernel keeps them (`partition scan of loopN failed (rc=-16)`), and
    /// the next user of `/dev/loopN`, in this suite or another, finds a
    /// device with stale partitions: mkfs.vfat then refuses it ("Partitions
    /// or virtual mappings on device"). So the partitions go first, retried
    /// while busy, for up to 10 s.
    fn drop(&mut self) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !self.kernel_partitions().is_empty() {
            let deleted = run(Command::new("partx").arg("--delete").arg(&self.path)).is_ok();
            if deleted || std::time::Instant::now() >= deadline {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        if let Some(p) = self.kernel_partitions().first() {
            eprintln!(
                "warning: {} still has partitions ({}) at detach",
                self.path.display(),
                p.display()
            );
        }
        if let Err(e) = run(Command::new("losetup").arg("--detach").arg(&self.path)) {
            eprintln!("warning: detaching {}: {e:#}", self.path.display());
        }
    }
}
