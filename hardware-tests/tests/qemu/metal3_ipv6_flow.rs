//! The Metal3 profile on an **IPv6-only** provisioning network (issue 34,
//! item 11; Metal3's baremetal-operator #1664 is where IPA users hit
//! failures on such networks): unmodified Ironic 39.0.0, configured as in
//! `metal3_flow.rs` (redfish virtual media, fast track, HTTPS API with a
//! self-signed certificate, `[agent] api_ca_file`; see that file's module
//! comment for the deliberate differences from Metal3), drives the deploy
//! ramdisk in a UEFI libvirt domain through inspection, automated cleaning
//! and a deploy, and the bed network carries **no IPv4 at all**:
//!
//! * the bridge has only `fd99::1/64`; there is no dnsmasq (no DHCP, no
//!   router advertisements), and ebtables drops every IPv4 and ARP frame
//!   entering, leaving or crossing the bridge
//!   ([`hardware_tests::bed::NetOptions::ipv6_only`]);
//! * Ironic's API listens on `https://[fd99::1]:6385` (its certificate
//!   names `IP:fd99::1`; `ci/ironic/start.sh` with an IPv6 `IRONIC_HOST`
//!   sets `my_ip`, `my_ipv6`, `[api] host_ip` and the bracketed
//!   `endpoint_override`), so the ISO's `ipa-api-url` is a bracketed
//!   literal;
//! * the BMC (sushy-emulator) listens on `http://[fd99::1]:8000` and the
//!   image server (`[deploy] http_url`, which serves the ISOs, the ramdisk
//!   and the image) on `http://[fd99::1]:8088`;
//! * the node's `network_data` has one `ipv6` network with a static
//!   address, `fd99::60`, netmask `ffff:ffff:ffff:ffff::` and a default
//!   route (`::`/`::`) as OpenStack writes them, and Ironic writes it to the
//!   ISO;
//! * the bed's LLDP switch announces an IPv6 management address
//!   (`fd99::2`).
//!
//! The machine's only disk is a SAN LUN on two paths (issue 50: a SAN root
//! disk under UEFI; the same file as two shareable virtio-scsi disks with
//! one serial and WWN): the agent deploys onto its multipath device, writes
//! its UEFI boot entry there, and OVMF boots that entry (`ironic1`) from the
//! LUN; the LUN's file holds the deployed GPT. One NIC; 1 GiB of RAM.
//! Checked from Ironic's own
//! records: the node ends `active`; while the agent runs (fast track,
//! after cleaning) `driver_internal_info.agent_url` is
//! `https://[fd99::60]:9999` and the certificate Ironic keeps for it (`agent_verify_ca`)
//! names `fd99::60` in its subjectAltName (`openssl x509 -text`); the
//! inventory lists the NIC with `ipv6_address` `fd99::60` and no IPv4
//! address, with the raw LLDP management-address TLV, and Ironic's
//! `parse-lldp` hook stored `switch_mgmt_addresses: [fd99::2]`; automated
//! cleaning ran (its logs were collected); the image server saw the
//! ramdisk download the image from `fd99::60`; the deployed system boots
//! and prints its marker and config drive. The console shows the static
//! IPv6 configuration from `network_data.json` and no DHCPv4. IPv4 and ARP
//! frames a machine on the bed sends are dropped and counted; the count,
//! read at every poll of the deploy until Ironic's `tear_down_agent`, must
//! be zero: the ramdisk sent no IPv4 at all from its boot to the end of
//! the deploy. The count for the whole test (the firmware and the deployed
//! system included) is printed with every rule's counter; the bridge's own
//! IGMP reports (the namespace's kernel joins groups though br0 has no
//! IPv4 address) are dropped too, on the OUTPUT chain, and not counted.

use std::net::IpAddr;
use std::process::Command;
use std::time::{Duration, Instant};

use agent_devices::lldp::tlv::management_address_tlv;
use hardware_tests::bed::http_root::HttpRoot;
use hardware_tests::bed::lldp::Switch;
use hardware_tests::bed::redfish::{self, Bmc};
use hardware_tests::bed::{self, metal3, Firmware, MultipathDisk, Net, NetOptions, Nic, VmSpec};
use hardware_tests::bed::{vmedia_disc, BRIDGE_IP6};
use hardware_tests::ironic::{settled_in, Ironic, Watch, POLL_SETTLED};
use hardware_tests::{require_root, run, testimage};
use serde_json::{json, Value};

