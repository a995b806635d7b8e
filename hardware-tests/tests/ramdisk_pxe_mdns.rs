//! The built ramdisk PXE-boots in QEMU (TCG) from dnsmasq in a network
//! namespace the test creates (bridge + tap: DHCP, TFTP of boot.ipxe, the
//! kernel and the initramfs, router advertisements), gets its address by
//! DHCP, finds the conductor by mDNS (`ipa-api-url=mdns`; an announcer in
//! the namespace advertises `baremetal._openstack._tcp.local.` at
//! 10.99.0.1:6385), heartbeats, and answers the conductor's
//! `get_clean_steps` of an empty manual clean.
//!
//! The test conductor listens on the host's loopback; two forwarders join
//! it to the namespace (10.99.0.1:6385 → conductor, and 127.0.0.1:X → the
//! guest's API for the conductor's calls). dnsmasq and QEMU are killed by
//! PID, the namespace deleted, on drop.

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use agent::testconductor::{Settings, TestConductor};
use hardware_tests::netns::NetNs;
use hardware_tests::{repo_root, require_root, run};

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

const MAC: &str = "52:54:00:12:34:56";
const GUEST: &str = "10.99.0.50";

/// Accepts on `listener` and pipes each connection to a stream from `connect`.
fn forward<F, Fut>(listener: tokio::net::TcpListener, connect: F)
where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = std::io::Result<tokio::net::TcpStream>> + Send,
{
    let connect = Arc::new(connect);
    tokio::spawn(async move {
        while let Ok((mut a, _)) = listener.accept().await {
            let connect = connect.clone();
            tokio::spawn(async move {
                if let Ok(mut b) = connect().await {
                    let _ = tokio::io::copy_bidirectional(&mut a, &mut b).await;
                }
            });
        }
    });
}

