//! The erase steps: `erase_devices_metadata`, `erase_devices` and
//! `erase_devices_express` (PROTOCOL.md §7.2, §7.3): which devices the
//! node's properties leave to erase, and the step results. The erasing
//! itself is [`agent_devices::disk::erase`] and [`agent_devices::disk::fullerase`].
//!
//! With software RAID, as IPA 13 (`_list_erasable_devices`,
//! `erase_block_device`): the running md devices are erased like disks
//! (their partition tables and filesystems for the metadata wipe, their
//! whole contents for `erase_devices`), and every RAID member is skipped: a
//! whole disk one of whose partitions is a member, and each member
//! partition. The arrays keep running and their superblocks stay
//! (`delete_configuration` removes those); a partition of a member disk
//! that is no member (a BIOS boot partition) is wiped.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Result;
use serde_json::{Map, Value};

use super::dispatch::step_call::StepCall;
use super::managers::exec;
use super::{CommandError, ErrorKind};
use crate::state::AgentState;
use agent_devices::disk::fullerase::{self, Knobs};
use agent_devices::disk::{
    erasable_devices, erasable_disks, erase, erase_candidates, Device, WritePolicy,
};

/// The `erase_devices_metadata` step (the node's `skip_block_devices` are
/// left alone, as by `erase_devices`; a device holding a shared cluster
/// filesystem stops the step before anything is written, as IPA 13's
/// `safety_check_block_device`, unless the node or
/// `ipa-guard-special-filesystems=0` allows it).
pub(crate) async fn erase_devices_metadata_step(
    state: Arc<AgentState>,
    call: StepCall,
) -> Result<Value, CommandError> {
    let policy = WritePolicy::from_config(&state.config);
    let knobs = knobs(&state, call.node_document());
    let node = call.node_document().clone();
    tokio::task::spawn_blocking(move || {
        let devices = targets(&policy, &node, true)?;
        refuse_special(&devices, &knobs)?;
        erase::erase_devices(devices, &policy).map_err(EraseFailure::Erase)
    })
    .await
    .map_err(|e| CommandError::new(ErrorKind::CommandExecution, e.to_string()))?
    .map_err(EraseFailure::into_command_error)?;
    Ok(Value::Null)
}

