//! Real Ironic driving a machine on the bed through its Redfish BMC: the
//! pieces `tests/ironic_drives_ramdisk.rs` and the demo (`src/bin/demo.rs`)
//! share.
//!
//! The machine is a libvirt domain behind the bed's BMC
//! ([`super::redfish`]: sushy-tools and a private libvirtd). Ironic's
//! `redfish` hardware type powers it and sets its boot device; its `ipxe`
//! boot interface writes `boot.ipxe`, the node's iPXE config, kernel and
//! ramdisk into its `http_root` ([`ironic_conf`], served by
//! [`HttpRoot`]), and the bed's dnsmasq sends iPXE clients to that
//! `boot.ipxe` ([`NetOptions::ironic_ipxe`]): QEMU's NIC option ROM is
//! iPXE under SeaBIOS and, as its EFI driver, under OVMF (a firmware PXE
//! without iPXE would get `snponly.efi` first, as Metal3's dnsmasq does;
//! not needed on this bed). So the domain
//! really network-boots the deploy ramdisk whenever Ironic wants the agent,
//! and boots from its disk after a deploy. Nobody here plays the BMC: a
//! [`Flow`] asks Ironic for a state and watches Ironic's node, the domain's
//! power state and boot order as libvirt has them, and its serial console
//! (one file across all boots, [`Machine`]).
//!
//! With a [`Reporter`] (the demo) a flow also prints every provision-state
//! and power-state change Ironic reports, the agent's log lines from the
//! console and, while the agent writes the image, its progress from its
//! own command list (called as the conductor calls it: the token and
//! certificate from Ironic's database), and it is never silent for longer
//! than [`HEARTBEAT`].
//!
//! [`NetOptions::ironic_ipxe`]: super::NetOptions::ironic_ipxe

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use serde_json::{json, Value};

use super::deploy::{self, Printer, HEARTBEAT};
use super::http_root::HttpRoot;
use super::redfish::{self, Bmc, System};
use super::BRIDGE_IP;
use crate::ironic::{reached, settled_in, Ironic, Until, Watch, POLL_ANY, POLL_SETTLED};
use crate::testimage;

/// The port of Ironic's `http_root` on the bed's bridge address.
pub const HTTP_PORT: u16 = 8088;

/// What the deploy ramdisk's init prints first: one per ramdisk boot.
pub const RAMDISK_START: &str = "deploy ramdisk init starting";

/// What the kernel prints when the machine powers itself off.
const POWER_DOWN: &str = "reboot: Power down";

/// `http://10.99.0.1:8088`: Ironic's `[deploy] http_url`.
pub fn http_url() -> String {
    format!("http://{BRIDGE_IP}:{HTTP_PORT}")
}

/// Ironic's `boot.ipxe` there, where the bed's dnsmasq sends iPXE clients.
pub fn boot_script_url() -> String {
    format!("{}/boot.ipxe", http_url())
}

