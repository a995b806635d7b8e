//! The agent's core: [`command`] (a command's result, its IPA error
//! classes, and the history that runs commands), [`state`] (the shared
//! state, which owns the history), [`commands`] (every command and step
//! handler, each request parsed into a typed command where it arrives),
//! [`power`].

pub mod command;
pub mod commands;
pub mod power;
pub mod state;
