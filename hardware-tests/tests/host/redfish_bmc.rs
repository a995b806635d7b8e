//! A real Redfish BMC on the bed (`hardware_tests::bed::redfish`):
//! sushy-tools' emulator (PyPI 2.2.0) with its libvirt driver, in front of
//! a private libvirtd (Debian's 9.0.0) that runs a bed machine (TCG, q35,
//! OVMF with its own NVRAM, a virtio disk, a NIC on a tap in the bed's
//! bridge, a CD-ROM drive) as a libvirt domain, all inside a network
//! namespace this test creates.
//!
//! 1. Over Redfish (basic auth; refused without it): the system is the
//!    domain; `Reset On` starts it (libvirt says `running`, OVMF writes to
//!    the serial console, and its PXE asks the bed's dnsmasq for an
//!    address); an ISO served on the bed's network is
//!    inserted as virtual media and `BootSourceOverrideTarget` set to `Cd`:
//!    the domain's XML has a CD-ROM whose file holds the ISO's bytes and
//!    comes first in the boot order; `ForceRestart` runs a new QEMU with
//!    that CD-ROM; `Pxe` and `Hdd` move the boot order to the NIC and the
//!    disk; `ForceOff` stops it; ejecting the media removes it.
//! 2. Real Ironic 39.0.0 (`redfish` hardware type, `redfish` power and
//!    management) enrolls the machine with `redfish_address`,
//!    `redfish_system_id` and the credentials, verifies it (`manage`), sets
//!    its boot device to `pxe` (it was `Hdd`), powers it on and off, and the domain
//!    follows each time.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use agent_testkit::image_server::{Fault, ImageServer};
use hardware_tests::bed::redfish::{self, Bmc};
use hardware_tests::bed::{Bus, Disk, Firmware, Net, NetOptions, Nic, VmSpec, BRIDGE_IP};
use hardware_tests::ironic::Ironic;
use hardware_tests::{require_root, run};
use serde_json::json;

const MAC: &str = "52:54:00:7e:d1:01";
const IRONIC_PORT: u16 = 6385;