/// Why an erase step stopped.
#[derive(Debug, thiserror::Error)]
enum EraseFailure {
    /// Listing or erasing failed.
    #[error(transparent)]
    Erase(#[from] anyhow::Error),
    /// A device holds a shared cluster filesystem.
    #[error("{device}: {what}; to erase it, {}", fullerase::guard::HOW_TO_ALLOW)]
    Protected {
        /// The device.
        device: String,
        /// What was found.
        what: String,
    },
}

impl EraseFailure {
    fn into_command_error(self) -> CommandError {
        match self {
            Self::Erase(e) => CommandError::from_anyhow(ErrorKind::BlockDeviceErase, &e),
            p @ Self::Protected { .. } => {
                CommandError::new(ErrorKind::ProtectedDevice, p.to_string())
            }
        }
    }
}

/// Stops before anything is written when one of `devices` holds a shared
/// cluster filesystem and the knobs do not allow wiping it.
fn refuse_special(devices: &[Device], knobs: &Knobs) -> Result<(), EraseFailure> {
    if knobs.wipe_special {
        return Ok(());
    }
    let paths: Vec<PathBuf> = devices.iter().map(|d| d.path.clone()).collect();
    match fullerase::guard::first_special(&paths) {
        Some((device, what)) => Err(EraseFailure::Protected {
            device: device.display().to_string(),
            what,
        }),
        None => Ok(()),
    }
}

/// The `erase_devices` step: each disk is offered first to the erase hooks
/// of the executable hardware managers (highest support first,
/// [`super::managers::exec::erase_claimed`]); the ones every hook declines
/// get the generic erase. The result names the method per disk. A disk
/// holding a shared cluster filesystem is never offered to a hook unless
/// the node allows wiping it: the generic erase refuses it as before.
pub(crate) async fn erase_devices_step(
    state: Arc<AgentState>,
    call: StepCall,
) -> Result<Value, CommandError> {
    let knobs = knobs(&state, call.node_document());
    let policy = WritePolicy::from_config(&state.config);
    // Raised when the operation ends under the step (Ironic aborted the
    // clean and powered the node off, or wiped the token).
    let cancel = state.abort_flag();
    let node = call.node_document().clone();
    let hooks = exec::erase_hooks(&state.config)
        .map_err(|e| CommandError::new(ErrorKind::BlockDeviceErase, e.to_string()))?;
    let (disks, guarded) = {
        let (policy, node, wipe_special) = (policy.clone(), node.clone(), knobs.wipe_special);
        tokio::task::spawn_blocking(move || -> Result<_> {
            let disks = paths(targets(&policy, &node, false)?);
            let (guarded, open): (Vec<PathBuf>, Vec<PathBuf>) = disks.into_iter().partition(|d| {
                !wipe_special && fullerase::guard::first_special(std::slice::from_ref(d)).is_some()
            });
            Ok((open, guarded))
        })
        .await
        .map_err(|e| CommandError::new(ErrorKind::BlockDeviceErase, e.to_string()))?
        .map_err(|e| CommandError::from_anyhow(ErrorKind::BlockDeviceErase, &e))?
    };
    let (claimed, mut rest) = exec::erase_claimed(&hooks, disks, &node, &state).await?;
    rest.extend(guarded);
    let results = tokio::task::spawn_blocking(move || {
        fullerase::erase_disks(&rest, &policy, &knobs, &cancel)
    })
    .await
    .map_err(|e| CommandError::new(ErrorKind::BlockDeviceErase, e.to_string()))?
    .map_err(|e| CommandError::from_anyhow(ErrorKind::BlockDeviceErase, &e))?;
    let mut out = Map::new();
    for c in claimed {
        out.insert(
            c.disk.display().to_string(),
            Value::String(format!(
                "erase_block_device of executable hardware manager {}",
                c.manager
            )),
        );
    }
    for (dev, erased) in results {
        out.insert(dev.display().to_string(), Value::String(erased.describe()));
    }
    Ok(Value::Object(out))
}

/// The `erase_devices_express` step: NVMe disks get a secure format when
/// enabled and supported; then every device gets the metadata wipe (for
/// the others it is the whole erase, as in IPA's fallback).
pub(crate) async fn erase_devices_express_step(
    state: Arc<AgentState>,
    call: StepCall,
) -> Result<Value, CommandError> {
    let knobs = knobs(&state, call.node_document());
    let policy = WritePolicy::from_config(&state.config);
    let node = call.node_document().clone();
    tokio::task::spawn_blocking(move || {
        let devices = targets(&policy, &node, false)?;
        refuse_special(&devices, &knobs)?;
        fullerase::express_erase(&paths(devices), &policy, &knobs).map_err(EraseFailure::Erase)
    })
    .await
    .map_err(|e| CommandError::new(ErrorKind::BlockDeviceErase, e.to_string()))?
    .map_err(EraseFailure::into_command_error)?;
    erase_devices_metadata_step(state, call).await
}

/// The node's erase settings, with the agent's defaults
/// (`ipa-enable-discard-erase`, `ipa-guard-special-filesystems`).
fn knobs(state: &AgentState, node: &Value) -> Knobs {
    let mut k = Knobs::from_node(node, state.config.enable_discard_erase);
    k.wipe_special |= !state.config.guard_special_filesystems;
    k
}

/// Devices the erase steps erase (see the module docs): the allowed
/// devices in host mode, every disk and running md device in the ramdisk,
/// with their partitions when `partitions`; minus the disks the node's
/// `properties.skip_block_devices` protect and minus RAID members. Sorted
/// by name descending, partitions before their disk (as IPA).
fn targets(policy: &WritePolicy, node: &Value, partitions: bool) -> Result<Vec<Device>> {
    let listed = agent_contents::selection::unprotected(node, erasable_devices(policy)?)?;
    let mut devices = if partitions {
        erase_candidates(&listed)?
    } else {
        listed
            .iter()
            .map(|d| Device::open(d).map_err(anyhow::Error::from))
            .collect::<Result<_>>()?
    };
    devices.retain(|d| match agent_contents::raid::member::member_reason(d) {
        Some(why) => {
            tracing::info!(device = %d.path.display(), "erasure skipped: a software RAID member ({why})");
            false
        }
        None => true,
    });
    devices.sort_by(|a, b| b.path.cmp(&a.path));
    Ok(devices)
}

fn paths(devices: Vec<Device>) -> Vec<PathBuf> {
    devices.into_iter().map(|d| d.path).collect()
}

/// Whole disks to erase or burn in: the allowed devices in host mode,
/// every disk in the ramdisk; minus the disks the node's
/// `properties.skip_block_devices` protect.
pub(super) fn disks(policy: &WritePolicy, node: &Value) -> Result<Vec<PathBuf>> {
    Ok(agent_contents::selection::unprotected(
        node,
        erasable_disks(policy)?,
    )?)
}

#[cfg(test)]
mod tests {
    //! Which disks the node leaves to erase, and the express step on a
    //! regular file standing in for a disk.

