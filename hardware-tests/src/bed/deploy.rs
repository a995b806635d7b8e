//! Deploying onto a bed machine and booting what was deployed: the pieces
//! `tests/qemu/bed_deploy.rs` and the demo (`src/bin/demo.rs`) share.
//!
//! A [`Target`] is one machine (BIOS or UEFI, one NIC, one sparse
//! virtio-blk disk, OVMF's NVRAM in a file kept across its boots). It
//! PXE-boots the deploy ramdisk ([`Target::pxe`]) while the test conductor
//! deploys ([`watch_deploy`] follows the node and the agent's write
//! progress), then boots from its disk ([`Target::disk_boot`]) so the
//! console shows what the deployed system printed. [`config_drive`] makes
//! the gzip+base64 config-2 ISO Ironic would send; [`uefi_boot_entry`]
//! reads from OVMF's console which boot entry it started. [`Printer`] is
//! the demo's timed output, with heartbeats while a long step runs.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use agent::testconductor::{Node, TestConductor};
use anyhow::{bail, Context, Result};
use serde_json::Value;

use super::{Boot, Bus, Disk, Firmware, Net, Nic, Vm, VmSpec};
use crate::run;

/// Size of the target disk (sparse): above the 4 GiB the agent's default
/// root-device choice asks for.
pub const DISK_SIZE: u64 = 5 << 30;

/// One machine to deploy to.
#[derive(Debug)]
pub struct Target {
    /// Names its consoles (`<name>-pxe`, `<name>-disk`).
    pub name: String,
    /// UEFI (OVMF) or BIOS (SeaBIOS).
    pub uefi: bool,
    /// Its NIC's MAC, the node's port.
    pub mac: String,
    /// The disk's backing file.
    pub disk: PathBuf,
    /// OVMF's NVRAM (UEFI only), kept between the PXE and the disk boot.
    pub vars: PathBuf,
    // Holds the disk file; removed on drop.
    _dir: tempfile::TempDir,
}

impl Target {
    /// A machine with a fresh disk (under `target/`) and, for UEFI, fresh
    /// NVRAM in `logs` (kept for reading after a failure).
    pub fn new(logs: &Path, name: &str, uefi: bool, mac: &str) -> Result<Self> {
        let base = crate::repo_root().join("target");
        std::fs::create_dir_all(&base)?;
        let dir = tempfile::Builder::new()
            .prefix("bed-disk-")
            .tempdir_in(&base)
            .context("a directory for the target disk")?;
        let vars = logs.join(format!("{name}.OVMF_VARS.fd"));
        let _ = std::fs::remove_file(&vars);
        Ok(Self {
            name: name.to_string(),
            uefi,
            mac: mac.to_string(),
            disk: dir.path().join(format!("{name}.disk")),
            vars,
            _dir: dir,
        })
    }

    /// The machine booting `boot`, its console named `<name>-<suffix>`.
    pub fn spec(&self, suffix: &str, boot: Boot) -> VmSpec {
        let mut spec = VmSpec::new(&format!("{}-{suffix}", self.name));
        spec.firmware = if self.uefi {
            Firmware::Uefi {
                vars: self.vars.clone(),
            }
        } else {
            Firmware::Bios
        };
        spec.disks.push(Disk {
            path: self.disk.clone(),
            size: DISK_SIZE,
            bus: Bus::Virtio,
            serial: format!("deploy-{}", self.name),
            model: None,
        });
        spec.nics.push(Nic {
            mac: self.mac.clone(),
        });
        spec.boot = boot;
        spec
    }

    /// Powers the machine on into the PXE-booted deploy ramdisk.
    pub fn pxe<'n>(&self, net: &'n Net) -> Result<Vm<'n>> {
        Vm::start(net, &self.spec("pxe", Boot::Network))
    }

    /// Powers the machine on from its disk (UEFI: by the NVRAM's
    /// `BootOrder`, i.e. the entries `install_bootloader` wrote).
    pub fn disk_boot<'n>(&self, net: &'n Net) -> Result<Vm<'n>> {
        Vm::start(net, &self.spec("disk", Boot::Disk))
    }
}