/// Ironic's configuration for a Redfish machine booted by `ipxe` (loaded
/// after `ci/ironic/ironic.conf` and the state directory's `paths.conf`):
///
/// * hardware type `redfish` beside `fake-hardware` (which `start.sh`'s
///   readiness check looks for), `ipxe` boot, `redfish` power and
///   management;
/// * `[deploy] http_root`/`http_url`: `http_root`, served at [`http_url`],
///   where Ironic writes `boot.ipxe`, `pxelinux.cfg/<MAC>`, and the node's
///   `config`, `deploy_kernel` and `deploy_ramdisk`; `[dhcp] dhcp_provider
///   = none` (from `ironic.conf`) as in Metal3: the bed's dnsmasq is
///   configured once, Ironic never touches DHCP;
/// * `[pxe] kernel_append_params = console=ttyS0` (the console the test
///   reads; Ironic adds `ipa-api-url`, `ipa-debug=1` and `BOOTIF`);
///   `[inspector] extra_kernel_params` = `inspection_params`;
/// * `[agent] post_deploy_get_power_state_retries` and `_interval`: 30 ×
///   1 s, the 30 s Ironic's defaults allow (6 × 5 s; `ironic.conf` cuts
///   them to 2 × 1 s for fake power, which never goes off), polled every
///   second: after `standby.power_off` Ironic waits that long for the agent
///   to power the machine off before it would force it;
/// * `[conductor] force_power_state_during_sync = false`: the deployed test
///   system powers itself off after printing its marker, and Ironic's
///   power sync must record that, not power it on again (a second disk
///   boot nobody asked for).
pub fn ironic_conf(http_root: &Path, inspection_params: &str) -> String {
    format!(
        "[DEFAULT]\n\
         enabled_hardware_types = fake-hardware,redfish\n\
         enabled_boot_interfaces = fake,ipxe\n\
         enabled_power_interfaces = fake,redfish\n\
         enabled_management_interfaces = noop,fake,redfish\n\
         default_boot_interface = ipxe\n\
         default_power_interface = redfish\n\
         default_management_interface = redfish\n\
         [agent]\n\
         post_deploy_get_power_state_retries = 30\n\
         post_deploy_get_power_state_retry_interval = 1\n\
         [conductor]\n\
         force_power_state_during_sync = false\n\
         [deploy]\n\
         http_root = {root}\n\
         http_url = {url}\n\
         [pxe]\n\
         kernel_append_params = console=ttyS0\n\
         [inspector]\n\
         extra_kernel_params = {inspection_params}\n",
        root = http_root.display(),
        url = http_url(),
    )
}

/// Ironic's `http_root`, served on the bed: a directory holding the deploy
/// ramdisk (`deploy.kernel`, `deploy.initramfs`: the node's
/// `deploy_kernel`/`deploy_ramdisk` URLs, which Ironic downloads into its
/// cache and links into the node's directory) and whatever Ironic writes.
#[derive(Debug)]
pub struct PxeRoot {
    /// The server and its access log.
    pub http: HttpRoot,
    dir: tempfile::TempDir,
}

impl PxeRoot {
    /// A fresh `http_root` with the ramdisk from `ramdisk` (a directory
    /// with `deploy.kernel` and `deploy.initramfs`), served at
    /// [`http_url`].
    pub fn start(net: &super::Net, ramdisk: &Path) -> Result<Self> {
        let dir = tempfile::Builder::new()
            .prefix("ironic-http-root-")
            .tempdir()
            .context("Ironic's http_root")?;
        for f in ["deploy.kernel", "deploy.initramfs"] {
            let to = dir.path().join(f);
            // A hard link where possible (the initramfs is large).
            if std::fs::hard_link(ramdisk.join(f), &to).is_err() {
                std::fs::copy(ramdisk.join(f), &to)
                    .with_context(|| format!("copying {f} from {}", ramdisk.display()))?;
            }
        }
        let http = HttpRoot::serve(net, dir.path(), HTTP_PORT)?;
        Ok(Self { http, dir })
    }

