//! Ironic's virtual-media path on a network **without DHCP**, on the QEMU
//! bed: the ramdisk boots with `boot_method=vmedia` and a CD in a SATA
//! CD/DVD drive carrying what Ironic's `prepare_deploy_iso` injects (built
//! with genisoimage and the flags Ironic uses, `-r -J -l -V config-2`): the
//! conductor's CA certificate at `etc/ironic-python-agent/ironic.crt`,
//! `etc/ironic-python-agent.d/ironic-tls.conf` naming it, and
//! `openstack/latest/network_data.json` with an active-backup bond of the
//! VM's two NICs carrying a static address, routes and DNS, and a VLAN on
//! top of the bond (created in the guest; this machine's kernel has no
//! 8021q, so nothing answers on it).
//!
//! The conductor (the stand-in, serving HTTPS with a certificate made as
//! Ironic's documentation shows: `openssl req -x509 -newkey … -nodes -subj
//! /CN=…`, i.e. `CA:TRUE`) must see a lookup and heartbeats from the
//! bond's static address, trusted through the CA file from the disc (no
//! `ipa-insecure`), with no DHCP server on the network at all, and a manual
//! clean (`erase_devices_metadata`) must finish. Init records the four
//! interfaces for `coreos_copy_network`.
//!
//! Beside the virtual CD, media an earlier tenant could leave in the
//! machine: a USB stick holding an ISO labelled `config-2` (another static
//! address, a configuration file turning TLS verification off) and a USB
//! disk with a FAT32 filesystem labelled `ir-vfd-dev` whose root-directory
//! cluster chain loops (its `parameters.txt` would point the agent at
//! another conductor). The configuration must come from the CD, the
//! floppy must be refused with a warning, reading the media once the
//! devices are there must take under a second (the agent's own timing),
//! and the first heartbeat must come within 5 s of a second boot of the
//! same machine without the tenant's media.
//!
//! The kernel is handed to QEMU directly; booting the ISO Ironic builds
//! itself, through a Redfish BMC, is the Metal3 suite's part.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use agent::testconductor::{Settings, TestConductor};
use hardware_tests::bed::{
    self, vmedia_disc, Boot, Bus, Disk, Net, NetOptions, Nic, Vm, VmSpec, BRIDGE_IP,
};
use hardware_tests::require_root;

const MACS: [&str; 2] = ["52:54:00:12:35:01", "52:54:00:12:35:02"];
const GUEST: &str = "10.99.0.50";

fn network_data() -> String {
    serde_json::json!({
        "links": [
            {"id": "nic1", "type": "phy", "ethernet_mac_address": MACS[0], "mtu": 1500},
            {"id": "nic2", "type": "phy", "ethernet_mac_address": MACS[1].to_uppercase()},
            {"id": "bond0", "type": "bond", "bond_links": ["nic1", "nic2"],
             "bond_mode": "active-backup", "bond_miimon": 100,
             "ethernet_mac_address": MACS[0]},
            {"id": "vlan100", "type": "vlan", "vlan_link": "bond0", "vlan_id": 100,
             "vlan_mac_address": MACS[0]}
        ],
        "networks": [
            {"id": "prov", "type": "ipv4", "link": "bond0", "ip_address": GUEST,
             "netmask": "255.255.255.0",
             "routes": [{"network": "0.0.0.0", "netmask": "0.0.0.0", "gateway": BRIDGE_IP}],
             "network_id": "prov"},
            {"id": "tenant", "type": "ipv4", "link": "vlan100", "ip_address": "10.98.0.10",
             "netmask": "255.255.255.0", "routes": [], "network_id": "tenant"}
        ],
        "services": [{"type": "dns", "address": "10.99.0.53"}]
    })
    .to_string()
}

