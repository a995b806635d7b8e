//! The generic hardware manager: every step this agent implements itself,
//! as a static table of data (name, interface, priorities per phase,
//! flags, arguments) and the function that prepares each step with its
//! parsed arguments. IPA's `GenericHardwareManager`, with its version.
//!
//! Only steps this agent really implements are listed: Ironic runs every
//! step reported with a priority above zero during automated cleaning, so
//! advertising an unimplemented one would make cleaning fail.

use super::{ArgDesc, Manager, ManagerVersion, StepInfo, SUPPORT_GENERIC};
use crate::commands::dispatch::context::Context;
use crate::commands::dispatch::step_call::{typed, PreparedStep, RawCall};
use crate::commands::dispatch::step_kind::StepKind;
use crate::commands::CommandError;
use crate::state::AgentState;

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

/// Every step this agent implements.
pub(crate) static STEPS: &[Step] = &[
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
        prepare: crate::commands::image::prepare_write_image,
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
        prepare: |c, _| typed(c, crate::commands::coreos::install_coreos_step),
    },
    Step {
        // OpenShift's converged assisted flow (PROTOCOL.md §6.3): the live
        // system's agent.service started and waited for; container form
        // only, never run unless asked for (priority 0).
        name: "start_assisted_install",
        interface: "deploy",
        clean_priority: None,
        deploy_priority: Some(0),
        service_priority: None,
        abortable: false,
        reboot_requested: false,
        argsinfo: &[],
        prepare: |c, _| typed(c, crate::commands::assisted::start_assisted_install),
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
        prepare: |c, _| typed(c, crate::commands::erase::erase_devices_metadata_step),
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
        prepare: |c, _| typed(c, crate::commands::erase::erase_devices_step),
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
        prepare: |c, _| typed(c, crate::commands::erase::erase_devices_express_step),
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
        prepare: |c, _| typed(c, crate::commands::inject::inject_files_step),
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
        prepare: |c, _| typed(c, crate::commands::firmware_state::erase_pstore_step),
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
        prepare: |c, _| typed(c, crate::commands::firmware_state::clean_uefi_nvram_step),
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
        prepare: |c, _| typed(c, crate::commands::raid::delete_configuration_step),
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
        prepare: |c, _| typed(c, crate::commands::raid::create_configuration_step),
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
        prepare: |c, _| typed(c, crate::commands::raid::apply_configuration_step),
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
        prepare: |c, _| typed(c, crate::commands::burnin::burnin_cpu_step),
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
        prepare: |c, _| typed(c, crate::commands::burnin::burnin_disk_step),
    },
    Step {
        name: "burnin_gpu",
        interface: "deploy",
        clean_priority: Some(0),
        deploy_priority: None,
        service_priority: Some(0),
        abortable: true,
        reboot_requested: false,
        argsinfo: &[],
        prepare: |c, _| typed(c, crate::commands::burnin::burnin_gpu_step),
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
        prepare: |c, _| typed(c, crate::commands::burnin::burnin_memory_step),
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
        prepare: |c, _| typed(c, crate::commands::burnin::burnin_network_step),
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
