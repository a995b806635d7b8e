//! The command table: every `extension.method` the agent serves, whether it
//! runs synchronously inside the request or in the background, how its
//! parameters are validated, and the handler. Adding a command means adding
//! one row here.

use serde_json::Value;

use super::context::Context;
use super::params::{self, InstallBootloader};
use super::request::{ParseResult, Request};
pub use crate::commands::history::{CommandFuture, Mode};
use crate::commands::steps::{self, StepKind};

/// One row of the command table.
#[derive(Debug)]
pub struct CommandSpec {
    /// Extension name (`clean`).
    pub extension: &'static str,
    /// Method name (`execute_clean_step`).
    pub method: &'static str,
    /// Sync or async.
    pub mode: Mode,
    /// The request's parameters as a typed command, before anything is
    /// recorded (HTTP 400 on error).
    pub parse: fn(Value, &Context) -> ParseResult,
}

/// A command without parameters: any are accepted (IPA ignores extra ones).
macro_rules! bare {
    ($variant:ident) => {
        |_, _| Ok(Request::$variant)
    };
}

/// Every command the agent serves.
pub static COMMANDS: &[CommandSpec] = &[
    CommandSpec {
        extension: "clean",
        method: "get_clean_steps",
        mode: Mode::Sync,
        parse: |p, _| {
            steps::parse_get(p).map(|node| Request::GetSteps {
                kind: StepKind::Clean,
                node,
            })
        },
    },
    CommandSpec {
        extension: "clean",
        method: "execute_clean_step",
        mode: Mode::Async,
        parse: |p, c| steps::parse_execute(p, StepKind::Clean, c).map(Request::ExecuteStep),
    },
    CommandSpec {
        extension: "deploy",
        method: "get_deploy_steps",
        mode: Mode::Sync,
        parse: |p, _| {
            steps::parse_get(p).map(|node| Request::GetSteps {
                kind: StepKind::Deploy,
                node,
            })
        },
    },
    CommandSpec {
        extension: "deploy",
        method: "execute_deploy_step",
        mode: Mode::Async,
        parse: |p, c| steps::parse_execute(p, StepKind::Deploy, c).map(Request::ExecuteStep),
    },
    CommandSpec {
        extension: "service",
        method: "get_service_steps",
        mode: Mode::Sync,
        parse: |p, _| {
            steps::parse_get(p).map(|node| Request::GetSteps {
                kind: StepKind::Service,
                node,
            })
        },
    },
    CommandSpec {
        extension: "service",
        method: "execute_service_step",
        mode: Mode::Async,
        parse: |p, c| steps::parse_execute(p, StepKind::Service, c).map(Request::ExecuteStep),
    },
    CommandSpec {
        extension: "standby",
        method: "prepare_image",
        mode: Mode::Async,
        parse: |p, c| {
            crate::commands::image::parse_prepare_image(p, c)
                .map(|r| Request::PrepareImage(Box::new(r)))
        },
    },
    CommandSpec {
        extension: "standby",
        method: "get_partition_uuids",
        mode: Mode::Sync,
        parse: bare!(GetPartitionUuids),
    },
    CommandSpec {
        extension: "standby",
        method: "sync",
        mode: Mode::Sync,
        parse: bare!(Sync),
    },
    CommandSpec {
        extension: "standby",
        method: "power_off",
        mode: Mode::Async,
        parse: bare!(PowerOff),
    },
    CommandSpec {
        extension: "standby",
        method: "reboot",
        mode: Mode::Async,
        parse: bare!(Reboot),
    },
    CommandSpec {
        extension: "standby",
        method: "run_image",
        mode: Mode::Async,
        parse: bare!(Reboot),
    },
    CommandSpec {
        extension: "image",
        method: "install_bootloader",
        mode: Mode::Async,
        parse: |p, c| {
            params::parse::<InstallBootloader>(&p)
                .map(|b| Request::InstallBootloader(b, c.cached_node.clone()))
        },
    },
    CommandSpec {
        extension: "log",
        method: "collect_system_logs",
        mode: Mode::Sync,
        parse: bare!(CollectSystemLogs),
    },
    CommandSpec {
        extension: "rescue",
        method: "finalize_rescue",
        mode: Mode::Sync,
        parse: |p, _| params::parse(&p).map(Request::FinalizeRescue),
    },
    CommandSpec {
        extension: "system",
        method: "lockdown",
        mode: Mode::Sync,
        parse: bare!(Lockdown),
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
