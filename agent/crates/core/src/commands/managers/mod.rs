//! IPA's hardware managers: the sources of steps. Each manager has a name
//! (its group in `get_*_steps`), a version (its entry in
//! `hardware_manager_version`, which Ironic echoes back on every
//! `execute_*_step` and the agent checks), a support level, and its clean,
//! deploy and service steps. [`Managers`] is the set this agent has, in
//! IPA 13's order: highest support first (`get_managers`); step lists are
//! merged as IPA's `deduplicate_steps` merges them and a step runs on the
//! first manager that has it (`dispatch_to_managers`).
//!
//! The generic manager ([`generic`]) is built in, and so are IPA's container
//! manager ([`container`], loaded where a container runtime runs) and its
//! Mellanox/NVIDIA NIC firmware manager ([`nvidia`], loaded where such a
//! NIC is present); managers an operator adds come after them. As in IPA, a manager whose support is
//! higher than another's **replaces** that manager's step of the same name
//! (a vendor's `erase_devices` or in-band hardware RAID's
//! `create_configuration` instead of the generic ones). A step name taken
//! by a manager of the same or a higher support is refused at load (IPA
//! would then pick by priority for the listing but by load order for the
//! run, so the operator could not tell which runs), and every
//! `get_*_steps` then fails naming it: the operator sees the mistake in the
//! node's `last_error` instead of a step that silently does something else.

mod compose;
pub(crate) mod container;
pub mod exec;
pub(crate) mod generic;
pub mod hooks;
pub(crate) mod nvidia;

pub use compose::Refusal;

use std::cmp::Reverse;
use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{json, Map, Value};

use super::dispatch::context::Context;
use super::dispatch::step_call::{PreparedStep, RawCall};
use super::dispatch::step_kind::StepKind;
use super::{CommandError, ErrorKind};
use crate::state::AgentState;

/// IPA's `HardwareSupport.NONE`: a manager with it is not loaded.
pub const SUPPORT_NONE: u32 = 0;
/// IPA's `HardwareSupport.GENERIC` (the generic manager).
pub const SUPPORT_GENERIC: u32 = 1;
/// IPA's `HardwareSupport.MAINLINE` (IPA's own optional managers).
pub const SUPPORT_MAINLINE: u32 = 2;
/// IPA's `HardwareSupport.SERVICE_PROVIDER` (operators' and vendors').
pub const SUPPORT_SERVICE_PROVIDER: u32 = 3;

/// Names no manager may give a step: ones Ironic calls whatever the agent
/// lists (`execute_bootc_install`, answered by the step dispatcher).
const RESERVED: [&str; 1] = ["execute_bootc_install"];

/// One argument of a step (`argsinfo`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArgDesc {
    /// Argument name.
    pub name: String,
    /// Human description.
    pub description: String,
    /// Whether Ironic must supply it.
    pub required: bool,
}

/// A step as a manager lists it for one phase.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepInfo {
    /// Step name.
    pub step: String,
    /// Priority in this phase (0: only when asked for).
    pub priority: u32,
    /// Ironic interface (`deploy`, `raid`, …).
    pub interface: String,
    /// Whether the node must reboot after it.
    pub reboot_requested: bool,
    /// Whether the conductor may abort it.
    pub abortable: bool,
    /// Accepted arguments.
    pub argsinfo: Vec<ArgDesc>,
}

impl StepInfo {
    /// The step as `get_*_steps` reports it.
    pub fn describe(&self) -> Value {
        let mut v = json!({
            "step": self.step,
            "priority": self.priority,
            "interface": self.interface,
            "reboot_requested": self.reboot_requested,
            "abortable": self.abortable,
        });
        if !self.argsinfo.is_empty() {
            let args: Map<String, Value> = self
                .argsinfo
                .iter()
                .map(|a| {
                    (
                        a.name.clone(),
                        json!({"description": a.description, "required": a.required}),
                    )
                })
                .collect();
            v["argsinfo"] = Value::Object(args);
        }
        v
    }
}

/// A manager's entry in `hardware_manager_version`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManagerVersion {
    /// IPA's `HARDWARE_MANAGER_NAME`.
    pub name: String,
    /// IPA's `HARDWARE_MANAGER_VERSION`.
    pub version: String,
}

