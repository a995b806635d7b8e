//! Real, unmodified Ironic 39.0.0 with `[agent_containers]` set runs
//! container steps on the QEMU bed machine through the deploy ramdisk (its
//! crun, its agent), as `ironic_drives_ramdisk.rs` drives its machine
//! (`hardware_tests::bed::ironic_flow`):
//!
//! * Debian's docker-registry serves on the bed's bridge, over TLS with a
//!   CA the test makes, images built from Debian's busybox-static (umoci,
//!   skopeo) that write `$MARKER` at sector `$SECTOR` of `/dev/target`;
//! * the ramdisk gets the CA, a `[DEFAULT] cafile` file naming it and a
//!   steps file at IPA's default path through an extra initramfs archive
//!   appended to `deploy.initramfs` in Ironic's `http_root` (the kernel
//!   unpacks concatenated archives), so the pull is verified against the
//!   test's CA (no `--tls-verify=false` anywhere);
//! * a manual clean runs `generic_container_step` with the allowed image;
//!   Ironic's `run_options` pass the machine's disk as `--device
//!   /dev/vda:/dev/target` and the container's marker is found in the disk
//!   file after the machine is off;
//! * a manual clean with an image pushed to the registry but not allowed
//!   ends `clean failed` with IPA's message in `last_error`, and the
//!   registry never hears about that image;
//! * `provide` with automated cleaning runs Ironic's
//!   `erase_devices_metadata` (priority 10) and then the steps file's clean
//!   step (priority 5), as Ironic's log lists them;
//! * a deploy whose trait selects a deploy template runs the file's deploy
//!   step after `write_image`, and a servicing request of the `active` node
//!   (Ironic boots the ramdisk again, then the disk) runs its service step;
//! * the container is confined as podman confines it, on the ramdisk's
//!   cgroup v2: in the automated cleaning a second file step (priority 4)
//!   probes its isolation (`hardware_tests::registry::isolation_probe`)
//!   and writes the report to the disk: a second, small disk granted
//!   read-only (`--device /dev/vdb:/dev/ro:r`) reads but refuses a write,
//!   `/dev/kmsg` bind-mounted but not granted refuses a write, Seccomp 2
//!   with personality(ADDR_NO_RANDOMIZE) refused by the profile (ENOSYS),
//!   podman's capabilities, and the agent's `/v1/local/status` on loopback
//!   (TLS, through Debian's `openssl s_client` in the image) answers 401
//!   although the step shares the host's network.

use std::io::{Read, Seek, SeekFrom};
use std::path::Path;
use std::time::{Duration, Instant};

use agent_testkit::image_server::{Fault, ImageServer};
use hardware_tests::bed::ironic_flow::{self, Flow, Machine, PxeRoot};
use hardware_tests::bed::redfish::Bmc;
use hardware_tests::bed::{self, Bus, Disk, Net, NetOptions, Nic, VmSpec, BRIDGE_IP};
use hardware_tests::ironic::Ironic;
use hardware_tests::registry::{isolation_probe, openssl_root, probe_report, Registry};
use hardware_tests::{require_root, testimage};
use image_builder::cpio::{Entry, Writer};
use serde_json::{json, Value};

const MAC: &str = "52:54:00:1c:0a:3c";
const GUEST: &str = "10.99.0.63";
const PORT: u16 = 6385;
const MARKER: &str = "ironiccont-deployed-5e1d";
const FLOW_TIMEOUT: Duration = Duration::from_secs(420);
/// The images' script: writes $MARKER at sector $SECTOR of /dev/target.
const SCRIPT: &str = "/bin/busybox printf \"$MARKER\" | \
     /bin/busybox dd of=/dev/target bs=512 seek=\"$SECTOR\" conv=notrunc,fsync";
/// Where the CA lands in the ramdisk, and the file naming it as `cafile`.
const CA_PATH: &str = "etc/ironic-python-agent/container-registry-ca.crt";
const CA_CONF: &str = "etc/ironic-python-agent.d/container-registry-ca.conf";
/// IPA's default `[container] container_steps_file`.
const STEPS_PATH: &str = "etc/ironic-python-agent.d/mysteps.yaml";
/// Sectors of the markers: the generic step's and the clean step's inside
/// the first MiB (the clean step runs after the metadata erase), the
/// deploy and service steps' past the 64 MiB test image and before the
/// backup GPT of the 5 GiB disk (the agent wants 4 GiB for a root device).
const GENERIC: (&str, u64) = ("GENERIC-STEP", 1);
const CLEAN: (&str, u64) = ("CLEAN-FILE-STEP", 2);
const DEPLOY: (&str, u64) = ("DEPLOY-FILE-STEP", 900 * 2048);
const SERVICE: (&str, u64) = ("SERVICE-FILE-STEP", 900 * 2048 + 2);
/// The isolation probe's report: its marker line, then the report, at
/// sector 64 (after the metadata erase, like the clean step's).
const PROBE: (&str, u64) = ("PROBE-FILE-STEP", 64);
/// The agent's command API port in the ramdisk (no `ipa-listen-port`).
const AGENT_PORT: u16 = 9999;

