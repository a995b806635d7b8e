//! `install_coreos` in the container form (`Config::host_root` set: the
//! agent is OpenShift's `ironic-agent` container on a CoreOS live system),
//! as OpenShift's hardware manager does it (PROTOCOL.md §6.3; its other
//! step is [`super::assisted`]).
//!
//! `install_coreos`, in order:
//! 1. the inputs, all checked before any disk is touched: the config drive
//!    must be data (a pre-rendered one is IPA's error); the Ignition config
//!    is `user_data` (or the step's `ignition`) with the first-boot host
//!    name added ([`installer::with_firstboot_hostname`]); the kernel
//!    arguments `meta_data.coreos_append_karg` (or `append_karg`);
//!    `instance_info.image_source` → `--image-url URL --insecure`, none →
//!    `--offline`; `IPA_COREOS_IP_OPTIONS`; `--copy-network` from
//!    `meta_data.coreos_copy_network` (or `copy_network`), else
//!    `IPA_COREOS_COPY_NETWORK=true`. The step's `image_info` is refused:
//!    coreos-installer verifies signatures, not checksums;
//! 2. software RAID deleted unless the node's `automated_clean` is false
//!    (a failure is a warning);
//! 3. the root device from the hints, as for any image write;
//! 4. the Ignition config written to the host's `/tmp/ironic.ign`, and
//!    `coreos-installer install` run chrooted, three tries
//!    ([`agent_devices::hostroot::installer`]);
//! 5. after success the partition table re-read and, when the machine booted
//!    in UEFI mode, boot entries for the disk's loaders (six tries, 5 s
//!    apart, as upstream; never in host mode);
//! 6. after the last failed try the root device's metadata is erased.
//!    OpenShift passes `--preserve-on-error` because IPA's cleaning wipes
//!    the disk later, but a failure after the image copy (writing the
//!    Ignition config, the kernel arguments, the network) leaves a complete
//!    CoreOS that would boot without its Ignition, and nothing promises
//!    cleaning runs first (`automated_clean` false); so the agent erases it.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use super::dispatch::params::{IgnitionText, InstallCoreosArgs, KernelArgs};
use super::dispatch::step_call::StepCall;
use super::{CommandError, ErrorKind};
use crate::state::AgentState;
use agent_base::config::RunMode;
use agent_devices::disk::WritePolicy;
use agent_devices::hostroot::installer::{self, Plan};
use ironic_types::node::{ConfigDrive, InstanceInfo};

/// IPA's text for a pre-rendered config drive.
pub(crate) const PRE_RENDERED: &str =
    "Cannot use a pre-rendered configdrive, please pass it as JSON data";
/// The environment's extra kernel arguments (OpenShift's unit sets them).
pub(crate) const IP_OPTIONS_ENV: &str = "IPA_COREOS_IP_OPTIONS";
/// The environment's default for `--copy-network`.
pub(crate) const COPY_NETWORK_ENV: &str = "IPA_COREOS_COPY_NETWORK";
/// UEFI boot entries: tries and the pause between them (a firmware that
/// is slow to take the variables, Red Hat bug 2057668).
const UEFI_TRIES: u32 = 6;
const UEFI_PAUSE: Duration = Duration::from_secs(5);

fn deploy_error(msg: impl std::fmt::Display) -> CommandError {
    CommandError::new(ErrorKind::Deployment, msg.to_string())
}

fn invalid(msg: impl Into<String>) -> CommandError {
    CommandError::new(ErrorKind::InvalidCommandParams, msg.into())
}

/// The environment variables OpenShift's manager reads.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct HostEnv {
    /// `IPA_COREOS_IP_OPTIONS`.
    pub ip_options: Option<String>,
    /// `IPA_COREOS_COPY_NETWORK` is `true` (any case).
    pub copy_network: bool,
}

impl HostEnv {
    /// From the agent's environment.
    pub(crate) fn from_process() -> Self {
        Self {
            ip_options: std::env::var(IP_OPTIONS_ENV).ok(),
            copy_network: std::env::var(COPY_NETWORK_ENV)
                .is_ok_and(|v| v.eq_ignore_ascii_case("true")),
        }
    }
}

/// Everything the install needs but the device, checked.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Inputs {
    /// The Ignition config to write, if any.
    pub ignition: Option<Value>,
    /// The plan (its `device` filled in later).
    pub plan: Plan,
}

