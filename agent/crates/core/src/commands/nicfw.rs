//! The handlers of IPA 13's NVIDIA NIC firmware steps,
//! `update_nvidia_nic_firmware_image` (argument `images`) and
//! `update_nvidia_nic_firmware_settings` (argument `settings`): the
//! argument taken as sent, the work ([`agent_contents::nicfw`]) run off the async
//! runtime, and each failure reported as IPA's class for it — its firmware
//! classes as themselves, a tool that is missing or failed as an
//! execution error, which the step dispatcher turns into the phase's
//! error naming the step (IPA's `CleaningError` etc.).

use std::ffi::OsString;

use serde_json::{Map, Value};

use super::dispatch::context::Context;
use super::dispatch::step_call::{PreparedStep, RawCall};
use super::{CommandError, ErrorKind};
use crate::command::NicFirmwareError as Class;
use agent_contents::image::fetch::HttpOptions;
use agent_contents::nicfw::{self, NicFwError};

/// `update_nvidia_nic_firmware_image`, prepared.
pub(crate) fn prepare_image(
    call: RawCall,
    ctx: &Context,
    search_path: OsString,
) -> Result<PreparedStep, CommandError> {
    let images = only_arg(call.args, "images")?;
    // IPA's urlopen: the proxies of the agent's environment, no image
    // server credentials (`nicfw::image` drops them); here also the
    // configuration's CA, client certificate, time limits and retries.
    let mut http: HttpOptions = ctx.http.clone();
    http.use_environment_proxies();
    let md5_allowed = ctx.md5_allowed;
    Ok(Box::new(move |_state| {
        Box::pin(async move {
            let run = move || {
                let scratch = std::env::temp_dir();
                let env = nicfw::image::Env {
                    search_path: &search_path,
                    http: &http,
                    md5_allowed,
                    scratch: &scratch,
                };
                nicfw::image::update(&images, &env)
            };
            let outcome = blocking(run).await?;
            tracing::info!(burnt = ?outcome.burnt, current = ?outcome.current, "NVIDIA NIC firmware images applied");
            // IPA's step returns nothing.
            Ok(Value::Null)
        })
    }))
}

/// `update_nvidia_nic_firmware_settings`, prepared.
pub(crate) fn prepare_settings(
    call: RawCall,
    search_path: OsString,
) -> Result<PreparedStep, CommandError> {
    let settings = only_arg(call.args, "settings")?;
    Ok(Box::new(move |_state| {
        Box::pin(async move {
            let outcome =
                blocking(move || nicfw::settings::update(&settings, &search_path)).await?;
            tracing::info!(set = ?outcome.set, reset = ?outcome.reset, "NVIDIA NIC firmware settings applied");
            Ok(Value::Null)
        })
    }))
}

/// The step's one argument `name`; another argument, or none, fails as
/// IPA's call of the step would (an execution error naming it).
fn only_arg(mut args: Map<String, Value>, name: &str) -> Result<Value, CommandError> {
    let value = args.remove(name).ok_or_else(|| {
        CommandError::new(
            ErrorKind::CommandExecution,
            format!("the step's argument {name:?} is missing"),
        )
    })?;
    if let Some(other) = args.keys().next() {
        return Err(CommandError::new(
            ErrorKind::CommandExecution,
            format!("unexpected argument {other:?}: the step takes only {name:?}"),
        ));
    }
    Ok(value)
}

async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, NicFwError> + Send + 'static,
) -> Result<T, CommandError> {
    match tokio::task::spawn_blocking(work).await {
        Ok(r) => r.map_err(|e| to_command_error(&e)),
        Err(e) => Err(CommandError::new(
            ErrorKind::CommandExecution,
            format!("the firmware step's worker ended: {e}"),
        )),
    }
}

/// IPA's class of each failure.
pub(crate) fn to_command_error(e: &NicFwError) -> CommandError {
    let kind = match e {
        NicFwError::ToolMissing { .. }
        | NicFwError::Tool { .. }
        | NicFwError::Output(_)
        | NicFwError::Download { .. } => ErrorKind::CommandExecution,
        NicFwError::InvalidImageConfig(_) => ErrorKind::NicFirmware(Class::InvalidImageConfig),
        NicFwError::InvalidSettingsConfig(_) => {
            ErrorKind::NicFirmware(Class::InvalidSettingsConfig)
        }
        NicFwError::InvalidUrlScheme(_) => ErrorKind::NicFirmware(Class::InvalidUrlScheme),
        NicFwError::MismatchChecksum(_) => ErrorKind::NicFirmware(Class::MismatchChecksum),
        NicFwError::MismatchComponentFlavor(_) => {
            ErrorKind::NicFirmware(Class::MismatchComponentFlavor)
        }
        NicFwError::MismatchFwVersion(_) => ErrorKind::NicFirmware(Class::MismatchFwVersion),
        NicFwError::DuplicateComponentFlavor(_) => {
            ErrorKind::NicFirmware(Class::DuplicateComponentFlavor)
        }
        NicFwError::DuplicateDeviceId(_) => ErrorKind::NicFirmware(Class::DuplicateDeviceId),
        NicFwError::UnsupportedByMstconfig(_) => {
            ErrorKind::NicFirmware(Class::UnsupportedByMstconfig)
        }
        NicFwError::UnsupportedByFirmware(_) => {
            ErrorKind::NicFirmware(Class::UnsupportedByFirmware)
        }
    };
    if kind == ErrorKind::CommandExecution {
        tracing::error!("NVIDIA NIC firmware step failed: {e}");
    }
    CommandError::new(kind, e.to_string())
}
