//! `ci/demo --bmc …` (the own-server demo, `hardware_tests::own_server`)
//! run as an operator runs it, the `demo` binary itself, against the bed
//! playing the operator's lab:
//!
//! * "the operator's BMC": sushy-tools in a network namespace of its own,
//!   at a routed address (10.97.0.10, behind a veth link 10.98.0.0/30 from
//!   the bed's namespace; not the bed's usual 10.99.0.1), over HTTPS with a
//!   self-signed certificate and HTTP basic auth;
//! * "the server": a UEFI libvirt domain on the bed's bridge, with two
//!   disks of different serials (a 5 GiB virtio disk, the agent's choice,
//!   and a 6 GiB SCSI disk carrying a partition table that must survive),
//!   booting from its disk before the demo;
//! * "the operator's machine": the bed's namespace, where the demo runs
//!   (`ip netns exec`) with `--http-address 10.99.0.1`; no DHCP on the
//!   bed, the agent gets a static address from `--network-data`.
//!
//! In order: a wrong password, an untrusted certificate (no `--bmc-ca`),
//! a BMC address without a route, another image in the virtual CD, and an
//! `--http-address` the BMC has no route to (10.96.0.1) each end
//! the demo with their message and fix; Ctrl-C (SIGINT) once the BMC
//! read Ironic's ISO ends it with the BMC put back; `--inspect-only` inspects by
//! virtual media and lists both disks with their serials and the disk it
//! would write, then again booted by PXE (`--boot pxe`: the demo's own
//! dnsmasq answers the server's MAC alone, iPXE chains to Ironic); without `--confirm-disk` the demo inspects and stops with
//! the serial to confirm; with `--confirm-disk` it cleans and deploys the
//! test image, and the domain boots it. After every run that reached the
//! BMC, the BMC is as before: no media in the CD drive, the same boot
//! override, and the domain powered off (unless deployed). Each run's
//! output is kept in `target/bed-logs/ownsrv/demo-<name>.log`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use hardware_tests::bed::http_root::HttpRoot;
use hardware_tests::bed::redfish::{self, Bmc, Listen};
use hardware_tests::bed::{Bus, Disk, Firmware, Net, NetOptions, Nic, VmSpec};
use hardware_tests::netns::NetNs;
use hardware_tests::own_server::bmc::{BmcClient, Snapshot};
use hardware_tests::own_server::options::Options;
use hardware_tests::sparse::content_sha256;
use hardware_tests::{require_root, run, testimage};
use serde_json::json;

const MAC: &str = "52:54:00:35:00:01";
const GUEST: &str = "10.99.0.61";
/// The BMC's routed address, in its own namespace.
const BMC_IP: &str = "10.97.0.10";
const BMC_PORT: u16 = 8443;
/// An address of the operator's machine the BMC has no route to.
const UNROUTED: &str = "10.96.0.1";
const SERIAL_A: &str = "own-disk-a";
const SERIAL_B: &str = "own-disk-b";
const MARKER: &str = "own-server-3d1f";

/// One run of the demo binary in `ns`: whether it succeeded and its
/// output. With `interrupt`, SIGINT once its output shows that text
/// (`timeout` passes the signal on to the demo).
fn demo(
    ns: &str,
    logs: &Path,
    name: &str,
    args: &[String],
    interrupt: Option<&str>,
) -> (bool, String) {
    let t = Instant::now();
    let log = logs.join(format!("demo-{name}.log"));
    let out = std::fs::File::create(&log).unwrap();
    // SIGTERM after 15 min: the demo puts the BMC back, then exits.
    let mut child = Command::new("timeout")
        .args(["900", "ip", "netns", "exec", ns, env!("CARGO_BIN_EXE_demo")])
        .args(args)
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .spawn()
        .unwrap();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        let text = || std::fs::read_to_string(&log).unwrap_or_default();
        if let Some(when) = interrupt.filter(|w| text().contains(w)) {
            let pid = nix::unistd::Pid::from_raw(child.id() as i32);
            nix::sys::signal::kill(pid, nix::sys::signal::SIGINT).unwrap();
            eprintln!("   SIGINT after {when:?}");
            break child.wait().unwrap();
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    eprintln!(
        "== demo {name}: {status} after {:.1} s ({})",
        t.elapsed().as_secs_f64(),
        log.display()
    );
    // How its Ironic was stopped when that was not plain (stop.sh's
    // warnings and errors, an Ironic that outlived it): the evidence if
    // the next demo finds the port taken.
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let unusual = |l: &&str| {
        l.contains("still held by")
            || (l.starts_with("ironic/stop.sh:")
                && !l.contains("sending TERM to process group")
                && !l.ends_with(": stopped"))
    };
    for l in text.lines().filter(unusual) {
        eprintln!("   {l}");
    }
    (
        status.success(),
        std::fs::read_to_string(&log).unwrap_or_default(),
    )
}

fn must_say(output: &str, wants: &[&str], what: &str) {
    for w in wants {
        assert!(
            output.contains(w),
            "{what}: no {w:?} in the demo's output:\n{output}"
        );
    }
}

/// A self-signed certificate for the BMC's address.
fn bmc_cert(dir: &Path) -> (PathBuf, PathBuf) {
    hardware_tests::bed::vmedia_disc::openssl_cert_for(dir, "bmc", BMC_IP).unwrap()
}

/// What the demo must leave as it found it.
struct Before<'a> {
    net: &'a Net,
    bmc: &'a Bmc<'a>,
    domain: String,
    client: BmcClient,
    cd: String,
    state: Snapshot,
}

