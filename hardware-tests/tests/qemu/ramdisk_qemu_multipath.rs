//! Multipath in the deploy ramdisk: one LUN (a 5 GiB file carrying a GPT)
//! presented on two virtio-scsi paths with the same serial and WWN, beside
//! an ordinary virtio disk (4 GiB, also with a GPT), driven by the stand-in
//! conductor in one boot:
//! - PID 1 assembles a device-mapper multipath device over the two paths
//!   (and a partition map for the LUN's one partition);
//! - inspection: the inventory lists the multipath device once (`/dev/dm-N`,
//!   the LUN's serial and WWN, its size) and neither path (`/dev/sdX`);
//! - `erase_devices_metadata` erases through the multipath device (its
//!   partition map removed first; the paths, held, are never touched
//!   themselves): both GPTs are gone from the files;
//! - software RAID: `create_configuration` of a RAID-1 whose members are
//!   chosen by the LUN's WWN and the other disk's serial partitions the
//!   multipath device (its partition mapped) and puts an md member on the
//!   map: the superblock is in the LUN file's partition; then
//!   `delete_configuration` removes it and the LUN's table;
//! - a deploy of a whole-disk image with a config drive and a root device
//!   hint by the shared WWN writes through the multipath device: the LUN's
//!   file holds the image and the config drive, the other disk nothing.
//!
//! About 38 s here (TCG, 2 cores).

use std::os::unix::fs::FileExt;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use agent::testconductor::{BootMode, DeployRequest, ImageInfo, Settings, TestConductor};
use agent_contents::raid::superblock;
use agent_testkit::image_server::{Fault, ImageServer};
use hardware_tests::bed::BRIDGE_IP;
use hardware_tests::bed::{self, deploy, direct, MultipathDisk, Vm};
use hardware_tests::{require_root, run};
use serde_json::{json, Value};

const MAC: &str = "52:54:00:12:34:5c";
const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;
const SERIAL: &str = "MPATH0001";
const WWN: &str = "0x5000c50015ea71ad";
const MARKER: &[u8] = b"multipath-image-marker-42";

fn gpt(disk: &Path, size: u64) {
    std::fs::File::create(disk).unwrap().set_len(size).unwrap();
    let script = disk.with_extension("sfdisk");
    std::fs::write(&script, "label: gpt\n,32MiB,L\n").unwrap();
    run(Command::new("sfdisk")
        .arg("-q")
        .arg(disk)
        .stdin(std::fs::File::open(&script).unwrap()))
    .unwrap();
}

/// The md superblock in the partition at byte `start` (length `len`) of
/// a disk image: its array name.
fn member(disk: &Path, start: u64, len: u64) -> Option<String> {
    let f = std::fs::File::open(disk).ok()?;
    for sector in superblock::offsets(len / 512) {
        let mut b = vec![0u8; 4096];
        f.read_exact_at(&mut b, start + sector * 512).ok()?;
        if let Some(found) = superblock::decode(&b, sector) {
            return Some(found.name);
        }
    }
    None
}

fn signatures(disk: &Path) -> String {
    run(Command::new("wipefs").arg("--no-act").arg(disk)).unwrap_or_default()
}

