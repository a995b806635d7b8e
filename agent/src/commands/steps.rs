//! The in-band steps as a static table of data (name, interface, priorities,
//! flags, arguments) plus the shared logic of `get_*_steps` and
//! `execute_*_step` for cleaning, deployment and servicing (PROTOCOL.md
//! §1.7, §7.1).
//!
//! Only steps this agent really implements are listed: Ironic runs every
//! step reported with a priority above zero during automated cleaning, so
//! advertising an unimplemented one would make cleaning fail.

use std::sync::Arc;

use serde_json::{json, Map, Value};

use super::context::Context;
use super::params::{ExecuteStep, GetSteps, ParamsError};
use super::step_call::{typed, PreparedStep, RawCall, StepCall};
use super::{CommandError, ErrorKind, Outcome};
use crate::node::Node;
use crate::state::AgentState;

/// Name under which steps are grouped (Ironic flattens the groups).
pub const HARDWARE_MANAGER: &str = "GenericHardwareManager";
/// Hardware manager versions, echoed back by Ironic as `clean_version` etc.
pub fn hardware_manager_version() -> Value {
    json!({"generic_hardware_manager": "1.2"})
}

/// Cleaning or deployment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepKind {
    /// `clean.*`
    Clean,
    /// `deploy.*`
    Deploy,
    /// `service.*`
    Service,
}

impl StepKind {
    fn word(self) -> &'static str {
        match self {
            Self::Clean => "clean",
            Self::Deploy => "deploy",
            Self::Service => "service",
        }
    }

    fn error_kind(self) -> ErrorKind {
        match self {
            Self::Clean => ErrorKind::Cleaning,
            Self::Deploy => ErrorKind::Deployment,
            Self::Service => ErrorKind::Servicing,
        }
    }
}

/// Description of one step argument (`argsinfo`).
#[derive(Debug)]
pub struct ArgInfo {
    /// Argument name.
    pub name: &'static str,
    /// Human description.
    pub description: &'static str,
    /// Whether Ironic must supply it.
    pub required: bool,
}

