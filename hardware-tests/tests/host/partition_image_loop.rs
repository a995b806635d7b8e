//! A partition image (one ext4 filesystem, `image_type: partition`)
//! deployed through the command API to a loop device as Ironic 39 asks for
//! it (PROTOCOL.md §5.6–5.8): the table IPA makes (UEFI: GPT with ESP,
//! ephemeral, swap, config drive, root; BIOS: msdos with an active root),
//! the image byte-identical in the root partition (raw and as compressed
//! qcow2), the other partitions' filesystems and labels, the config drive,
//! `standby.get_partition_uuids` with the root filesystem's and the ESP's
//! UUIDs, `image.install_bootloader` copying the image's own UEFI loaders
//! to the ESP (host mode: no NVRAM) and its refusal for BIOS; a wrong
//! checksum leaves no partition table.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use agent_base::config::{Config, RunMode};
use agent_testkit::image_server::{Fault, ImageServer};
use base64::Engine as _;
use hardware_tests::agentapi::AgentApi;
use hardware_tests::loopdev::LoopDevice;
use hardware_tests::partimage::{ext4_cat, fat_cat, BOOTX64, GRUBX64, GRUB_CFG, MARKER, ROOT_UUID};
use hardware_tests::run;
use serde_json::{json, Value};

const MIB: u64 = 1 << 20;

