//! The demo (`ci/demo`): real, unmodified Ironic 39.0.0 (sqlite, its
//! default `require_tls = true`, on the bed's namespace) is the conductor
//! of a QEMU machine on the test bed, a libvirt domain behind the bed's
//! Redfish BMC (sushy-tools). Ironic drives it as it drives a server
//! (hardware type `redfish`, `ipxe` boot; `hardware_tests::bed::ironic_flow`,
//! as `tests/qemu/ironic_drives_ramdisk.rs` does): it powers the machine on with
//! PXE first whenever it wants the agent, and the machine network-boots the
//! deploy ramdisk through Ironic's iPXE config. Ironic inspects it, cleans
//! it (`provide` with automated cleaning) and deploys the bootable test
//! image with a config drive. Every provision and power state Ironic
//! reports is printed with the time, with the agent's log lines from the
//! console and its write progress; the agent powers the machine off,
//! Ironic sets the disk first and powers it on, and the deployed system
//! prints its marker and config drive.
//!
//! `--test-conductor`: the earlier, quicker demo with the stand-in
//! conductor (`agent::testconductor`, Ironic 39's `direct` deploy as the
//! agent sees it; the pieces of `tests/qemu/bed_deploy.rs`,
//! `hardware_tests::bed::deploy`): inspection and deploy, no cleaning.
//!
//! `--bmc …`: the same flow against the operator's own server by Redfish
//! virtual media (`hardware_tests::own_server`).
//!
//! `--arch aarch64`: the same flow on an emulated Arm server (an aarch64
//! libvirt domain, TCG, AAVMF) by Redfish virtual media, Ironic picking
//! the aarch64 deploy files by `cpu_arch` (`hardware_tests::arm_demo`, on
//! the flow `tests/qemu/arm_ironic_flow.rs` checks); `--arch x86_64` is the
//! default.
//!
//! Usage (root): `demo [--bios] [--test-conductor]` (default UEFI,
//! Ironic's default boot mode), `demo --arch aarch64`, or `demo --bmc …`;
//! `--help` prints every flag (`demo_usage.txt`, which `ci/demo --help`
//! prints before building). Lines are stamped with the time since
//! `$DEMO_STARTED_AT` (seconds since the epoch; `ci/demo` sets it), else
//! since the demo started.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use agent::testconductor::{BootMode, DeployRequest, ImageInfo, Settings, TestConductor};
use agent_testkit::image_server::{Fault, ImageServer};
use anyhow::{bail, Context, Result};
use hardware_tests::bed::deploy::{self, Event, Printer, Target, HEARTBEAT};
use hardware_tests::bed::ironic_flow::{self, Flow, Machine, PxeRoot};
use hardware_tests::bed::redfish::Bmc;
use hardware_tests::bed::{self, Boot, Net, NetOptions, BRIDGE_IP};
use hardware_tests::own_server::inventory::inventory_lines;
use hardware_tests::own_server::options::{Options, USAGE};
use hardware_tests::testimage::{self, TestImage};
use hardware_tests::{arm_demo, own_server};
use image_builder::arch::Arch;
use serde_json::json;

const MAC: &str = "52:54:00:de:00:07";
const PORT: u16 = 6385;
/// Each of Ironic's flows (a PXE boot under TCG plus the flow); Ironic's
/// own callback timeouts are 300 s (`ci/ironic/ironic.conf`).
const FLOW_TIMEOUT: Duration = Duration::from_secs(360);
/// The deployed system's boot (OVMF under TCG is slow).
const DISK_BOOT_TIMEOUT: Duration = Duration::from_secs(300);

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "-h" || a == "--help") {
        print!("{USAGE}");
        return Ok(());
    }
    let (arch, args) = arm_demo::take_arch(&args)?;
    if arch == Some(Arch::Aarch64) {
        if !hardware_tests::is_root() {
            bail!("the demo needs root (network namespace, libvirtd, QEMU); run ci/demo as root");
        }
        let mut out = Printer::new(deploy::demo_started_at());
        arm_demo::main(out.clone())?;
        out.line("demo done");
        return Ok(());
    }
    if Options::wanted(&args) {
        // The operator reads the message and its fix, not a backtrace.
        if let Err(e) = own_server::main(&args, Printer::new(deploy::demo_started_at())) {
            eprintln!("error: {e:#}");
            std::process::exit(1);
        }
        return Ok(());
    }
    let mut uefi = true;
    let mut test_conductor = false;
    for arg in &args {
        match arg.as_str() {
            "--bios" => uefi = false,
            "--uefi" => uefi = true,
            "--test-conductor" => test_conductor = true,
            other => bail!("unknown flag {other:?} (ci/demo --help lists every flag)"),
        }
    }
    if !hardware_tests::is_root() {
        bail!("the demo needs root (network namespace, taps, QEMU); run ci/demo as root");
    }
    let mut out = Printer::new(deploy::demo_started_at());
    let prepared = prepare(&mut out)?;
    if test_conductor {
        with_test_conductor(&mut out, &prepared, uefi)?;
    } else {
        with_ironic(out.clone(), &prepared, uefi)?;
    }
    out.line("demo done");
    Ok(())
}

