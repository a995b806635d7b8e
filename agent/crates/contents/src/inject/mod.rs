//! The `inject_files` step's work (IPA's `inject_files.py`): files put into
//! (or deleted from) the filesystems of the root disk after a deploy, from
//! the node's `properties.inject_files` and the step's `files`. Each file
//! names a partition (its number, or the disk's partition device) or is
//! found by its first directory (`etc/sysctl.d/x.conf`: the first
//! partition that has an `etc` directory). Partitions are mounted
//! `nodev,nosuid,noexec` and every path is resolved beneath the mount with
//! no symbolic link followed ([`crate::ignition::beneath`]): a tenant
//! filesystem cannot redirect the agent's writes elsewhere.

use std::path::Path;

use base64::Engine;
use serde_json::Value;

use crate::ignition::beneath::Beneath;
use crate::ignition::mount::Mounted;
use agent_devices::disk::table;

pub mod spec;

pub use spec::{validate, FileSpec};

/// Why files could not be injected.
#[derive(Debug, thiserror::Error)]
pub enum InjectError {
    /// The request itself is wrong (IPA's InvalidCommandParamsError).
    #[error("{0}")]
    Invalid(String),
    /// The disk has no partition with the path, or no such partition.
    #[error("{0}")]
    NotFound(String),
    /// Reading the disk, mounting or writing failed.
    #[error("Failed to process file {path}: {reason:#}")]
    Failed {
        /// The file's `path`.
        path: String,
        /// What went wrong.
        reason: anyhow::Error,
    },
}

/// Where a file goes: which partition, and the path inside it.
fn partition_of<'t>(
    disk: &Path,
    parts: &'t [table::Part],
    spec: &FileSpec,
) -> Result<Option<&'t table::Part>, InjectError> {
    let Some(p) = &spec.partition else {
        return Ok(None);
    };
    let disk_name = disk.display().to_string();
    // A number, or the disk's own partition device (sda2, nvme0n1p2).
    let number = p.parse::<u32>().ok().or_else(|| {
        let rest = p.strip_prefix(&disk_name)?;
        rest.strip_prefix('p').unwrap_or(rest).parse().ok()
    });
    let Some(number) = number else {
        return Err(InjectError::Invalid(format!(
            "partition {p:?} of {:?} is neither a partition number nor a partition of the root device {disk_name}",
            spec.path
        )));
    };
    parts
        .iter()
        .find(|x| x.number == number)
        .map(Some)
        .ok_or_else(|| InjectError::NotFound(format!("no partition {number} on {disk_name}")))
}

/// The filesystem type of a partition, if it has one we can mount.
fn fstype(f: &std::fs::File, part: &table::Part) -> Option<String> {
    agent_devices::disk::probe::probe_value(f, part.start, part.len, "TYPE")
        .filter(|t| !matches!(t.as_str(), "swap" | "LVM2_member" | "linux_raid_member"))
}

/// Injects `files` into the partitions of `device`; `fetch` gets a URL's
/// content. Returns one line per file done.
pub fn inject(
    device: &Path,
    files: &[FileSpec],
    fetch: &dyn Fn(&str) -> anyhow::Result<Vec<u8>>,
) -> Result<Vec<String>, InjectError> {
    let failed = |path: &str, reason: anyhow::Error| InjectError::Failed {
        path: path.to_string(),
        reason,
    };
    let f = std::fs::File::open(device).map_err(|e| {
        InjectError::NotFound(format!("opening the root device {}: {e}", device.display()))
    })?;
    let sector = agent_devices::disk::ioctl::logical_sector_size(&f).map_or(512, u64::from);
    let parts = table::read(&f, sector)
        .map_err(|e| InjectError::NotFound(format!("{}: {e}", device.display())))?
        .map(|t| t.parts)
        .unwrap_or_default();
    let mut done = Vec::new();
    for spec in files {
        let rel = spec.relative_path();
        let (part, inner) = match partition_of(device, &parts, spec)? {
            Some(p) => (p, rel.clone()),
            None => {
                let (first, _) = rel.split_once('/').ok_or_else(|| {
                    InjectError::Invalid(format!(
                        "Invalid path {}, must be an absolute path to a file",
                        spec.path
                    ))
                })?;
                let found = parts.iter().find(|p| {
                    let Some(t) = fstype(&f, p) else { return false };
                    Mounted::new(device, p.start, p.len, &t, true)
                        .ok()
                        .is_some_and(|m| {
                            let has = Beneath::open(&m.path()).and_then(|b| b.dir(first)).is_ok();
                            let _ = m.unmount();
                            has
                        })
                });
                let p = found.ok_or_else(|| {
                    InjectError::NotFound(format!(
                        "No partition found with path {first} on {}",
                        device.display()
                    ))
                })?;
                // The first directory was found on it: the whole path lives there.
                (p, rel.clone())
            }
        };
        let t = fstype(&f, part).ok_or_else(|| {
            failed(
                &spec.path,
                anyhow::anyhow!("partition {} has no filesystem to mount", part.number),
            )
        })?;
        let m = Mounted::new(device, part.start, part.len, &t, false)
            .map_err(|e| failed(&spec.path, e.into()))?;
        let result = put(&m.path(), &inner, spec, fetch);
        let unmounted = m.unmount();
        result.map_err(|e| failed(&spec.path, e))?;
        unmounted.map_err(|e| failed(&spec.path, e.into()))?;
        let what = if spec.deleted { "deleted" } else { "written" };
        tracing::info!(path = %spec.path, partition = part.number, "file {what}");
        done.push(format!("{} {what} on partition {}", spec.path, part.number));
    }
    Ok(done)
}

/// Writes or deletes one file at `inner` beneath `root`.
fn put(
    root: &Path,
    inner: &str,
    spec: &FileSpec,
    fetch: &dyn Fn(&str) -> anyhow::Result<Vec<u8>>,
) -> anyhow::Result<()> {
    let (dirs, name) = match inner.rsplit_once('/') {
        Some((d, n)) => (d, n),
        None => ("", inner),
    };
    let mut dir = Beneath::open(root)?;
    let mut created_leaf = false;
    for component in dirs.split('/').filter(|c| !c.is_empty()) {
        created_leaf = dir.make_dir(component, 0o755)?;
        dir = dir.dir(component)?;
    }
    if spec.deleted {
        return dir.remove_file(name);
    }
    if created_leaf {
        if let Some(mode) = spec.dirmode {
            dir.chmod_self(mode)?;
        }
    }
    let data = match spec.content.as_deref().unwrap_or_default() {
        c if c.contains("://") => fetch(c)?,
        c => base64::engine::general_purpose::STANDARD
            .decode(c.trim())
            .map_err(|e| anyhow::anyhow!("content is not base64: {e}"))?,
    };
    dir.write_file(name, &data, spec.mode.unwrap_or(0o644))?;
    dir.set_attrs(name, spec.mode, spec.owner, spec.group)
}

/// `properties.inject_files` of a node.
pub fn from_node(node: &Value) -> Value {
    node.pointer("/properties/inject_files")
        .cloned()
        .filter(|v| !v.is_null())
        .unwrap_or(Value::Array(Vec::new()))
}

#[cfg(test)]
mod tests;
