//! The inputs of `install_coreos`, checked before any disk is touched:
//! the container form's (`coreos_host.rs`) from the step's arguments, the
//! node's `instance_info` and config drive, OpenShift's environment
//! variables and the host name; and the config drive's `meta_data` both
//! forms read (`coreos_append_karg`, `coreos_copy_network`).

use std::path::PathBuf;

use serde_json::Value;

use super::dispatch::params::{IgnitionText, InstallCoreosArgs, KernelArgs};
use super::{CommandError, ErrorKind};
use agent_devices::hostroot::installer::{self, Plan};
use ironic_types::node::{ConfigDrive, InstanceInfo};

fn deploy_error(msg: impl std::fmt::Display) -> CommandError {
    CommandError::new(ErrorKind::Deployment, msg.to_string())
}

/// IPA's text for a pre-rendered config drive.
pub(crate) const PRE_RENDERED: &str =
    "Cannot use a pre-rendered configdrive, please pass it as JSON data";
/// The environment's extra kernel arguments (OpenShift's unit sets them).
pub(crate) const IP_OPTIONS_ENV: &str = "IPA_COREOS_IP_OPTIONS";
/// The environment's default for `--copy-network`.
pub(crate) const COPY_NETWORK_ENV: &str = "IPA_COREOS_COPY_NETWORK";

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

#[cfg(test)]
#[path = "coreos_inputs_tests.rs"]
mod tests;
