//! `agent lookup`: asks the conductor which node this machine is, once,
//! and prints it: the conductor from `--api-url` or the kernel command
//! line (`ipa-api-url`, also `mdns`), the MACs of this machine's NICs plus
//! `--mac`.
//!
//! A running agent's token is never disturbed: the lookup is sent at API
//! version 1.61, the last one before agent tokens (1.62), so Ironic
//! answers without issuing a token (`api_utils.allow_agent_token()` is
//! false) and a node that has none keeps having none for the real agent.
//! No token is printed.

use std::time::Duration;

use anyhow::{Context, Result};
use clap::Args;
use serde_json::Value;

use agent_base::config::ApiUrls;
use agent_conductor::conductor::{ApiVersion, ConductorClient};

/// The lookup version: the newest without token issuing.
const NO_TOKEN_VERSION: ApiVersion = ApiVersion(1, 61);

/// Lookups repeated while the node is locked (409), one second apart.
const LOCKED_RETRIES: u32 = 30;

/// Flags of `agent lookup`.
#[derive(Debug, Args)]
pub struct LookupArgs {
    /// How to reach the conductor.
    #[command(flatten)]
    pub conductor: super::ConductorArgs,
    /// Look up by node UUID as well.
    #[arg(long)]
    pub node_uuid: Option<String>,
    /// Print the whole answer's node (JSON) instead of a summary.
    #[arg(long)]
    pub json: bool,
}

/// Runs `agent lookup`.
pub(crate) async fn run(args: &LookupArgs) -> Result<()> {
    let c = args.conductor.config()?;
    let urls = match &c.api_urls {
        ApiUrls::Urls(u) => u.clone(),
        ApiUrls::Mdns => vec![agent_base::discovery::discover(
            "baremetal",
            Duration::from_secs(10),
            &c.mdns.interfaces,
        )
        .await
        .context("ipa-api-url=mdns")?],
        ApiUrls::None => anyhow::bail!(
            "no conductor configured: give --api-url or set ipa-api-url on the kernel command line"
        ),
    };
    let http =
        agent_base::tls::http_client(c.insecure, c.cafile.as_deref(), Duration::from_secs(30))?;
    let client = ConductorClient::new(http, urls.clone(), None);
    let version = client
        .max_version()
        .await
        .context("reading the conductor's API version")?
        .min(NO_TOKEN_VERSION);
    let mut macs = agent_base::net::mac_addresses(std::path::Path::new("/sys"), &[]);
    macs.extend(c.extra_macs.iter().map(|m| m.to_ascii_lowercase()));
    macs.sort();
    macs.dedup();
    // 409: the node is locked by a conductor task for a moment (e.g. the
    // power-on); wait for it like the agent does, but not for long.
    let mut attempts = 0;
    let found = loop {
        match client
            .lookup(version, &macs, args.node_uuid.as_deref())
            .await
        {
            Err(e) if e.status() == Some(409) && attempts < LOCKED_RETRIES => {
                attempts += 1;
                eprintln!("the node is locked by the conductor; asking again in 1 s");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            r => {
                break r.with_context(|| {
                    format!("looking up MACs {} at {}", macs.join(","), urls.join(","))
                })?
            }
        }
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&found.node)?);
    } else {
        print!("{}", summary(&found.node_uuid, &found.node, &urls, &macs));
    }
    Ok(())
}

/// The lines `agent lookup` prints.
pub(crate) fn summary(uuid: &str, node: &Value, urls: &[String], macs: &[String]) -> String {
    let mut out = format!(
        "node {uuid}\n  conductor: {}\n  looked up by: {}\n",
        urls.join(", "),
        macs.join(", ")
    );
    if let Some(hints) = node["properties"].get("root_device") {
        out.push_str(&format!("  root device hints: {hints}\n"));
    }
    for key in ["cpu_arch", "cpus", "memory_mb", "local_gb"] {
        if let Some(v) = node["properties"].get(key) {
            out.push_str(&format!("  {key}: {v}\n"));
        }
    }
    out
}
