//! The [`Candidate`]s of the running machine: each path described as the
//! inventory describes its disk (every serial and WWN), its partitions
//! from sysfs, and the md volume names in its superblocks. A path that is
//! no block device known to sysfs (a regular file standing in for a disk
//! in host mode) is described by its name and size alone.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use super::Candidate;
use agent_devices::disk::{ioctl, Device};
use agent_devices::inventory::{disks, Disk};

/// Describes `paths` (whole disks or md arrays), in order.
pub fn candidates(paths: &[PathBuf]) -> Vec<Candidate> {
    candidates_of(paths.iter().cloned().zip(describe(paths)).collect())
}

/// Each path's disk as the inventory describes it (named `/dev/<kernel
/// name>`; a path sysfs does not know by its name and size), in order.
pub fn describe(paths: &[PathBuf]) -> Vec<Disk> {
    let knames: Vec<Option<String>> = paths
        .iter()
        .map(|p| Device::open(p).ok().and_then(|d| d.kernel_name()))
        .collect();
    let extra: Vec<String> = knames.iter().flatten().cloned().collect();
    let listed: HashMap<String, Disk> = disks::read(Path::new("/"), &extra)
        .unwrap_or_else(|e| {
            tracing::warn!("describing the disks for properties.skip_block_devices: {e:#}");
            Vec::new()
        })
        .into_iter()
        .map(|d| (d.name.clone(), d))
        .collect();
    paths
        .iter()
        .zip(knames)
        .map(|(path, kname)| {
            kname
                .and_then(|k| listed.get(&format!("/dev/{k}")).cloned())
                .unwrap_or_else(|| bare(path))
        })
        .collect()
}

/// Candidates of disks already described (the inventory's), each listed by
/// its path: their partitions and md volume names added.
pub fn candidates_of(disks: Vec<(PathBuf, Disk)>) -> Vec<Candidate> {
    disks
        .into_iter()
        .map(|(path, disk)| {
            let partitions: Vec<Device> = Device::open(&path)
                .map(|d| d.partitions())
                .unwrap_or_default();
            let mut raid_volumes: Vec<String> = std::iter::once(path.as_path())
                .chain(partitions.iter().map(|p| p.path.as_path()))
                .filter_map(volume_name)
                .collect();
            raid_volumes.dedup();
            Candidate {
                partitions: partitions
                    .iter()
                    .map(|p| (p.path.display().to_string(), size(&p.path)))
                    .collect(),
                path,
                disk,
                raid_volumes,
            }
        })
        .collect()
}

/// A disk known only by its path and size.
fn bare(path: &Path) -> Disk {
    Disk::bare(&path.display().to_string(), size(path))
}

fn size(path: &Path) -> u64 {
    std::fs::File::open(path)
        .and_then(|f| ioctl::size_bytes(&f).or_else(|_| f.metadata().map(|m| m.len())))
        .unwrap_or(0)
}

/// The md volume name in `path`'s version-1 superblock (`host:name` as
/// mdadm writes it gives `name`).
fn volume_name(path: &Path) -> Option<String> {
    let (_, found) = crate::raid::ops::examine(path)?;
    let name = found
        .name
        .rsplit(':')
        .next()
        .unwrap_or_default()
        .to_string();
    (!name.is_empty()).then_some(name)
}
