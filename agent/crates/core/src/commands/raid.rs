//! The software RAID steps of IPA's generic hardware manager (interface
//! `raid`): `delete_configuration` and `create_configuration` (clean and
//! service steps, priority 0) and `apply_configuration` (deploy and service
//! step, priority 0, arguments `raid_config` and `delete_existing`). The
//! work is [`agent_contents::raid`]; this reads the node, picks the disks the agent
//! may use and turns failures into IPA's `SoftwareRAIDError` (its class,
//! code and message, the specifics in `details`). Disks the node's
//! `skip_block_devices` protect ([`agent_contents::selection`], a kept
//! `volume_name` among them) are neither deleted nor built on.

use std::path::Path;
use std::sync::Arc;

use serde_json::{json, Value};

use super::dispatch::step_call::StepCall;
use super::{CommandError, ErrorKind};
use crate::state::AgentState;
use agent_contents::partimage::params::{self, BootMode};
use agent_contents::raid::{config, ops, plan};
use agent_contents::selection::SkipList;
use agent_devices::disk::{ioctl, WritePolicy};
use ironic_types::node::Node;

fn node_uuid(node: &Node) -> String {
    node.uuid().unwrap_or("(unknown node)").to_string()
}

fn error(kind: ErrorKind, what: &str, e: &anyhow::Error) -> CommandError {
    CommandError::new(kind, format!("{what}: {e:#}"))
}

/// The disks RAID may use: the inventory's (in host mode only the allowed
/// devices), md devices and protected disks aside.
fn candidate_disks(
    state: &AgentState,
    skip: &SkipList,
) -> anyhow::Result<Vec<agent_devices::inventory::Disk>> {
    let mut disks = agent_devices::disk::machine_disks(&state.config)?;
    disks.retain(|d| !d.name.starts_with("/dev/md"));
    Ok(agent_contents::selection::unprotected_disks(skip, disks))
}

/// The node's protected disks, read once per step; a list that does not
/// parse fails the step as a failed listing (`what`).
fn skip_list(node: &Node, kind: ErrorKind, what: &str) -> Result<SkipList, CommandError> {
    SkipList::of(node).map_err(|e| error(kind, what, &e.into()))
}

/// How a failed disk listing for building arrays is reported.
const LISTING_FOR_RAID: &str = "Listing the disks for software RAID";
/// How a failed disk listing for deleting arrays is reported.
const LISTING: &str = "Listing the disks";

fn geometry(path: &Path) -> anyhow::Result<plan::MemberDisk> {
    use anyhow::Context;
    let f = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let sector = u64::from(ioctl::logical_sector_size(&f).context("reading the sector size")?);
    let bytes = ioctl::size_bytes(&f).context("reading the size")?;
    Ok(plan::MemberDisk {
        path: path.to_path_buf(),
        sector,
        total: bytes / sector,
    })
}

fn build(
    state: &AgentState,
    node: &Node,
    skip: &SkipList,
    raid_config: &Value,
    kind: ErrorKind,
) -> Result<Value, CommandError> {
    let disks = candidate_disks(state, skip).map_err(|e| error(kind, LISTING_FOR_RAID, &e))?;
    let Some(cfg) = config::parse(raid_config, &node_uuid(node), disks.len())
        .map_err(|e| CommandError::new(kind, e.to_string()))?
    else {
        tracing::info!("no software RAID logical disks in the RAID configuration: nothing to do");
        return Ok(json!({}));
    };
    let members =
        plan::select_members(&disks, &cfg).map_err(|e| CommandError::new(kind, e.to_string()))?;
    let mut geo = Vec::new();
    for name in members.iter().flatten() {
        if geo
            .iter()
            .any(|g: &plan::MemberDisk| g.path.as_os_str() == name.as_str())
        {
            continue;
        }
        geo.push(geometry(Path::new(name)).map_err(|e| error(kind, name, &e))?);
    }
    let ramdisk = if Path::new("/sys/firmware/efi").is_dir() {
        BootMode::Uefi
    } else {
        BootMode::Bios
    };
    let mode = params::node_boot_mode(node, ramdisk);
    let label = params::node_label(node);
    let layout = plan::plan(&cfg, &members, &geo, mode, label)
        .map_err(|e| CommandError::new(kind, e.to_string()))?;
    tracing::info!(?mode, label = ?layout.label,
        disks = ?layout.disks.iter().map(|d| (d.disk.path.display().to_string(), d.parts.len())).collect::<Vec<_>>(),
        arrays = ?layout.arrays.iter().map(|a| (a.index, a.name.clone(), a.level.ironic(), a.size_bytes())).collect::<Vec<_>>(),
        "software RAID layout");
    let policy = WritePolicy::from_config(&state.config);
    let built = ops::create(&layout, &policy)
        .map_err(|e| error(kind, "Failed to create software RAID", &e))?;
    tracing::info!(arrays = ?built.arrays, root = ?built.root, "Successfully created Software RAID");
    // A deploy in this boot picks its root device by them (IPA's
    // _raid_root_device_mapping; see commands/target.rs).
    state.set_raid_root_marks(built.root_marks);
    // IPA returns the configuration it applied; Ironic stores it as the
    // node's raid_config.
    Ok(raid_config.clone())
}

