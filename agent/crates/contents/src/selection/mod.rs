//! Which disks a step may choose or touch: the node's
//! `properties.skip_block_devices` read as IPA 13 reads it
//! (`get_skip_list_from_node_for_disks`, `..._for_raids`,
//! `list_block_devices_check_skip_list`), applied by every step that
//! chooses or touches disks — the erase steps, `burnin_disk`, the root-disk
//! choice of `write_image` (whole-disk and partition), `install_bootloader`,
//! `inject_files` and `install_coreos`, and the software RAID steps.
//!
//! Each entry of `skip_block_devices` is a set of root-device hints (every
//! hint and operator of [`agent_devices::hints`], every serial and WWN a disk
//! reports) or `{"volume_name": NAME}` for a software RAID volume. A disk
//! is protected when:
//! - it satisfies every hint of an entry;
//! - one of its partitions does, for an entry that names a device
//!   (`name`): the disk is protected whole (IPA would leave the partition's
//!   signatures and still remove the disk's table, so nothing would be
//!   kept);
//! - it holds a member of an md array whose volume name is listed, running
//!   or not (IPA keeps such an array through `delete_configuration` and the
//!   erase steps; here its member disks are left whole, arrays beside it on
//!   the same disks included, where IPA wipes those).
//!
//! A protected disk is never erased, burnt in, chosen as the root device or
//! touched by RAID, and its partitions go with it. Each decision is logged
//! once per disk with its reason. An entry that does not parse is an error
//! naming the entry: a protection that does nothing is never silent.

pub mod gather;

use std::path::{Path, PathBuf};

use serde_json::Value;

use agent_devices::hints::{matching, parse};
use agent_devices::inventory::Disk;
use ironic_types::node::Node;

/// One disk as the selection sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    /// The path the step lists the disk by (`/dev/sda`, an allowed file).
    pub path: PathBuf,
    /// The disk (a running md array is one too).
    pub disk: Disk,
    /// Its partitions: `/dev` name and size in bytes.
    pub partitions: Vec<(String, u64)>,
    /// Names of the md arrays it or its partitions are members of (from
    /// the md superblocks, `host:` prefix removed).
    pub raid_volumes: Vec<String>,
}

/// One hint entry of `skip_block_devices`.
#[derive(Debug, Clone, PartialEq)]
struct Entry {
    index: usize,
    shown: String,
    hints: Vec<parse::Hint>,
    names_a_device: bool,
}

/// The node's `properties.skip_block_devices`, parsed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SkipList {
    entries: Vec<Entry>,
    volume_names: Vec<(usize, String)>,
}

/// Why `skip_block_devices` cannot be used.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SkipError {
    /// Not a list.
    #[error("properties.skip_block_devices must be a list of objects, not {0}")]
    NotAList(String),
    /// An entry that is not an object, or an empty one.
    #[error("properties.skip_block_devices[{index}] must be an object of root device hints or {{\"volume_name\": NAME}}, not {given}")]
    BadEntry {
        /// Position in the list.
        index: usize,
        /// The entry as given.
        given: String,
    },
    /// An entry whose hints do not parse.
    #[error("properties.skip_block_devices[{index}] {given}: {reason}")]
    Hints {
        /// Position in the list.
        index: usize,
        /// The entry as given.
        given: String,
        /// Why.
        reason: parse::ParseError,
    },
}

impl SkipList {
    /// Reads the node's `properties.skip_block_devices` (absent or `null`:
    /// empty): the commands' edge parses it as a request arrives, the steps
    /// take the list.
    pub fn of(node: &Node) -> Result<Self, SkipError> {
        let list = match node.document().pointer("/properties/skip_block_devices") {
            None | Some(Value::Null) => return Ok(Self::default()),
            Some(Value::Array(a)) => a,
            Some(other) => return Err(SkipError::NotAList(other.to_string())),
        };
        let mut out = Self::default();
        for (index, entry) in list.iter().enumerate() {
            let bad = || SkipError::BadEntry {
                index,
                given: entry.to_string(),
            };
            let map = entry
                .as_object()
                .filter(|m| !m.is_empty())
                .ok_or_else(bad)?;
            if let Some(v) = map.get("volume_name") {
                // IPA reads only the volume name of such an entry.
                let name = v.as_str().filter(|s| !s.is_empty()).ok_or_else(bad)?;
                out.volume_names.push((index, name.to_string()));
                continue;
            }
            let hints = parse::parse(entry).map_err(|reason| SkipError::Hints {
                index,
                given: entry.to_string(),
                reason,
            })?;
            out.entries.push(Entry {
                index,
                shown: entry.to_string(),
                names_a_device: map.contains_key("name"),
                hints,
            });
        }
        Ok(out)
    }

