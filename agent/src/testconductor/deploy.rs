//! The stand-in conductor's `direct` deploy of a whole-disk image, as Ironic
//! 39.0.0 drives the agent (PROTOCOL.md §1.8 (a), §1.9, §5.1, ironic-calls.md
//! "deploy" and "deploy failure"):
//!
//! * `deploying` (locked): HEAD of the image URL (Ironic's image href
//!   validation), power cycle into the ramdisk (token wiped) →
//!   `wait call-back`;
//! * first heartbeat: `deploy.get_deploy_steps` (wait=true), the command
//!   list ("freshly booted"), then `deploy.execute_deploy_step` of
//!   `deploy.write_image` (wait=false) with `image_info` and `configdrive`;
//! * later heartbeats: the command list until `execute_deploy_step` is
//!   `SUCCEEDED` for `write_image` (or `FAILED`: `log.collect_system_logs`,
//!   `deploy failed` with the agent's error in `last_error`);
//! * `prepare_instance_boot`: `standby.get_partition_uuids` (wait=true);
//!   under UEFI `image.install_bootloader` (wait=false) polled until done;
//! * `tear_down_agent`: `standby.power_off` (wait=false); the node is then
//!   powered on from its disk → `active` (token wiped).
//!
//! In-band deploy steps the agent reports with a priority above 0 are not
//! run (this agent reports none); user-requested deploy steps and
//! `deploy_forces_oob_reboot` are not modelled.

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};

use super::agent_client::{AgentClient, StepKind};
use super::node::Next;
use super::node::{BootMode, DeployPhase, DeployRequest, Node, Operation};
use super::Inner;

/// The image URL failed Ironic's check (Ironic's text).
#[derive(Debug, thiserror::Error)]
#[error("Validation of image href {url} failed, reason: {reason:#}")]
pub(super) struct HrefError {
    url: String,
    reason: anyhow::Error,
}

/// Ironic's check of the image before it boots the ramdisk: a HEAD of the
/// image URL must answer 2xx.
pub(super) async fn validate_image_href(url: &str) -> Result<(), HrefError> {
    let reason = async {
        let http = agent_base::tls::http_client(false, None, std::time::Duration::from_secs(30))?;
        let resp = http.head(url).send().await?;
        anyhow::ensure!(
            resp.status().is_success(),
            "HEAD answered {}",
            resp.status()
        );
        anyhow::Ok(())
    }
    .await;
    reason.map_err(|reason| HrefError {
        url: url.to_string(),
        reason,
    })
}

/// One heartbeat's worth of deploy work.
pub(super) async fn drive(
    c: &Inner,
    agent: &AgentClient,
    node: &Node,
    phase: DeployPhase,
) -> Result<Next> {
    let request = node
        .deploy
        .clone()
        .context("deploy without instance_info")?;
    match phase {
        DeployPhase::Boot => start(c, agent, node, &request).await,
        DeployPhase::WriteImage => {
            let commands = agent.list(c).await?;
            if commands
                .iter()
                .all(|cmd| cmd["command_name"] == "get_deploy_steps")
            {
                c.log("C: agent freshly booted; restarting the deploy steps".into());
                return start(c, agent, node, &request).await;
            }
            let last = commands.last().expect("not fresh, so not empty");
            let waiting = Ok(Next::Wait(Operation::Deploy(DeployPhase::WriteImage)));
            if last["command_name"] != "execute_deploy_step" || last["command_status"] == "RUNNING"
            {
                return waiting;
            }
            match last["command_status"].as_str() {
                Some("SUCCEEDED") => {
                    let done = &last["command_result"]["deploy_step"];
                    if done["step"] != "write_image" || done["interface"] != "deploy" {
                        return waiting;
                    }
                    // An error after the image was written fails the deploy
                    // (Ironic raises inside the step), it is not retried.
                    Ok(prepare_boot_and_tear_down(c, agent, node, &request)
                        .await
                        .unwrap_or_else(|e| {
                            Next::Failed(format!(
                                "Deploy step deploy.prepare_instance_boot failed on node {}. {e:#}",
                                node.uuid
                            ))
                        }))
                }
                Some("FAILED") => {
                    collect_logs(c, agent, node).await;
                    Ok(Next::Failed(format!(
                        "Deploy step deploy.write_image failed on node {}. {}",
                        node.uuid,
                        error_text(&last["command_error"])
                    )))
                }
                Some("VERSION_MISMATCH") | Some("DEPLOY_VERSION_MISMATCH") => {
                    c.log("C: version mismatch; refreshing the deploy steps".into());
                    start(c, agent, node, &request).await
                }
                other => Ok(Next::Failed(format!(
                    "Agent returned unknown status {other:?} for write_image"
                ))),
            }
        }
    }
}

