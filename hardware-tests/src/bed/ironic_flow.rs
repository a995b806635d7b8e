//! Real Ironic driving a machine on the bed: the pieces
//! `tests/ironic_drives_ramdisk.rs` and the demo (`src/bin/demo.rs`) share.
//!
//! Ironic runs with fake power and boot (no BMC can reach a QEMU VM), so
//! the caller is the machine's power and boot device ([`Machine`]): when
//! Ironic waits for the agent (`inspect wait`, `clean wait`, `wait
//! call-back`) the VM PXE-boots the ramdisk with the kernel arguments
//! Ironic's own PXE boot would give; when Ironic has powered the node off
//! without telling the agent (end of inspection and cleaning, undeploy) the
//! VM is stopped; after a deploy Ironic's `standby.power_off` makes the
//! ramdisk power the VM off itself (checked), and the machine boots from
//! its disk. [`Flow`] takes a node through Ironic's states that way.
//!
//! With a [`Reporter`] (the demo) a flow also prints every provision-state
//! and power-state change Ironic reports, the agent's log lines from the
//! VM's console and, while the agent writes the image, its progress from its
//! own command list (called as the conductor calls it: the token and
//! certificate from Ironic's database), and it is never silent for longer
//! than [`HEARTBEAT`].

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use serde_json::{json, Value};

use super::deploy::{self, Printer, HEARTBEAT};
use super::{Boot, Net, Vm, VmSpec};
use crate::ironic::{reached, settled_in, Ironic, Until, Watch, POLL_ANY, POLL_SETTLED};
use crate::testimage;

/// The machine's power and boot device, as the caller plays them.
#[derive(Debug)]
pub struct Machine<'n> {
    net: &'n Net,
    template: VmSpec,
    api: String,
    vm: Option<Vm<'n>>,
    /// Whether `vm` runs the ramdisk (else the deployed system).
    ramdisk: bool,
    boots: usize,
}

/// What the deployed system showed when booted from disk.
#[derive(Debug)]
pub struct DiskBoot {
    /// From starting QEMU to the image's marker line.
    pub marker_after: Duration,
    /// Its config drive's `meta_data.json`.
    pub meta: Value,
    /// The whole console.
    pub console: String,
}

impl<'n> Machine<'n> {
    /// A machine like `template` (firmware, disks, NICs; its name prefixes
    /// each boot's console, `<name>-boot<N>`), whose ramdisk is told that
    /// Ironic's API is `api`.
    pub fn new(net: &'n Net, template: VmSpec, api: &str) -> Self {
        Self {
            net,
            template,
            api: api.to_string(),
            vm: None,
            ramdisk: false,
            boots: 0,
        }
    }

    /// The first disk's backing file.
    pub fn disk(&self) -> &Path {
        &self.template.disks[0].path
    }

    /// How often the machine was powered on.
    pub fn boots(&self) -> usize {
        self.boots
    }

    /// The running VM's console file.
    pub fn console_path(&self) -> Option<&Path> {
        self.vm.as_ref().map(|vm| vm.console_path())
    }

    fn start(&mut self, boot: Boot) -> Result<()> {
        ensure!(self.vm.is_none(), "the VM is already running");
        self.boots += 1;
        let spec = VmSpec {
            name: format!("{}-boot{}", self.template.name, self.boots),
            boot,
            ..self.template.clone()
        };
        self.vm = Some(Vm::start(self.net, &spec)?);
        Ok(())
    }

    /// PXE-boots the ramdisk with `args` added to Ironic's kernel parameters.
    pub fn pxe_boot(&mut self, args: &str) -> Result<()> {
        self.net.set_kernel_args(&format!(
            "console=ttyS0 panic=-1 ipa-api-url={} {args}",
            self.api
        ))?;
        self.start(Boot::Network)?;
        self.ramdisk = true;
        Ok(())
    }

    /// Powers the machine on from its disk; [`Machine::wait_disk_boot`]
    /// follows it.
    pub fn start_disk_boot(&mut self) -> Result<()> {
        self.start(Boot::Disk)?;
        self.ramdisk = false;
        Ok(())
    }

    /// Waits (blocking) until the deployed system printed `marker`'s line
    /// and its config drive's `meta_data.json`, then powered off.
    pub fn wait_disk_boot(&mut self, marker: &str, timeout: Duration) -> Result<DiskBoot> {
        let vm = self.vm.as_mut().context("the VM is not running")?;
        let marker_after = deploy::wait_booted(vm, &testimage::marker_line(marker), timeout)
            .context("the deployed system")?;
        let console = vm.console();
        let meta = testimage::meta_data(&console).with_context(|| {
            format!(
                "the deployed system printed no config drive; console: {}",
                vm.console_path().display()
            )
        })?;
        let meta =
            serde_json::from_str(&meta).with_context(|| format!("meta_data.json {meta:?}"))?;
        Ok(DiskBoot {
            marker_after,
            meta,
            console,
        })
    }

