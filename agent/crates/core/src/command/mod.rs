//! What a command is, whatever it does: its status and result as Ironic
//! reads them (PROTOCOL.md §1.5), the typed errors it can end with (IPA's
//! error classes), and the per-boot history that runs commands and owns
//! the busy rule ([`history::CommandHistory`]). The agent's state owns
//! the history; the handlers ([`crate::commands`]) sit above both.

pub(crate) mod error;
pub mod history;

use serde::Serialize;
use serde_json::Value;

pub use error::{CommandError, ErrorKind, NicFirmwareError};

/// Status of a command, exactly the strings Ironic understands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum CommandStatus {
    /// Still running (async commands only).
    #[serde(rename = "RUNNING")]
    Running,
    /// Finished successfully.
    #[serde(rename = "SUCCEEDED")]
    Succeeded,
    /// Finished with `command_error` set.
    #[serde(rename = "FAILED")]
    Failed,
    /// The conductor's hardware manager versions differ from ours.
    #[serde(rename = "CLEAN_VERSION_MISMATCH")]
    CleanVersionMismatch,
}

/// The five keys IPA serialises for a command (PROTOCOL.md §1.5).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CommandResult {
    /// Random UUID4.
    pub id: String,
    /// The method name without the extension prefix.
    pub command_name: String,
    /// Current status.
    pub command_status: CommandStatus,
    /// `null`, or `{type, code, message, details}`.
    pub command_error: Option<CommandError>,
    /// Command specific result.
    pub command_result: Option<Value>,
}

/// How a finished command ended.
#[derive(Debug)]
pub enum Outcome {
    /// Success with a result document (may be `null`).
    Done(Value),
    /// The command failed.
    Failed(CommandError),
    /// A step was sent with another hardware manager version.
    VersionMismatch(CommandError),
}

impl From<Result<Value, CommandError>> for Outcome {
    fn from(r: Result<Value, CommandError>) -> Self {
        match r {
            Ok(v) => Outcome::Done(v),
            Err(e) => Outcome::Failed(e),
        }
    }
}
