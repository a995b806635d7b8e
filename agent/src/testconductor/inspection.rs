//! The stand-in's `POST /v1/continue_inspection`, as Ironic 39 answers it
//! (PROTOCOL.md §4.5, ironic-calls.md "inspect"): body validation, node lookup by
//! MAC (or `node_uuid` at ≥ 1.84) in `inspect wait`, 202 with `{"uuid"}` at
//! API 1.1 or the lookup-style document with a fresh token at ≥ 1.84; then
//! the default hooks (fail on `error`, set `cpus`, `memory_mb`, `local_gb`,
//! `cpu_arch`) and power off (token wiped) → `manageable`.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use super::{api_version, ironic_error, new_token, Inner};

const GIB: f64 = (1u64 << 30) as f64;

pub(super) async fn continue_inspection(
    State(c): State<Arc<Inner>>,
    headers: HeaderMap,
    Query(q): Query<HashMap<String, String>>,
    body: axum::body::Bytes,
) -> Response {
    let version = api_version(&headers);
    let resp = handle(&c, version, &q, &body);
    c.log(format!(
        "A->C POST /v1/continue_inspection [API {}.{}] -> {}",
        version.0,
        version.1,
        resp.status().as_u16()
    ));
    resp
}

/// Why Ironic refuses an inspection document (its texts).
#[derive(Debug, thiserror::Error)]
enum InvalidInventory {
    #[error("The inventory is missing or not an object")]
    Missing,
    #[error("The inventory contains no interfaces")]
    NoInterfaces,
    #[error("An interface has no string mac_address")]
    NoMac,
    #[error("{0} must be a string or null")]
    NotString(&'static str),
}

fn validate(doc: &Value) -> Result<Vec<String>, InvalidInventory> {
    let inv = doc
        .get("inventory")
        .filter(|i| i.is_object())
        .ok_or(InvalidInventory::Missing)?;
    let ifaces = inv
        .get("interfaces")
        .and_then(Value::as_array)
        .filter(|a| !a.is_empty())
        .ok_or(InvalidInventory::NoInterfaces)?;
    let mut macs = Vec::new();
    for i in ifaces {
        let mac = i
            .get("mac_address")
            .and_then(Value::as_str)
            .ok_or(InvalidInventory::NoMac)?;
        macs.push(mac.to_ascii_lowercase());
    }
    for k in ["bmc_address", "bmc_v6address"] {
        if let Some(v) = inv.get(k) {
            if !(v.is_null() || v.is_string()) {
                return Err(InvalidInventory::NotString(k));
            }
        }
    }
    Ok(macs)
}

fn handle(
    c: &Arc<Inner>,
    version: (u32, u32),
    q: &HashMap<String, String>,
    body: &[u8],
) -> Response {
    let Ok(doc) = serde_json::from_slice::<Value>(body) else {
        return ironic_error(StatusCode::BAD_REQUEST, "The request body is not JSON");
    };
    let macs = match validate(&doc) {
        Ok(m) => m,
        Err(e) => return ironic_error(StatusCode::BAD_REQUEST, &e.to_string()),
    };
    if q.contains_key("node_uuid") && version < (1, 84) {
        return ironic_error(StatusCode::BAD_REQUEST, "node_uuid needs API 1.84");
    }
    let mut nodes = c.nodes();
    let Some(node) = nodes
        .values_mut()
        .find(|n| q.get("node_uuid") == Some(&n.uuid) || n.macs.iter().any(|m| macs.contains(m)))
    else {
        return ironic_error(StatusCode::NOT_FOUND, "Resource could not be found.");
    };
    if node.provision_state != "inspect wait" {
        return ironic_error(StatusCode::NOT_FOUND, "Resource could not be found.");
    }
    if node.locked {
        return ironic_error(
            StatusCode::CONFLICT,
            &format!("Node {} is locked.", node.uuid),
        );
    }
    node.inspection_data = Some(doc.clone());
    node.locked = true;
    let uuid = node.uuid.clone();
    let reply = if version >= (1, 84) {
        let t = new_token();
        node.token = Some(t.clone());
        node.tokens_issued += 1;
        json!({"node": {"uuid": node.uuid, "properties": node.properties, "instance_info": {},
                        "driver_internal_info": {"agent_secret_token": "******"}, "links": []},
               "config": {"heartbeat_timeout": c.settings.heartbeat_timeout, "agent_token": t,
                          "agent_token_required": true, "tls_min_version": "1.3"}})
    } else {
        json!({"uuid": node.uuid})
    };
    drop(nodes);
    // Hooks run in the background, then the node powers off.
    let c2 = c.clone();
    tokio::spawn(async move {
        tokio::time::sleep(c2.settings.start_lock).await;
        if let Some(n) = c2.nodes().get_mut(&uuid) {
            run_hooks(n, &doc);
            n.locked = false;
            n.operation = None;
            n.wipe_token();
        }
        c2.bump();
    });
    (StatusCode::ACCEPTED, Json(reply)).into_response()
}

fn run_hooks(n: &mut super::Node, doc: &Value) {
    if let Some(e) = doc
        .get("error")
        .filter(|e| !e.is_null() && e.as_str() != Some(""))
    {
        n.provision_state = "inspect failed".into();
        n.last_error = Some(format!("Ramdisk reported error: {e}"));
        return;
    }
    let inv = &doc["inventory"];
    let Some(arch) = inv["cpu"]["architecture"].as_str() else {
        n.provision_state = "inspect failed".into();
        n.last_error = Some("Malformed or missing CPU information".into());
        return;
    };
    n.properties["cpu_arch"] = json!(arch);
    if let Some(count) = inv["cpu"]["count"].as_u64() {
        n.properties["cpus"] = json!(count);
    }
    if let Some(mb) = inv["memory"]["physical_mb"].as_u64() {
        n.properties["memory_mb"] = json!(mb);
    }
    if let Some(size) = doc["root_disk"]["size"].as_u64() {
        // Ironic keeps 1 GiB for partitioning.
        n.properties["local_gb"] = json!(((size as f64 / GIB).floor() as i64 - 1).max(0));
    }
    n.provision_state = "manageable".into();
    n.target_state = None;
}