/// `get_deploy_steps`, the command list, then `write_image`.
async fn start(
    c: &Inner,
    agent: &AgentClient,
    node: &Node,
    request: &DeployRequest,
) -> Result<Next> {
    let result = agent
        .run(
            c,
            "deploy.get_deploy_steps",
            json!({"node": node.as_agent_dict(), "ports": node.ports()}),
            true,
        )
        .await?;
    let offered: Vec<&Value> = result["command_result"]["deploy_steps"]
        .as_object()
        .context("get_deploy_steps returned no deploy_steps")?
        .values()
        .filter_map(Value::as_array)
        .flatten()
        .collect();
    if !offered
        .iter()
        .any(|s| s["step"] == "write_image" && s["interface"] == "deploy")
    {
        return Ok(Next::Failed(format!(
            "The agent of node {} does not offer the deploy step deploy.write_image",
            node.uuid
        )));
    }
    let node = &super::agent_client::remember_manager_versions(c, node, &result);
    // Ironic looks at the command list to see the agent is freshly booted.
    agent.list(c).await?;
    let step = json!({"interface": "deploy", "step": "write_image",
                      "args": {"image_info": image_info(node, request),
                               "configdrive": request.configdrive}});
    agent.execute_step(c, StepKind::Deploy, node, &step).await?;
    Ok(Next::Wait(Operation::Deploy(DeployPhase::WriteImage)))
}

/// `image_info` as Ironic's `AgentDeploy.write_image` builds it for a
/// whole-disk HTTP image (PROTOCOL.md §5.1).
pub(super) fn image_info(node: &Node, request: &DeployRequest) -> Value {
    let i = &request.image_info;
    let id = i
        .url
        .split(['?', '#'])
        .next()
        .and_then(|u| u.rsplit('/').next())
        .unwrap_or_default();
    let mut info = json!({"id": id, "urls": [i.url], "disk_format": i.disk_format,
                          "container_format": null, "stream_raw_images": true,
                          "node_uuid": node.uuid});
    if let Some(sum) = &i.checksum {
        info["checksum"] = json!(sum);
    }
    if let (Some(algo), Some(value)) = (&i.os_hash_algo, &i.os_hash_value) {
        info["os_hash_algo"] = json!(algo);
        info["os_hash_value"] = json!(value);
    }
    if let Some(cd) = &request.configdrive {
        // Ironic duplicates it here for older agents.
        info["configdrive"] = json!(cd);
    }
    info
}

/// `prepare_instance_boot` and `tear_down_agent`, in one conductor action
/// holding the node lock (heartbeats meanwhile do nothing).
async fn prepare_boot_and_tear_down(
    c: &Inner,
    agent: &AgentClient,
    node: &Node,
    request: &DeployRequest,
) -> Result<Next> {
    let uuids = agent
        .run(c, "standby.get_partition_uuids", json!({}), true)
        .await?;
    let uuids = uuids["command_result"].clone();
    if let Some(n) = c.nodes().get_mut(&node.uuid) {
        n.partition_uuids = Some(uuids.clone());
    }
    if request.boot_mode == BootMode::Uefi {
        let params = json!({"root_uuid": uuids["root uuid"],
                            "efi_system_part_uuid": uuids["efi system partition uuid"],
                            "prep_boot_part_uuid": uuids["PReP Boot partition uuid"],
                            "target_boot_mode": "uefi"});
        agent
            .run(c, "image.install_bootloader", params, false)
            .await?;
        let done = poll_last(c, agent, "install_bootloader").await?;
        if done["command_status"] != "SUCCEEDED" {
            collect_logs(c, agent, node).await;
            return Ok(Next::Failed(format!(
                "Failed to install a bootloader when deploying node {}. Error: {}",
                node.uuid,
                error_text(&done["command_error"])
            )));
        }
    }
    c.log(format!(
        "C: boot device of node {} set to disk (persistent)",
        node.uuid
    ));
    agent.run(c, "standby.power_off", json!({}), false).await?;
    Ok(Next::Finished)
}

/// Polls the command list until the last command named `name` is no
/// longer RUNNING (Ironic: every `command_poll_interval`, 100 times).
async fn poll_last(c: &Inner, agent: &AgentClient, name: &str) -> Result<Value> {
    for _ in 0..100 {
        let commands = agent.list(c).await?;
        let Some(cmd) = commands.iter().rev().find(|x| x["command_name"] == name) else {
            bail!("the agent's command list has no {name}");
        };
        if cmd["command_status"] != "RUNNING" {
            return Ok(cmd.clone());
        }
        tokio::time::sleep(c.settings.command_poll_interval).await;
    }
    bail!("{name} still running after 100 polls")
}

/// `log.collect_system_logs` (Ironic's `deploy_logs_collect = on_failure`).
async fn collect_logs(c: &Inner, agent: &AgentClient, node: &Node) {
    match agent
        .run(c, "log.collect_system_logs", json!({}), true)
        .await
    {
        Ok(r) => {
            if let Some(logs) = r["command_result"]["system_logs"].as_str() {
                if let Some(n) = c.nodes().get_mut(&node.uuid) {
                    n.agent_logs.push(logs.to_string());
                }
            }
        }
        Err(e) => c.log(format!("C: collecting the agent's logs failed: {e:#}")),
    }
}

/// The agent's error as Ironic quotes it: `details`, else `message`.
fn error_text(err: &Value) -> String {
    err["details"]
        .as_str()
        .or(err["message"].as_str())
        .unwrap_or("unknown error")
        .to_string()
}
