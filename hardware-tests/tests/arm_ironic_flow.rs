//! Unmodified Ironic 39 drives an emulated Arm server through the aarch64
//! deploy ramdisk (issue 33), and the aarch64 test image it deploys boots
//! under AAVMF. Run by `ci/test-aarch64` (not `ci/test`: the aarch64
//! ramdisk's cross build takes some 30 minutes here).
//!
//! * `aarch64_test_image_boots_under_aavmf`: the aarch64 test disk image
//!   (`testimage::build_for(.., Arch::Aarch64)`: Debian's arm64 kernel,
//!   busybox and signed GRUB) as the only disk of QEMU's `virt` board
//!   (Cortex-A57, TCG) under AAVMF: the firmware starts its
//!   `BOOTAA64.EFI`, the system prints the image's marker on the PL011
//!   console and says it found no config drive.
//! * `ironic_inspects_cleans_and_deploys_an_arm_server`: unmodified Ironic
//!   39.0.0 with the `redfish` hardware type and `redfish-virtual-media`
//!   boot (what Metal3 runs on Arm) in front of an aarch64 libvirt domain
//!   (`bed::arm_domain`: `virt`, Cortex-A57, TCG, AAVMF, 2 vCPUs) behind
//!   sushy-tools, whose libvirt driver inserts the ISO on the domain's
//!   SCSI CD-ROM drive. The node says only `properties.cpu_arch =
//!   aarch64`: its `driver_info` names no deploy kernel, ramdisk or
//!   bootloader, so Ironic picks them from `[conductor]
//!   deploy_kernel_by_arch`, `deploy_ramdisk_by_arch` and
//!   `bootloader_by_arch` (an ESP of the aarch64 ramdisk's `shimaa64.efi`
//!   as `BOOTAA64.EFI` with Debian's signed monolithic GRUB beside it: the
//!   ramdisk's own `grubaa64.efi` is the network GRUB, which stops at a
//!   prompt on an ISO), while the defaults
//!   (`deploy_kernel`, `deploy_ramdisk`, `bootloader`) name x86_64 files
//!   that cannot boot this machine. The ISO Ironic inserted must hold the
//!   aarch64 kernel and ESP. Ironic inspects (the inventory it stores says
//!   `cpu.architecture == "aarch64"`), cleans (automated clean,
//!   `erase_devices_metadata`: the GPT put on the disk is gone) and deploys
//!   the aarch64 test image (qcow2, with a config drive) in one ramdisk
//!   boot (fast track); the node is `active`, Ironic boots the domain from
//!   its disk and the deployed system prints its marker and config drive.
//!   Phase times are printed and kept in
//!   `target/bed-logs/armironic/flow-times.txt`.
//!
//! The bed offers DHCP with a fixed lease for the machine's MAC (the
//! Metal3 flows cover DHCP-less `network_data`). Ironic's API is plain
//! HTTP on the bed's bridge; the agent still serves TLS (`require_tls`
//! keeps Ironic's default).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use hardware_tests::bed::arm_flow::{file_sha256, ironic_conf, read_arm_iso};
use hardware_tests::bed::http_root::HttpRoot;
use hardware_tests::bed::redfish::{self, Bmc};
use hardware_tests::bed::{
    self, arm_domain, metal3, Boot, Bus, Disk, Firmware, Net, NetOptions, Nic, Vm, VmSpec,
    BRIDGE_IP,
};
use hardware_tests::ironic::Ironic;
use hardware_tests::{require_root, run, testimage};
use image_builder::arch::Arch;
use serde_json::{json, Value};

/// One emulated Arm machine at a time: TCG on two cores.
static ONE_MACHINE: Mutex<()> = Mutex::new(());