/// The probe image's command: the report after its marker line, written
/// at `$SECTOR` of `/dev/target`.
fn probe_script() -> String {
    let probe = isolation_probe(Some((
        &format!("/usr/bin/openssl s_client -quiet -connect 127.0.0.1:{AGENT_PORT}"),
        &format!("/run/ironic-agent/local-status-{AGENT_PORT}.key"),
    )));
    format!(
        "{{ printf '%s\\n' \"$MARKER\"; {probe}; }} | \
         /bin/busybox dd of=/dev/target bs=512 seek=\"$SECTOR\" conv=notrunc,fsync"
    )
}

/// The steps-file step that runs the probe (cleaning, after the clean
/// step's priority 5).
fn probe_step(probe: &str) -> String {
    format!(
        "  - name: probe_isolation\n    image: {probe}\n    priority: 4\n    interface: deploy\n    \
         reboot_requested: false\n    abortable: true\n    \
         run_options: --rm --network=host --device /dev/vda:/dev/target --device /dev/vdb:/dev/ro:r \
         --volume /dev/kmsg:/dev/other --env MARKER={} --env SECTOR={}\n",
        PROBE.0, PROBE.1
    )
}

/// A steps-file step writing `marker` at `sector` of the machine's disk.
fn file_step(name: &str, tool: &str, priority: u32, (marker, sector): (&str, u64)) -> String {
    format!(
        "  - name: {name}\n    image: {tool}\n    priority: {priority}\n    interface: deploy\n    \
         reboot_requested: false\n    abortable: true\n    \
         run_options: --rm --network=host --device /dev/vda:/dev/target --env MARKER={marker} --env SECTOR={sector}\n"
    )
}

/// The extra initramfs archive (newc, gzip): the registry's CA, a
/// configuration file naming it as the agent's `cafile`, the steps file.
fn extra_initrd(ca: &[u8], steps: &str) -> Vec<u8> {
    let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    let mut w = Writer::new(gz, 0);
    for d in [
        "etc",
        "etc/ironic-python-agent",
        "etc/ironic-python-agent.d",
    ] {
        w.add(d, &Entry::Dir { mode: 0o755 }).unwrap();
    }
    let file = |data: &[u8]| Entry::File {
        mode: 0o644,
        data: data.to_vec(),
    };
    w.add(CA_PATH, &file(ca)).unwrap();
    let conf = format!("[DEFAULT]\ncafile = /{CA_PATH}\n");
    w.add(CA_CONF, &file(conf.as_bytes())).unwrap();
    w.add(STEPS_PATH, &file(steps.as_bytes())).unwrap();
    w.finish().unwrap().finish().unwrap()
}

/// The bytes of `disk` at `sector`, as long as `marker`.
fn sector(disk: &Path, (marker, sector): (&str, u64)) -> Vec<u8> {
    let mut f = std::fs::File::open(disk).unwrap();
    f.seek(SeekFrom::Start(sector * 512)).unwrap();
    let mut got = vec![0; marker.len()];
    f.read_exact(&mut got).unwrap();
    got
}

fn assert_marker(disk: &Path, m: (&str, u64), after: &str) {
    assert_eq!(
        String::from_utf8_lossy(&sector(disk, m)),
        m.0,
        "no {} marker at sector {} after {after}",
        m.0,
        m.1
    );
}

/// A failed flow's error, with where to look.
fn context(flow: &Flow<'_, '_>, what: &str, e: anyhow::Error) -> String {
    format!(
        "{what}: {e:#} (Ironic log {}, console {})",
        flow.ironic.log_path().display(),
        flow.machine.console_path().display()
    )
}