fn sha256(path: &Path) -> String {
    let d = ring::digest::digest(&ring::digest::SHA256, &std::fs::read(path).unwrap());
    d.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

fn gzip_b64(data: &[u8]) -> String {
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(data).unwrap();
    base64::engine::general_purpose::STANDARD.encode(gz.finish().unwrap())
}

fn blkid(dev: &Path, tag: &str) -> String {
    run(Command::new("blkid")
        .args(["-p", "-o", "value", "-s", tag])
        .arg(dev))
    .unwrap_or_default()
}

fn part(disk: &Path, n: u32) -> PathBuf {
    PathBuf::from(format!("{}p{n}", disk.display()))
}

/// The image info Ironic 39 sends for a partition image (agent.py
/// `write_image`: `PARTITION_IMAGE_LABELS`, `boot_option`, `disk_label`).
fn image_info(server: &ImageServer, name: &str, sha: &str, layout: Value) -> Value {
    let mut info = json!({"id": name, "urls": [server.url(&format!("/{name}"))],
        "disk_format": "raw", "container_format": "bare", "stream_raw_images": true,
        "os_hash_algo": "sha256", "os_hash_value": sha, "node_uuid": "node-1",
        "image_type": "partition", "kernel": null, "ramdisk": null, "boot_option": "local",
        "preserve_ephemeral": false, "configdrive": null});
    for (k, v) in layout.as_object().unwrap() {
        info[k] = v.clone();
    }
    info
}

async fn uuids(api: &AgentApi) -> Value {
    let r = api
        .run("standby.get_partition_uuids", json!({}))
        .await
        .unwrap();
    assert_eq!(r["command_status"], "SUCCEEDED", "{r}");
    r["command_result"].clone()
}

fn sfdisk_json(disk: &Path) -> Value {
    serde_json::from_str(&run(Command::new("sfdisk").arg("--json").arg(disk)).unwrap()).unwrap()
}

/// `(start MiB, size MiB, type)` of each partition.
fn table(disk: &Path) -> (String, Vec<(u64, u64, String)>) {
    let j = sfdisk_json(disk);
    let pt = &j["partitiontable"];
    let sector = pt["sectorsize"].as_u64().unwrap_or(512);
    let parts = pt["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["start"].as_u64().unwrap() * sector / MIB,
                p["size"].as_u64().unwrap() * sector / MIB,
                p["type"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    (pt["label"].as_str().unwrap().to_string(), parts)
}

/// The first `len` bytes of `dev` equal `file`.
fn same_prefix(dev: &Path, file: &Path) {
    let want = std::fs::read(file).unwrap();
    let mut got = vec![0u8; want.len()];
    use std::os::unix::fs::FileExt;
    std::fs::File::open(dev)
        .unwrap()
        .read_exact_at(&mut got, 0)
        .unwrap();
    assert!(
        got == want,
        "{} does not hold the image byte for byte",
        dev.display()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partition_image_is_laid_out_written_and_its_loaders_copied() {
    hardware_tests::require_root("the partition image loop-device test");
    let dir = tempfile::tempdir().unwrap();
    let img = hardware_tests::partimage::ext4_image(dir.path()).unwrap();
    let sha = sha256(&img);
    let qcow = dir.path().join("root.qcow2");
    run(Command::new("qemu-img")
        .args(["convert", "-q", "-c", "-f", "raw", "-O", "qcow2"])
        .arg(&img)
        .arg(&qcow))
    .unwrap();
    let qcow_sha = sha256(&qcow);
    let cd_dir = dir.path().join("cd");
    std::fs::create_dir_all(&cd_dir).unwrap();
    let cd = hardware_tests::vfat_config_drive(
        &cd_dir,
        &[("meta_data.json", r#"{"uuid": "part-node"}"#)],
    )
    .unwrap();
    let server = ImageServer::start().unwrap();
    server.route("/root.img", &img, &[], Fault::None);
    server.route("/root.qcow2", &qcow, &[], Fault::None);
    let disk = LoopDevice::new(1024 * MIB).unwrap();
    let api = AgentApi::start(Config {
        mode: RunMode::Host,
        allowed_devices: vec![disk.path.clone()],
        ..Config::default()
    })
    .await
    .unwrap();

    // UEFI: ESP, ephemeral, swap, config drive, root (root_mb 64).
    let uefi = json!({"root_mb": 64, "swap_mb": 32, "ephemeral_mb": 100,
        "ephemeral_format": "ext4", "deploy_boot_mode": "uefi", "disk_label": "gpt"});
    let r = api
        .run(
            "standby.prepare_image",
            json!({"image_info": image_info(&server, "root.img", &sha, uefi.clone()),
                   "configdrive": gzip_b64(&cd)}),
        )
        .await
        .unwrap();
    assert_eq!(r["command_status"], "SUCCEEDED", "{r}");
    let (label, parts) = table(&disk.path);
    assert_eq!(label, "gpt");
    let esp = "C12A7328-F81F-11D2-BA4B-00A0C93EC93B";
    let linux = "0FC63DAF-8483-4772-8E79-3D69D8477DE4";
    let swap = "0657FD6D-A4AB-43C4-84E5-0933C84B4F4F";
    assert_eq!(
        parts,
        [
            (1, 550, esp.to_string()),
            (551, 100, linux.to_string()),
            (651, 32, swap.to_string()),
            (683, 4, linux.to_string()),
            (687, 64, linux.to_string()),
        ]
    );
    let p = |n| part(&disk.path, n);
    assert_eq!(blkid(&p(1), "TYPE"), "vfat");
    assert_eq!(blkid(&p(1), "LABEL"), "efi-part");
    run(Command::new("fsck.fat").arg("-n").arg(p(1))).unwrap();
    assert_eq!(blkid(&p(2), "TYPE"), "ext4");
    assert_eq!(blkid(&p(2), "LABEL"), "ephemeral0");
    assert_eq!(blkid(&p(3), "TYPE"), "swap");
    assert_eq!(blkid(&p(3), "LABEL"), "swap1");
    assert_eq!(blkid(&p(4), "LABEL"), "CONFIG-2");
    assert_eq!(
        fat_cat(&p(4), "/openstack/latest/meta_data.json").unwrap(),
        br#"{"uuid": "part-node"}"#
    );
    assert_eq!(blkid(&p(5), "UUID"), ROOT_UUID);
    same_prefix(&p(5), &img);
    assert_eq!(ext4_cat(&p(5), "/marker").unwrap(), MARKER.trim_end());

    let esp_uuid = blkid(&p(1), "UUID");
    let got = uuids(&api).await;
    assert_eq!(
        got,
        json!({"root uuid": ROOT_UUID, "efi system partition uuid": esp_uuid,
            "partitions": {"efi system partition": p(1), "ephemeral": p(2), "swap": p(3),
                "configdrive": p(4), "root": p(5)}}),
    );
    let msg = r["command_result"]["result"].as_str().unwrap();
    assert!(
        msg.ends_with(&format!(
            "root_uuid={ROOT_UUID} efi_system_partition_uuid={esp_uuid}"
        )),
        "{msg}"
    );

    // install_bootloader as Ironic calls it for a UEFI partition image.
    let r = api
        .run(
            "image.install_bootloader",
            json!({"root_uuid": ROOT_UUID, "efi_system_part_uuid": esp_uuid,
                   "prep_boot_part_uuid": null, "target_boot_mode": "uefi"}),
        )
        .await
        .unwrap();
    assert_eq!(r["command_status"], "SUCCEEDED", "{r}");
    assert_eq!(fat_cat(&p(1), "/EFI/BOOT/BOOTX64.EFI").unwrap(), BOOTX64);
    assert_eq!(fat_cat(&p(1), "/EFI/debian/grubx64.efi").unwrap(), GRUBX64);
    assert_eq!(
        fat_cat(&p(1), "/EFI/debian/grub.cfg").unwrap(),
        GRUB_CFG.as_bytes()
    );
    // What firmware and fsck.fat demand of the directories written.
    run(Command::new("fsck.fat").arg("-n").arg(p(1))).unwrap();
    let fstab = ext4_cat(&p(5), "/etc/fstab").unwrap();
    assert!(
        fstab.contains(&format!(
            "UUID={esp_uuid}\t/boot/efi\tvfat\tumask=0077\t0\t1"
        )),
        "{fstab}"
    );
    assert!(
        fstab.starts_with(&format!("UUID={ROOT_UUID} / ext4")),
        "{fstab}"
    );

    // A rebuild with preserve_ephemeral keeps the table and the ephemeral
    // filesystem's content; with another layout it is refused.
    let kept = dir.path().join("kept.txt");
    std::fs::write(&kept, "tenant data\n").unwrap();
    run(Command::new("debugfs")
        .args(["-w", "-R", &format!("write {} kept.txt", kept.display())])
        .arg(p(2)))
    .unwrap();
    let eph_uuid = blkid(&p(2), "UUID");
    let mut preserve = uefi.clone();
    preserve["preserve_ephemeral"] = json!(true);
    let r = api
        .run(
            "standby.prepare_image",
            json!({"image_info": image_info(&server, "root.img", &sha, preserve.clone()),
                   "configdrive": gzip_b64(&cd)}),
        )
        .await
        .unwrap();
    assert_eq!(r["command_status"], "SUCCEEDED", "{r}");
    assert_eq!(table(&disk.path).1, parts, "the table is kept");
    assert_eq!(blkid(&p(2), "UUID"), eph_uuid);
    assert_eq!(ext4_cat(&p(2), "/kept.txt").unwrap(), "tenant data");
    assert_eq!(blkid(&p(5), "UUID"), ROOT_UUID);
    preserve["swap_mb"] = json!(64);
    let r = api
        .run(
            "standby.prepare_image",
            json!({"image_info": image_info(&server, "root.img", &sha, preserve),
                   "configdrive": gzip_b64(&cd)}),
        )
        .await
        .unwrap();
    assert_eq!(r["command_status"], "FAILED", "{r}");
    let details = r["command_error"]["details"].as_str().unwrap();
    assert!(details.contains("the disk layout changed"), "{details}");
    assert_eq!(table(&disk.path).1, parts, "nothing was touched");
    assert_eq!(ext4_cat(&p(2), "/kept.txt").unwrap(), "tenant data");

    // BIOS on msdos from a compressed qcow2, no ephemeral: the root is
    // the active partition; GRUB would be needed, which IPA refuses.
    let bios = json!({"root_mb": 64, "swap_mb": 16, "ephemeral_mb": 0,
        "ephemeral_format": null, "deploy_boot_mode": "bios", "disk_label": "msdos",
        "disk_format": "qcow2"});
    let r = api
        .run(
            "standby.prepare_image",
            json!({"image_info": image_info(&server, "root.qcow2", &qcow_sha, bios)}),
        )
        .await
        .unwrap();
    assert_eq!(r["command_status"], "SUCCEEDED", "{r}");
    let j = sfdisk_json(&disk.path);
    let pt = &j["partitiontable"];
    assert_eq!(pt["label"], "dos");
    let ps = pt["partitions"].as_array().unwrap();
    assert_eq!(ps.len(), 2, "{pt}");
    assert_eq!(
        (ps[0]["type"].as_str(), ps[0]["bootable"].as_bool()),
        (Some("82"), None)
    );
    assert_eq!(
        (ps[1]["type"].as_str(), ps[1]["bootable"].as_bool()),
        (Some("83"), Some(true))
    );
    same_prefix(&p(2), &img);
    let got = uuids(&api).await;
    assert_eq!(got["root uuid"], ROOT_UUID);
    assert_eq!(got["efi system partition uuid"], Value::Null);
    let r = api
        .run(
            "image.install_bootloader",
            json!({"root_uuid": ROOT_UUID, "efi_system_part_uuid": null,
                   "prep_boot_part_uuid": null, "target_boot_mode": "bios"}),
        )
        .await
        .unwrap();
    assert_eq!(r["command_status"], "FAILED", "{r}");
    assert_eq!(r["command_error"]["type"], "InvalidImage", "{r}");

    // A layout larger than the disk fails before anything is touched.
    let huge = json!({"root_mb": 4096, "deploy_boot_mode": "uefi"});
    let r = api
        .run(
            "standby.prepare_image",
            json!({"image_info": image_info(&server, "root.img", &sha, huge)}),
        )
        .await
        .unwrap();
    assert_eq!(r["command_status"], "FAILED", "{r}");
    assert_eq!(
        r["command_error"]["type"], "InvalidCommandParamsError",
        "{r}"
    );
    assert!(
        r["command_error"]["details"]
            .as_str()
            .unwrap()
            .contains("needs 4647 MiB"),
        "{r}"
    );
    assert_eq!(table(&disk.path).0, "dos", "the disk was left as it was");

    // A wrong checksum: the image fails closed and the table is wiped.
    let r = api
        .run(
            "standby.prepare_image",
            json!({"image_info": image_info(&server, "root.img", &"0".repeat(64), uefi)}),
        )
        .await
        .unwrap();
    assert_eq!(r["command_status"], "FAILED", "{r}");
    assert_eq!(r["command_error"]["type"], "ImageChecksumError", "{r}");
    assert_eq!(uuids(&api).await, json!({}));
    let left = Command::new("sfdisk")
        .arg("--json")
        .arg(&disk.path)
        .output()
        .unwrap();
    assert!(
        !left.status.success() || left.stdout.is_empty(),
        "a partition table is left: {}",
        String::from_utf8_lossy(&left.stdout)
    );
    assert_eq!(blkid(&disk.path, "PTTYPE"), "");
}

/// On a disk with 4096-byte logical sectors: the GPT's usable sectors, the
/// ESP's FAT and the loaders copied to it follow the disk's sector size.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partition_image_on_a_4kn_disk() {
    hardware_tests::require_root("the partition image 4Kn loop-device test");
    let dir = tempfile::tempdir().unwrap();
    let img = hardware_tests::partimage::ext4_image(dir.path()).unwrap();
    let sha = sha256(&img);
    let server = ImageServer::start().unwrap();
    server.route("/root.img", &img, &[], Fault::None);
    let disk = LoopDevice::with_sector_size(1024 * MIB, 4096).unwrap();
    let api = AgentApi::start(Config {
        mode: RunMode::Host,
        allowed_devices: vec![disk.path.clone()],
        ..Config::default()
    })
    .await
    .unwrap();
    let layout = json!({"root_mb": 64, "swap_mb": 8, "ephemeral_mb": 0,
        "ephemeral_format": null, "deploy_boot_mode": "uefi", "disk_label": "gpt"});
    let r = api
        .run(
            "standby.prepare_image",
            json!({"image_info": image_info(&server, "root.img", &sha, layout)}),
        )
        .await
        .unwrap();
    assert_eq!(r["command_status"], "SUCCEEDED", "{r}");
    let j = sfdisk_json(&disk.path);
    assert_eq!(j["partitiontable"]["sectorsize"], 4096, "{j}");
    assert_eq!(j["partitiontable"]["firstlba"], 6, "{j}");
    let (label, parts) = table(&disk.path);
    assert_eq!(label, "gpt");
    let sizes: Vec<(u64, u64)> = parts.iter().map(|(a, b, _)| (*a, *b)).collect();
    assert_eq!(sizes, [(1, 550), (551, 8), (559, 64)]);
    let p = |n| part(&disk.path, n);
    run(Command::new("fsck.fat").arg("-n").arg(p(1))).unwrap();
    assert_eq!(blkid(&p(2), "TYPE"), "swap");
    assert_eq!(blkid(&p(3), "UUID"), ROOT_UUID);
    same_prefix(&p(3), &img);
    let r = api
        .run(
            "image.install_bootloader",
            json!({"root_uuid": ROOT_UUID, "target_boot_mode": "uefi"}),
        )
        .await
        .unwrap();
    assert_eq!(r["command_status"], "SUCCEEDED", "{r}");
    run(Command::new("fsck.fat").arg("-n").arg(p(1))).unwrap();
    assert_eq!(fat_cat(&p(1), "/EFI/BOOT/BOOTX64.EFI").unwrap(), BOOTX64);
}
