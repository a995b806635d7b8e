//! OpenShift's form of the agent on the QEMU bed (issue 47): unmodified
//! Ironic 39.0.0 boots (iPXE, then Redfish virtual media; Redfish BMC) the
//! bed's stand-in for a
//! CoreOS live system (`image-builder/liveos.sh`: Debian's systemd and
//! podman, run from RAM, `/run/ostree-live`) as the node's deploy kernel and
//! ramdisk. What Ignition writes for OpenShift comes with it as a second
//! initramfs archive (`bed::liveos::ignition_archive`): the agent's
//! configuration at `/etc/ironic-python-agent.conf` and
//! openshift/ironic-agent-image's `ironic-agent.service`, enabled, only
//! `%REGISTRY%` (Debian's `docker-registry` on the bed, serving this
//! agent's OCI image from `image-builder/build-oci.sh`) and `%PODMAN_FLAGS%`
//! (`--tls-verify=false`) filled in. systemd on the live system starts the
//! unit after the network is online; podman pulls the image and runs it as
//! the unit says; the agent in it (`agent container`) finds the host
//! through the unit's bind mounts and acts for real, the host being live.
//!
//! Ironic's API is HTTPS only (its own certificate, whose CA Ignition puts
//! on the live system at `bed::liveos::HOST_CA`; the agent's configuration
//! names it as `cafile` through the unit's `/mnt/coreos` mount).
//!
//! Ironic is configured as Metal3 configures it for this: `[deploy]
//! fast_track = true` and `[inspector] power_off = false` (one boot of the
//! live system serves inspection, cleaning and the deploy),
//! `custom-agent` enabled, `[agent] deploy_logs_collect = always`. The
//! node's `deploy_interface` is `custom-agent`, as the baremetal-operator
//! sets it for a `customDeploy`.
//!
//! The machine has UEFI firmware (OVMF).
//!
//! Checked, in one boot of the live system (its console shows systemd's
//! `ironic-agent.service` starting once, the deploy ramdisk never):
//! * inspection (`inspect_interface = agent`): the inventory Ironic stores
//!   is the live host's (its NIC's MAC and address from the bed's DHCP,
//!   its disk, 2 GiB of RAM); the machine stays on (fast track); its USB
//!   NIC (QEMU's `usb-net`, which Linux binds to `cdc_ether`) is in neither
//!   the inventory nor the lookup, as OpenShift's `filter_device` drops it
//!   (the agent's log names it with its driver);
//! * automated cleaning (`erase_devices_metadata`) on the running agent
//!   removes the partition table put on the disk beforehand: `available`;
//! * the deploy as the baremetal-operator asks for it: `deploy_steps`
//!   `[{"interface": "deploy", "step": "install_coreos", "priority": 80}]`,
//!   `instance_info.image_source` an http URL on the bed (a CoreOS-like raw
//!   image that boots, `hardware_tests::coreosimage::bootable_coreos_image`)
//!   without checksum, and the config drive as a JSON dict (`user_data` an
//!   Ignition config, `meta_data.coreos_append_karg` a list). The agent
//!   runs the live system's real coreos-installer 0.27 chrooted
//!   (`--image-url URL --insecure`, its warning in the agent's log Ironic
//!   stored), powers the machine off itself (`standby.power_off`, no forced
//!   power off), and the node is `active` with the disk first. The machine
//!   (UEFI) then boots the installed disk: OVMF starts the image's
//!   systemd-boot through the boot entry the agent wrote (`ironic1`),
//!   which boots the BLS entry coreos-installer edited, so the booted
//!   kernel's command line ends with the config drive's kernel
//!   arguments, and the image's first boot shows the Ignition config from
//!   where CoreOS's Ignition reads it: the `user_data` plus the first-boot
//!   host name, and applies it: the files (`user_data`'s and the host
//!   name) and the `core` user's SSH key are written where Ignition writes
//!   them. (Ignition itself cannot run here: Debian has none; the image's
//!   stand-in, `testimage::ignition`, applies those two stages.) Read from the host side after a power off
//!   (a read-only loop device of the disk file, `bed::coreos_disk`): the
//!   same config in the boot filesystem, the BLS entry, the image's
//!   first-boot stamp kept, the root partition holding the image's bytes.
//!
//! Then, in a second boot: the node undeployed without cleaning (the
//! installed CoreOS stays on the disk) and deployed again with no
//! `image_source` (the baremetal-operator's `customDeploy` without an
//! image: `--offline`). coreos-installer 0.27 refuses an offline install
//! outside a real CoreOS live ISO ("cannot perform offline install;
//! metadata missing"); Ironic's `last_error` carries that text, the node
//! is `deploy failed`, three tries are in the agent's log, and the agent
//! has erased the disk: no partition table, filesystem or GPT header left.
//!
//! Then a second machine (UEFI, one NIC), enrolled as a second node as
//! assisted-service enrolls one for the converged flow and booted over
//! Redfish virtual media (Ironic builds the ISO from the same kernel and
//! initramfs, the BMC fetches it from Ironic's `http_root`, OVMF boots it),
//! is deployed as assisted-service asks (`start_assisted_install`, no
//! image): the step starts the live system's `agent.service` (the bed's
//! stand-in, which says so on the console and runs 20 s) through the host's
//! systemd, waits for its end, and the node is `active`.
//!
//! `ci/demo --openshift` runs this suite, the flow then reporting each step
//! (provision and power states, the agent's commands) as the main demo does.
//!
//! The registry's log shows the pull of `ironic-agent` and every boot is
//! the live system's, never the ramdisk's. Each phase's time is printed.
//!
//! The configuration has no `inspection_callback_url`: OpenShift's
//! `build.py` writes ironic-inspector's (port 5050), which Ironic 39 no
//! longer runs; Ironic passes its own `ipa-inspection-callback-url` on the
//! kernel command line, which the container reads from `/proc/cmdline`.