#[test]
fn aarch64_test_image_boots_under_aavmf() {
    require_root("the aarch64 test image boot (a namespace, QEMU)");
    let _one = ONE_MACHINE.lock().unwrap_or_else(|e| e.into_inner());
    let tmp = tempfile::tempdir().unwrap();
    let marker = format!("arm{:012x}", fastrand::u64(..) >> 16);
    let t = Instant::now();
    let img = testimage::build_for(tmp.path(), &marker, Arch::Aarch64).unwrap();
    println!(
        "aarch64 test image ({} MiB) built in {:.1} s",
        img.size >> 20,
        t.elapsed().as_secs_f64()
    );
    let net = Net::start(NetOptions::no_dhcp("armimage")).unwrap();
    let spec = VmSpec {
        arch: Arch::Aarch64,
        firmware: Firmware::Uefi {
            vars: tmp.path().join("AAVMF_VARS.fd"),
        },
        memory_mb: 512,
        boot: Boot::Disk,
        disks: vec![Disk {
            path: img.raw.clone(),
            size: img.size,
            bus: Bus::Virtio,
            serial: "armimage0".into(),
            model: None,
        }],
        ..VmSpec::new("armimage")
    };
    let mut vm = Vm::start(&net, &spec).unwrap();
    let line = testimage::marker_line(&marker);
    let booted = vm
        .wait_console(&line, Duration::from_secs(300))
        .unwrap_or_else(|e| panic!("{e:#}"));
    vm.wait_console(testimage::NO_CONFIG_DRIVE, Duration::from_secs(60))
        .unwrap_or_else(|e| panic!("{e:#}"));
    let console = vm.console();
    println!(
        "aarch64 test image: marker after {:.1} s under AAVMF",
        booted.as_secs_f64()
    );
    // arm64's first kernel line, and the PL011 as the console.
    for want in ["Booting Linux on physical CPU", "ttyAMA0"] {
        assert!(
            console.contains(want),
            "{want:?} not on the console: {}",
            vm.console_path().display()
        );
    }
}

const MAC: &str = "52:54:00:a6:40:01";
const GUEST: &str = "10.99.0.61";
const IRONIC_PORT: u16 = 6385;
const HTTP_PORT: u16 = 8089;
/// At least IPA's 4 GiB root-disk minimum.
const DISK_GIB: u64 = 5;
const MARKER: &str = "arm-deployed-7e1d";
const RAMDISK_START: &str = "deploy ramdisk init starting";
/// What one phase may take under TCG (an emulated Arm core is slower
/// than the x86 ones).
const PHASE_TIMEOUT: Duration = Duration::from_secs(900);

static TIMES: OnceLock<PathBuf> = OnceLock::new();

/// Prints a wall time and appends it to [`TIMES`].
fn timing(line: String) {
    println!("{line}");
    if let Some(path) = TIMES.get() {
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(path)
        {
            let _ = writeln!(f, "{line}");
        }
    }
}

fn secs(t: Instant) -> String {
    format!("{:.1} s", t.elapsed().as_secs_f64())
}