    /// The directory (Ironic's `[deploy] http_root`).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

/// Enrolls the domain `system` as a `redfish` node booted by `ipxe`
/// (`boot_mode` `bios` or `uefi`), with a PXE port for `mac`, and takes it
/// to `manageable` (Ironic verifies the BMC). Returns the node's UUID.
pub async fn enroll(
    ironic: &Ironic,
    bmc: &Bmc<'_>,
    system: &System,
    name: &str,
    mac: &str,
    boot_mode: &str,
) -> Result<String> {
    let url = http_url();
    let node = ironic
        .create_node(json!({
            "name": name,
            "driver": "redfish",
            "driver_info": {
                "redfish_address": bmc.url(),
                "redfish_system_id": system.path(),
                "redfish_username": redfish::USER,
                "redfish_password": redfish::PASSWORD,
                "deploy_kernel": format!("{url}/deploy.kernel"),
                "deploy_ramdisk": format!("{url}/deploy.initramfs"),
            },
            "boot_interface": "ipxe",
            "power_interface": "redfish",
            "management_interface": "redfish",
            "inspect_interface": "agent",
            "deploy_interface": "direct",
            "network_interface": "noop",
            "automated_clean": false,
            "properties": {"cpu_arch": "x86_64", "capabilities": format!("boot_mode:{boot_mode}")},
        }))
        .await
        .context("enrolling the node")?;
    let uuid = node["uuid"]
        .as_str()
        .context("node without uuid")?
        .to_string();
    ironic.create_port(&uuid, mac).await?;
    ironic
        .move_to(&uuid, "manage", "manageable", Duration::from_secs(60))
        .await
        .context("manage (Ironic verifies the BMC)")?;
    Ok(uuid)
}

/// The machine as the bed sees it: the libvirt domain behind the BMC, its
/// disk and its serial console (appended to across boots).
#[derive(Debug)]
pub struct Machine<'b> {
    bmc: &'b Bmc<'b>,
    system: System,
    disk: PathBuf,
}

/// What the deployed system showed when it booted from disk.
#[derive(Debug)]
pub struct DiskBoot {
    /// From `active` to the image's marker line.
    pub marker_after: Duration,
    /// Its config drive's `meta_data.json`.
    pub meta: Value,
    /// The console of that boot (from the ramdisk's power-off on).
    pub console: String,
}

impl<'b> Machine<'b> {
    /// The domain `system` of `bmc`, whose first disk's file is `disk`.
    pub fn new(bmc: &'b Bmc<'b>, system: System, disk: &Path) -> Self {
        Self {
            bmc,
            system,
            disk: disk.to_path_buf(),
        }
    }

    /// The first disk's backing file.
    pub fn disk(&self) -> &Path {
        &self.disk
    }

    /// The domain behind the BMC.
    pub fn system(&self) -> &System {
        &self.system
    }

    /// The console file (all boots).
    pub fn console_path(&self) -> &Path {
        &self.system.console
    }

    /// The console's bytes so far, as text (firmware writes escapes and
    /// bytes that are not UTF-8).
    pub fn console(&self) -> String {
        String::from_utf8_lossy(&std::fs::read(&self.system.console).unwrap_or_default())
            .into_owned()
    }

    /// The console's length in bytes: a mark for [`Machine::console_since`].
    pub fn console_len(&self) -> usize {
        std::fs::metadata(&self.system.console).map_or(0, |m| m.len() as usize)
    }

    /// The console from byte `mark` on.
    pub fn console_since(&self, mark: usize) -> String {
        let bytes = std::fs::read(&self.system.console).unwrap_or_default();
        String::from_utf8_lossy(&bytes[mark.min(bytes.len())..]).into_owned()
    }

    /// How often the deploy ramdisk started, from the console.
    pub fn ramdisk_boots(&self) -> usize {
        self.console().matches(RAMDISK_START).count()
    }

    /// libvirt's state of the domain (`running`, `shut off`).
    pub fn state(&self) -> Result<String> {
        self.bmc.domain_state(&self.system.name)
    }

    /// Fails unless the domain boots `device` first (`network`, `disk`),
    /// as Ironic set it through the BMC.
    pub fn expect_boot_device(&self, device: &str, when: &str) -> Result<()> {
        let first = self.bmc.first_boot_device(&self.system.name)?;
        ensure!(
            first.as_deref() == Some(device),
            "{when}: the domain boots {first:?} first, not {device:?} (Ironic sets it through the BMC)"
        );
        Ok(())
    }