use std::time::{Duration, Instant};

use hardware_tests::bed::coreos_disk::{self, ReadOnlyDisk};
use hardware_tests::bed::deploy::{self, Printer};
use hardware_tests::bed::ironic_flow::{self, checks, Flow, Machine, PxeRoot};
use hardware_tests::bed::redfish::{self, Bmc};
use hardware_tests::bed::{dirty_disk, liveos, vmedia_disc};
use hardware_tests::bed::{Bus, Disk, Firmware, Net, NetOptions, Nic, VmSpec, BRIDGE_IP};
use hardware_tests::coreosimage::{bootable_coreos_image, BootableCoreos, STAMP};
use hardware_tests::ironic::Ironic;
use hardware_tests::registry::Registry;
use hardware_tests::require_root;
use hardware_tests::testimage;
use serde_json::{json, Value};

const MAC: &str = "52:54:00:47:00:01";
/// The key `user_data` gives the `core` user.
const SSH_KEY: &str = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOpenShiftLiveOsTest core@bed";
/// A file `user_data` writes, and its text.
const MOTD: (&str, &str) = ("/etc/motd.d/bed", "written by the deploy's Ignition");
/// The first machine's USB NIC (QEMU's `usb-net`: `cdc_ether`), as a BMC
/// shares one with its host; the container form leaves it out.
const USB_MAC: &str = "52:54:00:47:00:0b";
const GUEST: &str = "10.99.0.47";
/// The second machine's NIC and address (the assisted installer's node).
const MAC2: &str = "52:54:00:47:00:02";
const GUEST2: &str = "10.99.0.48";
const PORT: u16 = 6399;
const DISK_GIB: u64 = 4;
const DISK_SERIAL: &str = "liveos-disk0";
const MEMORY_MB: u32 = 2048;
/// Each phase: a TCG boot of the live system, podman's pull and start.
const FLOW_TIMEOUT: Duration = Duration::from_secs(900);
/// What Metal3's `ironic.conf` sets for this flow, beside the bed's
/// `ironic_flow::ironic_conf`: Redfish virtual media beside iPXE, with
/// `esp` as the ISO's ESP (GRUB, `bed::redfish::esp_image`).
fn metal3_conf(esp: &std::path::Path) -> String {
    format!(
        "[DEFAULT]\n\
         enabled_deploy_interfaces = direct,fake,custom-agent\n\
         enabled_boot_interfaces = fake,ipxe,redfish-virtual-media\n\
         esp_image = {}\n\
         [agent]\n\
         deploy_logs_collect = always\n\
         [deploy]\n\
         fast_track = true\n\
         [inspector]\n\
         power_off = false\n\
         [redfish]\n\
         use_swift = false\n\
         kernel_append_params = console=ttyS0\n",
        esp.display()
    )
}
/// The kernel argument the config drive asks for (OpenShift's manager
/// joins a list with commas into one `--append-karg`).
const KARGS: [&str; 1] = ["console=ttyS0,115200n8"];
/// What the deployed CoreOS-like image's system prints when it booted.
const MARKER: &str = "liveos-fcos";
/// What coreos-installer 0.27 says to `--offline` outside a live ISO.
const OFFLINE_REFUSED: &str = "cannot perform offline install; metadata missing";

