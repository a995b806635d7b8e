//! The Metal3 profile end to end: unmodified Ironic 39.0.0 configured the
//! way Metal3's ironic-image configures it drives the deploy ramdisk in a
//! UEFI libvirt domain through a Redfish BMC (sushy-tools), on a bed
//! network **without any DHCP server**:
//!
//! * hardware type `redfish`, boot interfaces `redfish-virtual-media` and
//!   `ipxe` enabled (the node uses virtual media), inspect interface
//!   `agent`, deploy `direct`, network `noop`;
//! * `[deploy] fast_track = true` and `[inspector] power_off = false`, so
//!   inspection, cleaning and deploy run in **one** boot of the ramdisk;
//! * `[agent] deploy_logs_collect = always`, Ironic's default `[agent]
//!   require_tls = true`, and `[agent] api_ca_file`: Ironic injects its CA
//!   and `ironic-tls.conf` into the ISO it builds;
//! * Ironic's API over HTTPS (`[api] enable_ssl_api`) with a self-signed
//!   certificate made as Ironic's documentation shows (`openssl req -x509
//!   -newkey rsa:2048 -nodes -subj /CN=10.99.0.1 -addext
//!   subjectAltName=IP:10.99.0.1`, i.e. `CA:TRUE`);
//! * the node's `network_data` (API ≥ 1.66): an active-backup bond of the
//!   domain's two NICs with a static address, which Ironic writes to the
//!   ISO as `openstack/latest/network_data.json`.
//!
//! The domain has **512 MiB of RAM** (issue 17: the full-coverage ramdisk
//! inspects, cleans and deploys a 2 GiB qcow2 on a 512 MiB machine).
//!
//! A second disk holds data the operator protects by its serial
//! (`properties.skip_block_devices: [{"serial": "metal3-keep"}]`, issue
//! 31): a SCSI disk (`/dev/sdX`: the kernel scans the two SCSI
//! controllers in no fixed order) of the same size as the virtio one, so
//! without the protection the root-disk guess (smallest, then name) would
//! pick it. Cleaning and the deploy must leave it byte-identical, and the
//! image must land on `/dev/vda`.
//!
//! A third disk is a SAN LUN on two paths (the same 6 GiB file as two
//! shareable virtio-scsi disks with one serial and WWN): the inventory
//! Ironic stores lists it once, as the multipath device (`/dev/dm-N`), and
//! neither path; automated cleaning erases it through that device (the
//! GPT put on the file beforehand is gone).
//!
//! The flow: enroll → manage → inspect (managed, over virtual media) →
//! provide (automated cleaning, `erase_devices_metadata`) → deploy of a
//! qcow2 of 2 GiB virtual size (the test image, compressed, and 576 MiB of
//! random data: more than the RAM) with a config drive → `active`; Ironic then powers
//! the domain off, sets the boot device to disk and powers it on, and the
//! deployed system prints its marker and its config drive. The domain's
//! console (one file across boots) must show exactly one start of the
//! deploy ramdisk. Each phase's wall time is printed and kept in
//! `target/bed-logs/metal3/flow-times.txt`.
//!
//! Deliberate differences from Metal3's `ironic.conf.j2` (ironic-image):
//! one all-in-one `ironic` process serving HTTPS itself (Metal3 either
//! does the same with `IRONIC_TLS_SETUP` or puts httpd in front), `noauth`
//! without the HTTP basic auth Metal3 puts in front of it; no `ipa-insecure=1` in `[redfish] kernel_append_params`
//! (Metal3's default there; here the agent must trust Ironic through the
//! CA on the ISO), `console=ttyS0` instead of `nofb nomodeset vga=normal`;
//! grub built here as the ESP (`[DEFAULT] esp_image`) instead of Metal3's
//! `[conductor] bootloader`; `[inspector] extra_kernel_params` without
//! `ipa-inspection-collectors` and `ipa-enable-vlan-interfaces`;
//! `ramdisk_heartbeat_timeout = 10`, short callback and command timeouts
//! and short post-deploy power polling from `ci/ironic/ironic.conf`
//! (Metal3: defaults, `deploy_callback_timeout = 4800`) so a stuck flow
//! fails within minutes under TCG. Metal3's hooks set no node properties
//! (no `memory`/`cpus` hooks; the baremetal-operator reads the stored
//! inventory), so the test checks the inventory. Metal3's
//! `max_command_attempts = 30`, the erase priorities, `add_ports = all`,
//! `keep_ports = present`, the `parse-lldp` hook and `use_swift = false`
//! are kept.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use hardware_tests::bed::http_root::HttpRoot;
use hardware_tests::bed::metal3;
use hardware_tests::bed::redfish::{self, Bmc};
use hardware_tests::bed::{
    self, Bus, Disk, Firmware, MultipathDisk, Net, NetOptions, Nic, VmSpec, BRIDGE_IP,
};
use hardware_tests::ironic::Ironic;
use hardware_tests::sparse::content_sha256;
use hardware_tests::{require_root, run, testimage};
use serde_json::{json, Value};

