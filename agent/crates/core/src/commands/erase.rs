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
use super::managers::hooks as manager_hooks;
use super::{CommandError, ErrorKind};
use crate::state::AgentState;
use agent_contents::selection::SkipList;
use agent_devices::disk::fullerase::{self, Knobs};
use agent_devices::disk::{
    erasable_devices, erasable_disks, erase, erase_candidates, Device, WritePolicy,
};
use ironic_types::node::Node;

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
    let knobs = knobs(&state, call.node_or_empty());
    let skip = skip_list(&call)?;
    tokio::task::spawn_blocking(move || {
        let devices = targets(&policy, &skip, true)?;
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
/// [`super::managers::hooks::erase_claimed`]); the ones every hook declines
/// get the generic erase. The result names the method per disk. A disk
/// holding a shared cluster filesystem is never offered to a hook unless
/// the node allows wiping it: the generic erase refuses it as before.
pub(crate) async fn erase_devices_step(
    state: Arc<AgentState>,
    call: StepCall,
) -> Result<Value, CommandError> {
    let knobs = knobs(&state, call.node_or_empty());
    let policy = WritePolicy::from_config(&state.config);
    // Raised when the operation ends under the step (Ironic aborted the
    // clean and powered the node off, or wiped the token).
    let cancel = state.abort_flag();
    let skip = skip_list(&call)?;
    let hooks = manager_hooks::erase_hooks(&state.config)
        .map_err(|e| CommandError::new(ErrorKind::BlockDeviceErase, e.to_string()))?;
    let (disks, guarded) = {
        let (policy, wipe_special) = (policy.clone(), knobs.wipe_special);
        tokio::task::spawn_blocking(move || -> Result<_> {
            let disks = paths(targets(&policy, &skip, false)?);
            let (guarded, open): (Vec<PathBuf>, Vec<PathBuf>) = disks.into_iter().partition(|d| {
                !wipe_special && fullerase::guard::first_special(std::slice::from_ref(d)).is_some()
            });
            Ok((open, guarded))
        })
        .await
        .map_err(|e| CommandError::new(ErrorKind::BlockDeviceErase, e.to_string()))?
        .map_err(|e| CommandError::from_anyhow(ErrorKind::BlockDeviceErase, &e))?
    };
    // The node's document goes to the hooks' executables unread.
    let (claimed, mut rest) =
        manager_hooks::erase_claimed(&hooks, disks, call.node_document(), &state).await?;
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
    let knobs = knobs(&state, call.node_or_empty());
    let policy = WritePolicy::from_config(&state.config);
    let skip = skip_list(&call)?;
    tokio::task::spawn_blocking(move || {
        let devices = targets(&policy, &skip, false)?;
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
fn knobs(state: &AgentState, node: &Node) -> Knobs {
    Knobs {
        wipe_special: wipe_special(state, node),
        ..Knobs::from_info(
            node.driver_internal_info(),
            state.config.enable_discard_erase,
        )
    }
}

/// Whether disks holding shared cluster filesystems may be written: the
/// node allows it, or the agent was booted with
/// `ipa-guard-special-filesystems=0` (the erase and disk burn-in steps).
pub(super) fn wipe_special(state: &AgentState, node: &Node) -> bool {
    fullerase::guard::wipe_special_allowed(node.driver_internal_info())
        || !state.config.guard_special_filesystems
}

/// Devices the erase steps erase (see the module docs): the allowed
/// devices in host mode, every disk and running md device in the ramdisk,
/// with their partitions when `partitions`; minus the disks the node's
/// `properties.skip_block_devices` protect and minus RAID members. Sorted
/// by name descending, partitions before their disk (as IPA).
fn targets(policy: &WritePolicy, skip: &SkipList, partitions: bool) -> Result<Vec<Device>> {
    let listed = agent_contents::selection::unprotected(skip, erasable_devices(policy)?);
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
pub(super) fn disks(policy: &WritePolicy, skip: &SkipList) -> Result<Vec<PathBuf>> {
    Ok(agent_contents::selection::unprotected(
        skip,
        erasable_disks(policy)?,
    ))
}

/// The node's protected disks, for an erase step.
fn skip_list<A>(call: &StepCall<A>) -> Result<SkipList, CommandError> {
    call.skip_list()
        .map_err(|e| CommandError::new(ErrorKind::BlockDeviceErase, e.to_string()))
}

#[cfg(test)]
#[path = "erase_tests.rs"]
mod tests;
