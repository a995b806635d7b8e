//! Real Ironic 39.0.0 rescues a deployed QEMU machine on the test bed,
//! through the bed's Redfish BMC and its `ipxe` boot interface, as
//! `ironic_drives_ramdisk.rs` drives its machine
//! (`hardware_tests::bed::ironic_flow`): `provide` and a deploy of the test
//! image to `active`, the system boots from its disk; then `rescue` with a
//! password: Ironic sets PXE first and powers the domain on, it
//! network-boots the ramdisk (the node's `rescue_kernel`/`rescue_ramdisk`),
//! Ironic's `rescue.finalize_rescue` brings the password's crypt hash, the
//! node is `rescue`, and `rescue` logs in over SSH with that password (a
//! wrong one is refused) while the agent's API no longer answers.
//! `unrescue` brings the node back to `active`: Ironic powers the domain
//! off and boots it from its disk, and the deployed system prints its
//! marker again, untouched.

use std::process::Command;
use std::time::{Duration, Instant};

use agent::testconductor::image_server::{Fault, ImageServer};
use hardware_tests::bed::ironic_flow::{self, Flow, Machine, PxeRoot};
use hardware_tests::bed::redfish::Bmc;
use hardware_tests::bed::{self, Bus, Disk, Net, NetOptions, Nic, VmSpec, BRIDGE_IP};
use hardware_tests::ironic::Ironic;
use hardware_tests::{require_root, run, testimage};
use serde_json::json;

const MAC: &str = "52:54:00:1c:0a:07";
const GUEST: &str = "10.99.0.57";
const PORT: u16 = 6385;
const MARKER: &str = "rescuevm-deployed-51c2";
const PASSWORD: &str = "Tenant-Rescue-77";
const FLOW_TIMEOUT: Duration = Duration::from_secs(300);

/// The agent rescue interface, added to the bed's Ironic configuration.
const RESCUE_CONF: &str = "[DEFAULT]\nenabled_rescue_interfaces = no-rescue,agent\n";

/// `ssh rescue@GUEST COMMAND` from inside the bed's namespace.
fn ssh(ns: &str, dir: &std::path::Path, password: &str, command: &str) -> anyhow::Result<String> {
    hardware_tests::bed::ssh::with_password(ns, dir, &format!("rescue@{GUEST}"), password, command)
}