fn elapsed(t: Instant) -> String {
    format!("{:.1} s", t.elapsed().as_secs_f64())
}

/// The console's last 60 lines, for a failure's message.
fn tail(flow: &Flow<'_, '_>) -> String {
    let console = flow.machine.console();
    let lines: Vec<&str> = console.lines().collect();
    lines[lines.len().saturating_sub(60)..].join("\n")
}

/// How often the live system started OpenShift's unit.
fn unit_starts(flow: &Flow<'_, '_>) -> usize {
    flow.machine
        .console()
        .matches("Starting ironic-agent.service")
        .count()
}

/// The Ignition config the operator gives as `user_data`.
fn user_data() -> Value {
    json!({"ignition": {"version": "3.2.0"},
           "passwd": {"users": [{"name": "core", "sshAuthorizedKeys": [SSH_KEY]}]},
           "storage": {"files": [{"path": MOTD.0, "mode": 420,
               "contents": {"source": "data:,written%20by%20the%20deploy%27s%20Ignition"}}]}})
}

/// The baremetal-operator's deploy request for a `customDeploy` of
/// `install_coreos`: the step at priority 80 and the config drive as data.
fn deploy_request() -> Value {
    json!({"target": "active",
           "deploy_steps": [{"interface": "deploy", "step": "install_coreos",
                             "priority": 80, "args": {}}],
           "configdrive": {"user_data": user_data().to_string(),
                           "meta_data": {"uuid": "liveos-cd", "coreos_append_karg": KARGS}}})
}

/// How many of the agent's log lines hold `needle`, each counted once: the
/// journal has every line of the container twice (podman's output as the
/// unit's, and conmon's), told apart here by the agent's own timestamp.
fn distinct_agent_lines(log: &str, needle: &str) -> usize {
    let stamps: std::collections::BTreeSet<&str> = log
        .lines()
        .filter(|l| l.contains(needle))
        .filter_map(|l| {
            l.split_whitespace()
                .find(|w| w.len() > 20 && w.ends_with('Z') && w.contains('T'))
        })
        .collect();
    stamps.len()
}

/// `flow`, reporting each step as the main demo does under `ci/demo
/// --openshift` (which sets `DEMO_STARTED_AT`).
fn reporting<'a, 'b>(flow: Flow<'a, 'b>) -> Flow<'a, 'b> {
    if std::env::var_os("DEMO_STARTED_AT").is_some() {
        flow.reporting(Printer::new(deploy::demo_started_at()))
    } else {
        flow
    }
}

/// Waits for `active`; a failure's message has the console's end and the
/// agent's log.
async fn wait_active(flow: &mut Flow<'_, '_>, what: &str) -> Value {
    flow.wait_for("active", FLOW_TIMEOUT)
        .await
        .unwrap_or_else(|e| {
            panic!(
                "{what}: {e:#}\n{}\nagent: {}",
                tail(flow),
                agent_log(flow.ironic)
            )
        })
}

/// The agent's logs from the bundles Ironic stored.
fn agent_log(ironic: &Ironic) -> String {
    coreos_disk::agent_logs(&ironic.deploy_logs())
}

