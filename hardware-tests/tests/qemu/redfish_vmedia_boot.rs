//! Ironic's `redfish-virtual-media` boot on the bed's Redfish BMC
//! (`hardware_tests::bed::redfish`: sushy-tools + a private libvirtd): real
//! Ironic 39.0.0 builds its UEFI boot ISO (its grub configuration with the
//! ramdisk's kernel parameters, an ESP made here with grub-mkimage), serves
//! it from its `http_root` on the bed's network, inserts it through the
//! BMC, sets the boot device to CD and powers the domain on; OVMF boots the
//! ISO and the kernel starts.
//!
//! The ramdisk given to Ironic is Debian's kernel with the test image's
//! initramfs (`testimage::initramfs`, which prints a marker line), not the
//! deploy agent: this proves the BMC side of the Metal3-style flow without
//! building the agent. Ironic is taken into managed inspection (it boots the
//! ramdisk and waits in `inspect wait`), the ISO's grub configuration is
//! checked for the agent's parameters (`ipa-inspection-callback-url`, `boot_method=vmedia`,
//! `ipa-agent-token`), the marker appears on the domain's console, then the
//! inspection is aborted: Ironic powers the domain off and ejects the ISO.

use std::process::Command;
use std::time::{Duration, Instant};

use hardware_tests::bed::http_root::HttpRoot;
use hardware_tests::bed::redfish::{self, Bmc};
use hardware_tests::bed::{Bus, Disk, Firmware, Net, NetOptions, Nic, VmSpec, BRIDGE_IP};
use hardware_tests::ironic::Ironic;
use hardware_tests::testimage::{self, initramfs, Inputs};
use hardware_tests::{require_root, run};
use serde_json::json;

const MAC: &str = "52:54:00:7e:d1:02";
const IRONIC_PORT: u16 = 6385;
const HTTP_PORT: u16 = 8088;
const MARKER: &str = "redfish-vmedia-4c1e";

