//! The `standby` extension: partition UUIDs, sync, and power actions.
//!
//! Power actions obey the safety rule of host mode: outside the deploy
//! ramdisk the machine is never powered off or rebooted; the action is logged
//! and the agent's state is reset as after a reboot (fresh command list, token
//! forgotten, lookup again), which is what the conductor observes of a real
//! reboot.
//!
//! As IPA 13 (`standby.sync`, `_run_shutdown_command`): `sync` and every
//! power action flush file system and device buffers
//! ([`agent_devices::disk::flush`]); before a power action the clock is set from
//! `ipa-ntp-server` when one is configured and written to the hardware clock
//! ([`agent_base::rtc`]), so the deployed OS boots with the right time. Clock
//! failures are logged, as IPA ignores them by default; with
//! `fail_if_clock_not_set` an NTP failure fails the power action. In host mode the
//! page cache and both clocks are left alone.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use super::{CommandError, ErrorKind, Outcome};
use crate::state::{AgentEvent, AgentState, PowerAction};
use agent_base::config::RunMode;

/// `standby.get_partition_uuids` (sync): what the last image write recorded
/// ([`super::image::whole_disk_partition_uuids`]). Before an image was
/// written, and after a failed write, there is nothing to report: `{}`, as
/// with IPA.
pub(crate) async fn get_partition_uuids(state: Arc<AgentState>) -> Outcome {
    Outcome::Done(state.partition_uuids().unwrap_or_else(|| json!({})))
}

/// `standby.sync` (sync): flush every filesystem and block device buffer.
pub(crate) async fn sync(state: Arc<AgentState>) -> Outcome {
    match tokio::task::spawn_blocking(move || flush(&state)).await {
        Ok(_) => Outcome::Done(Value::Null),
        Err(e) => Outcome::Failed(CommandError::new(
            ErrorKind::CommandExecution,
            format!("sync failed: {e}"),
        )),
    }
}

/// `standby.power_off` (async).
pub(crate) async fn power_off(state: Arc<AgentState>) -> Outcome {
    power(state, PowerAction::PowerOff).await
}

/// `standby.reboot` and `standby.run_image` (async).
pub(crate) async fn reboot(state: Arc<AgentState>) -> Outcome {
    power(state, PowerAction::Reboot).await
}

/// Delay between answering a power command and acting on it, so the
/// conductor sees the command's result before the agent goes away.
const POWER_DELAY: Duration = Duration::from_secs(1);

/// IPA's `full_sync` over the devices the agent may write (every disk and
/// running md device in the ramdisk, the allowed ones in host mode).
fn flush(state: &AgentState) -> agent_devices::disk::flush::Flushed {
    let policy = agent_devices::disk::WritePolicy::from_config(&state.config);
    let devices = agent_devices::disk::erasable_devices(&policy).unwrap_or_else(|e| {
        tracing::warn!("listing the devices to flush: {e:#}");
        Vec::new()
    });
    let knob = (state.config.mode == RunMode::Ramdisk).then(|| PathBuf::from(DROP_CACHES));
    agent_devices::disk::flush::full_sync(&devices, knob.as_deref())
}

const DROP_CACHES: &str = "/proc/sys/vm/drop_caches";

/// The RTC `hwclock --systohc` writes when `/dev/rtc` is missing.
const RTC: [&str; 2] = ["/dev/rtc", "/dev/rtc0"];

/// Before a power action in the ramdisk: the clock from `ipa-ntp-server`
/// (when set), then the hardware clock from the system clock. Returns the
/// NTP step's failure (logged either way).
async fn set_clocks(state: &AgentState) -> anyhow::Result<()> {
    // The same SNTP step as at start-up.
    let ntp = agent_base::timesync::sync(state.config.ntp_server.as_deref(), None, true).await;
    let rtc = RTC.iter().map(Path::new).find(|p| p.exists());
    match rtc.map(agent_base::rtc::set_from_system) {
        Some(Ok(())) => {}
        Some(Err(e)) => tracing::error!("Failed to sync hardware clock: {e:#}"),
        None => {
            tracing::warn!("no RTC device (/dev/rtc, /dev/rtc0): the hardware clock is not set")
        }
    }
    ntp
}

async fn power(state: Arc<AgentState>, action: PowerAction) -> Outcome {
    // First: the conductor wipes the token as soon as it sent the command,
    // and the heartbeat loop must wait for the power event rather than
    // look up again while the clocks are set and the buffers flushed.
    state.set_power_pending();
    if state.config.mode == RunMode::Ramdisk {
        if let Err(e) = set_clocks(&state).await {
            if state.config.fail_if_clock_not_set {
                // As IPA's _sync_clock: the power action fails; the
                // machine stays up and heartbeats again.
                state.clear_power_pending();
                return Outcome::Failed(CommandError::from_anyhow(ErrorKind::CommandExecution, &e));
            }
        }
    }
    let s = state.clone();
    if let Err(e) = tokio::task::spawn_blocking(move || flush(&s)).await {
        tracing::error!("flushing before the power action: {e}");
    }
    match state.config.mode {
        RunMode::Host => {
            tracing::warn!(
                ?action,
                "host mode: not touching this machine's power; resetting the agent as after a reboot"
            );
        }
        RunMode::Ramdisk => tracing::info!(?action, "powering the machine"),
        RunMode::Container => tracing::info!(
            ?action,
            "powering the host through /proc/sysrq-trigger (as IPA 13 in its container)"
        ),
    }
    let s = state.clone();
    tokio::spawn(async move {
        tokio::time::sleep(POWER_DELAY).await;
        s.notify(AgentEvent::Power(action));
    });
    Outcome::Done(Value::Null)
}
