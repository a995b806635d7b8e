//! A UEFI partition image deployed by the agent boots in QEMU under OVMF.
//!
//! The image is one ext4 filesystem, as a distribution ships one for Nova:
//! the test image's kernel and initramfs (`hardware_tests::testimage`) in
//! `/`, and under `/boot/efi/EFI/BOOT/BOOTX64.EFI` a GRUB core image
//! (grub-mkimage) whose embedded configuration finds that filesystem by its
//! UUID. The agent (host mode, command API) lays out a loop device as IPA
//! does for UEFI (ESP, swap, config drive, root), writes the image into the
//! root partition, and `image.install_bootloader` copies the image's
//! loaders onto the fresh ESP. OVMF, with empty variables (host mode writes
//! no NVRAM), then boots the removable-media path from that ESP: the
//! system prints its marker and its config drive's `meta_data.json`,
//! read from the `config-2` partition the agent made.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use agent_base::config::{Config, RunMode};
use agent_testkit::image_server::{Fault, ImageServer};
use hardware_tests::agentapi::AgentApi;
use hardware_tests::loopdev::LoopDevice;
use hardware_tests::run;
use hardware_tests::testimage::{self, marker_line};
use serde_json::json;

const MIB: u64 = 1 << 20;
const ROOT_UUID: &str = "6b1f4c2e-93a7-4d15-b8e0-2c7d9f1a3e55";
const MARKER: &str = "partition-image-uefi";
const OVMF_CODE: &str = "/usr/share/OVMF/OVMF_CODE.fd";
const OVMF_VARS: &str = "/usr/share/OVMF/OVMF_VARS.fd";

/// The partition image: kernel, initramfs and the GRUB loader under
/// `/boot/efi/EFI/BOOT` in a 128 MiB ext4 filesystem with [`ROOT_UUID`].
fn image(dir: &Path) -> PathBuf {
    let inputs = testimage::Inputs::fetch().expect("the test image's kernel and busybox");
    let initrd = testimage::initramfs::build(&inputs.kernel, &inputs.busybox, MARKER).unwrap();
    let tree = dir.join("tree");
    let efi = tree.join("boot/efi/EFI/BOOT");
    std::fs::create_dir_all(&efi).unwrap();
    std::fs::create_dir_all(tree.join("etc")).unwrap();
    std::fs::write(
        tree.join("etc/fstab"),
        format!("UUID={ROOT_UUID} / ext4 defaults 0 1\n"),
    )
    .unwrap();
    std::fs::copy(&inputs.kernel.image, tree.join("vmlinuz")).unwrap();
    std::fs::write(tree.join("initrd.img"), initrd).unwrap();
    let cfg = dir.join("grub.cfg");
    std::fs::write(
        &cfg,
        format!(
            "search --no-floppy --fs-uuid {ROOT_UUID} --set=root\n\
             linux /vmlinuz console=ttyS0 panic=-1 no_timer_check\ninitrd /initrd.img\nboot\n"
        ),
    )
    .unwrap();
    run(Command::new("grub-mkimage")
        .args(["-O", "x86_64-efi", "-p", "/EFI/BOOT", "-c"])
        .arg(&cfg)
        .arg("-o")
        .arg(efi.join("BOOTX64.EFI"))
        .args(["part_gpt", "ext2", "search", "search_fs_uuid", "linux"]))
    .expect("grub-mkimage (ci/install-deps installs grub-efi-amd64-bin)");
    let img = dir.join("root.img");
    std::fs::File::create(&img)
        .unwrap()
        .set_len(128 * MIB)
        .unwrap();
    run(Command::new("mkfs.ext4")
        .args(["-q", "-F", "-U", ROOT_UUID, "-d"])
        .arg(&tree)
        .arg(&img))
    .unwrap();
    img
}

/// A config-2 ISO as Ironic renders it.
fn config_drive(dir: &Path) -> Vec<u8> {
    let tree = dir.join("cd");
    std::fs::create_dir_all(tree.join("openstack/latest")).unwrap();
    std::fs::write(
        tree.join("openstack/latest/meta_data.json"),
        r#"{"uuid": "partition-boot"}"#,
    )
    .unwrap();
    let iso = dir.join("cd.iso");
    run(Command::new("genisoimage")
        .args(["-quiet", "-o"])
        .arg(&iso)
        .args(["-ldots", "-allow-lowercase", "-allow-multidot", "-l"])
        .args(["-J", "-r", "-V", "config-2"])
        .arg(&tree))
    .unwrap();
    std::fs::read(iso).unwrap()
}

