//! Metadata erase (the mechanics of `erase_devices_metadata`, PROTOCOL.md §7.3;
//! the step is in `commands/erase.rs`): remove every
//! partition table (MBR, both GPT copies) and every filesystem, RAID or other
//! signature libblkid knows, on each device and its partitions.
//!
//! Per device: open it exclusively (the kernel refuses while mounted or
//! held), let libblkid find and erase each signature's magic (as `wipefs -a`
//! does), zero the primary and backup GPT areas, flush, have the kernel
//! re-read the (now empty) partition table, and probe once more to prove
//! nothing is left. The exclusive open and the re-read wait out a transient
//! `EBUSY` (udev probing the device; [`super::busy`]). Errors are collected
//! per device and reported together.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;

use anyhow::{bail, Context, Result};
use blkid::prober::{ProbeState, Prober};
use blkid::{PartitionsFlags, SuperblocksFlags};

use super::{erase_candidates, Device, WritePolicy};

/// Bytes of GPT partition entries (128 entries × 128 bytes).
const GPT_ENTRIES_BYTES: u64 = 16 * 1024;
/// More signatures than this on one device means libblkid is looping.
const MAX_SIGNATURES: usize = 64;

/// What was erased on one device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wiped {
    /// Signature types removed (`gpt`, `PMBR`, `ext4`, `linux_raid_member` …).
    pub signatures: Vec<String>,
}

/// Erases the metadata of `disks` and their partitions (each checked against
/// `policy`); all failures are reported together, naming each device.
pub fn erase_all_metadata(disks: &[std::path::PathBuf], policy: &WritePolicy) -> Result<()> {
    erase_devices(erase_candidates(disks)?, policy)
}

/// Erases the metadata of each of `devices` (disks, partitions, md
/// devices, in the order given; each checked against `policy`); all
/// failures are reported together, naming each device.
pub fn erase_devices(devices: Vec<Device>, policy: &WritePolicy) -> Result<()> {
    if devices.is_empty() {
        tracing::warn!("erase_devices_metadata: no devices to erase");
    }
    let mut failures = Vec::new();
    for dev in devices {
        if let Err(refusal) = policy.check(&dev) {
            failures.push(refusal.to_string());
            continue;
        }
        let started = std::time::Instant::now();
        match erase_metadata(&dev.path) {
            Ok(w) => tracing::info!(
                device = %dev.path.display(),
                signatures = ?w.signatures,
                seconds = format_args!("{:.2}", started.elapsed().as_secs_f64()),
                "metadata erased"
            ),
            Err(e) => failures.push(format!("{}: {e:#}", dev.path.display())),
        }
    }
    if !failures.is_empty() {
        bail!(
            "Failed to erase the metadata on the device(s): {}",
            failures.join("; ")
        );
    }
    Ok(())
}

/// Erases all metadata on one device (already checked against the policy).
pub fn erase_metadata(path: &Path) -> Result<Wiped> {
    let dev = Device::open(path).map_err(anyhow::Error::from)?;
    let block = dev.devno.is_some();
    // A multipath device's partition maps hold it open: removed first (its
    // table goes now), made again from the new table by whoever writes one.
    if block {
        super::multipath::drop_partitions(path)?;
    }
    let file = super::busy::retry(path, "opening it exclusively", || {
        OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(if block { libc::O_EXCL } else { 0 })
            .open(path)
    })
    .with_context(|| format!("opening {} exclusively", path.display()))?;
    let (size, sector) = if block {
        (
            super::ioctl::size_bytes(&file).context("reading the device size")?,
            u64::from(super::ioctl::logical_sector_size(&file).context("reading the sector size")?),
        )
    } else {
        (file.metadata()?.len(), 512)
    };

    let signatures = match wipe_signatures(&file) {
        Ok(found) => found,
        Err(e) => {
            // A read error in libblkid's probe (a bad sector under the old
            // table) must not leave the old tables behind: zero both ends
            // anyway (writes may well succeed), then fail. Found with a
            // blkdebug read error on LBA 1 under real Ironic: the deploy
            // failed and the old image still booted.
            let zeroed = zero_gpt_areas(&file, size, sector)
                .and_then(|()| file.sync_all().context("flushing the device"));
            let what = match zeroed {
                Ok(()) => "the MBR and both GPT areas were zeroed anyway".to_string(),
                Err(z) => format!("zeroing the MBR and GPT areas failed too: {z:#}"),
            };
            return Err(e.context(format!("erasing signatures with libblkid ({what})")));
        }
    };
    zero_gpt_areas(&file, size, sector).context("zeroing the GPT areas")?;
    file.sync_all().context("flushing the device")?;
    if block {
        super::ioctl::flush_buffers(&file).context("flushing the buffer cache")?;
        if is_whole_disk(&dev) {
            // EINVAL: the device cannot have partitions (e.g. a loop device
            // without partition scanning); nothing to re-read then.
            if let Err(e) = super::busy::retry(path, "re-reading the partition table", || {
                super::ioctl::reread_partitions(&file)
            }) {
                if e.raw_os_error() != Some(libc::EINVAL) {
                    return Err(e).context("re-reading the partition table");
                }
            }
        }
    }
    let left = probe_signatures(&file).context("probing after the erase")?;
    if !left.is_empty() {
        bail!(
            "signatures still present after erasing: {}",
            left.join(", ")
        );
    }
    Ok(Wiped { signatures })
}

