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
//! Checked: Ironic inspects the node (`inspect_interface = agent`): the
//! inventory Ironic stores is the live host's (its NIC's MAC and address
//! from the bed's DHCP, its disk, 2 GiB of RAM); then automated cleaning
//! (`erase_devices_metadata`) removes the partition table put on the disk
//! beforehand, and the node is `available`. The registry's log shows the
//! pull of `ironic-agent`. Each boot is the live system's (its console
//! shows systemd's `ironic-agent.service` starting), never the ramdisk's.
//!
//! Not here yet (issue 47): the deploy with `install_coreos`, the disk boot
//! showing Ignition applied, `start_assisted_install` on the bed.
//!
//! The configuration has no `inspection_callback_url`: OpenShift's
//! `build.py` writes ironic-inspector's (port 5050), which Ironic 39 no
//! longer runs; Ironic passes its own `ipa-inspection-callback-url` on the
//! kernel command line, which the container reads from `/proc/cmdline`.

use std::time::{Duration, Instant};

use hardware_tests::bed::ironic_flow::{self, Flow, Machine, PxeRoot};
use hardware_tests::bed::redfish::Bmc;
use hardware_tests::bed::{dirty_disk, liveos};
use hardware_tests::bed::{Bus, Disk, Net, NetOptions, Nic, VmSpec, BRIDGE_IP};
use hardware_tests::ironic::Ironic;
use hardware_tests::registry::Registry;
use hardware_tests::require_root;
use serde_json::json;

const MAC: &str = "52:54:00:47:00:01";
const GUEST: &str = "10.99.0.47";
const PORT: u16 = 6399;
const DISK_GIB: u64 = 4;
const MEMORY_MB: u32 = 2048;
/// Each phase: a TCG boot of the live system, podman's pull and start.
const FLOW_TIMEOUT: Duration = Duration::from_secs(900);

fn elapsed(t: Instant) -> String {
    format!("{:.1} s", t.elapsed().as_secs_f64())
}

/// The console's last 60 lines, for a failure's message.
fn tail(flow: &Flow<'_, '_>) -> String {
    let console = flow.machine.console();
    let lines: Vec<&str> = console.lines().collect();
    lines[lines.len().saturating_sub(60)..].join("\n")
}

#[test]
fn ironic_inspects_and_cleans_through_openshifts_agent_container_on_a_live_system() {
    require_root("the OpenShift live-system QEMU test");
    let total = Instant::now();
    let live = liveos::dir().unwrap();
    let layout = liveos::agent_image().unwrap();
    println!("live system and agent image ready in {}", elapsed(total));
    let work = tempfile::tempdir().unwrap();

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
    let ironic_conf = ironic_flow::ironic_conf(pxe.dir(), "");
    let ironic = Ironic::start_in(&net.ns, BRIDGE_IP, PORT, Some(&ironic_conf))
        .expect("starting Ironic 39.0.0 in the namespace");
    let machine = Machine::new(&bmc, system, &spec.disks[0].path);
    println!("bed up in {}", elapsed(total));

    net.block_on(async {
        let uuid = ironic_flow::enroll(&ironic, &bmc, machine.system(), "liveos", MAC, "bios")
            .await
            .unwrap();
        let mut flow = Flow::new(&ironic, &uuid, machine, FLOW_TIMEOUT);

        let t = Instant::now();
        let node = flow.inspect().await.unwrap_or_else(|e| {
            panic!(
                "inspection: {e:#}\n{}\nregistry: {}",
                tail(&flow),
                registry.log()
            )
        });
        println!("inspected: manageable after {}", elapsed(t));
        assert!(node["last_error"].is_null(), "{}", node["last_error"]);
        let p = &node["properties"];
        println!("inspected properties: {p}");
        assert_eq!(p["memory_mb"], json!(MEMORY_MB), "{p}");
        assert_eq!(p["local_gb"], json!(DISK_GIB - 1), "{p}");
        let stored = flow.ironic.inventory(&flow.uuid).await.unwrap();
        let nic = stored["inventory"]["interfaces"]
            .as_array()
            .and_then(|l| l.iter().find(|i| i["mac_address"] == MAC))
            .cloned()
            .unwrap_or_else(|| panic!("no interface with {MAC}: {stored}"));
        assert_eq!(nic["ipv4_address"], json!(GUEST), "{nic}");
        let disks = stored["inventory"]["disks"].to_string();
        assert!(disks.contains("liveos-disk0"), "{disks}");

        let t = Instant::now();
        let node = flow
            .provide()
            .await
            .unwrap_or_else(|e| panic!("cleaning: {e:#}\n{}", tail(&flow)));
        println!("cleaned: available after {}", elapsed(t));
        assert!(node["last_error"].is_null(), "{}", node["last_error"]);
        let left = dirty_disk::signatures(flow.machine.disk()).unwrap();
        assert!(left.is_empty(), "cleaning left signatures: {left}");

        let starts = flow
            .machine
            .console()
            .matches("Starting ironic-agent.service")
            .count();
        assert_eq!(
            starts, 2,
            "two boots of the live system, each starting the unit"
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