/// What both demos need before the machine powers on.
struct Prepared {
    ramdisk: PathBuf,
    img: TestImage,
    sha: String,
    marker: String,
    instance: String,
}

/// The deploy ramdisk (built when missing, its build log's last line shown
/// while it runs) and the test image, each step timed.
fn prepare(out: &mut Printer) -> Result<Prepared> {
    let ramdisk = bed::ramdisk_location();
    if bed::ramdisk_built(&ramdisk) {
        out.line(format!(
            "deploy ramdisk: {} (built before)",
            ramdisk.display()
        ));
    } else {
        let log = bed::logs_dir("demo")?.join("ramdisk-build.log");
        out.line(format!(
            "building the deploy ramdisk into {} (image-builder/build.sh: the static agent, \
             Debian's kernel; minutes on a fresh machine; log {})",
            ramdisk.display(),
            log.display()
        ));
        let t = Instant::now();
        out.meanwhile("building the deploy ramdisk", Some(&log), || {
            bed::build_ramdisk(&ramdisk, Some(&log))
        })?;
        out.line(format!(
            "deploy ramdisk built in {:.1} s",
            t.elapsed().as_secs_f64()
        ));
    }

    let marker = format!("demo-{:08x}", fastrand::u32(..));
    out.line(format!(
        "building the test image (its system prints {marker})"
    ));
    let t = Instant::now();
    let dir = hardware_tests::repo_root().join("target/demo-image");
    let img = out
        .meanwhile("building the test image", None, || {
            testimage::build(&dir, &marker)
        })
        .context("building the demo image")?;
    let sha = deploy::sha256_file(&img.raw)?;
    out.line(format!(
        "test image built in {:.1} s: {} ({} MiB, sha256 {}…)",
        t.elapsed().as_secs_f64(),
        img.raw.display(),
        img.size >> 20,
        &sha[..16]
    ));
    Ok(Prepared {
        ramdisk,
        img,
        sha,
        marker,
        instance: deploy::random_uuid(),
    })
}

/// The demo with real Ironic.
fn with_ironic(mut out: Printer, p: &Prepared, uefi: bool) -> Result<()> {
    out.line(
        "starting the bed's network (a namespace, bridge 10.99.0.1, dnsmasq sending iPXE to Ironic's boot.ipxe)",
    );
    let net = Net::start(NetOptions::ironic_ipxe(
        "demo",
        &ironic_flow::boot_script_url(),
    ))?;
    let target = Target::new(&net.logs, "demo", uefi, MAC)?;
    let addr = format!("{BRIDGE_IP}:0").parse()?;
    let images = net.ns.enter(|| ImageServer::start_on(addr))??;
    images.route("/demo.raw", &p.img.raw, &[], Fault::None);

    out.line(
        "starting the machine's BMC (sushy-tools' Redfish emulator, a private libvirtd; the machine is a libvirt domain, powered off)",
    );
    let t = Instant::now();
    let spec = target.spec("ironic", Boot::Network);
    let (bmc, system) = out.meanwhile("starting the BMC", None, || -> Result<_> {
        let mut bmc = Bmc::start(&net)?;
        let system = bmc.define(&spec)?;
        bmc.start_emulator()?;
        Ok((bmc, system))
    })?;
    let pxe = PxeRoot::start(&net, &p.ramdisk)?;
    out.line(format!(
        "BMC up at {}/redfish/v1 in {:.1} s; Ironic's http_root at {}",
        bmc.url(),
        t.elapsed().as_secs_f64(),
        pxe.http.url()
    ));

    out.line(format!(
        "starting Ironic 39.0.0 in the namespace on {BRIDGE_IP}:{PORT} \
         (sqlite, redfish power, ipxe boot, direct deploy, agent inspect, require_tls = true)"
    ));
    let conf = ironic_flow::ironic_conf(pxe.dir(), "");
    let ironic = ironic_flow::start_ironic_shown(&mut out, &net, PORT, &conf, &system.console)?;

    let bmc_ref: &Bmc<'_> = &bmc;
    let result = net.block_on(async {
        let boot_mode = if uefi { "uefi" } else { "bios" };
        let uuid = ironic_flow::enroll(&ironic, bmc_ref, &system, "demo", MAC, boot_mode).await?;
        out.line(format!(
            "enrolled node demo ({uuid}): redfish {}{}, ipxe boot, port {MAC}, {} boot; manageable",
            bmc_ref.url(),
            system.path(),
            if uefi { "UEFI" } else { "BIOS" }
        ));
        let machine = Machine::new(bmc_ref, system.clone(), &target.disk);
        let mut flow = Flow::new(&ironic, &uuid, machine, FLOW_TIMEOUT).reporting(out);
        let result = drive(&mut flow, &images, p).await;
        if let Err(e) = &result {
            flow.say(format!("failed: {e:#}"));
            flow.say(format!("Ironic's log: {}", ironic.log_path().display()));
        }
        result
    })?;
    // Dropped in reverse order: Ironic stops before the BMC goes away.
    result
}