impl Before<'_> {
    /// The BMC as the demo must leave it: nothing in the CD drive
    /// (libvirt's view and Redfish's), the boot override as before, the
    /// power state as before unless `deployed`.
    fn assert_clean(&self, when: &str, deployed: bool) {
        // sushy-tools removes the drive on eject; an empty drive is as good.
        let xml = self.bmc.domain_xml(&self.domain, false).unwrap();
        if let Some(at) = xml.find("device='cdrom'") {
            let drive = &xml[at..at + xml[at..].find("</disk>").unwrap()];
            assert!(
                !drive.contains("<source"),
                "{when}: media left in the CD drive: {drive}"
            );
        }
        let (now, inserted) = self
            .net
            .block_on(async {
                (
                    self.client.snapshot().await,
                    self.client.inserted(&self.cd).await,
                )
            })
            .unwrap();
        let now = now.unwrap();
        assert_eq!(
            inserted.unwrap(),
            None,
            "{when}: Redfish shows media inserted"
        );
        let before = &self.state;
        assert_eq!(
            (&now.target, &now.enabled, &now.mode),
            (&before.target, &before.enabled, &before.mode),
            "{when}: the boot override"
        );
        if !deployed {
            assert_eq!(now.power, before.power, "{when}: the power state");
            assert_eq!(
                self.bmc.domain_state(&self.domain).unwrap(),
                "shut off",
                "{when}"
            );
        }
    }
}

