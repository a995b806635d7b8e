//! Real, unmodified Ironic 39.0.0 (`raid_interface = agent`) builds a
//! software RAID-1 across the two virtual disks of a QEMU machine on the
//! bed, deploys a whole-disk image onto it and tears it down again, under
//! UEFI (OVMF), through the bed's Redfish BMC and its `ipxe` boot
//! interface as `ironic_drives_ramdisk.rs` drives its machine
//! (`hardware_tests::bed::ironic_flow`):
//!
//! 1. `target_raid_config` = one `MAX` RAID-1 root volume with
//!    `controller: software` (the shape the issue asks for, no
//!    `physical_disks`: every disk), set through Ironic's API; a manual
//!    clean with `raid.delete_configuration` + `raid.create_configuration`
//!    ends `manageable` with Ironic's `raid_config` holding the volume,
//!    and each disk file carries md superblocks (read from the host: the
//!    mirrored ESP's version 1.0 and the root array's version 1.2);
//! 2. `provide` (no automated cleaning), then a `direct` deploy of the test
//!    image without root device hints: the agent's default choice is the
//!    array (the smallest device of at least 4 GiB, as IPA's), Ironic calls
//!    `install_bootloader` for the software RAID, and the machine boots
//!    from its disks and prints the image's marker;
//! 3. the machine's disk files, booted directly with QEMU + OVMF and the
//!    domain's NVRAM, boot with the first disk alone and with the second
//!    alone;
//! 4. undeploy, `manage`, and a manual clean with
//!    `raid.delete_configuration`: Ironic clears `raid_config`, and neither
//!    disk file keeps an md superblock (at every offset md could keep one
//!    in the partitions the clean built) or any signature `wipefs` knows.
//!
//! The deploy carries a config drive, which IPA puts in a partition of the
//! md device, so inside the array. The test system's initramfs does not
//! assemble md, so it is read from each disk file instead: the array's
//! partition table at the root member's data offset, a `config-2`
//! partition there (libblkid) and its `meta_data.json` (`isoinfo`). Wall
//! times go to `target/bed-logs/ironicraid/flow-times.txt`.
//!
//! The same under BIOS (SeaBIOS, about 4 min more): Ironic's `[agent]
//! enable_bios_bootloader_install = true`, the image a Debian root with
//! Debian's GRUB for BIOS in a GPT whole-disk image
//! (`hardware_tests::grubimage`) and `instance_info.image_rootfs_uuid`
//! naming its root filesystem; Ironic's `install_bootloader` makes the
//! agent run the image's `grub-install --target=i386-pc` on both member
//! disks (into each MBR and BIOS boot partition) and its `grub-mkconfig`,
//! so GRUB reads the kernel through its md driver from either disk.

use std::fs::File;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use agent_contents::raid::{ops, superblock};
use agent_testkit::image_server::{Fault, ImageServer};
use anyhow::{bail, Context, Result};
use hardware_tests::bed::ironic_flow::{self, Flow, Machine, PxeRoot};
use hardware_tests::bed::redfish::Bmc;
use hardware_tests::bed::{
    self, deploy, Boot, Bus, Disk, Firmware, Net, NetOptions, Nic, Vm, VmSpec, BRIDGE_IP,
};
use hardware_tests::ironic::Ironic;
use hardware_tests::{grubimage, require_root, testimage};
use serde_json::{json, Value};

const MAC: &str = "52:54:00:1c:0a:0d";
const ROOT_UUID: &str = "5e2d8c41-7a3b-4c9e-b1f6-0d8a2e4c6b19";
const GUEST: &str = "10.99.0.61";
const DISK_GIB: u64 = 5;
const PORT: u16 = 6385;
const MARKER: &str = "ironicraid-deployed-3b9e";
const FLOW_TIMEOUT: Duration = Duration::from_secs(300);