/// A tenant's USB stick: an ISO labelled `config-2` with another address
/// and a configuration file that would turn TLS verification off.
fn tenant_stick(dir: &Path) -> PathBuf {
    let tree = dir.join("stick");
    std::fs::create_dir_all(tree.join("openstack/latest")).unwrap();
    std::fs::create_dir_all(tree.join("etc/ironic-python-agent.d")).unwrap();
    let nd = serde_json::json!({
        "links": [{"id": "nic1", "type": "phy", "ethernet_mac_address": MACS[0]}],
        "networks": [{"id": "evil", "type": "ipv4", "link": "nic1", "ip_address": "10.99.0.66",
                      "netmask": "255.255.255.0", "routes": [], "network_id": "evil"}],
        "services": []
    });
    std::fs::write(
        tree.join("openstack/latest/network_data.json"),
        nd.to_string(),
    )
    .unwrap();
    std::fs::write(
        tree.join("etc/ironic-python-agent.d/tenant.conf"),
        "[DEFAULT]\ninsecure = true\n",
    )
    .unwrap();
    let iso = dir.join("stick.iso");
    hardware_tests::run(
        Command::new("genisoimage")
            .args(["-quiet", "-r", "-J", "-l", "-V", "config-2", "-o"])
            .arg(&iso)
            .arg(&tree),
    )
    .unwrap();
    iso
}

/// A 40 MiB FAT32 filesystem labelled `ir-vfd-dev` with a `parameters.txt`,
/// then its root directory's cluster chain made to loop onto itself.
fn looping_floppy(dir: &Path) -> PathBuf {
    let img = dir.join("floppy.img");
    std::fs::File::create(&img)
        .unwrap()
        .set_len(40 << 20)
        .unwrap();
    hardware_tests::run(
        Command::new("mkfs.vfat")
            .args(["-F", "32", "-n", "ir-vfd-dev"])
            .arg(&img),
    )
    .unwrap();
    let params = dir.join("parameters.txt");
    std::fs::write(&params, "ipa-api-url=https://10.99.0.77:6385\n").unwrap();
    hardware_tests::run(
        Command::new("mcopy")
            .arg("-i")
            .arg(&img)
            .arg(&params)
            .arg("::/"),
    )
    .unwrap();
    let mut b = std::fs::read(&img).unwrap();
    let u16_at = |b: &[u8], o: usize| u64::from(u16::from_le_bytes([b[o], b[o + 1]]));
    let u32_at =
        |b: &[u8], o: usize| u64::from(u32::from_le_bytes(b[o..o + 4].try_into().unwrap()));
    let (sector, reserved, fats) = (u16_at(&b, 11), u16_at(&b, 14), u64::from(b[16]));
    let (fat_sectors, root) = (u32_at(&b, 36), u32_at(&b, 44));
    for k in 0..fats {
        let entry = ((reserved + k * fat_sectors) * sector + root * 4) as usize;
        b[entry..entry + 4].copy_from_slice(&(root as u32).to_le_bytes());
    }
    std::fs::write(&img, b).unwrap();
    img
}