/// A source of steps.
pub trait Manager: Send + Sync {
    /// The group name in `get_*_steps` (IPA: the class name).
    fn name(&self) -> &str;
    /// Where it came from, for errors (a manifest's path; built-in ones
    /// say so).
    fn origin(&self) -> String {
        "built into the agent".into()
    }
    /// Its entry in `hardware_manager_version`.
    fn version(&self) -> ManagerVersion;
    /// Its support level; [`SUPPORT_NONE`] leaves it out.
    fn support(&self) -> u32;
    /// Every step name it has, in any phase (for the shadowing check).
    fn step_names(&self) -> Vec<String>;
    /// Its steps of phase `kind`.
    fn steps(&self, kind: StepKind, state: &AgentState) -> Result<Vec<StepInfo>, CommandError>;
    /// Its step `name` of phase `kind` prepared with its arguments, or
    /// `None` when it has no such step.
    fn prepare(
        &self,
        name: &str,
        kind: StepKind,
        call: RawCall,
        ctx: &Context,
    ) -> Option<Result<PreparedStep, CommandError>>;
}

/// The managers this agent has, highest support first, and the ones it
/// refused at load with the reason.
#[derive(Clone)]
pub struct Managers {
    list: Vec<Arc<dyn Manager>>,
    refused: Vec<String>,
}

impl std::fmt::Debug for Managers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Managers")
            .field(
                "list",
                &self.list.iter().map(|m| m.name()).collect::<Vec<_>>(),
            )
            .field("refused", &self.refused)
            .finish()
    }
}

impl Default for Managers {
    /// The generic manager alone.
    fn default() -> Self {
        Self::from_candidates(Vec::new(), Vec::new())
    }
}

impl Managers {
    /// Logs what was loaded and refused (once, at start: loading happens
    /// again for each request, quietly).
    pub fn log_summary(&self) {
        for m in &self.list {
            let v = m.version();
            tracing::info!(
                manager = m.name(),
                version = v.version,
                origin = m.origin(),
                support = m.support(),
                "hardware manager loaded"
            );
        }
        for r in &self.refused {
            tracing::error!("{r}");
        }
    }

    /// The loaded managers, highest support first.
    pub fn list(&self) -> &[Arc<dyn Manager>] {
        &self.list
    }

    /// The reasons managers were refused at load.
    pub fn refused(&self) -> &[String] {
        &self.refused
    }

    /// `hardware_manager_version`: every loaded manager's version.
    pub fn versions(&self) -> Value {
        let map: Map<String, Value> = self
            .list
            .iter()
            .map(|m| {
                let v = m.version();
                (v.name, Value::String(v.version))
            })
            .collect();
        Value::Object(map)
    }

    /// The steps of phase `kind`, grouped by manager, deduplicated as
    /// IPA 13's `deduplicate_steps`: of steps sharing a name, the one of the
    /// manager with the highest support wins, then the higher priority,
    /// then the manager whose name sorts first. Fails when a manager was
    /// refused at load (IPA's `HardwareManagerConfigurationError`).
    pub fn steps(&self, kind: StepKind, state: &AgentState) -> Result<Value, CommandError> {
        if !self.refused.is_empty() {
            return Err(CommandError::new(
                ErrorKind::HardwareManagerConfiguration,
                self.refused.join("; "),
            ));
        }
        let mut candidates: Vec<(u32, &str, StepInfo)> = Vec::new();
        for m in &self.list {
            for s in m.steps(kind, state)? {
                candidates.push((m.support(), m.name(), s));
            }
        }
        // IPA's sort key: highest support, then highest priority, then the
        // manager's name; the smallest key wins.
        let mut winners: BTreeMap<&str, (Reverse<u32>, Reverse<u32>, &str)> = BTreeMap::new();
        for (support, manager, s) in &candidates {
            let key = (Reverse(*support), Reverse(s.priority), *manager);
            if winners.get(s.step.as_str()).is_none_or(|best| key < *best) {
                winners.insert(&s.step, key);
            }
        }
        let mut groups: Map<String, Value> = Map::new();
        for (_, name, s) in &candidates {
            if winners
                .get(s.step.as_str())
                .is_some_and(|(_, _, w)| w == name)
            {
                let group = groups
                    .entry(name.to_string())
                    .or_insert_with(|| Value::Array(Vec::new()));
                if let Value::Array(a) = group {
                    a.push(s.describe());
                }
            }
        }
        Ok(Value::Object(groups))
    }

    /// Step `name` of phase `kind` from the first manager (highest support
    /// first) that has it, prepared with its arguments; `None` when none
    /// has it.
    pub fn prepare(
        &self,
        name: &str,
        kind: StepKind,
        call: RawCall,
        ctx: &Context,
    ) -> Option<Result<PreparedStep, CommandError>> {
        self.list.iter().find_map(|m| {
            let prepared = m.prepare(name, kind, call.clone(), ctx)?;
            tracing::debug!(step = name, manager = m.name(), "step dispatched");
            Some(prepared)
        })
    }
}

#[cfg(test)]
mod tests;
