//! OpenShift's form of the agent on the QEMU bed (issue 47): unmodified
//! Ironic 39.0.0 network-boots (iPXE, Redfish BMC) the bed's stand-in for a
//! CoreOS live system (`image-builder/liveos.sh`: Debian's systemd and
//! podman, run from RAM, `/run/ostree-live`) as the node's deploy kernel and
//! ramdisk. What Ignition writes for OpenShift comes with it as a second
//! initramfs archive (`bed::liveos::ignition_archive`): the agent's
//! configuration at `/etc/ironic-python-agent.conf` and
//! openshift/ironic-agent-image's `ironic-agent.service`, enabled, only
//! `%REGISTRY%` (Debian's `docker-registry` on the bed, serving this
//! agent's OCI image from `image-builder/build-oci.sh`) and `%PODMAN_FLAGS%`
//! (`--tls-verify=false`) filled in. systemd on the live system starts the
//! unit after the network is online; podman pulls the image and runs it as
//! the unit says; the agent in it (`agent container`) finds the host
//! through the unit's bind mounts and acts for real, the host being live.
//!
//! Ironic is configured as Metal3 configures it for this: `[deploy]
//! fast_track = true` and `[inspector] power_off = false` (one boot of the
//! live system serves inspection, cleaning and the deploy),
//! `custom-agent` enabled, `[agent] deploy_logs_collect = always`. The
//! node's `deploy_interface` is `custom-agent`, as the baremetal-operator
//! sets it for a `customDeploy`.
//!
//! Checked, in one boot of the live system (its console shows systemd's
//! `ironic-agent.service` starting once, the deploy ramdisk never):
//! * inspection (`inspect_interface = agent`): the inventory Ironic stores
//!   is the live host's (its NIC's MAC and address from the bed's DHCP,
//!   its disk, 2 GiB of RAM); the machine stays on (fast track);
//! * automated cleaning (`erase_devices_metadata`) on the running agent
//!   removes the partition table put on the disk beforehand: `available`;
//! * the deploy as the baremetal-operator asks for it: `deploy_steps`
//!   `[{"interface": "deploy", "step": "install_coreos", "priority": 80}]`,
//!   `instance_info.image_source` an http URL on the bed (a CoreOS-like raw
//!   image, `hardware_tests::coreosimage`) without checksum, and the config
//!   drive as a JSON dict (`user_data` an Ignition config,
//!   `meta_data.coreos_append_karg` a list). The agent runs the live
//!   system's real coreos-installer 0.27 chrooted (`--image-url URL
//!   --insecure`, its warning in the agent's log Ironic stored), powers the
//!   machine off itself (`standby.power_off`, no forced power off), and the
//!   node is `active` with the disk first. Read from the host side after a
//!   power off (a read-only loop device of the disk file,
//!   `bed::coreos_disk`): the boot filesystem's `ignition/config.ign` is
//!   the `user_data` plus the first-boot host name, the BLS entry's options
//!   end with the kernel arguments, the image's first-boot stamp is kept,
//!   the root partition holds the image's bytes.
//!
//! Then, in a second boot: the node undeployed without cleaning (the
//! installed CoreOS stays on the disk) and deployed again with no
//! `image_source` (the baremetal-operator's `customDeploy` without an
//! image: `--offline`). coreos-installer 0.27 refuses an offline install
//! outside a real CoreOS live ISO ("cannot perform offline install;
//! metadata missing"); Ironic's `last_error` carries that text, the node
//! is `deploy failed`, three tries are in the agent's log, and the agent
//! has erased the disk: no partition table, filesystem or GPT header left.
//!
//! The registry's log shows the pull of `ironic-agent` and every boot is
//! the live system's, never the ramdisk's. Each phase's time is printed.
//!
//! Not here (issue 47): the deployed disk booting with Ignition applied
//! (the CoreOS-like image has no boot loader), `start_assisted_install` on
//! the bed.
//!
//! The configuration has no `inspection_callback_url`: OpenShift's
//! `build.py` writes ironic-inspector's (port 5050), which Ironic 39 no
//! longer runs; Ironic passes its own `ipa-inspection-callback-url` on the
//! kernel command line, which the container reads from `/proc/cmdline`.