#[test]
fn ironic_inspects_cleans_and_deploys_coreos_through_openshifts_agent_container_on_a_live_system() {
    require_root("the OpenShift live-system QEMU test");
    let total = Instant::now();
    let live = liveos::dir().unwrap();
    let layout = liveos::agent_image().unwrap();
    println!("live system and agent image ready in {}", elapsed(total));
    let work = tempfile::tempdir().unwrap();
    let img = bootable_coreos_image(work.path(), MARKER).unwrap();

    let net = Net::start(NetOptions {
        hosts: vec![(MAC.into(), GUEST.into()), (MAC2.into(), GUEST2.into())],
        ..NetOptions::ironic_ipxe("liveos", &ironic_flow::boot_script_url())
    })
    .unwrap();
    let registry = net
        .ns
        .enter(|| {
            let registry = Registry::start_on(BRIDGE_IP)?;
            registry.push_layout(&layout, "ironic-agent:latest")?;
            anyhow::Ok(registry)
        })
        .unwrap()
        .unwrap();
    // Ironic's API over TLS only; Ignition puts its CA on the live system.
    let (cert, key) = vmedia_disc::openssl_cert_for(work.path(), "ironic", BRIDGE_IP).unwrap();
    let conf = liveos::agent_conf(&format!("https://{BRIDGE_IP}:{PORT}"), &[]);
    let extra =
        liveos::ignition_archive(&conf, &registry.addr, &std::fs::read(&cert).unwrap()).unwrap();

    let mut bmc = Bmc::start(&net).unwrap();
    let spec = VmSpec {
        memory_mb: MEMORY_MB,
        disks: vec![Disk {
            path: work.path().join("disk0.img"),
            size: DISK_GIB << 30,
            bus: Bus::Virtio,
            serial: DISK_SERIAL.into(),
            model: None,
        }],
        nics: vec![Nic { mac: MAC.into() }],
        firmware: Firmware::Uefi {
            vars: work.path().join("OVMF_VARS.fd"),
        },
        usb_nic: Some(USB_MAC.into()),
        ..VmSpec::new("node")
    };
    // A partition table that cleaning must remove.
    dirty_disk::gpt(&spec.disks[0].path, DISK_GIB << 30).unwrap();
    assert!(!dirty_disk::signatures(&spec.disks[0].path)
        .unwrap()
        .is_empty());
    // The second machine, for the assisted installer's deploy.
    let spec2 = VmSpec {
        name: "node2".into(),
        disks: vec![Disk {
            path: work.path().join("disk2.img"),
            serial: "liveos-disk2".into(),
            ..spec.disks[0].clone()
        }],
        nics: vec![Nic { mac: MAC2.into() }],
        firmware: Firmware::Uefi {
            vars: work.path().join("OVMF_VARS2.fd"),
        },
        usb_nic: None,
        ..spec.clone()
    };
    let system = bmc.define(&spec).unwrap();
    let system2 = bmc.define(&spec2).unwrap();
    bmc.start_emulator().unwrap();
    let pxe = PxeRoot::start_appending(&net, &live, &extra).unwrap();
    // The image, served beside Ironic's files, without a checksum.
    std::fs::copy(&img.raw, pxe.dir().join("fcos.raw")).unwrap();
    let image_url = format!("{}/fcos.raw", ironic_flow::http_url());
    let esp = redfish::esp_image(work.path()).unwrap();
    let ironic_conf = ironic_flow::ironic_conf(pxe.dir(), "") + &metal3_conf(&esp);
    let ironic = Ironic::start_tls_in(&net.ns, BRIDGE_IP, PORT, Some(&ironic_conf), &cert, &key)
        .expect("starting Ironic 39.0.0 over HTTPS in the namespace");
    assert!(ironic.url.starts_with("https://"), "{}", ironic.url);
    let machine = Machine::new(&bmc, system, &spec.disks[0].path);
    let machine2 = Machine::new(&bmc, system2, &spec2.disks[0].path);
    println!("bed up in {}", elapsed(total));

    net.block_on(async {
        let uuid = ironic_flow::enroll(&ironic, &bmc, machine.system(), "liveos", MAC, "uefi")
            .await
            .unwrap();
        ironic
            .patch(
                &uuid,
                json!([{"op": "replace", "path": "/deploy_interface", "value": "custom-agent"}]),
            )
            .await
            .unwrap();
        let mut flow = reporting(Flow::new(&ironic, &uuid, machine, FLOW_TIMEOUT));

        inspect(&mut flow).await;
        clean(&mut flow).await;
        deploy_from_url(&mut flow, &image_url, &img).await;
        assert_eq!(
            unit_starts(&flow),
            1,
            "inspection, cleaning and deploy in one boot"
        );
        let fetched = pxe
            .http
            .requests()
            .iter()
            .any(|r| r.path == "/fcos.raw" && r.status == 200);
        assert!(fetched, "coreos-installer did not fetch {image_url}");

        deploy_offline(&mut flow).await;
        assert_eq!(
            unit_starts(&flow),
            2,
            "the offline deploy booted the live system again"
        );
        assert_eq!(flow.machine.ramdisk_boots(), 0, "the deploy ramdisk booted");

        // A second node, as assisted-service enrolls one for the converged
        // flow, booted over Redfish virtual media.
        let before = pxe.http.requests().len();
        let uuid2 =
            ironic_flow::enroll(&ironic, &bmc, machine2.system(), "liveos-assisted", MAC2, "uefi")
                .await
                .unwrap();
        ironic
            .patch(
                &uuid2,
                json!([{"op": "replace", "path": "/deploy_interface", "value": "custom-agent"},
                       {"op": "replace", "path": "/boot_interface", "value": "redfish-virtual-media"}]),
            )
            .await
            .unwrap();
        ironic
            .move_to(&uuid2, "provide", "available", Duration::from_secs(120))
            .await
            .unwrap();
        let mut flow2 = reporting(Flow::new(&ironic, &uuid2, machine2, FLOW_TIMEOUT));
        deploy_assisted(&mut flow2).await;
        assert_eq!(unit_starts(&flow2), 1, "the second node's live system");
        // That boot was from the ISO Ironic built: the BMC fetched it from
        // Ironic's http_root; iPXE fetched no boot script.
        let served = pxe.http.requests();
        let paths: Vec<&str> = served[before..].iter().map(|r| r.path.as_str()).collect();
        assert!(
            served[before..]
                .iter()
                .any(|r| r.path.ends_with(".iso") && r.status == 200),
            "the BMC fetched no ISO: {paths:?}"
        );
        assert!(
            !paths.iter().any(|p| p.ends_with("boot.ipxe")),
            "the assisted deploy booted over iPXE: {paths:?}"
        );
        assert_eq!(flow2.machine.ramdisk_boots(), 0, "the deploy ramdisk booted");
    })
    .unwrap();
    let log = registry.log();
    assert!(
        log.lines()
            .any(|l| l.contains("/v2/ironic-agent/manifests/")),
        "podman on the live system did not pull from the bed's registry: {log}"
    );
    println!("all: {}", elapsed(total));
}

