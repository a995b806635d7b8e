//! The Arm server flow under unmodified Ironic 39 (issue 33), one
//! implementation for `tests/qemu/arm_ironic_flow.rs` (which asserts on its
//! result) and the demo (`demo --arch aarch64`, which prints it): the files
//! Ironic serves ([`ArmFiles`]: the aarch64 deploy kernel, ramdisk and
//! ESP as the `*_by_arch` entries, x86_64 stand-ins as the defaults, the
//! aarch64 test image as qcow2), the bed ([`ArmBed`]: an aarch64 libvirt
//! domain behind the Redfish BMC, Ironic's `http_root` server, Ironic),
//! the node's enrolment and the run from `manageable` through inspection,
//! automated cleaning and deploy to the deployed system's boot under
//! AAVMF ([`run`], on a [`Flow`] that reports when the demo asks it to).
//! Ironic boots the ramdisk by virtual media or, with [`ArmBoot::Pxe`],
//! over the network by its own `pxe` interface (GRUB), optionally under
//! Secure Boot. Ironic's configuration, the files and the ISO check are in
//! [`super::arm_flow`], the `pxe` parts in [`super::arm_pxe`].

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use image_builder::arch::Arch;
use serde_json::{json, Value};

pub use super::arm_flow::ArmFiles;
use super::arm_flow::{ironic_conf, read_arm_iso, ArmIso};
use super::arm_pxe::{read_tftp, ArmBoot, ArmTftp};
use super::deploy::{self, Printer};
use super::http_root::HttpRoot;
use super::ironic_flow::{Flow, Machine, RAMDISK_START};
use super::redfish::{self, Bmc, System};
use super::BRIDGE_IP;
use super::{metal3, Boot, Bus, Disk, Firmware, IronicTftp, Net, NetOptions, Nic, VmSpec};
use crate::ironic::Ironic;
use crate::own_server::inventory::inventory_lines;
use crate::{run as run_cmd, testimage};

/// The Arm domain's MAC (the bed's DHCP gives it [`GUEST`]).
pub const MAC: &str = "52:54:00:a6:40:01";
/// The Arm domain's fixed lease.
pub const GUEST: &str = "10.99.0.61";
/// Ironic's API port on the bed's bridge.
pub const IRONIC_PORT: u16 = 6385;
/// The port of Ironic's `http_root` server.
pub const HTTP_PORT: u16 = 8089;
/// The domain's disk: at least IPA's 4 GiB root-disk minimum.
pub const DISK_GIB: u64 = 5;
/// What one phase may take under TCG (an emulated Arm core is slower
/// than the x86 ones).
pub const PHASE_TIMEOUT: Duration = Duration::from_secs(900);
/// How long the deployed system may take to print its marker and config
/// drive after `active`.
pub const DISK_BOOT_TIMEOUT: Duration = Duration::from_secs(420);

/// The bed's network for the Arm domain: DHCP with a fixed lease for
/// [`MAC`] (the Metal3 flows cover DHCP-less `network_data`).
pub fn start_net(name: &str) -> Result<Net> {
    Net::start(NetOptions {
        dhcp: true,
        hosts: vec![(MAC.to_string(), GUEST.to_string())],
        ..NetOptions::no_dhcp(name)
    })
}

/// [`start_net`] for `files.boot`: with the `pxe` interface dnsmasq also
/// serves Ironic's `tftp_root` over TFTP and hands Arm UEFI clients
/// (client-arch 11) Ironic's loader there ([`ArmBoot::loader`]).
pub fn start_net_for(name: &str, files: &ArmFiles) -> Result<Net> {
    let Some(loader) = files.boot.loader() else {
        return start_net(name);
    };
    Net::start(NetOptions {
        dhcp: true,
        hosts: vec![(MAC.to_string(), GUEST.to_string())],
        ironic_tftp: Some(IronicTftp {
            root: files.tftp_root.clone(),
            uefi_bootfile: loader.to_string(),
        }),
        ..NetOptions::no_dhcp(name)
    })
}