/// One row of the step table.
#[derive(Debug)]
pub struct Step {
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

/// Every step this agent implements.
pub static STEPS: &[Step] = &[
    Step {
        name: "write_image",
        interface: "deploy",
        clean_priority: None,
        deploy_priority: Some(0),
        service_priority: Some(0),
        abortable: false,
        reboot_requested: false,
        argsinfo: &[
            ArgInfo {
                name: "image_info",
                description: "image info",
                required: true,
            },
            ArgInfo {
                name: "configdrive",
                description: "configdrive",
                required: false,
            },
        ],
        prepare: super::image::prepare_write_image,
    },
    Step {
        // Metal3/OpenShift's custom deploy step (PROTOCOL.md §6.3), never run
        // unless asked for (priority 0).
        name: "install_coreos",
        interface: "deploy",
        clean_priority: None,
        deploy_priority: Some(0),
        service_priority: None,
        abortable: false,
        reboot_requested: false,
        argsinfo: &[
            ArgInfo {
                name: "image_info",
                description: "image to write, as for write_image; default: the node's instance_info.image_source with its checksum",
                required: false,
            },
            ArgInfo {
                name: "ignition",
                description: "Ignition config (object or JSON text); default: the config drive's user_data",
                required: false,
            },
            ArgInfo {
                name: "append_karg",
                description: "kernel arguments to append (list, or comma-separated); default: the config drive's meta_data.coreos_append_karg",
                required: false,
            },
            ArgInfo {
                name: "copy_network",
                description: "carry the ramdisk's network into the image as NetworkManager keyfiles (coreos-installer --copy-network); default: the config drive's meta_data.coreos_copy_network",
                required: false,
            },
        ],
        prepare: |c, _| typed(c, super::coreos::install_coreos_step),
    },
    Step {
        name: "erase_devices_metadata",
        interface: "deploy",
        clean_priority: Some(99),
        deploy_priority: Some(0),
        service_priority: None,
        abortable: true,
        reboot_requested: false,
        argsinfo: &[],
        prepare: |c, _| typed(c, super::erase::erase_devices_metadata_step),
    },
    Step {
        name: "erase_devices",
        interface: "deploy",
        clean_priority: Some(10),
        deploy_priority: None,
        service_priority: None,
        abortable: true,
        reboot_requested: false,
        argsinfo: &[],
        prepare: |c, _| typed(c, super::erase::erase_devices_step),
    },
    Step {
        name: "erase_devices_express",
        interface: "deploy",
        clean_priority: Some(0),
        deploy_priority: None,
        service_priority: None,
        abortable: true,
        reboot_requested: false,
        argsinfo: &[],
        prepare: |c, _| typed(c, super::erase::erase_devices_express_step),
    },
    Step {
        name: "inject_files",
        interface: "deploy",
        clean_priority: None,
        deploy_priority: Some(0),
        service_priority: Some(0),
        abortable: false,
        reboot_requested: false,
        argsinfo: &[
            ArgInfo {
                name: "files",
                description: "Files to inject, a list of file structures with keys: 'path' (path to the file), 'partition' (partition specifier), 'content' (base64 encoded string, or an http(s) URL), 'mode' (new file mode), 'dirmode' (mode for the leaf directory, if created), 'owner', 'group', 'deleted'. Merged with the values from node.properties[inject_files].",
                required: false,
            },
            ArgInfo {
                name: "verify_ca",
                description: "Whether to verify TLS certificates. Global agent options are used by default.",
                required: false,
            },
        ],
        prepare: |c, _| typed(c, super::inject::inject_files_step),
    },
    Step {
        name: "erase_pstore",
        interface: "deploy",
        clean_priority: Some(0),
        deploy_priority: None,
        service_priority: None,
        abortable: true,
        reboot_requested: false,
        argsinfo: &[],
        prepare: |c, _| typed(c, super::firmware_state::erase_pstore_step),
    },
    Step {
        name: "clean_uefi_nvram",
        interface: "deploy",
        clean_priority: Some(0),
        deploy_priority: Some(0),
        service_priority: None,
        abortable: true,
        reboot_requested: false,
        argsinfo: &[ArgInfo {
            name: "match_patterns",
            description: "A list of regular expressions; UEFI boot entries whose device path matches one are removed (default: disk entries and shim/GRUB loaders, network boot entries are kept)",
            required: false,
        }],
        prepare: |c, _| typed(c, super::firmware_state::clean_uefi_nvram_step),
    },
    Step {
        name: "delete_configuration",
        interface: "raid",
        clean_priority: Some(0),
        deploy_priority: None,
        service_priority: Some(0),
        abortable: true,
        reboot_requested: false,
        argsinfo: &[],
        prepare: |c, _| typed(c, super::raid::delete_configuration_step),
    },
    Step {
        name: "create_configuration",
        interface: "raid",
        clean_priority: Some(0),
        deploy_priority: None,
        service_priority: Some(0),
        abortable: true,
        reboot_requested: false,
        argsinfo: &[],
        prepare: |c, _| typed(c, super::raid::create_configuration_step),
    },
    Step {
        name: "apply_configuration",
        interface: "raid",
        clean_priority: None,
        deploy_priority: Some(0),
        service_priority: Some(0),
        abortable: false,
        reboot_requested: false,
        argsinfo: &[
            ArgInfo {
                name: "raid_config",
                description: "The RAID configuration to apply.",
                required: true,
            },
            ArgInfo {
                name: "delete_existing",
                description: "Setting this to 'True' indicates to delete existing RAID configuration prior to creating the new configuration. Default value is 'True'.",
                required: false,
            },
        ],
        prepare: |c, _| typed(c, super::raid::apply_configuration_step),
    },
    Step {
        name: "burnin_cpu",
        interface: "deploy",
        clean_priority: Some(0),
        deploy_priority: None,
        service_priority: Some(0),
        abortable: true,
        reboot_requested: false,
        argsinfo: &[],
        prepare: |c, _| typed(c, super::burnin::burnin_cpu_step),
    },
    Step {
        name: "burnin_disk",
        interface: "deploy",
        clean_priority: Some(0),
        deploy_priority: None,
        service_priority: None,
        abortable: true,
        reboot_requested: false,
        argsinfo: &[],
        prepare: |c, _| typed(c, super::burnin::burnin_disk_step),
    },
    Step {
        name: "burnin_memory",
        interface: "deploy",
        clean_priority: Some(0),
        deploy_priority: None,
        service_priority: Some(0),
        abortable: true,
        reboot_requested: false,
        argsinfo: &[],
        prepare: |c, _| typed(c, super::burnin::burnin_memory_step),
    },
    Step {
        name: "burnin_network",
        interface: "deploy",
        clean_priority: Some(0),
        deploy_priority: None,
        service_priority: Some(0),
        abortable: true,
        reboot_requested: false,
        argsinfo: &[],
        prepare: |c, _| typed(c, super::burnin::burnin_network_step),
    },
];

impl Step {
    fn priority(&self, kind: StepKind) -> Option<u32> {
        match kind {
            StepKind::Clean => self.clean_priority,
            StepKind::Deploy => self.deploy_priority,
            StepKind::Service => self.service_priority,
        }
    }

