//! What a reporting [`super::Flow`] prints (the demo): Ironic's states,
//! the agent's log lines and each boot's kernel command line from the
//! console, and the agent's write progress from its own command list.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Result;
use serde_json::Value;

use crate::bed::deploy::{self, Printer, HEARTBEAT};
use crate::ironic::{Ironic, Watch};

/// Prints what a [`Flow`](super::Flow) sees: Ironic's provision and power states as
/// they change (`ironic: deploying → wait call-back`), the agent's log
/// lines from the ramdisk's console (`agent: …`), the agent's write
/// progress from its command list, and every [`HEARTBEAT`] without news
/// the state it is still in with the console's last line.
#[derive(Debug)]
pub struct Reporter {
    /// Where it prints.
    pub out: Printer,
    /// The agent's command list as last read (while Ironic deployed).
    pub commands: Vec<Value>,
    console: Option<PathBuf>,
    /// The console file scanned for agent lines, and how far.
    scanned: (PathBuf, usize),
    state: String,
    power: String,
    since: Instant,
    agent: Option<AgentView>,
    next_look: Instant,
}

/// The agent's command API, as the conductor calls it.
#[derive(Debug)]
struct AgentView {
    url: String,
    token: String,
    http: reqwest::Client,
}

impl Reporter {
    /// Reports through `out`.
    pub fn new(out: Printer) -> Self {
        Self {
            out,
            commands: Vec::new(),
            console: None,
            scanned: (PathBuf::new(), 0),
            state: String::new(),
            power: String::new(),
            since: Instant::now(),
            agent: None,
            next_look: Instant::now(),
        }
    }

    /// Reads the machine's console from now on (`path`: one file across
    /// boots).
    pub(super) fn set_console(&mut self, path: PathBuf) {
        self.console = Some(path);
    }

    /// Prints the agent's log lines that reached the console since the last
    /// call (whole lines only), and the kernel command line of each boot
    /// (what Ironic's iPXE config gave the ramdisk).
    fn agent_lines(&mut self) {
        let Some(path) = &self.console else { return };
        if self.scanned.0 != *path {
            self.scanned = (path.clone(), 0);
        }
        let Ok(bytes) = std::fs::read(path) else {
            return;
        };
        let from = self.scanned.1.min(bytes.len());
        let Some(end) = bytes[from..].iter().rposition(|&b| b == b'\n') else {
            return;
        };
        self.scanned.1 = from + end + 1;
        for line in deploy::plain_lines(&String::from_utf8_lossy(&bytes[from..from + end])) {
            if let Some(message) = agent_message(&line) {
                self.out.line(format!("agent: {message}"));
            } else if let Some((_, args)) = line.split_once("] Kernel command line: ") {
                self.out
                    .line(format!("machine: kernel started with {args}"));
            }
        }
    }

    /// The agent's API from what Ironic stored at its heartbeat: its URL,
    /// token and certificate.
    fn connect(ironic: &Ironic, uuid: &str) -> Result<Option<AgentView>> {
        let info = ironic.stored_driver_internal_info(uuid)?;
        let (Some(url), Some(token), Some(ca)) = (
            info["agent_url"].as_str(),
            info["agent_secret_token"].as_str(),
            info["agent_verify_ca"].as_str(),
        ) else {
            return Ok(None);
        };
        Ok(Some(AgentView {
            url: url.to_string(),
            token: token.to_string(),
            http: agent_base::tls::http_client(false, Some(Path::new(ca)), Duration::from_secs(5))?,
        }))
    }