/// The machine and its servers: an aarch64 libvirt domain behind the
/// bed's Redfish BMC, Ironic's `http_root` server and Ironic.
#[derive(Debug)]
pub struct ArmBed<'n> {
    /// Ironic (dropped first: it stops before the BMC goes away).
    pub ironic: Ironic,
    /// The BMC (sushy-tools, a private libvirtd).
    pub bmc: Bmc<'n>,
    /// The domain (`bed::arm_domain`: `virt`, Cortex-A57, TCG, AAVMF, 2
    /// vCPUs, 1 GiB, one virtio disk, a SCSI CD-ROM for virtual media).
    pub system: System,
    /// The domain's disk (a sparse file holding an old GPT).
    pub disk: PathBuf,
    /// `http://BRIDGE_IP:HTTP_PORT`.
    pub http_url: String,
    /// How Ironic boots the deploy ramdisk.
    pub boot: ArmBoot,
    _http: HttpRoot,
}

impl<'n> ArmBed<'n> {
    /// Defines the domain (powered off, its disk holding a GPT for
    /// cleaning to remove) and starts the BMC and the `http_root` server,
    /// then Ironic, each step said on `out` with its time.
    pub fn start(net: &'n Net, files: &ArmFiles, out: &mut Printer) -> Result<Self> {
        let t = Instant::now();
        let disk = files.tmp.path().join("disk0.img");
        std::fs::File::create(&disk)
            .and_then(|f| f.set_len(DISK_GIB << 30))
            .with_context(|| format!("creating {}", disk.display()))?;
        run_cmd(
            Command::new("sh")
                .arg("-c")
                .arg("printf 'label: gpt\nname=old-data\n' | sfdisk --quiet \"$0\"")
                .arg(&disk),
        )
        .context("putting a GPT on the Arm domain's disk")?;
        let mut spec = VmSpec::new("armvm");
        spec.arch = Arch::Aarch64;
        let vars = files.tmp.path().join("armvm_VARS.fd");
        spec.firmware = if files.boot.secure_boot() {
            Firmware::UefiSecureBoot { vars }
        } else {
            Firmware::Uefi { vars }
        };
        spec.memory_mb = 1024;
        spec.cpus = 2;
        spec.disks.push(Disk {
            path: disk.clone(),
            size: DISK_GIB << 30,
            bus: Bus::Virtio,
            serial: "arm-disk0".into(),
            model: None,
        });
        spec.nics.push(Nic { mac: MAC.into() });
        spec.boot = Boot::Disk;
        let (bmc, system) = out.meanwhile("starting the BMC", None, || -> Result<_> {
            let mut bmc = Bmc::start(net)?;
            let system = bmc.define(&spec)?;
            bmc.start_emulator()?;
            Ok((bmc, system))
        })?;
        let http = HttpRoot::serve(net, &files.www, HTTP_PORT)?;
        let http_url = format!("http://{BRIDGE_IP}:{HTTP_PORT}");
        out.line(format!(
            "BMC up at {}/redfish/v1 with the aarch64 domain {} (powered off) and Ironic's \
             http_root at {http_url} in {:.1} s",
            bmc.url(),
            system.name,
            t.elapsed().as_secs_f64()
        ));

        out.line(format!(
            "starting Ironic 39.0.0 in the namespace on {BRIDGE_IP}:{IRONIC_PORT} (sqlite, redfish \
             power, {} boot, direct deploy, agent inspect, fast track, deploy files by arch)",
            files.boot.interface()
        ));
        let conf = ironic_conf(files, &http_url);
        let ironic =
            super::ironic_flow::start_ironic_shown(out, net, IRONIC_PORT, &conf, &system.console)?;
        Ok(Self {
            ironic,
            bmc,
            system,
            disk,
            http_url,
            boot: files.boot,
            _http: http,
        })
    }