use std::time::{Duration, Instant};

use hardware_tests::bed::coreos_disk::{self, ReadOnlyDisk};
use hardware_tests::bed::ironic_flow::{self, Flow, Machine, PxeRoot};
use hardware_tests::bed::redfish::Bmc;
use hardware_tests::bed::{dirty_disk, liveos};
use hardware_tests::bed::{Bus, Disk, Net, NetOptions, Nic, VmSpec, BRIDGE_IP};
use hardware_tests::coreosimage::{coreos_image, BLS, STAMP};
use hardware_tests::ironic::Ironic;
use hardware_tests::registry::Registry;
use hardware_tests::require_root;
use serde_json::{json, Value};

const MAC: &str = "52:54:00:47:00:01";
const GUEST: &str = "10.99.0.47";
const PORT: u16 = 6399;
const DISK_GIB: u64 = 4;
const MEMORY_MB: u32 = 2048;
const MIB: u64 = 1 << 20;
/// Each phase: a TCG boot of the live system, podman's pull and start.
const FLOW_TIMEOUT: Duration = Duration::from_secs(900);
/// What Metal3's `ironic.conf` sets for this flow, beside the bed's
/// `ironic_flow::ironic_conf`.
const METAL3_CONF: &str = "[DEFAULT]\n\
    enabled_deploy_interfaces = direct,fake,custom-agent\n\
    [agent]\n\
    deploy_logs_collect = always\n\
    [deploy]\n\
    fast_track = true\n\
    [inspector]\n\
    power_off = false\n";
/// The kernel argument the config drive asks for (OpenShift's manager
/// joins a list with commas into one `--append-karg`).
const KARGS: [&str; 1] = ["console=ttyS0,115200n8"];
/// What coreos-installer 0.27 says to `--offline` outside a live ISO.
const OFFLINE_REFUSED: &str = "cannot perform offline install; metadata missing";

fn elapsed(t: Instant) -> String {
    format!("{:.1} s", t.elapsed().as_secs_f64())
}

/// The console's last 60 lines, for a failure's message.
fn tail(flow: &Flow<'_, '_>) -> String {
    let console = flow.machine.console();
    let lines: Vec<&str> = console.lines().collect();
    lines[lines.len().saturating_sub(60)..].join("\n")
}

/// How often the live system started OpenShift's unit.
fn unit_starts(flow: &Flow<'_, '_>) -> usize {
    flow.machine
        .console()
        .matches("Starting ironic-agent.service")
        .count()
}

/// The Ignition config the operator gives as `user_data`.
fn user_data() -> Value {
    json!({"ignition": {"version": "3.2.0"},
           "passwd": {"users": [{"name": "core",
               "sshAuthorizedKeys": ["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOpenShiftLiveOsTest core@bed"]}]}})
}

/// The baremetal-operator's deploy request for a `customDeploy` of
/// `install_coreos`: the step at priority 80 and the config drive as data.
fn deploy_request() -> Value {
    json!({"target": "active",
           "deploy_steps": [{"interface": "deploy", "step": "install_coreos",
                             "priority": 80, "args": {}}],
           "configdrive": {"user_data": user_data().to_string(),
                           "meta_data": {"uuid": "liveos-cd", "coreos_append_karg": KARGS}}})
}

/// How many of the agent's log lines hold `needle`, each counted once: the
/// journal has every line of the container twice (podman's output as the
/// unit's, and conmon's), told apart here by the agent's own timestamp.
fn distinct_agent_lines(log: &str, needle: &str) -> usize {
    let stamps: std::collections::BTreeSet<&str> = log
        .lines()
        .filter(|l| l.contains(needle))
        .filter_map(|l| {
            l.split_whitespace()
                .find(|w| w.len() > 20 && w.ends_with('Z') && w.contains('T'))
        })
        .collect();
    stamps.len()
}

/// The agent's logs from the bundles Ironic stored.
fn agent_log(ironic: &Ironic) -> String {
    coreos_disk::agent_logs(&ironic.deploy_logs())
}

