//! The agent's command API served in-process on a loopback port (plain
//! HTTP) for an [`AgentState`] the test builds, and a client that runs
//! commands through it the way the conductor does (`POST /v1/commands/`
//! with the agent token and `wait=true`). The server stops on drop.

use std::sync::Arc;
use std::time::Duration;

use agent::server::Server;
use agent_base::config::Config;
use agent_core::state::AgentState;
use anyhow::{Context, Result};
use serde_json::{json, Value};

/// The token the test agent accepts.
pub const TOKEN: &str = "test-token-0123456789abcdef0123456789abcdef";

/// A command API on `127.0.0.1:<free port>`.
#[derive(Debug)]
pub struct AgentApi {
    /// The agent's state (commands, node, partition UUIDs).
    pub state: Arc<AgentState>,
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    server: Server,
    client: reqwest::Client,
}

impl AgentApi {
    /// Serves a fresh agent state built from `config`, holding [`TOKEN`].
    pub async fn start(config: Config) -> Result<Self> {
        let state = Arc::new(AgentState::new(config, None));
        state.set_token(Some(TOKEN.into()));
        let server = Server::start(
            "127.0.0.1:0".parse()?,
            agent::api::router(state.clone()),
            None,
        )
        .await?;
        let url = format!("http://{}", server.local_addr);
        let client = agent_base::tls::http_client(false, None, Duration::from_secs(600))?;
        Ok(Self {
            state,
            url,
            server,
            client,
        })
    }

    /// Runs `name` with `params` and waits for its result document.
    pub async fn run(&self, name: &str, params: Value) -> Result<Value> {
        let resp = self
            .client
            .post(format!(
                "{}/v1/commands/?wait=true&agent_token={TOKEN}",
                self.url
            ))
            .json(&json!({"name": name, "params": params}))
            .send()
            .await
            .with_context(|| format!("posting {name}"))?;
        let status = resp.status();
        let body: Value = resp.json().await.context("reading the command result")?;
        anyhow::ensure!(status.is_success(), "{name}: HTTP {status}: {body}");
        Ok(body)
    }
}

impl Drop for AgentApi {
    fn drop(&mut self) {
        self.server.stop();
    }
}
