//! The `clean` extension: `get_clean_steps` and `execute_clean_step`.

use std::sync::Arc;

use serde_json::Value;

use super::steps::{self, StepKind};
use super::Outcome;
use crate::state::AgentState;

/// `clean.get_clean_steps` (sync).
pub async fn get_clean_steps(state: Arc<AgentState>, params: Value) -> Outcome {
    steps::get_steps(state, params, StepKind::Clean).await
}

/// `clean.execute_clean_step` (async).
pub async fn execute_clean_step(state: Arc<AgentState>, params: Value) -> Outcome {
    steps::execute_step(state, params, StepKind::Clean).await
}