/// Inspect, provide (cleaning), deploy, boot from disk.
async fn drive(flow: &mut Flow<'_, '_>, images: &ImageServer, p: &Prepared) -> Result<()> {
    flow.say("");
    flow.say("== inspection: Ironic's agent inspect interface (1 vCPU, QEMU TCG)");
    let t = Instant::now();
    let node = flow.inspect().await?;
    let stored = flow.ironic.inventory(&flow.uuid).await?;
    let props = &node["properties"];
    flow.say(format!(
        "inspected in {:.1} s; Ironic set cpus {} memory_mb {} local_gb {} cpu_arch {} capabilities {}",
        t.elapsed().as_secs_f64(),
        props["cpus"],
        props["memory_mb"],
        props["local_gb"],
        props["cpu_arch"],
        props["capabilities"]
    ));
    for line in inventory_lines(&stored["inventory"], &stored["plugin_data"]["root_disk"]) {
        flow.say(line);
    }

    flow.say("");
    flow.say("== provide: automated cleaning (erase_devices_metadata)");
    let t = Instant::now();
    flow.provide().await?;
    flow.say(format!(
        "available after {:.1} s",
        t.elapsed().as_secs_f64()
    ));

    flow.say("");
    let url = images.url("/demo.raw");
    flow.say(format!(
        "== deploy: {url} (raw, sha256) with a config drive (instance uuid {})",
        p.instance
    ));
    let t = Instant::now();
    let node = flow
        .deploy(
            json!([
                {"op": "add", "path": "/instance_info/image_source", "value": url},
                {"op": "add", "path": "/instance_info/image_os_hash_algo", "value": "sha256"},
                {"op": "add", "path": "/instance_info/image_os_hash_value", "value": p.sha},
                {"op": "add", "path": "/instance_info/image_disk_format", "value": "raw"},
            ]),
            json!({"meta_data": {"uuid": p.instance, "name": "demo", "hostname": "demo"}}),
        )
        .await?;
    flow.say(format!(
        "active after {:.1} s (last_error {})",
        t.elapsed().as_secs_f64(),
        node["last_error"]
    ));
    flow.say_command_list();

    flow.say("");
    flow.say("== boot from disk");
    let booted = flow.boot_disk(&p.marker, DISK_BOOT_TIMEOUT).await?;
    show_deployed(
        flow.reporter().map(|r| &mut r.out),
        &booted.console,
        (booted.marker_after, "active"),
        p,
    )?;
    let boots = flow.machine.ramdisk_boots();
    flow.say(format!(
        "the machine network-booted the deploy ramdisk {boots} times through Ironic's iPXE \
         (inspection, cleaning, deploy); Ironic powered it and set its boot device through the BMC"
    ));
    Ok(())
}

/// The deployed system's console: the UEFI entry OVMF started, the marker
/// line (`after`: how long after what it came), the config drive (which
/// must carry the instance uuid).
fn show_deployed(
    out: Option<&mut Printer>,
    console: &str,
    after: (Duration, &str),
    p: &Prepared,
) -> Result<()> {
    let out = out.context("no printer")?;
    if let Some(entry) = deploy::uefi_boot_entry(console) {
        out.line(format!("firmware: {entry}"));
    }
    let line = console
        .lines()
        .find(|l| l.contains(&testimage::marker_line(&p.marker)))
        .unwrap_or_default();
    out.line(format!(
        "deployed system, {:.1} s after {}: {}",
        after.0.as_secs_f64(),
        after.1,
        line.trim()
    ));
    let meta =
        testimage::meta_data(console).context("the deployed system printed no config drive")?;
    out.line(format!("its config drive's meta_data.json: {meta}"));
    if !meta.contains(&p.instance) {
        bail!(
            "the config drive does not carry instance uuid {}",
            p.instance
        );
    }
    Ok(())
}