#[test]
fn ironic_boots_a_virtual_media_iso_through_the_bmc() {
    require_root("the Redfish bed (namespaces, libvirtd, QEMU)");
    let t0 = Instant::now();
    let tmp = tempfile::tempdir().unwrap();
    let www = tmp.path().join("www");
    std::fs::create_dir(&www).unwrap();

    // The "ramdisk": Debian's kernel and the test image's initramfs.
    let inputs = Inputs::fetch().unwrap();
    std::fs::copy(&inputs.kernel.image, www.join("deploy.kernel")).unwrap();
    std::fs::write(
        www.join("deploy.initramfs"),
        initramfs::build(&inputs.kernel, &inputs.busybox, MARKER).unwrap(),
    )
    .unwrap();
    let esp = redfish::esp_image(tmp.path()).unwrap();

    let net = Net::start(NetOptions {
        name: "rfvmedia".into(),
        hosts: Vec::new(),
        ramdisk: None,
        kernel_args: String::new(),
        dhcp: true,
        ipxe_script_url: None,
        secure_boot_chain: false,
        ipv4: true,
        ironic_tftp: None,
    })
    .unwrap();
    let mut bmc = Bmc::start(&net).unwrap();
    let mut spec = VmSpec::new("vmediavm");
    spec.firmware = Firmware::Uefi {
        vars: tmp.path().join("vmediavm_VARS.fd"),
    };
    spec.memory_mb = 1024;
    spec.disks.push(Disk {
        path: tmp.path().join("disk0.img"),
        size: 64 << 20,
        bus: Bus::Virtio,
        serial: "rf-disk0".into(),
        model: None,
    });
    spec.nics.push(Nic { mac: MAC.into() });
    let sys = bmc.define(&spec).unwrap();
    bmc.start_emulator().unwrap();
    // Ironic's http_root, with the kernel and initramfs beside the ISOs it
    // publishes there (Python's http.server from the BMC's venv).
    let _http = HttpRoot::serve(&net, &www, HTTP_PORT).unwrap();

    let http_url = format!("http://{BRIDGE_IP}:{HTTP_PORT}");
    let extra_conf = format!(
        "[DEFAULT]\n\
         {redfish}\
         esp_image = {esp}\n\
         [deploy]\n\
         http_root = {www}\n\
         http_url = {http_url}\n\
         [redfish]\n\
         use_swift = false\n\
         kernel_append_params = console=ttyS0\n",
        redfish = hardware_tests::ironic::REDFISH_VMEDIA_INTERFACES,
        esp = esp.display(),
        www = www.display(),
    );
    let ironic = Ironic::start_in(&net.ns, BRIDGE_IP, IRONIC_PORT, Some(&extra_conf)).unwrap();
    eprintln!("BMC and Ironic up at {:?}", t0.elapsed());

    let path = sys.path();
    let bmc_url = bmc.url();
    let uuid = net
        .block_on(async {
            let node = ironic
                .create_node(json!({
                    "name": "vmediavm",
                    "driver": "redfish",
                    "driver_info": {
                        "redfish_address": bmc_url,
                        "redfish_system_id": path,
                        "redfish_username": redfish::USER,
                        "redfish_password": redfish::PASSWORD,
                        "deploy_kernel": format!("{http_url}/deploy.kernel"),
                        "deploy_ramdisk": format!("{http_url}/deploy.initramfs"),
                    },
                    "boot_interface": "redfish-virtual-media",
                    "power_interface": "redfish",
                    "management_interface": "redfish",
                    "inspect_interface": "agent",
                    "deploy_interface": "direct",
                    "network_interface": "noop",
                    "properties": { "cpu_arch": "x86_64", "capabilities": "boot_mode:uefi" },
                }))
                .await
                .unwrap();
            let uuid = node["uuid"].as_str().unwrap().to_string();
            ironic
                .move_to(&uuid, "manage", "manageable", Duration::from_secs(60))
                .await
                .unwrap();
            // Managed inspection: Ironic boots the ramdisk by virtual media.
            ironic
                .provision(&uuid, json!({ "target": "inspect" }))
                .await
                .unwrap();
            ironic
                .wait_for_any_target(&uuid, "inspect wait", Duration::from_secs(120))
                .await
                .unwrap();
            uuid
        })
        .unwrap();
    eprintln!("inspect wait at {:?}", t0.elapsed());

    // The domain runs from Ironic's ISO, inserted through the BMC.
    assert_eq!(bmc.domain_state(&sys.name).unwrap(), "running");
    let xml = bmc.domain_xml(&sys.name, false).unwrap();
    let cd_at = xml
        .find("device='cdrom'")
        .unwrap_or_else(|| panic!("no CD-ROM: {xml}"));
    let cd = &xml[cd_at..cd_at + xml[cd_at..].find("</disk>").unwrap()];
    assert!(cd.contains("<boot order='1'/>"), "CD first: {cd}");
    let iso = cd
        .split("<source file='")
        .nth(1)
        .and_then(|s| s.split('\'').next())
        .unwrap_or_else(|| panic!("CD-ROM without a file: {cd}"))
        .to_string();
    let grub_cfg = run(Command::new("isoinfo")
        .args(["-R", "-x", "/EFI/BOOT/grub.cfg", "-i"])
        .arg(&iso))
    .unwrap();
    for want in [
        format!(
            "ipa-inspection-callback-url=http://{BRIDGE_IP}:{IRONIC_PORT}/v1/continue_inspection"
        ),
        "boot_method=vmedia".to_string(),
        "ipa-agent-token=".to_string(),
        "console=ttyS0".to_string(),
    ] {
        assert!(
            grub_cfg.contains(&want),
            "{want:?} not in the ISO's grub.cfg:\n{grub_cfg}"
        );
    }

    // OVMF boots the CD: grub, the kernel, the initramfs's marker.
    let marker = testimage::marker_line(MARKER);
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        // Not UTF-8 throughout (firmware and grub write escape sequences).
        let console =
            String::from_utf8_lossy(&std::fs::read(&sys.console).unwrap_or_default()).into_owned();
        if console.contains(&marker) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the ISO's kernel did not start within 300 s; console: {}",
            sys.console.display()
        );
        std::thread::sleep(Duration::from_secs(1));
    }
    eprintln!("ramdisk booted from virtual media at {:?}", t0.elapsed());

    net.block_on(async {
        ironic
            .provision(&uuid, json!({ "target": "abort" }))
            .await
            .unwrap();
        ironic
            .wait_for_any_target(&uuid, "inspect failed", Duration::from_secs(120))
            .await
            .unwrap();
        ironic
            .wait_power(&uuid, "power off", Duration::from_secs(60))
            .await
            .unwrap();
    })
    .unwrap();
    assert_eq!(bmc.domain_state(&sys.name).unwrap(), "shut off");
    // Ironic ejects its ISO after powering off.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let xml = bmc.domain_xml(&sys.name, true).unwrap();
        let inserted = xml.find("device='cdrom'").is_some_and(|at| {
            let end = at + xml[at..].find("</disk>").unwrap_or(xml.len() - at);
            xml[at..end].contains("<source")
        });
        if !inserted {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "Ironic did not eject its ISO within 60 s: {xml}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    eprintln!("aborted, powered off, ejected; total {:?}", t0.elapsed());
}