/// The inputs from the step's arguments, the node's `instance_info`, the
/// environment and the host name.
pub(crate) fn inputs(
    args: &InstallCoreosArgs,
    ii: &InstanceInfo,
    env: &HostEnv,
    hostname: &str,
) -> Result<Inputs, CommandError> {
    if args.image_info.is_some() {
        return Err(invalid(
            "install_coreos: the image_info argument is not used in the container form: coreos-installer installs instance_info.image_source (or, without one, the live system's own image)",
        ));
    }
    let data = match &ii.configdrive {
        None => serde_json::Map::new(),
        Some(ConfigDrive::Rendered(s)) if s.is_empty() => serde_json::Map::new(),
        Some(ConfigDrive::Rendered(_)) => return Err(deploy_error(PRE_RENDERED)),
        Some(ConfigDrive::Data(m)) => m.clone(),
    };
    let user_data = match &args.ignition {
        Some(IgnitionText(bytes)) => Some(serde_json::from_slice::<Value>(bytes).map_err(|e| {
            invalid(format!(
                "install_coreos: the ignition argument is not JSON: {e}"
            ))
        })?),
        None => data.get("user_data").cloned(),
    };
    let ignition = installer::with_firstboot_hostname(user_data.as_ref(), hostname)
        .map_err(|e| invalid(format!("install_coreos: {e}")))?;
    let append_karg = kernel_args(args.append_karg.clone(), ii)?;
    let copy_network = match args.copy_network {
        Some(b) => b,
        None => meta_copy_network(ii)?.unwrap_or(env.copy_network),
    };
    Ok(Inputs {
        plan: Plan {
            ignition: ignition.is_some(),
            append_karg,
            image_url: ii.image_location().map(str::to_string),
            ip_options: env.ip_options.clone(),
            copy_network,
            device: PathBuf::new(),
        },
        ignition,
    })
}

// The config drive's meta_data, read by both forms of install_coreos.

/// The kernel arguments to append: the step argument (already checked),
/// else the config drive dict's `meta_data.coreos_append_karg`.
pub(crate) fn kernel_args(
    arg: Option<KernelArgs>,
    ii: &InstanceInfo,
) -> Result<Vec<String>, CommandError> {
    if let Some(KernelArgs(list)) = arg {
        return Ok(list);
    }
    let from_meta = ii
        .configdrive
        .as_ref()
        .and_then(|c| c.meta_data("coreos_append_karg"));
    match from_meta {
        Some(v) => KernelArgs::from_value(v)
            .map(|k| k.0)
            .map_err(|e| invalid(format!("meta_data.coreos_append_karg: {e}"))),
        None => Ok(Vec::new()),
    }
}

/// The config drive dict's `meta_data.coreos_copy_network`, `None` when it
/// is not there.
pub(crate) fn meta_copy_network(ii: &InstanceInfo) -> Result<Option<bool>, CommandError> {
    let v = ii
        .configdrive
        .as_ref()
        .and_then(|c| c.meta_data("coreos_copy_network"));
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(Value::String(s)) => match s.trim().to_ascii_lowercase().as_str() {
            "true" | "yes" | "1" | "on" => Ok(Some(true)),
            "false" | "no" | "0" | "off" | "" => Ok(Some(false)),
            _ => Err(invalid(format!(
                "meta_data.coreos_copy_network {s:?} is not a boolean"
            ))),
        },
        Some(other) => Err(invalid(format!(
            "meta_data.coreos_copy_network {other} is not a boolean"
        ))),
    }
}

/// The `install_coreos` deploy step in the container form.
pub(crate) async fn install_coreos(
    state: Arc<AgentState>,
    call: StepCall<InstallCoreosArgs>,
    host_root: PathBuf,
) -> Result<Value, CommandError> {
    let ii = call
        .node
        .as_ref()
        .map(|n| n.instance_info().clone())
        .unwrap_or_default();
    let hostname = agent_devices::inventory::system::hostname(Path::new("/"));
    let Inputs { ignition, mut plan } =
        inputs(&call.args, &ii, &HostEnv::from_process(), &hostname)?;
    if plan.image_url.is_none() {
        tracing::info!("install_coreos: no image_source, coreos-installer installs the live system's own image (--offline)");
    } else {
        tracing::warn!(
            image = plan.image_url.as_deref().unwrap_or_default(),
            "install_coreos: coreos-installer --insecure: the image is not verified"
        );
    }
    try_delete_raid(&state, &call).await;
    plan.device = super::target::choose_device(&state, call.node.as_ref())?;
    // What an earlier write reported no longer describes the disk.
    state.set_partition_uuids(Some(json!({})));
    let args = installer::args(&plan);
    let device = plan.device.clone();
    let root = host_root.clone();
    let policy = WritePolicy::from_config(&state.config);
    let uefi = state.config.mode != RunMode::Host;
    tokio::task::spawn_blocking(move || {
        run(&root, ignition.as_ref(), &args, &device, &policy, uefi)
    })
    .await
    .map_err(|e| deploy_error(format!("coreos-installer runner crashed: {e}")))??;
    tracing::info!(device = %plan.device.display(), "Successfully installed via CoreOS installer");
    Ok(Value::Null)
}

