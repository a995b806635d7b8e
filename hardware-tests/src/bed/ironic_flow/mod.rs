//! Real Ironic driving a machine on the bed through its Redfish BMC: the
//! pieces `tests/qemu/ironic_drives_ramdisk.rs` and the demo (`src/bin/demo.rs`)
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
//! (one file across all boots, [`Machine`], in `machine.rs`).
//!
//! With a [`Reporter`] (the demo; `report.rs`) a flow also prints every
//! provision-state and power-state change Ironic reports, the agent's log
//! lines and each boot's kernel command line from the console and, while
//! the agent writes the image, its progress from its own command list
//! (called as the conductor calls it: the token and certificate from
//! Ironic's database), and it is never silent for longer than
//! [`HEARTBEAT`](super::deploy::HEARTBEAT).
//!
//! This file holds Ironic's configuration for it, the `http_root`, the
//! node's enrolment and [`Flow`].
//!
//! [`NetOptions::ironic_ipxe`]: super::NetOptions::ironic_ipxe

pub mod checks;
mod machine;
mod report;
mod split;

pub use machine::{DiskBoot, Machine};
pub use report::{agent_message, command_list, Reporter};
pub use split::Split;

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use serde_json::{json, Value};

use super::deploy::Printer;
use super::http_root::HttpRoot;
use super::redfish::{self, Bmc, System};
use super::BRIDGE_IP;
use crate::ironic::{reached, settled_in, Ironic, Until, POLL_ANY, POLL_SETTLED};

/// The port of Ironic's `http_root` on the bed's bridge address.
pub const HTTP_PORT: u16 = 8088;

/// What the deploy ramdisk's init prints first: one per ramdisk boot.
pub const RAMDISK_START: &str = "deploy ramdisk init starting";

/// What the kernel prints when the machine powers itself off.
const POWER_DOWN: &str = "reboot: Power down";