/// The agent RAID interface, added to the bed's Ironic configuration.
const RAID_CONF: &str = "[DEFAULT]\nenabled_raid_interfaces = no-raid,agent\n";

/// The bed's name: its logs directory (consoles, daemons' logs, wall
/// times). The two firmware variants run at once, each on its own bed.
fn bed_name(uefi: bool) -> &'static str {
    if uefi {
        "ironicraid"
    } else {
        "ironicraid-bios"
    }
}

fn times_file(uefi: bool) -> PathBuf {
    bed::logs_dir(bed_name(uefi))
        .unwrap()
        .join("flow-times.txt")
}

/// Prints a wall time and appends it to [`times_file`].
fn timing(uefi: bool, line: String) {
    println!("{line}");
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(times_file(uefi))
        .unwrap();
    writeln!(f, "{line}").unwrap();
}

fn secs(t: Instant) -> String {
    format!("{:.1} s", t.elapsed().as_secs_f64())
}

/// Every md superblock on the disk file `path`: `(partition start, byte
/// offset, array name)` for each partition of its table that holds one at
/// any offset md uses.
fn md_superblocks(path: &Path, parts: &[(u64, u64)]) -> Vec<(u64, u64, String)> {
    let f = File::open(path).unwrap();
    let mut found = Vec::new();
    for &(start, len) in parts {
        for off in ops::candidates(len) {
            let mut b = vec![0u8; 4096];
            if f.read_exact_at(&mut b, start + off).is_err() {
                continue;
            }
            if let Some(sb) = superblock::decode(&b, off / 512) {
                found.push((start, off, sb.name.clone()));
            }
        }
    }
    found
}

/// The partitions of the disk file `path`: `(start, length)` in bytes.
fn partitions(path: &Path) -> Vec<(u64, u64)> {
    let f = File::open(path).unwrap();
    match agent_devices::disk::table::read(&f, 512).unwrap() {
        Some(t) => t.parts.iter().map(|p| (p.start, p.len)).collect(),
        None => Vec::new(),
    }
}

/// One RAID-1 member's copy of the array's data, from byte `base` of its
/// disk file: what md shows as the array device.
struct MemberData<'a> {
    f: &'a File,
    base: u64,
}

impl agent_devices::disk::table::Disk for MemberData<'_> {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        self.f.read_exact_at(buf, self.base + offset)
    }
    fn write_at(&mut self, _: &[u8], _: u64) -> std::io::Result<()> {
        Err(std::io::ErrorKind::PermissionDenied.into())
    }
}

/// The config drive inside the root array, read from the disk file `path`
/// alone (one member's copy, as any system that assembles md sees it):
/// the root member's data offset from its superblock, the array's own
/// partition table, the partition libblkid finds labelled `config-2`, and
/// its `openstack/latest/meta_data.json` extracted by `isoinfo`.
fn config_drive_in_array(path: &Path, parts: &[(u64, u64)], tmp: &Path) -> Result<String> {
    let f = File::open(path)?;
    for &(start, _) in parts {
        let mut b = vec![0u8; 4096];
        f.read_exact_at(&mut b, start + 4096)?;
        let Some(sb) = superblock::decode(&b, 8) else {
            continue;
        };
        if sb.name.ends_with("esp") {
            continue;
        }
        let array = MemberData {
            f: &f,
            base: start + sb.data_offset * 512,
        };
        let table =
            agent_devices::disk::table::read(&array, 512)?.context("no table in the array")?;
        for p in &table.parts {
            let at = array.base + p.start;
            let probe = bed::direct::probe_partition(path, at, p.len);
            if !probe.lines().any(|l| l == "LABEL=config-2") {
                continue;
            }
            let mut iso = vec![0u8; usize::try_from(p.len.min(64 << 20))?];
            f.read_exact_at(&mut iso, at)?;
            let copy = tmp.join("configdrive.iso");
            std::fs::write(&copy, &iso)?;
            let meta = hardware_tests::run(
                Command::new("isoinfo")
                    .args(["-J", "-x", "/openstack/latest/meta_data.json", "-i"])
                    .arg(&copy),
            )?;
            return Ok(meta);
        }
        bail!("the array's partitions {:?} hold no config-2", table.parts);
    }
    bail!("{}: no root array member", path.display())
}