    /// Nothing is protected.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty() && self.volume_names.is_empty()
    }

    /// The RAID volume names kept (`{"volume_name": …}` entries).
    pub fn volume_names(&self) -> impl Iterator<Item = &str> {
        self.volume_names.iter().map(|(_, n)| n.as_str())
    }

    /// Why `c` is protected, or `None`.
    pub fn reason(&self, c: &Candidate) -> Option<String> {
        let satisfies = |d: &Disk, e: &Entry| e.hints.iter().all(|h| matching::check(d, h).is_ok());
        for e in &self.entries {
            if satisfies(&c.disk, e) {
                return Some(format!(
                    "matches properties.skip_block_devices[{}] {}",
                    e.index, e.shown
                ));
            }
            if !e.names_a_device {
                continue;
            }
            for (name, size) in &c.partitions {
                let part = Disk {
                    name: name.clone(),
                    size: *size,
                    by_path: None,
                    ..c.disk.clone()
                };
                if satisfies(&part, e) {
                    return Some(format!(
                        "its partition {name} matches properties.skip_block_devices[{}] {}",
                        e.index, e.shown
                    ));
                }
            }
        }
        self.volume_names.iter().find_map(|(index, name)| {
            c.raid_volumes.contains(name).then(|| {
                format!(
                    "holds software RAID volume {name:?}, kept by properties.skip_block_devices[{index}]"
                )
            })
        })
    }
}

/// The protected disks among a set of candidates, each with its reason.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Protection {
    protected: Vec<(PathBuf, String)>,
}

impl Protection {
    /// Decides for each candidate and logs each protected disk once.
    pub fn decide(skip: &SkipList, candidates: &[Candidate]) -> Self {
        let mut protected = Vec::new();
        for c in candidates {
            if let Some(why) = skip.reason(c) {
                tracing::info!(disk = %c.disk.name, reason = %why, "protected: left untouched");
                protected.push((c.path.clone(), why));
            }
        }
        Self { protected }
    }

    /// Why `path` (a disk, or a partition of one given as `disk`) is
    /// protected.
    pub fn reason(&self, path: &Path) -> Option<&str> {
        self.protected
            .iter()
            .find(|(p, _)| p == path)
            .map(|(_, why)| why.as_str())
    }

    /// Every protected disk with its reason.
    pub fn protected(&self) -> &[(PathBuf, String)] {
        &self.protected
    }

    /// `paths` less the protected ones.
    pub fn retain(&self, paths: Vec<PathBuf>) -> Vec<PathBuf> {
        paths
            .into_iter()
            .filter(|p| self.reason(p).is_none())
            .collect()
    }
}

/// `paths` (whole disks or md arrays of the running machine) less the ones
/// the node's `skip_block_devices` (`skip`) protect, each protected one
/// logged.
pub fn unprotected(skip: &SkipList, paths: Vec<PathBuf>) -> Vec<PathBuf> {
    if skip.is_empty() {
        return paths;
    }
    Protection::decide(skip, &gather::candidates(&paths)).retain(paths)
}

/// `disks` (described by the inventory, each listed by its name) less the
/// ones the node's `skip_block_devices` (`skip`) protect, each protected
/// one logged.
pub fn unprotected_disks(skip: &SkipList, disks: Vec<Disk>) -> Vec<Disk> {
    if skip.is_empty() {
        return disks;
    }
    let protection = Protection::decide(skip, &candidates_named(&disks));
    disks
        .into_iter()
        .filter(|d| protection.reason(Path::new(&d.name)).is_none())
        .collect()
}

/// The candidates of `disks`, each listed by its name.
pub fn candidates_named(disks: &[Disk]) -> Vec<Candidate> {
    gather::candidates_of(
        disks
            .iter()
            .map(|d| (PathBuf::from(&d.name), d.clone()))
            .collect(),
    )
}

#[cfg(test)]
mod tests;
