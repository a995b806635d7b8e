//! `agent status`: what the running agent is doing, read from its command
//! API on the loopback interface (`GET /v1/local/status`, see
//! [`crate::api`], with the key the agent wrote for root,
//! [`crate::api::local_key`]): lookup state, conductor, node, heartbeat
//! age, and the command list with the running command's progress.

use std::time::Duration;

use anyhow::{Context, Result};
use clap::Args;
use serde_json::Value;

use crate::api::local_key;
use agent_contents::image::progress::{bar_cells, human_bytes};

/// Flags of `agent status`.
#[derive(Debug, Args)]
pub struct StatusArgs {
    /// The agent's API; default: https, then http, on 127.0.0.1:9999.
    #[arg(long)]
    pub url: Option<String>,
    /// Print the raw JSON.
    #[arg(long)]
    pub json: bool,
}

/// Runs `agent status`.
pub(crate) async fn run(args: &StatusArgs) -> Result<()> {
    // The agent's certificate is self-signed and made at start; over
    // loopback there is nobody in between to verify against.
    let http = agent_base::tls::http_client(true, None, Duration::from_secs(10))?;
    let bases = match &args.url {
        Some(u) => vec![u.trim_end_matches('/').to_string()],
        None => vec![
            "https://127.0.0.1:9999".to_string(),
            "http://127.0.0.1:9999".to_string(),
        ],
    };
    let mut last = None;
    for base in &bases {
        match fetch(&http, base).await {
            Ok(v) => {
                if args.json {
                    println!("{}", serde_json::to_string_pretty(&v)?);
                } else {
                    print!("{}", render(&v));
                }
                return Ok(());
            }
            Err(e) => last = Some(e),
        }
    }
    Err(last.expect("at least one URL")).context("is the agent running?")
}

async fn fetch(http: &reqwest::Client, base: &str) -> Result<Value> {
    let url = format!("{base}/v1/local/status");
    let port = reqwest::Url::parse(&url)
        .with_context(|| format!("the URL {url}"))?
        .port_or_known_default()
        .with_context(|| format!("the URL {url} has no port"))?;
    let key = local_key::read(&local_key::dir(), port)?;
    let resp = http
        .get(&url)
        .header(local_key::HEADER, key)
        .send()
        .await
        .with_context(|| format!("GET {url}"))?;
    let status = resp.status();
    let body: Value = resp
        .json()
        .await
        .with_context(|| format!("reading {url}"))?;
    anyhow::ensure!(status.is_success(), "GET {url}: HTTP {status}: {body}");
    Ok(body)
}

fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        other => other.to_string(),
    }
}

/// The human-readable report.
pub(crate) fn render(v: &Value) -> String {
    let mut out = format!(
        "agent {} ({} mode)\nconductor: {}\nlookup: {}\nnode: {}\ncallback: {}\n",
        text(&v["version"]),
        text(&v["mode"]),
        v["conductor_urls"]
            .as_array()
            .map(|a| a.iter().map(text).collect::<Vec<_>>().join(", "))
            .unwrap_or_else(|| "-".into()),
        text(&v["lookup"]),
        text(&v["node_uuid"]),
        text(&v["callback_url"]),
    );
    let hb = &v["last_heartbeat"];
    if hb.is_null() {
        out.push_str("last heartbeat: none yet\n");
    } else {
        out.push_str(&format!(
            "last heartbeat: {} s ago, {} ({} accepted in all)\n",
            text(&hb["seconds_ago"]),
            if hb["accepted"] == true {
                "accepted".to_string()
            } else {
                format!("failed: {}", text(&hb["error"]))
            },
            text(&v["heartbeats_accepted"]),
        ));
    }
    let cmds = v["commands"].as_array().cloned().unwrap_or_default();
    out.push_str(&format!("commands: {}\n", cmds.len()));
    for c in &cmds {
        let mut line = format!(
            "  {:<10} {}",
            text(&c["command_status"]),
            text(&c["command_name"])
        );
        let p = &c["command_result"]["progress"];
        if c["command_status"] == "RUNNING" && p.is_object() {
            let done = p["bytes_downloaded"].as_u64().unwrap_or(0);
            let total = p["bytes_total"].as_u64();
            let frac = total.filter(|t| *t > 0).map(|t| done as f64 / t as f64);
            line.push_str(&format!(
                "  {} {} {} / {}, {} on disk",
                bar_cells(frac, 20),
                text(&p["phase"]),
                human_bytes(done),
                total.map_or("?".into(), human_bytes),
                human_bytes(p["bytes_written"].as_u64().unwrap_or(0)),
            ));
        } else if let Some(e) = c["command_error"].get("message") {
            line.push_str(&format!("  error: {}", text(e)));
        }
        out.push_str(&line);
        out.push('\n');
    }
    out
}