const MAC: &str = "52:54:00:3a:16:01";
const GUEST: &str = "fd99::60";
const SWITCH_MGMT: &str = "fd99::2";
/// Whether `client` is the guest's static address. (The bed's dnsmasq also
/// advertises fd99::/64 for SLAAC, but the static address wins the source
/// selection towards fd99::1; a connection opened while the static address
/// was still tentative left from the link-local one, and the agent's HTTP
/// client kept it for every heartbeat: a CI run once saw exactly that,
/// before the agent waited for duplicate address detection.)
fn guest_address(client: &str) -> bool {
    client == GUEST
}
const CHASSIS: [u8; 6] = [0x52, 0x54, 0x00, 0x99, 0x06, 0x01];
const SWITCH_PORT: &str = "Ethernet6/1";
const SWITCH_NAME: &str = "leaf-v6";
const IRONIC_PORT: u16 = 6385;
const HTTP_PORT: u16 = 8088;
const DISK_GIB: u64 = 5;
const MARKER: &str = "metal3-ipv6-deployed-7e41";
const RAMDISK_START: &str = "deploy ramdisk init starting";
/// What one phase may take under TCG.
const PHASE_TIMEOUT: Duration = Duration::from_secs(420);

/// `network_data` with IPv6 only, as OpenStack (and Ironic's API schema)
/// writes a static IPv6 network.
fn network_data() -> Value {
    json!({
        "links": [
            {"id": "nic1", "type": "phy", "ethernet_mac_address": MAC, "mtu": 1500}
        ],
        "networks": [
            {"id": "prov", "type": "ipv6", "link": "nic1", "ip_address": GUEST,
             "netmask": "ffff:ffff:ffff:ffff::",
             "routes": [{"network": "::", "netmask": "::", "gateway": BRIDGE_IP6}],
             "network_id": "prov"}
        ],
        "services": [{"type": "dns", "address": BRIDGE_IP6}]
    })
}