    /// Enrolls the domain as a `redfish` node booted by
    /// `redfish-virtual-media` (or `pxe`, as the files say) that says only `properties.cpu_arch =
    /// aarch64` (no deploy kernel, ramdisk or bootloader in its
    /// `driver_info`: Ironic picks them by arch), with a port for [`MAC`].
    /// Returns the node as created (`enroll`).
    pub async fn enroll(&self) -> Result<Value> {
        let node = self
            .ironic
            .create_node(json!({
                "name": "armvm",
                "driver": "redfish",
                "driver_info": {
                    "redfish_address": self.bmc.url(),
                    "redfish_system_id": self.system.path(),
                    "redfish_username": redfish::USER,
                    "redfish_password": redfish::PASSWORD,
                },
                "boot_interface": self.boot.interface(),
                "power_interface": "redfish",
                "management_interface": "redfish",
                "inspect_interface": "agent",
                "deploy_interface": "direct",
                "network_interface": "noop",
                "automated_clean": true,
                "properties": { "cpu_arch": "aarch64", "capabilities": "boot_mode:uefi" },
            }))
            .await
            .context("enrolling the Arm node")?;
        let uuid = node["uuid"].as_str().context("node without uuid")?;
        self.ironic.create_port(uuid, MAC).await?;
        Ok(node)
    }

    /// A flow on node `uuid` for this domain.
    pub fn flow<'a>(&'a self, uuid: &str) -> Flow<'a, 'a> {
        let machine = Machine::new(&self.bmc, self.system.clone(), &self.disk);
        Flow::new(&self.ironic, uuid, machine, PHASE_TIMEOUT)
    }
}