/// A config-2 ISO (`genisoimage -V config-2 -J -r`, as Ironic renders
/// one) holding `openstack/latest/meta_data.json` = `meta_data`, as the
/// gzip+base64 text the agent gets. Built in `dir`.
pub fn config_drive(dir: &Path, meta_data: &Value) -> Result<String> {
    let tree = dir.join("configdrive/openstack/latest");
    std::fs::create_dir_all(&tree)?;
    std::fs::write(tree.join("meta_data.json"), meta_data.to_string())?;
    let iso = dir.join("configdrive.iso");
    run(Command::new("genisoimage")
        .args(["-quiet", "-J", "-r", "-V", "config-2", "-o"])
        .arg(&iso)
        .arg(dir.join("configdrive")))
    .context("genisoimage (ci/install-deps installs it)")?;
    Ok(agent_contents::configdrive::source::encode(&std::fs::read(
        &iso,
    )?))
}

/// A random version-4 UUID (for config drives' `meta_data.json`).
pub fn random_uuid() -> String {
    let h = format!("{:016x}{:016x}", fastrand::u64(..), fastrand::u64(..));
    format!(
        "{}-{}-4{}-a{}-{}",
        &h[..8],
        &h[8..12],
        &h[13..16],
        &h[17..20],
        &h[20..32]
    )
}

/// Hex sha256 of a file.
pub fn sha256_file(path: &Path) -> Result<String> {
    crate::sha256_prefix(path, u64::MAX).with_context(|| format!("hashing {}", path.display()))
}

/// What [`watch_deploy`] reports as the deploy goes.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// The node changed provision state.
    State(String),
    /// The agent's `write_image` progress (`command_result.progress`).
    Progress(Value),
}

