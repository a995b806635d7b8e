//! Every command and step the agent serves: [`dispatch`] takes a request
//! from its JSON to a typed request and its handler (the command table,
//! the checks at that edge, a step's typed call); the other modules are
//! the handlers. What a command is whatever it does (its result, errors,
//! and the history that runs it) is [`crate::command`], below the agent's
//! state; the handlers here take the state.

pub(crate) mod assisted;
pub(crate) mod bootloader;
pub(crate) mod burnin;
pub mod coreos;
pub(crate) mod coreos_host;
pub(crate) mod coreos_inputs;
pub mod dispatch;
pub(crate) mod erase;
pub(crate) mod firmware_state;
pub(crate) mod image;
pub mod image_errors;
pub(crate) mod inject;
pub(crate) mod logs;
pub mod managers;
pub(crate) mod nicfw;
pub(crate) mod partition_image;
pub(crate) mod raid;
pub(crate) mod rescue;
#[cfg(test)]
mod service;
pub(crate) mod standby;
pub mod steps;
pub mod system;
pub(crate) mod target;

pub use crate::command::{history, CommandError, CommandResult, CommandStatus, ErrorKind, Outcome};