const MACS: [&str; 2] = ["52:54:00:3a:11:01", "52:54:00:3a:11:02"];
const GUEST: &str = "10.99.0.60";
const IRONIC_PORT: u16 = 6385;
const HTTP_PORT: u16 = 8088;
const DISK_GIB: u64 = 5;
/// The serial of the disk `skip_block_devices` protects.
const KEEP_SERIAL: &str = "metal3-keep";
/// The LUN on two paths: larger than the virtio disk, so the root-disk
/// guess keeps `/dev/vda`.
const LUN_GIB: u64 = 6;
const LUN_SERIAL: &str = "metal3-lun";
const LUN_WWN: &str = "0x5000c500aa11bb22";
const MARKER: &str = "metal3-deployed-5b2c";
const RAMDISK_START: &str = "deploy ramdisk init starting";
/// What one phase may take under TCG.
const PHASE_TIMEOUT: Duration = Duration::from_secs(420);
/// The domain's RAM: issue 17's small machine.
const MEMORY_MIB: u32 = 512;
/// The qcow2's virtual size.
const IMAGE_VIRTUAL: u64 = 2 << 30;
/// Random data in the qcow2 beyond the test image: more than the domain's
/// whole RAM, so neither a RAM buffer nor the page cache can hold the image;
/// the agent must stream it. 576 MiB (RAM + 64 MiB) proves that as well as
/// `bed_small_ram`'s gigabyte (`ci/test-ramdisk-long`) at half the transfer
/// time under TCG.
const IMAGE_DATA: u64 = 576 << 20;

static TIMES: OnceLock<PathBuf> = OnceLock::new();

/// Prints a wall time and appends it to [`TIMES`] (the harness swallows a
/// passing test's output).
macro_rules! timing {
    ($($arg:tt)*) => {{
        let line = format!($($arg)*);
        println!("{line}");
        if let Some(path) = TIMES.get() {
            let mut f = std::fs::OpenOptions::new().append(true).create(true).open(path).unwrap();
            writeln!(f, "{line}").unwrap();
        }
    }};
}

fn network_data() -> Value {
    json!({
        "links": [
            {"id": "nic1", "type": "phy", "ethernet_mac_address": MACS[0], "mtu": 1500},
            {"id": "nic2", "type": "phy", "ethernet_mac_address": MACS[1]},
            {"id": "bond0", "type": "bond", "bond_links": ["nic1", "nic2"],
             "bond_mode": "active-backup", "bond_miimon": 100,
             "ethernet_mac_address": MACS[0]}
        ],
        "networks": [
            {"id": "prov", "type": "ipv4", "link": "bond0", "ip_address": GUEST,
             "netmask": "255.255.255.0",
             "routes": [{"network": "0.0.0.0", "netmask": "0.0.0.0", "gateway": BRIDGE_IP}],
             "network_id": "prov"}
        ],
        "services": [{"type": "dns", "address": BRIDGE_IP}]
    })
}

