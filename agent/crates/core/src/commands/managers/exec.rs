//! Executable hardware managers as [`Manager`]s: each manifest an operator
//! put in the agent's manager directory ([`agent_contents::exec_steps`]) offers its
//! steps through this adapter. A step's executable gets
//! `{"node", "ports", "args", "step", "phase", "disks"}` as JSON on stdin;
//! its last JSON stdout line is the step's result, and a failure, a time
//! limit or an abort is the command's error with the exit status and the
//! last output lines (what Ironic shows in `last_error`). Also the disk
//! list steps and hooks ([`super::hooks`]) give the executables.

use std::path::Path;
use std::sync::Arc;

use serde_json::{json, Value};

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
pub(super) fn label(m: &ExecManager, what: &str, hook: &Hook) -> String {
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

pub(super) fn inventory_disks(config: &Config) -> anyhow::Result<Vec<Value>> {
    Ok(agent_devices::disk::machine_disks(config)?
        .iter()
        .filter_map(|d| serde_json::to_value(d).ok())
        .collect())
}

#[cfg(test)]
#[path = "exec_tests.rs"]
pub(in crate::commands) mod tests;
