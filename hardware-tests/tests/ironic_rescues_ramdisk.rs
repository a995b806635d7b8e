//! Real Ironic 39.0.0 rescues a deployed QEMU machine on the test bed
//! (fake power and boot: the test plays the BMC, as in
//! `ironic_drives_ramdisk.rs`, with `hardware_tests::bed::ironic_flow`):
//! `provide` and a deploy of the test image to `active`, the system boots
//! from its disk; then `rescue` with a password: in `rescue wait` the VM
//! PXE-boots the ramdisk, Ironic's `rescue.finalize_rescue` brings the
//! password's crypt hash, the node is `rescue`, and `rescue` logs in over
//! SSH with that password (a wrong one is refused) while the agent's API no
//! longer answers. `unrescue` brings the node back to `active` and the
//! deployed system boots from its disk again, untouched.

use std::process::Command;
use std::time::{Duration, Instant};

use agent::testconductor::image_server::{Fault, ImageServer};
use hardware_tests::bed::ironic_flow::{Flow, Machine};
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

/// The agent rescue interface; `manage_agent_boot` off because the fake
/// boot interface has no rescue support to validate (the test boots the
/// ramdisk itself).
const EXTRA_CONF: &str = "[DEFAULT]\nenabled_rescue_interfaces = no-rescue,fake,agent\n\n\
    [agent]\nmanage_agent_boot = false\n";

fn ssh(ns: &str, dir: &std::path::Path, password: &str, command: &str) -> anyhow::Result<String> {
    let askpass = dir.join(format!("askpass-{}", password.len()));
    std::fs::write(&askpass, format!("#!/bin/sh\necho '{password}'\n"))?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&askpass, std::fs::Permissions::from_mode(0o700))?;
    run(Command::new("ip")
        .args(["netns", "exec", ns, "setsid", "-w", "ssh"])
        .args([
            "-o",
            "StrictHostKeyChecking=no",
            "-o",
            "UserKnownHostsFile=/dev/null",
            "-o",
            "PubkeyAuthentication=no",
            "-o",
            "PreferredAuthentications=password,keyboard-interactive",
            "-o",
            "NumberOfPasswordPrompts=1",
            "-o",
            "ConnectTimeout=20",
            &format!("rescue@{GUEST}"),
            command,
        ])
        .env("SSH_ASKPASS", &askpass)
        .env("SSH_ASKPASS_REQUIRE", "force")
        .env("DISPLAY", ":0")
        .stdin(std::process::Stdio::null()))
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
        ..NetOptions::pxe("rescuevm", &ramdisk, "")
    })
    .unwrap();
    let images = net
        .ns
        .enter(|| ImageServer::start_on(format!("{BRIDGE_IP}:0").parse().unwrap()))
        .unwrap()
        .unwrap();
    images.route("/disk.raw", &image.raw, &[], Fault::None);
    let ironic = Ironic::start_in(&net.ns, BRIDGE_IP, PORT, Some(EXTRA_CONF))
        .expect("starting Ironic 39.0.0 in the namespace");
    let template = VmSpec {
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
    let machine = Machine::new(&net, template, &ironic.url);
    std::fs::File::create(machine.disk())
        .and_then(|f| f.set_len(5 << 30))
        .unwrap();
    let ns = net.ns.name.clone();

    net.block_on(async {
        let uuid = ironic.enroll_ready("rescuevm", MAC, false).await.unwrap();
        ironic
            .patch(
                &uuid,
                json!([
                    {"op": "replace", "path": "/properties/capabilities", "value": "boot_mode:bios"},
                    {"op": "replace", "path": "/rescue_interface", "value": "agent"},
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
        // Ironic powers the instance off and on into the ramdisk.
        flow.wait_for_any_target("rescue wait", Duration::from_secs(120))
            .await
            .unwrap_or_else(|e| panic!("rescue wait: {e:#}"));
        flow.machine.power_off().unwrap();
        flow.machine.pxe_boot("").unwrap();
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
        let console = flow
            .machine
            .console_path()
            .map(|p| std::fs::read_to_string(p).unwrap_or_default())
            .unwrap_or_default();
        let out = ok.unwrap_or_else(|e| panic!("SSH as rescue: {e:#}\n--- console ---\n{console}"));
        assert!(out.contains("rescue-ssh-ok-0"), "{out}");
        match bad {
            Ok(out) => panic!("a wrong password got in: {out}"),
            Err(e) => assert!(format!("{e:#}").contains("Permission denied"), "{e:#}"),
        }
        assert!(api.is_err(), "the agent's API still answers: {api:?}");
        let log = std::fs::read_to_string(ironic.log_path()).unwrap();
        assert!(log.contains("rescue.finalize_rescue"), "no finalize_rescue call");

        // Unrescue: Ironic powers the node off and boots the instance.
        ironic
            .provision(&uuid, json!({"target": "unrescue"}))
            .await
            .unwrap();
        let node = flow
            .wait_for("active", FLOW_TIMEOUT)
            .await
            .unwrap_or_else(|e| panic!("unrescue: {e:#}"));
        assert!(node["last_error"].is_null(), "{}", node["last_error"]);
        flow.machine.power_off().unwrap();
        let booted = flow
            .boot_disk(MARKER, Duration::from_secs(180))
            .await
            .unwrap_or_else(|e| panic!("disk boot after unrescue: {e:#}"));
        assert_eq!(booted.meta["uuid"], json!("rescuevm-cd"), "{}", booted.meta);
        println!("rescue: unrescued, the deployed system boots again");
    })
    .unwrap();
}