#[test]
fn ironic_inspects_cleans_and_deploys_coreos_through_openshifts_agent_container_on_a_live_system() {
    require_root("the OpenShift live-system QEMU test");
    let total = Instant::now();
    let live = liveos::dir().unwrap();
    let layout = liveos::agent_image().unwrap();
    println!("live system and agent image ready in {}", elapsed(total));
    let work = tempfile::tempdir().unwrap();
    let (img, _sha) = coreos_image(work.path(), "boot");

    let net = Net::start(NetOptions {
        hosts: vec![(MAC.into(), GUEST.into())],
        ..NetOptions::ironic_ipxe("liveos", &ironic_flow::boot_script_url())
    })
    .unwrap();
    let registry = net
        .ns
        .enter(|| {
            let registry = Registry::start_on(BRIDGE_IP)?;
            registry.push_layout(&layout, "ironic-agent:latest")?;
            anyhow::Ok(registry)
        })
        .unwrap()
        .unwrap();
    let conf = liveos::agent_conf(&format!("http://{BRIDGE_IP}:{PORT}"), &[]);
    let extra = liveos::ignition_archive(&conf, &registry.addr).unwrap();

    let mut bmc = Bmc::start(&net).unwrap();
    let spec = VmSpec {
        memory_mb: MEMORY_MB,
        disks: vec![Disk {
            path: work.path().join("disk0.img"),
            size: DISK_GIB << 30,
            bus: Bus::Virtio,
            serial: "liveos-disk0".into(),
            model: None,
        }],
        nics: vec![Nic { mac: MAC.into() }],
        ..VmSpec::new("node")
    };
    // A partition table that cleaning must remove.
    dirty_disk::gpt(&spec.disks[0].path, DISK_GIB << 30).unwrap();
    assert!(!dirty_disk::signatures(&spec.disks[0].path)
        .unwrap()
        .is_empty());
    let system = bmc.define(&spec).unwrap();
    bmc.start_emulator().unwrap();
    let pxe = PxeRoot::start_appending(&net, &live, &extra).unwrap();
    // The image, served beside Ironic's files, without a checksum.
    std::fs::copy(&img, pxe.dir().join("fcos.raw")).unwrap();
    let image_url = format!("{}/fcos.raw", ironic_flow::http_url());
    let ironic_conf = ironic_flow::ironic_conf(pxe.dir(), "") + METAL3_CONF;
    let ironic = Ironic::start_in(&net.ns, BRIDGE_IP, PORT, Some(&ironic_conf))
        .expect("starting Ironic 39.0.0 in the namespace");
    let machine = Machine::new(&bmc, system, &spec.disks[0].path);
    println!("bed up in {}", elapsed(total));

    net.block_on(async {
        let uuid = ironic_flow::enroll(&ironic, &bmc, machine.system(), "liveos", MAC, "bios")
            .await
            .unwrap();
        ironic
            .patch(
                &uuid,
                json!([{"op": "replace", "path": "/deploy_interface", "value": "custom-agent"}]),
            )
            .await
            .unwrap();
        let mut flow = Flow::new(&ironic, &uuid, machine, FLOW_TIMEOUT);

        inspect(&mut flow).await;
        clean(&mut flow).await;
        deploy_from_url(&mut flow, &image_url, &img).await;
        assert_eq!(
            unit_starts(&flow),
            1,
            "inspection, cleaning and deploy in one boot"
        );
        let fetched = pxe
            .http
            .requests()
            .iter()
            .any(|r| r.path == "/fcos.raw" && r.status == 200);
        assert!(fetched, "coreos-installer did not fetch {image_url}");

        deploy_offline(&mut flow).await;
        assert_eq!(
            unit_starts(&flow),
            2,
            "the offline deploy booted the live system again"
        );
        assert_eq!(flow.machine.ramdisk_boots(), 0, "the deploy ramdisk booted");
    })
    .unwrap();
    let log = registry.log();
    assert!(
        log.lines()
            .any(|l| l.contains("/v2/ironic-agent/manifests/")),
        "podman on the live system did not pull from the bed's registry: {log}"
    );
    println!("all: {}", elapsed(total));
}

