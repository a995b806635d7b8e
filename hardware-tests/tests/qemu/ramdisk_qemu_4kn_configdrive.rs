//! The kernel's side of vfat config drives on 4Kn disks, in the deploy
//! ramdisk's kernel under QEMU (this host's kernel has no vfat): two
//! virtio disks with 4096-byte logical sectors, one holding a vfat config
//! drive as mkfs.vfat makes it (512-byte sectors), one holding the same
//! drive after `agent_contents::configdrive::vfat::adapt` rebuilt it for 4096-byte
//! sectors (what the agent writes; its placement on a 4Kn disk is tested on
//! a loop device in `configdrive_4kn_loop.rs`). Typed into the debug
//! shell: the rebuilt one mounts and its files read back; the original is
//! refused.
//!
//! The ramdisk is `$RAMDISK_DIR` or `target/ramdisk` (built by
//! `image-builder/build.sh` when missing). QEMU is killed by PID on drop.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use hardware_tests::{repo_root, require_root, run};

struct Qemu(Child);

impl Drop for Qemu {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

const META: &str = r#"{"uuid": "qemu-4kn-cd"}"#;

fn vfat_config_drive(dir: &Path) -> Vec<u8> {
    hardware_tests::vfat_config_drive(dir, &[("meta_data.json", META)]).unwrap()
}

fn disk(path: &Path, data: &[u8]) {
    let mut d = data.to_vec();
    d.resize(8 << 20, 0);
    std::fs::write(path, d).unwrap();
}

#[test]
fn the_rebuilt_vfat_config_drive_mounts_on_a_4kn_disk_in_the_ramdisk_kernel() {
    require_root("the QEMU 4Kn config-drive test");
    let dir = std::env::var_os("RAMDISK_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target/ramdisk"));
    if !dir.join("deploy.initramfs").exists() {
        run(Command::new(repo_root().join("image-builder/build.sh")).arg(&dir)).unwrap();
    }
    let tmp = tempfile::tempdir().unwrap();
    let original = vfat_config_drive(tmp.path());
    let rebuilt = agent_contents::configdrive::vfat::adapt(&original, 4096, 64 << 20)
        .unwrap()
        .expect("a 512-byte FAT is rebuilt for 4096-byte sectors");
    disk(&tmp.path().join("a.img"), &rebuilt);
    disk(&tmp.path().join("b.img"), &original);

    let console = tmp.path().join("console.log");
    let mut args: Vec<String> = [
        "-accel",
        "tcg",
        "-cpu",
        "qemu64,+rdrand",
        "-m",
        "512",
        "-smp",
        "1",
        "-nographic",
        "-no-reboot",
        "-nodefaults",
        "-serial",
        "stdio",
    ]
    .map(String::from)
    .to_vec();
    for (id, f) in [("a", "a.img"), ("b", "b.img")] {
        args.push("-drive".into());
        args.push(format!(
            "file={},if=none,id={id},format=raw",
            tmp.path().join(f).display()
        ));
        args.push("-device".into());
        args.push(format!(
            "virtio-blk-pci,drive={id},logical_block_size=4096,physical_block_size=4096"
        ));
    }
    let mut qemu = Qemu(
        Command::new("qemu-system-x86_64")
            .args(&args)
            .arg("-kernel")
            .arg(dir.join("deploy.kernel"))
            .arg("-initrd")
            .arg(dir.join("deploy.initramfs"))
            .arg("-append")
            .arg("console=ttyS0 quiet panic=-1 agent.shell=1 agent.dhcp-timeout=1")
            .stdin(Stdio::piped())
            .stdout(std::fs::File::create(&console).unwrap())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("qemu-system-x86_64 (ci/install-deps installs it)"),
    );
    // Typed until the answers appear (the shell starts after the modules).
    // iocharset=utf8: the ramdisk carries nls_utf8, not the default ascii.
    // The markers are computed by the shell, so the echoed input never
    // matches them.
    let script = b"mkdir -p /mnt/a /mnt/b; cat /sys/block/vda/queue/logical_block_size; \
mount -t vfat -o ro,iocharset=utf8 /dev/vda /mnt/a && echo \"A-$((1+1))-MOUNTED $(cat /mnt/a/openstack/latest/meta_data.json)\"; \
mount -t vfat -o ro,iocharset=utf8 /dev/vdb /mnt/b || echo B-$((2+2))-REFUSED\n";
    let deadline = Instant::now() + Duration::from_secs(240);
    let mut log = String::new();
    let mut next_type = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(500));
        log = std::fs::read_to_string(&console).unwrap_or_default();
        if log.contains("B-4-REFUSED") && log.contains("A-2-MOUNTED") {
            break;
        }
        if Instant::now() >= next_type && log.contains("phase modules done") {
            use std::io::Write;
            let stdin = qemu.0.stdin.as_mut().unwrap();
            stdin.write_all(script).unwrap();
            stdin.flush().unwrap();
            next_type = Instant::now() + Duration::from_secs(15);
        }
    }
    drop(qemu);
    println!("--- console ---\n{log}--- end ---");
    assert!(
        log.contains(&format!("A-2-MOUNTED {META}")),
        "the rebuilt config drive did not mount or read back"
    );
    assert!(log.contains("B-4-REFUSED"), "the original was not refused");
    assert!(
        log.contains("logical sector size too small for device"),
        "the kernel's reason for refusing the original is not on the console"
    );
}
