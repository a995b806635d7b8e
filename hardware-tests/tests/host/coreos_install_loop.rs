//! The `install_coreos` deploy step through the command API
//! (`deploy.execute_deploy_step`) onto a loop device: a CoreOS-like image
//! (GPT, ext4 `boot` filesystem with a BLS entry and the image's own
//! first-boot stamp, a root partition) is downloaded from the node's
//! `instance_info.image_source` and verified; the step's Ignition argument
//! wins over the config drive's `user_data`; the config drive's
//! `coreos_append_karg` is used when the step gives none; a cloud-init
//! user data is refused before the disk is touched; an image without a
//! checksum is written unverified; no image is the ramdisk form's error.

use agent_base::config::{Config, RunMode};
use agent_contents::ignition::mount::Mounted;
use agent_testkit::image_server::{Fault, ImageServer};
use hardware_tests::agentapi::AgentApi;
use hardware_tests::coreosimage::{coreos_image, BLS, STAMP};
use hardware_tests::loopdev::LoopDevice;
use serde_json::{json, Value};

const MIB: u64 = 1 << 20;

/// The CoreOS-like image served at `/fcos.raw`, and a loop device for it.
struct Fixture {
    _dir: tempfile::TempDir,
    img: std::path::PathBuf,
    sha: String,
    server: ImageServer,
    disk: LoopDevice,
}

fn fixture() -> Fixture {
    hardware_tests::require_root("the install_coreos loop-device test");
    let dir = tempfile::tempdir().unwrap();
    let (img, sha) = coreos_image(dir.path(), "boot");
    let server = ImageServer::start().unwrap();
    server.route("/fcos.raw", &img, &[], Fault::None);
    let disk = LoopDevice::new(128 * MIB).unwrap();
    Fixture {
        _dir: dir,
        img,
        sha,
        server,
        disk,
    }
}

