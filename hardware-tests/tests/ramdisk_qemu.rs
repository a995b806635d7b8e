//! The built deploy ramdisk boots in QEMU (TCG, no KVM) with user-mode
//! networking: PID 1 loads the virtio drivers, DHCP gets 10.0.2.15 from
//! slirp, and the agent finds the test conductor by `ipa-api-url`
//! (10.0.2.2 is the host's loopback), looks the node up and heartbeats.
//! The conductor reaches the agent's API through a slirp host forward on
//! 127.0.0.1, so a manual clean (erase_devices_metadata on a virtual disk
//! that is a file in the test's directory) runs end to end. The boot has
//! `agent.shell=1`: a command typed on the serial console must run; and
//! `ipa-enable-vlan-interfaces=eth0.42`: the VLAN interface is created in
//! the guest and asks for DHCP (slirp has no VLANs, so it gets no answer;
//! this machine's kernel has no 8021q, so the guest is the only place to
//! test the ioctl).
//!
//! The ramdisk is `$RAMDISK_DIR` or `target/ramdisk` (built by
//! `image-builder/build.sh` when missing). QEMU is killed by PID on drop.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use agent::testconductor::{Settings, TestConductor};
use hardware_tests::{repo_root, require_root, run};

struct Qemu(Child);

impl Drop for Qemu {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

const MAC: &str = "52:54:00:12:34:56";

#[tokio::test(flavor = "multi_thread")]
async fn ramdisk_boots_looks_up_and_heartbeats_in_qemu() {
    require_root("the QEMU ramdisk test");
    let dir = std::env::var_os("RAMDISK_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target/ramdisk"));
    if !dir.join("deploy.initramfs").exists() {
        run(Command::new(repo_root().join("image-builder/build.sh")).arg(&dir)).unwrap();
    }
    let tmp = tempfile::tempdir().unwrap();
    let disk = tmp.path().join("disk.img");
    std::fs::File::create(&disk)
        .unwrap()
        .set_len(64 << 20)
        .unwrap();

    let conductor = TestConductor::start(Settings::default()).await.unwrap();
    let uuid = conductor.enroll(&[MAC]);
    let erase =
        serde_json::json!({"interface": "deploy", "step": "erase_devices_metadata", "args": {}});
    conductor.start_clean(&uuid, Some(vec![erase])).unwrap();
    let port = conductor.url().rsplit(':').next().unwrap().to_string();
    let fwd = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();

    let console = tmp.path().join("console.log");
    let append = format!(
        "console=ttyS0 quiet panic=-1 BOOTIF=01-{} ipa-api-url=http://10.0.2.2:{port} \
         ipa-advertise-host=127.0.0.1 ipa-advertise-port={fwd} agent.shell=1 \
         ipa-enable-vlan-interfaces=eth0.42 agent.dhcp-timeout=4",
        MAC.replace(':', "-")
    );
    let started = Instant::now();
    let mut qemu = Qemu(
        Command::new("qemu-system-x86_64")
            .args([
                "-accel",
                "tcg",
                "-cpu",
                "qemu64,+rdrand",
                "-m",
                "1024",
                "-smp",
                "1",
            ])
            .args([
                "-nographic",
                "-no-reboot",
                "-nodefaults",
                "-serial",
                "stdio",
            ])
            .arg("-kernel")
            .arg(dir.join("deploy.kernel"))
            .arg("-initrd")
            .arg(dir.join("deploy.initramfs"))
            .arg("-append")
            .arg(&append)
            .arg("-drive")
            .arg(format!("file={},if=virtio,format=raw", disk.display()))
            .arg("-netdev")
            .arg(format!("user,id=n0,hostfwd=tcp:127.0.0.1:{fwd}-:9999"))
            .arg("-device")
            .arg(format!("virtio-net-pci,netdev=n0,mac={MAC},romfile="))
            .stdin(Stdio::piped())
            .stdout(std::fs::File::create(&console).unwrap())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("qemu-system-x86_64 (ci/install-deps installs it)"),
    );

    let mut first_heartbeat = None;
    let result = async {
        let deadline = Instant::now() + Duration::from_secs(240);
        while Instant::now() < deadline {
            let t = conductor.transcript();
            if first_heartbeat.is_none() && t.iter().any(|l| l.contains("heartbeat")) {
                first_heartbeat = Some(started.elapsed());
                // The debug shell has been up since before the agent started.
                if let Some(stdin) = qemu.0.stdin.as_mut() {
                    use std::io::Write;
                    let _ = stdin.write_all(b"echo shell-ok-$((6*7)); agent --version\n");
                    let _ = stdin.flush();
                }
            }
            if conductor
                .node(&uuid)
                .is_some_and(|n| n.provision_state == "manageable")
            {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        Err(anyhow::anyhow!("the node did not reach manageable"))
    }
    .await;
    let log = std::fs::read_to_string(&console).unwrap_or_default();
    println!("--- console ---\n{log}--- end ---");
    println!("transcript:\n{}", conductor.transcript().join("\n"));
    println!(
        "host: first heartbeat {first_heartbeat:?} after starting QEMU, clean done after {:?}",
        started.elapsed()
    );
    drop(qemu);
    let t = conductor.transcript();
    assert!(
        t.iter()
            .any(|l| l.contains("GET /v1/lookup") && l.ends_with("-> 200")),
        "no successful lookup"
    );
    assert!(t.iter().any(|l| l.contains("heartbeat")), "no heartbeat");
    assert!(
        log.contains("phase modules done") && log.contains("phase network done"),
        "no init phases on the console"
    );
    result.unwrap();
}
