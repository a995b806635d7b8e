//! `log.collect_system_logs` (PROTOCOL.md §1.7): the bundle of [`agent_devices::logs`],
//! built off the async runtime. Ironic only decodes and stores it (on
//! deploy failure by default).

use std::sync::Arc;

use serde_json::json;

use super::{CommandError, ErrorKind, Outcome};
use crate::state::AgentState;
use agent_devices::logs::bundle;

/// `log.collect_system_logs` (sync).
pub(crate) async fn collect_system_logs(state: Arc<AgentState>) -> Outcome {
    // The conductor's `agent_skip_bmc_detect`: its BMC is known out of band.
    let skip_bmc = state.lookup_config().is_some_and(|c| c.skip_bmc_detect);
    let host_root = state.config.host_root.clone();
    match tokio::task::spawn_blocking(move || {
        bundle(
            skip_bmc,
            host_root.as_deref(),
            &agent_contents::uefi::efivars::log_part(),
        )
    })
    .await
    {
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