#[test]
fn ironic_rescues_a_deployed_machine_and_unrescues_it() {
    require_root("the Ironic rescue QEMU test");
    let ramdisk = bed::ramdisk_dir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let image = testimage::build(work.path(), MARKER).unwrap();
    let sha: String =
        ring::digest::digest(&ring::digest::SHA256, &std::fs::read(&image.raw).unwrap())
            .as_ref()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
    let net = Net::start(NetOptions {
        hosts: vec![(MAC.into(), GUEST.into())],
        ..NetOptions::ironic_ipxe("rescuevm", &ironic_flow::boot_script_url())
    })
    .unwrap();
    let images = net
        .ns
        .enter(|| ImageServer::start_on(format!("{BRIDGE_IP}:0").parse().unwrap()))
        .unwrap()
        .unwrap();
    images.route("/disk.raw", &image.raw, &[], Fault::None);
    let mut bmc = Bmc::start(&net).unwrap();
    let spec = VmSpec {
        disks: vec![Disk {
            path: work.path().join("disk0.img"),
            size: 5 << 30,
            bus: Bus::Virtio,
            serial: "rescuevm-disk0".into(),
            model: None,
        }],
        nics: vec![Nic { mac: MAC.into() }],
        ..VmSpec::new("node")
    };
    std::fs::File::create(&spec.disks[0].path)
        .and_then(|f| f.set_len(5 << 30))
        .unwrap();
    let system = bmc.define(&spec).unwrap();
    bmc.start_emulator().unwrap();
    let pxe = PxeRoot::start(&net, &ramdisk).unwrap();
    // Ironic's configuration has one [DEFAULT] section: the rescue
    // interfaces go into it.
    let conf = ironic_flow::ironic_conf(pxe.dir(), "").replacen("[DEFAULT]\n", RESCUE_CONF, 1);
    let ironic = Ironic::start_in(&net.ns, BRIDGE_IP, PORT, Some(&conf))
        .expect("starting Ironic 39.0.0 in the namespace");
    let machine = Machine::new(&bmc, system, &spec.disks[0].path);
    let ns = net.ns.name.clone();

    net.block_on(async {
        let uuid = ironic_flow::enroll(&ironic, &bmc, machine.system(), "rescuevm", MAC, "bios")
            .await
            .unwrap();
        let url = ironic_flow::http_url();
        ironic
            .patch(
                &uuid,
                json!([
                    {"op": "replace", "path": "/rescue_interface", "value": "agent"},
                    {"op": "add", "path": "/driver_info/rescue_kernel", "value": format!("{url}/deploy.kernel")},
                    {"op": "add", "path": "/driver_info/rescue_ramdisk", "value": format!("{url}/deploy.initramfs")},
                ]),
            )
            .await
            .unwrap();
        let mut flow = Flow::new(&ironic, &uuid, machine, FLOW_TIMEOUT);
        flow.provide().await.unwrap_or_else(|e| panic!("provide: {e:#}"));
        let node = flow
            .deploy(
                json!([
                    {"op": "add", "path": "/instance_info/image_source", "value": images.url("/disk.raw")},
                    {"op": "add", "path": "/instance_info/image_os_hash_algo", "value": "sha256"},
                    {"op": "add", "path": "/instance_info/image_os_hash_value", "value": sha},
                    {"op": "add", "path": "/instance_info/image_disk_format", "value": "raw"},
                ]),
                json!({"meta_data": {"uuid": "rescuevm-cd", "hostname": "rescuevm"}}),
            )
            .await
            .unwrap_or_else(|e| panic!("deploy: {e:#}"));
        assert!(node["last_error"].is_null(), "{}", node["last_error"]);
        flow.boot_disk(MARKER, Duration::from_secs(180))
            .await
            .unwrap_or_else(|e| panic!("first disk boot: {e:#}"));

        // Rescue.
        let t = Instant::now();
        ironic
            .provision(&uuid, json!({"target": "rescue", "rescue_password": PASSWORD}))
            .await
            .unwrap();
        // Ironic sets PXE first and powers the domain on into the ramdisk.
        flow.wait_for_any_target("rescue wait", Duration::from_secs(120))
            .await
            .unwrap_or_else(|e| panic!("rescue wait: {e:#}"));
        flow.machine
            .expect_boot_device("network", "rescue wait")
            .unwrap();
        let node = flow
            .wait_for("rescue", FLOW_TIMEOUT)
            .await
            .unwrap_or_else(|e| panic!("rescue: {e:#}"));
        println!("rescue: rescue after {:.1} s", t.elapsed().as_secs_f64());
        assert!(node["last_error"].is_null(), "{}", node["last_error"]);
        let (ok, bad, api) = tokio::task::block_in_place(|| {
            // The rescue login comes up once the agent has exited.
            let mut ok = ssh(&ns, work.path(), PASSWORD, "echo rescue-ssh-ok-$(id -u)");
            for _ in 0..10 {
                if ok.is_ok() {
                    break;
                }
                std::thread::sleep(Duration::from_secs(3));
                ok = ssh(&ns, work.path(), PASSWORD, "echo rescue-ssh-ok-$(id -u)");
            }
            let bad = ssh(&ns, work.path(), "not-the-password", "echo should-not-run");
            let api = run(Command::new("ip").args([
                "netns", "exec", &ns, "curl", "-sk", "--max-time", "5",
                &format!("https://{GUEST}:9999/v1/status"),
            ]));
            (ok, bad, api)
        });
        let console = flow.machine.console();
        let out = ok.unwrap_or_else(|e| panic!("SSH as rescue: {e:#}\n--- console ---\n{console}"));
        assert!(out.contains("rescue-ssh-ok-0"), "{out}");
        match bad {
            Ok(out) => panic!("a wrong password got in: {out}"),
            Err(e) => assert!(format!("{e:#}").contains("Permission denied"), "{e:#}"),
        }
        assert!(api.is_err(), "the agent's API still answers: {api:?}");
        let log = std::fs::read_to_string(ironic.log_path()).unwrap();
        assert!(log.contains("rescue.finalize_rescue"), "no finalize_rescue call");

        // Unrescue: Ironic powers the node off and boots the instance
        // from its disk.
        let mark = flow.machine.console_len();
        ironic
            .provision(&uuid, json!({"target": "unrescue"}))
            .await
            .unwrap();
        let node = flow
            .wait_for("active", FLOW_TIMEOUT)
            .await
            .unwrap_or_else(|e| panic!("unrescue: {e:#}"));
        assert!(node["last_error"].is_null(), "{}", node["last_error"]);
        flow.machine
            .expect_boot_device("disk", "active after unrescue")
            .unwrap();
        let line = testimage::marker_line(MARKER);
        let deadline = Instant::now() + Duration::from_secs(180);
        while !flow.machine.console_since(mark).contains(&line) {
            assert!(
                Instant::now() < deadline,
                "the deployed system did not boot after unrescue; console: {}",
                flow.machine.console_path().display()
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        println!("rescue: unrescued, the deployed system boots again");
    })
    .unwrap();
}
