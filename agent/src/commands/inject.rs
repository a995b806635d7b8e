//! The `inject_files` deploy step (IPA's `inject_files`, priority 0 unless
//! a deploy template asks for it): the node's `properties.inject_files`
//! and the step's `files` written into the root disk's filesystems
//! ([`crate::inject`]).

use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use serde_json::{json, Value};

use super::step_call::StepCall;
use super::{CommandError, ErrorKind};
use crate::inject::{self, InjectError};
use crate::state::AgentState;

/// Largest file fetched from a URL.
const MAX_URL_BYTES: u64 = 64 << 20;

/// The `inject_files` step's arguments.
#[derive(Debug, Default, Deserialize)]
pub struct Args {
    /// The files (checked with the node's `inject_files` by
    /// [`inject::validate`]).
    #[serde(default)]
    files: Value,
    /// `false` turns TLS verification off for the URLs (IPA's argument).
    #[serde(default)]
    verify_ca: Option<bool>,
}

/// The `inject_files` step.
pub async fn inject_files_step(
    state: Arc<AgentState>,
    call: StepCall<Args>,
) -> Result<Value, CommandError> {
    let args = &call.args;
    let files = inject::validate(&inject::from_node(call.node_document()), &args.files)
        .map_err(|e| CommandError::new(ErrorKind::InvalidCommandParams, e.to_string()))?;
    if files.is_empty() {
        tracing::info!("inject_files: no files to inject");
        return Ok(json!({"files": []}));
    }
    let device = super::target::choose_device(&state, call.node.as_ref())?;
    let insecure = state.config.insecure || args.verify_ca == Some(false);
    let client = crate::tls::http_client(
        insecure,
        state.config.cafile.as_deref(),
        Duration::from_secs(60),
    )
    .map_err(|e| CommandError::new(ErrorKind::InvalidCommandParams, format!("{e:#}")))?;
    let rt = tokio::runtime::Handle::current();
    let fetch = move |url: &str| -> anyhow::Result<Vec<u8>> {
        rt.block_on(async {
            let mut resp = client.get(url).send().await?.error_for_status()?;
            let mut out = Vec::new();
            while let Some(chunk) = resp.chunk().await? {
                out.extend_from_slice(&chunk);
                anyhow::ensure!(
                    out.len() as u64 <= MAX_URL_BYTES,
                    "{url}: more than {MAX_URL_BYTES} bytes"
                );
            }
            Ok(out)
        })
    };
    let done = tokio::task::spawn_blocking(move || inject::inject(&device, &files, &fetch))
        .await
        .map_err(|e| CommandError::new(ErrorKind::CommandExecution, e.to_string()))?
        .map_err(|e| {
            let kind = match e {
                InjectError::Invalid(_) => ErrorKind::InvalidCommandParams,
                InjectError::NotFound(_) | InjectError::Failed { .. } => {
                    ErrorKind::CommandExecution
                }
            };
            CommandError::new(kind, e.to_string())
        })?;
    Ok(json!({"files": done}))
}
