//! Every command and step the agent serves: the table that maps
//! `extension.method` names to parsers ([`registry`]), the typed request a
//! parser makes of the JSON where it arrives ([`request::Request`]), and
//! the handlers. What a command is whatever it does (its result, errors,
//! and the history that runs it) is [`crate::command`], below the agent's
//! state; the handlers here take the state.

pub mod assisted;
pub mod bootloader;
pub mod burnin;
pub mod context;
pub mod coreos;
pub mod coreos_host;
pub mod erase;
pub mod firmware_state;
pub mod image;
pub mod image_errors;
pub mod inject;
pub mod logs;
pub mod managers;
pub mod nicfw;
pub mod node_check;
pub mod params;
pub mod partition_image;
pub mod raid;
pub mod registry;
pub mod request;
pub mod rescue;
#[cfg(test)]
mod service;
pub mod standby;
pub mod step_call;
pub mod step_kind;
pub mod steps;
pub mod system;
pub mod target;

pub use crate::command::{history, CommandError, CommandResult, CommandStatus, ErrorKind, Outcome};
