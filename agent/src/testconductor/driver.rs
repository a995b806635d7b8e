//! What the stand-in conductor does on a heartbeat in a wait state, modelled
//! on Ironic's `agent_base` (`_heartbeat_clean_wait`, `process_next_step`,
//! `_freshly_booted`): fetch the steps, start the first, and on later
//! heartbeats read the *last* command of the agent's list to decide whether
//! the current step finished, failed or has not started.

use std::sync::Arc;

use anyhow::{anyhow, Context, Result};
use serde_json::{json, Value};

use super::agent_client::{AgentClient, StepKind};
use super::node::{Next, Node, Operation};
use super::Inner;

/// Reacts to an accepted heartbeat (in its own task, holding the node lock).
pub(super) fn on_heartbeat(c: Arc<Inner>, uuid: String) {
    let node = {
        let mut nodes = c.nodes();
        let Some(n) = nodes.get_mut(&uuid) else {
            return;
        };
        if !n.is_waiting() || n.locked || n.operation.is_none() {
            return;
        }
        n.locked = true;
        n.clone()
    };
    let task = c.clone();
    let handle = tokio::spawn(async move {
        let c = task;
        let next = match drive(&c, &node).await {
            Ok(n) => n,
            Err(e) => {
                // Connection problems etc.: Ironic retries on the next heartbeat
                // (after max_command_attempts it fails; the tests want to see
                // transient failures, so keep waiting and record them).
                c.log(format!(
                    "C: action failed, will retry on the next heartbeat: {e:#}"
                ));
                Next::Wait(node.operation.clone().expect("checked above"))
            }
        };
        {
            let mut nodes = c.nodes();
            if let Some(n) = nodes.get_mut(&uuid) {
                n.locked = false;
                match next {
                    Next::Wait(op) => n.operation = Some(op),
                    Next::Finished => {
                        n.operation = None;
                        n.wipe_token();
                        n.provision_state =
                            n.target_state.take().unwrap_or_else(|| "manageable".into());
                        let how = match n.provision_state.as_str() {
                            "active" => "token wiped, powered on from its disk",
                            "rescue" => "the tenant logs in to the ramdisk",
                            _ => "powered off, token wiped",
                        };
                        c.log(format!("C: node {uuid} -> {} ({how})", n.provision_state));
                    }
                    Next::Failed(msg) => {
                        n.operation = None;
                        n.wipe_token();
                        n.provision_state = if n.provision_state == "clean wait" {
                            "clean failed".into()
                        } else if n.provision_state == "rescue wait" {
                            "rescue failed".into()
                        } else {
                            "deploy failed".into()
                        };
                        c.log(format!("C: node {uuid} -> {}: {msg}", n.provision_state));
                        n.last_error = Some(msg);
                    }
                }
            }
        }
        c.bump();
    });
    c.track(handle.abort_handle());
}

