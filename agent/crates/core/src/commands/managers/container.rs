//! IPA 13's `ContainerHardwareManager` (`hardware_managers/container.py`)
//! as one of the agent's managers: `generic_container_step` and its
//! deprecated alias `container_clean_step` (priority 0, an image from the
//! step's arguments, held to the allowlist), and the steps of the steps
//! file baked into the ramdisk (trusted; their priority honoured for
//! cleaning only). The policy, options, pull and run are
//! [`agent_contents::container_steps`]'; this file maps them to steps and to IPA's
//! error classes.
//!
//! Support is MAINLINE when crun runs here (IPA asks its runner for its
//! version). On a host (not the ramdisk) the manager also needs a
//! `[container]` group in the agent's configuration files, so that a host
//! where crun happens to be installed does not start offering containers.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use serde_json::{Map, Value};

use super::{ArgDesc, Manager, ManagerVersion, StepInfo, SUPPORT_MAINLINE, SUPPORT_NONE};
use crate::command::ErrorKind;
use crate::commands::dispatch::context::{Context, ManagerSources};
use crate::commands::dispatch::step_call::{PreparedStep, RawCall};
use crate::commands::dispatch::step_kind::StepKind;
use crate::commands::CommandError;
use crate::state::AgentState;
use agent_base::config::RunMode;
use agent_contents::container_steps::policy::{self, Origin};
use agent_contents::container_steps::settings::{as_options, ContainerSettings};
use agent_contents::container_steps::steps_file::{
    builtin_steps, AdvertisedStep, StepsFile, DEPRECATED_STEP, GENERIC_STEP,
};
use agent_contents::container_steps::{run_container, runtime, ContainerError};

/// IPA's `HARDWARE_MANAGER_NAME`.
pub(crate) const NAME: &str = "ContainerHardwareManager";
/// IPA's `HARDWARE_MANAGER_VERSION` (2: the step renamed, the allowlist
/// enforced on untrusted steps).
pub(crate) const VERSION: &str = "2";

/// Whether crun runs here, asked once.
fn crun_runs() -> bool {
    static RUNS: OnceLock<bool> = OnceLock::new();
    *RUNS.get_or_init(|| {
        let runs = runtime::runtime_available();
        if !runs {
            tracing::info!(
                "No container runtime (crun) is usable in this ramdisk, container based steps are unavailable"
            );
        }
        runs
    })
}

/// The container manager with its settings.
#[derive(Debug)]
pub(crate) struct ContainerManager {
    settings: ContainerSettings,
    cafile: Option<PathBuf>,
    support: u32,
    /// Step names a steps-file step may not take: every other manager's,
    /// and the ones Ironic calls whatever the agent lists.
    reserved: BTreeSet<String>,
}

impl ContainerManager {
    /// The manager as `sources` configure it: `[container]` from the
    /// configuration files, overlaid by the lookup's `agent_containers`.
    pub(crate) fn new(sources: &ManagerSources, reserved: BTreeSet<String>) -> Self {
        let mut notes = Vec::new();
        let mut settings =
            ContainerSettings::from_group(&sources.config.container_group, &mut notes);
        settings.require_tls_verify |= sources.config.container_require_tls_verify;
        let lookup = sources
            .lookup
            .as_ref()
            .and_then(|l| l.raw.get("agent_containers"));
        notes.extend(settings.overlay(lookup));
        for n in &notes {
            tracing::info!("{n}");
        }
        let wanted =
            sources.config.mode == RunMode::Ramdisk || !sources.config.container_group.is_empty();
        let support = if wanted && crun_runs() {
            SUPPORT_MAINLINE
        } else {
            SUPPORT_NONE
        };
        ContainerManager {
            settings,
            cafile: sources.config.cafile.clone(),
            support,
            reserved,
        }
    }

    fn steps_file(&self) -> Result<StepsFile, ContainerError> {
        StepsFile::load(&self.settings.container_steps_file)
    }

    /// A step running `image` with `pull`/`run` words, trusted or not.
    fn prepared(
        &self,
        step: &str,
        image: String,
        pull: Vec<String>,
        run: Vec<String>,
        origin: Origin,
    ) -> PreparedStep {
        let settings = self.settings.clone();
        let cafile = self.cafile.clone();
        let step = step.to_string();
        Box::new(move |state: Arc<AgentState>| {
            Box::pin(async move {
                let permitted =
                    policy::apply(&settings, &image, &pull, &run, origin).map_err(error)?;
                let result = run_container(
                    &permitted,
                    cafile.as_deref(),
                    &runtime::default_work_dir(),
                    state.abort_flag(),
                )
                .await;
                if let Err(e) = result {
                    tracing::error!(step, "Error during container operation: {e}");
                    return Err(error(e));
                }
                tracing::info!(step, "Container step completed for image: {image}");
                Ok(Value::Null)
            })
        })
    }
}

/// IPA's error class of each failure: the policy's own classes pass
/// through; a failed pull or run is an execution error, which the step
/// dispatcher reports as the phase's error naming the step.
fn error(e: ContainerError) -> CommandError {
    let kind = match &e {
        ContainerError::NotPermitted(_) => ErrorKind::ContainerNotPermitted,
        ContainerError::InvalidParams(_) => ErrorKind::InvalidCommandParams,
        ContainerError::Configuration(_) => ErrorKind::HardwareManagerConfiguration,
        ContainerError::Option(_)
        | ContainerError::Pull { .. }
        | ContainerError::Run { .. }
        | ContainerError::Failed { .. }
        | ContainerError::Aborted(_) => ErrorKind::CommandExecution,
    };
    CommandError::new(kind, e.to_string())
}