/// Writes the Ignition file, runs the installer, and finishes or erases.
fn run(
    root: &Path,
    ignition: Option<&Value>,
    args: &[String],
    device: &Path,
    policy: &WritePolicy,
    uefi: bool,
) -> Result<(), CommandError> {
    let written = match ignition {
        Some(cfg) => {
            tracing::debug!(ignition = %cfg, "Will use ignition");
            Some(installer::write_ignition(root, cfg).map_err(|e| {
                deploy_error(format!(
                    "writing the Ignition config to {}{}: {e}",
                    root.display(),
                    installer::IGNITION_PATH
                ))
            })?)
        }
        None => None,
    };
    let result = installer::install(root, args);
    if let Some(path) = written {
        // It may hold secrets; coreos-installer has copied it.
        let _ = std::fs::remove_file(path);
    }
    if let Err(e) = result {
        erase_after_failure(device, policy);
        return Err(deploy_error(e));
    }
    rescan(device);
    if uefi && Path::new("/sys/firmware/efi").is_dir() {
        uefi_entries(device)?;
    } else if Path::new("/sys/firmware/efi").is_dir() {
        tracing::warn!(device = %device.display(), "host mode: this machine's UEFI boot entries are not touched");
    }
    Ok(())
}

/// After the last failed try: the device's tables and signatures erased,
/// so a half-installed CoreOS cannot boot.
fn erase_after_failure(device: &Path, policy: &WritePolicy) {
    match agent_devices::disk::erase::erase_all_metadata(&[device.to_path_buf()], policy) {
        Ok(()) => {
            tracing::warn!(device = %device.display(), "coreos-installer failed: the device's metadata was erased so it does not boot a partial install")
        }
        Err(e) => {
            tracing::error!(device = %device.display(), "coreos-installer failed, and erasing the device's metadata also failed: {e:#}")
        }
    }
}

/// Has the kernel re-read the new partition table (a warning if it
/// cannot).
fn rescan(device: &Path) {
    let r = agent_devices::disk::busy::retry(device, "re-reading its partition table", || {
        std::fs::File::open(device).and_then(|f| agent_devices::disk::ioctl::reread_partitions(&f))
    });
    if let Err(e) = r {
        tracing::warn!(device = %device.display(), "re-reading the partition table after coreos-installer: {e}");
    }
}

/// Boot entries for the installed disk's loaders.
fn uefi_entries(device: &Path) -> Result<(), CommandError> {
    tracing::info!(device = %device.display(), "Configuring UEFI boot");
    let efivars = Path::new(agent_contents::uefi::efivars::EFIVARS);
    let mut tries = 0;
    loop {
        tries += 1;
        match agent_contents::uefi::install(device, efivars) {
            Ok(entries) => {
                tracing::info!(?entries, "UEFI boot entries created");
                return Ok(());
            }
            Err(e) if tries < UEFI_TRIES => {
                tracing::warn!("UEFI boot configuration failed (retrying): {e}");
                std::thread::sleep(UEFI_PAUSE);
            }
            Err(e) => {
                return Err(CommandError::new(
                    ErrorKind::CommandExecution,
                    format!("configuring UEFI boot from {}: {e}", device.display()),
                ))
            }
        }
    }
}

/// `delete_configuration` before the install, unless cleaning is off.
async fn try_delete_raid(state: &Arc<AgentState>, call: &StepCall<InstallCoreosArgs>) {
    if call.node_document().get("automated_clean") == Some(&Value::Bool(false)) {
        tracing::debug!("Cleaning is disabled, will not try to delete software RAID");
        return;
    }
    tracing::info!("Deleting any software RAID devices");
    let node = call.node_document().clone();
    let state = state.clone();
    let r = tokio::task::spawn_blocking(move || super::raid::delete_all(&state, &node)).await;
    match r {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::warn!(
            "Unable to delete software RAID configuration, deployment may fail: {}",
            e.details
        ),
        Err(e) => {
            tracing::warn!("Unable to delete software RAID configuration, deployment may fail: {e}")
        }
    }
}

#[cfg(test)]
#[path = "coreos_host_tests.rs"]
mod tests;
