//! Real, unmodified Ironic 39.0.0 with `[agent]
//! enable_bios_bootloader_install = true` deploys a Linux partition image
//! in BIOS mode onto the QEMU bed machine (SeaBIOS, one virtio disk),
//! through the bed's Redfish BMC and its `ipxe` boot interface as
//! `ironic_drives_ramdisk.rs` drives its machine
//! (`hardware_tests::bed::ironic_flow`), and the machine boots it:
//!
//! * the image is one ext4 filesystem holding a Debian root with Debian's
//!   GRUB for BIOS (`grub-pc-bin`, unpacked from Debian's packages) and
//!   the test image's kernel and initramfs as `/boot/vmlinuz-VERSION` and
//!   `/boot/initrd.img-VERSION` (`hardware_tests::grubimage`); no boot
//!   loader is installed anywhere in it;
//! * `direct` deploy with `image_type = partition`, a config drive and a
//!   1 GiB ephemeral partition (`ephemeral_gb`; Ironic's default format,
//!   ext4, made by the ramdisk's mkfs.ext4): the
//!   agent lays out the disk as IPA does for BIOS, writes the image into
//!   the root partition, and Ironic's `install_bootloader` (root UUID,
//!   `target_boot_mode: bios`) makes the agent run the image's own
//!   `grub-install --target=i386-pc /dev/vda` and `grub-mkconfig` chrooted
//!   into it (Ironic's lookup answer carries the option);
//! * the machine, powered off by the agent, boots from its disk: SeaBIOS
//!   runs GRUB's boot code, GRUB its generated menu's kernel, and the
//!   system prints its marker and its config drive's `meta_data.json`;
//! * the disk holds an ext4 filesystem labelled `ephemeral0` (IPA's label).
//!
//! About 2 min alone, 3.5 min beside other QEMU tests.

use std::time::{Duration, Instant};

use agent_testkit::image_server::{Fault, ImageServer};
use hardware_tests::bed::ironic_flow::{self, Flow, Machine, PxeRoot};
use hardware_tests::bed::redfish::Bmc;
use hardware_tests::bed::{self, deploy, Bus, Disk, Net, NetOptions, Nic, VmSpec, BRIDGE_IP};
use hardware_tests::ironic::Ironic;
use hardware_tests::{grubimage, require_root};
use serde_json::json;

const MAC: &str = "52:54:00:1c:0a:0e";
const GUEST: &str = "10.99.0.62";
const PORT: u16 = 6385;
const MARKER: &str = "ironicbios-grub-5d21";
const ROOT_UUID: &str = "7c3e9a10-2b4d-4e6f-8a1c-93d5b7f0e2a4";
const FLOW_TIMEOUT: Duration = Duration::from_secs(300);

#[test]
fn ironic_deploys_a_bios_partition_image_and_grub_from_the_image_boots_it() {
    require_root("the Ironic BIOS partition image QEMU test");
    let total = Instant::now();
    let ramdisk = bed::ramdisk_dir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let image = grubimage::ext4_image(work.path(), MARKER, ROOT_UUID, 160).unwrap();
    let sha = deploy::sha256_file(&image).unwrap();

    let net = Net::start(NetOptions {
        hosts: vec![(MAC.into(), GUEST.into())],
        ..NetOptions::ironic_ipxe("ironicbios", &ironic_flow::boot_script_url())
    })
    .unwrap();
    let images = net
        .ns
        .enter(|| ImageServer::start_on(format!("{BRIDGE_IP}:0").parse().unwrap()))
        .unwrap()
        .unwrap();
    images.route("/root.img", &image, &[], Fault::None);
    let mut bmc = Bmc::start(&net).unwrap();
    let spec = VmSpec {
        disks: vec![Disk {
            path: work.path().join("disk0.img"),
            size: 5 << 30,
            bus: Bus::Virtio,
            serial: "ironicbios-disk0".into(),
            model: None,
        }],
        nics: vec![Nic { mac: MAC.into() }],
        ..VmSpec::new("node")
    };
    let system = bmc.define(&spec).unwrap();
    bmc.start_emulator().unwrap();
    let pxe = PxeRoot::start(&net, &ramdisk).unwrap();
    let conf = ironic_flow::ironic_conf(pxe.dir(), "").replacen(
        "[agent]\n",
        "[agent]\nenable_bios_bootloader_install = true\n",
        1,
    );
    let ironic = Ironic::start_in(&net.ns, BRIDGE_IP, PORT, Some(&conf))
        .expect("starting Ironic 39.0.0 in the namespace");
    let machine = Machine::new(&bmc, system, &spec.disks[0].path);
    println!("bed up in {:.1} s", total.elapsed().as_secs_f64());

    net.block_on(async {
        let uuid = ironic_flow::enroll(&ironic, &bmc, machine.system(), "ironicbios", MAC, "bios")
            .await
            .unwrap();
        ironic
            .move_to(&uuid, "provide", "available", Duration::from_secs(60))
            .await
            .unwrap();
        let mut flow = Flow::new(&ironic, &uuid, machine, FLOW_TIMEOUT);
        let t = Instant::now();
        let info = Ironic::image_patch(
            &images.url("/root.img"),
            &sha,
            json!([
                {"op": "add", "path": "/instance_info/image_type", "value": "partition"},
                {"op": "add", "path": "/instance_info/image_disk_format", "value": "raw"},
                {"op": "add", "path": "/instance_info/ephemeral_gb", "value": 1},
            ]),
        );
        let node = flow
            .deploy_with(
                info,
                Some(json!({"meta_data": {"uuid": "ironicbios-cd", "hostname": "ironicbios"}})),
            )
            .await
            .unwrap_or_else(|e| {
                panic!(
                    "partition deploy: {e:#} (Ironic log {})",
                    ironic.log_path().display()
                )
            });
        println!(
            "partition image deploy (BIOS): active after {:.1} s",
            t.elapsed().as_secs_f64()
        );
        assert!(node["last_error"].is_null(), "{}", node["last_error"]);
        assert_eq!(
            node["driver_internal_info"]["root_uuid_or_disk_id"], ROOT_UUID,
            "{}",
            node["driver_internal_info"]
        );
        let booted = flow
            .boot_disk(MARKER, Duration::from_secs(240))
            .await
            .unwrap_or_else(|e| panic!("{e:#}"));
        println!(
            "booted from disk with GRUB from the image: marker {:.1} s after active, meta_data {}",
            booted.marker_after.as_secs_f64(),
            booted.meta
        );
        assert_eq!(
            booted.meta["uuid"],
            json!("ironicbios-cd"),
            "{}",
            booted.meta
        );
        let console = flow.machine.console();
        assert!(
            console.contains("GRUB2 successfully installed for BIOS boot"),
            "the agent did not report GRUB from the image; console: {}",
            flow.machine.console_path().display()
        );
        let disk = &spec.disks[0].path;
        let found: Vec<String> = bed::direct::partitions(disk)
            .into_iter()
            .map(|(start, len)| bed::direct::probe_partition(disk, start, len))
            .collect();
        assert!(
            found
                .iter()
                .any(|p| p.contains("TYPE=ext4") && p.contains("LABEL=ephemeral0")),
            "no ext4 ephemeral0 partition; the partitions hold: {found:?}"
        );
    })
    .unwrap();
    println!("all: {:.1} s", total.elapsed().as_secs_f64());
}