/// What [`run`] saw, for the test's checks and the demo's summary.
#[derive(Debug)]
pub struct ArmRun {
    /// What Ironic put on the ISO it inserted, when it was seen.
    pub iso: Option<ArmIso>,
    /// What Ironic wrote into its TFTP root for inspection (`pxe`), when
    /// it was seen.
    pub tftp: Option<ArmTftp>,
    /// The node after inspection.
    pub inspected: Value,
    /// The inspection data Ironic stored (`inventory`, `plugin_data`).
    pub inventory: Value,
    /// `blkid -p -o export` of the disk after cleaning.
    pub blkid_after_clean: String,
    /// The node when `active`.
    pub active: Value,
    /// The console up to the deployed system's config drive.
    pub console: String,
    /// The config drive's `meta_data.json` as the deployed system printed it.
    pub meta_data: Value,
    /// How many times the deploy ramdisk booted.
    pub ramdisk_boots: usize,
    /// Each phase's wall time: manage, inspect, provide, deploy, disk boot.
    pub times: Vec<(&'static str, Duration)>,
}

/// Takes the enrolled node `flow.uuid` from `enroll` to `active`:
/// manage, inspect (Ironic builds its ISO from the aarch64 files, inserts
/// it through the BMC and powers the domain on), provide (automated
/// cleaning on the running agent: fast track), deploy of `files`' qcow2
/// with a config drive carrying `instance`, then waits for the deployed
/// system's marker and config drive on the console. A reporting flow
/// prints Ironic's states, the agent's lines and its write progress.
pub async fn run(
    flow: &mut Flow<'_, '_>,
    bed: &ArmBed<'_>,
    files: &ArmFiles,
    instance: &str,
) -> Result<ArmRun> {
    let uuid = flow.uuid.clone();
    let ironic = flow.ironic;
    let mut times = Vec::new();

    let t = Instant::now();
    ironic.provision(&uuid, json!({"target": "manage"})).await?;
    flow.wait_for("manageable", Duration::from_secs(120))
        .await
        .context("manage (Ironic verifies the BMC)")?;
    times.push(("manage", t.elapsed()));

    flow.say("");
    flow.say(format!(
        "== inspection: {}, agent inspect (2 vCPUs, QEMU TCG, AAVMF{})",
        match bed.boot {
            ArmBoot::VirtualMedia { .. } => "Ironic's ISO by virtual media",
            ArmBoot::Pxe { .. } => "Ironic's GRUB and ramdisk over TFTP (pxe)",
        },
        if bed.boot.secure_boot() {
            ", Secure Boot enforced"
        } else {
            ""
        }
    ));
    let t = Instant::now();
    ironic
        .provision(&uuid, json!({"target": "inspect"}))
        .await?;
    flow.wait_for_any_target("inspect wait", Duration::from_secs(300))
        .await
        .context("inspection: Ironic preparing the ramdisk boot")?;
    // Ironic inserted its ISO, or wrote the node's GRUB config into its
    // TFTP root, and powered the domain on before `inspect wait`.
    let (iso, tftp) = match bed.boot {
        ArmBoot::VirtualMedia { .. } => (seen_iso(flow, bed, files).await, None),
        ArmBoot::Pxe { .. } => (None, seen_tftp(flow, files, &uuid).await),
    };
    let inspected = flow
        .wait_for("manageable", PHASE_TIMEOUT)
        .await
        .context("inspection")?;
    times.push(("inspect", t.elapsed()));
    let inventory = ironic.inventory(&uuid).await?;
    flow.say(format!(
        "inspected in {:.1} s; the node's cpu_arch {}, the stored inventory's cpu.architecture {}",
        t.elapsed().as_secs_f64(),
        inspected["properties"]["cpu_arch"],
        inventory["inventory"]["cpu"]["architecture"]
    ));
    for line in inventory_lines(
        &inventory["inventory"],
        &inventory["plugin_data"]["root_disk"],
    ) {
        flow.say(line);
    }

    flow.say("");
    flow.say("== provide: automated cleaning (erase_devices_metadata) on the running agent");
    let t = Instant::now();
    ironic
        .provision(&uuid, json!({"target": "provide"}))
        .await?;
    flow.wait_for("available", PHASE_TIMEOUT)
        .await
        .context("provide (automated cleaning)")?;
    times.push(("provide", t.elapsed()));
    let blkid_after_clean = run_cmd(
        Command::new("blkid")
            .args(["-p", "-o", "export"])
            .arg(&bed.disk),
    )
    .unwrap_or_default();
    flow.say(format!(
        "available after {:.1} s; the disk's old GPT is {}",
        t.elapsed().as_secs_f64(),
        if blkid_after_clean.contains("PTTYPE") {
            "STILL THERE"
        } else {
            "gone (blkid -p finds no partition table)"
        }
    ));

    let url = format!("{}/disk.qcow2", bed.http_url);
    flow.say("");
    flow.say(format!(
        "== deploy: {url} (qcow2, {} MiB, sha256) with a config drive (instance uuid {instance})",
        files.qcow2_size >> 20
    ));
    let t = Instant::now();
    metal3::start_deploy(
        ironic,
        &uuid,
        &url,
        &files.qcow2_sha256,
        json!({
            "meta_data": {"uuid": instance, "name": "armvm", "hostname": "armvm"},
            "user_data": "#cloud-config\n",
        }),
    )
    .await?;
    let active = flow
        .wait_for("active", PHASE_TIMEOUT)
        .await
        .context("deploy")?;
    times.push(("deploy", t.elapsed()));
    flow.say(format!(
        "active after {:.1} s (last_error {})",
        t.elapsed().as_secs_f64(),
        active["last_error"]
    ));
    flow.say_command_list();

    flow.say("");
    flow.say(
        "== boot from disk: Ironic powers the domain off, sets the disk first and powers it on",
    );
    let t = Instant::now();
    let console = wait_deployed(flow, &files.marker).await?;
    times.push(("disk boot", t.elapsed()));
    let meta = testimage::meta_data(&console).context("no config drive on the console")?;
    let meta_data: Value =
        serde_json::from_str(&meta).with_context(|| format!("meta_data.json: {meta}"))?;
    let booted = console
        .get(console.rfind(RAMDISK_START).unwrap_or(0)..)
        .unwrap_or_default();
    if let Some(entry) = deploy::uefi_boot_entry(booted) {
        flow.say(format!("firmware (AAVMF): {entry}"));
    }
    let shown = booted
        .lines()
        .find(|l| l.contains(&testimage::marker_line(&files.marker)))
        .unwrap_or_default();
    flow.say(format!(
        "deployed aarch64 system, {:.1} s after active: {}",
        t.elapsed().as_secs_f64(),
        shown.trim()
    ));
    flow.say(format!("its config drive's meta_data.json: {meta}"));
    Ok(ArmRun {
        iso,
        tftp,
        inspected,
        inventory,
        blkid_after_clean,
        active,
        ramdisk_boots: console.matches(RAMDISK_START).count(),
        console,
        meta_data,
        times,
    })
}

/// What `read` finds, asked every 500 ms for 10 s (Ironic may still be
/// writing it).
async fn within_10s<T>(mut read: impl FnMut() -> Option<T>) -> Option<T> {
    for _ in 0..20 {
        if let Some(v) = read() {
            return Some(v);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    None
}

/// How a flow line says whether a checksum matched.
fn is(yes: bool) -> &'static str {
    if yes {
        "is"
    } else {
        "is NOT"
    }
}

/// The ISO Ironic inserted into the domain's drive (polled for 10 s), said
/// on `flow`.
async fn seen_iso(flow: &mut Flow<'_, '_>, bed: &ArmBed<'_>, files: &ArmFiles) -> Option<ArmIso> {
    let iso = within_10s(|| {
        tokio::task::block_in_place(|| read_arm_iso(&bed.bmc, &bed.system.name, files.tmp.path()))
    })
    .await;
    if let Some(iso) = &iso {
        flow.say(format!(
            "machine: Ironic inserted its ISO through the BMC: /vmlinuz {} the aarch64 deploy \
             kernel, ESP {} bootloader_by_arch's aarch64 one",
            is(iso.kernel_sha256.as_deref() == Some(&files.arm_kernel_sha256)),
            is(iso.esp_sha256.as_deref() == Some(&files.arm_esp_sha256)),
        ));
    }
    iso
}

/// What Ironic wrote into its TFTP root for node `uuid` (polled for 10 s),
/// said on `flow`.
async fn seen_tftp(flow: &mut Flow<'_, '_>, files: &ArmFiles, uuid: &str) -> Option<ArmTftp> {
    let tftp = within_10s(|| read_tftp(&files.tftp_root, uuid, MAC)).await;
    if let Some(t) = &tftp {
        flow.say(format!(
            "conductor: Ironic wrote its GRUB config {uuid}/config (linked as grub.cfg-01-<mac> \
             and <mac>.conf) into its tftp_root; {uuid}/deploy_kernel {} the aarch64 {}",
            is(t.kernel_sha256.as_deref() == Some(&files.arm_kernel_sha256)),
            files.boot.kernel_file(),
        ));
    }
    tftp
}

/// Waits until the console shows `marker`'s line and a config drive;
/// returns the console. A reporting flow says meanwhile that it is still
/// booting, with the console's last line.
async fn wait_deployed(flow: &mut Flow<'_, '_>, marker: &str) -> Result<String> {
    let path = flow.machine.console_path().to_path_buf();
    let line = testimage::marker_line(marker);
    let wait = || -> Result<String> {
        let deadline = Instant::now() + DISK_BOOT_TIMEOUT;
        loop {
            let text = metal3::console_text(&path);
            if text.contains(&line) && testimage::meta_data(&text).is_some() {
                return Ok(text);
            }
            if Instant::now() >= deadline {
                bail!(
                    "the deployed system did not print its marker and config drive within {:?} of \
                     `active`; console: {}",
                    DISK_BOOT_TIMEOUT,
                    path.display()
                );
            }
            std::thread::sleep(Duration::from_secs(1));
        }
    };
    tokio::task::block_in_place(|| match flow.reporter() {
        Some(r) => r.out.meanwhile("booting from disk", Some(&path), wait),
        None => wait(),
    })
}
