//! The `inject_files` deploy step (IPA's `inject_files`, priority 0 unless
//! a deploy template asks for it): the node's `properties.inject_files`
//! and the step's `files` written into the root disk's filesystems
//! ([`agent_contents::inject`]).

use std::sync::Arc;

use serde::Deserialize;
use serde_json::{json, Value};

use super::dispatch::step_call::StepCall;
use super::{CommandError, ErrorKind};
use crate::state::AgentState;
use agent_contents::inject::{self, InjectError};

/// Largest file fetched from a URL.
const MAX_URL_BYTES: usize = 64 << 20;

/// The `inject_files` step's arguments.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct Args {
    /// The files (checked with the node's `inject_files` by
    /// [`inject::validate`]).
    #[serde(default)]
    files: Value,
    /// `false` turns TLS verification off for the URLs (IPA's argument).
    #[serde(default)]
    verify_ca: Option<bool>,
}

/// The `inject_files` step.
pub(crate) async fn inject_files_step(
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
    let device = super::target::choose_device(&state, call.node.as_ref()).await?;
    // As every other download (IPA's inject_files uses its one TLS
    // session too): the CA, client certificate, time limits and retries of
    // the configuration, the proxies of the agent's environment (requests'
    // trust_env in IPA); not the image server's credentials.
    let mut opts = super::dispatch::context::http_options(&state);
    opts.authorization = None;
    if args.verify_ca == Some(false) {
        opts.insecure = true;
    }
    opts.use_environment_proxies();
    let fetch = move |url: &str| -> anyhow::Result<Vec<u8>> {
        anyhow::ensure!(
            url.starts_with("http://") || url.starts_with("https://"),
            "{url}: only http:// and https:// URLs are fetched"
        );
        agent_contents::image::fetch::fetch_small(url, &opts, MAX_URL_BYTES)?
            .ok_or_else(|| anyhow::anyhow!("{url}: more than {MAX_URL_BYTES} bytes"))
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