/// The last lines of the console, for failure messages.
fn tail(console: &str) -> String {
    let lines: Vec<&str> = console.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}

struct Qemu(Child);

impl Drop for Qemu {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Boots `disk` under OVMF until the guest powers off or `timeout`;
/// returns the serial console.
fn boot_uefi(disk: &Path, dir: &Path, timeout: Duration) -> String {
    let console = dir.join("console.log");
    let vars = dir.join("OVMF_VARS.fd");
    std::fs::copy(OVMF_VARS, &vars).expect("OVMF (ci/install-deps installs ovmf)");
    let mut qemu = Qemu(
        Command::new("qemu-system-x86_64")
            .args(["-machine", "q35", "-accel", "tcg", "-cpu", "qemu64,+rdrand"])
            .args(["-m", "512", "-smp", "1"])
            .args([
                "-nographic",
                "-monitor",
                "none",
                "-no-reboot",
                "-nodefaults",
            ])
            .arg("-serial")
            .arg(format!("file:{}", console.display()))
            .arg("-drive")
            .arg(format!("file={},if=virtio,format=raw", disk.display()))
            .arg("-drive")
            .arg(format!("if=pflash,format=raw,readonly=on,file={OVMF_CODE}"))
            .arg("-drive")
            .arg(format!("if=pflash,format=raw,file={}", vars.display()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("qemu-system-x86_64 (ci/install-deps installs it)"),
    );
    let started = Instant::now();
    while started.elapsed() < timeout {
        if matches!(qemu.0.try_wait(), Ok(Some(_))) {
            break;
        }
        let text =
            String::from_utf8_lossy(&std::fs::read(&console).unwrap_or_default()).into_owned();
        if testimage::no_boot_lines().iter().any(|l| text.contains(l)) {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    println!("QEMU ran {:.1} s", started.elapsed().as_secs_f64());
    drop(qemu);
    String::from_utf8_lossy(&std::fs::read(&console).unwrap_or_default()).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ovmf_boots_a_deployed_uefi_partition_image() {
    hardware_tests::require_root("the partition image boot test");
    let dir = tempfile::tempdir().unwrap();
    let img = image(dir.path());
    let sha = ring::digest::digest(&ring::digest::SHA256, &std::fs::read(&img).unwrap());
    let sha: String = sha.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    let cd = config_drive(dir.path());
    let server = ImageServer::start().unwrap();
    server.route("/root.img", &img, &[], Fault::None);
    let disk = LoopDevice::new(1024 * MIB).unwrap();
    let api = AgentApi::start(Config {
        mode: RunMode::Host,
        allowed_devices: vec![disk.path.clone()],
        ..Config::default()
    })
    .await
    .unwrap();
    let r = api
        .run(
            "standby.prepare_image",
            json!({"image_info": {"id": "root.img", "urls": [server.url("/root.img")],
                "disk_format": "raw", "os_hash_algo": "sha256", "os_hash_value": sha,
                "image_type": "partition", "root_mb": 256, "swap_mb": 16, "ephemeral_mb": 0,
                "ephemeral_format": null, "preserve_ephemeral": false,
                "deploy_boot_mode": "uefi", "boot_option": "local", "disk_label": "gpt"},
                "configdrive": agent_contents::configdrive::source::encode(&cd)}),
        )
        .await
        .unwrap();
    assert_eq!(r["command_status"], "SUCCEEDED", "{r}");
    let uuids = api
        .run("standby.get_partition_uuids", json!({}))
        .await
        .unwrap();
    let uuids = &uuids["command_result"];
    assert_eq!(uuids["root uuid"], ROOT_UUID, "{uuids}");
    let r = api
        .run(
            "image.install_bootloader",
            json!({"root_uuid": ROOT_UUID,
                   "efi_system_part_uuid": uuids["efi system partition uuid"],
                   "prep_boot_part_uuid": null, "target_boot_mode": "uefi"}),
        )
        .await
        .unwrap();
    assert_eq!(r["command_status"], "SUCCEEDED", "{r}");
    drop(api);

    let console = boot_uefi(&disk.path, dir.path(), Duration::from_secs(300));
    assert!(
        console.contains(&marker_line(MARKER)),
        "the deployed partition image did not boot:\n{}",
        tail(&console)
    );
    assert_eq!(
        testimage::meta_data(&console).as_deref(),
        Some(r#"{"uuid": "partition-boot"}"#),
        "{}",
        tail(&console)
    );
}