/// Inspection until `manageable`; the machine stays on (fast track).
async fn inspect(flow: &mut Flow<'_, '_>) {
    let t = Instant::now();
    flow.ironic
        .provision(&flow.uuid, json!({"target": "inspect"}))
        .await
        .unwrap();
    flow.wait_for_any_target("inspect wait", Duration::from_secs(120))
        .await
        .unwrap();
    flow.machine
        .expect_boot_device("network", "inspect wait")
        .unwrap();
    let node = flow
        .wait_for("manageable", FLOW_TIMEOUT)
        .await
        .unwrap_or_else(|e| panic!("inspection: {e:#}\n{}", tail(flow)));
    println!("inspected: manageable after {}", elapsed(t));
    assert!(node["last_error"].is_null(), "{}", node["last_error"]);
    assert_eq!(node["power_state"], "power on", "fast track keeps it on");
    let p = &node["properties"];
    println!("inspected properties: {p}");
    assert_eq!(p["memory_mb"], json!(MEMORY_MB), "{p}");
    assert_eq!(p["local_gb"], json!(DISK_GIB - 1), "{p}");
    let stored = flow.ironic.inventory(&flow.uuid).await.unwrap();
    let nic = ironic_flow::stored_nic(&stored, MAC);
    assert_eq!(nic["ipv4_address"], json!(GUEST), "{nic}");
    let disks = stored["inventory"]["disks"].to_string();
    assert!(disks.contains("liveos-disk0"), "{disks}");
}

/// Automated cleaning on the running agent until `available`.
async fn clean(flow: &mut Flow<'_, '_>) {
    let t = Instant::now();
    flow.ironic
        .enable_automated_clean(&flow.uuid)
        .await
        .unwrap();
    flow.ironic
        .provision(&flow.uuid, json!({"target": "provide"}))
        .await
        .unwrap();
    let node = flow
        .wait_for("available", FLOW_TIMEOUT)
        .await
        .unwrap_or_else(|e| panic!("cleaning: {e:#}\n{}", tail(flow)));
    println!("cleaned: available after {}", elapsed(t));
    assert!(node["last_error"].is_null(), "{}", node["last_error"]);
    assert_eq!(node["power_state"], "power on", "fast track keeps it on");
    let left = dirty_disk::signatures(flow.machine.disk()).unwrap();
    assert!(left.is_empty(), "cleaning left signatures: {left}");
}

/// The deploy of `url` (the image `img`) until `active`, then the disk
/// read with the machine off.
async fn deploy_from_url(flow: &mut Flow<'_, '_>, url: &str, img: &std::path::Path) {
    let t = Instant::now();
    flow.ironic
        .patch(
            &flow.uuid,
            json!([{"op": "add", "path": "/instance_info/image_source", "value": url}]),
        )
        .await
        .unwrap();
    flow.ironic
        .provision(&flow.uuid, deploy_request())
        .await
        .unwrap();
    let node = flow
        .wait_for("active", FLOW_TIMEOUT)
        .await
        .unwrap_or_else(|e| {
            panic!(
                "deploy: {e:#}\n{}\nagent: {}",
                tail(flow),
                agent_log(flow.ironic)
            )
        });
    println!("deployed: active after {}", elapsed(t));
    assert!(node["last_error"].is_null(), "{}", node["last_error"]);
    flow.machine.expect_boot_device("disk", "active").unwrap();
    let log = std::fs::read_to_string(flow.ironic.log_path()).unwrap_or_default();
    assert!(
        !log.contains("Forcing hard power off"),
        "Ironic had to force the power off after standby.power_off; log: {}",
        flow.ironic.log_path().display()
    );
    let agent = agent_log(flow.ironic);
    assert!(
        agent.contains("install_coreos: coreos-installer --insecure: the image is not verified"),
        "no warning about the unverified image in the agent's log:\n{agent}"
    );
    assert!(
        agent.contains(&format!(
            "coreos-installer install --preserve-on-error --ignition-file /tmp/ironic.ign --append-karg {} --image-url {url} --insecure /dev/vda",
            KARGS[0]
        )),
        "{agent}"
    );
    // The CoreOS-like image has no boot loader: nothing to see booting.
    flow.power_off().await.unwrap();

    let disk = ReadOnlyDisk::attach(flow.machine.disk()).unwrap();
    let files = disk
        .boot_files(&[
            "ignition/config.ign",
            "loader/entries/ostree-1.conf",
            "ignition.firstboot",
        ])
        .unwrap();
    let mut written: Value = serde_json::from_str(&files[0]).unwrap();
    let storage = written
        .as_object_mut()
        .and_then(|o| o.remove("storage"))
        .unwrap_or_default();
    assert_eq!(written, user_data(), "the Ignition config is user_data's");
    let files_added = storage["files"].as_array().cloned().unwrap_or_default();
    assert_eq!(files_added.len(), 1, "{storage}");
    assert_eq!(files_added[0]["path"], "/etc/hostname", "{storage}");
    assert_eq!(
        files[1],
        BLS.replace(
            "fedora-coreos/0\n",
            &format!("fedora-coreos/0 {}\n", KARGS.join(" "))
        ),
        "the BLS entry's options"
    );
    assert_eq!(files[2], STAMP, "the image's first-boot stamp is kept");
    // The root partition (33 to 65 MiB) holds the image's bytes.
    let want = std::fs::read(img).unwrap();
    let root = (33 * MIB) as usize..(65 * MIB) as usize;
    let got = disk.read_at(33 * MIB, root.len()).unwrap();
    assert!(got == want[root], "the root partition is not the image's");
    drop(disk);
    println!("deploy checked on the disk after {}", elapsed(t));
}

