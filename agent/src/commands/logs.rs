//! `log.collect_system_logs` (PROTOCOL.md §1.7): the bundle of [`crate::logs`],
//! built off the async runtime. Ironic only decodes and stores it (on
//! deploy failure by default).

use std::sync::Arc;

use serde_json::{json, Value};

use super::{CommandError, ErrorKind, Outcome};
use crate::logs::bundle;
use crate::state::AgentState;

/// `log.collect_system_logs` (sync).
pub async fn collect_system_logs(_state: Arc<AgentState>, _params: Value) -> Outcome {
    match tokio::task::spawn_blocking(bundle).await {
        Ok(Ok(b64)) => Outcome::Done(json!({ "system_logs": b64 })),
        Ok(Err(e)) => Outcome::Failed(CommandError::new(
            ErrorKind::CommandExecution,
            format!("collecting the system logs: {e}"),
        )),
        Err(e) => Outcome::Failed(CommandError::new(
            ErrorKind::CommandExecution,
            format!("log collector crashed: {e}"),
        )),
    }
}
