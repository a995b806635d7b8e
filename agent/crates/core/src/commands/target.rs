//! The disk a write goes to ([`choose_device`]): the image writes, the
//! boot loader and file injection all pick it the same way; and the
//! machine's disks as steps see them ([`machine_disks`]).

use std::path::{Path, PathBuf};

use super::{CommandError, ErrorKind};
use crate::state::AgentState;
use agent_base::config::{Config, RunMode};
use agent_devices::disk::WritePolicy;
use ironic_types::node::Node;

/// The disk to write, never one the node's `skip_block_devices` protect
/// ([`agent_contents::selection`]): in the ramdisk the disk chosen by the node's
/// root-device hints (fail closed when hints match nothing), else the
/// smallest disk of at least 4 GiB. In host mode the same choice among
/// the allowed devices; a single allowed device is the target whatever the
/// hints say (unless it is protected).
///
/// A software RAID built in this boot comes first, as in IPA 13's
/// `get_os_install_device`: the array whose logical disk has
/// `is_root_volume: true` is the target whatever the hints say (a warning
/// when there are hints); one with `is_root_volume: false` is never
/// chosen, nor its member partitions and their disks.
pub(crate) fn choose_device(
    state: &AgentState,
    node: Option<&Node>,
) -> Result<PathBuf, CommandError> {
    let fail = |msg: String| CommandError::new(ErrorKind::Deployment, msg);
    let hints = node
        .and_then(Node::root_device_hints)
        .map(|h| serde_json::Value::Object(h.clone()));
    let marks = state.raid_root_marks();
    if let Some(root) = marks.iter().find(|m| m.root) {
        if let Some(h) = &hints {
            tracing::warn!(hints = %h, device = %root.device.display(),
                "both root device hints and a root volume of the target RAID configuration are given: the RAID root volume is used");
        }
        tracing::info!(device = %root.device.display(), "using the root volume of the target RAID configuration (is_root_volume)");
        return Ok(root.device.clone());
    }
    let node = node.map(Node::document);
    let skip = node
        .map(agent_contents::selection::SkipList::from_node)
        .transpose()
        .map_err(|e| fail(e.to_string()))?
        .unwrap_or_default();
    let disks: Vec<agent_devices::inventory::Disk> = if state.config.mode == RunMode::Host {
        let allowed = &state.config.allowed_devices;
        if allowed.is_empty() {
            return Err(fail(
                "host mode writes images only to an --allow-device; none is allowed".into(),
            ));
        }
        // Named as allowed, so the choice is one of the given paths.
        let disks: Vec<agent_devices::inventory::Disk> = allowed
            .iter()
            .zip(agent_contents::selection::gather::describe(allowed))
            .map(|(path, d)| agent_devices::inventory::Disk {
                name: path.display().to_string(),
                ..d
            })
            .collect();
        if let [one] = allowed.as_slice() {
            return match rejected(&skip, &marks, &disks).first() {
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
        let opts = agent_devices::inventory::Options {
            skip_bmc: true,
            ..agent_devices::inventory::Options::live(None)
        };
        agent_devices::inventory::collect(&opts)
            .map_err(|e| fail(format!("reading the hardware inventory: {e:#}")))?
            .disks
    };
    let rejections = rejected(&skip, &marks, &disks);
    let choice = agent_devices::hints::root_device(&disks, hints.as_ref(), &rejections)
        .map_err(|e| fail(e.to_string()))?;
    Ok(PathBuf::from(&choice.disk.name))
}

/// What the root-device choice must not take: the disks `skip` protects,
/// and the arrays `marks` exclude (`is_root_volume: false`) with their
/// member partitions and disks.
fn rejected(
    skip: &agent_contents::selection::SkipList,
    marks: &[agent_contents::raid::ops::RootMark],
    disks: &[agent_devices::inventory::Disk],
) -> Vec<agent_devices::hints::Rejection> {
    let mut out = protected(skip, disks);
    for m in marks.iter().filter(|m| !m.root) {
        let why = format!(
            "excluded: {} has is_root_volume false in the target RAID configuration",
            m.device.display()
        );
        for path in std::iter::once(&m.device).chain(&m.members).chain(&m.disks) {
            out.push(agent_devices::hints::Rejection {
                name: path.display().to_string(),
                reason: why.clone(),
            });
        }
    }
    out
}

/// The disks `skip` protects among `disks`, as rejections of the root-device
/// choice.
fn protected(
    skip: &agent_contents::selection::SkipList,
    disks: &[agent_devices::inventory::Disk],
) -> Vec<agent_devices::hints::Rejection> {
    if skip.is_empty() {
        return Vec::new();
    }
    let candidates = agent_contents::selection::candidates_named(disks);
    agent_contents::selection::Protection::decide(skip, &candidates)
        .protected()
        .iter()
        .map(|(p, why)| agent_devices::hints::Rejection {
            name: p.display().to_string(),
            reason: format!("protected: {why}"),
        })
        .collect()
}

/// The machine's whole disks as the inventory describes them; in host mode
/// the allowed devices (loop devices, say) are listed too, and only they
/// are kept.
pub(crate) fn machine_disks(
    config: &Config,
) -> anyhow::Result<Vec<agent_devices::inventory::Disk>> {
    let extra = agent_devices::disk::allowed_kernel_names(config);
    let mut disks = agent_devices::inventory::disks::read(Path::new("/"), &extra)?;
    if config.mode == RunMode::Host {
        let allowed = WritePolicy::from_config(config).allowed().to_vec();
        disks.retain(|d| allowed.iter().any(|a| a.as_os_str() == d.name.as_str()));
    }
    Ok(disks)
}

#[cfg(test)]
mod tests {
    use super::*;
    use agent_contents::raid::ops::RootMark;

    /// A host-mode state allowing two sparse 5 GiB files, `a` smaller by
    /// a MiB (so the default choice, the smallest, is `a`).
    fn two_disks() -> (tempfile::TempDir, PathBuf, PathBuf, AgentState) {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        std::fs::File::create(&a)
            .unwrap()
            .set_len((5 << 30) - (1 << 20))
            .unwrap();
        std::fs::File::create(&b).unwrap().set_len(5 << 30).unwrap();
        let config = Config {
            mode: RunMode::Host,
            allowed_devices: vec![a.clone(), b.clone()],
            ..Config::default()
        };
        (dir, a, b, AgentState::new(config, None))
    }

    fn mark(device: &str, root: bool, disk: &Path) -> RootMark {
        RootMark {
            device: PathBuf::from(device),
            root,
            members: vec![PathBuf::from(format!("{}p1", disk.display()))],
            disks: vec![disk.to_path_buf()],
        }
    }

    #[test]
    fn without_raid_marks_the_smallest_disk_is_chosen() {
        let (_dir, a, _b, state) = two_disks();
        assert_eq!(choose_device(&state, None).unwrap(), a);
    }

    #[test]
    fn the_raid_root_volume_wins_over_hints() {
        let (_dir, a, b, state) = two_disks();
        state.set_raid_root_marks(vec![
            mark("/dev/md1", false, &a),
            mark("/dev/md0", true, &b),
        ]);
        let node = Node::from_document(serde_json::json!({
            "properties": {"root_device": {"name": a.display().to_string()}}}))
        .unwrap();
        assert_eq!(
            choose_device(&state, Some(&node)).unwrap(),
            PathBuf::from("/dev/md0")
        );
        // A reboot forgets the marks, as IPA's memory does.
        state.reset_as_after_reboot();
        assert_eq!(choose_device(&state, Some(&node)).unwrap(), a);
    }

    #[test]
    fn a_volume_marked_not_root_takes_its_disks_out_of_the_choice() {
        let (_dir, a, b, state) = two_disks();
        state.set_raid_root_marks(vec![mark("/dev/md0", false, &a)]);
        assert_eq!(choose_device(&state, None).unwrap(), b);
        // Hints naming an excluded disk find nothing: fail closed.
        let node = Node::from_document(serde_json::json!({
            "properties": {"root_device": {"name": a.display().to_string()}}}))
        .unwrap();
        let e = choose_device(&state, Some(&node)).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Deployment);
        assert!(e.details.contains("is_root_volume false"), "{}", e.details);
    }
}