    /// Waits until libvirt reports the domain shut off.
    pub fn wait_shut_off(&self, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            let state = self.state()?;
            if state == "shut off" {
                return Ok(());
            }
            if Instant::now() >= deadline {
                bail!(
                    "the domain is still {state:?} after {timeout:?}; console: {}",
                    self.console_path().display()
                );
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Waits (blocking) until the console from `mark` on shows the agent
    /// powering the ramdisk off, then the deployed system's `marker` line
    /// and its config drive's `meta_data.json`, and the domain shut off
    /// (the test system powers off after printing them). `since` is when
    /// the node became `active`.
    pub fn wait_disk_boot(
        &self,
        mark: usize,
        marker: &str,
        since: Instant,
        timeout: Duration,
    ) -> Result<DiskBoot> {
        let line = testimage::marker_line(marker);
        let deadline = Instant::now() + timeout;
        let marker_after = loop {
            if self.console_since(mark).contains(&line) {
                break since.elapsed();
            }
            if Instant::now() >= deadline {
                bail!(
                    "the deployed system printed no {line:?} within {timeout:?} of `active`; console: {}",
                    self.console_path().display()
                );
            }
            std::thread::sleep(Duration::from_millis(200));
        };
        self.wait_shut_off(Duration::from_secs(60))
            .context("the deployed system did not power off after its marker")?;
        let text = self.console_since(mark);
        // The ramdisk powered itself off (standby.power_off) before the
        // disk boot: Ironic's hard power off would print nothing.
        let off = text.find(POWER_DOWN).with_context(|| {
            format!(
                "the ramdisk never powered the machine off (no {POWER_DOWN:?}); console: {}",
                self.console_path().display()
            )
        })?;
        ensure!(
            text.find(&line).is_some_and(|at| off < at),
            "the deployed system booted before the ramdisk powered off; console: {}",
            self.console_path().display()
        );
        let console = text[off..].to_string();
        let meta = testimage::meta_data(&console).with_context(|| {
            format!(
                "the deployed system printed no config drive; console: {}",
                self.console_path().display()
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
}

/// A node that Ironic drives, with the machine it stands for.
#[derive(Debug)]
pub struct Flow<'a, 'b> {
    /// The Ironic driving the node.
    pub ironic: &'a Ironic,
    /// The node.
    pub uuid: String,
    /// The machine.
    pub machine: Machine<'b>,
    /// How long a flow may take to reach its end state: a PXE boot under
    /// TCG plus the flow.
    pub timeout: Duration,
    report: Option<Reporter>,
    /// The console's length when the last deploy was asked for.
    deploy_mark: usize,
    /// When the last deploy reached `active`.
    active_at: Option<Instant>,
}

impl<'a, 'b> Flow<'a, 'b> {
    /// A flow that prints nothing.
    pub fn new(ironic: &'a Ironic, uuid: &str, machine: Machine<'b>, timeout: Duration) -> Self {
        Self {
            ironic,
            uuid: uuid.to_string(),
            machine,
            timeout,
            report: None,
            deploy_mark: 0,
            active_at: None,
        }
    }

    /// The same flow, reporting through `out` (see [`Reporter`]).
    pub fn reporting(self, out: Printer) -> Self {
        let mut r = Reporter::new(out);
        r.console = Some(self.machine.console_path().to_path_buf());
        Self {
            report: Some(r),
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
        match &mut self.report {
            Some(r) => {
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
    fn hold<T: Send>(&mut self, what: &str, f: impl FnOnce(&Machine<'b>) -> T + Send) -> T {
        let machine = &self.machine;
        tokio::task::block_in_place(|| match &mut self.report {
            Some(r) => r
                .out
                .meanwhile(what, Some(machine.console_path()), || f(machine)),
            None => f(machine),
        })
    }

    /// Waits for the wait state `state`, in which Ironic has set the boot
    /// device to PXE and powered the machine on through the BMC: the
    /// domain must boot its NIC first.
    async fn ramdisk_wanted(&mut self, state: &str) -> Result<()> {
        self.wait_for_any_target(state, Duration::from_secs(120))
            .await?;
        self.machine
            .expect_boot_device("network", state)
            .context("Ironic's ipxe boot")?;
        self.say("machine: Ironic set PXE first through the BMC and powered it on; it network-boots Ironic's iPXE config");
        Ok(())
    }

    /// Waits until Ironic has powered the node off through the BMC; the
    /// domain must be shut off then.
    pub async fn follow_power_off(&mut self) -> Result<()> {
        self.poll(POLL_ANY, Duration::from_secs(120), Until::PowerOff)
            .await
            .context("Ironic did not power the node off")?;
        self.machine
            .wait_shut_off(Duration::from_secs(30))
            .context("Ironic reports power off")
    }

    /// `inspect` with the agent inspect interface (Ironic boots the ramdisk
    /// with `[inspector] extra_kernel_params` and the callback URL) until
    /// `manageable`, and the machine powered off. Returns the node.
    pub async fn inspect(&mut self) -> Result<Value> {
        self.ironic
            .provision(&self.uuid, json!({"target": "inspect"}))
            .await?;
        self.ramdisk_wanted("inspect wait").await?;
        let node = self
            .wait_for("manageable", self.timeout)
            .await
            .context("inspection")?;
        self.follow_power_off().await?;
        Ok(node)
    }

    /// Cleaning until `available`: the ramdisk booted for `clean wait`, the
    /// machine powered off by Ironic afterwards. Returns the node.
    pub async fn cleaned(&mut self) -> Result<Value> {
        self.ramdisk_wanted("clean wait").await?;
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
    /// (with `configdrive` if given) and waits until Ironic boots the
    /// ramdisk for it (`wait call-back`).
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
        self.deploy_mark = self.machine.console_len();
        self.active_at = None;
        self.ironic.provision(&self.uuid, body).await?;
        self.ramdisk_wanted("wait call-back").await
    }

    /// A deploy until `active`: by then Ironic has had the agent power the
    /// machine off, set the boot device to disk and powered it on. Returns
    /// the node.
    pub async fn deploy(&mut self, instance_info: Value, configdrive: Value) -> Result<Value> {
        self.start_deploy(instance_info, Some(configdrive)).await?;
        let node = self.wait_for("active", self.timeout).await?;
        self.active_at = Some(Instant::now());
        self.machine
            .expect_boot_device("disk", "active")
            .context("Ironic's boot device after a deploy")?;
        self.say("machine: Ironic set the disk first through the BMC and powered it on");
        Ok(node)
    }

    /// After [`Flow::deploy`]: the machine, powered off by the agent, boots
    /// from its disk; the deployed system prints `marker`'s line and its
    /// config drive's `meta_data.json`, then powers off.
    pub async fn boot_disk(&mut self, marker: &str, timeout: Duration) -> Result<DiskBoot> {
        let since = self.active_at.context("no deploy reached active")?;
        let mark = self.deploy_mark;
        let booted = self.hold("booting from disk", |m| {
            m.wait_disk_boot(mark, marker, since, timeout)
        })?;
        self.say(format!("machine: the agent powered the ramdisk off ({POWER_DOWN}), then the machine booted from its disk"));
        // Ironic did not force the power off the agent was asked for.
        let log = std::fs::read_to_string(self.ironic.log_path()).unwrap_or_default();
        ensure!(
            !log.contains("Forcing hard power off"),
            "Ironic had to force the power off after standby.power_off; log: {}",
            self.ironic.log_path().display()
        );
        Ok(booted)
    }

    /// Undeploy with automated cleaning, until `available`.
    pub async fn undeploy(&mut self) -> Result<Value> {
        self.ironic
            .provision(&self.uuid, json!({"target": "deleted"}))
            .await?;
        self.cleaned().await
    }

    /// Asks Ironic to power the node off (an operator's action), and waits
    /// until it is and the domain is shut off.
    pub async fn power_off(&mut self) -> Result<()> {
        self.ironic.set_power(&self.uuid, "power off").await?;
        self.ironic
            .wait_power(&self.uuid, "power off", Duration::from_secs(120))
            .await?;
        self.machine.wait_shut_off(Duration::from_secs(30))
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
