//! Executable hardware managers as [`Manager`]s: each manifest an operator
//! put in the agent's manager directory ([`agent_contents::exec_steps`]) offers its
//! steps through this adapter. A step's executable gets
//! `{"node", "ports", "args", "step", "phase", "disks"}` as JSON on stdin;
//! its last JSON stdout line is the step's result, and a failure, a time
//! limit or an abort is the command's error with the exit status and the
//! last output lines (what Ironic shows in `last_error`). Also the
//! per-disk erase hooks `erase_devices` asks first, and the disk list both
//! give the executables.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::{json, Map, Value};

use super::{ArgDesc, Manager, ManagerVersion, StepInfo};
use crate::commands::dispatch::context::Context;
use crate::commands::dispatch::step_call::{PreparedStep, RawCall};
use crate::commands::dispatch::step_kind::StepKind;
use crate::commands::{CommandError, ErrorKind};
use crate::state::AgentState;
use agent_base::config::Config;
use agent_contents::exec_steps::{ExecManager, ExecStep, Hook, RunError};

/// One executable manager.
#[derive(Debug)]
pub struct ExecAdapter(Arc<ExecManager>);

impl ExecAdapter {
    /// The adapter of `m`.
    pub fn new(m: ExecManager) -> Self {
        Self(Arc::new(m))
    }
}

/// The executable managers of the agent's manager directory, in name
/// order of their manifests, or why the directory was refused (a message
/// naming the manifest, the step and the field).
pub fn load(config: &Config) -> Result<Vec<ExecManager>, Refused> {
    let Some(dir) = &config.exec_managers_dir else {
        return Ok(Vec::new());
    };
    agent_contents::exec_steps::load_dir(dir).map_err(|source| Refused {
        dir: dir.clone(),
        source,
    })
}

/// The manager directory could not be loaded: every manager in it is
/// refused.
#[derive(Debug, thiserror::Error)]
#[error("the executable hardware managers of {} are refused: {source}", dir.display())]
pub struct Refused {
    /// The directory.
    pub dir: std::path::PathBuf,
    /// Why.
    pub source: agent_contents::exec_steps::ManifestError,
}

fn priority(s: &ExecStep, kind: StepKind) -> Option<u32> {
    match kind {
        StepKind::Clean => s.clean_priority,
        StepKind::Deploy => s.deploy_priority,
        StepKind::Service => s.service_priority,
    }
}

fn info(s: &ExecStep, priority: u32) -> StepInfo {
    StepInfo {
        step: s.name.clone(),
        priority,
        interface: s.interface.as_str().to_string(),
        reboot_requested: s.reboot_requested,
        abortable: s.abortable,
        argsinfo: s
            .argsinfo
            .iter()
            .map(|a| ArgDesc {
                name: a.name.clone(),
                description: a.description.clone(),
                required: a.required,
            })
            .collect(),
    }
}

/// How a hook's executable is named in messages: relative to its manifest's
/// directory when it lies there.
fn label(m: &ExecManager, what: &str, hook: &Hook) -> String {
    let dir = m.path.parent().unwrap_or(Path::new(""));
    let exe = hook
        .executable
        .strip_prefix(dir)
        .unwrap_or(&hook.executable);
    format!("manager {}'s {what} {}", m.name, exe.display())
}

/// A hook's failure as the command's error (`Error performing clean step
/// x: …` once the step dispatcher has named the step).
fn command_error(e: &RunError) -> CommandError {
    CommandError::new(ErrorKind::CommandExecution, e.to_string())
}

impl Manager for ExecAdapter {
    fn name(&self) -> &str {
        &self.0.name
    }

    fn origin(&self) -> String {
        self.0.path.display().to_string()
    }

    fn version(&self) -> ManagerVersion {
        ManagerVersion {
            name: self.0.name.clone(),
            version: self.0.version.clone(),
        }
    }

    fn support(&self) -> u32 {
        self.0.support
    }

    fn step_names(&self) -> Vec<String> {
        self.0.steps.iter().map(|s| s.name.clone()).collect()
    }

    fn steps(&self, kind: StepKind, _state: &AgentState) -> Result<Vec<StepInfo>, CommandError> {
        Ok(self
            .0
            .steps
            .iter()
            .filter_map(|s| priority(s, kind).map(|p| info(s, p)))
            .collect())
    }

    fn prepare(
        &self,
        name: &str,
        kind: StepKind,
        call: RawCall,
        _ctx: &Context,
    ) -> Option<Result<PreparedStep, CommandError>> {
        let step = self
            .0
            .steps
            .iter()
            .find(|s| s.name == name && priority(s, kind).is_some())?;
        if let Some(missing) = step
            .argsinfo
            .iter()
            .find(|a| a.required && !call.args.contains_key(&a.name))
        {
            return Some(Err(CommandError::new(
                ErrorKind::InvalidCommandParams,
                format!(
                    "step {name} of manager {}: the required argument {} is missing",
                    self.0.name, missing.name
                ),
            )));
        }
        let manager = self.0.clone();
        let step = step.clone();
        let phase = kind.word();
        Some(Ok(Box::new(move |state: Arc<AgentState>| {
            Box::pin(async move {
                let input = json!({
                    "node": call.node_document(),
                    "ports": call.ports,
                    "args": Value::Object(call.args),
                    "step": step.name,
                    "phase": phase,
                    "disks": disks(&state.config),
                });
                let label = label(&manager, "step executable", &step.hook);
                agent_contents::exec_steps::run(&step.hook, &label, &input, state.abort_flag())
                    .await
                    .map_err(|e| command_error(&e))
            })
        })))
    }
}

/// The disks the executables are told about: the inventory's whole disks
/// (in host mode only the allowed devices), as the inventory describes
/// them. A disk listing that fails is an empty list (logged).
pub fn disks(config: &Config) -> Value {
    match inventory_disks(config) {
        Ok(d) => Value::Array(d),
        Err(e) => {
            tracing::warn!("listing the disks for an executable manager: {e:#}");
            Value::Array(Vec::new())
        }
    }
}

fn inventory_disks(config: &Config) -> anyhow::Result<Vec<Value>> {
    Ok(crate::commands::target::machine_disks(config)?
        .iter()
        .filter_map(|d| serde_json::to_value(d).ok())
        .collect())
}

/// The managers with an erase hook, highest support first (load order
/// among equals).
pub fn erase_hooks(config: &Config) -> Result<Vec<Arc<ExecManager>>, Refused> {
    let mut hooks: Vec<Arc<ExecManager>> = load(config)?
        .into_iter()
        .filter(|m| m.support > 0 && m.erase_block_device.is_some())
        .map(Arc::new)
        .collect();
    hooks.sort_by_key(|m| std::cmp::Reverse(m.support));
    Ok(hooks)
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
/// the erase.
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
pub async fn inspection_data(config: &Config, node: &Value) -> Map<String, Value> {
    let mut out = Map::new();
    let managers = match load(config) {
        Ok(m) => m,
        Err(e) => {
            tracing::warn!("{e}");
            return out;
        }
    };
    let hooked: Vec<&ExecManager> = managers
        .iter()
        .filter(|m| m.support > 0 && m.inspect.is_some())
        .collect();
    if hooked.is_empty() {
        return out;
    }
    // One disk listing for every hook.
    let input = json!({"node": node, "disks": disks(config)});
    for m in hooked {
        let Some(hook) = &m.inspect else { continue };
        let label = label(m, "inspect executable", hook);
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

#[cfg(test)]
#[path = "exec_tests.rs"]
mod tests;
