//! Real Ironic 39.0.0 takes a QEMU machine on the test bed through the
//! day-2 operations operators run after a deploy, through the bed's
//! Redfish BMC and its `ipxe` boot interface, as `ironic_drives_ramdisk.rs`
//! drives its machine (`hardware_tests::bed::ironic_flow`):
//!
//! 1. a manual clean with `burnin_disk` (5 s of write-and-verify passes on
//!    the VM's disk, `agent_burnin_fio_disk_runtime`), back to `manageable`;
//! 2. `provide`, then a deploy of the test image whose instance trait
//!    selects a **deploy template** with `inject_files`: the file lands in
//!    the image's ESP (found by its `EFI` directory), read back from the
//!    disk with mtools after the system booted from it;
//! 3. **servicing** the `active` node with `burnin_cpu` + `burnin_memory`
//!    (short knobs in `driver_info`): Ironic boots the ramdisk for
//!    `service wait`, the node returns to `active` and boots its disk;
//! 4. **rescue** with a password: Ironic sets PXE first and powers the
//!    domain on, it network-boots the ramdisk (the node's
//!    `rescue_kernel`/`rescue_ramdisk`), Ironic's `rescue.finalize_rescue`
//!    brings the password's crypt hash, the node is `rescue`, and `rescue`
//!    logs in over SSH with that password (a wrong one is refused) while
//!    the agent's API no longer answers;
//! 5. `unrescue` brings the node back to `active`: Ironic powers the domain
//!    off and boots it from its disk, and the deployed system prints its
//!    marker again, untouched.

use std::process::Command;
use std::time::{Duration, Instant};

use agent_testkit::image_server::{Fault, ImageServer};
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
/// What the deploy template injects, and where.
const INJECTED: (&str, &str) = (
    "/EFI/ironic-injected.txt",
    "put there by a deploy template\n",
);

/// Waits until the deployed system printed its marker after console
/// position `mark`.
async fn disk_booted(flow: &Flow<'_, '_>, mark: usize, after: &str) {
    let line = testimage::marker_line(MARKER);
    let deadline = Instant::now() + Duration::from_secs(180);
    while !flow.machine.console_since(mark).contains(&line) {
        assert!(
            Instant::now() < deadline,
            "the deployed system did not boot after {after}; console: {}",
            flow.machine.console_path().display()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The log lines of Ironic that mention `what`.
fn lines_with(log: &str, what: &str) -> String {
    log.lines()
        .filter(|l| l.contains(what))
        .collect::<Vec<_>>()
        .join("\n")
}

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
        // Short burn-ins (IPA's knob names and value forms).
        let mut knobs = Ironic::short_burnin_patch();
        knobs.as_array_mut().unwrap().push(
            json!({"op": "add", "path": "/driver_info/agent_burnin_fio_disk_runtime", "value": 5}),
        );
        ironic.patch(&uuid, knobs).await.unwrap();
        let mut flow = Flow::new(&ironic, &uuid, machine, FLOW_TIMEOUT);

        // 1. A manual clean with burnin_disk.
        let t = Instant::now();
        let node = flow
            .manual_clean(json!([{"interface": "deploy", "step": "burnin_disk", "args": {}}]))
            .await
            .unwrap_or_else(|e| panic!("manual clean with burnin_disk: {e:#}"));
        assert!(node["last_error"].is_null(), "{}", node["last_error"]);
        println!("burnin_disk: manageable again after {:.1} s", t.elapsed().as_secs_f64());
        let log = std::fs::read_to_string(ironic.log_path()).unwrap();
        assert!(
            log.contains("'clean_result': [{'bytes_verified': ")
                && log.contains("'device': '/dev/vda'"),
            "no burnin_disk report for /dev/vda in Ironic's log:\n{}",
            lines_with(&log, "burnin_disk")
        );

        // 2. A deploy whose trait selects a template with inject_files.
        use base64::Engine as _;
        ironic
            .create_deploy_template(
                "CUSTOM_INJECT",
                json!([{"interface": "deploy", "step": "inject_files", "priority": 50,
                        "args": {"files": [{"path": INJECTED.0,
                            "content": base64::engine::general_purpose::STANDARD.encode(INJECTED.1)}]}}]),
            )
            .await
            .unwrap();
        ironic.set_traits(&uuid, &["CUSTOM_INJECT"]).await.unwrap();
        flow.provide().await.unwrap_or_else(|e| panic!("provide: {e:#}"));
        let node = flow
            .deploy(
                json!([
                    {"op": "add", "path": "/instance_info/image_source", "value": images.url("/disk.raw")},
                    {"op": "add", "path": "/instance_info/image_os_hash_algo", "value": "sha256"},
                    {"op": "add", "path": "/instance_info/image_os_hash_value", "value": sha},
                    {"op": "add", "path": "/instance_info/image_disk_format", "value": "raw"},
                    {"op": "add", "path": "/instance_info/traits", "value": ["CUSTOM_INJECT"]},
                ]),
                json!({"meta_data": {"uuid": "rescuevm-cd", "hostname": "rescuevm"}}),
            )
            .await
            .unwrap_or_else(|e| panic!("deploy: {e:#}"));
        assert!(node["last_error"].is_null(), "{}", node["last_error"]);
        flow.boot_disk(MARKER, Duration::from_secs(180))
            .await
            .unwrap_or_else(|e| panic!("first disk boot: {e:#}"));
        // The system powered itself off: read the file from its ESP.
        let injected = run(Command::new("mtype").arg("-i").arg(format!(
            "{}@@1M",
            spec.disks[0].path.display()
        )).arg(format!("::{}", INJECTED.0)));
        // (`run` trims its output.)
        assert_eq!(
            injected.unwrap_or_else(|e| panic!("the template's file is not on the ESP: {e:#}")),
            INJECTED.1.trim_end()
        );
        let log = std::fs::read_to_string(ironic.log_path()).unwrap();
        assert!(log.contains("inject_files"), "Ironic never ran inject_files");

        // 3. Servicing with CPU and memory burn-in.
        let t = Instant::now();
        let mark = flow.machine.console_len();
        let node = flow
            .service(json!([
                {"interface": "deploy", "step": "burnin_cpu", "args": {}},
                {"interface": "deploy", "step": "burnin_memory", "args": {}},
            ]))
            .await
            .unwrap_or_else(|e| panic!("service: {e:#}"));
        assert!(node["last_error"].is_null(), "{}", node["last_error"]);
        disk_booted(&flow, mark, "servicing").await;
        println!(
            "service: active again and booted from disk after {:.1} s",
            t.elapsed().as_secs_f64()
        );
        let log = std::fs::read_to_string(ironic.log_path()).unwrap();
        assert!(
            log.contains("'service_result': {'rounds_per_second': ")
                && log.contains("'step': 'burnin_memory'"),
            "no burn-in reports in Ironic's log:\n{}",
            lines_with(&log, "burnin_")
        );
        // The deployed system powers itself off after its marker.
        tokio::task::block_in_place(|| flow.machine.wait_shut_off(Duration::from_secs(60)))
            .unwrap_or_else(|e| panic!("after servicing: {e:#}"));

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
        disk_booted(&flow, mark, "unrescue").await;
        println!("rescue: unrescued, the deployed system boots again");
    })
    .unwrap();
}