/// `http://10.99.0.1:8088`: Ironic's `[deploy] http_url`.
/// The NIC with `mac` in the inventory Ironic stored
/// (`Ironic::inventory`'s answer); panics naming the MAC and the document
/// when there is none.
pub fn stored_nic(stored: &Value, mac: &str) -> Value {
    stored["inventory"]["interfaces"]
        .as_array()
        .and_then(|l| l.iter().find(|i| i["mac_address"] == mac))
        .cloned()
        .unwrap_or_else(|| panic!("no interface with {mac} in the stored inventory: {stored}"))
}

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
        Self::start_appending(net, ramdisk, &[])
    }

    /// [`PxeRoot::start`] with `extra` (a compressed cpio archive, or
    /// nothing) appended to `deploy.initramfs`: the kernel unpacks
    /// concatenated archives in turn, a later file replacing an earlier
    /// one, so the ramdisk boots with `extra`'s files added.
    pub fn start_appending(net: &super::Net, ramdisk: &Path, extra: &[u8]) -> Result<Self> {
        let dir = tempfile::Builder::new()
            .prefix("ironic-http-root-")
            .tempdir()
            .context("Ironic's http_root")?;
        for f in ["deploy.kernel", "deploy.initramfs"] {
            let to = dir.path().join(f);
            if f == "deploy.initramfs" && !extra.is_empty() {
                let mut bytes = std::fs::read(ramdisk.join(f))
                    .with_context(|| format!("reading {f} from {}", ramdisk.display()))?;
                bytes.extend_from_slice(extra);
                std::fs::write(&to, bytes).with_context(|| format!("writing {}", to.display()))?;
                continue;
            }
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

/// Starts Ironic 39 in `net`'s namespace on the bridge's address and
/// `port` with the configuration `conf`, saying every [`super::deploy::HEARTBEAT`]
/// that it is still starting, then prints where it is up, in how long, its
/// log and the machine's `console` (the demos).
pub fn start_ironic_shown(
    out: &mut Printer,
    net: &super::Net,
    port: u16,
    conf: &str,
    console: &Path,
) -> Result<Ironic> {
    let t = Instant::now();
    let ironic = out
        .meanwhile("starting Ironic", None, || {
            Ironic::start_in(&net.ns, BRIDGE_IP, port, Some(conf))
        })
        .context("starting Ironic 39.0.0 in the namespace")?;
    out.line(format!(
        "Ironic up at {} in {:.1} s; its log: {}; console: {}",
        ironic.url,
        t.elapsed().as_secs_f64(),
        ironic.log_path().display(),
        console.display()
    ));
    Ok(ironic)
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

/// Where a flow began, for [`Flow::split`]: the ends of Ironic's log and
/// of the console, and the moment.
#[derive(Debug, Clone, Copy)]
pub struct Mark {
    log: u64,
    console: usize,
    at: Instant,
}

impl<'a, 'b> Flow<'a, 'b> {
    /// Marks the start of a flow (before its request to Ironic).
    pub fn mark(&self) -> Mark {
        Mark {
            log: std::fs::metadata(self.ironic.log_path()).map_or(0, |m| m.len()),
            console: self.machine.console_len(),
            at: Instant::now(),
        }
    }

    /// Where the time since `mark` went ([`Split`]), from Ironic's log and
    /// the console; `None` if their lines do not allow it.
    pub fn split(&self, mark: Mark) -> Option<Split> {
        let total = mark.at.elapsed().as_secs_f64();
        let log = std::fs::read(self.ironic.log_path()).ok()?;
        let log = String::from_utf8_lossy(log.get(mark.log as usize..)?);
        Split::of(
            total,
            &log,
            &self.machine.console_since(mark.console),
            &self.uuid,
        )
    }

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
        r.set_console(self.machine.console_path().to_path_buf());
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

    /// Prints the names of the commands Ironic ran on the agent (from the
    /// command list the reporter saw), when the flow reports and saw any.
    pub fn say_command_list(&mut self) {
        let Some(r) = &mut self.report else {
            return;
        };
        if !r.commands.is_empty() {
            let names = super::deploy::command_names(&r.commands);
            r.out.line(format!(
                "what Ironic ran on the agent (its command list): {names}"
            ));
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

    /// A manual clean with `steps` until `manageable`: the ramdisk booted
    /// for `clean wait`, the machine powered off by Ironic afterwards.
    /// Returns the node.
    pub async fn manual_clean(&mut self, steps: Value) -> Result<Value> {
        self.ironic
            .provision(&self.uuid, json!({"target": "clean", "clean_steps": steps}))
            .await?;
        self.ramdisk_wanted("clean wait").await?;
        let node = self
            .wait_for("manageable", self.timeout)
            .await
            .context("manual clean")?;
        self.follow_power_off().await?;
        Ok(node)
    }

    /// Servicing an `active` node with `steps`: Ironic boots the ramdisk
    /// for `service wait`, runs the steps and returns the node to
    /// `active` with the disk first. Returns the node.
    pub async fn service(&mut self, steps: Value) -> Result<Value> {
        self.ironic
            .provision(
                &self.uuid,
                json!({"target": "service", "service_steps": steps}),
            )
            .await?;
        self.ramdisk_wanted("service wait").await?;
        let node = self
            .wait_for("active", self.timeout)
            .await
            .context("servicing")?;
        self.machine
            .expect_boot_device("disk", "active after servicing")
            .context("Ironic's boot device after servicing")?;
        Ok(node)
    }

    /// `provide` with automated cleaning, until `available`.
    pub async fn provide(&mut self) -> Result<Value> {
        self.ironic.enable_automated_clean(&self.uuid).await?;
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
        self.deploy_with(instance_info, Some(configdrive)).await
    }

    /// [`Flow::deploy`] with or without a config drive.
    pub async fn deploy_with(
        &mut self,
        instance_info: Value,
        configdrive: Option<Value>,
    ) -> Result<Value> {
        self.start_deploy(instance_info, configdrive).await?;
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

    /// [`Flow::boot_disk`] for a system that shows no config drive: the
    /// machine, powered off by the agent, boots from its disk and the
    /// deployed system prints `marker`'s line, then powers off. Returns the
    /// time from `active` to the marker.
    pub async fn boot_disk_marker(&mut self, marker: &str, timeout: Duration) -> Result<Duration> {
        let since = self.active_at.context("no deploy reached active")?;
        let mark = self.deploy_mark;
        let (after, _) = self.hold("booting from disk", |m| {
            m.wait_marker_boot(mark, marker, since, timeout)
        })?;
        let log = std::fs::read_to_string(self.ironic.log_path()).unwrap_or_default();
        ensure!(
            !log.contains("Forcing hard power off"),
            "Ironic had to force the power off after standby.power_off; log: {}",
            self.ironic.log_path().display()
        );
        Ok(after)
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