async fn drive(c: &Inner, node: &Node) -> Result<Next> {
    let agent = AgentClient::new(node)?;
    match node.operation.clone().context("no operation")? {
        // Inspection needs no call to the agent (spec ironic-calls.md).
        Operation::Inspect => Ok(Next::Wait(Operation::Inspect)),
        // `agent_base.py` `_finalize_rescue`: one sync call that must succeed.
        Operation::Rescue(hash) => {
            let r = agent
                .run(
                    c,
                    "rescue.finalize_rescue",
                    json!({"rescue_password": hash, "hashed": true}),
                    false,
                )
                .await?;
            if r["command_status"] == "SUCCEEDED" {
                Ok(Next::Finished)
            } else {
                Ok(Next::Failed(format!(
                    "Node failed to perform rescue operation: Agent returned bad result for command finalize_rescue: {}",
                    r["command_error"]
                )))
            }
        }
        Operation::Deploy(phase) => super::deploy::drive(c, &agent, node, phase).await,
        Operation::Clean {
            requested,
            queue,
            started,
        } => {
            if !started {
                return start_clean(c, &agent, node, requested).await;
            }
            let commands = agent.list(c).await?;
            let last = commands.last();
            let fresh = commands
                .iter()
                .all(|cmd| cmd["command_name"] == "get_clean_steps");
            if fresh {
                c.log("C: agent freshly booted; restarting the step sequence".into());
                return start_clean(c, &agent, node, requested).await;
            }
            let last = last.expect("not fresh, so not empty");
            if last["command_name"] != "execute_clean_step" || last["command_status"] == "RUNNING" {
                return Ok(Next::Wait(Operation::Clean {
                    requested,
                    queue,
                    started,
                }));
            }
            match last["command_status"].as_str() {
                Some("SUCCEEDED") => {
                    let done = &last["command_result"]["clean_step"];
                    let current = &queue[0];
                    if done["step"] != current["step"] || done["interface"] != current["interface"]
                    {
                        return Ok(Next::Wait(Operation::Clean {
                            requested,
                            queue,
                            started,
                        }));
                    }
                    // Ironic logs a step's result; tests read it here.
                    c.log(format!(
                        "C: clean step {}.{} done, result {}",
                        current["interface"].as_str().unwrap_or_default(),
                        current["step"].as_str().unwrap_or_default(),
                        last["command_result"]["clean_result"]
                    ));
                    let rest: Vec<Value> = queue[1..].to_vec();
                    if rest.is_empty() {
                        return Ok(Next::Finished);
                    }
                    agent
                        .execute_step(c, StepKind::Clean, node, &rest[0])
                        .await?;
                    Ok(Next::Wait(Operation::Clean {
                        requested,
                        queue: rest,
                        started: true,
                    }))
                }
                Some("FAILED") => {
                    let err = &last["command_error"];
                    let text = err["details"]
                        .as_str()
                        .or(err["message"].as_str())
                        .unwrap_or("unknown error");
                    Ok(Next::Failed(format!(
                        "Clean step {}.{} failed on node {}: {text}",
                        queue[0]["interface"].as_str().unwrap_or_default(),
                        queue[0]["step"].as_str().unwrap_or_default(),
                        node.uuid
                    )))
                }
                Some("CLEAN_VERSION_MISMATCH") | Some("VERSION_MISMATCH") => {
                    c.log("C: version mismatch; refreshing steps".into());
                    start_clean(c, &agent, node, requested).await
                }
                other => Ok(Next::Failed(format!(
                    "Agent returned unknown status {other:?}"
                ))),
            }
        }
    }
}

async fn start_clean(
    c: &Inner,
    agent: &AgentClient,
    node: &Node,
    requested: Option<Vec<Value>>,
) -> Result<Next> {
    let result = agent
        .run(
            c,
            "clean.get_clean_steps",
            json!({"node": node.as_agent_dict(), "ports": node.ports()}),
            true,
        )
        .await?;
    let offered: Vec<Value> = result["command_result"]["clean_steps"]
        .as_object()
        .ok_or_else(|| anyhow!("get_clean_steps returned no clean_steps"))?
        .values()
        .filter_map(Value::as_array)
        .flatten()
        .cloned()
        .collect();
    if result["command_result"]["hardware_manager_version"].is_null() {
        return Ok(Next::Failed(
            "get_clean_steps returned no hardware_manager_version".into(),
        ));
    }
    let node = &super::agent_client::remember_manager_versions(c, node, &result);
    for s in &offered {
        if s["interface"].is_null() || s["step"].is_null() || s["priority"].is_null() {
            return Ok(Next::Failed(format!(
                "agent step without interface/step/priority: {s}"
            )));
        }
    }
    let queue: Vec<Value> = match &requested {
        Some(req) => {
            let mut q = Vec::new();
            for r in req {
                let Some(found) = offered
                    .iter()
                    .find(|o| o["step"] == r["step"] && o["interface"] == r["interface"])
                else {
                    return Ok(Next::Failed(format!(
                        "clean step {r} is not supported by the agent"
                    )));
                };
                let mut step = found.clone();
                if let Some(args) = r.get("args") {
                    step["args"] = args.clone();
                }
                q.push(step);
            }
            q
        }
        None => {
            let mut q: Vec<Value> = offered
                .iter()
                .filter(|s| s["priority"].as_u64().unwrap_or(0) > 0)
                .cloned()
                .collect();
            q.sort_by_key(|s| std::cmp::Reverse(s["priority"].as_u64().unwrap_or(0)));
            q
        }
    };
    if queue.is_empty() {
        return Ok(Next::Finished);
    }
    agent
        .execute_step(c, StepKind::Clean, node, &queue[0])
        .await?;
    Ok(Next::Wait(Operation::Clean {
        requested,
        queue,
        started: true,
    }))
}