    use std::fs::File;
    use std::sync::atomic::Ordering;

    use super::*;
    use agent_base::config::Config;

    fn policy(allowed: &[PathBuf]) -> WritePolicy {
        WritePolicy::from_config(&Config {
            allowed_devices: allowed.to_vec(),
            ..Config::default()
        })
    }

    #[tokio::test]
    async fn express_erase_wipes_metadata_of_non_nvme_disks() {
        let dir = tempfile::tempdir().unwrap();
        let img = dir.path().join("disk.img");
        agent_testkit::write_demo_image(&img).unwrap();
        let state = Arc::new(AgentState::new(
            Config {
                allowed_devices: vec![img.clone()],
                ..Config::default()
            },
            None,
        ));
        let call = StepCall::with_node(serde_json::json!({}));
        erase_devices_express_step(state, call).await.unwrap();
        let left =
            agent_devices::disk::erase::probe_signatures(&File::open(&img).unwrap()).unwrap();
        assert!(left.is_empty(), "{left:?}");
    }

    #[test]
    fn skip_block_devices_are_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        let p = policy(&[a.clone(), b.clone()]);
        let node = serde_json::json!({"properties": {"skip_block_devices": [{"name": a.display().to_string()}]}});
        assert_eq!(disks(&p, &node).unwrap(), [b]);
    }

    #[test]
    fn skip_block_devices_are_hints() {
        let dir = tempfile::tempdir().unwrap();
        let (small, big) = (dir.path().join("small"), dir.path().join("big"));
        std::fs::File::create(&small)
            .unwrap()
            .set_len(5 << 30)
            .unwrap();
        std::fs::File::create(&big)
            .unwrap()
            .set_len(6 << 30)
            .unwrap();
        let p = policy(&[small.clone(), big.clone()]);
        let node = serde_json::json!({"properties": {"skip_block_devices": [{"size": 5}]}});
        assert_eq!(disks(&p, &node).unwrap(), std::slice::from_ref(&big));
        let node = serde_json::json!({"properties": {"skip_block_devices": [{"size": "> 5"}]}});
        assert_eq!(disks(&p, &node).unwrap(), [small]);
        // A protection that cannot be read stops the step.
        let node = serde_json::json!({"properties": {"skip_block_devices": [{"size": "five"}]}});
        let e = format!("{:#}", disks(&p, &node).unwrap_err());
        assert!(e.contains("skip_block_devices[0]"), "{e}");
    }

