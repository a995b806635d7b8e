//! The disk a write goes to ([`choose_device`]): the image writes, the
//! boot loader and file injection all pick it the same way; and the
//! machine's disks as steps see them ([`machine_disks`]).

use std::path::{Path, PathBuf};

use super::{CommandError, ErrorKind};
use crate::config::{Config, RunMode};
use crate::disk::WritePolicy;
use crate::node::Node;
use crate::state::AgentState;

/// The disk to write, never one the node's `skip_block_devices` protect
/// ([`crate::selection`]): in the ramdisk the disk chosen by the node's
/// root-device hints (fail closed when hints match nothing), else the
/// smallest disk of at least 4 GiB. In host mode the same choice among
/// the allowed devices; a single allowed device is the target whatever the
/// hints say (unless it is protected).
pub fn choose_device(state: &AgentState, node: Option<&Node>) -> Result<PathBuf, CommandError> {
    let fail = |msg: String| CommandError::new(ErrorKind::Deployment, msg);
    let hints = node
        .and_then(Node::root_device_hints)
        .map(|h| serde_json::Value::Object(h.clone()));
    let node = node.map(Node::document);
    let skip = node
        .map(crate::selection::SkipList::from_node)
        .transpose()
        .map_err(|e| fail(e.to_string()))?
        .unwrap_or_default();
    let disks: Vec<crate::inventory::Disk> = if state.config.mode == RunMode::Host {
        let allowed = &state.config.allowed_devices;
        if allowed.is_empty() {
            return Err(fail(
                "host mode writes images only to an --allow-device; none is allowed".into(),
            ));
        }
        // Named as allowed, so the choice is one of the given paths.
        let disks: Vec<crate::inventory::Disk> = allowed
            .iter()
            .zip(crate::selection::gather::describe(allowed))
            .map(|(path, d)| crate::inventory::Disk {
                name: path.display().to_string(),
                ..d
            })
            .collect();
        if let [one] = allowed.as_slice() {
            return match protected(&skip, &disks).first() {
                Some(r) => Err(fail(format!(
                    "{} is the only allowed device, and it is {}",
                    one.display(),
                    r.reason
                ))),
                None => Ok(one.clone()),
            };
        }
        disks
    } else {
        // The BMC plays no part in choosing a disk: not probed.
        let opts = crate::inventory::Options {
            skip_bmc: true,
            ..crate::inventory::Options::live(None)
        };
        crate::inventory::collect(&opts)
            .map_err(|e| fail(format!("reading the hardware inventory: {e:#}")))?
            .disks
    };
    let choice = crate::hints::root_device(&disks, hints.as_ref(), &protected(&skip, &disks))
        .map_err(|e| fail(e.to_string()))?;
    Ok(PathBuf::from(&choice.disk.name))
}

/// The disks `skip` protects among `disks`, as rejections of the root-device
/// choice.
fn protected(
    skip: &crate::selection::SkipList,
    disks: &[crate::inventory::Disk],
) -> Vec<crate::hints::Rejection> {
    if skip.is_empty() {
        return Vec::new();
    }
    let candidates = crate::selection::candidates_named(disks);
    crate::selection::Protection::decide(skip, &candidates)
        .protected()
        .iter()
        .map(|(p, why)| crate::hints::Rejection {
            name: p.display().to_string(),
            reason: format!("protected: {why}"),
        })
        .collect()
}

/// The machine's whole disks as the inventory describes them; in host mode
/// the allowed devices (loop devices, say) are listed too, and only they
/// are kept.
pub fn machine_disks(config: &Config) -> anyhow::Result<Vec<crate::inventory::Disk>> {
    let extra = crate::disk::allowed_kernel_names(config);
    let mut disks = crate::inventory::disks::read(Path::new("/"), &extra)?;
    if config.mode == RunMode::Host {
        let allowed = WritePolicy::from_config(config).allowed().to_vec();
        disks.retain(|d| allowed.iter().any(|a| a.as_os_str() == d.name.as_str()));
    }
    Ok(disks)
}