/// Python's name for a JSON value's type, as IPA's messages say it.
fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "NoneType",
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_f64() => "float",
        Value::Number(_) => "int",
        Value::String(_) => "str",
        Value::Array(_) => "list",
        Value::Object(_) => "dict",
    }
}

/// `pull_options` / `run_options` as given: none, a string, or a list of
/// strings, each split on whitespace (IPA's `_as_options`).
fn option_words(args: &Map<String, Value>, key: &str) -> Result<Vec<String>, CommandError> {
    let bad = |v: &Value| {
        CommandError::new(
            ErrorKind::InvalidCommandParams,
            format!(
                "{key} must be a string or a list of strings, got {}.",
                type_name(v)
            ),
        )
    };
    match args.get(key) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::String(s)) => Ok(as_options(std::slice::from_ref(s))),
        Some(Value::Array(items)) => {
            let mut out = Vec::new();
            for i in items {
                out.push(i.as_str().ok_or_else(|| bad(i))?.to_string());
            }
            Ok(as_options(&out))
        }
        Some(other) => Err(bad(other)),
    }
}

/// The arguments of `generic_container_step`.
fn generic_args(
    args: &Map<String, Value>,
) -> Result<(String, Vec<String>, Vec<String>), CommandError> {
    if let Some(k) = args
        .keys()
        .find(|k| !["container_url", "pull_options", "run_options"].contains(&k.as_str()))
    {
        return Err(CommandError::new(
            ErrorKind::InvalidCommandParams,
            format!("unexpected argument {k:?}: the step takes container_url, pull_options and run_options"),
        ));
    }
    let url = match args.get("container_url") {
        Some(Value::String(s)) if !s.is_empty() => s.clone(),
        other => {
            return Err(CommandError::new(
                ErrorKind::InvalidCommandParams,
                format!(
                    "container_url must be a non-empty string, got {}.",
                    other.map_or("NoneType", type_name)
                ),
            ))
        }
    };
    Ok((
        url,
        option_words(args, "pull_options")?,
        option_words(args, "run_options")?,
    ))
}

fn step_info(s: AdvertisedStep) -> StepInfo {
    let argsinfo = s
        .argsinfo
        .as_ref()
        .and_then(Value::as_object)
        .map(|o| {
            o.iter()
                .map(|(name, d)| ArgDesc {
                    name: name.clone(),
                    description: d["description"].as_str().unwrap_or_default().to_string(),
                    required: d["required"].as_bool().unwrap_or(false),
                })
                .collect()
        })
        .unwrap_or_default();
    StepInfo {
        step: s.step,
        priority: s.priority,
        interface: s.interface,
        reboot_requested: s.reboot_requested,
        abortable: s.abortable,
        argsinfo,
    }
}

impl Manager for ContainerManager {
    fn name(&self) -> &str {
        NAME
    }

    fn origin(&self) -> String {
        format!(
            "built into the agent, steps from {}",
            self.settings.container_steps_file.display()
        )
    }

    fn version(&self) -> ManagerVersion {
        ManagerVersion {
            name: NAME.into(),
            version: VERSION.into(),
        }
    }

    fn support(&self) -> u32 {
        self.support
    }

    /// The generic steps, and the steps file's that take no reserved name
    /// (those make every listing fail instead, with IPA's message).
    fn step_names(&self) -> Vec<String> {
        let mut names = vec![GENERIC_STEP.to_string(), DEPRECATED_STEP.to_string()];
        if let Ok(file) = self.steps_file() {
            for s in file.steps {
                if !self.reserved.contains(&s.name) && !names.contains(&s.name) {
                    names.push(s.name);
                }
            }
        }
        names
    }

    fn steps(&self, kind: StepKind, _: &AgentState) -> Result<Vec<StepInfo>, CommandError> {
        let file = self.steps_file().map_err(error)?;
        let listed = file
            .advertised(kind == StepKind::Clean, &|n| self.reserved.contains(n))
            .map_err(error)?;
        Ok(builtin_steps()
            .into_iter()
            .chain(listed)
            .map(step_info)
            .collect())
    }

    fn prepare(
        &self,
        name: &str,
        _kind: StepKind,
        call: RawCall,
        _ctx: &Context,
    ) -> Option<Result<PreparedStep, CommandError>> {
        if name == GENERIC_STEP || name == DEPRECATED_STEP {
            if name == DEPRECATED_STEP {
                tracing::warn!(
                    "The 'container_clean_step' step is deprecated, use 'generic_container_step' instead."
                );
            }
            return Some(
                generic_args(&call.args)
                    .map(|(url, pull, run)| self.prepared(name, url, pull, run, Origin::Arguments)),
            );
        }
        if name.starts_with('_') || self.reserved.contains(name) {
            return None;
        }
        let file = match self.steps_file() {
            Ok(f) => f,
            Err(e) => {
                // Refusing here would break dispatch for every other
                // manager's steps; get_*_steps reports it loudly.
                tracing::error!("Cannot resolve container step {name}: {e}");
                return None;
            }
        };
        let step = file.find(name)?;
        Some(Ok(self.prepared(
            name,
            step.image.clone(),
            step.pull_words.clone(),
            step.run_words.clone(),
            Origin::Trusted,
        )))
    }
}

#[cfg(test)]
#[path = "container_tests.rs"]
mod tests;