    #[test]
    fn a_reboot_or_wiped_token_aborts_a_running_erase() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("d");
        std::fs::write(&d, vec![0x5a; 1 << 20]).unwrap();
        let state = AgentState::new(Config::default(), None);
        let flag = state.abort_flag();
        state.reset_as_after_reboot();
        assert!(flag.load(Ordering::Relaxed));
        assert!(
            !state.abort_flag().load(Ordering::Relaxed),
            "the next operation starts clean"
        );
        let e = fullerase::erase_disks(
            std::slice::from_ref(&d),
            &policy(std::slice::from_ref(&d)),
            &Knobs::default(),
            &flag,
        )
        .unwrap_err();
        assert!(format!("{e:#}").contains("aborted"), "{e:#}");
    }

    #[tokio::test]
    async fn the_metadata_wipe_leaves_skip_block_devices_alone() {
        let dir = tempfile::tempdir().unwrap();
        let (keep, wipe) = (dir.path().join("keep.img"), dir.path().join("wipe.img"));
        agent_testkit::write_demo_image(&keep).unwrap();
        agent_testkit::write_demo_image(&wipe).unwrap();
        let state = Arc::new(AgentState::new(
            Config {
                allowed_devices: vec![keep.clone(), wipe.clone()],
                ..Config::default()
            },
            None,
        ));
        let call = StepCall::with_node(
            serde_json::json!({"properties": {"skip_block_devices": [{"name": keep.display().to_string()}]}}),
        );
        erase_devices_metadata_step(state, call).await.unwrap();
        let sigs = |p: &PathBuf| {
            agent_devices::disk::erase::probe_signatures(&File::open(p).unwrap()).unwrap()
        };
        assert!(sigs(&wipe).is_empty(), "{:?}", sigs(&wipe));
        assert!(!sigs(&keep).is_empty(), "the skipped disk was wiped");
    }

    #[tokio::test]
    async fn a_vmfs_disk_stops_the_metadata_wipe_before_anything_is_written() {
        let dir = tempfile::tempdir().unwrap();
        let plain = dir.path().join("plain.img");
        agent_testkit::write_demo_image(&plain).unwrap();
        let vmfs = agent_testkit::sparse_disk(
            dir.path(),
            32,
            "label: gpt\ntype=AA31E02A-400F-11DB-9590-000C2911D1B8\n",
        );
        let before = (
            std::fs::read(&plain).unwrap(),
            std::fs::read(&vmfs).unwrap(),
        );
        let config = |guard: bool| Config {
            allowed_devices: vec![plain.clone(), vmfs.clone()],
            guard_special_filesystems: guard,
            ..Config::default()
        };
        let call = StepCall::with_node(serde_json::json!({}));
        for step in ["metadata", "express"] {
            let state = Arc::new(AgentState::new(config(true), None));
            let e = match step {
                "metadata" => erase_devices_metadata_step(state, call.clone()).await,
                _ => erase_devices_express_step(state, call.clone()).await,
            }
            .unwrap_err();
            assert_eq!(e.kind, ErrorKind::ProtectedDevice, "{step}: {e:?}");
            assert!(e.details.contains("VMware VMFS"), "{step}: {}", e.details);
            assert!(
                (
                    std::fs::read(&plain).unwrap(),
                    std::fs::read(&vmfs).unwrap()
                ) == before,
                "{step}: a device was written before the refusal"
            );
        }
        // ipa-guard-special-filesystems=0: wiped like any disk.
        let state = Arc::new(AgentState::new(config(false), None));
        erase_devices_metadata_step(state, call).await.unwrap();
        let sigs = |p: &PathBuf| {
            agent_devices::disk::erase::probe_signatures(&File::open(p).unwrap()).unwrap()
        };
        assert!(sigs(&vmfs).is_empty() && sigs(&plain).is_empty());
    }

    #[tokio::test]
    async fn raid_members_are_skipped_as_ipa_does() {
        use agent_contents::raid::superblock::{self, ArrayInfo, MemberInfo};
        let dir = tempfile::tempdir().unwrap();
        let (member, plain) = (dir.path().join("member.img"), dir.path().join("plain.img"));
        agent_testkit::write_demo_image(&member).unwrap();
        agent_testkit::write_demo_image(&plain).unwrap();
        // A v1.2 superblock 4 KiB into the member (inside the demo image's
        // first MiB, before its partition).
        let bytes = std::fs::metadata(&member).unwrap().len();
        let sb = superblock::encode(
            &ArrayInfo {
                uuid: [0x11; 16],
                name: "root".into(),
                ctime: 1_700_000_000,
                level: 1,
                layout: 0,
                chunk_sectors: 0,
                raid_disks: 2,
                size: bytes / 512 - 2048,
                resync_offset: 0,
            },
            &MemberInfo {
                role: 0,
                uuid: [0x22; 16],
                data_offset: 2048,
                data_size: bytes / 512 - 2048,
                super_offset: 8,
            },
        );
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(&member)
            .unwrap();
        std::os::unix::fs::FileExt::write_all_at(&f, &sb, 4096).unwrap();
        drop(f);
        let before = std::fs::read(&member).unwrap();
        let state = Arc::new(AgentState::new(
            Config {
                allowed_devices: vec![member.clone(), plain.clone()],
                ..Config::default()
            },
            None,
        ));
        let call = StepCall::with_node(serde_json::json!({}));
        erase_devices_metadata_step(state.clone(), call.clone())
            .await
            .unwrap();
        assert!(
            std::fs::read(&member).unwrap() == before,
            "the RAID member was touched"
        );
        let left =
            agent_devices::disk::erase::probe_signatures(&File::open(&plain).unwrap()).unwrap();
        assert!(left.is_empty(), "{left:?}");
        // erase_devices skips it too (and erases the other).
        let out = erase_devices_step(state, call).await.unwrap();
        assert!(
            out.get(member.display().to_string().as_str()).is_none(),
            "{out}"
        );
        assert!(
            out.get(plain.display().to_string().as_str()).is_some(),
            "{out}"
        );
        assert!(std::fs::read(&member).unwrap() == before);
    }
}