fn signatures(path: &Path) -> String {
    hardware_tests::run(
        Command::new("wipefs")
            .arg("--no-act")
            .arg("--noheadings")
            .arg(path),
    )
    .unwrap()
    .trim()
    .to_string()
}

#[test]
fn ironic_builds_software_raid_deploys_onto_it_and_deletes_it_uefi() {
    raid_flow(true);
}

#[test]
fn ironic_builds_software_raid_deploys_onto_it_and_deletes_it_bios() {
    raid_flow(false);
}

fn raid_flow(uefi: bool) {
    require_root("the Ironic software RAID QEMU test");
    let timing = |line: String| timing(uefi, line);
    let total = Instant::now();
    std::fs::write(times_file(uefi), "").unwrap();
    let ramdisk = bed::ramdisk_dir().unwrap();
    let work = tempfile::tempdir().unwrap();
    // UEFI: the test image (its ESP holds its loaders); BIOS: a Debian
    // root with GRUB to install from it.
    let image = if uefi {
        testimage::build(work.path(), MARKER).unwrap().raw
    } else {
        grubimage::whole_disk_image(work.path(), MARKER, ROOT_UUID, 160).unwrap()
    };
    let sha = deploy::sha256_file(&image).unwrap();
    let firmware = |vars: &Path| {
        if uefi {
            Firmware::Uefi {
                vars: vars.to_path_buf(),
            }
        } else {
            Firmware::Bios
        }
    };

    let net = Net::start(NetOptions {
        hosts: vec![(MAC.into(), GUEST.into())],
        ..NetOptions::ironic_ipxe(bed_name(uefi), &ironic_flow::boot_script_url())
    })
    .unwrap();
    let images = net
        .ns
        .enter(|| ImageServer::start_on(format!("{BRIDGE_IP}:0").parse().unwrap()))
        .unwrap()
        .unwrap();
    images.route("/disk.raw", &image, &[], Fault::None);

    let mut bmc = Bmc::start(&net).unwrap();
    let vars = work.path().join("OVMF_VARS.fd");
    let disks: Vec<Disk> = (0..2)
        .map(|i| Disk {
            path: work.path().join(format!("disk{i}.img")),
            size: DISK_GIB << 30,
            bus: Bus::Virtio,
            serial: format!("ironicraid-disk{i}"),
            model: None,
        })
        .collect();
    let spec = VmSpec {
        disks: disks.clone(),
        nics: vec![Nic { mac: MAC.into() }],
        firmware: firmware(&vars),
        ..VmSpec::new("node")
    };
    let system = bmc.define(&spec).unwrap();
    bmc.start_emulator().unwrap();
    let pxe = PxeRoot::start(&net, &ramdisk).unwrap();
    // Ironic's configuration has one [DEFAULT] section.
    let mut conf = ironic_flow::ironic_conf(pxe.dir(), "").replacen("[DEFAULT]\n", RAID_CONF, 1);
    if !uefi {
        conf = conf.replacen(
            "[agent]\n",
            "[agent]\nenable_bios_bootloader_install = true\n",
            1,
        );
    }
    let ironic = Ironic::start_in(&net.ns, BRIDGE_IP, PORT, Some(&conf))
        .expect("starting Ironic 39.0.0 in the namespace");
    let machine = Machine::new(&bmc, system, &disks[0].path);
    timing(format!("bed, BMC and Ironic up in {}", secs(total)));

    let target = json!({"logical_disks": [{"size_gb": "MAX", "raid_level": "1",
        "controller": "software", "is_root_volume": true}]});
    let raid_step = |step: &str| json!({"interface": "raid", "step": step});
    let machine = net.block_on(async {
        let mode = if uefi { "uefi" } else { "bios" };
        let uuid = ironic_flow::enroll(&ironic, &bmc, machine.system(), "ironicraid", MAC, mode)
            .await
            .unwrap();
        ironic
            .patch(
                &uuid,
                json!([{"op": "replace", "path": "/raid_interface", "value": "agent"}]),
            )
            .await
            .unwrap();
        ironic
            .set_target_raid_config(&uuid, target.clone())
            .await
            .unwrap();
        let mut flow = Flow::new(&ironic, &uuid, machine, FLOW_TIMEOUT);
        let log = ironic.log_path();

        // 1. Build the mirror.
        let t = Instant::now();
        let node = flow
            .manual_clean(json!([
                raid_step("delete_configuration"),
                raid_step("create_configuration")
            ]))
            .await
            .unwrap_or_else(|e| panic!("RAID clean: {e:#} (Ironic log {})", log.display()));
        timing(format!("flow create_configuration: manageable after {}", secs(t)));
        assert!(node["last_error"].is_null(), "{}", node["last_error"]);
        let node = ironic.node(&uuid).await.unwrap();
        let volume = &node["raid_config"]["logical_disks"][0];
        println!("Ironic's raid_config: {}", node["raid_config"]);
        assert_eq!(volume["raid_level"], json!("1"), "{node}");
        assert_eq!(volume["controller"], json!("software"), "{node}");
        let mut built = Vec::new();
        for d in &disks {
            let parts = partitions(&d.path);
            let sbs = md_superblocks(&d.path, &parts);
            println!("{}: partitions {parts:?}, md superblocks {sbs:?}", d.path.display());
            // The mirrored ESP (version 1.0, at the end; UEFI only) and
            // the root array (version 1.2, 4 KiB in).
            assert!(
                !uefi || sbs.iter().any(|(_, off, name)| name.ends_with("esp") && *off > 4096),
                "{}: no ESP member: {sbs:?}",
                d.path.display()
            );
            assert!(
                sbs.iter().any(|(_, off, name)| !name.ends_with("esp") && *off == 4096),
                "{}: no root member: {sbs:?}",
                d.path.display()
            );
            built.push(parts);
        }

        // 2. Deploy onto the array (no hints) and boot from disk.
        let t = Instant::now();
        ironic
            .move_to(&uuid, "provide", "available", Duration::from_secs(60))
            .await
            .unwrap();
        let mut info = json!([
            {"op": "add", "path": "/instance_info/image_source", "value": images.url("/disk.raw")},
            {"op": "add", "path": "/instance_info/image_os_hash_algo", "value": "sha256"},
            {"op": "add", "path": "/instance_info/image_os_hash_value", "value": sha},
            {"op": "add", "path": "/instance_info/image_disk_format", "value": "raw"},
        ]);
        if !uefi {
            // What Ironic passes to install_bootloader as the root for
            // software RAID (else Glance's rootfs_uuid).
            info.as_array_mut().unwrap().push(
                json!({"op": "add", "path": "/instance_info/image_rootfs_uuid", "value": ROOT_UUID}),
            );
        }
        let node = flow
            .deploy_with(info, Some(json!({"meta_data": {"uuid": "ironicraid-cd"}})))
            .await
            .unwrap_or_else(|e| panic!("deploy: {e:#} (Ironic log {})", log.display()));
        timing(format!("flow deploy onto the array: active after {}", secs(t)));
        assert!(node["last_error"].is_null(), "{}", node["last_error"]);
        let after = flow
            .boot_disk_marker(MARKER, Duration::from_secs(240))
            .await
            .unwrap_or_else(|e| panic!("{e:#}"));
        timing(format!(
            "flow deploy: booted from both disks, marker {:.1} s after active",
            after.as_secs_f64()
        ));
        let console = flow.machine.console();
        assert!(
            console.contains("raid: /dev/md0 assembled"),
            "the deploy ramdisk saw no array; console: {}",
            flow.machine.console_path().display()
        );
        if !uefi {
            assert!(
                console.contains("GRUB2 successfully installed for BIOS boot"),
                "the agent did not report GRUB from the image; console: {}",
                flow.machine.console_path().display()
            );
        }
        // The config drive is inside the array (IPA puts its partition on
        // the md device): on each member's copy.
        for d in &disks {
            let meta = config_drive_in_array(&d.path, &partitions(&d.path), work.path())
                .unwrap_or_else(|e| panic!("{}: {e:#}", d.path.display()));
            let meta: Value = serde_json::from_str(&meta).unwrap_or_default();
            assert_eq!(meta["uuid"], json!("ironicraid-cd"), "{}", d.path.display());
        }
        let ironic_log = std::fs::read_to_string(&log).unwrap_or_default();
        assert!(
            ironic_log.contains("Executing agent command image.install_bootloader"),
            "Ironic never asked for install_bootloader; log {}",
            log.display()
        );
        (uuid, flow.machine, built)
    });
    let (uuid, machine, built) = machine.unwrap();

    // 3. Either disk alone, booted from its file with the domain's NVRAM.
    for (label, which) in [("first-only", 0usize), ("second-only", 1)] {
        let t = Instant::now();
        let nvram = work.path().join(format!("vars-{label}.fd"));
        if uefi {
            std::fs::copy(&vars, &nvram).unwrap();
        }
        let alone = VmSpec {
            disks: vec![disks[which].clone()],
            nics: vec![Nic { mac: MAC.into() }],
            firmware: firmware(&nvram),
            boot: Boot::Disk,
            ..VmSpec::new(&format!("alone-{label}"))
        };
        let mut vm = Vm::start(&net, &alone).unwrap();
        let r = deploy::wait_booted(
            &mut vm,
            &testimage::marker_line(MARKER),
            Duration::from_secs(240),
        );
        let console = vm.console();
        vm.kill();
        drop(vm);
        r.unwrap_or_else(|e| panic!("boot with the {label} disk: {e:#}\n{console}"));
        let entry = deploy::uefi_boot_entry(&console).unwrap_or_default();
        timing(format!(
            "boot with the {label} disk: marker after {} ({entry})",
            secs(t)
        ));
    }

    // 4. Tear the array down.
    let node = net.block_on(async {
        let mut flow = Flow::new(&ironic, &uuid, machine, FLOW_TIMEOUT);
        let t = Instant::now();
        ironic
            .provision(&uuid, json!({"target": "deleted"}))
            .await
            .unwrap();
        ironic
            .wait_for(&uuid, "available", FLOW_TIMEOUT)
            .await
            .unwrap();
        ironic
            .move_to(&uuid, "manage", "manageable", Duration::from_secs(60))
            .await
            .unwrap();
        let node = flow
            .manual_clean(json!([raid_step("delete_configuration")]))
            .await
            .unwrap_or_else(|e| {
                panic!(
                    "delete_configuration: {e:#} (Ironic log {})",
                    ironic.log_path().display()
                )
            });
        timing(format!(
            "flow delete_configuration: manageable after {}",
            secs(t)
        ));
        let stored = ironic.node(&uuid).await.unwrap();
        (node, stored)
    });
    let (node, stored): (Value, Value) = node.unwrap();
    assert!(node["last_error"].is_null(), "{}", node["last_error"]);
    assert_eq!(stored["raid_config"], json!({}), "{stored}");
    for (d, parts) in disks.iter().zip(&built) {
        let left = md_superblocks(&d.path, parts);
        assert!(left.is_empty(), "{}: {left:?}", d.path.display());
        let sigs = signatures(&d.path);
        assert!(sigs.is_empty(), "{}: {sigs}", d.path.display());
    }
    timing(format!("all flows: {}", secs(total)));
}