/// Inspection until `manageable`; the machine stays on (fast track).
async fn inspect(flow: &mut Flow<'_, '_>) {
    let t = Instant::now();
    flow.ironic
        .provision(&flow.uuid, json!({"target": "inspect"}))
        .await
        .unwrap();
    flow.wait_for_any_target("inspect wait", Duration::from_secs(120))
        .await
        .unwrap();
    flow.machine
        .expect_boot_device("network", "inspect wait")
        .unwrap();
    let node = flow
        .wait_for("manageable", FLOW_TIMEOUT)
        .await
        .unwrap_or_else(|e| panic!("inspection: {e:#}\n{}", tail(flow)));
    println!("inspected: manageable after {}", elapsed(t));
    println!("inspected properties: {}", node["properties"]);
    let stored = flow.ironic.inventory(&flow.uuid).await.unwrap();
    // The checks the deploy ramdisk passes too (ironic_drives_ramdisk).
    checks::inspected(
        &node,
        &stored,
        &checks::Expected {
            mac: MAC,
            ipv4: GUEST,
            cpus: 1,
            memory_mb: MEMORY_MB,
            disk_gib: DISK_GIB,
            disk_serial: DISK_SERIAL,
            boot_mode: "uefi",
        },
    )
    .unwrap();
    let usb_nic = stored["inventory"]["interfaces"]
        .as_array()
        .and_then(|l| l.iter().find(|i| i["mac_address"] == USB_MAC));
    assert!(
        usb_nic.is_none(),
        "the USB NIC is in the inventory: {usb_nic:?}"
    );
    assert_eq!(node["power_state"], "power on", "fast track keeps it on");
}