    fn describe(&self, priority: u32) -> Value {
        let mut v = json!({
            "step": self.name,
            "priority": priority,
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
                        a.name.to_string(),
                        json!({"description": a.description, "required": a.required}),
                    )
                })
                .collect();
            v["argsinfo"] = Value::Object(args);
        }
        v
    }
}

/// A priority the agent's configuration sets instead of the table's:
/// `ipa-inject-files-priority` for the `inject_files` deploy step.
fn configured_priority(state: &AgentState, step: &str, kind: StepKind) -> Option<u32> {
    (kind == StepKind::Deploy && step == "inject_files")
        .then_some(state.config.inject_files_priority)
}

/// The node of a request's `node` parameter, a bad section named below it.
fn node_param(doc: Value) -> Result<Option<Node>, ParamsError> {
    Node::parse(doc).map_err(|e| ParamsError::at(&format!("node.{}", e.path), e.reason))
}

/// A `get_*_steps` request: the node, if it sent one (parameters that are
/// not an object carry none).
pub fn parse_get(params: Value) -> Result<Option<Node>, ParamsError> {
    let request: GetSteps = super::params::parse(&params).unwrap_or_default();
    node_param(request.node)
}

/// `get_clean_steps` / `get_deploy_steps` / `get_service_steps`: caches the
/// node and lists the steps.
pub async fn get_steps(state: Arc<AgentState>, kind: StepKind, node: Option<Node>) -> Outcome {
    if let Some(node) = node {
        state.cache_node(node);
    }
    let steps: Vec<Value> = STEPS
        .iter()
        .filter_map(|s| {
            s.priority(kind)
                .map(|p| s.describe(configured_priority(&state, s.name, kind).unwrap_or(p)))
        })
        .collect();
    Outcome::Done(json!({
        format!("{}_steps", kind.word()): {HARDWARE_MANAGER: steps},
        "hardware_manager_version": hardware_manager_version(),
    }))
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
    let request: ExecuteStep = super::params::parse(&params)?;
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
    let ours = hardware_manager_version();
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
    let plan = match STEPS
        .iter()
        .find(|s| s.name == name && s.priority(kind).is_some())
    {
        Some(def) => {
            let call = StepCall {
                node: node.clone().or_else(|| ctx.cached_node.clone()),
                args: request.step.args.unwrap_or_default(),
            };
            (def.prepare)(call, ctx).map_err(|e| step_failed(kind, &name, e))
        }
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
    use crate::config::Config;

    async fn deploy_priority_of(state: AgentState, step: &str) -> Option<u64> {
        let Outcome::Done(v) = get_steps(Arc::new(state), StepKind::Deploy, None).await else {
            panic!("get_deploy_steps failed")
        };
        v["deploy_steps"][HARDWARE_MANAGER]
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