#[test]
fn ramdisk_lists_erases_and_deploys_through_a_multipath_device() {
    require_root("the QEMU multipath test");
    let started = Instant::now();
    let ramdisk = bed::ramdisk_dir().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let lun = tmp.path().join("lun.img");
    let plain = tmp.path().join("PLAIN0001.img");
    gpt(&lun, 5 * GIB);
    gpt(&plain, 4 * GIB);
    assert!(signatures(&lun).contains("gpt") && signatures(&plain).contains("gpt"));
    // The image: a GPT with one partition and a marker inside it.
    let image = tmp.path().join("image.raw");
    gpt(&image, 40 * MIB);
    std::fs::OpenOptions::new()
        .write(true)
        .open(&image)
        .unwrap()
        .write_all_at(MARKER, 2 * MIB)
        .unwrap();
    let sha = deploy::sha256_file(&image).unwrap();

    let disks = direct::virtio_disks(tmp.path(), &["PLAIN0001"], 4 * GIB);
    assert_eq!(disks[0].path, plain);
    let lun_disk = MultipathDisk {
        path: lun.clone(),
        size: 5 * GIB,
        serial: SERIAL.into(),
        wwn: WWN.into(),
        paths: 2,
    };
    let (net, spec) =
        direct::multipath_machine("multipath", &ramdisk, MAC, &disks, lun_disk, "").unwrap();
    let workdir = tmp.path().to_path_buf();
    type Outcome = (
        Option<Value>,
        Vec<(u64, u64, Option<String>)>,
        String,
        String,
        String,
        String,
        Vec<String>,
    );
    let outcome: anyhow::Result<Outcome> = net
        .block_on(async {
            let settings = Settings {
                command_poll_interval: Duration::from_secs(2),
                ..Settings::default()
            };
            let conductor =
                TestConductor::start_on(settings, format!("{BRIDGE_IP}:6385").parse()?).await?;
            let server = ImageServer::start_on(format!("{BRIDGE_IP}:0").parse()?)?;
            server.route("/images/image.raw", &image, &[], Fault::None);
            let uuid = conductor.enroll(&[MAC]);
            conductor.start_inspect(&uuid)?;
            let mut vm = Vm::start(&net, &spec)?;
            let ctx = |vm: &Vm, c: &TestConductor| {
                format!(
                    "\n--- transcript ---\n{}\n--- console {} ---\n{}",
                    c.transcript().join("\n"),
                    vm.console_path().display(),
                    vm.console()
                )
            };
            let node = conductor
                .wait_for_state(&uuid, "manageable", Duration::from_secs(240))
                .await
                .map_err(|e| anyhow::anyhow!("inspection: {e:#}{}", ctx(&vm, &conductor)))?;
            println!("{:>5.1} s inspected", started.elapsed().as_secs_f64());
            let inspected = node.inspection_data;

            // A manual clean with `steps`, waited for; `what` names it.
            let clean = |steps: Vec<Value>, what: &'static str| {
                let (conductor, uuid, vm) = (&conductor, &uuid, &vm);
                async move {
                    conductor.start_clean(uuid, Some(steps))?;
                    conductor
                        .wait_for_state(uuid, "manageable", Duration::from_secs(120))
                        .await
                        .map_err(|e| anyhow::anyhow!("{what}: {e:#}{}", ctx(vm, conductor)))
                }
            };
            clean(
                vec![json!({"interface": "deploy", "step": "erase_devices_metadata", "args": {}})],
                "erase_devices_metadata",
            )
            .await?;
            println!("{:>5.1} s cleaned", started.elapsed().as_secs_f64());
            let lun_after_clean = signatures(&lun);
            let plain_after_clean = signatures(&plain);

            conductor.update_node(&uuid, |n| {
                n.target_raid_config = json!({"logical_disks": [
                {"controller": "software", "raid_level": "1", "size_gb": 1, "volume_name": "mp",
                 "physical_disks": [{"wwn": WWN}, {"serial": "PLAIN0001"}]}]});
            });
            let raid = |name: &str| json!({"interface": "raid", "step": name, "args": {}});
            clean(
                vec![raid("delete_configuration"), raid("create_configuration")],
                "create_configuration",
            )
            .await?;
            println!("{:>5.1} s RAID built", started.elapsed().as_secs_f64());
            let raid_layout: Vec<(u64, u64, Option<String>)> = direct::partitions(&lun)
                .into_iter()
                .map(|(s, l)| (s, l, member(&lun, s, l)))
                .collect();
            clean(vec![raid("delete_configuration")], "delete_configuration").await?;
            println!("{:>5.1} s RAID deleted", started.elapsed().as_secs_f64());
            let lun_after_delete = signatures(&lun);

            conductor.make_available(&uuid)?;
            let configdrive = deploy::config_drive(&workdir, &json!({"uuid": "multipath"}))?;
            conductor.start_deploy(
                &uuid,
                DeployRequest {
                    image_info: ImageInfo::raw_sha256(&server.url("/images/image.raw"), &sha),
                    configdrive: Some(configdrive),
                    boot_mode: BootMode::Bios,
                    root_device: Some(json!({"wwn": WWN})),
                },
            )?;
            let node = deploy::watch_deploy(
                &conductor,
                &uuid,
                &["active"],
                Duration::from_secs(240),
                |_| {},
            )
            .await
            .map_err(|e| anyhow::anyhow!("deploy: {e:#}{}", ctx(&vm, &conductor)))?;
            anyhow::ensure!(
                node.provision_state == "active",
                "deploy ended {}: {:?}{}",
                node.provision_state,
                node.last_error,
                ctx(&vm, &conductor)
            );
            let _ = tokio::task::block_in_place(|| vm.wait_exit(Duration::from_secs(60)));
            println!("{:>5.1} s deployed", started.elapsed().as_secs_f64());
            let console = vm.console();
            vm.kill();
            Ok((
                inspected,
                raid_layout,
                lun_after_delete,
                lun_after_clean,
                plain_after_clean,
                console,
                conductor.transcript(),
            ))
        })
        .and_then(|r| r);
    let (
        inspected,
        raid_layout,
        lun_after_delete,
        lun_after_clean,
        plain_after_clean,
        console,
        transcript,
    ) = outcome.unwrap_or_else(|e| panic!("{e:#}"));
    let ctx = format!(
        "\n--- transcript ---\n{}\n--- console ({}) ---\n{console}",
        transcript.join("\n"),
        net.logs.display()
    );

    // Assembled at boot, with the LUN's partition mapped.
    assert!(
        console.contains("multipath: /dev/dm-") && console.contains("(mpatha) assembled from sd"),
        "no multipath device assembled{ctx}"
    );
    let inv = inspected.unwrap_or_else(|| panic!("no inspection data{ctx}"))["inventory"].clone();
    let disks = inv["disks"].as_array().cloned().unwrap_or_default();
    let names: Vec<&str> = disks.iter().filter_map(|d| d["name"].as_str()).collect();
    let ctx = format!("\ninventory disks: {disks:#?}{ctx}");
    assert_eq!(
        names.len(),
        2,
        "the multipath device and vda, nothing else{ctx}"
    );
    assert!(
        !names.iter().any(|n| n.starts_with("/dev/sd")),
        "a path is listed{ctx}"
    );
    assert!(names.contains(&"/dev/vda"), "{ctx}");
    let m = disks
        .iter()
        .find(|d| {
            d["name"]
                .as_str()
                .is_some_and(|n| n.starts_with("/dev/dm-"))
        })
        .unwrap_or_else(|| panic!("no multipath device in the inventory{ctx}"));
    assert_eq!(m["serial"], SERIAL, "{ctx}");
    assert_eq!(m["wwn"], WWN, "{ctx}");
    assert_eq!(m["size"], 5 * GIB, "{ctx}");
    assert_eq!(m["by_path"], Value::Null, "{ctx}");

    // RAID on the multipath device's partition.
    assert_eq!(
        raid_layout.len(),
        1,
        "one RAID partition on the LUN: {raid_layout:?}{ctx}"
    );
    assert_eq!(
        raid_layout[0].2.as_deref(),
        Some("mp"),
        "no member of array mp on the LUN's partition: {raid_layout:?}{ctx}"
    );
    assert!(
        console.contains("name=mpatha-part1"),
        "the RAID partition was not mapped{ctx}"
    );
    assert!(
        lun_after_delete.is_empty() && member(&lun, raid_layout[0].0, raid_layout[0].1).is_none(),
        "delete_configuration left on the LUN: {lun_after_delete}{ctx}"
    );

    // Erased through the multipath device.
    assert!(
        lun_after_clean.is_empty(),
        "the LUN keeps signatures after erase_devices_metadata: {lun_after_clean}{ctx}"
    );
    assert!(
        plain_after_clean.is_empty(),
        "vda keeps signatures: {plain_after_clean}{ctx}"
    );

    // Deployed through it: the image on the LUN, nothing on vda.
    let mut head = vec![0u8; MARKER.len()];
    std::fs::File::open(&lun)
        .unwrap()
        .read_exact_at(&mut head, 2 * MIB)
        .unwrap();
    assert_eq!(head, MARKER, "the image is not on the LUN{ctx}");
    std::fs::File::open(&plain)
        .unwrap()
        .read_exact_at(&mut head, 2 * MIB)
        .unwrap();
    assert_ne!(head, MARKER, "the image went to vda{ctx}");
    assert!(signatures(&plain).is_empty(), "vda was written{ctx}");
    let parts = direct::partitions(&lun);
    assert_eq!(
        parts.len(),
        2,
        "the image's partition and the config drive: {parts:?}{ctx}"
    );
    let (start, len) = parts[1];
    let probe = direct::probe_partition(&lun, start, len);
    assert!(
        probe.contains("LABEL=config-2"),
        "no config drive on the LUN's second partition: {probe}{ctx}"
    );
    assert!(
        console.contains("multipath partition map created"),
        "the written table was not mapped{ctx}"
    );
    println!("{:>5.1} s all checked", started.elapsed().as_secs_f64());
}