/// Automated cleaning on the running agent until `available`.
async fn clean(flow: &mut Flow<'_, '_>) {
    let t = Instant::now();
    flow.ironic
        .enable_automated_clean(&flow.uuid)
        .await
        .unwrap();
    flow.ironic
        .provision(&flow.uuid, json!({"target": "provide"}))
        .await
        .unwrap();
    let node = flow
        .wait_for("available", FLOW_TIMEOUT)
        .await
        .unwrap_or_else(|e| panic!("cleaning: {e:#}\n{}", tail(flow)));
    println!("cleaned: available after {}", elapsed(t));
    checks::cleaned(&node, flow.machine.disk()).unwrap();
    assert_eq!(node["power_state"], "power on", "fast track keeps it on");
}

/// The deploy of `url` (the image `img`) until `active`; the machine then
/// boots the installed disk, then the disk is read with the machine off.
async fn deploy_from_url(flow: &mut Flow<'_, '_>, url: &str, img: &BootableCoreos) {
    let t = Instant::now();
    flow.ironic
        .patch(
            &flow.uuid,
            json!([{"op": "add", "path": "/instance_info/image_source", "value": url}]),
        )
        .await
        .unwrap();
    let mark = flow.machine.console_len();
    flow.ironic
        .provision(&flow.uuid, deploy_request())
        .await
        .unwrap();
    let node = wait_active(flow, "deploy").await;
    let active = Instant::now();
    println!("deployed: active after {}", elapsed(t));
    assert!(node["last_error"].is_null(), "{}", node["last_error"]);
    flow.machine.expect_boot_device("disk", "active").unwrap();
    let log = std::fs::read_to_string(flow.ironic.log_path()).unwrap_or_default();
    assert!(
        !log.contains("Forcing hard power off"),
        "Ironic had to force the power off after standby.power_off; log: {}",
        flow.ironic.log_path().display()
    );
    let agent = agent_log(flow.ironic);
    // The USB NIC was there, on cdc_ether, and left out of the lookup and
    // of the inventory.
    assert!(
        agent
            .lines()
            .any(|l| l.contains("Filtering out USB network device")
                && l.contains(USB_MAC)
                && l.contains("driver cdc_ether")),
        "the agent filtered no cdc_ether NIC with {USB_MAC}:\n{agent}"
    );
    assert!(
        agent.contains("(cdc_ether) left out of the lookup"),
        "the USB NIC was not left out of the lookup:\n{agent}"
    );
    let lookup = agent
        .lines()
        .find(|l| l.contains("looking up the node"))
        .unwrap_or_else(|| panic!("no lookup in the agent's log:\n{agent}"));
    assert!(!lookup.contains(USB_MAC), "{lookup}");
    assert!(
        agent.contains("install_coreos: coreos-installer --insecure: the image is not verified"),
        "no warning about the unverified image in the agent's log:\n{agent}"
    );
    assert!(
        agent.contains(&format!(
            "coreos-installer install --preserve-on-error --ignition-file /tmp/ironic.ign --append-karg {} --image-url {url} --insecure /dev/vda",
            KARGS[0]
        )),
        "{agent}"
    );

    // The agent powered the live system off; Ironic powered the machine on
    // from its disk: OVMF, systemd-boot, the BLS entry coreos-installer
    // edited, and the image's first boot showing its Ignition config.
    let (after, console) = flow
        .machine
        .wait_marker_boot(mark, MARKER, active, Duration::from_secs(300))
        .unwrap_or_else(|e| panic!("disk boot: {e:#}\n{}", tail(flow)));
    println!(
        "booted from disk: marker {:.1} s after active",
        after.as_secs_f64()
    );
    // OVMF started the boot entry the agent wrote after coreos-installer
    // (the container form writes it as the ramdisk does).
    assert!(
        console.contains("BdsDxe: starting Boot") && console.contains("\"ironic1\""),
        "OVMF did not start the agent's UEFI entry:\n{console}"
    );
    let cmdline = testimage::kernel_cmdline(&console).unwrap_or_default();
    assert!(
        cmdline.ends_with(&format!(" {}", KARGS.join(" "))),
        "the booted kernel lacks the config drive's kernel arguments: {cmdline:?}"
    );
    let shown = testimage::ignition_config(&console)
        .unwrap_or_else(|| panic!("the first boot showed no Ignition config:\n{console}"));
    let shown: Value = serde_json::from_str(&shown).unwrap();
    let hostname = check_ignition(&shown);
    // The image's stand-in for Ignition applied it (files and users).
    let applied = testimage::ignition::applied(&console)
        .unwrap_or_else(|| panic!("the first boot applied no Ignition config:\n{console}"));
    assert_eq!(applied.get("/etc/hostname"), Some(&hostname), "{applied:?}");
    assert_eq!(
        applied.get(MOTD.0).map(String::as_str),
        Some(MOTD.1),
        "{applied:?}"
    );
    assert_eq!(
        applied
            .get("/home/core/.ssh/authorized_keys.d/ignition")
            .map(String::as_str),
        Some(SSH_KEY),
        "{applied:?}"
    );
    assert_eq!(applied.len(), 3, "{applied:?}");
    flow.power_off().await.unwrap();

    let disk = ReadOnlyDisk::attach(flow.machine.disk()).unwrap();
    let files = disk
        .boot_files(
            "vfat",
            &[
                "ignition/config.ign",
                "loader/entries/ostree-1.conf",
                "ignition.firstboot",
            ],
        )
        .unwrap();
    let written: Value = serde_json::from_str(&files[0]).unwrap();
    assert_eq!(check_ignition(&written), hostname);
    assert_eq!(
        files[1],
        img.bls.replace(
            "no_timer_check\n",
            &format!("no_timer_check {}\n", KARGS.join(" "))
        ),
        "the BLS entry's options"
    );
    assert_eq!(files[2], STAMP, "the image's first-boot stamp is kept");
    let want = std::fs::read(&img.raw).unwrap();
    let root = img.root.start as usize..img.root.end as usize;
    let got = disk.read_at(img.root.start, root.len()).unwrap();
    assert!(got == want[root], "the root partition is not the image's");
    drop(disk);
    println!("deploy checked on the disk after {}", elapsed(t));
}