#[test]
fn vmedia_static_bond_without_dhcp_and_the_isos_ca() {
    require_root("the QEMU virtual-media test");
    let ramdisk = bed::ramdisk_dir().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let (cert, key) = vmedia_disc::openssl_cert(tmp.path()).unwrap();
    let network_data = [(
        "openstack/latest/network_data.json",
        network_data().into_bytes(),
    )];
    let iso = vmedia_disc::disc(tmp.path(), &cert, &network_data).unwrap();

    let net = Net::start(NetOptions::no_dhcp("vmedia")).unwrap();
    let mut spec = VmSpec::new("vm");
    spec.nics = MACS.iter().map(|m| Nic { mac: m.to_string() }).collect();
    spec.disks.push(Disk {
        path: tmp.path().join("disk.img"),
        size: 64 << 20,
        bus: Bus::Virtio,
        serial: "VMEDIA01".into(),
        model: None,
    });
    for (path, serial) in [
        (tenant_stick(tmp.path()), "TENANTSTICK"),
        (looping_floppy(tmp.path()), "TENANTFLOPPY"),
    ] {
        spec.disks.push(Disk {
            size: std::fs::metadata(&path).unwrap().len(),
            path,
            bus: Bus::Usb,
            serial: serial.into(),
            model: None,
        });
    }
    spec.cdrom = Some(iso);
    spec.boot = Boot::Direct {
        kernel: ramdisk.join("deploy.kernel"),
        initrd: ramdisk.join("deploy.initramfs"),
        append: format!(
            "console=ttyS0 quiet panic=-1 boot_method=vmedia ipa-api-url=https://{BRIDGE_IP}:6385 \
             agent.dhcp-timeout=4"
        ),
    };
    let settings = Settings {
        tls: Some(vmedia_disc::server_tls(&cert, &key).unwrap()),
        ..Settings::default()
    };
    let (cleaned, node, console, transcript, heartbeat_at) = boot(&net, &spec, settings.clone());
    let dnsmasq = net.dnsmasq_log();
    // The same machine without the tenant's media, for the time they cost.
    let mut plain = spec.clone();
    plain.disks.truncate(1);
    let (_, _, plain_console, _, plain_heartbeat) = boot(&net, &plain, settings);
    println!("without the tenant's media: first heartbeat {plain_heartbeat:?} after starting QEMU");
    let ctx = format!(
        "\n--- transcript ---\n{}\n--- console ({}) ---\n{console}",
        transcript.join("\n"),
        net.logs.display()
    );
    assert!(heartbeat_at.is_some(), "no accepted heartbeat{ctx}");
    cleaned.unwrap_or_else(|e| panic!("the clean did not finish: {e:#}{ctx}"));
    assert!(
        !dnsmasq.contains("DHCPOFFER") && !dnsmasq.contains("DHCPACK"),
        "the bed offered DHCP: {dnsmasq}"
    );
    let callback = format!("callback_url=https://{GUEST}:9999 ");
    assert!(
        transcript
            .iter()
            .filter(|l| l.contains("POST /v1/heartbeat"))
            .all(|l| l.contains(&callback)),
        "every heartbeat must advertise the bond's static address{ctx}"
    );
    assert_eq!(node.provision_state, "manageable");
    for line in [
        "vmedia: candidates: sr0 (CD/DVD drive), sda (USB disk",
        "vmedia: boot ISO on /dev/sr0 (CD/DVD drive)",
        "/etc/ironic-python-agent.d/ironic-tls.conf",
        "bond0 (bond active-backup of eth0+eth1, link \"bond0\") 10.99.0.50/24 route 0.0.0.0/0 via 10.99.0.1 from network_data.json",
        "bond0.100 (VLAN 100 on bond0, link \"vlan100\") 10.98.0.10/24 from network_data.json",
        // What coreos_copy_network would carry into a CoreOS image: the two
        // NICs, the bond and the VLAN.
        "net: 4 interface(s) recorded in /run/ironic-agent/network.json",
        "phase network done",
    ] {
        assert!(console.contains(line), "console lacks {line:?}{ctx}");
    }
    assert!(
        !console.contains("DHCP offer") && !console.contains("not applied"),
        "something waited for DHCP or failed to apply{ctx}"
    );
    assert!(
        !console.contains("insecure"),
        "the conductor must be trusted through the CA file, not ipa-insecure{ctx}"
    );
    // The tenant's floppy: refused with a warning, its parameters unused.
    assert!(
        console
            .lines()
            .any(|l| l.contains("labelled ir-vfd-dev but") && l.contains("not read as the floppy")),
        "the looping FAT32 floppy was not refused with a warning{ctx}"
    );
    assert!(
        !console.contains("parameters from the ir-vfd-dev floppy")
            && !console.contains("10.99.0.77"),
        "the tenant's floppy parameters were taken{ctx}"
    );
    assert!(
        !console.contains("10.99.0.66"),
        "the tenant stick's address was applied{ctx}"
    );
    let read = console
        .lines()
        .find_map(|l| l.split("vmedia: media waited for ").nth(1))
        .and_then(|rest| rest.split("read in ").nth(1))
        .and_then(|t| t.trim().trim_end_matches(" s").parse::<f64>().ok())
        .unwrap_or_else(|| panic!("no media timing on the console{ctx}"));
    println!("virtual media with the tenant's stick and looping floppy read in {read:.2} s");
    assert!(read < 1.0, "reading the media took {read} s{ctx}");
    // What the media could cost is the agent's own work after the kernel's
    // modules are in: the media scan, the network, lookup. The guest's clock
    // measures it, so a busy host slowing the whole TCG guest (module
    // loading takes 2-6 s here) does not count against the media.
    assert!(
        plain_heartbeat.is_some(),
        "no heartbeat without the tenant's media"
    );
    let span = |console: &str, which: &str| {
        after_modules(console)
            .unwrap_or_else(|| panic!("no boot phases on the console {which}{ctx}"))
    };
    let (with, without) = (
        span(&console, "with the tenant's media"),
        span(&plain_console, "without the tenant's media"),
    );
    println!("from modules loaded to the first heartbeat: {with:.2} s with the tenant's media, {without:.2} s without");
    assert!(
        with <= without + 3.0,
        "the tenant's media cost {:.2} s between the modules and the first heartbeat ({with:.2} s against {without:.2} s){ctx}",
        with - without
    );
}

