//! Real, unmodified Ironic 39.0.0 (`require_tls = true`) drives the
//! PXE-booted deploy ramdisk in a QEMU VM (TCG, SeaBIOS, virtio-net with a
//! fixed MAC, a sparse virtio-blk disk) through a node's life, all on the
//! bed's network inside a namespace this test creates:
//!
//! 1. `inspect` (agent inspect interface, the ramdisk POSTs to
//!    `continue_inspection`): the node's cpus, memory_mb, local_gb and
//!    cpu_arch come from the VM, and the stored inventory holds the LLDP
//!    frames of the bed's switch (parsed by Ironic's `parse-lldp` hook);
//! 2. `provide` with automated cleaning (`erase_devices_metadata`): the
//!    partition table put on the disk beforehand is gone, `available`;
//! 3. deploy (direct, whole disk) of the test image as raw with an inline
//!    sha256, with a config drive: `active`, the ramdisk powers the VM off
//!    itself, and the VM booted from its disk prints the image's marker and
//!    the config drive's uuid;
//! 4. undeploy with automated cleaning: `available`, the disk wiped;
//! 5. the same with the image as qcow2 and a sha512 checksum-file URL;
//! 6. undeploy again;
//! 7. a deploy whose checksum does not match: `deploy failed`, the agent's
//!    reason in `last_error`, the agent's logs stored by Ironic.
//!
//! Ironic drives the machine as it drives a server: hardware type
//! `redfish` (power and boot device through the bed's Redfish BMC,
//! sushy-tools in front of a private libvirtd running the VM as a libvirt
//! domain on the bed's taps) and its `ipxe` boot interface. Whenever Ironic
//! wants the agent it writes its iPXE config, kernel and ramdisk into its
//! `http_root`, sets the boot device to PXE and powers the domain on:
//! SeaBIOS runs the NIC's iPXE option ROM, the bed's dnsmasq (inside the
//! test's namespace) answers it with the URL of Ironic's `boot.ipxe`, and
//! iPXE follows Ironic's chain to the ramdisk. After a deploy the agent
//! powers the domain off itself (`standby.power_off`, checked on the
//! console), Ironic sets the boot device to disk and powers it on, and the
//! deployed system prints the marker and the config drive's uuid. The test
//! plays no part in any of that: it asks Ironic for states and watches
//! Ironic's node, the domain's power state and boot order in libvirt, the
//! console (one file across boots: 7 ramdisk boots, 2 disk boots) and the
//! HTTP server's access log (one fetch of the node's kernel and ramdisk per
//! ramdisk boot) (`hardware_tests::bed::ironic_flow`, shared with the
//! demo). Each flow's wall time is printed and kept in
//! `target/bed-logs/ironicvm/flow-times.txt`, with where it went
//! (`ironic_flow::Split`: power-on, firmware and download, kernel, init,
//! lookup, the agent's commands, the heartbeat after each step, power-off,
//! the conductor) from Ironic's log and the console.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use agent_testkit::image_server::{Fault, ImageServer};
use hardware_tests::bed::ironic_flow::{self, checks, Flow, Machine, PxeRoot};
use hardware_tests::bed::redfish::Bmc;
use hardware_tests::bed::{self, dirty_disk, Bus, Disk, Net, NetOptions, Nic, VmSpec, BRIDGE_IP};
use hardware_tests::ironic::Ironic;
use hardware_tests::{require_root, testimage};
use serde_json::{json, Value};

const MAC: &str = "52:54:00:1c:0a:01";
const GUEST: &str = "10.99.0.50";
const DISK_GIB: u64 = 5;
const DISK_SERIAL: &str = "ironicvm-disk0";
const PORT: u16 = 6385;
const CHASSIS: [u8; 6] = [0x52, 0x54, 0x00, 0x5e, 0x1f, 0x0a];
const SWITCH_PORT: &str = "Ethernet1/7";
const SWITCH_NAME: &str = "leaf-ironicvm";
const MARKER: &str = "ironicvm-deployed-7f3a";

/// Added to [`ironic_flow::ironic_conf`]: Ironic's `parse-lldp` hook turns
/// the ramdisk's LLDP TLVs into `plugin_data.parsed_lldp`.
const HOOKS: &str = "hooks = $default_hooks,memory,cpus,root-device,boot-mode,parse-lldp\n";
/// Ramdisk boots the flows cause: inspect, provide, two deploys and two
/// undeploys, the failed deploy.
const RAMDISK_BOOTS: usize = 7;

/// `target/bed-logs/ironicvm/flow-times.txt`: the wall times, also kept
/// there because the test harness swallows a passing test's output
/// (`ci/test` prints the file).
static TIMES: OnceLock<PathBuf> = OnceLock::new();

