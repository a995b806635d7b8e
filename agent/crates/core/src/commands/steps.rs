//! The shared logic of `get_*_steps` and `execute_*_step` for cleaning,
//! deployment and servicing (PROTOCOL.md §1.7, §7.1): the steps come from
//! the hardware managers ([`super::managers`]), whose versions the
//! conductor must echo back.

use std::sync::Arc;

use serde_json::{json, Value};

use super::dispatch::context::{Context, ManagerSources};
use super::dispatch::params::{ExecuteStep, GetSteps, ParamsError};
use super::dispatch::step_call::{PreparedStep, StepCall};
pub use super::dispatch::step_kind::StepKind;
use super::managers::Managers;
use super::{CommandError, ErrorKind, Outcome};
use crate::state::AgentState;
use ironic_types::node::Node;

/// The hardware manager versions of an agent with the generic manager
/// alone (no manager of an operator's), as Ironic echoes them back as
/// `clean_version` etc.
pub fn hardware_manager_version() -> Value {
    Managers::default().versions()
}

/// The node of a request's `node` parameter, a bad section or a bad entry
/// the steps read ([`super::dispatch::node_check`]) named below it.
fn node_param(doc: Value) -> Result<Option<Node>, ParamsError> {
    let node =
        Node::parse(doc).map_err(|e| ParamsError::at(&format!("node.{}", e.path), e.reason))?;
    if let Some(node) = &node {
        super::dispatch::node_check::check(node)?;
    }
    Ok(node)
}

/// A `get_*_steps` request: the node, if it sent one (parameters that are
/// not an object carry none).
pub fn parse_get(params: Value) -> Result<Option<Node>, ParamsError> {
    let request: GetSteps = super::dispatch::params::parse(&params).unwrap_or_default();
    node_param(request.node)
}

/// `get_clean_steps` / `get_deploy_steps` / `get_service_steps`: caches the
/// node and lists the managers' steps with their versions.
pub async fn get_steps(state: Arc<AgentState>, kind: StepKind, node: Option<Node>) -> Outcome {
    if let Some(node) = node {
        state.cache_node(node);
    }
    let managers = Managers::load(&ManagerSources::of(&state));
    match managers.steps(kind, &state) {
        Ok(steps) => Outcome::Done(json!({
            format!("{}_steps", kind.word()): steps,
            "hardware_manager_version": managers.versions(),
        })),
        Err(e) => Outcome::Failed(e),
    }
}

/// An `execute_*_step` request, parsed: the step to run with its
/// arguments, or the outcome it ends with before running (a hardware
/// manager version mismatch, an unknown step, a bad argument).
pub struct Execution {
    kind: StepKind,
    name: String,
    /// The step as sent, echoed in the result.
    echo: Value,
    /// The node sent with the step, cached when it runs.
    cache: Option<Node>,
    plan: Result<PreparedStep, Outcome>,
}

impl std::fmt::Debug for Execution {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Execution")
            .field("kind", &self.kind)
            .field("name", &self.name)
            .field("prepared", &self.plan.is_ok())
            .finish_non_exhaustive()
    }
}

/// How a step's failure reads: a generic execution error becomes IPA's
/// `CleaningError` / `DeploymentError` / `ServicingError` naming the step.
fn step_failed(kind: StepKind, name: &str, e: CommandError) -> Outcome {
    if e.kind == ErrorKind::CommandExecution {
        let word = kind.word();
        return Outcome::Failed(CommandError::new(
            kind.error_kind(),
            format!("Error performing {word} step {name}: {}", e.details),
        ));
    }
    Outcome::Failed(e)
}

