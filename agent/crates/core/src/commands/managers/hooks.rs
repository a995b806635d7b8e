//! The hooks of executable managers that are not steps, each asked in
//! IPA's dispatch order (highest support first, load order among equals):
//! the per-disk erase `erase_devices` offers disks to, the extra
//! inspection data, and the choice of the root disk (IPA's
//! `get_os_install_device`, dispatched to a vendor's manager before the
//! generic one).

use std::path::PathBuf;
use std::sync::Arc;

use serde_json::{json, Map, Value};

use super::exec::{disks, inventory_disks, label, load, Refused};
use crate::commands::{CommandError, ErrorKind};
use crate::state::AgentState;
use agent_base::config::Config;
use agent_contents::exec_steps::{ExecManager, Hook};
use agent_devices::inventory::Disk;
use ironic_types::node::Node;

/// The loaded managers that have the hook `which` picks, highest support
/// first (load order among equals).
fn hooked(
    config: &Config,
    which: fn(&ExecManager) -> Option<&Hook>,
) -> Result<Vec<Arc<ExecManager>>, Refused> {
    let mut hooks: Vec<Arc<ExecManager>> = load(config)?
        .into_iter()
        .filter(|m| m.support > 0 && which(m).is_some())
        .map(Arc::new)
        .collect();
    hooks.sort_by_key(|m| std::cmp::Reverse(m.support));
    Ok(hooks)
}

/// The managers with an erase hook, in dispatch order.
pub fn erase_hooks(config: &Config) -> Result<Vec<Arc<ExecManager>>, Refused> {
    hooked(config, |m| m.erase_block_device.as_ref())
}

/// Who erased a disk, for the step's result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claimed {
    /// The disk.
    pub disk: PathBuf,
    /// The manager whose hook erased it.
    pub manager: String,
    /// The hook's JSON result.
    pub result: Value,
}

/// Offers each of `disks` to the erase hooks of `managers` in turn (the
/// first that claims it erases it). Returns the claimed disks and the
/// ones every hook declined, in `disks`' order; a hook's failure stops
/// the erase. `node` is the node's document as the conductor sent it,
/// passed through to the executables unread (opaque pass-through).
pub async fn erase_claimed(
    managers: &[Arc<ExecManager>],
    disks: Vec<PathBuf>,
    node: &Value,
    state: &AgentState,
) -> Result<(Vec<Claimed>, Vec<PathBuf>), CommandError> {
    if managers.is_empty() {
        return Ok((Vec::new(), disks));
    }
    let listed = inventory_disks(&state.config).unwrap_or_default();
    let mut claimed = Vec::new();
    let mut rest = Vec::new();
    'disk: for disk in disks {
        let name = disk.display().to_string();
        let block_device = listed
            .iter()
            .find(|d| d.get("name").and_then(Value::as_str) == Some(name.as_str()))
            .cloned()
            .unwrap_or_else(|| json!({"name": name}));
        let input = json!({"node": node, "block_device": block_device});
        for m in managers {
            let Some(hook) = &m.erase_block_device else {
                continue;
            };
            let label = label(m, &format!("erase_block_device of {name}:"), hook);
            let answer = agent_contents::exec_steps::erase_block_device(
                hook,
                &label,
                &input,
                state.abort_flag(),
            )
            .await
            .map_err(|e| CommandError::new(ErrorKind::BlockDeviceErase, e.to_string()))?;
            if let Some(result) = answer {
                claimed.push(Claimed {
                    disk,
                    manager: m.name.clone(),
                    result,
                });
                continue 'disk;
            }
        }
        rest.push(disk);
    }
    Ok((claimed, rest))
}

/// Every executable manager's `inspect` hook, run in turn: each JSON
/// object it prints is merged into `data` under its manager's name. A hook
/// that fails or prints no object is logged and left out: inspection goes
/// on without it.
pub async fn inspection_data(config: &Config) -> Map<String, Value> {
    let mut out = Map::new();
    let managers = match hooked(config, |m| m.inspect.as_ref()) {
        Ok(m) => m,
        Err(e) => {
            tracing::warn!("{e}");
            return out;
        }
    };
    if managers.is_empty() {
        return out;
    }
    // One disk listing for every hook; no node yet (inspection runs
    // before the node is known).
    let input = json!({"node": null, "disks": disks(config)});
    for m in managers {
        let Some(hook) = &m.inspect else { continue };
        let label = label(&m, "inspect executable", hook);
        let never = Arc::new(std::sync::atomic::AtomicBool::new(false));
        match agent_contents::exec_steps::run(hook, &label, &input, never).await {
            Ok(Value::Object(o)) => {
                out.insert(m.name.clone(), Value::Object(o));
            }
            Ok(other) => tracing::warn!("{label} printed no JSON object: {other}"),
            Err(e) => tracing::warn!("{e}"),
        }
    }
    out
}

/// The root disk an executable manager chose.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chosen {
    /// The manager whose hook chose it.
    pub manager: String,
    /// The disk, one of those the hook was given.
    pub disk: PathBuf,
}

/// The root disk as the managers' `os_install_device` hooks choose it
/// among `disks` (those the agent's own choice considers): each hook gets
/// `{"node", "disks"}`; the first that names one of those disks chooses,
/// one that answers `{"claimed": false}` leaves the choice to the next.
/// `Ok(None)`: no hook chose (or none is loaded), the agent's own choice
/// applies. A hook that fails, or names a disk it was not given, fails the
/// choice naming the manager. The node's document is passed through to
/// the executables unread (opaque pass-through; `null` without a node).
pub async fn os_install_device(
    state: &AgentState,
    node: Option<&Node>,
    disks: &[Disk],
) -> Result<Option<Chosen>, CommandError> {
    let fail = |msg: String| CommandError::new(ErrorKind::Deployment, msg);
    let managers =
        hooked(&state.config, |m| m.os_install_device.as_ref()).map_err(|e| fail(e.to_string()))?;
    if managers.is_empty() {
        return Ok(None);
    }
    let input = json!({"node": node.map(Node::document), "disks": disks});
    for m in managers {
        let Some(hook) = &m.os_install_device else {
            continue;
        };
        let label = label(&m, "os_install_device executable", hook);
        let Some(disk) =
            agent_contents::exec_steps::os_install_device(hook, &label, &input, state.abort_flag())
                .await
                .map_err(|e| fail(e.to_string()))?
        else {
            continue;
        };
        let name = disk.display().to_string();
        if !disks.iter().any(|d| d.name == name) {
            return Err(fail(format!(
                "{label} chose {name}, which is not one of the disks it was given"
            )));
        }
        tracing::info!(manager = %m.name, disk = %name, "the root disk is the one a hardware manager chose (os_install_device)");
        return Ok(Some(Chosen {
            manager: m.name.clone(),
            disk,
        }));
    }
    Ok(None)
}

#[cfg(test)]
#[path = "hooks_tests.rs"]
mod tests;