fn secs(t: Instant) -> String {
    format!("{:.1} s", t.elapsed().as_secs_f64())
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// The IP addresses in a PEM certificate's subjectAltName, read with
/// `openssl x509 -text` (it prints IPv6 ones in full, upper case).
fn san_ips(pem: &str, dir: &std::path::Path) -> Vec<IpAddr> {
    let file = dir.join("agent-cert.pem");
    std::fs::write(&file, pem).unwrap();
    let text = run(Command::new("openssl")
        .args(["x509", "-noout", "-ext", "subjectAltName", "-in"])
        .arg(&file))
    .unwrap();
    text.split([',', '\n'])
        .filter_map(|p| p.trim().strip_prefix("IP Address:"))
        .filter_map(|a| a.trim().parse().ok())
        .collect()
}

#[test]
fn ipv6_only_network_inspects_cleans_and_deploys_over_virtual_media() {
    require_root("the IPv6-only Metal3 flow (namespaces, libvirtd, QEMU)");
    let total = Instant::now();
    let ramdisk = bed::ramdisk_dir().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let www = tmp.path().join("www");
    std::fs::create_dir(&www).unwrap();
    let (cert, key) = vmedia_disc::openssl_cert_for(tmp.path(), "ironic", BRIDGE_IP6).unwrap();
    for f in ["deploy.kernel", "deploy.initramfs"] {
        std::fs::copy(ramdisk.join(f), www.join(f)).unwrap();
    }
    let image = testimage::build(tmp.path(), MARKER).unwrap();
    let qcow2 = www.join("disk.qcow2");
    testimage::to_qcow2(&image.raw, &qcow2, true).unwrap();
    let qcow2_sha256 = hardware_tests::sha256_prefix(&qcow2, u64::MAX).unwrap();
    let esp = redfish::esp_image(tmp.path()).unwrap();

    let net = Net::start(NetOptions::ipv6_only("metal3v6")).unwrap();
    let _switch = Switch::start_with(
        &net,
        CHASSIS,
        SWITCH_PORT,
        SWITCH_NAME,
        &[management_address_tlv(ip(SWITCH_MGMT))],
    )
    .unwrap();
    let mut bmc = Bmc::start(&net).unwrap();
    let mut spec = VmSpec::new("metal3v6vm");
    spec.firmware = Firmware::Uefi {
        vars: tmp.path().join("metal3v6vm_VARS.fd"),
    };
    let lun = tmp.path().join("lun.img");
    spec.multipath_disks.push(MultipathDisk {
        path: lun.clone(),
        size: DISK_GIB << 30,
        serial: "metal3v6-lun".into(),
        wwn: "0x5000c500aa11bb66".into(),
        paths: 2,
    });
    spec.nics = vec![Nic { mac: MAC.into() }];
    let sys = bmc.define(&spec).unwrap();
    bmc.start_emulator_on(BRIDGE_IP6).unwrap();
    let bmc_url = bmc.url();
    assert_eq!(bmc_url, format!("http://[{BRIDGE_IP6}]:{}", redfish::PORT));
    let http = HttpRoot::serve_on(&net, BRIDGE_IP6, &www, HTTP_PORT).unwrap();
    let http_url = http.url().to_string();
    assert_eq!(http_url, format!("http://[{BRIDGE_IP6}]:{HTTP_PORT}"));

    let extra_conf = metal3::ironic_conf(&esp, &cert, &www, &http_url);
    let ironic = Ironic::start_tls_in(
        &net.ns,
        BRIDGE_IP6,
        IRONIC_PORT,
        Some(&extra_conf),
        &cert,
        &key,
    )
    .expect("starting Ironic 39.0.0 over HTTPS on the bed's IPv6 address");
    let api_url = format!("https://[{BRIDGE_IP6}]:{IRONIC_PORT}");
    assert_eq!(ironic.url, api_url);
    println!("bed, BMC, image server and Ironic up in {}", secs(total));

    let t0 = Instant::now();
    let (iso_seen, agent_info, agent_cert) = net
        .block_on(async {
            let node = ironic
                .create_node(json!({
                    "name": "metal3v6vm",
                    "driver": "redfish",
                    "driver_info": {
                        "redfish_address": bmc_url,
                        "redfish_system_id": sys.path(),
                        "redfish_username": redfish::USER,
                        "redfish_password": redfish::PASSWORD,
                        "deploy_kernel": format!("{http_url}/deploy.kernel"),
                        "deploy_ramdisk": format!("{http_url}/deploy.initramfs"),
                    },
                    "boot_interface": "redfish-virtual-media",
                    "inspect_interface": "agent",
                    "deploy_interface": "direct",
                    "network_interface": "noop",
                    "network_data": network_data(),
                    "automated_clean": true,
                    "properties": {"cpu_arch": "x86_64", "capabilities": "boot_mode:uefi"},
                }))
                .await
                .unwrap();
            let uuid = node["uuid"].as_str().unwrap().to_string();
            assert_eq!(node["network_data"], network_data(), "{node}");
            ironic.create_port(&uuid, MAC).await.unwrap();
            ironic
                .move_to(&uuid, "manage", "manageable", PHASE_TIMEOUT)
                .await
                .unwrap();

            // Inspection over virtual media; the ISO is read while inserted.
            let t = Instant::now();
            ironic
                .provision(&uuid, json!({"target": "inspect"}))
                .await
                .unwrap();
            let mut iso_seen = None;
            loop {
                let node = ironic.node(&uuid).await.unwrap();
                if iso_seen.is_none() {
                    iso_seen = metal3::read_inserted_iso(&bmc, &sys.name);
                }
                let state = node["provision_state"].as_str().unwrap_or_default();
                assert_ne!(state, "inspect failed", "{}", node["last_error"]);
                if state == "inspect wait" && iso_seen.is_some() {
                    break;
                }
                assert!(t.elapsed() < PHASE_TIMEOUT, "inspection: still {state:?}");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            let node = ironic
                .wait_for(&uuid, "manageable", PHASE_TIMEOUT)
                .await
                .unwrap();
            println!("inspection: manageable after {}", secs(t));
            assert_eq!(
                node["power_state"],
                json!("power on"),
                "fast track keeps it on"
            );
            let stored = ironic.inventory(&uuid).await.unwrap();
            check_inventory(&stored);

            // Automated cleaning on the running agent (fast track).
            let t = Instant::now();
            let node = ironic
                .move_to(&uuid, "provide", "available", PHASE_TIMEOUT)
                .await
                .unwrap();
            println!("automated cleaning: available after {}", secs(t));
            assert!(node["last_error"].is_null(), "{}", node["last_error"]);
            // The agent still runs (fast track): what Ironic calls it by,
            // and the agent's certificate (Ironic keeps the PEM it got in a
            // file under `[agent] certificates_path` and stores that path).
            let agent_info = ironic.stored_driver_internal_info(&uuid).unwrap();
            let ca_file = agent_info["agent_verify_ca"].as_str().unwrap_or_default();
            let agent_cert = std::fs::read_to_string(ca_file)
                .unwrap_or_else(|e| panic!("agent_verify_ca {ca_file:?}: {e}"));

            let t = Instant::now();
            metal3::start_deploy(
                &ironic,
                &uuid,
                &format!("{http_url}/disk.qcow2"),
                &qcow2_sha256,
                json!({
                    "meta_data": {"uuid": "metal3v6-cd", "name": "metal3v6vm"},
                    "network_data": network_data(),
                }),
            )
            .await
            .unwrap();
            let mut frames = AgentFrames {
                net: &net,
                dropped: None,
            };
            let node = ironic
                .poll_node(
                    &uuid,
                    POLL_SETTLED,
                    PHASE_TIMEOUT,
                    &mut frames,
                    settled_in("active"),
                )
                .await
                .unwrap();
            println!("deploy: active after {}", secs(t));
            let dropped = frames
                .dropped
                .expect("never saw the deploy while the agent ran");
            println!("IPv4/ARP frames dropped while the agent ran: {dropped}");
            assert_eq!(
                dropped,
                0,
                "IPv4 or ARP on the IPv6-only bed while the ramdisk ran:\n{}",
                net.ipv4_drop_rules().unwrap_or_default()
            );
            assert!(node["last_error"].is_null(), "{}", node["last_error"]);
            (iso_seen, agent_info, agent_cert)
        })
        .unwrap();

    // What the conductor stored about the agent: a bracketed callback URL
    // and a certificate for the agent's IPv6 address.
    eprintln!("driver_internal_info while the agent ran: {agent_info}");
    assert_eq!(
        agent_info["agent_url"],
        json!(format!("https://[{GUEST}]:9999")),
        "{agent_info}"
    );
    assert_eq!(
        san_ips(&agent_cert, tmp.path()),
        [ip(GUEST)],
        "the agent's certificate's subjectAltName: {agent_cert}"
    );

    // What Ironic put on its ISO: a bracketed API URL, the IPv6 network.
    let iso = iso_seen.expect("never saw Ironic's ISO in the CD-ROM drive");
    assert!(
        iso.grub.contains(&format!("ipa-api-url={api_url}")),
        "{}",
        iso.grub
    );
    assert!(!iso.grub.contains("ipa-insecure"), "{}", iso.grub);
    let nd: Value = serde_json::from_str(&iso.network_data).unwrap();
    assert_eq!(nd["networks"][0]["type"], json!("ipv6"), "{nd}");
    assert_eq!(nd["networks"][0]["ip_address"], json!(GUEST), "{nd}");

    // The deployed system boots from its disk.
    let t = Instant::now();
    let marker = testimage::marker_line(MARKER);
    let text = loop {
        let text = metal3::console_text(&sys.console);
        if text.contains(&marker) && testimage::meta_data(&text).is_some() {
            break text;
        }
        assert!(
            t.elapsed() < Duration::from_secs(300),
            "the deployed system did not boot within 300 s of `active`; console: {}",
            sys.console.display()
        );
        std::thread::sleep(Duration::from_secs(1));
    };
    println!("boot from disk: marker {} after active", secs(t));
    // Through the agent's UEFI entry, from the LUN the agent wrote (the
    // last entry OVMF started: the first was the virtual media's).
    let entry = text.lines().rfind(|l| l.contains("BdsDxe: starting Boot"));
    assert!(
        entry.is_some_and(|e| e.contains("\"ironic1\"")),
        "OVMF did not start the agent's boot entry: {entry:?}; console: {}",
        sys.console.display()
    );
    assert!(
        text.contains("multipath: /dev/dm-0 (mpatha) assembled from"),
        "the ramdisk assembled no multipath device; console: {}",
        sys.console.display()
    );
    let table = run(Command::new("sfdisk").arg("--dump").arg(&lun)).unwrap_or_default();
    assert!(
        table.contains("label: gpt"),
        "the LUN holds no deployed GPT: {table}"
    );
    let meta: Value = serde_json::from_str(&testimage::meta_data(&text).unwrap()).unwrap();
    assert_eq!(meta["uuid"], json!("metal3v6-cd"), "{meta}");

    // The ramdisk's network: static IPv6 from network_data.json, nothing else.
    let ctx = format!("console: {}", sys.console.display());
    assert_eq!(
        text.matches(RAMDISK_START).count(),
        1,
        "ramdisk boots; {ctx}"
    );
    let line = format!("{GUEST}/64 route ::/0 via {BRIDGE_IP6} from network_data.json");
    assert!(text.contains(&line), "console lacks {line:?}; {ctx}");
    assert!(
        !text.contains("DHCPv4"),
        "the ramdisk planned DHCPv4; {ctx}"
    );
    let requests = http.requests();
    assert!(
        requests
            .iter()
            .any(|r| guest_address(&r.client) && r.path == "/disk.qcow2" && r.status == 200),
        "the image was not downloaded from {GUEST}: {requests:?}"
    );
    let logs = ironic.deploy_logs();
    for what in ["_inspect_", "_cleaning_"] {
        assert!(
            logs.iter().any(|l| l.to_string_lossy().contains(what)),
            "no {what} logs: {logs:?}"
        );
    }
    let ironic_log =
        String::from_utf8_lossy(&std::fs::read(ironic.log_path()).unwrap()).into_owned();
    // Ironic's access log: `<client> - POST /v1/heartbeat/<node> - 202`.
    if !ironic_log.lines().any(|l| {
        l.split(" - POST /v1/heartbeat/")
            .next()
            .is_some_and(|head| head.rsplit(' ').next().is_some_and(guest_address))
    }) {
        let heartbeats: Vec<&str> = ironic_log
            .lines()
            .filter(|l| l.contains("/v1/heartbeat/"))
            .take(5)
            .collect();
        let guest = ironic_log.lines().filter(|l| l.contains(GUEST)).count();
        panic!(
            "no heartbeat from {GUEST} in Ironic's log {} ({} bytes, {guest} lines name {GUEST}); \
             its first heartbeat requests:\n{}",
            ironic.log_path().display(),
            ironic_log.len(),
            heartbeats.join("\n")
        );
    }
    // After the ramdisk: the firmware and the deployed system, not ours.
    println!(
        "IPv4/ARP frames dropped in the whole test: {}\n{}",
        net.ipv4_frames_dropped().unwrap(),
        net.ipv4_drop_rules().unwrap_or_default()
    );
    println!(
        "IPv6-only metal3 flow: enroll → active + disk boot in {}; whole test {}",
        secs(t0),
        secs(total)
    );
}

/// Reads the bed's IPv4 drop counter at every poll of the deploy while the
/// ramdisk still runs (until Ironic's `tear_down_agent` powers it off).
struct AgentFrames<'n> {
    net: &'n Net,
    /// The last count read while the agent ran.
    dropped: Option<u64>,
}

impl Watch for AgentFrames<'_> {
    async fn seen(&mut self, _: &Ironic, node: &Value) {
        let step = node["deploy_step"]["step"].as_str().unwrap_or_default();
        let agent_runs = node["provision_state"] != json!("active")
            && ![
                "tear_down_agent",
                "switch_to_tenant_network",
                "boot_instance",
            ]
            .contains(&step);
        if agent_runs {
            self.dropped = Some(self.net.ipv4_frames_dropped().unwrap());
        }
    }
}

