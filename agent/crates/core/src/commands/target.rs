//! The disk a write goes to ([`choose_device`]): the image writes, the
//! boot loader and file injection all pick it the same way.

use std::path::PathBuf;

use super::managers::hooks;
use super::{CommandError, ErrorKind};
use crate::state::AgentState;
use agent_base::config::RunMode;
use agent_devices::inventory::Disk;
use ironic_types::node::Node;

/// The disk to write, never one the node's `skip_block_devices` protect
/// ([`agent_contents::selection`]).
///
/// An operator's hardware manager with an `os_install_device` hook chooses
/// first, as IPA 13 dispatches `get_os_install_device` to a vendor's
/// manager before the generic one ([`super::managers::hooks`]): the first
/// hook that names one of the disks below wins (a disk the skip list
/// protects is refused all the same).
///
/// Else the agent's own choice. A software RAID built in this boot comes
/// first, as in IPA 13's `get_os_install_device`: the array whose logical
/// disk has `is_root_volume: true` is the target whatever the hints say (a
/// warning when there are hints); one with `is_root_volume: false` is never
/// chosen, nor its member partitions and their disks. Then, in the ramdisk,
/// the disk chosen by the node's root-device hints (fail closed when hints
/// match nothing), else the smallest disk of at least 4 GiB. In host mode
/// the same choice among the allowed devices; a single allowed device is
/// the target whatever the hints say (unless it is protected).
pub(crate) async fn choose_device(
    state: &AgentState,
    node: Option<&Node>,
) -> Result<PathBuf, CommandError> {
    let fail = |msg: String| CommandError::new(ErrorKind::Deployment, msg);
    let skip = node
        .map(agent_contents::selection::SkipList::of)
        .transpose()
        .map_err(|e| fail(e.to_string()))?
        .unwrap_or_default();
    let disks = candidates(state)?;
    if let Some(chosen) = hooks::os_install_device(state, node, &disks).await? {
        let name = chosen.disk.display().to_string();
        if let Some(r) = protected(&skip, &disks).iter().find(|r| r.name == name) {
            return Err(fail(format!(
                "hardware manager {} chose {name} as the root disk, but it is {}",
                chosen.manager, r.reason
            )));
        }
        return Ok(chosen.disk);
    }
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
    if let [one] = state.config.allowed_devices.as_slice() {
        if state.config.mode == RunMode::Host {
            return match rejected(&skip, &marks, &disks).first() {
                Some(r) => Err(fail(format!(
                    "{} is the only allowed device, and it is {}",
                    one.display(),
                    r.reason
                ))),
                None => Ok(one.clone()),
            };
        }
    }
    let rejections = rejected(&skip, &marks, &disks);
    let choice = agent_devices::hints::root_device(&disks, hints.as_ref(), &rejections)
        .map_err(|e| fail(e.to_string()))?;
    Ok(PathBuf::from(&choice.disk.name))
}

/// The disks the root disk is chosen among: in host mode the allowed
/// devices (named as allowed), in the ramdisk the inventory's disks.
fn candidates(state: &AgentState) -> Result<Vec<Disk>, CommandError> {
    let fail = |msg: String| CommandError::new(ErrorKind::Deployment, msg);
    if state.config.mode == RunMode::Host {
        let allowed = &state.config.allowed_devices;
        if allowed.is_empty() {
            return Err(fail(
                "host mode writes images only to an --allow-device; none is allowed".into(),
            ));
        }
        return Ok(allowed
            .iter()
            .zip(agent_contents::selection::gather::describe(allowed))
            .map(|(path, d)| Disk {
                name: path.display().to_string(),
                ..d
            })
            .collect());
    }
    // The BMC plays no part in choosing a disk: not probed.
    let opts = agent_devices::inventory::Options {
        skip_bmc: true,
        ..agent_devices::inventory::Options::live(None)
    };
    Ok(agent_devices::inventory::collect(&opts)
        .map_err(|e| fail(format!("reading the hardware inventory: {e:#}")))?
        .disks)
}

/// What the root-device choice must not take: the disks `skip` protects,
/// and the arrays `marks` exclude (`is_root_volume: false`) with their
/// member partitions and disks.
fn rejected(
    skip: &agent_contents::selection::SkipList,
    marks: &[agent_contents::raid::ops::RootMark],
    disks: &[Disk],
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
    disks: &[Disk],
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

#[cfg(test)]
mod tests {
    use std::path::Path;

    use agent_base::config::Config;

    use super::*;
    use crate::commands::managers::exec::tests::script;
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

    #[tokio::test]
    async fn without_raid_marks_the_smallest_disk_is_chosen() {
        let (_dir, a, _b, state) = two_disks();
        assert_eq!(choose_device(&state, None).await.unwrap(), a);
    }

    #[tokio::test]
    async fn the_raid_root_volume_wins_over_hints() {
        let (_dir, a, b, state) = two_disks();
        state.set_raid_root_marks(vec![
            mark("/dev/md1", false, &a),
            mark("/dev/md0", true, &b),
        ]);
        let node = Node::from_document(serde_json::json!({
            "properties": {"root_device": {"name": a.display().to_string()}}}))
        .unwrap();
        assert_eq!(
            choose_device(&state, Some(&node)).await.unwrap(),
            PathBuf::from("/dev/md0")
        );
        // A reboot forgets the marks, as IPA's memory does.
        state.reset_as_after_reboot();
        assert_eq!(choose_device(&state, Some(&node)).await.unwrap(), a);
    }

    #[tokio::test]
    async fn a_volume_marked_not_root_takes_its_disks_out_of_the_choice() {
        let (_dir, a, b, state) = two_disks();
        state.set_raid_root_marks(vec![mark("/dev/md0", false, &a)]);
        assert_eq!(choose_device(&state, None).await.unwrap(), b);
        // Hints naming an excluded disk find nothing: fail closed.
        let node = Node::from_document(serde_json::json!({
            "properties": {"root_device": {"name": a.display().to_string()}}}))
        .unwrap();
        let e = choose_device(&state, Some(&node)).await.unwrap_err();
        assert_eq!(e.kind, ErrorKind::Deployment);
        assert!(e.details.contains("is_root_volume false"), "{}", e.details);
    }

    #[tokio::test]
    async fn a_managers_choice_wins_unless_the_skip_list_protects_it() {
        let (dir, _a, b, state) = two_disks();
        let mdir = dir.path().join("managers");
        std::fs::create_dir(&mdir).unwrap();
        script(
            &mdir,
            "root.sh",
            &format!("echo '{{\"name\": \"{}\"}}'", b.display()),
        );
        std::fs::write(
            mdir.join("vendor.yaml"),
            "name: vendor\nversion: '1'\nos_install_device: {executable: root.sh}\n",
        )
        .unwrap();
        let state = AgentState::new(
            Config {
                exec_managers_dir: Some(mdir),
                ..state.config.clone()
            },
            None,
        );
        // The agent's own choice would be `a`, the smaller.
        assert_eq!(choose_device(&state, None).await.unwrap(), b);
        let node = Node::from_document(serde_json::json!({
            "properties": {"skip_block_devices": [{"name": b.display().to_string()}]}}))
        .unwrap();
        let e = choose_device(&state, Some(&node)).await.unwrap_err();
        assert_eq!(e.kind, ErrorKind::Deployment);
        assert!(
            e.details.starts_with(&format!(
                "hardware manager vendor chose {} as the root disk, but it is protected",
                b.display()
            )),
            "{}",
            e.details
        );
    }
}