/// Seconds from the `modules` phase to `first_heartbeat` on the agent's
/// "boot phases" console line, by the guest's own clock.
fn after_modules(console: &str) -> Option<f64> {
    let line = console
        .lines()
        .find_map(|l| l.split("boot phases ").nth(1))?;
    let at = |phase: &str| {
        line.split(", ")
            .find_map(|p| {
                p.rsplit(": ")
                    .next()?
                    .strip_prefix(phase)?
                    .strip_prefix(' ')
            })
            .and_then(|t| t.trim().trim_end_matches(" s").parse::<f64>().ok())
    };
    Some(at("first_heartbeat")? - at("modules")?)
}

#[test]
fn after_modules_reads_the_boot_phases_line() {
    let console = "[  11.546]  INFO boot phases (seconds since the kernel started): init 4.240 s, \
                   mounts 4.278 s, modules 10.402 s, vmedia 10.553 s, first_heartbeat 11.545 s\r\n";
    let span = after_modules(console).unwrap();
    assert!((span - 1.143).abs() < 1e-9, "{span}");
    assert_eq!(after_modules("init: phase modules done"), None);
}

/// One boot of `spec` against a stand-in conductor with a manual clean:
/// (the clean's end, the node, the console, the conductor's transcript,
/// when the first heartbeat was accepted).
#[allow(clippy::type_complexity)]
fn boot(
    net: &Net,
    spec: &VmSpec,
    settings: Settings,
) -> (
    anyhow::Result<agent::testconductor::Node>,
    agent::testconductor::Node,
    String,
    Vec<String>,
    Option<Duration>,
) {
    net.block_on(async {
        let conductor =
            TestConductor::start_on(settings, format!("{BRIDGE_IP}:6385").parse().unwrap())
                .await
                .unwrap();
        assert!(conductor.url().starts_with("https://"));
        let uuid = conductor.enroll(&MACS);
        // A manual clean: Ironic answers lookups only for nodes in an
        // operation that waits for the agent.
        let erase = serde_json::json!(
            {"interface": "deploy", "step": "erase_devices_metadata", "args": {}});
        conductor.start_clean(&uuid, Some(vec![erase])).unwrap();
        let vm = Vm::start(net, spec).unwrap();
        let mut heartbeat_at = None;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(240);
        while heartbeat_at.is_none() && tokio::time::Instant::now() < deadline {
            if conductor
                .transcript()
                .iter()
                .any(|l| l.contains("POST /v1/heartbeat") && l.ends_with("-> 202"))
            {
                heartbeat_at = Some(vm.elapsed());
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        println!(
            "virtual media, static bond: first heartbeat {heartbeat_at:?} after starting QEMU"
        );
        let cleaned = conductor
            .wait_for_state(&uuid, "manageable", Duration::from_secs(120))
            .await;
        println!("clean done {:?} after starting QEMU", vm.elapsed());
        (
            cleaned,
            conductor.node(&uuid).unwrap(),
            vm.console(),
            conductor.transcript(),
            heartbeat_at,
        )
    })
    .unwrap()
}