/// Prints a wall time and appends it to [`TIMES`].
macro_rules! timing {
    ($($arg:tt)*) => {{
        let line = format!($($arg)*);
        println!("{line}");
        if let Some(path) = TIMES.get() {
            let mut f = std::fs::OpenOptions::new().append(true).create(true).open(path).unwrap();
            writeln!(f, "{line}").unwrap();
        }
    }};
}

/// What one `wait` may take: a PXE boot under TCG plus the flow.
const FLOW_TIMEOUT: Duration = Duration::from_secs(300);

fn sha(alg: &'static ring::digest::Algorithm, path: &Path) -> String {
    let data = std::fs::read(path).unwrap();
    ring::digest::digest(alg, &data)
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Prints where the flow since `mark` spent its time ([`ironic_flow::Split`]).
fn split(flow: &Flow<'_, '_>, mark: ironic_flow::Mark, what: &str) {
    match flow.split(mark) {
        Some(s) => timing!("split {what}: {}", s.line()),
        None => panic!("flow {what}: Ironic's log and the console do not give a split"),
    }
}

fn elapsed(t: Instant) -> String {
    format!("{:.1} s", t.elapsed().as_secs_f64())
}

#[test]
fn ironic_inspects_cleans_deploys_and_undeploys_the_pxe_booted_ramdisk() {
    require_root("the Ironic-drives-the-ramdisk QEMU test");
    let total = Instant::now();
    let times = bed::logs_dir("ironicvm").unwrap().join("flow-times.txt");
    std::fs::write(&times, "").unwrap();
    TIMES.set(times).unwrap();
    let ramdisk = bed::ramdisk_dir().unwrap();
    let work = tempfile::tempdir().unwrap();

    // The images: the test system as raw and qcow2, a sha512 checksum file.
    let t = Instant::now();
    let image = testimage::build(work.path(), MARKER).unwrap();
    let qcow2 = work.path().join("disk.qcow2");
    testimage::to_qcow2(&image.raw, &qcow2, true).unwrap();
    let raw_sha256 = sha(&ring::digest::SHA256, &image.raw);
    std::fs::write(
        work.path().join("SHA512SUMS"),
        format!(
            "{}  other.qcow2\n{}  disk.qcow2\n",
            "1".repeat(128),
            sha(&ring::digest::SHA512, &qcow2)
        ),
    )
    .unwrap();
    timing!("images built in {}", elapsed(t));

    let net = Net::start(NetOptions {
        hosts: vec![(MAC.into(), GUEST.into())],
        ..NetOptions::ironic_ipxe("ironicvm", &ironic_flow::boot_script_url())
    })
    .unwrap();
    let _switch = bed::lldp::Switch::start(&net, CHASSIS, SWITCH_PORT, SWITCH_NAME).unwrap();
    let images = net
        .ns
        .enter(|| ImageServer::start_on(format!("{BRIDGE_IP}:0").parse().unwrap()))
        .unwrap()
        .unwrap();
    images.route("/disk.raw", &image.raw, &[], Fault::None);
    images.route("/disk.qcow2", &qcow2, &[], Fault::None);
    images.route(
        "/SHA512SUMS",
        work.path().join("SHA512SUMS"),
        &[],
        Fault::None,
    );

    // The machine: a libvirt domain behind the Redfish BMC, powered off.
    let t = Instant::now();
    let mut bmc = Bmc::start(&net).unwrap();
    let spec = VmSpec {
        disks: vec![Disk {
            path: work.path().join("disk0.img"),
            size: DISK_GIB << 30,
            bus: Bus::Virtio,
            serial: DISK_SERIAL.into(),
            model: None,
        }],
        nics: vec![Nic { mac: MAC.into() }],
        ..VmSpec::new("node")
    };
    // A partition table that cleaning must remove.
    std::fs::File::create(&spec.disks[0].path)
        .and_then(|f| f.set_len(DISK_GIB << 30))
        .unwrap();
    hardware_tests::run(
        Command::new("sh")
            .arg("-c")
            .arg("echo 'label: gpt\nname=old' | sfdisk --quiet \"$0\"")
            .arg(&spec.disks[0].path),
    )
    .unwrap();
    assert!(!dirty_disk::signatures(&spec.disks[0].path)
        .unwrap()
        .is_empty());
    let system = bmc.define(&spec).unwrap();
    bmc.start_emulator().unwrap();
    let pxe = PxeRoot::start(&net, &ramdisk).unwrap();
    timing!("BMC and Ironic's http_root up in {}", elapsed(t));

    let t = Instant::now();
    let conf = format!(
        "{}{HOOKS}",
        ironic_flow::ironic_conf(pxe.dir(), "ipa-collect-lldp=1")
    );
    let ironic = Ironic::start_in(&net.ns, BRIDGE_IP, PORT, Some(&conf))
        .expect("starting Ironic 39.0.0 in the namespace");
    timing!("Ironic up in {}", elapsed(t));
    let machine = Machine::new(&bmc, system, &spec.disks[0].path);

    let (uuid, machine) = net.block_on(async {
        let uuid = ironic_flow::enroll(&ironic, &bmc, machine.system(), "ironicvm", MAC, "bios")
            .await
            .unwrap();
        let mut flow = Flow::new(&ironic, &uuid, machine, FLOW_TIMEOUT);

        inspect(&mut flow).await;
        provide(&mut flow).await;

        let raw_info = json!([
            {"op": "add", "path": "/instance_info/image_source", "value": images.url("/disk.raw")},
            {"op": "add", "path": "/instance_info/image_os_hash_algo", "value": "sha256"},
            {"op": "add", "path": "/instance_info/image_os_hash_value", "value": raw_sha256},
            {"op": "add", "path": "/instance_info/image_disk_format", "value": "raw"},
        ]);
        deploy(&mut flow, raw_info, "raw, sha256 inline", "ironicvm-cd-raw").await;
        undeploy(&mut flow).await;

        // (Undeploying emptied instance_info.)
        let qcow2_info = json!([
            {"op": "add", "path": "/instance_info/image_source", "value": images.url("/disk.qcow2")},
            {"op": "add", "path": "/instance_info/image_checksum", "value": images.url("/SHA512SUMS")},
            {"op": "add", "path": "/instance_info/image_disk_format", "value": "qcow2"},
        ]);
        deploy(&mut flow, qcow2_info, "qcow2, sha512 file URL", "ironicvm-cd-qcow2").await;
        undeploy(&mut flow).await;

        bad_checksum(&mut flow, &images.url("/disk.raw")).await;

        // Who fetched what: the qcow2 flow's checksum came from the file.
        let seen: Vec<String> = images.seen().into_iter().map(|s| s.path).collect();
        println!("image server requests: {seen:?}");
        for path in ["/disk.raw", "/disk.qcow2", "/SHA512SUMS"] {
            assert!(seen.iter().any(|p| p == path), "{path} never requested: {seen:?}");
        }
        (uuid, flow.machine)
    })
    .unwrap();

    // Every boot, from the console: the ramdisk once per flow, the
    // deployed system once per deploy.
    let console = machine.console();
    let ctx = format!("console: {}", machine.console_path().display());
    let ramdisk_boots = machine.ramdisk_boots();
    let disk_boots = console.matches(&testimage::marker_line(MARKER)).count();
    assert_eq!(ramdisk_boots, RAMDISK_BOOTS, "ramdisk boots; {ctx}");
    assert_eq!(disk_boots, 2, "disk boots; {ctx}");
    // Each ramdisk boot went through Ironic's iPXE chain on its HTTP
    // server: boot.ipxe, the config linked for the MAC, the node's kernel
    // and ramdisk.
    let fetched = |path: &str| {
        pxe.http
            .requests()
            .iter()
            .filter(|r| r.client == GUEST && r.method == "GET" && r.path == path && r.status == 200)
            .count()
    };
    let mac_config = format!("/pxelinux.cfg/{}", MAC.replace(':', "-"));
    for path in [
        "/boot.ipxe".to_string(),
        mac_config,
        format!("/{uuid}/deploy_kernel"),
        format!("/{uuid}/deploy_ramdisk"),
    ] {
        assert_eq!(
            fetched(&path),
            RAMDISK_BOOTS,
            "the machine's fetches of {path}; access log: {}",
            pxe.http.log_path().display()
        );
    }
    timing!(
        "all flows: {} ({ramdisk_boots} ramdisk boots over Ironic's iPXE, {disk_boots} disk boots)",
        elapsed(total)
    );
    // Ironic's log outlives its state directory here, beside the console.
    let kept = bed::logs_dir("ironicvm").unwrap().join("ironic.log");
    std::fs::copy(ironic.log_path(), &kept).unwrap();
}

async fn inspect(flow: &mut Flow<'_, '_>) {
    let t = Instant::now();
    let mark = flow.mark();
    let node = flow
        .inspect()
        .await
        .unwrap_or_else(|e| panic!("inspection: {e:#}"));
    timing!("flow inspect: manageable after {}", elapsed(t));
    split(flow, mark, "inspect");
    println!("inspected properties: {}", node["properties"]);
    let stored = flow.ironic.inventory(&flow.uuid).await.unwrap();
    // The checks OpenShift's container form passes too (openshift_liveos).
    checks::inspected(
        &node,
        &stored,
        &checks::Expected {
            mac: MAC,
            ipv4: GUEST,
            cpus: 1,
            memory_mb: 1024,
            disk_gib: DISK_GIB,
            disk_serial: DISK_SERIAL,
            boot_mode: "bios",
        },
    )
    .unwrap();
    let nic = ironic_flow::stored_nic(&stored, MAC);
    let lldp = nic["lldp"].as_array().cloned().unwrap_or_default();
    assert!(!lldp.is_empty(), "no LLDP in the stored inventory: {nic}");
    let parsed = &stored["plugin_data"]["parsed_lldp"][nic["name"].as_str().unwrap()];
    println!("Ironic's parsed LLDP: {parsed}");
    assert_eq!(parsed["switch_port_id"], json!(SWITCH_PORT), "{parsed}");
    assert_eq!(parsed["switch_system_name"], json!(SWITCH_NAME), "{parsed}");
}

/// Checks a cleaning that ended `available` (`node`, or the error that
/// ended it): the disk is left without any signature.
fn cleaned(flow: &Flow<'_, '_>, node: anyhow::Result<Value>, what: &str, t: Instant) {
    let node = node.unwrap_or_else(|e| panic!("{what}: {e:#}"));
    timing!("flow {what}: available after {}", elapsed(t));
    checks::cleaned(&node, flow.machine.disk()).unwrap_or_else(|e| panic!("{what}: {e:#}"));
}

async fn provide(flow: &mut Flow<'_, '_>) {
    let t = Instant::now();
    let mark = flow.mark();
    let node = flow.provide().await;
    cleaned(flow, node, "provide (automated cleaning)", t);
    split(flow, mark, "provide");
}

async fn undeploy(flow: &mut Flow<'_, '_>) {
    let t = Instant::now();
    let mark = flow.mark();
    let node = flow.undeploy().await;
    cleaned(flow, node, "undeploy", t);
    split(flow, mark, "undeploy");
}

async fn deploy(flow: &mut Flow<'_, '_>, instance_info: Value, what: &str, cd_uuid: &str) {
    let configdrive = json!({
        "meta_data": {"uuid": cd_uuid, "name": "ironicvm", "hostname": "ironicvm"},
        "user_data": "#cloud-config\n",
    });
    let t = Instant::now();
    let mark = flow.mark();
    let node = flow
        .deploy(instance_info, configdrive)
        .await
        .unwrap_or_else(|e| panic!("deploy ({what}): {e:#}"));
    timing!("flow deploy ({what}): active after {}", elapsed(t));
    split(flow, mark, &format!("deploy ({what})"));
    assert!(node["last_error"].is_null(), "{}", node["last_error"]);
    let booted = flow
        .boot_disk(MARKER, Duration::from_secs(180))
        .await
        .unwrap_or_else(|e| panic!("{e:#}"));
    let meta = booted.meta;
    timing!(
        "flow deploy ({what}): booted from disk, marker {:.1} s after active, meta_data {meta}",
        booted.marker_after.as_secs_f64()
    );
    assert_eq!(meta["uuid"], json!(cd_uuid), "{meta}");
    assert_eq!(meta["hostname"], json!("ironicvm"), "{meta}");
}

async fn bad_checksum(flow: &mut Flow<'_, '_>, raw_url: &str) {
    let t = Instant::now();
    flow.start_deploy(
        json!([
            {"op": "add", "path": "/instance_info/image_source", "value": raw_url},
            {"op": "add", "path": "/instance_info/image_os_hash_algo", "value": "sha256"},
            {"op": "add", "path": "/instance_info/image_os_hash_value", "value": "0".repeat(64)},
            {"op": "add", "path": "/instance_info/image_disk_format", "value": "raw"},
        ]),
        None,
    )
    .await
    .unwrap();
    let node = flow
        .wait_for_any_target("deploy failed", FLOW_TIMEOUT)
        .await
        .unwrap_or_else(|e| panic!("bad-checksum deploy: {e:#}"));
    // Ironic 39 ends a failed deploy step without a power action (its
    // deploying_error_handler only cleans up), so the ramdisk still runs
    // and looks the node up in vain; power it off through Ironic as an
    // operator would.
    println!("bad checksum: node power state {}", node["power_state"]);
    flow.power_off().await.unwrap();
    timing!("flow bad checksum: deploy failed after {}", elapsed(t));
    let err = node["last_error"].as_str().unwrap_or_default();
    println!("bad checksum: last_error = {err}");
    assert!(
        err.contains("write_image") && err.contains(&"0".repeat(64)),
        "{err}"
    );
    let logs = flow.ironic.deploy_logs();
    assert_eq!(logs.len(), 1, "{logs:?}");
    let listing = hardware_tests::run(Command::new("tar").arg("-tzf").arg(&logs[0])).unwrap();
    assert!(listing.lines().any(|l| l == "agent.log"), "{listing}");
    assert!(listing.lines().any(|l| l == "dmesg"), "{listing}");
}
