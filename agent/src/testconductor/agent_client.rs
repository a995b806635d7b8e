//! The test conductor's client of the agent's command API: trusts only the
//! certificate the agent sent in its heartbeat (Ironic's `agent_verify_ca`),
//! sends the token with every call, and logs each call to the transcript.

use std::sync::Arc;

use anyhow::{anyhow, bail, Context, Result};
use serde_json::{json, Value};

use super::node::Node;
use super::Inner;

/// Which step family a step belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum StepKind {
    /// `clean.execute_clean_step`.
    Clean,
    /// `deploy.execute_deploy_step`.
    Deploy,
}

/// The conductor's client of the agent's command API, trusting only the
/// certificate the agent sent (as Ironic does with `agent_verify_ca`).
pub(super) struct AgentClient {
    http: reqwest::Client,
    base: String,
    token: String,
}

impl AgentClient {
    pub(super) fn new(node: &Node) -> Result<Self> {
        let base = node.agent_url.clone().context("no agent URL recorded")?;
        let token = node.token.clone().context("no token")?;
        let mut builder = reqwest::Client::builder().timeout(std::time::Duration::from_secs(30));
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = rustls::RootCertStore::empty();
        if let Some(pem) = &node.agent_verify_ca {
            agent_base::tls::add_pem_roots(&mut roots, pem.as_bytes())?;
        }
        let tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13])?
            .with_root_certificates(roots)
            .with_no_client_auth();
        builder = builder.tls_backend_preconfigured(tls);
        Ok(Self {
            http: builder.build()?,
            base,
            token,
        })
    }

    pub(super) async fn run(
        &self,
        c: &Inner,
        name: &str,
        params: Value,
        wait: bool,
    ) -> Result<Value> {
        let url = format!(
            "{}/v1/commands/?wait={wait}&agent_token={}",
            self.base, self.token
        );
        let resp = self
            .http
            .post(&url)
            .json(&json!({"name": name, "params": params}))
            .send()
            .await
            .with_context(|| format!("calling {name} on {}", self.base))?;
        let status = resp.status();
        let body: Value = resp.json().await.unwrap_or(Value::Null);
        c.log(format!(
            "C->A POST {name} wait={wait} -> {} {}",
            status.as_u16(),
            body["command_status"]
                .as_str()
                .unwrap_or_else(|| body["faultstring"].as_str().unwrap_or(""))
        ));
        if !status.is_success() {
            let fault = body["faultstring"]
                .as_str()
                .ok_or_else(|| anyhow!("error reply without faultstring: {body}"))?;
            bail!("agent answered {status} to {name}: {fault}");
        }
        Ok(body)
    }

    /// `execute_clean_step` / `execute_deploy_step` (wait=false) with the
    /// hardware manager versions the agent reported (kept in the node's
    /// `driver_internal_info`; the built-in managers' before any report).
    pub(super) async fn execute_step(
        &self,
        c: &Inner,
        kind: StepKind,
        node: &Node,
        step: &Value,
    ) -> Result<()> {
        let mut step = step.clone();
        let version = node
            .driver_internal_info
            .get("hardware_manager_version")
            .filter(|v| v.is_object())
            .cloned()
            .unwrap_or_else(agent_core::commands::steps::hardware_manager_version);
        let (name, params) = match kind {
            StepKind::Clean => {
                step["requires_ramdisk"] = json!(true);
                (
                    "clean.execute_clean_step",
                    json!({"step": step, "node": node.as_agent_dict(), "ports": node.ports(),
                           "clean_version": version}),
                )
            }
            StepKind::Deploy => (
                "deploy.execute_deploy_step",
                json!({"step": step, "node": node.as_agent_dict(), "ports": node.ports(),
                       "deploy_version": version}),
            ),
        };
        self.run(c, name, params, false).await.map(|_| ())
    }

    /// `GET /v1/commands/`, logged to the transcript.
    pub(super) async fn list(&self, c: &Inner) -> Result<Vec<Value>> {
        let result = self.commands().await;
        let line = match &result {
            Ok(cmds) => format!(
                "C->A GET /v1/commands/ -> 200 [{}]",
                cmds.iter()
                    .map(|x| format!(
                        "{}:{}",
                        x["command_name"].as_str().unwrap_or("?"),
                        x["command_status"].as_str().unwrap_or("?")
                    ))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Err(e) => format!("C->A GET /v1/commands/ failed: {e:#}"),
        };
        c.log(line);
        result
    }

    /// `GET /v1/commands/` without logging (for progress displays).
    pub(super) async fn commands(&self) -> Result<Vec<Value>> {
        let url = format!("{}/v1/commands/?agent_token={}", self.base, self.token);
        let resp = self
            .http
            .get(&url)
            .send()
            .await
            .context("listing the agent's commands")?;
        let status = resp.status();
        let body: Value = resp.json().await?;
        if !status.is_success() {
            bail!("listing commands: {status}: {body}");
        }
        Ok(body["commands"].as_array().cloned().unwrap_or_default())
    }
}

/// Keeps the hardware manager versions a `get_*_steps` result reported in
/// the node's `driver_internal_info.hardware_manager_version`, as Ironic
/// does, so every step call sends them back (the agent refuses a step
/// whose versions differ from its managers', an executable manager's
/// among them). Returns the node with them.
pub(super) fn remember_manager_versions(c: &Inner, node: &Node, result: &Value) -> Node {
    let versions = &result["command_result"]["hardware_manager_version"];
    let mut node = node.clone();
    if !versions.is_object() {
        return node;
    }
    let put = |n: &mut Node| {
        if let Some(info) = n.driver_internal_info.as_object_mut() {
            info.insert("hardware_manager_version".into(), versions.clone());
        }
    };
    put(&mut node);
    if let Some(n) = c.nodes().get_mut(&node.uuid) {
        put(n);
    }
    node
}