/// Waits until the node settles in `state` (no target left), failing early
/// on a `* failed` state with Ironic's `last_error`.
async fn settle(ironic: &Ironic, uuid: &str, state: &str, t0: Instant, console: &Path) -> Value {
    let start = Instant::now();
    let mut seen = String::new();
    loop {
        let node = ironic.node(uuid).await.unwrap();
        let current = node["provision_state"].as_str().unwrap_or("?").to_string();
        if current != seen {
            eprintln!(
                "[{:>6.1} s] ironic: {current} (target {}, power {})",
                t0.elapsed().as_secs_f64(),
                node["target_provision_state"],
                node["power_state"]
            );
            seen = current.clone();
        }
        assert!(
            !current.ends_with("failed"),
            "node went to {current:?} waiting for {state:?}: {}; Ironic's log: {}; console: {}",
            node["last_error"],
            ironic.log_path().display(),
            console.display()
        );
        if current == state && node["target_provision_state"].is_null() {
            return node;
        }
        assert!(
            start.elapsed() < PHASE_TIMEOUT,
            "node still {current:?} after {PHASE_TIMEOUT:?} waiting for {state:?}; last_error {}; Ironic's log: {}; console: {}",
            node["last_error"],
            ironic.log_path().display(),
            console.display()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[test]
fn ironic_inspects_cleans_and_deploys_an_arm_server() {
    require_root("the Arm Ironic flow (namespaces, libvirtd, QEMU)");
    let _one = ONE_MACHINE.lock().unwrap_or_else(|e| e.into_inner());
    let total = Instant::now();
    let times = bed::logs_dir("armironic").unwrap().join("flow-times.txt");
    std::fs::write(&times, "").unwrap();
    TIMES.set(times).unwrap();
    let ramdisk = bed::aarch64_ramdisk_dir().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let www = tmp.path().join("www");
    for d in ["aarch64", "x86_64"] {
        std::fs::create_dir_all(www.join(d)).unwrap();
    }

    // Ironic's http_root: the aarch64 ramdisk and ESP under aarch64/, the
    // x86_64 defaults under x86_64/, the image to deploy.
    let t = Instant::now();
    for f in ["deploy.kernel", "deploy.initramfs"] {
        std::fs::copy(ramdisk.join(f), www.join("aarch64").join(f)).unwrap();
    }
    // Debian's arm64 kernel, busybox and monolithic signed GRUB: for the
    // test image, and the GRUB for the ESP.
    let inputs = testimage::Inputs::fetch_for(Arch::Aarch64).unwrap();
    let grub = inputs.loader.clone().expect("the signed grubaa64.efi");
    let arm_esp = arm_domain::esp_image(tmp.path(), &ramdisk.join("shimaa64.efi"), &grub).unwrap();
    std::fs::copy(&arm_esp, www.join("aarch64/esp.img")).unwrap();
    let x86_esp = redfish::esp_image(tmp.path()).unwrap();
    std::fs::copy(&x86_esp, www.join("x86_64/esp.img")).unwrap();
    // Stand-ins for an x86_64 deploy kernel and ramdisk: fetched and put
    // on the ISO like real ones, never bootable here.
    std::fs::write(www.join("x86_64/deploy.kernel"), b"x86_64 deploy kernel\n").unwrap();
    std::fs::write(
        www.join("x86_64/deploy.initramfs"),
        b"x86_64 deploy ramdisk\n",
    )
    .unwrap();
    let arm_kernel_sha = file_sha256(&ramdisk.join("deploy.kernel")).unwrap();
    let arm_esp_sha = file_sha256(&arm_esp).unwrap();
    let image = testimage::build_from(&inputs, tmp.path(), MARKER).unwrap();
    let qcow2 = www.join("disk.qcow2");
    testimage::to_qcow2(&image.raw, &qcow2, true).unwrap();
    let qcow2_sha256 = file_sha256(&qcow2).unwrap();
    timing(format!("aarch64 test image and ESPs built in {}", secs(t)));

    let net = Net::start(NetOptions {
        dhcp: true,
        hosts: vec![(MAC.to_string(), GUEST.to_string())],
        ..NetOptions::no_dhcp("armironic")
    })
    .unwrap();
    let mut bmc = Bmc::start(&net).unwrap();
    let mut spec = VmSpec::new("armvm");
    spec.arch = Arch::Aarch64;
    spec.firmware = Firmware::Uefi {
        vars: tmp.path().join("armvm_VARS.fd"),
    };
    spec.memory_mb = 1024;
    spec.cpus = 2;
    spec.disks.push(Disk {
        path: tmp.path().join("disk0.img"),
        size: DISK_GIB << 30,
        bus: Bus::Virtio,
        serial: "arm-disk0".into(),
        model: None,
    });
    std::fs::File::create(&spec.disks[0].path)
        .and_then(|f| f.set_len(DISK_GIB << 30))
        .unwrap();
    // A table for automated cleaning to remove.
    run(Command::new("sh")
        .arg("-c")
        .arg("printf 'label: gpt\nname=old-data\n' | sfdisk --quiet \"$0\"")
        .arg(&spec.disks[0].path))
    .unwrap();
    spec.nics.push(Nic { mac: MAC.into() });
    spec.boot = Boot::Disk;
    let disk_path = spec.disks[0].path.clone();
    let sys = bmc.define(&spec).unwrap();
    bmc.start_emulator().unwrap();
    let _http = HttpRoot::serve(&net, &www, HTTP_PORT).unwrap();
    let http_url = format!("http://{BRIDGE_IP}:{HTTP_PORT}");

    let t = Instant::now();
    let ironic = Ironic::start_in(
        &net.ns,
        BRIDGE_IP,
        IRONIC_PORT,
        Some(&ironic_conf(&www, &http_url)),
    )
    .expect("starting Ironic 39.0.0 in the namespace");
    timing(format!(
        "BMC, http server and Ironic up in {} ({} since start)",
        secs(t),
        secs(total)
    ));

    let path = sys.path();
    let bmc_url = bmc.url();
    let console = sys.console.clone();
    let t0 = Instant::now();
    let (iso, inventory) = net
        .block_on(async {
            let node = ironic
                .create_node(json!({
                    "name": "armvm",
                    "driver": "redfish",
                    "driver_info": {
                        "redfish_address": bmc_url,
                        "redfish_system_id": path,
                        "redfish_username": redfish::USER,
                        "redfish_password": redfish::PASSWORD,
                    },
                    "boot_interface": "redfish-virtual-media",
                    "power_interface": "redfish",
                    "management_interface": "redfish",
                    "inspect_interface": "agent",
                    "deploy_interface": "direct",
                    "network_interface": "noop",
                    "automated_clean": true,
                    "properties": { "cpu_arch": "aarch64", "capabilities": "boot_mode:uefi" },
                }))
                .await
                .unwrap();
            let uuid = node["uuid"].as_str().unwrap().to_string();
            for key in ["deploy_kernel", "deploy_ramdisk", "bootloader"] {
                assert!(node["driver_info"].get(key).is_none(), "{node}");
            }
            ironic.create_port(&uuid, MAC).await.unwrap();

            let t = Instant::now();
            ironic
                .provision(&uuid, json!({ "target": "manage" }))
                .await
                .unwrap();
            settle(&ironic, &uuid, "manageable", t0, &console).await;
            timing(format!("phase manage: manageable after {}", secs(t)));

            // Inspection: Ironic builds its ISO from the aarch64 files,
            // inserts it through the BMC and powers the domain on.
            let t = Instant::now();
            ironic
                .provision(&uuid, json!({ "target": "inspect" }))
                .await
                .unwrap();
            let mut iso = None;
            let mut started = false;
            loop {
                let node = ironic.node(&uuid).await.unwrap();
                if iso.is_none() {
                    iso = read_arm_iso(&bmc, &sys.name, tmp.path());
                }
                let state = node["provision_state"].as_str().unwrap_or_default();
                assert!(
                    state != "inspect failed",
                    "inspection failed: {}; Ironic's log: {}; console: {}",
                    node["last_error"],
                    ironic.log_path().display(),
                    console.display()
                );
                started |= state != "manageable";
                if started && state == "manageable" && node["target_provision_state"].is_null() {
                    break;
                }
                assert!(
                    t.elapsed() < PHASE_TIMEOUT,
                    "inspection: node still {state:?} after {PHASE_TIMEOUT:?}; console: {}; Ironic's log: {}",
                    console.display(),
                    ironic.log_path().display()
                );
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            timing(format!(
                "phase inspect (virtual media boot of the aarch64 ramdisk + inspection): manageable after {}",
                secs(t)
            ));
            let inventory = ironic.inventory(&uuid).await.unwrap();
            assert_eq!(
                inventory["inventory"]["cpu"]["architecture"],
                json!("aarch64"),
                "the inventory Ironic stored: {:#}",
                inventory["inventory"]
            );
            let node = ironic.node(&uuid).await.unwrap();
            assert_eq!(node["properties"]["cpu_arch"], json!("aarch64"), "{node}");

            // Automated cleaning on the running agent (fast track).
            let t = Instant::now();
            ironic
                .provision(&uuid, json!({ "target": "provide" }))
                .await
                .unwrap();
            let node = settle(&ironic, &uuid, "available", t0, &console).await;
            timing(format!(
                "phase provide (automated cleaning): available after {}",
                secs(t)
            ));
            assert!(node["last_error"].is_null(), "{}", node["last_error"]);
            let left = run(Command::new("blkid")
                .args(["-p", "-o", "export"])
                .arg(&disk_path))
            .unwrap_or_default();
            assert!(
                !left.contains("PTTYPE"),
                "cleaning left the disk's partition table: {left}"
            );

            let t = Instant::now();
            metal3::start_deploy(
                &ironic,
                &uuid,
                &format!("{http_url}/disk.qcow2"),
                &qcow2_sha256,
                json!({
                    "meta_data": {"uuid": "arm-cd-5f3a", "name": "armvm", "hostname": "armvm"},
                    "user_data": "#cloud-config\n",
                }),
            )
            .await
            .unwrap();
            let node = settle(&ironic, &uuid, "active", t0, &console).await;
            timing(format!("phase deploy: active after {}", secs(t)));
            assert!(node["last_error"].is_null(), "{}", node["last_error"]);
            (iso, inventory)
        })
        .unwrap();

    // The ISO Ironic built for the Arm node: the aarch64 kernel and ESP,
    // not the x86_64 defaults.
    let iso = iso.expect("never saw Ironic's ISO in the Arm domain's CD-ROM drive");
    assert_eq!(
        iso.kernel_sha256.as_deref(),
        Some(arm_kernel_sha.as_str()),
        "the ISO's /vmlinuz is not the aarch64 deploy kernel; listing:\n{}",
        iso.listing
    );
    assert_eq!(
        iso.esp_sha256.as_deref(),
        Some(arm_esp_sha.as_str()),
        "the ISO's ESP is not bootloader_by_arch's aarch64 one"
    );
    for want in [
        "boot_method=vmedia".to_string(),
        format!("ipa-api-url=http://{BRIDGE_IP}:{IRONIC_PORT}"),
        "console=ttyAMA0".to_string(),
    ] {
        assert!(
            iso.grub.contains(&want),
            "{want:?} not in the ISO's grub.cfg:\n{}",
            iso.grub
        );
    }
    let inv = &inventory["inventory"];
    println!(
        "inventory cpu: {}; system: {}",
        inv["cpu"], inv["system_vendor"]
    );

    // Ironic powers the domain off, sets the disk first and powers it on:
    // the deployed aarch64 system prints its marker and config drive.
    let t = Instant::now();
    let marker = testimage::marker_line(MARKER);
    let deadline = Instant::now() + Duration::from_secs(420);
    let text = loop {
        let text = metal3::console_text(&console);
        if text.contains(&marker) && testimage::meta_data(&text).is_some() {
            break text;
        }
        assert!(
            Instant::now() < deadline,
            "the deployed system did not boot within 420 s of `active`; console: {}",
            console.display()
        );
        std::thread::sleep(Duration::from_secs(1));
    };
    timing(format!(
        "phase boot from disk: marker and config drive {} after active",
        secs(t)
    ));
    let meta: Value = serde_json::from_str(&testimage::meta_data(&text).unwrap()).unwrap();
    assert_eq!(meta["uuid"], json!("arm-cd-5f3a"), "{meta}");
    let ramdisk_boots = text.matches(RAMDISK_START).count();
    assert_eq!(
        ramdisk_boots,
        1,
        "ramdisk boots; console: {}",
        console.display()
    );
    timing(format!(
        "arm flow: enroll → active + disk boot in {} with {ramdisk_boots} ramdisk boot; whole test {}",
        secs(t0),
        secs(total)
    ));
}