/// Follows the node until it reaches one of `states` (any `* failed`
/// state ends the watch too; the node is returned either way), calling
/// `on` with state changes and, while the image is written, with the
/// progress the agent shows in its command list (read as the conductor
/// reads it). Fails at the timeout, naming the state it was stuck in.
pub async fn watch_deploy(
    conductor: &TestConductor,
    uuid: &str,
    states: &[&str],
    timeout: Duration,
    mut on: impl FnMut(Event),
) -> Result<Node> {
    let deadline = Instant::now() + timeout;
    let mut last_state = String::new();
    loop {
        let node = conductor.node(uuid).context("the node vanished")?;
        if node.provision_state != last_state {
            last_state = node.provision_state.clone();
            on(Event::State(last_state.clone()));
        }
        if states.contains(&last_state.as_str()) || last_state.ends_with("failed") {
            return Ok(node);
        }
        if last_state == "wait call-back" {
            // The conductor's own view of the agent; errors (agent not up
            // yet, token just wiped) only mean no progress to show now.
            if let Ok(Some(commands)) = conductor.agent_commands(uuid).await {
                if let Some(p) = write_progress(&commands) {
                    on(Event::Progress(p));
                }
            }
        }
        if Instant::now() >= deadline {
            bail!("node {uuid} still {last_state:?} after {timeout:?}, waiting for {states:?}");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The progress of the deploy step the agent is running (`write_image`'s
/// `command_result.progress`), from its command list.
pub fn write_progress(commands: &[Value]) -> Option<Value> {
    commands
        .iter()
        .rev()
        .find(|c| c["command_name"] == "execute_deploy_step" && c["command_status"] == "RUNNING")
        .and_then(|c| c["command_result"].get("progress"))
        .cloned()
}

/// One line for a progress value: `writing 40.0 / 64.0 MiB (62%) 21.5 MB/s`.
pub fn progress_line(p: &Value) -> String {
    let mib = |v: &Value| v.as_u64().unwrap_or(0) as f64 / (1u64 << 20) as f64;
    let total = p["bytes_total"].as_u64();
    let done = mib(&p["bytes_downloaded"]);
    let of = match total {
        Some(t) if t > 0 => format!(
            "{done:.1} / {:.1} MiB ({:.0}%)",
            t as f64 / (1u64 << 20) as f64,
            100.0 * p["bytes_downloaded"].as_u64().unwrap_or(0) as f64 / t as f64
        ),
        _ => format!("{done:.1} MiB"),
    };
    let rate = p["rate_bytes_per_second"].as_u64().unwrap_or(0) as f64 / 1e6;
    let resumes = p["resumes"].as_u64().unwrap_or(0);
    let mut line = format!(
        "{:<11} {of}, written {:.1} MiB, {rate:.1} MB/s",
        p["phase"].as_str().unwrap_or("?"),
        mib(&p["bytes_written"])
    );
    if resumes > 0 {
        line.push_str(&format!(", {resumes} resume(s)"));
    }
    line
}

/// The boot entry OVMF started, as its console names it:
/// `BdsDxe: starting Boot0005 "ironic1" from HD(...)/\EFI\BOOT\BOOTX64.EFI`.
pub fn uefi_boot_entry(console: &str) -> Option<String> {
    console
        .lines()
        .find(|l| l.contains("BdsDxe: starting Boot"))
        .map(|l| l.trim().to_string())
}

/// Waits (blocking; call through `block_in_place` in async code) until the
/// disk-booted machine printed `needle` and powered off; returns the time
/// from power-on to `needle`.
pub fn wait_booted(vm: &mut Vm<'_>, needle: &str, timeout: Duration) -> Result<Duration> {
    let at = vm.wait_console(needle, timeout)?;
    vm.wait_exit(Duration::from_secs(60))?;
    Ok(at)
}

/// The names of the agent's `commands` (its command list, as Ironic ran
/// them): `get_deploy_steps, execute_deploy_step(write_image), …`.
pub fn command_names(commands: &[Value]) -> String {
    commands
        .iter()
        .map(|c| {
            let name = c["command_name"].as_str().unwrap_or("?");
            let step = c["command_result"]["deploy_step"]["step"]
                .as_str()
                .or(c["command_result"]["clean_step"]["step"].as_str());
            match step {
                Some(s) => format!("{name}({s})"),
                None => name.to_string(),
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// `$DEMO_STARTED_AT` (seconds since the epoch, which `ci/demo` exports)
/// as an instant, so a demo's times continue `ci/demo`'s; now when unset or
/// implausible.
pub fn demo_started_at() -> Instant {
    let now = Instant::now();
    std::env::var("DEMO_STARTED_AT")
        .ok()
        .and_then(|s| s.trim().parse::<f64>().ok())
        .and_then(|at| {
            let since = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .ok()?
                .as_secs_f64()
                - at;
            (0.0..86400.0)
                .contains(&since)
                .then(|| now.checked_sub(Duration::from_secs_f64(since)))
                .flatten()
        })
        .unwrap_or(now)
}

/// The demo's output: each line stamped with the time since the demo
/// started; progress shown in place on a terminal (a line per change
/// otherwise); and [`Printer::meanwhile`], which runs a long blocking step
/// while saying every [`HEARTBEAT`] that it is still running, so the demo
/// is never silent for long. A clone keeps the same clock.
#[derive(Debug, Clone)]
pub struct Printer {
    t0: Instant,
    tty: bool,
    /// A progress line is shown in place and wants a newline first.
    open_status: bool,
    last_status: String,
    last_output: Instant,
}

/// How long [`Printer::meanwhile`] (and the demo's waits) may stay silent.
pub const HEARTBEAT: Duration = Duration::from_secs(10);

impl Printer {
    /// Times lines from `t0`.
    pub fn new(t0: Instant) -> Self {
        Self {
            t0,
            tty: std::io::stdout().is_terminal(),
            open_status: false,
            last_status: String::new(),
            last_output: Instant::now(),
        }
    }

    /// Time since `t0`.
    pub fn elapsed(&self) -> Duration {
        self.t0.elapsed()
    }

    /// Time since the last line (or progress update) was printed.
    pub fn quiet_for(&self) -> Duration {
        self.last_output.elapsed()
    }

    fn stamp(&self) -> String {
        format!("[{:>6.1}s]", self.elapsed().as_secs_f64())
    }

    /// Prints `text` as a line of its own.
    pub fn line(&mut self, text: impl std::fmt::Display) {
        if std::mem::take(&mut self.open_status) {
            println!();
        }
        println!("{} {text}", self.stamp());
        self.last_output = Instant::now();
    }

    /// Shows a progress line: in place on a terminal, else as a line;
    /// nothing when it did not change.
    pub fn status(&mut self, text: &str) {
        if text == self.last_status {
            return;
        }
        self.last_status = text.to_string();
        if self.tty {
            print!("\r\x1b[K{} {text}", self.stamp());
            let _ = std::io::stdout().flush();
            self.open_status = true;
            self.last_output = Instant::now();
        } else {
            self.line(text);
        }
    }

    /// Runs the blocking `f` on a thread of its own; meanwhile, every
    /// [`HEARTBEAT`], prints that it is still `what`, with the last line of
    /// `log` (a console or a build log) when there is one.
    pub fn meanwhile<T: Send>(
        &mut self,
        what: &str,
        log: Option<&Path>,
        f: impl FnOnce() -> T + Send,
    ) -> T {
        std::thread::scope(|s| {
            let job = s.spawn(f);
            let start = Instant::now();
            while !job.is_finished() {
                std::thread::sleep(Duration::from_millis(100));
                if self.quiet_for() >= HEARTBEAT && !job.is_finished() {
                    let tail = log
                        .and_then(last_line)
                        .map(|l| format!(" | {l}"))
                        .unwrap_or_default();
                    self.line(format!(
                        "… still {what} ({:.0} s){tail}",
                        start.elapsed().as_secs_f64()
                    ));
                }
            }
            job.join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
        })
    }
}

/// The last non-empty line of a console or log file, without terminal
/// escapes or control characters, cut to 100 characters.
pub fn last_line(path: &Path) -> Option<String> {
    let bytes = std::fs::read(path).ok()?;
    let text = String::from_utf8_lossy(&bytes[bytes.len().saturating_sub(16 << 10)..]);
    plain_lines(&text)
        .into_iter()
        .rev()
        .find(|l| !l.is_empty())
        .map(|l| l.chars().take(100).collect())
}

/// `text` split into lines (at `\n` and `\r`), trimmed, with ANSI escape
/// sequences (firmware consoles draw with them) and other control
/// characters removed.
pub fn plain_lines(text: &str) -> Vec<String> {
    let mut lines = vec![String::new()];
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\n' | '\r' => lines.push(String::new()),
            '\x1b' => {
                // CSI: ESC [ parameters, then one final byte in @..~.
                if chars.next_if_eq(&'[').is_some() {
                    for p in chars.by_ref() {
                        if ('@'..='~').contains(&p) {
                            break;
                        }
                    }
                }
            }
            c if c.is_control() => {}
            c => lines.last_mut().expect("never empty").push(c),
        }
    }
    lines.iter().map(|l| l.trim().to_string()).collect()
}

#[cfg(test)]
mod tests {
    use super::{command_names, plain_lines};

    #[test]
    fn command_names_carry_their_step() {
        let commands = serde_json::json!([
            {"command_name": "get_deploy_steps", "command_result": null},
            {"command_name": "execute_deploy_step",
             "command_result": {"deploy_step": {"step": "write_image"}}},
            {"command_name": "execute_clean_step",
             "command_result": {"clean_step": {"step": "erase_devices_metadata"}}},
            {"command_result": {}},
        ]);
        assert_eq!(
            command_names(commands.as_array().unwrap()),
            "get_deploy_steps, execute_deploy_step(write_image), \
             execute_clean_step(erase_devices_metadata), ?"
        );
    }

    #[test]
    fn console_lines_lose_escapes_and_split_at_carriage_returns() {
        assert_eq!(
            plain_lines("\x1b[2J\x1b[01;01HBdsDxe: starting\r\n  next \x07line\n"),
            ["BdsDxe: starting", "", "next line", ""]
        );
    }
}