fn step(args: Value, instance_info: Value) -> Value {
    json!({"step": {"interface": "deploy", "step": "install_coreos", "args": args},
           "node": {"uuid": "n1", "instance_info": instance_info, "properties": {}},
           "ports": []})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn install_coreos_writes_the_image_ignition_and_kernel_arguments() {
    let f = fixture();
    let (img, sha, server, disk) = (&f.img, &f.sha, &f.server, &f.disk);
    let api = AgentApi::start(Config {
        mode: RunMode::Host,
        allowed_devices: vec![disk.path.clone()],
        ..Config::default()
    })
    .await
    .unwrap();
    let from_user_data = r#"{"ignition": {"version": "3.2.0"}}"#;
    let instance_info = json!({
        "image_source": server.url("/fcos.raw"),
        "image_os_hash_algo": "sha256", "image_os_hash_value": sha,
        "configdrive": {"user_data": from_user_data,
                        "meta_data": {"coreos_append_karg": ["console=ttyS0,115200n8"]}}});

    // A cloud-init user data is refused before the disk is touched.
    let bad = step(
        json!({}),
        json!({"image_source": server.url("/fcos.raw"), "image_os_hash_algo": "sha256",
               "image_os_hash_value": sha, "configdrive": {"user_data": "#cloud-config\n"}}),
    );
    let r = api.run("deploy.execute_deploy_step", bad).await.unwrap();
    assert_eq!(r["command_status"], "FAILED", "{r}");
    assert!(
        r["command_error"]["details"]
            .as_str()
            .unwrap()
            .contains("not an Ignition config"),
        "{r}"
    );
    assert!(server.seen().is_empty(), "nothing was downloaded");

    // The step's arguments win.
    let ignition = json!({"ignition": {"version": "3.4.0"},
                          "passwd": {"users": [{"name": "core"}]}});
    let r = api
        .run(
            "deploy.execute_deploy_step",
            step(
                json!({"ignition": ignition, "append_karg": ["ip=dhcp6", "quiet"]}),
                instance_info.clone(),
            ),
        )
        .await
        .unwrap();
    assert_eq!(r["command_status"], "SUCCEEDED", "{r}");
    assert_eq!(r["command_result"]["deploy_step"]["step"], "install_coreos");
    let msg = r["command_result"]["deploy_result"]["result"]
        .as_str()
        .unwrap();
    assert!(
        msg.starts_with("install_coreos: prepare_image: image (fcos.raw) written to device"),
        "{msg}"
    );

    let boot = agent_contents::ignition::boot_partition(&disk.path)
        .unwrap()
        .unwrap();
    let read = |rel: &str| {
        let m = Mounted::new(&disk.path, boot.start, boot.len, "ext4", true).unwrap();
        let out = std::fs::read_to_string(m.path().join(rel)).unwrap();
        m.unmount().unwrap();
        out
    };
    let written: Value = serde_json::from_str(&read("ignition/config.ign")).unwrap();
    assert_eq!(written, ignition);
    assert_eq!(
        read("ignition.firstboot"),
        STAMP,
        "the image's stamp is kept"
    );
    assert_eq!(
        read("loader/entries/ostree-1.conf"),
        BLS.replace("fedora-coreos/0\n", "fedora-coreos/0 ip=dhcp6 quiet\n")
    );
    // The root partition holds the image's bytes.
    let want = std::fs::read(img).unwrap();
    let got = std::fs::read(&disk.path).unwrap();
    let root = (33 * MIB) as usize..(65 * MIB) as usize;
    assert!(got[root.clone()] == want[root], "root partition differs");

    // Without step arguments: the config drive's user data and
    // coreos_append_karg.
    let r = api
        .run("deploy.execute_deploy_step", step(json!({}), instance_info))
        .await
        .unwrap();
    assert_eq!(r["command_status"], "SUCCEEDED", "{r}");
    assert_eq!(read("ignition/config.ign"), from_user_data);
    assert!(read("loader/entries/ostree-1.conf")
        .contains("ostree=/ostree/boot.1/fedora-coreos/0 console=ttyS0,115200n8\n"));
    let uuids = api
        .run("standby.get_partition_uuids", json!({}))
        .await
        .unwrap();
    assert!(uuids["command_result"]["root uuid"].is_string(), "{uuids}");

    // No checksum: written unverified (coreos-installer's --insecure).
    let r = api
        .run(
            "deploy.execute_deploy_step",
            step(
                json!({}),
                json!({"image_source": server.url("/fcos.raw"),
                       "configdrive": {"user_data": from_user_data}}),
            ),
        )
        .await
        .unwrap();
    assert_eq!(r["command_status"], "SUCCEEDED", "{r}");
    assert_eq!(read("ignition/config.ign"), from_user_data);
    // No image at all (OpenShift's --offline call): the ramdisk form has
    // no live image to install, and says so.
    let r = api
        .run(
            "deploy.execute_deploy_step",
            step(
                json!({}),
                json!({"configdrive": {"user_data": from_user_data}}),
            ),
        )
        .await
        .unwrap();
    assert_eq!(r["command_status"], "FAILED", "{r}");
    assert_eq!(
        r["command_error"]["details"],
        agent_core::commands::coreos::NO_OFFLINE_IMAGE
    );
}

/// `coreos_copy_network`: the ramdisk's network (here a record as init
/// writes it after applying a `network_data.json` with a static bond and a
/// VLAN, plus a NIC configured by DHCP) lands as NetworkManager keyfiles in
/// the boot filesystem's `coreos-firstboot-network/`, and Debian's real
/// `nmcli --offline` accepts every one of them. Without a record the step
/// fails before anything is downloaded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn install_coreos_copies_the_ramdisks_network() {
    use agent_devices::netconf::{dhcp::Lease, network_data, record::NetRecord, NicResult};
    let f = fixture();
    let (sha, server, disk) = (&f.sha, &f.server, &f.disk);
    let dir = tempfile::tempdir().unwrap();

    let nd = json!({
        "links": [
            {"id": "nic1", "type": "phy", "ethernet_mac_address": "52:54:00:12:35:01"},
            {"id": "nic2", "type": "phy", "ethernet_mac_address": "52:54:00:12:35:02"},
            {"id": "bond0", "type": "bond", "bond_links": ["nic1", "nic2"],
             "bond_mode": "active-backup", "bond_miimon": 100},
            {"id": "vlan100", "type": "vlan", "vlan_link": "bond0", "vlan_id": 100}
        ],
        "networks": [
            {"id": "prov", "type": "ipv4", "link": "bond0", "ip_address": "10.99.0.50",
             "netmask": "255.255.255.0",
             "routes": [{"network": "0.0.0.0", "netmask": "0.0.0.0", "gateway": "10.99.0.1"}]},
            {"id": "tenant", "type": "ipv6", "link": "vlan100", "ip_address": "fd00:98::10/64"}
        ],
        "services": [{"type": "dns", "address": "10.99.0.53"}]
    });
    let nics = [
        ("eth0".to_string(), "52:54:00:12:35:01".to_string()),
        ("eth1".to_string(), "52:54:00:12:35:02".to_string()),
    ];
    let plan = network_data::plan(nd.to_string().as_bytes(), &nics).unwrap();
    let dhcp_nic = NicResult {
        name: "eth2".into(),
        mac: "52:54:00:12:35:03".into(),
        outcome: Ok(Lease {
            addr: "10.97.0.9".parse().unwrap(),
            prefix: 24,
            router: None,
            dns: vec![],
            domain: None,
            server: "10.97.0.1".parse().unwrap(),
            lease_secs: Some(600),
        }),
    };
    let record = NetRecord::from_bringup(Some(&plan), None, &[dhcp_nic]);
    let record_path = dir.path().join("network.json");

    let api = AgentApi::start(Config {
        mode: RunMode::Host,
        allowed_devices: vec![disk.path.clone()],
        network_record: Some(record_path.clone()),
        ..Config::default()
    })
    .await
    .unwrap();
    let instance_info = json!({
        "image_source": server.url("/fcos.raw"),
        "image_os_hash_algo": "sha256", "image_os_hash_value": sha,
        "configdrive": {"meta_data": {"coreos_copy_network": true}}});

    // No record yet: refused before the download.
    let r = api
        .run(
            "deploy.execute_deploy_step",
            step(json!({}), instance_info.clone()),
        )
        .await
        .unwrap();
    assert_eq!(r["command_status"], "FAILED", "{r}");
    let details = r["command_error"]["details"].as_str().unwrap();
    assert!(details.contains("no record of it at"), "{r}");
    assert!(server.seen().is_empty(), "nothing was downloaded");

    record.save(&record_path).unwrap();
    let r = api
        .run("deploy.execute_deploy_step", step(json!({}), instance_info))
        .await
        .unwrap();
    assert_eq!(r["command_status"], "SUCCEEDED", "{r}");

    let boot = agent_contents::ignition::boot_partition(&disk.path)
        .unwrap()
        .unwrap();
    let m = Mounted::new(&disk.path, boot.start, boot.len, "ext4", true).unwrap();
    let net_dir = m.path().join("coreos-firstboot-network");
    let mut files: Vec<(String, String, u32)> = std::fs::read_dir(&net_dir)
        .unwrap()
        .map(|e| {
            use std::os::unix::fs::PermissionsExt;
            let e = e.unwrap();
            let mode = e.metadata().unwrap().permissions().mode() & 0o777;
            let text = std::fs::read_to_string(e.path()).unwrap();
            (e.file_name().into_string().unwrap(), text, mode)
        })
        .collect();
    m.unmount().unwrap();
    files.sort();
    let names: Vec<&str> = files.iter().map(|f| f.0.as_str()).collect();
    assert_eq!(
        names,
        [
            "ironic-bond0.100.nmconnection",
            "ironic-bond0.nmconnection",
            "ironic-eth0.nmconnection",
            "ironic-eth1.nmconnection",
            "ironic-eth2.nmconnection"
        ],
        "one keyfile per interface"
    );
    assert!(files.iter().all(|f| f.2 == 0o600), "{files:?}");
    let text = |n: &str| &files.iter().find(|f| f.0 == n).unwrap().1;
    let bond = text("ironic-bond0.nmconnection");
    assert!(
        bond.contains("address1=10.99.0.50/24\ngateway=10.99.0.1\ndns=10.99.0.53;\n"),
        "{bond}"
    );
    assert!(text("ironic-eth0.nmconnection").contains("mac-address=52:54:00:12:35:01"));
    assert!(text("ironic-eth2.nmconnection").contains("[ipv4]\nmethod=auto\n"));
    let vlan = text("ironic-bond0.100.nmconnection");
    assert!(vlan.contains("[vlan]\nid=100\n"), "{vlan}");
    assert!(
        vlan.contains("[ipv6]\nmethod=manual\naddress1=fd00:98::10/64\n"),
        "{vlan}"
    );

    // Debian's NetworkManager reads each one (nmcli --offline checks a
    // keyfile without a daemon) and keeps what matters.
    for (name, text, _) in &files {
        use std::io::Write;
        let mut child = hardware_tests::debs::nmcli()
            .unwrap()
            .args([
                "--offline",
                "connection",
                "modify",
                "connection.autoconnect",
                "yes",
            ])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(text.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        let normalised = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "nmcli refuses {name}: {}\n{text}",
            String::from_utf8_lossy(&out.stderr)
        );
        for key in ["uuid=", "type="] {
            let line = text.lines().find(|l| l.starts_with(key)).unwrap();
            assert!(
                normalised.contains(line),
                "{name}: {line} lost:\n{normalised}"
            );
        }
    }
}