/// Ironic's certificate as its documentation makes it (`CA:TRUE`).
fn openssl_cert(dir: &Path) -> (PathBuf, PathBuf) {
    bed::vmedia_disc::openssl_cert_for(dir, "ironic", BRIDGE_IP).unwrap()
}

fn secs(t: Instant) -> String {
    format!("{:.1} s", t.elapsed().as_secs_f64())
}

/// Waits until the node settles in `state` (no target left), failing early
/// on a `* failed` state with Ironic's `last_error`; reports every state
/// change with its time since `t0`.
async fn settle(ironic: &Ironic, uuid: &str, state: &str, t0: Instant) -> Value {
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
        if current.ends_with("failed") {
            panic!(
                "node went to {current:?} waiting for {state:?}: {}; Ironic's log: {}",
                node["last_error"],
                ironic.log_path().display()
            );
        }
        if current == state && node["target_provision_state"].is_null() {
            return node;
        }
        assert!(
            start.elapsed() < PHASE_TIMEOUT,
            "node still {current:?} after {PHASE_TIMEOUT:?} waiting for {state:?}; last_error {}; Ironic's log: {}",
            node["last_error"],
            ironic.log_path().display()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[test]
fn metal3_profile_inspects_cleans_and_deploys_in_one_ramdisk_boot() {
    require_root("the Metal3 flow (namespaces, libvirtd, QEMU)");
    let total = Instant::now();
    let times = bed::logs_dir("metal3").unwrap().join("flow-times.txt");
    std::fs::write(&times, "").unwrap();
    TIMES.set(times).unwrap();
    let ramdisk = bed::ramdisk_dir().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let www = tmp.path().join("www");
    std::fs::create_dir(&www).unwrap();
    // Kept beside the state directory: Ironic reads its CA file and
    // certificate for as long as it runs.
    let (cert, key) = openssl_cert(tmp.path());

    // Ironic's http_root, served by a bed http server: the ramdisk beside
    // the ISOs Ironic publishes there, and the image to deploy.
    for f in ["deploy.kernel", "deploy.initramfs"] {
        std::fs::copy(ramdisk.join(f), www.join(f)).unwrap();
    }
    let t = Instant::now();
    let image = testimage::build(tmp.path(), MARKER).unwrap();
    let qcow2 = www.join("disk.qcow2");
    let data_sha256 = testimage::big_qcow2(&image, &qcow2, IMAGE_VIRTUAL, IMAGE_DATA).unwrap();
    let qcow2_sha256 = hardware_tests::sha256_prefix(&qcow2, u64::MAX).unwrap();
    let esp = redfish::esp_image(tmp.path()).unwrap();
    timing!("test image and ESP built in {}", secs(t));

    let net = Net::start(NetOptions::no_dhcp("metal3")).unwrap();
    let mut bmc = Bmc::start(&net).unwrap();
    let mut spec = VmSpec::new("metal3vm");
    spec.firmware = Firmware::Uefi {
        vars: tmp.path().join("metal3vm_VARS.fd"),
    };
    spec.memory_mb = MEMORY_MIB;
    spec.disks.push(Disk {
        path: tmp.path().join("disk0.img"),
        size: DISK_GIB << 30,
        bus: Bus::Virtio,
        serial: "metal3-disk0".into(),
        model: None,
    });
    // The protected disk, with a table and a filesystem signature on it.
    spec.disks.push(Disk {
        path: tmp.path().join("keep.img"),
        size: DISK_GIB << 30,
        bus: Bus::Scsi,
        serial: KEEP_SERIAL.into(),
        model: None,
    });
    std::fs::File::create(&spec.disks[1].path)
        .and_then(|f| f.set_len(DISK_GIB << 30))
        .unwrap();
    run(Command::new("sh")
        .arg("-c")
        .arg("printf 'label: gpt\nname=tenant-data\n' | sfdisk --quiet \"$0\"")
        .arg(&spec.disks[1].path))
    .unwrap();
    let kept = content_sha256(&spec.disks[1].path).unwrap();
    spec.multipath_disks.push(MultipathDisk {
        path: tmp.path().join("lun.img"),
        size: LUN_GIB << 30,
        serial: LUN_SERIAL.into(),
        wwn: LUN_WWN.into(),
        paths: 2,
    });
    std::fs::File::create(&spec.multipath_disks[0].path)
        .and_then(|f| f.set_len(LUN_GIB << 30))
        .unwrap();
    run(Command::new("sh")
        .arg("-c")
        .arg("printf 'label: gpt\nname=san-old\n' | sfdisk --quiet \"$0\"")
        .arg(&spec.multipath_disks[0].path))
    .unwrap();
    spec.nics = MACS.iter().map(|m| Nic { mac: m.to_string() }).collect();
    let lun_path = spec.multipath_disks[0].path.clone();
    let sys = bmc.define(&spec).unwrap();
    bmc.start_emulator().unwrap();
    let _http = HttpRoot::serve(&net, &www, HTTP_PORT).unwrap();

    let http_url = format!("http://{BRIDGE_IP}:{HTTP_PORT}");
    // Loaded after ci/ironic/ironic.conf and the state directory's
    // paths.conf: Metal3's settings (see the module comment for what
    // differs and why).
    let extra_conf = metal3::ironic_conf(&esp, &cert, &www, &http_url);
    let t = Instant::now();
    let ironic = Ironic::start_tls_in(
        &net.ns,
        BRIDGE_IP,
        IRONIC_PORT,
        Some(&extra_conf),
        &cert,
        &key,
    )
    .expect("starting Ironic 39.0.0 over HTTPS in the namespace");
    assert!(ironic.url.starts_with("https://"), "{}", ironic.url);
    timing!(
        "BMC, http server and Ironic (HTTPS) up in {} ({} since start)",
        secs(t),
        secs(total)
    );

    let path = sys.path();
    let bmc_url = bmc.url();
    let t0 = Instant::now();
    let iso_seen = net
        .block_on(async {
            let node = ironic
                .create_node(json!({
                    "name": "metal3vm",
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
                    "network_data": network_data(),
                    "automated_clean": true,
                    "properties": { "cpu_arch": "x86_64", "capabilities": "boot_mode:uefi",
                                    "skip_block_devices": [{"serial": KEEP_SERIAL}] },
                }))
                .await
                .unwrap();
            let uuid = node["uuid"].as_str().unwrap().to_string();
            assert_eq!(node["network_data"], network_data(), "{node}");
            // As Metal3's baremetal-operator does: a port for the boot MAC.
            ironic
                .create_port(&uuid, MACS[0])
                .await
                .unwrap();

            let t = Instant::now();
            ironic
                .provision(&uuid, json!({ "target": "manage" }))
                .await
                .unwrap();
            settle(&ironic, &uuid, "manageable", t0).await;
            timing!("phase manage: manageable after {}", secs(t));

            // Inspection: Ironic builds its ISO, inserts it through the BMC
            // and powers the domain on.
            let t = Instant::now();
            ironic
                .provision(&uuid, json!({ "target": "inspect" }))
                .await
                .unwrap();
            let mut iso_seen = None;
            // The request returns before the node leaves `manageable`.
            let mut started = false;
            let node = loop {
                let node = ironic.node(&uuid).await.unwrap();
                if iso_seen.is_none() {
                    iso_seen = metal3::read_inserted_iso(&bmc, &sys.name);
                }
                let state = node["provision_state"].as_str().unwrap_or_default();
                if state == "inspect failed" {
                    panic!("inspection failed: {}; Ironic's log: {}", node["last_error"], ironic.log_path().display());
                }
                started |= state != "manageable";
                if started && state == "manageable" && node["target_provision_state"].is_null() {
                    break node;
                }
                assert!(
                    t.elapsed() < PHASE_TIMEOUT,
                    "inspection: node still {state:?} after {PHASE_TIMEOUT:?}; console: {}; Ironic's log: {}",
                    sys.console.display(),
                    ironic.log_path().display()
                );
                tokio::time::sleep(Duration::from_millis(500)).await;
            };
            timing!("phase inspect (virtual media boot + inspection): manageable after {}", secs(t));
            // Metal3's hooks (`$default_hooks,parse-lldp`) set no
            // properties from the inventory: the baremetal-operator reads
            // the stored inventory itself.
            let stored = ironic.inventory(&uuid).await.unwrap();
            let inv = &stored["inventory"];
            assert_eq!(inv["memory"]["physical_mb"], json!(MEMORY_MIB), "{}", inv["memory"]);
            assert!(
                inv["disks"]
                    .as_array()
                    .is_some_and(|d| d.iter().any(|d| d["size"] == json!(DISK_GIB << 30))),
                "{}",
                inv["disks"]
            );
            assert!(
                inv["disks"].as_array().is_some_and(|d| d
                    .iter()
                    .any(|d| d["name"].as_str().is_some_and(|n| n.starts_with("/dev/sd"))
                        && d["serial"] == json!(KEEP_SERIAL))),
                "the protected disk is not in the inventory as a SCSI disk: {}",
                inv["disks"]
            );
            let lun: Vec<&Value> = inv["disks"]
                .as_array()
                .map(|d| d.iter().filter(|d| d["serial"] == json!(LUN_SERIAL)).collect())
                .unwrap_or_default();
            assert!(
                lun.len() == 1
                    && lun[0]["name"].as_str().is_some_and(|n| n.starts_with("/dev/dm-"))
                    && lun[0]["wwn"] == json!(LUN_WWN)
                    && lun[0]["size"] == json!(LUN_GIB << 30),
                "the LUN must be listed once, as its multipath device: {}",
                inv["disks"]
            );
            let ifaces = inv["interfaces"].clone();
            eprintln!("inspected interfaces: {ifaces}");
            assert!(
                ifaces.to_string().contains(GUEST),
                "the inventory lacks the bond's static address: {ifaces}"
            );
            // Both bond members with their own MACs (not the bond's).
            for (name, mac) in [("eth0", MACS[0]), ("eth1", MACS[1])] {
                assert!(
                    ifaces.as_array().is_some_and(|l| l
                        .iter()
                        .any(|i| i["name"] == json!(name) && i["mac_address"] == json!(mac))),
                    "no {name} with {mac} in the inventory: {ifaces}"
                );
            }
            // `add_ports = all`: Ironic added the second NIC's port.
            let ports = ironic.port_macs(&uuid).await.unwrap();
            assert_eq!(ports, MACS, "the node's ports after inspection");
            assert_eq!(
                stored["inventory"]["boot"]["current_boot_mode"],
                json!("uefi")
            );
            // The ramdisk's boot phases, kept by Ironic as plugin data.
            let phases = stored["plugin_data"]["boot_phases"].clone();
            eprintln!("boot phases in Ironic's plugin data: {phases}");
            let names: Vec<&str> = phases
                .as_array()
                .map(|a| a.iter().filter_map(|p| p["phase"].as_str()).collect())
                .unwrap_or_default();
            for p in ["init", "modules", "vmedia", "network", "inspection"] {
                assert!(names.contains(&p), "phase {p} not in plugin_data.boot_phases: {phases}");
            }
            assert_eq!(node["power_state"], json!("power on"), "fast track keeps it on");

            // Automated cleaning on the running agent (fast track).
            let t = Instant::now();
            ironic
                .provision(&uuid, json!({ "target": "provide" }))
                .await
                .unwrap();
            let node = settle(&ironic, &uuid, "available", t0).await;
            timing!("phase provide (automated cleaning): available after {}", secs(t));
            assert!(node["last_error"].is_null(), "{}", node["last_error"]);
            let left = run(Command::new("blkid")
                .args(["-p", "-o", "export"])
                .arg(&lun_path))
            .unwrap_or_default();
            assert!(
                !left.contains("PTTYPE"),
                "cleaning left the LUN's partition table: {left}"
            );

            // Deploy, as the baremetal-operator asks for it.
            let t = Instant::now();
            metal3::start_deploy(
                &ironic,
                &uuid,
                &format!("{http_url}/disk.qcow2"),
                &qcow2_sha256,
                json!({
                    "meta_data": {"uuid": "metal3-cd", "name": "metal3vm", "hostname": "metal3vm"},
                    "user_data": "#cloud-config\n",
                    "network_data": network_data(),
                }),
            )
            .await
            .unwrap();
            let node = settle(&ironic, &uuid, "active", t0).await;
            timing!("phase deploy: active after {}", secs(t));
            assert!(node["last_error"].is_null(), "{}", node["last_error"]);
            iso_seen
        })
        .unwrap();

    // What Ironic put on its ISO.
    let metal3::IsoSeen {
        listing,
        grub,
        network_data: nd,
    } = iso_seen.expect("never saw Ironic's ISO in the CD-ROM drive");
    for f in [
        "/etc/ironic-python-agent/ironic.crt",
        "/etc/ironic-python-agent.d/ironic-tls.conf",
        "/openstack/latest/network_data.json",
    ] {
        assert!(listing.contains(f), "{f} not on Ironic's ISO:\n{listing}");
    }
    for want in [
        "boot_method=vmedia".to_string(),
        format!("ipa-api-url=https://{BRIDGE_IP}:{IRONIC_PORT}"),
        "ipa-agent-token=".to_string(),
    ] {
        assert!(
            grub.contains(&want),
            "{want:?} not in the ISO's grub.cfg:\n{grub}"
        );
    }
    assert!(!grub.contains("ipa-insecure"), "{grub}");
    let nd: Value = serde_json::from_str(&nd).unwrap_or_else(|e| panic!("{e}: {nd}"));
    assert_eq!(nd["networks"][0]["ip_address"], json!(GUEST), "{nd}");

    // Ironic powers the domain off, sets the disk first and powers it on:
    // the deployed system prints its marker and config drive, then halts.
    let t = Instant::now();
    let marker = testimage::marker_line(MARKER);
    let deadline = Instant::now() + Duration::from_secs(300);
    let text = loop {
        let text = metal3::console_text(&sys.console);
        if text.contains(&marker) && testimage::meta_data(&text).is_some() {
            break text;
        }
        assert!(
            Instant::now() < deadline,
            "the deployed system did not boot within 300 s of `active`; console: {}",
            sys.console.display()
        );
        std::thread::sleep(Duration::from_secs(1));
    };
    timing!(
        "phase boot from disk: marker and config drive {} after active",
        secs(t)
    );
    let meta: Value = serde_json::from_str(&testimage::meta_data(&text).unwrap()).unwrap();
    assert_eq!(meta["uuid"], json!("metal3-cd"), "{meta}");
    // The random data reached the disk, byte for byte.
    let written =
        hardware_tests::sha256_range(&spec.disks[0].path, testimage::BIG_DATA_OFFSET, IMAGE_DATA)
            .unwrap();
    assert_eq!(
        written, data_sha256,
        "the disk's bytes where the image's random data goes"
    );
    // The protected disk went through inspection, cleaning and the deploy
    // untouched.
    assert_eq!(
        content_sha256(&spec.disks[1].path).unwrap(),
        kept,
        "the disk protected by skip_block_devices changed"
    );

    // One ramdisk boot for inspection, cleaning and deploy.
    let ramdisk_boots = text.matches(RAMDISK_START).count();
    let ctx = format!("console: {}", sys.console.display());
    assert_eq!(ramdisk_boots, 1, "ramdisk boots; {ctx}");
    assert!(
        !text.contains("Out of memory") && !text.contains("oom-kill"),
        "the ramdisk ran out of memory in {MEMORY_MIB} MiB; {ctx}"
    );
    for line in [
        "bond0 (bond active-backup of eth0+eth1",
        "10.99.0.60/24 route 0.0.0.0/0 via 10.99.0.1 from network_data.json",
        "/etc/ironic-python-agent.d/ironic-tls.conf",
    ] {
        assert!(text.contains(line), "console lacks {line:?}; {ctx}");
    }
    assert!(
        !text.contains("insecure"),
        "the agent must trust the ISO's CA; {ctx}"
    );
    let dnsmasq = net.dnsmasq_log();
    assert!(
        !dnsmasq.contains("DHCPOFFER") && !dnsmasq.contains("DHCPACK"),
        "the bed offered DHCP: {dnsmasq}"
    );
    let logs = ironic.deploy_logs();
    eprintln!("deploy logs Ironic collected: {logs:?}");
    // `deploy_logs_collect = always`: the agent's logs after inspection,
    // cleaning and deploy.
    for what in ["_inspect_", "_cleaning_"] {
        assert!(
            logs.iter().any(|l| l.to_string_lossy().contains(what)),
            "no {what} logs: {logs:?}"
        );
    }
    assert_eq!(logs.len(), 3, "{logs:?}");
    // The logs after the deploy hold all boot phases, the agent's too.
    let deploy_log = logs
        .iter()
        .find(|l| {
            let n = l.to_string_lossy();
            !n.contains("_inspect_") && !n.contains("_cleaning_")
        })
        .unwrap();
    let phases = run(Command::new("tar")
        .args(["-xzOf"])
        .arg(deploy_log)
        .arg("boot_phases"))
    .unwrap();
    for p in ["init", "network", "inspection", "lookup", "first_heartbeat"] {
        assert!(
            phases.lines().any(|l| l.starts_with(&format!("{p} "))),
            "phase {p} not in the deploy logs' boot_phases:\n{phases}"
        );
    }
    // What operators open the bundle for (#34 item 4), read in the ramdisk
    // of a UEFI machine with a multipath LUN: every part is there, and
    // the native ones describe this machine.
    let listing = run(Command::new("tar").arg("-tzf").arg(deploy_log)).unwrap();
    for part in [
        "agent.log",
        "dmesg",
        "ip_addr",
        "ip_route",
        "lsblk",
        "df",
        "mounts",
        "mdstat",
        "cmdline",
        "boot_phases",
        "inventory.json",
        "partitions",
        "multipath",
        "efibootmgr",
        "udev/vda.json",
    ] {
        assert!(
            listing.lines().any(|l| l == part),
            "{part} not in the deploy logs:\n{listing}"
        );
    }
    let part = |name: &str| {
        run(Command::new("tar")
            .args(["-xzOf"])
            .arg(deploy_log)
            .arg(name))
        .unwrap()
    };
    let tables = part("partitions");
    assert!(tables.contains("/dev/vda"), "partitions:\n{tables}");
    let multipath = part("multipath");
    assert!(multipath.contains("dm-"), "multipath:\n{multipath}");
    let entries = part("efibootmgr");
    assert!(entries.contains("Boot"), "efibootmgr:\n{entries}");
    timing!(
        "metal3 flow: enroll → active + disk boot in {} with {ramdisk_boots} ramdisk boot; whole test {}",
        secs(t0),
        secs(total)
    );
}
