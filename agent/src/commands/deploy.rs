//! The `deploy` extension: `get_deploy_steps` and `execute_deploy_step`.

use std::sync::Arc;

use serde_json::Value;

use super::steps::{self, StepKind};
use super::Outcome;
use crate::state::AgentState;

/// `deploy.get_deploy_steps` (sync).
pub async fn get_deploy_steps(state: Arc<AgentState>, params: Value) -> Outcome {
    steps::get_steps(state, params, StepKind::Deploy).await
}

/// `deploy.execute_deploy_step` (async).
pub async fn execute_deploy_step(state: Arc<AgentState>, params: Value) -> Outcome {
    steps::execute_step(state, params, StepKind::Deploy).await
}