/// The demo with the stand-in conductor.
fn with_test_conductor(out: &mut Printer, p: &Prepared, uefi: bool) -> Result<()> {
    let api = format!("http://{BRIDGE_IP}:{PORT}");
    let net = Net::start(NetOptions::pxe(
        "demo",
        &p.ramdisk,
        &format!(
            "console=ttyS0 quiet panic=-1 ipa-api-url={api} \
             ipa-inspection-callback-url={api}/v1/continue_inspection"
        ),
    ))?;
    let target = Target::new(&net.logs, "demo", uefi, MAC)?;
    let work = tempfile::tempdir()?;
    let configdrive = deploy::config_drive(
        work.path(),
        &json!({"uuid": p.instance, "name": "demo", "hostname": "demo"}),
    )?;
    out.line(format!("consoles in {}", net.logs.display()));

    net.block_on(async {
        let conductor = TestConductor::start_on(
            Settings {
                command_poll_interval: Duration::from_secs(2),
                ..Settings::default()
            },
            format!("{BRIDGE_IP}:{PORT}").parse()?,
        )
        .await?;
        let server = ImageServer::start_on(format!("{BRIDGE_IP}:0").parse()?)?;
        server.route("/images/demo.raw", &p.img.raw, &[], Fault::None);
        let uuid = conductor.enroll(&[MAC]);

        let t = Instant::now();
        out.line(format!(
            "== inspection: the machine ({}, 1 vCPU, QEMU TCG) PXE-boots the ramdisk",
            if uefi { "UEFI" } else { "BIOS" }
        ));
        conductor.start_inspect(&uuid)?;
        let mut vm = target.pxe(&net)?;
        let deadline = Instant::now() + Duration::from_secs(300);
        let node = loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let wait = conductor.wait_for_state(&uuid, "manageable", left);
            match tokio::time::timeout(HEARTBEAT, wait).await {
                Ok(node) => {
                    break node.with_context(|| {
                        format!("inspection; console: {}", vm.console_path().display())
                    })?
                }
                Err(_) => out.line(format!(
                    "… still inspecting ({:.0} s) | console: {}",
                    t.elapsed().as_secs_f64(),
                    deploy::last_line(vm.console_path()).unwrap_or_default()
                )),
            }
        };
        out.line(format!(
            "inspected {:.1} s after power-on:",
            t.elapsed().as_secs_f64()
        ));
        let doc = node
            .inspection_data
            .as_ref()
            .context("no inspection data")?;
        for line in inventory_lines(&doc["inventory"], &doc["root_disk"]) {
            out.line(line);
        }

        out.line(format!(
            "== deploy: {} with a config drive (instance uuid {})",
            p.img.raw.display(),
            p.instance
        ));
        conductor.make_available(&uuid)?;
        conductor.start_deploy(
            &uuid,
            DeployRequest {
                image_info: ImageInfo::raw_sha256(&server.url("/images/demo.raw"), &p.sha),
                configdrive: Some(configdrive),
                boot_mode: if uefi { BootMode::Uefi } else { BootMode::Bios },
                root_device: None,
            },
        )?;
        let node = deploy::watch_deploy(
            &conductor,
            &uuid,
            &["active"],
            Duration::from_secs(420),
            |e| match e {
                Event::State(s) => out.line(format!("node: {s}")),
                Event::Progress(p) => out.status(&format!("agent: {}", deploy::progress_line(&p))),
            },
        )
        .await?;
        if node.provision_state != "active" {
            bail!(
                "deploy ended {}: {}",
                node.provision_state,
                node.last_error.unwrap_or_default()
            );
        }
        out.line("the conductor's calls to the agent:");
        for l in conductor
            .transcript()
            .iter()
            .filter(|l| l.starts_with("C->A POST"))
        {
            out.line(format!("  {l}"));
        }
        out.line(format!(
            "root uuid reported: {}",
            node.partition_uuids
                .map(|p| p["root uuid"].to_string())
                .unwrap_or_default()
        ));
        tokio::task::block_in_place(|| vm.wait_exit(Duration::from_secs(120)))?;
        out.line("the agent powered the machine off");
        drop(vm);

        out.line("== boot from disk");
        let mut disk = target.disk_boot(&net)?;
        let console = disk.console_path().to_path_buf();
        let needle = testimage::marker_line(&p.marker);
        let at = tokio::task::block_in_place(|| {
            out.meanwhile("booting from disk", Some(&console), || {
                deploy::wait_booted(&mut disk, &needle, DISK_BOOT_TIMEOUT)
            })
        })?;
        show_deployed(Some(out), &disk.console(), (at, "power-on"), p)
    })?
}