    /// Ironic powered the node off without telling the agent: stop the VM.
    /// A ramdisk must still be running then (the deployed system may have
    /// halted by itself).
    pub fn power_off(&mut self) -> Result<()> {
        if let Some(mut vm) = self.vm.take() {
            ensure!(
                !self.ramdisk || vm.exited()?.is_none(),
                "the ramdisk stopped by itself; console: {}",
                vm.console_path().display()
            );
            vm.kill();
        }
        Ok(())
    }

    /// The ramdisk was told to power off: the VM must exit by itself.
    pub fn wait_powered_off_by_agent(&mut self) -> Result<()> {
        let mut vm = self.vm.take().context("no running VM")?;
        let status = vm
            .wait_exit(Duration::from_secs(60))
            .context("the ramdisk did not power the VM off")?;
        ensure!(status.success(), "QEMU: {status}");
        ensure!(
            vm.console().contains("reboot: Power down"),
            "no power-off on the console: {}",
            vm.console_path().display()
        );
        Ok(())
    }
}

/// A node that Ironic drives, with the machine it stands for.
#[derive(Debug)]
pub struct Flow<'a, 'n> {
    /// The Ironic driving the node.
    pub ironic: &'a Ironic,
    /// The node.
    pub uuid: String,
    /// Its power and boot device.
    pub machine: Machine<'n>,
    /// How long a flow may take to reach its end state: a PXE boot under
    /// TCG plus the flow.
    pub timeout: Duration,
    report: Option<Reporter>,
}

impl<'a, 'n> Flow<'a, 'n> {
    /// A flow that prints nothing.
    pub fn new(ironic: &'a Ironic, uuid: &str, machine: Machine<'n>, timeout: Duration) -> Self {
        Self {
            ironic,
            uuid: uuid.to_string(),
            machine,
            timeout,
            report: None,
        }
    }

    /// The same flow, reporting through `out` (see [`Reporter`]).
    pub fn reporting(self, out: Printer) -> Self {
        Self {
            report: Some(Reporter::new(out)),
            ..self
        }
    }

    /// The reporter, if the flow reports.
    pub fn reporter(&mut self) -> Option<&mut Reporter> {
        self.report.as_mut()
    }

    /// Prints a line when the flow reports.
    pub fn say(&mut self, text: impl std::fmt::Display) {
        if let Some(r) = &mut self.report {
            r.out.line(text);
        }
    }

    async fn poll(&mut self, every: Duration, timeout: Duration, until: Until) -> Result<Value> {
        let console = self.machine.console_path().map(Path::to_path_buf);
        match &mut self.report {
            Some(r) => {
                r.console = console;
                self.ironic
                    .poll_node(&self.uuid, every, timeout, r, until)
                    .await
            }
            None => {
                self.ironic
                    .poll_node(&self.uuid, every, timeout, &mut (), until)
                    .await
            }
        }
    }

    /// [`Ironic::wait_for`], reported.
    pub async fn wait_for(&mut self, state: &str, timeout: Duration) -> Result<Value> {
        self.poll(POLL_SETTLED, timeout, settled_in(state)).await
    }

    /// [`Ironic::wait_for_any_target`], reported.
    pub async fn wait_for_any_target(&mut self, state: &str, timeout: Duration) -> Result<Value> {
        self.poll(POLL_ANY, timeout, reached(state)).await
    }

