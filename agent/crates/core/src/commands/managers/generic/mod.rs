//! The generic hardware manager: every step this agent implements itself,
//! as a static table of data (`table.rs`: name, interface, priorities per
//! phase, flags, arguments) and the function that prepares each step with
//! its parsed arguments. IPA's `GenericHardwareManager`, with its version.
//!
//! Only steps this agent really implements are listed: Ironic runs every
//! step reported with a priority above zero during automated cleaning, so
//! advertising an unimplemented one would make cleaning fail.

use super::{ArgDesc, Manager, ManagerVersion, StepInfo, SUPPORT_GENERIC};
use crate::commands::dispatch::context::Context;
use crate::commands::dispatch::step_call::{PreparedStep, RawCall};
use crate::commands::dispatch::step_kind::StepKind;
use crate::commands::CommandError;
use crate::state::AgentState;

mod table;
use table::STEPS;

/// The generic manager's group name in `get_*_steps` (Ironic flattens the
/// groups).
pub(crate) const NAME: &str = "GenericHardwareManager";

/// The generic manager's entry in `hardware_manager_version`.
pub(crate) fn version() -> ManagerVersion {
    ManagerVersion {
        name: "generic_hardware_manager".into(),
        version: "1.2".into(),
    }
}

/// Description of one step argument (`argsinfo`).
#[derive(Debug)]
pub(crate) struct ArgInfo {
    /// Argument name.
    pub name: &'static str,
    /// Human description.
    pub description: &'static str,
    /// Whether Ironic must supply it.
    pub required: bool,
}

/// One row of the step table.
#[derive(Debug)]
pub(crate) struct Step {
    /// Step name (`erase_devices_metadata`).
    pub name: &'static str,
    /// Ironic interface the step belongs to (`deploy`, `raid`).
    pub interface: &'static str,
    /// Priority as a clean step, or `None` if it is not one.
    pub clean_priority: Option<u32>,
    /// Priority as a deploy step, or `None` if it is not one.
    pub deploy_priority: Option<u32>,
    /// Priority as a service step, or `None` if it is not one (Ironic runs
    /// service steps in the order the user asked for; IPA reports 0).
    pub service_priority: Option<u32>,
    /// Whether the conductor may abort it.
    pub abortable: bool,
    /// Whether the node must reboot after it.
    pub reboot_requested: bool,
    /// Accepted arguments.
    pub argsinfo: &'static [ArgInfo],
    /// The implementation, prepared with its parsed arguments.
    pub prepare: fn(RawCall, &Context) -> Result<PreparedStep, CommandError>,
}

impl Step {
    fn priority(&self, kind: StepKind) -> Option<u32> {
        match kind {
            StepKind::Clean => self.clean_priority,
            StepKind::Deploy => self.deploy_priority,
            StepKind::Service => self.service_priority,
        }
    }

    fn info(&self, priority: u32) -> StepInfo {
        StepInfo {
            step: self.name.to_string(),
            priority,
            interface: self.interface.to_string(),
            reboot_requested: self.reboot_requested,
            abortable: self.abortable,
            argsinfo: self
                .argsinfo
                .iter()
                .map(|a| ArgDesc {
                    name: a.name.to_string(),
                    description: a.description.to_string(),
                    required: a.required,
                })
                .collect(),
        }
    }
}

/// A priority the agent's configuration sets instead of the table's:
/// `ipa-inject-files-priority` for the `inject_files` deploy step.
fn configured_priority(state: &AgentState, step: &str, kind: StepKind) -> Option<u32> {
    (kind == StepKind::Deploy && step == "inject_files")
        .then_some(state.config.inject_files_priority)
}

/// The generic manager: [`STEPS`].
#[derive(Debug, Default)]
pub(crate) struct Generic;

impl Manager for Generic {
    fn name(&self) -> &str {
        NAME
    }

    fn version(&self) -> ManagerVersion {
        version()
    }

    fn support(&self) -> u32 {
        SUPPORT_GENERIC
    }

    fn step_names(&self) -> Vec<String> {
        STEPS.iter().map(|s| s.name.to_string()).collect()
    }

    fn steps(&self, kind: StepKind, state: &AgentState) -> Result<Vec<StepInfo>, CommandError> {
        Ok(STEPS
            .iter()
            .filter_map(|s| {
                s.priority(kind)
                    .map(|p| s.info(configured_priority(state, s.name, kind).unwrap_or(p)))
            })
            .collect())
    }

    fn prepare(
        &self,
        name: &str,
        kind: StepKind,
        call: RawCall,
        ctx: &Context,
    ) -> Option<Result<PreparedStep, CommandError>> {
        let step = STEPS
            .iter()
            .find(|s| s.name == name && s.priority(kind).is_some())?;
        Some((step.prepare)(call, ctx))
    }
}
