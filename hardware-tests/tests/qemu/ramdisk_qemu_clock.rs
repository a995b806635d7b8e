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
//! 3. the clock again a year ahead with `ipa-ntp-server`, then a deploy
//!    to the end: the conductor's `standby.power_off` makes the agent set
//!    the clock and write it to the hardware clock before powering off
//!    (IPA 13's `_sync_clock(ignore_errors=True)` + `hwclock --systohc`),
//!    so the deployed OS boots with the right time. The guest's RTC is read
//!    through QEMU's QMP (`rtc-time`): a year ahead after the agent's first
//!    heartbeat (the ramdisk does not write it at boot), the right time
//!    once the machine is off.
//!
//! The stand-in conductor (`agent::testconductor`) plays Ironic: only the
//! TLS handshake, the lookup/heartbeat and, in 3, the deploy's commands
//! matter here.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use agent::testconductor::{BootMode, DeployRequest, ImageInfo, Settings, TestConductor};
use agent_testkit::image_server::{Fault, ImageServer};
use hardware_tests::bed::{
    self, deploy, qmp, vmedia_disc, Boot, Bus, Disk, Net, NetOptions, Nic, Vm, VmSpec, BRIDGE_IP,
};
use hardware_tests::{require_root, run};

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
    deploy_then_power_off(&net, tmp.path(), &iso, tls.clone(), year);
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

/// How far the guest's RTC (read through QMP) is from this machine's
/// clock, in seconds (positive: ahead).
fn rtc_offset(socket: &Path) -> f64 {
    let (y, mo, d, h, mi, sec) = qmp::rtc_time(socket).unwrap();
    let date =
        time::Date::from_calendar_date(y as i32, time::Month::try_from(mo as u8).unwrap(), d as u8)
            .unwrap();
    let at = date
        .with_hms(h as u8, mi as u8, sec as u8)
        .unwrap()
        .assume_utc();
    (at - time::OffsetDateTime::now_utc()).as_seconds_f64()
}

/// Case 3: RTC a year ahead, NTP given; a whole deploy, whose last command
/// (`standby.power_off`) must leave the RTC right.
fn deploy_then_power_off(
    net: &Net,
    dir: &Path,
    iso: &Path,
    tls: Arc<rustls::ServerConfig>,
    year: Duration,
) {
    let ramdisk = bed::ramdisk_dir().unwrap();
    let image = dir.join("clock-image.raw");
    std::fs::File::create(&image)
        .unwrap()
        .set_len(8 << 20)
        .unwrap();
    run(std::process::Command::new("sgdisk")
        .args(["-o", "-n", "1:0:0"])
        .arg(&image))
    .unwrap();
    let sha = deploy::sha256_file(&image).unwrap();
    let mut spec = VmSpec::new("rtc-deploy");
    spec.nics = vec![Nic { mac: MAC.into() }];
    spec.disks.push(Disk {
        path: dir.join("rtc-deploy.img"),
        // Sparse; without root device hints the disk must hold 4 GiB.
        size: 5 << 30,
        bus: Bus::Virtio,
        serial: "CLOCK02".into(),
        model: None,
    });
    spec.cdrom = Some(iso.to_path_buf());
    spec.rtc_base = Some(rtc_base(SystemTime::now() + year));
    spec.qmp = true;
    spec.boot = Boot::Direct {
        kernel: ramdisk.join("deploy.kernel"),
        initrd: ramdisk.join("deploy.initramfs"),
        append: format!(
            "console=ttyS0 quiet panic=-1 boot_method=vmedia ipa-api-url=https://{BRIDGE_IP}:6385 ipa-ntp-server={BRIDGE_IP}"
        ),
    };
    let settings = Settings {
        tls: Some(tls),
        command_poll_interval: Duration::from_secs(2),
        ..Settings::default()
    };
    let result = net.block_on(async {
        let conductor =
            TestConductor::start_on(settings, format!("{BRIDGE_IP}:6385").parse()?).await?;
        let server = ImageServer::start_on(format!("{BRIDGE_IP}:0").parse()?)?;
        server.route("/images/clock.raw", &image, &[], Fault::None);
        let uuid = conductor.enroll(&[MAC]);
        let mut vm = Vm::start(net, &spec)?;
        let socket = vm.qmp_socket().expect("asked for").to_path_buf();
        conductor.make_available(&uuid)?;
        conductor.start_deploy(
            &uuid,
            DeployRequest {
                image_info: ImageInfo::raw_sha256(&server.url("/images/clock.raw"), &sha),
                configdrive: None,
                boot_mode: BootMode::Bios,
                root_device: None,
            },
        )?;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(240);
        while !conductor
            .transcript()
            .iter()
            .any(|l| l.contains("POST /v1/heartbeat") && l.ends_with("-> 202"))
        {
            anyhow::ensure!(
                tokio::time::Instant::now() < deadline,
                "no accepted heartbeat in 240 s"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let before = rtc_offset(&socket);
        println!("rtc-deploy: the guest's RTC is {before:.0} s ahead at the first heartbeat");
        let node = conductor
            .wait_for_state(&uuid, "active", Duration::from_secs(300))
            .await?;
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while !vm.powered_off()? {
            anyhow::ensure!(
                std::time::Instant::now() < deadline,
                "the machine did not power off after standby.power_off"
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        let after = rtc_offset(&socket);
        println!("rtc-deploy: the guest's RTC is {after:.0} s off after the power off");
        vm.kill();
        anyhow::Ok((before, after, node.provision_state, vm.console()))
    });
    let (before, after, state, console) = result.unwrap().unwrap_or_else(|e| {
        panic!(
            "rtc-deploy: {e:#}; console: {}",
            net.logs.join("rtc-deploy.console.log").display()
        )
    });
    assert_eq!(state, "active");
    assert!(
        (before - year.as_secs_f64()).abs() < 600.0,
        "the RTC should still be a year ahead before the power off (the ramdisk does not write it at boot): {before} s\n{console}"
    );
    assert!(
        after.abs() < 120.0,
        "standby.power_off left the RTC {after} s off\n{console}"
    );
}