/// Ironic's log lines that mention `what`.
fn lines_with(log: &str, what: &str) -> String {
    log.lines()
        .filter(|l| l.contains(what))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn ironic_runs_container_steps_in_the_ramdisk() {
    require_root("the Ironic container step QEMU test");
    let total = Instant::now();
    let ramdisk = bed::ramdisk_dir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let image = testimage::build(work.path(), MARKER).unwrap();
    let sha = images_sha256(&image.raw);

    let net = Net::start(NetOptions {
        hosts: vec![(MAC.into(), GUEST.into())],
        ..NetOptions::ironic_ipxe("ironiccont", &ironic_flow::boot_script_url())
    })
    .unwrap();
    // The images' busybox, fetched before entering the namespace (which
    // has no route out).
    hardware_tests::debs::unpacked("busybox-static", &["busybox-static"]).unwrap();
    let openssl = openssl_root().unwrap();
    let (registry, tool, forbidden, probe, images) = net
        .ns
        .enter(|| {
            let registry = Registry::start_on(BRIDGE_IP)?;
            let tool =
                registry.push_busybox_image("tool:1", &["/bin/busybox", "sh", "-c", SCRIPT])?;
            let forbidden =
                registry.push_busybox_image("forbidden:1", &["/bin/busybox", "true"])?;
            let probe = registry.push_busybox_image_with(
                "probe:1",
                &["/bin/busybox", "sh", "-c", &probe_script()],
                Some(&openssl),
            )?;
            let images = ImageServer::start_on(format!("{BRIDGE_IP}:0").parse()?)?;
            anyhow::Ok((registry, tool, forbidden, probe, images))
        })
        .unwrap()
        .unwrap();
    images.route("/disk.raw", &image.raw, &[], Fault::None);
    let steps = format!(
        "steps:\n{}{}{}{}",
        file_step("write_clean_marker", &tool, 5, CLEAN),
        probe_step(&probe),
        file_step("write_deploy_marker", &tool, 0, DEPLOY),
        file_step("write_service_marker", &tool, 0, SERVICE),
    );
    let extra = extra_initrd(&std::fs::read(registry.ca_file()).unwrap(), &steps);

    let mut bmc = Bmc::start(&net).unwrap();
    let spec = VmSpec {
        disks: vec![
            Disk {
                path: work.path().join("disk0.img"),
                size: 5 << 30,
                bus: Bus::Virtio,
                serial: "ironiccont-disk0".into(),
                model: None,
            },
            Disk {
                // The probe's read-only grant (vdb; too small for a root device).
                path: work.path().join("disk1.img"),
                size: 16 << 20,
                bus: Bus::Virtio,
                serial: "ironiccont-disk1".into(),
                model: None,
            },
        ],
        nics: vec![Nic { mac: MAC.into() }],
        ..VmSpec::new("node")
    };
    let system = bmc.define(&spec).unwrap();
    bmc.start_emulator().unwrap();
    let pxe = PxeRoot::start_appending(&net, &ramdisk, &extra).unwrap();
    // No pull_options: the registry's certificate is verified.
    let conf = format!(
        "{}[agent_containers]\nallowed_containers = {tool}\n\
         run_options = --rm,--network=host,--device /dev/vda:/dev/target,--env MARKER={},--env SECTOR={}\n",
        ironic_flow::ironic_conf(pxe.dir(), ""),
        GENERIC.0,
        GENERIC.1,
    );
    let ironic = Ironic::start_in(&net.ns, BRIDGE_IP, PORT, Some(&conf))
        .expect("starting Ironic 39.0.0 in the namespace");
    let machine = Machine::new(&bmc, system, &spec.disks[0].path);
    println!("bed up in {:.1} s", total.elapsed().as_secs_f64());

    net.block_on(async {
        let uuid = ironic_flow::enroll(&ironic, &bmc, machine.system(), "ironiccont", MAC, "bios")
            .await
            .unwrap();
        let mut flow = Flow::new(&ironic, &uuid, machine, FLOW_TIMEOUT);
        allowed(&mut flow, &registry, &tool).await;
        refused(&mut flow, &registry, &forbidden).await;
        automated(&mut flow).await;
        deployed(&mut flow, &images.url("/disk.raw"), &sha).await;
        serviced(&mut flow).await;
    })
    .unwrap();
    println!("all: {:.1} s", total.elapsed().as_secs_f64());
}

/// Prints how long `what` took since `t`.
fn took(what: &str, t: Instant) {
    println!("{what} after {:.1} s", t.elapsed().as_secs_f64());
}

/// Flow 1: a manual clean with `generic_container_step` and the allowed image,
/// pulled over verified TLS: its marker on the disk.
async fn allowed(flow: &mut Flow<'_, '_>, registry: &Registry, tool: &str) {
    let t = Instant::now();
    let steps = json!([{"interface": "deploy", "step": "generic_container_step",
                        "args": {"container_url": tool}}]);
    let node = flow
        .manual_clean(steps)
        .await
        .unwrap_or_else(|e| panic!("{}", context(flow, "manual clean", e)));
    took("generic step, allowed image: manageable", t);
    assert!(node["last_error"].is_null(), "{}", node["last_error"]);
    assert_marker(flow.machine.disk(), GENERIC, "the generic step");
    let log = registry.log();
    assert!(
        log.lines()
            .any(|l| l.contains("oci-client") && l.contains("/v2/tool/manifests/1")),
        "the ramdisk's agent did not pull from the registry: {log}"
    );
}

/// Flow 2: a manual clean with `generic_container_step` and `image`, which is
/// in the registry but not allowed: `clean failed` with IPA's message, no
/// request about it at the registry; then back to `manageable`.
async fn refused(flow: &mut Flow<'_, '_>, registry: &Registry, image: &str) {
    let t = Instant::now();
    flow.ironic
        .provision(
            &flow.uuid,
            json!({"target": "clean", "clean_steps": [{"interface": "deploy",
                "step": "generic_container_step", "args": {"container_url": image}}]}),
        )
        .await
        .unwrap();
    let node: Value = flow
        .wait_for_any_target("clean failed", FLOW_TIMEOUT)
        .await
        .unwrap_or_else(|e| {
            panic!(
                "{}",
                context(flow, "the clean with an image not allowed", e)
            )
        });
    took("generic step, image not allowed: clean failed", t);
    let err = node["last_error"].as_str().unwrap_or_default();
    assert!(
        err.contains(&format!(
            "Container image {image} is not in [container]allowed_containers"
        )),
        "last_error: {err}"
    );
    let log = registry.log();
    assert!(
        !log.lines().any(|l| l.contains("/v2/forbidden/")
            && (l.contains("oci-client") || l.contains(&format!("remoteaddr=\"{GUEST}:")))),
        "the agent asked the registry about the image it must refuse: {log}"
    );
    // Ironic leaves the ramdisk running after a clean failure and the node
    // in maintenance (fault: clean failure): an operator powers it off.
    flow.power_off()
        .await
        .unwrap_or_else(|e| panic!("powering off after the failed clean: {e:#}"));
    flow.ironic.unset_maintenance(&flow.uuid).await.unwrap();
    flow.ironic
        .move_to(&flow.uuid, "manage", "manageable", Duration::from_secs(60))
        .await
        .unwrap();
}

/// Flow 3: `provide` with automated cleaning: Ironic's `erase_devices_metadata`
/// (priority 10), then the steps file's clean step at its priority 5.
async fn automated(flow: &mut Flow<'_, '_>) {
    let t = Instant::now();
    let node = flow
        .provide()
        .await
        .unwrap_or_else(|e| panic!("{}", context(flow, "provide", e)));
    took("provide (automated cleaning): available", t);
    assert!(node["last_error"].is_null(), "{}", node["last_error"]);
    assert_marker(flow.machine.disk(), CLEAN, "automated cleaning");
    let log = std::fs::read_to_string(flow.ironic.log_path()).unwrap();
    let steps = log
        .lines()
        .find(|l| l.contains("Executing automated cleaning") && l.contains("write_clean_marker"))
        .unwrap_or_else(|| {
            panic!(
                "no automated clean with write_clean_marker: {}",
                lines_with(&log, "cleaning")
            )
        });
    let (erase, file) = (
        steps.find("'step': 'erase_devices_metadata'"),
        steps.find("'step': 'write_clean_marker'"),
    );
    assert!(
        erase.is_some_and(|e| file.is_some_and(|f| e < f))
            && steps.contains("'priority': 5")
            && !steps.contains("write_deploy_marker"),
        "not erase_devices_metadata, then write_clean_marker at priority 5: {steps}"
    );
    assert!(
        log.contains("'ContainerHardwareManager': '2'"),
        "{}",
        lines_with(&log, "ContainerHardwareManager")
    );
    confined(flow.machine.disk());
}

/// The isolation probe's report, written to the disk in the automated
/// cleaning: podman's confinement on the ramdisk's cgroup v2.
fn confined(disk: &Path) {
    let mut f = std::fs::File::open(disk).unwrap();
    f.seek(SeekFrom::Start(PROBE.1 * 512)).unwrap();
    let mut buf = vec![0; 4096];
    f.read_exact(&mut buf).unwrap();
    let text = String::from_utf8_lossy(&buf);
    let text = text.trim_end_matches('\0');
    println!("isolation probe:\n{text}");
    assert!(text.starts_with(PROBE.0), "no probe report: {text:?}");
    let r = probe_report(text);
    let check = |name: &str| {
        r.get(name)
            .cloned()
            .unwrap_or_else(|| panic!("no {name}: {text}"))
    };
    let status = check("status").1;
    assert!(status.contains("Seccomp: 2"), "{status}");
    assert!(status.contains("NoNewPrivs: 1"), "{status}");
    assert!(status.contains("CapEff: 00000000800405fb"), "{status}");
    let p = check("personality");
    assert!(
        p.0 != 0 && p.1.contains("Function not implemented"),
        "{p:?}"
    );
    assert_eq!(check("ro-read").0, 0, "{text}");
    let w = check("ro-write");
    assert!(w.0 != 0 && w.1.contains("Operation not permitted"), "{w:?}");
    let u = check("ungranted");
    assert!(u.0 != 0 && u.1.contains("Operation not permitted"), "{u:?}");
    let l = check("local").1;
    assert!(
        l.contains(" 401 Unauthorized"),
        "refused, not unreachable: {l:?}"
    );
    assert!(check("keyfile").1.contains("No such file"), "{text}");
}

/// Flow 4: a deploy of the test image whose trait selects a deploy template
/// naming the file's deploy step (priority 50: after `write_image`'s 80).
async fn deployed(flow: &mut Flow<'_, '_>, url: &str, sha: &str) {
    let trait_ = "CUSTOM_CONTAINER_STEP";
    let step = json!([{"interface": "deploy", "step": "write_deploy_marker",
                       "priority": 50, "args": {}}]);
    flow.ironic
        .create_deploy_template(trait_, step)
        .await
        .unwrap();
    flow.ironic.set_traits(&flow.uuid, &[trait_]).await.unwrap();
    let t = Instant::now();
    let info = json!([
        {"op": "add", "path": "/instance_info/image_source", "value": url},
        {"op": "add", "path": "/instance_info/image_os_hash_algo", "value": "sha256"},
        {"op": "add", "path": "/instance_info/image_os_hash_value", "value": sha},
        {"op": "add", "path": "/instance_info/image_disk_format", "value": "raw"},
        {"op": "add", "path": "/instance_info/traits", "value": [trait_]},
    ]);
    let node = flow
        .deploy_with(info, None)
        .await
        .unwrap_or_else(|e| panic!("{}", context(flow, "deploy with the template", e)));
    assert!(node["last_error"].is_null(), "{}", node["last_error"]);
    flow.boot_disk_marker(MARKER, Duration::from_secs(180))
        .await
        .unwrap_or_else(|e| panic!("disk boot after the deploy: {e:#}"));
    took("deploy with the template: active and booted from disk", t);
    let disk = flow.machine.disk();
    assert_marker(disk, DEPLOY, "the deploy");
    assert_eq!(
        sector(disk, SERVICE),
        vec![0; SERVICE.0.len()],
        "the service step ran before servicing"
    );
}

/// Flow 5: a servicing request of the `active` node naming the file's service
/// step: Ironic boots the ramdisk, then the disk again (the deployed
/// system prints its marker and powers itself off).
async fn serviced(flow: &mut Flow<'_, '_>) {
    let t = Instant::now();
    let mark = flow.machine.console_len();
    let step = json!([{"interface": "deploy", "step": "write_service_marker", "args": {}}]);
    let node = flow
        .service(step)
        .await
        .unwrap_or_else(|e| panic!("{}", context(flow, "servicing", e)));
    assert!(node["last_error"].is_null(), "{}", node["last_error"]);
    let line = testimage::marker_line(MARKER);
    let deadline = Instant::now() + Duration::from_secs(180);
    while !flow.machine.console_since(mark).contains(&line) {
        assert!(
            Instant::now() < deadline,
            "no disk boot after servicing; console: {}",
            flow.machine.console_path().display()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    tokio::task::block_in_place(|| flow.machine.wait_shut_off(Duration::from_secs(60)))
        .unwrap_or_else(|e| panic!("after servicing: {e:#}"));
    took("servicing: active and booted from disk", t);
    assert_marker(flow.machine.disk(), SERVICE, "servicing");
    assert_marker(flow.machine.disk(), DEPLOY, "servicing");
}

/// The sha256 of the file at `path`, hex.
fn images_sha256(path: &Path) -> String {
    hardware_tests::images::sha256_hex(&std::fs::read(path).unwrap())
}
