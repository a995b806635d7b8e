//! `system.lockdown` (PROTOCOL.md §1.7, §1.8(e)): for nodes whose power may not be
//! switched off (`disable_power_off`), Ironic asks the agent to make itself
//! unreachable: stop serving the API (open connections closed), stop
//! heartbeating, bring every network interface down and idle forever.
//! In host mode the interfaces belong to this machine and stay up; the
//! agent still stops serving and heartbeating.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use super::Outcome;
use crate::state::{AgentEvent, AgentState};
use agent_base::config::RunMode;

/// Delay before locking down, so the conductor gets the command's answer.
const LOCKDOWN_DELAY: Duration = Duration::from_secs(1);

/// `system.lockdown` (sync): answers `null`, then locks down.
pub async fn lockdown(state: Arc<AgentState>) -> Outcome {
    tracing::warn!("lockdown requested: the agent will stop serving and heartbeating");
    let s = state.clone();
    tokio::spawn(async move {
        tokio::time::sleep(LOCKDOWN_DELAY).await;
        s.notify(AgentEvent::Lockdown);
    });
    Outcome::Done(Value::Null)
}

/// Brings the network interfaces down (ramdisk only) and idles forever.
pub async fn lock_down_and_idle(mode: RunMode) -> ! {
    match mode {
        RunMode::Ramdisk => {
            let _ = tokio::task::spawn_blocking(|| {
                for name in interfaces() {
                    match agent_base::tool::run(
                        std::process::Command::new("ip")
                            .args(["link", "set", "dev", &name, "down"]),
                    ) {
                        Ok(_) => tracing::info!(interface = %name, "interface down (lockdown)"),
                        Err(e) => tracing::warn!(interface = %name, "lockdown: {e}"),
                    }
                }
            })
            .await;
        }
        RunMode::Host => tracing::warn!(
            "host mode: this machine's network interfaces are left up; the agent idles"
        ),
        RunMode::Container => tracing::warn!(
            "container: the host's network interfaces are left up (the image carries no `ip`); the agent idles"
        ),
    }
    std::future::pending::<()>().await;
    unreachable!("pending never completes")
}

/// Every interface but loopback, from sysfs.
fn interfaces() -> Vec<String> {
    std::fs::read_dir("/sys/class/net")
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n != "lo")
                .collect()
        })
        .unwrap_or_default()
}