async fn blocking<F>(kind: ErrorKind, f: F) -> Result<Value, CommandError>
where
    F: FnOnce() -> Result<Value, CommandError> + Send + 'static,
{
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| CommandError::new(kind, format!("the software RAID task failed: {e}")))?
}

/// `create_configuration`: builds the node's `target_raid_config` (`{}`
/// when it has none or no software volumes).
pub(crate) async fn create_configuration_step(
    state: Arc<AgentState>,
    call: StepCall,
) -> Result<Value, CommandError> {
    let kind = ErrorKind::SoftwareRaid;
    let raid_config = call
        .node_document()
        .get("target_raid_config")
        .cloned()
        .unwrap_or(Value::Null);
    let node = match call.node {
        Some(node)
            if !(raid_config.is_null()
                || raid_config.as_object().is_some_and(|o| o.is_empty())) =>
        {
            node
        }
        _ => {
            tracing::info!("No target_raid_config found");
            return Ok(json!({}));
        }
    };
    blocking(kind, move || {
        let skip = skip_list(&node, kind, LISTING_FOR_RAID)?;
        build(&state, &node, &skip, &raid_config, kind)
    })
    .await
}

/// `delete_configuration`: stops every array on the disks the agent may
/// write and removes every md superblock and the tables of their disks;
/// the disks the node protects (a kept `volume_name` among them) are left
/// whole.
pub(crate) async fn delete_configuration_step(
    state: Arc<AgentState>,
    call: StepCall,
) -> Result<Value, CommandError> {
    let kind = ErrorKind::SoftwareRaid;
    blocking(kind, move || {
        let skip = skip_list(call.node_or_empty(), kind, LISTING)?;
        delete(&state, &skip, kind)
    })
    .await
}

/// `delete_configuration` for `install_coreos` (container form), which
/// deletes any software RAID before coreos-installer runs.
pub(crate) fn delete_all(state: &AgentState, node: &Node) -> Result<(), CommandError> {
    let kind = ErrorKind::SoftwareRaid;
    delete(state, &skip_list(node, kind, LISTING)?, kind).map(|_| ())
}

fn delete(state: &AgentState, skip: &SkipList, kind: ErrorKind) -> Result<Value, CommandError> {
    let policy = WritePolicy::from_config(&state.config);
    let disks = agent_devices::disk::erasable_disks(&policy)
        .map(|d| agent_contents::selection::unprotected(skip, d))
        .map_err(|e| error(kind, LISTING, &e))?;
    // The arrays go, and with them what is_root_volume said of them (IPA
    // keeps its map, and would name a deleted array as the root device).
    state.set_raid_root_marks(Vec::new());
    let deleted = ops::delete(&disks, &policy)
        .map_err(|e| error(kind, "Failed to delete software RAID", &e))?;
    tracing::info!(stopped = ?deleted.stopped, zeroed = ?deleted.zeroed, wiped = ?deleted.wiped, "software RAID deleted");
    Ok(Value::Null)
}

/// `apply_configuration`'s arguments.
#[derive(Debug, Default, serde::Deserialize)]
pub(crate) struct ApplyArgs {
    /// The RAID configuration (checked by [`config::parse`]).
    #[serde(default)]
    raid_config: Option<Value>,
    /// A boolean, or `"true"`/`"false"` in any case; missing or null: true.
    #[serde(default)]
    delete_existing: Option<Value>,
}

/// `apply_configuration` (deploy step): validates `raid_config`, deletes
/// the existing arrays unless `delete_existing` is false, and builds it.
pub(crate) async fn apply_configuration_step(
    state: Arc<AgentState>,
    call: StepCall<ApplyArgs>,
) -> Result<Value, CommandError> {
    let kind = ErrorKind::SoftwareRaid;
    let Some(raid_config) = call.args.raid_config.clone().filter(|v| !v.is_null()) else {
        return Err(CommandError::new(
            ErrorKind::InvalidCommandParams,
            "apply_configuration needs the argument raid_config (the RAID configuration to apply)",
        ));
    };
    let delete_existing = match call.args.delete_existing.as_ref() {
        None | Some(Value::Null) => true,
        Some(Value::Bool(b)) => *b,
        Some(Value::String(s)) if s.eq_ignore_ascii_case("true") => true,
        Some(Value::String(s)) if s.eq_ignore_ascii_case("false") => false,
        Some(other) => {
            return Err(CommandError::new(
                ErrorKind::InvalidCommandParams,
                format!("apply_configuration: delete_existing must be a boolean, not {other}"),
            ))
        }
    };
    let node = call.node.unwrap_or_default();
    blocking(kind, move || {
        // Validate before deleting anything (IPA's order).
        let skip = skip_list(&node, kind, LISTING_FOR_RAID)?;
        let disks =
            candidate_disks(&state, &skip).map_err(|e| error(kind, LISTING_FOR_RAID, &e))?;
        config::parse(&raid_config, &node_uuid(&node), disks.len())
            .map_err(|e| CommandError::new(kind, e.to_string()))?;
        if delete_existing {
            delete(&state, &skip, kind)?;
        }
        build(&state, &node, &skip, &raid_config, kind)
    })
    .await
}