    /// Runs the blocking `f` on the machine; a reporting flow says
    /// meanwhile that it is still `what`, with the console's last line.
    fn hold<T: Send>(&mut self, what: &str, f: impl FnOnce(&mut Machine<'n>) -> T + Send) -> T {
        let machine = &mut self.machine;
        tokio::task::block_in_place(|| match &mut self.report {
            Some(r) => {
                let console = machine.console_path().map(Path::to_path_buf);
                r.out.meanwhile(what, console.as_deref(), || f(machine))
            }
            None => f(machine),
        })
    }

    fn pxe_boot(&mut self, args: &str) -> Result<()> {
        self.say("bmc: the machine PXE-boots the deploy ramdisk");
        self.machine.pxe_boot(args)
    }

    /// Waits until Ironic has powered the node off (fake power), then stops
    /// the VM, as a BMC would.
    pub async fn follow_power_off(&mut self) -> Result<()> {
        self.poll(POLL_ANY, Duration::from_secs(60), Until::PowerOff)
            .await
            .context("Ironic did not power the node off")?;
        if self.machine.vm.is_some() {
            self.say("bmc: Ironic powered the node off: the VM is stopped");
        }
        self.machine.power_off()
    }

    /// Waits for `state`, then boots the ramdisk as Ironic's PXE would.
    pub async fn boot_when(&mut self, state: &str) -> Result<()> {
        self.wait_for_any_target(state, Duration::from_secs(120))
            .await?;
        self.pxe_boot("")
    }

    /// `inspect` with the agent inspect interface (the ramdisk gets `args`
    /// besides the callback URL) until `manageable`; the VM stopped. Returns
    /// the node.
    pub async fn inspect(&mut self, args: &str) -> Result<Value> {
        self.ironic
            .provision(&self.uuid, json!({"target": "inspect"}))
            .await?;
        self.wait_for_any_target("inspect wait", Duration::from_secs(60))
            .await?;
        self.pxe_boot(&format!(
            "ipa-inspection-callback-url={}/v1/continue_inspection {args}",
            self.ironic.url
        ))?;
        let node = self
            .wait_for("manageable", self.timeout)
            .await
            .context("inspection")?;
        self.follow_power_off().await?;
        Ok(node)
    }

    /// Cleaning until `available`: the ramdisk booted at `clean wait`, the
    /// VM stopped when Ironic powers the node off. Returns the node.
    pub async fn cleaned(&mut self) -> Result<Value> {
        self.boot_when("clean wait").await?;
        let node = self.wait_for("available", self.timeout).await?;
        self.follow_power_off().await?;
        Ok(node)
    }

    /// `provide` with automated cleaning, until `available`.
    pub async fn provide(&mut self) -> Result<Value> {
        self.ironic
            .patch(
                &self.uuid,
                json!([{"op": "replace", "path": "/automated_clean", "value": true}]),
            )
            .await?;
        self.ironic
            .provision(&self.uuid, json!({"target": "provide"}))
            .await?;
        self.cleaned().await
    }

    /// Sets `instance_info` (JSON-patch operations), asks for `active`
    /// (with `configdrive` if given) and boots the ramdisk when Ironic
    /// waits for it.
    pub async fn start_deploy(
        &mut self,
        instance_info: Value,
        configdrive: Option<Value>,
    ) -> Result<()> {
        self.ironic.patch(&self.uuid, instance_info).await?;
        let mut body = json!({"target": "active"});
        if let Some(cd) = configdrive {
            body["configdrive"] = cd;
        }
        self.ironic.provision(&self.uuid, body).await?;
        self.boot_when("wait call-back").await
    }

    /// A deploy until `active`, the ramdisk having powered the VM off
    /// itself. Returns the node.
    pub async fn deploy(&mut self, instance_info: Value, configdrive: Value) -> Result<Value> {
        self.start_deploy(instance_info, Some(configdrive)).await?;
        let node = self.wait_for("active", self.timeout).await?;
        self.hold("waiting for the agent to power the machine off", |m| {
            m.wait_powered_off_by_agent()
        })?;
        self.say("machine: the agent powered it off (reboot: Power down)");
        Ok(node)
    }

    /// Undeploy with automated cleaning, until `available`.
    pub async fn undeploy(&mut self) -> Result<Value> {
        self.ironic
            .provision(&self.uuid, json!({"target": "deleted"}))
            .await?;
        // Tear-down powers the deployed system off before cleaning boots the ramdisk.
        self.wait_for_any_target("clean wait", Duration::from_secs(120))
            .await?;
        self.machine.power_off()?;
        self.cleaned().await
    }

    /// Boots the machine from its disk: the deployed system prints
    /// `marker`'s line and its config drive's `meta_data.json`, then powers
    /// off.
    pub async fn boot_disk(&mut self, marker: &str, timeout: Duration) -> Result<DiskBoot> {
        self.say("bmc: the machine boots from its disk");
        self.machine.start_disk_boot()?;
        self.hold("booting from disk", |m| m.wait_disk_boot(marker, timeout))
    }
}

/// Prints what a [`Flow`] sees: Ironic's provision and power states as
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

    /// Prints the agent's log lines that reached the console since the last
    /// call (whole lines only).
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
            http: agent::tls::http_client(false, Some(Path::new(ca)), Duration::from_secs(5))?,
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
        let doc: Value = self
            .http
            .get(format!(
                "{}/v1/commands/?agent_token={}",
                self.url, self.token
            ))
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?;
        Ok(doc["commands"].as_array().cloned().unwrap_or_default())
    }
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
