//! Every command and step the agent serves: the table that maps
//! `extension.method` names to parsers ([`registry`]), the typed request a
//! parser makes of the JSON where it arrives ([`request::Request`]), and
//! the handlers. What a command is whatever it does (its result, errors,
//! and the history that runs it) is [`crate::command`], below the agent's
//! state; the handlers here take the state.

pub(crate) mod assisted;
pub(crate) mod bootloader;
pub(crate) mod burnin;
pub mod context;
pub mod coreos;
pub(crate) mod coreos_host;
pub(crate) mod erase;
pub(crate) mod firmware_state;
pub(crate) mod image;
pub mod image_errors;
pub(crate) mod inject;
pub(crate) mod logs;
pub mod managers;
pub(crate) mod nicfw;
pub(crate) mod node_check;
pub(crate) mod params;
pub(crate) mod partition_image;
pub(crate) mod raid;
pub mod registry;
pub(crate) mod request;
pub(crate) mod rescue;
#[cfg(test)]
mod service;
pub(crate) mod standby;
pub(crate) mod step_call;
pub(crate) mod step_kind;
pub mod steps;
pub mod system;
pub(crate) mod target;

pub use crate::command::{history, CommandError, CommandResult, CommandStatus, ErrorKind, Outcome};
