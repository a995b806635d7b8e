//! Real, unmodified Ironic 39.0.0 with `[agent_containers]` set runs a
//! container step on the QEMU bed machine through the deploy ramdisk (its
//! crun, its agent), as `ironic_drives_ramdisk.rs` drives its machine
//! (`hardware_tests::bed::ironic_flow`):
//!
//! * Debian's docker-registry serves on the bed's bridge, over TLS, an
//!   image built from Debian's busybox-static (umoci, skopeo);
//! * a manual clean runs `generic_container_step` with that image, which
//!   is in `allowed_containers`; Ironic's `run_options` pass the machine's
//!   disk as `--device /dev/vda:/dev/target` and the container writes a
//!   marker on it, found in the disk file after the machine is off;
//! * `pull_options = --tls-verify=false`: the ramdisk has no way to be
//!   given the test's CA (certificate verification itself is
//!   `container_registry_loop`'s and `real_ironic_container_steps`').

use std::io::{Read, Seek, SeekFrom};
use std::time::{Duration, Instant};

use hardware_tests::bed::ironic_flow::{self, Flow, Machine, PxeRoot};
use hardware_tests::bed::redfish::Bmc;
use hardware_tests::bed::{self, Bus, Disk, Net, NetOptions, Nic, VmSpec, BRIDGE_IP};
use hardware_tests::ironic::Ironic;
use hardware_tests::registry::Registry;
use hardware_tests::require_root;
use serde_json::json;

const MAC: &str = "52:54:00:1c:0a:3c";
const GUEST: &str = "10.99.0.63";
const PORT: u16 = 6385;
const MARKER: &[u8] = b"RAMDISK-CONTAINER-STEP";
const FLOW_TIMEOUT: Duration = Duration::from_secs(420);

#[test]
fn ironic_runs_a_container_step_in_the_ramdisk() {
    require_root("the Ironic container step QEMU test");
    let total = Instant::now();
    let ramdisk = bed::ramdisk_dir().unwrap();
    let work = tempfile::tempdir().unwrap();

    let net = Net::start(NetOptions {
        hosts: vec![(MAC.into(), GUEST.into())],
        ..NetOptions::ironic_ipxe("ironiccont", &ironic_flow::boot_script_url())
    })
    .unwrap();
    let script = format!(
        "/bin/busybox printf {} | /bin/busybox dd of=/dev/target bs=512 seek=1 conv=notrunc,fsync",
        std::str::from_utf8(MARKER).unwrap()
    );
    let (registry, tool) = net
        .ns
        .enter(|| {
            let registry = Registry::start_on(BRIDGE_IP)?;
            let tool =
                registry.push_busybox_image("tool:1", &["/bin/busybox", "sh", "-c", &script])?;
            anyhow::Ok((registry, tool))
        })
        .unwrap()
        .unwrap();
    let mut bmc = Bmc::start(&net).unwrap();
    let spec = VmSpec {
        disks: vec![Disk {
            path: work.path().join("disk0.img"),
            size: 1 << 30,
            bus: Bus::Virtio,
            serial: "ironiccont-disk0".into(),
            model: None,
        }],
        nics: vec![Nic { mac: MAC.into() }],
        ..VmSpec::new("node")
    };
    let system = bmc.define(&spec).unwrap();
    bmc.start_emulator().unwrap();
    let pxe = PxeRoot::start(&net, &ramdisk).unwrap();
    let conf = format!(
        "{}[agent_containers]\nallowed_containers = {tool}\npull_options = --tls-verify=false\n\
         run_options = --rm,--network=host,--device /dev/vda:/dev/target\n",
        ironic_flow::ironic_conf(pxe.dir(), "")
    );
    let ironic = Ironic::start_in(&net.ns, BRIDGE_IP, PORT, Some(&conf))
        .expect("starting Ironic 39.0.0 in the namespace");
    let machine = Machine::new(&bmc, system, &spec.disks[0].path);
    println!("bed up in {:.1} s", total.elapsed().as_secs_f64());

    net.block_on(async {
        let uuid = ironic_flow::enroll(&ironic, &bmc, machine.system(), "ironiccont", MAC, "bios")
            .await
            .unwrap();
        let mut flow = Flow::new(&ironic, &uuid, machine, FLOW_TIMEOUT);
        let t = Instant::now();
        let node = flow
            .manual_clean(
                json!([{"interface": "deploy", "step": "generic_container_step",
                                  "args": {"container_url": tool}}]),
            )
            .await
            .unwrap_or_else(|e| {
                panic!(
                    "manual clean: {e:#} (Ironic log {}, console {})",
                    ironic.log_path().display(),
                    flow.machine.console_path().display()
                )
            });
        println!(
            "manual clean with a container step: manageable after {:.1} s",
            t.elapsed().as_secs_f64()
        );
        assert!(node["last_error"].is_null(), "{}", node["last_error"]);
    })
    .unwrap();
    let mut f = std::fs::File::open(&spec.disks[0].path).unwrap();
    f.seek(SeekFrom::Start(512)).unwrap();
    let mut got = vec![0; MARKER.len()];
    f.read_exact(&mut got).unwrap();
    assert_eq!(got, MARKER, "the container's marker is not on the disk");
    let log = registry.log();
    assert!(
        log.lines()
            .any(|l| l.contains("oci-client") && l.contains("/v2/tool/manifests/1")),
        "the ramdisk's agent did not pull from the registry: {log}"
    );
    println!("all: {:.1} s", total.elapsed().as_secs_f64());
}