fn wait_state(bmc: &Bmc, name: &str, want: &str, timeout: Duration) -> String {
    let deadline = Instant::now() + timeout;
    loop {
        let state = bmc.domain_state(name).unwrap();
        if state == want || Instant::now() >= deadline {
            return state;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The `<disk device='cdrom'>` element of a domain XML, if any.
fn cdrom(xml: &str) -> Option<&str> {
    let start = xml.find("device='cdrom'")?;
    let end = xml[start..].find("</disk>")? + start;
    Some(&xml[start..end])
}

/// The element (`<disk` or `<interface`) that holds `<boot order='1'/>`.
fn first_boot(xml: &str) -> Option<&str> {
    let at = xml.find("<boot order='1'/>")?;
    let disk = xml[..at].rfind("<disk ");
    let nic = xml[..at].rfind("<interface ");
    Some(match (disk, nic) {
        (Some(d), Some(n)) if n > d => "interface",
        (Some(_), _) => "disk",
        (None, Some(_)) => "interface",
        (None, None) => return None,
    })
}

fn sha256(path: &Path) -> String {
    hardware_tests::sha256_prefix(path, u64::MAX).unwrap()
}

#[test]
fn redfish_bmc_drives_a_libvirt_domain() {
    require_root("the Redfish bed (namespaces, libvirtd, QEMU)");
    let t0 = Instant::now();
    let net = Net::start(NetOptions {
        name: "redfish".into(),
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
    let tmp = tempfile::tempdir().unwrap();
    let mut bmc = Bmc::start(&net).unwrap();
    let mut spec = VmSpec::new("rfvm");
    spec.firmware = Firmware::Uefi {
        vars: tmp.path().join("rfvm_VARS.fd"),
    };
    spec.memory_mb = 512;
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
    eprintln!("libvirtd and sushy-emulator up in {:?}", t0.elapsed());
    assert_eq!(bmc.domain_state(&sys.name).unwrap(), "shut off");

    // The virtual media: a small ISO on the bed's network.
    let iso_dir = tmp.path().join("iso");
    std::fs::create_dir(&iso_dir).unwrap();
    std::fs::write(iso_dir.join("hello.txt"), "redfish virtual media\n").unwrap();
    let iso = tmp.path().join("vmedia.iso");
    run(Command::new("genisoimage")
        .args(["-quiet", "-r", "-V", "BEDVMEDIA", "-o"])
        .arg(&iso)
        .arg(&iso_dir))
    .unwrap();
    let images = net
        .ns
        .enter(|| ImageServer::start_on(format!("{BRIDGE_IP}:0").parse().unwrap()))
        .unwrap()
        .unwrap();
    images.route("/vmedia.iso", &iso, &[], Fault::None);
    let iso_url = images.url("/vmedia.iso");

    let client = bmc.client().unwrap();
    let path = sys.path();
    let vmedia = format!("{path}/VirtualMedia/Cd");

    // --- 1. Redfish ------------------------------------------------------
    net.block_on(async {
        assert_eq!(
            client
                .status_without_auth("/redfish/v1/Systems")
                .await
                .unwrap(),
            401,
            "the BMC must ask for credentials"
        );
        let systems = client.get("/redfish/v1/Systems").await.unwrap();
        assert_eq!(
            systems["Members"],
            json!([{ "@odata.id": path }]),
            "exactly the bed's domain"
        );
        let s = client.get(&path).await.unwrap();
        assert_eq!(s["PowerState"], "Off");
        assert_eq!(s["Boot"]["BootSourceOverrideMode"], "UEFI");
        assert_eq!(s["Boot"]["BootSourceOverrideTarget"], "Pxe");
    })
    .unwrap();

    net.block_on(async {
        client
            .post(
                &format!("{path}/Actions/ComputerSystem.Reset"),
                json!({ "ResetType": "On" }),
            )
            .await
            .unwrap();
    })
    .unwrap();
    assert_eq!(
        wait_state(&bmc, &sys.name, "running", Duration::from_secs(30)),
        "running"
    );
    // A real QEMU runs: OVMF writes to the console file.
    let deadline = Instant::now() + Duration::from_secs(90);
    while std::fs::metadata(&sys.console).map_or(0, |m| m.len()) == 0 {
        assert!(
            Instant::now() < deadline,
            "nothing on the console {} within 90 s",
            sys.console.display()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    // Booting from the network (the first boot device), OVMF's PXE asks
    // the bed's dnsmasq for an address: the NIC is on the bed's bridge.
    let deadline = Instant::now() + Duration::from_secs(120);
    while !net.dnsmasq_log().contains(MAC) {
        assert!(
            Instant::now() < deadline,
            "no DHCP request from {MAC} within 120 s; console: {}",
            sys.console.display()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    eprintln!(
        "powered on, PXE's DHCP request from {MAC} seen at {:?}",
        t0.elapsed()
    );

    net.block_on(async {
        assert_eq!(client.get(&path).await.unwrap()["PowerState"], "On");
        client
            .post(
                &format!("{vmedia}/Actions/VirtualMedia.InsertMedia"),
                json!({ "Image": iso_url, "Inserted": true, "WriteProtected": true }),
            )
            .await
            .unwrap();
        client
            .patch(
                &path,
                json!({ "Boot": { "BootSourceOverrideTarget": "Cd",
                                  "BootSourceOverrideEnabled": "Continuous" } }),
            )
            .await
            .unwrap();
        let m = client.get(&vmedia).await.unwrap();
        assert_eq!(m["Inserted"], true, "{m}");
        assert_eq!(m["Image"], iso_url, "{m}");
        let s = client.get(&path).await.unwrap();
        assert_eq!(s["Boot"]["BootSourceOverrideTarget"], "Cd", "{}", s["Boot"]);
    })
    .unwrap();
    assert!(
        images.seen().iter().any(|r| r.path == "/vmedia.iso"),
        "sushy-tools fetched the ISO from the bed's network"
    );
    let xml = bmc.domain_xml(&sys.name, true).unwrap();
    let cd = cdrom(&xml).unwrap_or_else(|| panic!("no CD-ROM in {xml}"));
    assert!(cd.contains("<boot order='1'/>"), "CD-ROM boots first: {cd}");
    let src = cd
        .split("<source file='")
        .nth(1)
        .and_then(|s| s.split('\'').next())
        .unwrap_or_else(|| panic!("CD-ROM without a file: {cd}"));
    assert!(
        src.starts_with(&bmc.state_dir().join("pool").display().to_string()),
        "the image is in the pool: {src}"
    );
    assert_eq!(sha256(Path::new(src)), sha256(&iso), "the CD holds the ISO");

    // A restart runs a new QEMU from the changed definition.
    net.block_on(async {
        client
            .post(
                &format!("{path}/Actions/ComputerSystem.Reset"),
                json!({ "ResetType": "ForceRestart" }),
            )
            .await
            .unwrap();
    })
    .unwrap();
    assert_eq!(
        wait_state(&bmc, &sys.name, "running", Duration::from_secs(30)),
        "running"
    );
    let live = bmc.domain_xml(&sys.name, false).unwrap();
    let live_cd = cdrom(&live).unwrap_or_else(|| panic!("no CD-ROM in the running domain: {live}"));
    assert!(
        live_cd.contains(src),
        "the running machine has the CD: {live_cd}"
    );

    for (target, element) in [("Pxe", "interface"), ("Hdd", "disk")] {
        net.block_on(async {
            client
                .patch(
                    &path,
                    json!({ "Boot": { "BootSourceOverrideTarget": target } }),
                )
                .await
                .unwrap();
            let s = client.get(&path).await.unwrap();
            assert_eq!(s["Boot"]["BootSourceOverrideTarget"], target);
        })
        .unwrap();
        let xml = bmc.domain_xml(&sys.name, true).unwrap();
        assert_eq!(first_boot(&xml), Some(element), "{target}: {xml}");
        if element == "disk" {
            let at = xml.find("<boot order='1'/>").unwrap();
            assert!(
                xml[..at]
                    .rfind("<disk ")
                    .is_some_and(|d| xml[d..at].contains("device='disk'")),
                "Hdd boots the hard disk, not the CD: {xml}"
            );
        }
    }

    net.block_on(async {
        client
            .post(
                &format!("{path}/Actions/ComputerSystem.Reset"),
                json!({ "ResetType": "ForceOff" }),
            )
            .await
            .unwrap();
        assert_eq!(client.get(&path).await.unwrap()["PowerState"], "Off");
        client
            .post(
                &format!("{vmedia}/Actions/VirtualMedia.EjectMedia"),
                json!({}),
            )
            .await
            .unwrap();
        let m = client.get(&vmedia).await.unwrap();
        assert_eq!(m["Inserted"], false, "{m}");
    })
    .unwrap();
    assert_eq!(bmc.domain_state(&sys.name).unwrap(), "shut off");
    let xml = bmc.domain_xml(&sys.name, true).unwrap();
    assert!(
        cdrom(&xml).is_none_or(|cd| !cd.contains("<source")),
        "ejected: {xml}"
    );
    eprintln!("Redfish part done at {:?}", t0.elapsed());

    // --- 2. Ironic's redfish hardware type ---------------------------------
    let ironic = Ironic::start_in(
        &net.ns,
        BRIDGE_IP,
        IRONIC_PORT,
        Some(&format!(
            "[DEFAULT]\n{}",
            hardware_tests::ironic::REDFISH_VMEDIA_INTERFACES
        )),
    )
    .unwrap();
    eprintln!("Ironic up at {:?}", t0.elapsed());
    let bmc_url = bmc.url();
    let uuid = net
        .block_on(async {
            let node = ironic
                .create_node(json!({
                    "name": "rfvm",
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
                    "deploy_interface": "direct",
                    "network_interface": "noop",
                    "properties": { "cpu_arch": "x86_64", "capabilities": "boot_mode:uefi" },
                }))
                .await
                .unwrap();
            let uuid = node["uuid"].as_str().unwrap().to_string();
            // manage: Ironic verifies the credentials and reads the power
            // state over Redfish.
            ironic
                .move_to(&uuid, "manage", "manageable", Duration::from_secs(60))
                .await
                .unwrap();
            let n = ironic.node(&uuid).await.unwrap();
            assert_eq!(n["power_state"], "power off", "{n}");
            ironic.set_boot_device(&uuid, "pxe", true).await.unwrap();
            uuid
        })
        .unwrap();
    let xml = bmc.domain_xml(&sys.name, true).unwrap();
    assert_eq!(
        first_boot(&xml),
        Some("interface"),
        "Ironic's boot device pxe: {xml}"
    );

    net.block_on(async {
        ironic.set_power(&uuid, "power on").await.unwrap();
        ironic
            .wait_power(&uuid, "power on", Duration::from_secs(60))
            .await
            .unwrap();
    })
    .unwrap();
    assert_eq!(
        wait_state(&bmc, &sys.name, "running", Duration::from_secs(10)),
        "running"
    );
    net.block_on(async {
        ironic.set_power(&uuid, "power off").await.unwrap();
        ironic
            .wait_power(&uuid, "power off", Duration::from_secs(60))
            .await
            .unwrap();
    })
    .unwrap();
    assert_eq!(
        wait_state(&bmc, &sys.name, "shut off", Duration::from_secs(10)),
        "shut off"
    );
    eprintln!(
        "Ironic powered the domain on and off; total {:?}",
        t0.elapsed()
    );
}