    /// Reads the agent's command list (at most every second) and shows the
    /// running deploy step's progress.
    async fn look_at_agent(&mut self, ironic: &Ironic, node: &Value) {
        if Instant::now() < self.next_look || node["driver_internal_info"]["agent_url"].is_null() {
            return;
        }
        self.next_look = Instant::now() + Duration::from_secs(1);
        if self.agent.is_none() {
            let uuid = node["uuid"].as_str().unwrap_or_default();
            // A Python start each time: not more often than every 3 s.
            self.next_look = Instant::now() + Duration::from_secs(3);
            self.agent = tokio::task::block_in_place(|| Self::connect(ironic, uuid))
                .ok()
                .flatten();
        }
        let Some(agent) = &self.agent else { return };
        match agent.commands().await {
            Ok(commands) => {
                if let Some(p) = deploy::write_progress(&commands) {
                    self.out
                        .status(&format!("agent: {}", deploy::progress_line(&p)));
                }
                self.commands = commands;
            }
            // Powered off, or a new boot with a new token: connect again.
            Err(_) => self.agent = None,
        }
    }
}

impl AgentView {
    async fn commands(&self) -> Result<Vec<Value>> {
        Ok(command_list(&self.http, &self.url, &self.token).await?)
    }
}

/// The agent's command list as the conductor reads it: `GET
/// /v1/commands/` at `url` with `token` (an HTTP error status is an
/// error, so a refused token shows as 401).
pub async fn command_list(
    http: &reqwest::Client,
    url: &str,
    token: &str,
) -> reqwest::Result<Vec<Value>> {
    let doc: Value = http
        .get(format!("{url}/v1/commands/?agent_token={token}"))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    Ok(doc["commands"].as_array().cloned().unwrap_or_default())
}

impl Watch for Reporter {
    async fn seen(&mut self, ironic: &Ironic, node: &Value) {
        let state = node["provision_state"].as_str().unwrap_or("?");
        if state != self.state {
            self.out.line(if self.state.is_empty() {
                format!("ironic: {state}")
            } else {
                format!("ironic: {} → {state}", self.state)
            });
            if state.ends_with("failed") {
                self.out
                    .line(format!("ironic: last_error: {}", node["last_error"]));
            }
            self.state = state.to_string();
            self.since = Instant::now();
            self.agent = None;
        }
        let power = node["power_state"].as_str().unwrap_or("?");
        if power != self.power {
            if !self.power.is_empty() {
                self.out.line(format!("ironic: {power}"));
            }
            self.power = power.to_string();
        }
        self.agent_lines();
        if matches!(state, "wait call-back" | "deploying") {
            self.look_at_agent(ironic, node).await;
        }
        if self.out.quiet_for() >= HEARTBEAT {
            let tail = self
                .console
                .as_deref()
                .and_then(deploy::last_line)
                .map(|l| format!(" | console: {l}"))
                .unwrap_or_default();
            self.out.line(format!(
                "… still {state} ({:.0} s){tail}",
                self.since.elapsed().as_secs_f64()
            ));
        }
    }
}

/// The message of one of the agent's log lines on the ramdisk's console
/// (`[  12.345]  INFO running step step=write_image kind=deploy`): INFO
/// without its level, WARN and ERROR with it; `None` for other lines
/// (the kernel's, the firmware's).
pub fn agent_message(line: &str) -> Option<String> {
    let (_, rest) = line.strip_prefix('[')?.split_once(']')?;
    let rest = rest.trim_start();
    let (level, message) = rest.split_once(' ')?;
    let message = message.trim();
    let shown = match level {
        "INFO" => message.to_string(),
        "WARN" | "ERROR" => format!("{level} {message}"),
        _ => return None,
    };
    Some(shown.chars().take(160).collect())
}

#[cfg(test)]
mod tests {
    use super::agent_message;

    #[test]
    fn agent_lines_are_told_from_the_kernels() {
        assert_eq!(
            agent_message("[  12.345]  INFO running step step=write_image kind=deploy").as_deref(),
            Some("running step step=write_image kind=deploy")
        );
        assert_eq!(
            agent_message("[  80.001]  WARN heartbeat refused").as_deref(),
            Some("WARN heartbeat refused")
        );
        assert_eq!(
            agent_message(
                "[    1.234567] virtio_blk virtio2: [vda] 10485760 512-byte logical blocks"
            ),
            None
        );
        assert_eq!(agent_message("[  3.000] DEBUG noise"), None);
        assert_eq!(agent_message("BdsDxe: loading Boot0001"), None);
    }
}