/// The inventory and plugin data inspection stored: the NIC with its IPv6
/// address and no IPv4 one, and the switch's IPv6 management address in
/// the raw LLDP TLVs and in what `parse-lldp` made of them.
fn check_inventory(stored: &Value) {
    let nic = hardware_tests::bed::ironic_flow::stored_nic(stored, MAC);
    eprintln!("inspected NIC: {nic}");
    assert_eq!(nic["ipv6_address"], json!(GUEST), "{nic}");
    assert!(nic["ipv4_address"].is_null(), "an IPv4 address: {nic}");
    let mgmt = management_address_tlv(ip(SWITCH_MGMT));
    let raw = json!([mgmt.0, hardware_tests::hex(&mgmt.1)]);
    let lldp = nic["lldp"].as_array().cloned().unwrap_or_default();
    assert!(lldp.contains(&raw), "no {raw} in the NIC's LLDP: {nic}");
    let name = nic["name"].as_str().unwrap_or_default();
    let parsed = &stored["plugin_data"]["parsed_lldp"][name];
    eprintln!("Ironic's parsed LLDP: {parsed}");
    assert_eq!(parsed["switch_port_id"], json!(SWITCH_PORT), "{parsed}");
    let addrs: Vec<IpAddr> = parsed["switch_mgmt_addresses"]
        .as_array()
        .map(|a| a.iter().filter_map(|v| v.as_str()?.parse().ok()).collect())
        .unwrap_or_default();
    assert_eq!(addrs, [ip(SWITCH_MGMT)], "{parsed}");
}