/// `config` is `user_data` plus the first-boot host name (the one file
/// OpenShift's manager adds); the host name it sets.
fn check_ignition(config: &Value) -> String {
    let mut config = config.clone();
    let files = config["storage"]["files"].as_array_mut().unwrap();
    let at = files
        .iter()
        .position(|f| f["path"] == "/etc/hostname")
        .unwrap_or_else(|| panic!("no /etc/hostname in {files:?}"));
    let hostname = files.remove(at);
    assert_eq!(config, user_data(), "the Ignition config is user_data's");
    let name = hostname["contents"]["source"].as_str().unwrap_or_default();
    let name = name.strip_prefix("data:,").unwrap_or_default();
    assert!(!name.is_empty(), "{hostname}");
    name.to_string()
}

/// On an `available` node booting over Redfish virtual media, the
/// converged flow's deploy as assisted-service asks for it (`customDeploy:
/// start_assisted_install`, no image): the step starts the live system's
/// `agent.service` (the bed's stand-in, [`liveos::ASSISTED_UNIT`]) through
/// the host's systemd and waits for it to end; the node is `active`.
async fn deploy_assisted(flow: &mut Flow<'_, '_>) {
    let t = Instant::now();
    flow.ironic
        .provision(
            &flow.uuid,
            json!({"target": "active",
                   "deploy_steps": [{"interface": "deploy", "step": "start_assisted_install",
                                     "priority": 80, "args": {}}]}),
        )
        .await
        .unwrap();
    let node = wait_active(flow, "assisted deploy").await;
    println!("assisted deploy: active after {}", elapsed(t));
    assert!(node["last_error"].is_null(), "{}", node["last_error"]);
    let console = flow.machine.console();
    let started = console.find("assisted-agent: started");
    let finished = console.find("assisted-agent: finished");
    assert!(
        matches!((started, finished), (Some(s), Some(f)) if s < f),
        "the live system's agent.service did not run to its end:\n{}",
        tail(flow)
    );
    let agent = agent_log(flow.ironic);
    for line in [
        "Triggered installation via the assisted agent",
        "Successfully installed using the assisted agent",
    ] {
        assert!(
            agent.contains(line),
            "no {line:?} in the agent's log:\n{agent}"
        );
    }
    // The step waited for the unit's end: in the host's journal (in the
    // logs Ironic stored) the unit's last line comes before the step's.
    let unit_end = agent.find("assisted-agent: finished");
    let step_end = agent.find("Successfully installed using the assisted agent");
    assert!(
        matches!((unit_end, step_end), (Some(u), Some(s)) if u < s),
        "the step ended before agent.service did:\n{agent}"
    );
    flow.power_off().await.unwrap();
    println!("assisted deploy checked after {}", elapsed(t));
}