#[tokio::test(flavor = "multi_thread")]
async fn ramdisk_pxe_boots_and_finds_the_conductor_by_mdns() {
    require_root("the PXE/mDNS QEMU test");
    let dir = std::env::var_os("RAMDISK_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target/ramdisk"));
    if !dir.join("deploy.initramfs").exists() {
        run(Command::new(repo_root().join("image-builder/build.sh")).arg(&dir)).unwrap();
    }
    let tmp = tempfile::tempdir().unwrap();
    let tftp = tmp.path().join("tftp");
    std::fs::create_dir(&tftp).unwrap();
    for f in ["deploy.kernel", "deploy.initramfs"] {
        std::fs::copy(dir.join(f), tftp.join(f)).unwrap();
    }

    let conductor = TestConductor::start(Settings::default()).await.unwrap();
    let uuid = conductor.enroll(&[MAC]);
    conductor.start_clean(&uuid, Some(vec![])).unwrap();
    let conductor_addr: std::net::SocketAddr = conductor
        .url()
        .trim_start_matches("http://")
        .parse()
        .unwrap();

    let ns = Arc::new(NetNs::new("pxe").unwrap());
    ns.ip(&["link", "add", "br0", "type", "bridge", "forward_delay", "0"])
        .unwrap();
    ns.ip(&["addr", "add", "10.99.0.1/24", "dev", "br0"])
        .unwrap();
    ns.ip(&["addr", "add", "fd99::1/64", "dev", "br0", "nodad"])
        .unwrap();
    ns.ip(&["link", "set", "br0", "up"]).unwrap();
    ns.ip(&["tuntap", "add", "dev", "tap0", "mode", "tap"])
        .unwrap();
    ns.ip(&["link", "set", "tap0", "master", "br0", "up"])
        .unwrap();

    // Guest → conductor: a listener inside the namespace, connections out on the host.
    let inbound = ns
        .enter(|| std::net::TcpListener::bind("10.99.0.1:6385"))
        .unwrap()
        .unwrap();
    inbound.set_nonblocking(true).unwrap();
    forward(
        tokio::net::TcpListener::from_std(inbound).unwrap(),
        move || tokio::net::TcpStream::connect(conductor_addr),
    );
    // Conductor → guest API: a host listener, connections made inside the namespace.
    let outbound = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let fwd = outbound.local_addr().unwrap().port();
    let ns2 = ns.clone();
    forward(outbound, move || {
        let ns = ns2.clone();
        async move {
            let s = ns
                .enter(|| std::net::TcpStream::connect((GUEST, 9999)))
                .map_err(std::io::Error::other)??;
            s.set_nonblocking(true)?;
            tokio::net::TcpStream::from_std(s)
        }
    });

    // The conductor's mDNS advertisement, as Ironic's [conductor]enable_mdns makes it.
    let announcer = ns
        .enter(|| {
            let d = mdns_sd::ServiceDaemon::new().unwrap();
            let props: std::collections::HashMap<String, String> =
                [("protocol".to_string(), "http".to_string())].into();
            let info = mdns_sd::ServiceInfo::new(
                agent::discovery::SERVICE_TYPE,
                "baremetal",
                "conductor.local.",
                "10.99.0.1",
                6385,
                props,
            )
            .unwrap();
            d.register(info).unwrap();
            d
        })
        .unwrap();

    std::fs::write(
        tftp.join("boot.ipxe"),
        format!(
            "#!ipxe\nkernel deploy.kernel console=ttyS0 quiet panic=-1 BOOTIF=01-${{net0/mac:hexhyp}} \
             ipa-api-url=mdns ipa-advertise-host=127.0.0.1 ipa-advertise-port={fwd}\n\
             initrd deploy.initramfs\nboot\n"
        ),
    )
    .unwrap();
    let dnsmasq_log = tmp.path().join("dnsmasq.log");
    let _dnsmasq = Killed(
        Command::new("ip")
            .args(["netns", "exec", &ns.name, "dnsmasq", "--keep-in-foreground"])
            .args([
                "--conf-file=/dev/null",
                "--no-resolv",
                "--no-hosts",
                "--port=0",
            ])
            .args(["--interface=br0", "--bind-interfaces", "--log-dhcp"])
            .arg(format!("--log-facility={}", dnsmasq_log.display()))
            .args(["--dhcp-range=10.99.0.100,10.99.0.150,255.255.255.0,1h"])
            .arg(format!("--dhcp-host={MAC},{GUEST}"))
            .args(["--dhcp-option=option:router,10.99.0.1"])
            .args([
                "--dhcp-match=set:ipxe,175",
                "--dhcp-boot=tag:ipxe,boot.ipxe",
            ])
            .args(["--enable-tftp"])
            .arg(format!("--tftp-root={}", tftp.display()))
            .args(["--enable-ra", "--dhcp-range=fd99::,ra-only,64"])
            .arg(format!(
                "--dhcp-leasefile={}",
                tmp.path().join("leases").display()
            ))
            .arg("--pid-file=")
            .stdout(Stdio::null())
            .spawn()
            .expect("dnsmasq (ci/install-deps installs dnsmasq-base)"),
    );

    let console = tmp.path().join("console.log");
    let started = Instant::now();
    let qemu = Killed(
        Command::new("ip")
            .args(["netns", "exec", &ns.name, "qemu-system-x86_64"])
            .args([
                "-accel",
                "tcg",
                "-cpu",
                "qemu64,+rdrand",
                "-m",
                "1024",
                "-smp",
                "1",
            ])
            .args([
                "-nographic",
                "-no-reboot",
                "-nodefaults",
                "-serial",
                "stdio",
                "-boot",
                "n",
            ])
            .args(["-netdev", "tap,id=n0,ifname=tap0,script=no,downscript=no"])
            .arg("-device")
            .arg(format!("virtio-net-pci,netdev=n0,mac={MAC}"))
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&console).unwrap())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("qemu-system-x86_64"),
    );

    // The empty manual clean ends at the first heartbeat's get_clean_steps.
    let mut first_heartbeat = None;
    let deadline = Instant::now() + Duration::from_secs(240);
    while Instant::now() < deadline {
        let t = conductor.transcript();
        if first_heartbeat.is_none()
            && t.iter()
                .any(|l| l.contains("heartbeat") && l.ends_with("-> 202"))
        {
            first_heartbeat = Some(started.elapsed());
        }
        if conductor
            .node(&uuid)
            .is_some_and(|n| n.provision_state == "manageable")
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    drop(qemu);
    let _ = announcer.shutdown();
    let log = std::fs::read_to_string(&console).unwrap_or_default();
    println!("--- console ---\n{log}--- end ---");
    println!("transcript:\n{}", conductor.transcript().join("\n"));
    println!("host: first heartbeat {first_heartbeat:?} after starting QEMU (PXE)");
    let dhcp = std::fs::read_to_string(&dnsmasq_log).unwrap_or_default();
    assert!(
        dhcp.contains("sent") && dhcp.contains("boot.ipxe"),
        "no PXE via dnsmasq:\n{dhcp}"
    );
    assert!(log.contains("conductor found by mDNS"), "no mDNS discovery");
    assert!(
        log.contains(&format!("{GUEST}/24")),
        "no DHCP lease on the console"
    );
    let t = conductor.transcript();
    assert!(
        t.iter()
            .any(|l| l.contains("GET /v1/lookup") && l.ends_with("-> 200")),
        "no lookup"
    );
    assert!(first_heartbeat.is_some(), "no accepted heartbeat");
    let state = conductor.node(&uuid).unwrap().provision_state;
    assert_eq!(
        state, "manageable",
        "the conductor did not finish the clean"
    );
}