#[test]
fn own_server_demo_checks_inspects_confirms_deploys_and_leaves_the_bmc_clean() {
    require_root("the own-server demo on the bed (namespaces, libvirtd, QEMU)");
    let total = Instant::now();
    let tmp = tempfile::tempdir().unwrap();
    let net = Net::start(NetOptions::no_dhcp("ownsrv")).unwrap();
    // The BMC's namespace, routed from the bed's: the BMC reaches the
    // bridge (10.99.0.0/24) and nothing else of the operator's machine.
    let bmc_ns = NetNs::new("ownbmc").unwrap();
    net.ns.veth("obmc0", "obmc1").unwrap();
    net.ns
        .ip(&["link", "set", "obmc1", "netns", &bmc_ns.name])
        .unwrap();
    net.ns
        .ip(&["addr", "add", "10.98.0.1/30", "dev", "obmc0"])
        .unwrap();
    bmc_ns
        .ip(&["addr", "add", "10.98.0.2/30", "dev", "obmc1"])
        .unwrap();
    bmc_ns.ip(&["link", "set", "obmc1", "up"]).unwrap();
    bmc_ns
        .ip(&["addr", "add", &format!("{BMC_IP}/32"), "dev", "lo"])
        .unwrap();
    net.ns
        .ip(&["route", "add", &format!("{BMC_IP}/32"), "via", "10.98.0.2"])
        .unwrap();
    bmc_ns
        .ip(&["route", "add", "10.99.0.0/24", "via", "10.98.0.1"])
        .unwrap();
    // (On loopback: this kernel has no dummy interfaces.)
    net.ns
        .ip(&["addr", "add", &format!("{UNROUTED}/32"), "dev", "lo"])
        .unwrap();

    // The test image builds meanwhile (both take a while).
    let building = std::thread::spawn({
        let dir = tmp.path().to_path_buf();
        move || testimage::build(&dir, MARKER)
    });
    let mut bmc = Bmc::start(&net).unwrap();
    let mut spec = VmSpec::new("ownsrv");
    spec.firmware = Firmware::Uefi {
        vars: tmp.path().join("ownsrv_VARS.fd"),
    };
    spec.boot = hardware_tests::bed::Boot::Disk;
    spec.disks.push(Disk {
        path: tmp.path().join("a.img"),
        size: 5 << 30,
        bus: Bus::Virtio,
        serial: SERIAL_A.into(),
        model: None,
    });
    spec.disks.push(Disk {
        path: tmp.path().join("b.img"),
        size: 6 << 30,
        bus: Bus::Scsi,
        serial: SERIAL_B.into(),
        model: None,
    });
    std::fs::File::create(&spec.disks[1].path)
        .and_then(|f| f.set_len(6 << 30))
        .unwrap();
    run(Command::new("sh")
        .arg("-c")
        .arg("printf 'label: gpt\nname=operator-data\n' | sfdisk --quiet \"$0\"")
        .arg(&spec.disks[1].path))
    .unwrap();
    let kept = content_sha256(&spec.disks[1].path).unwrap();
    spec.nics = vec![Nic { mac: MAC.into() }];
    let sys = bmc.define(&spec).unwrap();
    let (cert, key) = bmc_cert(tmp.path());
    let listen = Listen {
        netns: bmc_ns.name.clone(),
        ip: BMC_IP.into(),
        port: BMC_PORT,
        tls: Some((cert.clone(), key)),
        no_virtual_media: false,
    };
    bmc.start_emulator_at(&listen).unwrap();

    let image = building.join().unwrap().unwrap();
    let password = tmp.path().join("bmc-password");
    std::fs::write(&password, format!("{}\n", redfish::PASSWORD)).unwrap();
    let wrong = tmp.path().join("wrong-password");
    std::fs::write(&wrong, "not-the-password\n").unwrap();
    let network_data = tmp.path().join("network_data.json");
    std::fs::write(
        &network_data,
        json!({
            "links": [{"id": "nic0", "type": "phy", "ethernet_mac_address": MAC}],
            "networks": [{"id": "lab", "type": "ipv4", "link": "nic0", "ip_address": GUEST,
                          "netmask": "255.255.255.0",
                          "routes": [{"network": "0.0.0.0", "netmask": "0.0.0.0", "gateway": "10.99.0.1"}],
                          "network_id": "lab"}],
            "services": []
        })
        .to_string(),
    )
    .unwrap();
    let p = |p: &Path| p.display().to_string();
    // The flags every run shares but the password, the CA and the address.
    let base = vec![
        "--bmc".to_string(),
        format!("redfish+https://{BMC_IP}:{BMC_PORT}{}", sys.path()),
        "--bmc-user".into(),
        redfish::USER.into(),
        "--mac".into(),
        MAC.into(),
        "--image".into(),
        p(&image.raw),
        "--network-data".into(),
        p(&network_data),
    ];
    let with = |extra: &[&str]| -> Vec<String> {
        let mut v = base.clone();
        v.extend(extra.iter().map(|s| s.to_string()));
        v
    };
    let good = [
        "--bmc-password-file",
        &p(&password),
        "--bmc-ca",
        &p(&cert),
        "--http-address",
        "10.99.0.1",
    ]
    .map(str::to_string);
    let good: Vec<&str> = good.iter().map(String::as_str).collect();
    let opts = Options::parse(&with(&good)).unwrap();
    let client = BmcClient::new(&opts).unwrap();
    let found = net.block_on(client.check(true)).unwrap().unwrap();
    eprintln!(
        "the BMC before: {:?}; CD {}; set up in {:.1} s",
        found.before,
        found.cd,
        total.elapsed().as_secs_f64()
    );
    let ns = net.ns.name.clone();
    let go = |name: &str, args: &[String], interrupt: Option<&str>| {
        demo(&ns, &net.logs, name, args, interrupt)
    };

    // A BMC without virtual media: refused before anything starts.
    bmc.stop_emulator();
    bmc.start_emulator_at(&Listen {
        no_virtual_media: true,
        ..listen.clone()
    })
    .unwrap();
    let (ok, out) = go("no-virtual-media", &with(&good), None);
    bmc.stop_emulator();
    bmc.start_emulator_at(&listen).unwrap();
    assert!(!ok, "{out}");
    must_say(
        &out,
        &[
            &format!(
                "the BMC offers no virtual media CD for {0} (looked at {0}/VirtualMedia)",
                sys.path()
            ),
            "Fix: enable or license virtual media on the BMC",
        ],
        "no virtual media",
    );
    let before = Before {
        net: &net,
        bmc: &bmc,
        domain: sys.name.clone(),
        client,
        cd: found.cd.clone(),
        state: found.before.clone(),
    };
    let clean = |when: &str, deployed: bool| before.assert_clean(when, deployed);
    clean("after the BMC without virtual media", false);

    // 1. A wrong password: refused before anything starts.
    let (ok, out) = go(
        "wrong-password",
        &with(&[
            "--bmc-password-file",
            &p(&wrong),
            "--bmc-ca",
            &p(&cert),
            "--http-address",
            "10.99.0.1",
        ]),
        None,
    );
    assert!(!ok, "{out}");
    must_say(
        &out,
        &[
            "refused user \"admin\" (HTTP 401)",
            "Fix: check --bmc-user and the password in --bmc-password-file",
        ],
        "wrong password",
    );

    // 2. The self-signed certificate without --bmc-ca.
    let (ok, out) = go(
        "untrusted-ca",
        &with(&[
            "--bmc-password-file",
            &p(&password),
            "--http-address",
            "10.99.0.1",
        ]),
        None,
    );
    assert!(!ok, "{out}");
    must_say(
        &out,
        &[
            &format!("the BMC's TLS certificate at https://{BMC_IP}:{BMC_PORT} was refused"),
            "--bmc-ca FILE",
            "--bmc-insecure",
        ],
        "untrusted CA",
    );

    // A BMC address with no route to it.
    let mut unrouted = with(&good);
    unrouted[1] = format!("redfish+https://10.95.0.1{}", sys.path());
    let (ok, out) = go("bmc-unreachable", &unrouted, None);
    assert!(!ok, "{out}");
    must_say(
        &out,
        &[
            "cannot reach the BMC at https://10.95.0.1",
            "Fix: check the address in --bmc",
        ],
        "unreachable BMC",
    );

    // Someone else's image in the virtual CD: the demo refuses to start.
    let busy = tmp.path().join("busy");
    std::fs::create_dir(&busy).unwrap();
    std::fs::write(busy.join("other.iso"), vec![0u8; 64 << 10]).unwrap();
    let other = HttpRoot::serve(&net, &busy, 8089).unwrap();
    let media = |action: &str, body: &str| {
        run(Command::new("ip")
            .args(["netns", "exec", &ns, "curl", "-sSf", "--cacert"])
            .arg(&cert)
            .args(["-u", &format!("{}:{}", redfish::USER, redfish::PASSWORD)])
            .args(["-H", "Content-Type: application/json", "-d", body])
            .arg(format!(
                "https://{BMC_IP}:{BMC_PORT}{}/Actions/VirtualMedia.{action}",
                found.cd
            )))
        .unwrap()
    };
    media(
        "InsertMedia",
        &json!({"Image": format!("{}/other.iso", other.url())}).to_string(),
    );
    let (ok, out) = go("media-busy", &with(&good), None);
    assert!(!ok, "{out}");
    must_say(
        &out,
        &[
            &format!("already holds \"{}/other.iso\"", other.url()),
            "Fix: eject it",
        ],
        "virtual media busy",
    );
    media("EjectMedia", "{}");
    drop(other);
    clean("after the busy virtual media", false);

    // 3. An address of this machine the BMC cannot reach: Ironic publishes
    // its ISO there and the BMC never reads it.
    let (ok, out) = go(
        "unreachable-http",
        &with(&[
            "--bmc-password-file",
            &p(&password),
            "--bmc-ca",
            &p(&cert),
            "--http-address",
            UNROUTED,
            "--iso-read-timeout",
            "90",
        ]),
        None,
    );
    assert!(!ok, "{out}");
    must_say(
        &out,
        &[
            &format!("the BMC did not read the boot ISO from http://{UNROUTED}:8088/redfish/"),
            "Fix: give --http-address an address of this machine that the BMC can reach",
        ],
        "unreachable HTTP address",
    );
    clean("after the unreachable address", false);

    // A network_data the server cannot reach Ironic with (another subnet):
    // the BMC reads the ISO, the agent boots and never calls in.
    let stranded = tmp.path().join("stranded_network_data.json");
    std::fs::write(
        &stranded,
        json!({
            "links": [{"id": "nic0", "type": "phy", "ethernet_mac_address": MAC}],
            "networks": [{"id": "lab", "type": "ipv4", "link": "nic0", "ip_address": "10.97.0.50",
                          "netmask": "255.255.255.0",
                          "routes": [{"network": "0.0.0.0", "netmask": "0.0.0.0", "gateway": "10.97.0.1"}],
                          "network_id": "lab"}],
            "services": []
        })
        .to_string(),
    )
    .unwrap();
    let mut no_route = with(&[&good[..], &["--heartbeat-timeout", "30"]].concat());
    let at = no_route.iter().position(|a| a == "--network-data").unwrap() + 1;
    no_route[at] = p(&stranded);
    let (ok, out) = go("no-heartbeat", &no_route, None);
    assert!(!ok, "{out}");
    must_say(
        &out,
        &[
            "the BMC read the boot ISO, but the agent on the server never reached Ironic at",
            "(no first heartbeat); the BMC keeps no log of the server to show here.",
            "Fix: watch the server's console: check --network-data",
        ],
        "no first heartbeat",
    );
    clean("after no first heartbeat", false);

    // 4. Ctrl-C once the server booted Ironic's ISO: the BMC is put back.
    let (ok, out) = go("interrupted", &with(&good), Some("read the ISO"));
    assert!(!ok, "{out}");
    must_say(
        &out,
        &[
            "interrupted (the BMC was cleaned up)",
            "ejected \"http://10.99.0.1:8088/redfish/boot-",
        ],
        "Ctrl-C",
    );
    clean("after Ctrl-C", false);

    // 5. Inspection only.
    let (ok, out) = go(
        "inspect-only",
        &with(&[&good[..], &["--inspect-only"]].concat()),
        None,
    );
    assert!(ok, "{out}");
    must_say(
        &out,
        &[
            &format!("serial {SERIAL_A}"),
            &format!("serial {SERIAL_B}"),
            &format!("the image would be written to /dev/vda (5.0 GiB, serial {SERIAL_A})"),
            "--inspect-only: stopping here",
            "the BMC (10.98.0.2) read the ISO",
            "boot phases (seconds since the server's kernel started): init ",
            ", network ",
        ],
        "inspect-only",
    );
    clean("after --inspect-only", false);

    // 5b. The same inspection booted by PXE: the demo's dnsmasq answers
    // the MAC only, with network_data's address; UEFI PXE gets iPXE over
    // TFTP and iPXE gets Ironic's boot.ipxe.
    let (ok, out) = go(
        "pxe-inspect-only",
        &with(&[&good[..], &["--inspect-only", "--boot", "pxe"]].concat()),
        None,
    );
    assert!(ok, "{out}");
    must_say(
        &out,
        &[
            &format!("--boot pxe: DHCP for {MAC} only ({GUEST} netmask 255.255.255.0)"),
            "--boot pxe: virtual media not used",
            "ipxe boot, port",
            &format!("the server ({GUEST}) booted by PXE and fetched the agent /"),
            "/deploy_ramdisk through iPXE (HTTP 200)",
            &format!("serial {SERIAL_A}"),
            "--inspect-only: stopping here",
        ],
        "--boot pxe --inspect-only",
    );
    clean("after --boot pxe --inspect-only", false);

    // 6. No confirmation: inspected, then stopped with the serial to give.
    let (ok, out) = go("unconfirmed", &with(&good), None);
    assert!(!ok, "{out}");
    must_say(&out, &[&format!("stopped before cleaning and deploying: the image would be written to /dev/vda (5.0 GiB, serial {SERIAL_A})"), &format!("run again with --confirm-disk {SERIAL_A}")], "missing confirmation");
    clean("after the missing confirmation", false);
    // The disk was a hole from end to end, and still is.
    use std::os::unix::fs::MetadataExt;
    assert_eq!(
        std::fs::metadata(&spec.disks[0].path).unwrap().blocks(),
        0,
        "the unconfirmed run wrote to {SERIAL_A}"
    );

    // 7. Confirmed: cleaned and deployed; the domain boots the image.
    let console_mark = std::fs::metadata(&sys.console).map_or(0, |m| m.len() as usize);
    let (ok, out) = go(
        "deploy",
        &with(&[&good[..], &["--confirm-disk", SERIAL_A]].concat()),
        None,
    );
    assert!(ok, "{out}");
    must_say(
        &out,
        &[
            "active after",
            &format!("skip_block_devices [{{\"serial\":\"{SERIAL_B}\"}}]"),
        ],
        "deploy",
    );
    clean("after the deploy", true);
    let t = Instant::now();
    let marker = testimage::marker_line(MARKER);
    loop {
        let bytes = std::fs::read(&sys.console).unwrap_or_default();
        let text = String::from_utf8_lossy(&bytes[console_mark.min(bytes.len())..]).into_owned();
        if text.contains(&marker) {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(300),
            "the deployed system did not boot within 300 s; console: {}",
            sys.console.display()
        );
        std::thread::sleep(Duration::from_secs(1));
    }
    assert_eq!(
        content_sha256(&spec.disks[1].path).unwrap(),
        kept,
        "the protected disk {SERIAL_B} changed"
    );
    eprintln!(
        "own-server demo on the bed: {:.1} s in all",
        total.elapsed().as_secs_f64()
    );
}