/// An `execute_*_step` request: a named step with object arguments (HTTP
/// 400 otherwise); the version check, the step lookup and the step's own
/// arguments decide what runs (PROTOCOL.md §1.9).
pub fn parse_execute(
    params: Value,
    kind: StepKind,
    ctx: &Context,
) -> Result<Execution, ParamsError> {
    let request: ExecuteStep = super::dispatch::params::parse(&params)?;
    let name = request.step.step.clone();
    if name.is_empty() {
        return Err(ParamsError::at("step.step", "the step name is empty"));
    }
    let node = node_param(request.node)?;
    let echo = params.get("step").cloned().unwrap_or(Value::Null);
    let word = kind.word();
    let theirs = match kind {
        StepKind::Clean => request.clean_version,
        StepKind::Deploy => request.deploy_version,
        StepKind::Service => request.service_version,
    };
    let managers = Managers::load(&ctx.managers);
    let ours = managers.versions();
    if let Some(theirs) = theirs.filter(|v| !v.is_null() && *v != ours) {
        let e = CommandError::new(
            ErrorKind::VersionMismatch,
            format!("Mismatch of hardware managers: conductor sent {theirs}, agent has {ours}"),
        );
        return Ok(Execution {
            kind,
            name,
            echo,
            cache: None,
            plan: Err(Outcome::VersionMismatch(e)),
        });
    }
    let call = StepCall {
        node: node.clone().or_else(|| ctx.cached_node.clone()),
        ports: request.ports,
        args: request.step.args.unwrap_or_default(),
    };
    let plan = match managers.prepare(&name, kind, call, ctx) {
        Some(prepared) => prepared.map_err(|e| step_failed(kind, &name, e)),
        None if name == "execute_bootc_install" => {
            // Ironic 39 calls this step from its `bootc` deploy interface
            // whatever the agent lists: `BootcAgentDeploy.execute_bootc_install`
            // (a conductor-side deploy step, priority 80) sends it with
            // `image_source`, `configdrive` and `oci_pull_secret`. Its
            // `autodetect` interface never asks the agent: it switches a node
            // to `bootc` when `image_source` is an `oci://` image whose
            // registry manifest says bootc (`BootcAgentDeploy.supports_deploy`),
            // else to the next of `autodetect_deploy_interfaces` (`direct`
            // last). So the step is not listed, and a call says why.
            Err(Outcome::Failed(CommandError::new(
                ErrorKind::IncompatibleHardwareMethod,
                format!("{word} step \"execute_bootc_install\" is not supported by this agent: it installs no bootc container images; deploy a disk image with write_image"),
            )))
        }
        None => Err(Outcome::Failed(CommandError::new(
            ErrorKind::IncompatibleHardwareMethod,
            format!("{word} step {name:?} is not implemented by this agent"),
        ))),
    };
    Ok(Execution {
        kind,
        name,
        echo,
        cache: node,
        plan,
    })
}

/// `execute_clean_step` / `execute_deploy_step` / `execute_service_step`:
/// runs the prepared step; the result echoes the step as Ironic requires
/// (PROTOCOL.md §1.9).
pub async fn execute_step(state: Arc<AgentState>, e: Execution) -> Outcome {
    let Execution {
        kind,
        name,
        echo,
        cache,
        plan,
    } = e;
    if let Some(node) = cache {
        state.cache_node(node);
    }
    let run = match plan {
        Ok(run) => run,
        Err(outcome) => return outcome,
    };
    let word = kind.word();
    tracing::info!(step = name, kind = word, "running step");
    match run(state).await {
        Ok(result) => Outcome::Done(json!({
            format!("{word}_result"): result,
            format!("{word}_step"): echo,
        })),
        Err(e) => step_failed(kind, &name, e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agent_base::config::Config;

    #[test]
    fn a_nic_firmware_tool_failure_is_the_phases_error_and_ipas_classes_pass() {
        use agent_contents::nicfw::NicFwError;
        let missing = NicFwError::ToolMissing {
            tool: "mstflint",
            searched: "/usr/sbin:/usr/bin".into(),
        };
        let e = super::super::nicfw::to_command_error(&missing);
        let Outcome::Failed(e) =
            step_failed(StepKind::Service, "update_nvidia_nic_firmware_image", e)
        else {
            panic!("not a failure")
        };
        assert_eq!(e.kind, ErrorKind::Servicing);
        assert!(
            e.details.starts_with(
                "Error performing service step update_nvidia_nic_firmware_image: mstflint was not found in /usr/sbin:/usr/bin"
            ),
            "{e}"
        );
        let psid = NicFwError::MismatchComponentFlavor("The provided psid A does not match".into());
        let e = super::super::nicfw::to_command_error(&psid);
        let Outcome::Failed(e) =
            step_failed(StepKind::Clean, "update_nvidia_nic_firmware_image", e)
        else {
            panic!("not a failure")
        };
        let v = serde_json::to_value(&e).unwrap();
        assert_eq!(
            v,
            json!({"type": "MismatchComponentFlavor", "code": 500, "message": "An error occurred",
                "details": "The provided psid A does not match"})
        );
    }

    async fn deploy_priority_of(state: AgentState, step: &str) -> Option<u64> {
        let Outcome::Done(v) = get_steps(Arc::new(state), StepKind::Deploy, None).await else {
            panic!("get_deploy_steps failed")
        };
        v["deploy_steps"][super::super::managers::generic::NAME]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["step"] == step)
            .and_then(|s| s["priority"].as_u64())
    }

    #[tokio::test]
    async fn ipa_inject_files_priority_sets_the_deploy_priority() {
        let plain = AgentState::new(Config::default(), None);
        assert_eq!(deploy_priority_of(plain, "inject_files").await, Some(0));
        let config = Config {
            inject_files_priority: 50,
            ..Config::default()
        };
        let state = AgentState::new(config, None);
        assert_eq!(deploy_priority_of(state, "inject_files").await, Some(50));
        let state = AgentState::new(
            Config {
                inject_files_priority: 50,
                ..Config::default()
            },
            None,
        );
        assert_eq!(deploy_priority_of(state, "write_image").await, Some(0));
    }
}