/// Undeploy without cleaning, then a deploy without `image_source`
/// (`--offline`), which coreos-installer refuses here: `deploy failed`,
/// and the disk erased by the agent.
async fn deploy_offline(flow: &mut Flow<'_, '_>) {
    let t = Instant::now();
    flow.ironic
        .patch(
            &flow.uuid,
            json!([{"op": "replace", "path": "/automated_clean", "value": false}]),
        )
        .await
        .unwrap();
    flow.ironic
        .move_to(&flow.uuid, "deleted", "available", Duration::from_secs(120))
        .await
        .unwrap();
    {
        let disk = ReadOnlyDisk::attach(flow.machine.disk()).unwrap();
        let left = disk.bootable_leftovers().unwrap();
        assert!(
            !left.is_empty(),
            "undeploy without cleaning erased the disk"
        );
    }
    // Ironic's undeploy cleared instance_info: no image_source now.
    let node = flow.ironic.node(&flow.uuid).await.unwrap();
    assert!(
        node["instance_info"]["image_source"].is_null(),
        "{}",
        node["instance_info"]
    );
    flow.ironic
        .provision(&flow.uuid, deploy_request())
        .await
        .unwrap();
    let node = flow
        .wait_for_any_target("deploy failed", FLOW_TIMEOUT)
        .await
        .unwrap_or_else(|e| panic!("offline deploy: {e:#}\n{}", tail(flow)));
    println!("offline deploy: deploy failed after {}", elapsed(t));
    let error = node["last_error"].as_str().unwrap_or_default();
    println!("last_error: {error}");
    assert!(error.contains("install_coreos"), "{error}");
    assert!(
        error.contains(&format!(
            "coreos-installer failed with code 1: Error: {OFFLINE_REFUSED}"
        )),
        "{error}"
    );
    // A failed agent step leaves the machine on (Ironic's handler for it
    // does not power off): off through Ironic, as an operator would.
    flow.power_off().await.unwrap();
    let agent = agent_log(flow.ironic);
    let tries = distinct_agent_lines(&agent, "--offline /dev/vda");
    assert_eq!(tries, 3, "three tries of --offline:\n{agent}");
    let disk = ReadOnlyDisk::attach(flow.machine.disk()).unwrap();
    let left = disk.bootable_leftovers().unwrap();
    assert_eq!(left, Vec::<String>::new(), "the agent left a bootable disk");
    println!("offline deploy checked on the disk after {}", elapsed(t));
}
