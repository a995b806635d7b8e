//! The command table: every `extension.method` the agent serves, whether it
//! runs synchronously inside the request or in the background, how its
//! parameters are validated, and the handler. Adding a command means adding
//! one row here.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use serde_json::Value;

use super::params::{self, InstallBootloader, ParamsError};
use super::{bootloader, clean, deploy, service, standby, Outcome};
use crate::state::AgentState;

/// Sync commands answer with their final result; async ones with `RUNNING`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Runs inside the request.
    Sync,
    /// Runs in the background; the conductor polls the command list.
    Async,
}

/// A boxed command future.
pub type CommandFuture = Pin<Box<dyn Future<Output = Outcome> + Send>>;

/// One row of the command table.
#[derive(Debug)]
pub struct CommandSpec {
    /// Extension name (`clean`).
    pub extension: &'static str,
    /// Method name (`execute_clean_step`).
    pub method: &'static str,
    /// Sync or async.
    pub mode: Mode,
    /// Parameter check run before the command is recorded (HTTP 400 on error).
    pub validate: fn(&Value) -> Result<(), ParamsError>,
    /// The handler.
    pub run: fn(Arc<AgentState>, Value) -> CommandFuture,
}

/// Commands without parameters accept any (IPA ignores extra ones).
fn any_params(_: &Value) -> Result<(), ParamsError> {
    Ok(())
}

/// Every command the agent serves.
pub static COMMANDS: &[CommandSpec] = &[
    CommandSpec {
        extension: "clean",
        method: "get_clean_steps",
        mode: Mode::Sync,
        validate: any_params,
        run: |s, p| Box::pin(clean::get_clean_steps(s, p)),
    },
    CommandSpec {
        extension: "clean",
        method: "execute_clean_step",
        mode: Mode::Async,
        validate: params::check_execute_step,
        run: |s, p| Box::pin(clean::execute_clean_step(s, p)),
    },
    CommandSpec {
        extension: "deploy",
        method: "get_deploy_steps",
        mode: Mode::Sync,
        validate: any_params,
        run: |s, p| Box::pin(deploy::get_deploy_steps(s, p)),
    },
    CommandSpec {
        extension: "deploy",
        method: "execute_deploy_step",
        mode: Mode::Async,
        validate: params::check_execute_step,
        run: |s, p| Box::pin(deploy::execute_deploy_step(s, p)),
    },
    CommandSpec {
        extension: "service",
        method: "get_service_steps",
        mode: Mode::Sync,
        validate: any_params,
        run: |s, p| Box::pin(service::get_service_steps(s, p)),
    },
    CommandSpec {
        extension: "service",
        method: "execute_service_step",
        mode: Mode::Async,
        validate: params::check_execute_step,
        run: |s, p| Box::pin(service::execute_service_step(s, p)),
    },
    CommandSpec {
        extension: "standby",
        method: "prepare_image",
        mode: Mode::Async,
        validate: super::image::validate_prepare_image,
        run: |s, p| Box::pin(super::image::prepare_image(s, p)),
    },
    CommandSpec {
        extension: "standby",
        method: "get_partition_uuids",
        mode: Mode::Sync,
        validate: any_params,
        run: |s, p| Box::pin(standby::get_partition_uuids(s, p)),
    },
    CommandSpec {
        extension: "standby",
        method: "sync",
        mode: Mode::Sync,
        validate: any_params,
        run: |s, p| Box::pin(standby::sync(s, p)),
    },
    CommandSpec {
        extension: "standby",
        method: "power_off",
        mode: Mode::Async,
        validate: any_params,
        run: |s, p| Box::pin(standby::power_off(s, p)),
    },
    CommandSpec {
        extension: "standby",
        method: "reboot",
        mode: Mode::Async,
        validate: any_params,
        run: |s, p| Box::pin(standby::reboot(s, p)),
    },
    CommandSpec {
        extension: "standby",
        method: "run_image",
        mode: Mode::Async,
        validate: any_params,
        run: |s, p| Box::pin(standby::reboot(s, p)),
    },
    CommandSpec {
        extension: "image",
        method: "install_bootloader",
        mode: Mode::Async,
        validate: params::check::<InstallBootloader>,
        run: |s, p| Box::pin(bootloader::install_bootloader(s, p)),
    },
    CommandSpec {
        extension: "log",
        method: "collect_system_logs",
        mode: Mode::Sync,
        validate: any_params,
        run: |s, p| Box::pin(super::logs::collect_system_logs(s, p)),
    },
    CommandSpec {
        extension: "rescue",
        method: "finalize_rescue",
        mode: Mode::Sync,
        validate: params::check::<super::rescue::FinalizeRescue>,
        run: |s, p| Box::pin(super::rescue::finalize_rescue(s, p)),
    },
    CommandSpec {
        extension: "system",
        method: "lockdown",
        mode: Mode::Sync,
        validate: any_params,
        run: |s, p| Box::pin(super::system::lockdown(s, p)),
    },
];

/// Why a command name could not be resolved.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum LookupError {
    /// No `.` in the name.
    #[error("Command name must be of the form <extension>.<name>")]
    Malformed,
    /// Unknown extension (HTTP 404).
    #[error("Extension with id {0} not found.")]
    NoExtension(String),
    /// Known extension, unknown method (HTTP 400).
    #[error("Unknown command: {0}")]
    NoCommand(String),
}

/// Resolves `extension.method`.
pub fn lookup(name: &str) -> Result<&'static CommandSpec, LookupError> {
    let (ext, method) = name.split_once('.').ok_or(LookupError::Malformed)?;
    if !COMMANDS.iter().any(|c| c.extension == ext) {
        return Err(LookupError::NoExtension(ext.to_string()));
    }
    COMMANDS
        .iter()
        .find(|c| c.extension == ext && c.method == method)
        .ok_or_else(|| LookupError::NoCommand(name.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolves_names_like_ipa() {
        assert_eq!(lookup("clean.get_clean_steps").unwrap().mode, Mode::Sync);
        assert_eq!(lookup("noextension").unwrap_err(), LookupError::Malformed);
        assert_eq!(
            lookup("bogus.thing").unwrap_err(),
            LookupError::NoExtension("bogus".into())
        );
        assert_eq!(
            lookup("clean.bogus").unwrap_err(),
            LookupError::NoCommand("clean.bogus".into())
        );
    }

    #[test]
    fn names_are_unique() {
        for (i, a) in COMMANDS.iter().enumerate() {
            for b in &COMMANDS[i + 1..] {
                assert!(
                    (a.extension, a.method) != (b.extension, b.method),
                    "{}.{} twice",
                    a.extension,
                    a.method
                );
            }
        }
    }
}