fn is_whole_disk(dev: &Device) -> bool {
    dev.kernel_name()
        .map(|n| {
            !Path::new("/sys/class/block")
                .join(n)
                .join("partition")
                .exists()
        })
        .unwrap_or(false)
}

/// A libblkid probe on `file` looking for superblocks and partition tables
/// (GPT forced, as a protective MBR would hide it), reporting `superblocks`
/// and `partitions` values. Shared by the erase (which needs magics to wipe)
/// and the inventory's read-only probe (which needs UUIDs and labels).
pub(crate) fn prober(
    file: &File,
    superblocks: SuperblocksFlags,
    partitions: PartitionsFlags,
) -> Result<Prober> {
    use std::os::fd::AsRawFd;
    let mut pr = Prober::new().context("creating a libblkid probe")?;
    pr.set_device(file.as_raw_fd(), 0, None)
        .context("attaching the device to libblkid")?;
    pr.enable_superblocks(true)?;
    pr.set_superblocks_flags(superblocks)?;
    pr.enable_partitions(true)?;
    pr.set_partitions_flags(partitions | PartitionsFlags::FORCE_GPT)?;
    Ok(pr)
}

fn new_prober(file: &File) -> Result<Prober> {
    prober(
        file,
        SuperblocksFlags::MAGIC | SuperblocksFlags::TYPE | SuperblocksFlags::USAGE,
        PartitionsFlags::MAGIC,
    )
}

fn signature_name(pr: &Prober) -> String {
    pr.lookup_value("TYPE")
        .or_else(|_| pr.lookup_value("PTTYPE"))
        .unwrap_or_else(|_| "unknown".into())
}

/// Finds and erases each signature in turn, as `wipefs --all` does.
fn wipe_signatures(file: &File) -> Result<Vec<String>> {
    let pr = new_prober(file)?;
    let mut found = Vec::new();
    while pr.do_probe()? == ProbeState::Success {
        if found.len() >= MAX_SIGNATURES {
            bail!("more than {MAX_SIGNATURES} signatures found; giving up");
        }
        found.push(signature_name(&pr));
        pr.do_wipe(false).context("erasing a signature")?;
    }
    Ok(found)
}

/// Lists the signatures libblkid still finds.
pub fn probe_signatures(file: &File) -> Result<Vec<String>> {
    let pr = new_prober(file)?;
    let mut found = Vec::new();
    while pr.do_probe()? == ProbeState::Success {
        if found.len() >= MAX_SIGNATURES {
            break;
        }
        found.push(signature_name(&pr));
    }
    Ok(found)
}

/// Zeroes the MBR, the primary GPT header and entries at the start, and the
/// backup entries and header at the end, even when libblkid did not
/// recognise a (damaged) table there.
fn zero_gpt_areas(file: &File, size: u64, sector: u64) -> Result<()> {
    let head = (2 * sector + GPT_ENTRIES_BYTES).min(size);
    let tail = (sector + GPT_ENTRIES_BYTES).min(size);
    let zeros = vec![0u8; head.max(tail) as usize];
    file.write_all_at(&zeros[..head as usize], 0)
        .context("zeroing the start of the device")?;
    file.write_all_at(&zeros[..tail as usize], size - tail)
        .context("zeroing the end of the device")?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 64 MiB GPT disk made by sfdisk at `path` (named `disk.img`).
    fn make_image(path: &Path) -> u64 {
        let dir = path.parent().unwrap();
        let made = agent_testkit::sparse_disk(dir, 64, "label: gpt\nsize=8MiB, name=root\n");
        assert_eq!(made, path);
        std::fs::metadata(path).unwrap().len()
    }

    #[test]
    fn erases_mbr_gpt_areas_and_filesystem_magic_on_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let img = dir.path().join("disk.img");
        let size = make_image(&img);
        let before = probe_signatures(&File::open(&img).unwrap()).unwrap();
        assert!(!before.is_empty(), "the fixture should carry signatures");

        let wiped = erase_metadata(&img).unwrap();
        assert!(!wiped.signatures.is_empty());
        let after = probe_signatures(&File::open(&img).unwrap()).unwrap();
        assert!(after.is_empty(), "left: {after:?}");
        let data = std::fs::read(&img).unwrap();
        assert!(data[..512 * 2 + 16384].iter().all(|b| *b == 0));
        assert!(data[data.len() - 512 - 16384..].iter().all(|b| *b == 0));
        assert_eq!(
            data.len() as u64,
            size,
            "the erase must not change the size"
        );
    }

    #[test]
    fn tiny_devices_are_zeroed_without_overrun() {
        let dir = tempfile::tempdir().unwrap();
        let img = dir.path().join("tiny.img");
        std::fs::write(&img, [0xffu8; 4096]).unwrap();
        erase_metadata(&img).unwrap();
        assert!(std::fs::read(&img).unwrap().iter().all(|b| *b == 0));
    }

    #[test]
    fn the_step_refuses_devices_outside_the_policy() {
        let dir = tempfile::tempdir().unwrap();
        let img = dir.path().join("disk.img");
        make_image(&img);
        let config = agent_base::config::Config::default();
        // Nothing allowed: nothing is a candidate, nothing is touched.
        let policy = WritePolicy::from_config(&config);
        let disks = crate::disk::erasable_disks(&policy).unwrap();
        erase_all_metadata(&disks, &policy).unwrap();
        assert!(!probe_signatures(&File::open(&img).unwrap())
            .unwrap()
            .is_empty());
    }
}
