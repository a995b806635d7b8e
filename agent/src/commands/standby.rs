//! The `standby` extension: partition UUIDs, sync, and power actions.
//!
//! Power actions obey the safety rule of host mode: outside the deploy
//! ramdisk the machine is never powered off or rebooted; the action is logged
//! and the agent's state is reset as after a reboot (fresh command list, token
//! forgotten, lookup again), which is what the conductor observes of a real
//! reboot.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use super::{CommandError, ErrorKind, Outcome};
use crate::config::RunMode;
use crate::state::{AgentEvent, AgentState, PowerAction};

/// `standby.get_partition_uuids` (sync): what the last image write recorded
/// ([`super::image::whole_disk_partition_uuids`]). Before an image was
/// written, and after a failed write, there is nothing to report: `{}`, as
/// with IPA.
pub async fn get_partition_uuids(state: Arc<AgentState>, _params: Value) -> Outcome {
    Outcome::Done(state.partition_uuids().unwrap_or_else(|| json!({})))
}

/// `standby.sync` (sync): flush every filesystem and block device buffer.
pub async fn sync(_state: Arc<AgentState>, _params: Value) -> Outcome {
    match tokio::task::spawn_blocking(nix::unistd::sync).await {
        Ok(()) => Outcome::Done(Value::Null),
        Err(e) => Outcome::Failed(CommandError::new(
            ErrorKind::CommandExecution,
            format!("sync failed: {e}"),
        )),
    }
}

/// `standby.power_off` (async).
pub async fn power_off(state: Arc<AgentState>, _params: Value) -> Outcome {
    power(state, PowerAction::PowerOff).await
}

/// `standby.reboot` and `standby.run_image` (async).
pub async fn reboot(state: Arc<AgentState>, _params: Value) -> Outcome {
    power(state, PowerAction::Reboot).await
}

/// Delay between answering a power command and acting on it, so the
/// conductor sees the command's result before the agent goes away.
const POWER_DELAY: Duration = Duration::from_secs(1);

async fn power(state: Arc<AgentState>, action: PowerAction) -> Outcome {
    nix::unistd::sync();
    match state.config.mode {
        RunMode::Host => {
            tracing::warn!(
                ?action,
                "host mode: not touching this machine's power; resetting the agent as after a reboot"
            );
        }
        RunMode::Ramdisk => tracing::info!(?action, "powering the machine"),
    }
    state.set_power_pending();
    let s = state.clone();
    tokio::spawn(async move {
        tokio::time::sleep(POWER_DELAY).await;
        s.notify(AgentEvent::Power(action));
    });
    Outcome::Done(Value::Null)
}
