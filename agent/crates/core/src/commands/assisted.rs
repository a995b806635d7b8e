//! The `start_assisted_install` deploy step of OpenShift's hardware
//! manager (PROTOCOL.md §6.3): the assisted installer's `agent.service` on
//! the live system started and waited for ([`agent_devices::hostroot::systemd`]);
//! container form only.

use std::sync::Arc;

use serde_json::Value;

use super::dispatch::step_call::StepCall;
use super::{CommandError, ErrorKind};
use crate::state::AgentState;

fn deploy_error(msg: impl std::fmt::Display) -> CommandError {
    CommandError::new(ErrorKind::Deployment, msg.to_string())
}

/// The `start_assisted_install` deploy step.
pub(crate) async fn start_assisted_install(
    state: Arc<AgentState>,
    _call: StepCall,
) -> Result<Value, CommandError> {
    let Some(root) = state.config.host_root.clone() else {
        return Err(deploy_error(
            "start_assisted_install runs the assisted installer's agent.service of OpenShift's live system; this agent is not running as that system's ironic-agent container (no host root)",
        ));
    };
    tokio::task::spawn_blocking(move || {
        agent_devices::hostroot::systemd::run_assisted(
            &mut agent_devices::hostroot::systemd::Chrooted(&root),
            agent_devices::hostroot::systemd::POLL,
            &mut std::thread::sleep,
        )
    })
    .await
    .map_err(|e| deploy_error(format!("start_assisted_install crashed: {e}")))?
    .map_err(deploy_error)?;
    Ok(Value::Null)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn outside_the_container_form_it_says_why() {
        let state = Arc::new(AgentState::new(agent_base::config::Config::default(), None));
        let call = StepCall {
            node: None,
            ports: Default::default(),
            args: Default::default(),
        };
        let e = start_assisted_install(state, call).await.unwrap_err();
        assert_eq!(e.kind, ErrorKind::Deployment);
        assert!(e.details.contains("no host root"), "{}", e.details);
    }
}