/// Undeploy without cleaning, then a deploy without `image_source`
/// (`--offline`), which coreos-installer refuses here: `deploy failed`,
/// and the disk erased by the agent.
async fn deploy_offline(flow: &mut Flow<'_, '_>) {
    let t = Instant::now();
    flow.ironic
        .patch(
            &flow.uuid,
            json!([{"op": "replace", "path": "/automated_clean", "value": false}]),
        )
        .await
        .unwrap();
    flow.ironic
        .move_to(&flow.uuid, "deleted", "available", Duration::from_secs(120))
        .await
        .unwrap();
    {
        let disk = ReadOnlyDisk::attach(flow.machine.disk()).unwrap();
        let left = disk.bootable_leftovers().unwrap();
        assert!(
            !left.is_empty(),
            "undeploy without cleaning erased the disk"
        );
    }
    // Ironic's undeploy cleared instance_info: no image_source now.
    let node = flow.ironic.node(&flow.uuid).await.unwrap();
    assert!(
        node["instance_info"]["image_source"].is_null(),
        "{}",
        node["instance_info"]
    );
    flow.ironic
        .provision(&flow.uuid, deploy_request())
        .await
        .unwrap();
    let node = flow
        .wait_for_any_target("deploy failed", FLOW_TIMEOUT)
        .await
        .unwrap_or_else(|e| panic!("offline deploy: {e:#}\n{}", tail(flow)));
    println!("offline deploy: deploy failed after {}", elapsed(t));
    let error = node["last_error"].as_str().unwrap_or_default();
    println!("last_error: {error}");
    assert!(error.contains("install_coreos"), "{error}");
    assert!(
        error.contains(&format!(
            "coreos-installer failed with code 1: Error: {OFFLINE_REFUSED}"
        )),
        "{error}"
    );
    // A failed agent step leaves the machine on (Ironic's handler for it
    // does not power off): off through Ironic, as an operator would.
    flow.power_off().await.unwrap();
    let agent = agent_log(flow.ironic);
    let tries = distinct_agent_lines(&agent, "--offline /dev/vda");
    assert_eq!(tries, 3, "three tries of --offline:\n{agent}");
    let disk = ReadOnlyDisk::attach(flow.machine.disk()).unwrap();
    let left = disk.bootable_leftovers().unwrap();
    assert_eq!(left, Vec::<String>::new(), "the agent left a bootable disk");
    println!("offline deploy checked on the disk after {}", elapsed(t));
}
