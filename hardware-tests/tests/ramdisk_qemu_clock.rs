//! The ramdisk with a wrong clock, on the QEMU bed, against a conductor
//! whose HTTPS certificate is valid for 30 days from now (made with
//! openssl as Ironic's documentation shows, trusted through the CA file on
//! a virtual-media disc, never `ipa-insecure`):
//!
//! 1. the guest's clock runs a year ahead (QEMU `-rtc base=`), so the
//!    certificate looks expired, and `ipa-ntp-server` names the bed's NTP
//!    server (chronyd, started with `-x` inside the bed's namespace: it
//!    serves its clock and never changes this machine's): the agent sets
//!    the clock by SNTP before any TLS and heartbeats over TLS;
//! 2. the guest's clock reads 2024 (before the certificate, and before
//!    this agent existed) and no NTP server is given: the agent takes the
//!    time from the conductor's HTTP `Date` header and heartbeats.
//!
//! The stand-in conductor (`agent::testconductor`) plays Ironic: only the
//! TLS handshake and the lookup/heartbeat matter here.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use agent::testconductor::{Settings, TestConductor};
use hardware_tests::bed::{
    self, vmedia_disc, Boot, Bus, Disk, Net, NetOptions, Nic, Vm, VmSpec, BRIDGE_IP,
};
use hardware_tests::require_root;

const MAC: &str = "52:54:00:c1:0c:01";

/// QEMU's `-rtc base=` form of `at`.
fn rtc_base(at: SystemTime) -> String {
    let t = time::OffsetDateTime::from(at);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second()
    )
}

/// Boots the ramdisk with the clock at `rtc` and `extra` kernel
/// arguments; returns the console once a heartbeat was accepted (or
/// panics with the console and the conductor's transcript).
fn boot_until_heartbeat(
    net: &Net,
    dir: &Path,
    name: &str,
    iso: &Path,
    tls: Arc<rustls::ServerConfig>,
    rtc: String,
    extra: &str,
) -> String {
    let ramdisk = bed::ramdisk_dir().unwrap();
    let mut spec = VmSpec::new(name);
    spec.nics = vec![Nic { mac: MAC.into() }];
    spec.disks.push(Disk {
        path: dir.join(format!("{name}.img")),
        size: 64 << 20,
        bus: Bus::Virtio,
        serial: "CLOCK01".into(),
        model: None,
    });
    spec.cdrom = Some(iso.to_path_buf());
    spec.rtc_base = Some(rtc);
    spec.boot = Boot::Direct {
        kernel: ramdisk.join("deploy.kernel"),
        initrd: ramdisk.join("deploy.initramfs"),
        append: format!(
            "console=ttyS0 quiet panic=-1 boot_method=vmedia ipa-api-url=https://{BRIDGE_IP}:6385 {extra}"
        ),
    };
    let settings = Settings {
        tls: Some(tls),
        ..Settings::default()
    };
    let (heartbeat, console, transcript) = net
        .block_on(async {
            let conductor =
                TestConductor::start_on(settings, format!("{BRIDGE_IP}:6385").parse().unwrap())
                    .await
                    .unwrap();
            let uuid = conductor.enroll(&[MAC]);
            let erase = serde_json::json!(
                {"interface": "deploy", "step": "erase_devices_metadata", "args": {}});
            conductor.start_clean(&uuid, Some(vec![erase])).unwrap();
            let vm = Vm::start(net, &spec).unwrap();
            let deadline = tokio::time::Instant::now() + Duration::from_secs(240);
            let mut heartbeat = None;
            while heartbeat.is_none() && tokio::time::Instant::now() < deadline {
                if conductor
                    .transcript()
                    .iter()
                    .any(|l| l.contains("POST /v1/heartbeat") && l.ends_with("-> 202"))
                {
                    heartbeat = Some(vm.elapsed());
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            println!("{name}: first heartbeat {heartbeat:?} after starting QEMU");
            (heartbeat, vm.console(), conductor.transcript())
        })
        .unwrap();
    assert!(
        heartbeat.is_some(),
        "{name}: no accepted heartbeat\n--- transcript ---\n{}\n--- console ---\n{console}",
        transcript.join("\n")
    );
    console
}

#[test]
fn a_wrong_clock_is_set_by_ntp_or_from_the_conductors_date() {
    require_root("the QEMU clock test");
    let tmp = tempfile::tempdir().unwrap();
    let (cert, key) = vmedia_disc::openssl_cert(tmp.path()).unwrap();
    let iso = vmedia_disc::disc(tmp.path(), &cert, &[]).unwrap();
    let tls = vmedia_disc::server_tls(&cert, &key).unwrap();
    let ramdisk = bed::ramdisk_dir().unwrap();
    let net = Net::start(NetOptions {
        ramdisk: None,
        ..NetOptions::pxe("clock", &ramdisk, "")
    })
    .unwrap();

    // chronyd as the bed's NTP server: -x never touches this machine's clock.
    let conf = tmp.path().join("chrony.conf");
    std::fs::write(
        &conf,
        format!(
            "local stratum 8\nallow all\nbindaddress {BRIDGE_IP}\nport 123\ncmdport 0\n\
             pidfile {}\n",
            tmp.path().join("chronyd.pid").display()
        ),
    )
    .unwrap();
    let chronyd = net
        .spawn(
            "chronyd",
            &["-x", "-d", "-f", conf.to_str().unwrap()],
            "chronyd (ci/install-deps installs chrony)",
        )
        .unwrap();

    let year = Duration::from_secs(365 * 86_400);
    let console = boot_until_heartbeat(
        &net,
        tmp.path(),
        "ahead",
        &iso,
        tls.clone(),
        rtc_base(SystemTime::now() + year),
        &format!("ipa-ntp-server={BRIDGE_IP}"),
    );
    let set = console
        .lines()
        .find(|l| l.contains("clock set") && l.contains(&format!("NTP server {BRIDGE_IP}")))
        .unwrap_or_else(|| panic!("no 'clock set' from NTP on the console:\n{console}"));
    // The offset is about minus a year.
    let offset: f64 = set
        .split("offset_s=")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no offset in {set:?}"));
    assert!(
        (offset + year.as_secs_f64()).abs() < 600.0,
        "offset {offset} s is not a year back: {set}"
    );
    drop(chronyd);

    let console = boot_until_heartbeat(
        &net,
        tmp.path(),
        "behind",
        &iso,
        tls,
        "2024-06-01T12:00:00".into(),
        "",
    );
    assert!(
        console
            .lines()
            .any(|l| l.contains("clock set") && l.contains("Date header")),
        "no 'clock set' from the conductor's Date on the console:\n{console}"
    );
}
