//! Disk errors injected under real, unmodified Ironic 39.0.0 on the QEMU
//! bed: the PXE-booted deploy ramdisk in a libvirt domain behind the bed's
//! Redfish BMC (as in `ironic_drives_ramdisk.rs`), whose only disk (5 GiB,
//! virtio) goes through QEMU's `blkdebug` driver. QEMU reads the rule file
//! each time Ironic powers the domain on, so each ramdisk boot meets the
//! fault the test wrote there before:
//!
//! 1. **read error during a deploy**: `EIO` every time LBA 1 is read, the
//!    primary GPT header of the old image the disk holds (a bootable copy
//!    of the test image). The agent reads it when it erases the old
//!    signatures: Ironic must end in `deploy failed` with the agent's
//!    error in `last_error`, and the old tables must be gone all the same
//!    (sector 0 zeros, no signature libblkid knows);
//! 2. **write error during a deploy** (the old image put back first): `EIO`
//!    on the first write (`once`) that touches a sector holding image data
//!    past the first MiB. `deploy failed`, `last_error` naming the device,
//!    the byte where the failing write started and `Input/output error`;
//!    the disk must not boot anything: the agent wiped the old signatures
//!    before writing and zeroed both ends when the write failed;
//! 3. **write error during `erase_devices`** (a manual clean; Ironic's
//!    default of one random pass and a zero pass): `EIO` on the first
//!    write touching byte 256 MiB. `clean failed`, `last_error` naming the
//!    device, the span of at most 64 MiB holding the fault (the pass
//!    flushes every 64 MiB and stops at the first error) and `Input/output
//!    error`; the bytes before it are random (nothing of an image left).
//!
//! 4. **power cut during a deploy** (`POWER_CUTS`; `ci/faults` runs 5 with
//!    `DISK_FAULTS=power`, plain `cargo test` none, for `ci/test`'s time: each
//!    cut waits out Ironic's callback timeout, about 140 s; the old
//!    image put back first): the domain is destroyed (libvirt's `destroy`,
//!    power pulled) once the agent's own progress shows a seeded random
//!    number of image bytes (10-90 %) downloaded and written
//!    (`POWER_CUT_SEED=N` replays the points). Then Ironic hears nothing
//!    more; with `[conductor] deploy_callback_timeout` at 100 s here
//!    (1800 s by default) it fails the deploy: `deploy failed`, "Timeout
//!    reached while waiting for callback for node <uuid>". (Not tested
//!    here, read in Ironic 39's `get_node_with_token`: had the power come
//!    back, the rebooted ramdisk's lookup would get the `******`
//!    placeholder, a token having been issued already, so its heartbeats
//!    could not move the deploy on and the same timeout would end it.)
//! 5. **a redeploy on the same domain with no fault left** reaches
//!    `active`, the image's bytes are on the disk (but for the GPT copies
//!    the agent rewrites) and the disk boots the image's marker. The BMC
//!    cannot make a disk first that libvirt does not describe (sushy-tools:
//!    "Target libvirt device Hdd does not exist"), so this deploy runs with
//!    Ironic's `noop` management interface and the disk file is booted in a
//!    plain machine afterwards.
//!
//! After every fault the disk file is booted in a plain SeaBIOS machine
//! (`bed::disk_boot`): it must say "No bootable device.", not show the
//! image's marker (the old image's signatures were erased before writing,
//! the new image's first MiB is held back until its checksum matched, and
//! a failed write zeroes both ends).
//!
//! `DISK_FAULTS=read` (`ci/faults`) runs 1, then, with Ironic erasing by
//! the zero pass only, **a read error during `erase_devices`**: `EIO` every
//! time a sector in the last MiB is read, which the agent reads back after
//! zeroing; `clean failed` naming the device and the byte where the failed
//! read started.
//!
//! `DISK_FAULTS=power` (`ci/faults`) runs only the power cuts (5 unless
//! `POWER_CUTS` says), then **the conductor killed in `deploying`**: the
//! BMC is frozen (SIGSTOP to sushy-emulator) once the deploy waits for the
//! agent, so after the agent's write Ironic's `prepare_instance_boot`
//! blocks in its first Redfish call with the node locked in `deploying`;
//! every Ironic process is SIGKILLed there, the BMC thawed and Ironic
//! started again on the same database. Ironic 39 fails the transient
//! states it finds on start (`base_manager._correct_stuck_states`): `deploy
//! failed`, "The deploying state can't be resumed by conductor
//! test-conductor. Moving to fail state."; the agent, never told to power
//! off, still serves and lists its write as succeeded. Then 5.
//!
//! After each disk error the ramdisk still runs (Ironic 39 powers a node
//! off neither after a failed deploy step nor after a failed clean step):
//! its API answers, it lists the failed command with the same error, and
//! Ironic collected its logs after the failure (a call the agent had to
//! serve).

use std::io::Write as _;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agent_testkit::image_server::{Fault, ImageServer};
use hardware_tests::bed::deploy::write_progress;
use hardware_tests::bed::disk_boot::{boot_disk_file, Booted};
use hardware_tests::bed::ironic_flow::{self, command_list, Flow, Machine, PxeRoot};
use hardware_tests::bed::redfish::Bmc;
use hardware_tests::bed::{self, Bus, Disk, Net, NetOptions, Nic, VmSpec, BRIDGE_IP};
use hardware_tests::ironic::Ironic;
use hardware_tests::testimage::TestImage;
use hardware_tests::{require_root, testimage};
use serde_json::{json, Value};

const MAC: &str = "52:54:00:1c:0b:01";
const GUEST: &str = "10.99.0.51";
const DISK_GIB: u64 = 5;
const PORT: u16 = 6385;
const MARKER: &str = "faultsdisk-deployed-51c2";
/// Where `erase_devices`' random pass meets its write error.
const ERASE_FAULT_BYTE: u64 = 256 << 20;
/// What one wait for a flow may take: a PXE boot under TCG plus the step.
const FLOW_TIMEOUT: Duration = Duration::from_secs(300);
/// Ironic's `[conductor] deploy_callback_timeout` here (default 1800 s):
/// how long a node stays in `wait call-back` without a heartbeat before
/// Ironic fails the deploy. Above a PXE boot under TCG (power-on to first
/// heartbeat took 30-50 s here), so only a dead machine meets it.
const CALLBACK_TIMEOUT_SECS: u64 = 100;
/// What a plain QEMU may take to boot the disk file to the marker or to
/// the firmware's "nothing to boot".
const DISK_BOOT_TIMEOUT: Duration = Duration::from_secs(180);

fn elapsed(t: Instant) -> String {
    format!("{:.1} s", t.elapsed().as_secs_f64())
}

fn sha256(path: &Path) -> String {
    let data = std::fs::read(path).unwrap();
    ring::digest::digest(&ring::digest::SHA256, &data)
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// libblkid's signatures on the disk file (empty: none).
fn disk_signatures(path: &Path) -> String {
    let out = Command::new("wipefs")
        .args(["--no-act", "--noheadings"])
        .arg(path)
        .output()
        .unwrap();
    assert!(out.status.success(), "wipefs: {out:?}");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn read_at(path: &Path, offset: u64, len: usize) -> Vec<u8> {
    let mut buf = vec![0u8; len];
    std::fs::File::open(path)
        .unwrap()
        .read_exact_at(&mut buf, offset)
        .unwrap();
    buf
}

/// The first 512-byte sector at or past `from` holding a non-zero byte.
fn first_data_sector(image: &Path, from: u64) -> u64 {
    let data = std::fs::read(image).unwrap();
    let at = data[from as usize..]
        .iter()
        .position(|b| *b != 0)
        .expect("image data past the first MiB");
    (from + at as u64) / 512
}

/// One `blkdebug` rule file: `EIO` on the first `iotype` request (`read`
/// or `write`) touching `sector`, once or every time. (Without `iotype` a
/// write rule also fails reads: the agent's probe of the old signatures
/// would meet it first.)
fn rules(iotype: &str, sector: u64, once: bool) -> String {
    format!(
        "[inject-error]\nevent = \"{iotype}_aio\"\niotype = \"{iotype}\"\nerrno = \"5\"\nsector = \"{sector}\"\nonce = \"{}\"\n",
        if once { "on" } else { "off" }
    )
}

/// The number in the agent's message right after `what`.
fn named_byte(err: &str, what: &str) -> u64 {
    let at = err
        .find(what)
        .unwrap_or_else(|| panic!("no '{what}' in: {err}"));
    err[at + what.len()..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect::<String>()
        .parse()
        .unwrap_or_else(|e| panic!("no byte after '{what}' in {err}: {e}"))
}

/// The agent as the conductor calls it, from what Ironic stored at its
/// heartbeat (captured while the step runs: Ironic wipes the token when a
/// step fails).
///
/// Once Ironic has wiped the token, the agent's next heartbeat is refused
/// and it looks up again with a fresh command list (as a new operation
/// would start it), so the list the conductor saw may be gone by the time
/// the test reads it. A watcher therefore reads the list every 200 ms from
/// the capture on and keeps the last one the agent served.
struct AgentApi {
    url: String,
    http: reqwest::Client,
    token: String,
    seen: Arc<Mutex<Vec<Value>>>,
    watcher: tokio::task::JoinHandle<()>,
}

impl Drop for AgentApi {
    fn drop(&mut self) {
        self.watcher.abort();
    }
}

impl AgentApi {
    async fn capture(ironic: &Ironic, uuid: &str) -> Self {
        let deadline = Instant::now() + FLOW_TIMEOUT;
        loop {
            let info = ironic.stored_driver_internal_info(uuid).unwrap();
            if let (Some(url), Some(token), Some(ca)) = (
                info["agent_url"].as_str(),
                info["agent_secret_token"].as_str(),
                info["agent_verify_ca"].as_str(),
            ) {
                let http = agent_base::tls::http_client(
                    false,
                    Some(Path::new(ca)),
                    Duration::from_secs(10),
                )
                .unwrap();
                let seen = Arc::new(Mutex::new(Vec::new()));
                let watcher = tokio::spawn(watch_commands(
                    http.clone(),
                    url.to_string(),
                    token.to_string(),
                    seen.clone(),
                ));
                return Self {
                    url: url.to_string(),
                    http,
                    token: token.to_string(),
                    seen,
                    watcher,
                };
            }
            assert!(
                Instant::now() < deadline,
                "the agent never heartbeated: {info}"
            );
            // Often: a fault that fails the step at once leaves only the
            // second or so between the first heartbeat and Ironic wiping
            // the agent's URL and token (the agent heartbeats 1 s after a
            // step ends).
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The agent's command list as the conductor read it: the live list
    /// while the captured token holds, else the watcher's last copy.
    async fn commands(&self) -> Vec<Value> {
        match command_list(&self.http, &self.url, &self.token).await {
            Ok(list) => list,
            Err(e) if e.status() == Some(reqwest::StatusCode::UNAUTHORIZED) => {
                println!("the agent looked up again (token refused): its last list before that");
                self.seen.lock().unwrap().clone()
            }
            Err(e) => panic!("the agent's command list: {e}"),
        }
    }

    /// The agent still serves: `/v1/status` answers, and its command list
    /// holds `command` failed with an error containing `needle`, and the
    /// conductor's `collect_system_logs` after it succeeded.
    async fn still_serving(&self, command: &str, needle: &str) {
        let status = self
            .http
            .get(format!("{}/v1/status", self.url))
            .send()
            .await
            .unwrap_or_else(|e| panic!("the agent's API after the fault: {e}"));
        assert!(status.status().is_success(), "{status:?}");
        let commands = self.commands().await;
        let failed = commands
            .iter()
            .find(|c| c["command_name"] == json!(command))
            .unwrap_or_else(|| {
                let names: Vec<String> = commands
                    .iter()
                    .map(|c| format!("{} {}", c["command_name"], c["command_status"]))
                    .collect();
                panic!("no {command} among the agent's commands: {names:?}")
            });
        assert_eq!(failed["command_status"], json!("FAILED"), "{failed}");
        let err = failed["command_error"].to_string();
        assert!(err.contains(needle), "{needle:?} not in {err}");
        let logs = commands.iter().any(|c| {
            c["command_name"] == json!("collect_system_logs")
                && c["command_status"] == json!("SUCCEEDED")
        });
        assert!(logs, "no successful collect_system_logs after the failure");
    }
}

/// Copies the agent's command list into `seen` every 200 ms until the
/// token is refused (the agent looked up again) or the watcher is dropped.
async fn watch_commands(
    http: reqwest::Client,
    url: String,
    token: String,
    seen: Arc<Mutex<Vec<Value>>>,
) {
    loop {
        match command_list(&http, &url, &token).await {
            Ok(list) => *seen.lock().unwrap() = list,
            Err(e) if e.status() == Some(reqwest::StatusCode::UNAUTHORIZED) => return,
            Err(_) => {}
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[test]
fn disk_errors_during_deploy_and_erase_fail_closed_in_real_ironic() {
    require_root("the disk-fault QEMU test");
    let total = Instant::now();
    let read_mode = std::env::var("DISK_FAULTS").is_ok_and(|v| v == "read");
    let power_mode = std::env::var("DISK_FAULTS").is_ok_and(|v| v == "power");
    let ramdisk = bed::ramdisk_dir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let image = testimage::build(work.path(), MARKER).unwrap();
    let sha = sha256(&image.raw);
    let data_sector = first_data_sector(&image.raw, 2 << 20);
    println!("image data sector for the deploy write error: {data_sector}");

    let net = Net::start(NetOptions {
        hosts: vec![(MAC.into(), GUEST.into())],
        ..NetOptions::ironic_ipxe("faultsdisk", &ironic_flow::boot_script_url())
    })
    .unwrap();
    let images = net
        .ns
        .enter(|| ImageServer::start_on(format!("{BRIDGE_IP}:0").parse().unwrap()))
        .unwrap()
        .unwrap();
    images.route("/disk.raw", &image.raw, &[], Fault::None);

    // The disk: the image on it already (old content that boots), behind
    // blkdebug.
    let disk = work.path().join("disk0.img");
    let blkdebug = work.path().join("blkdebug.conf");
    std::fs::write(&blkdebug, "").unwrap();
    std::fs::File::create(&disk)
        .and_then(|f| f.set_len(DISK_GIB << 30))
        .unwrap();
    seed(&image.raw, &disk);
    assert!(!disk_signatures(&disk).is_empty());
    let mut bmc = Bmc::start(&net).unwrap();
    let spec = VmSpec {
        disks: vec![Disk {
            path: disk.clone(),
            size: DISK_GIB << 30,
            bus: Bus::Virtio,
            serial: "faultsdisk0".into(),
            model: None,
        }],
        nics: vec![Nic { mac: MAC.into() }],
        blkdebug: Some(blkdebug.clone()),
        ..VmSpec::new("node")
    };
    let system = bmc.define(&spec).unwrap();
    bmc.start_emulator().unwrap();
    let pxe = PxeRoot::start(&net, &ramdisk).unwrap();
    let ironic = Ironic::start_in(
        &net.ns,
        BRIDGE_IP,
        PORT,
        Some(&format!(
            "{}[conductor]\ndeploy_callback_timeout = {CALLBACK_TIMEOUT_SECS}\n{}",
            ironic_flow::ironic_conf(pxe.dir(), ""),
            if read_mode {
                // erase_devices: the zero pass (BLKZEROOUT) and its
                // read-back only, no random pass over 5 GiB under TCG.
                "[deploy]\nshred_random_overwrite_iterations = 0\n"
            } else {
                ""
            }
        )),
    )
    .expect("starting Ironic 39.0.0 in the namespace");
    println!("bed and Ironic up in {}", elapsed(total));
    let machine = Machine::new(&bmc, system, &disk);

    net.block_on(async {
        let uuid = ironic_flow::enroll(&ironic, &bmc, machine.system(), "faultsdisk", MAC, "bios")
            .await
            .unwrap();
        let mut flow = Flow::new(&ironic, &uuid, machine, FLOW_TIMEOUT);
        let deploy_info = json!([
            {"op": "add", "path": "/instance_info/image_source", "value": images.url("/disk.raw")},
            {"op": "add", "path": "/instance_info/image_os_hash_algo", "value": "sha256"},
            {"op": "add", "path": "/instance_info/image_os_hash_value", "value": sha},
            {"op": "add", "path": "/instance_info/image_disk_format", "value": "raw"},
        ]);
        // DISK_FAULTS=power: the power cuts and the conductor kill only.
        if !power_mode {
            let mut logs = 0;
            // 1. A read error under the old image's GPT header.
            deploy_read_fault(&mut flow, &net, &uuid, deploy_info.clone(), &blkdebug, &disk).await;
            logs += 1;
            if read_mode {
                erase_read_fault(&mut flow, &net, &uuid, &blkdebug, &disk).await;
                return;
            }
            // The old image on the disk again (Ironic powered the machine off).
            seed(&image.raw, &disk);

            // 2. A write error while the image is written.
            let t = Instant::now();
            std::fs::write(&blkdebug, rules("write", data_sector, true)).unwrap();
            ironic
                .move_to(&uuid, "deleted", "available", Duration::from_secs(120))
                .await
                .unwrap();
            flow.start_deploy(deploy_info.clone(), None).await.unwrap();
            let agent = AgentApi::capture(&ironic, &uuid).await;
            let node = flow
                .wait_for_any_target("deploy failed", FLOW_TIMEOUT)
                .await
                .unwrap_or_else(|e| panic!("deploy with a write error: {e:#}"));
            let err = node["last_error"].as_str().unwrap_or_default().to_string();
            println!("write error in a deploy ({}): last_error = {err}", elapsed(t));
            assert!(err.contains("write_image"), "{err}");
            assert!(err.contains("writing /dev/vda"), "{err}");
            assert!(err.contains("Input/output error"), "{err}");
            let at = named_byte(&err, "writing at byte ");
            let fault = data_sector * 512;
            assert!(
                at <= fault && fault < at + (4 << 20),
                "the failed write starts at {at}, the fault is at {fault}: {err}"
            );
            agent
                .still_serving("execute_deploy_step", "writing at byte")
                .await;
            logs += 1;
            assert_eq!(ironic.deploy_logs().len(), logs, "agent logs collected");
            flow.power_off().await.unwrap();
            assert_no_bootable_image(&net, &disk, "after the deploy's write error");
            assert_eq!(read_at(&disk, 0, 512), vec![0u8; 512]);
            println!("fault 2 (deploy, write) done in {}", elapsed(t));

            // 3. A write error in erase_devices' random pass.
            let t = Instant::now();
            std::fs::write(&blkdebug, rules("write", ERASE_FAULT_BYTE / 512, true)).unwrap();
            ironic
                .move_to(&uuid, "deleted", "available", Duration::from_secs(120))
                .await
                .unwrap();
            ironic
                .move_to(&uuid, "manage", "manageable", Duration::from_secs(60))
                .await
                .unwrap();
            ironic
                .provision(
                    &uuid,
                    json!({"target": "clean", "clean_steps": [{"interface": "deploy", "step": "erase_devices"}]}),
                )
                .await
                .unwrap();
            let agent = AgentApi::capture(&ironic, &uuid).await;
            let node = flow
                .wait_for_any_target("clean failed", FLOW_TIMEOUT)
                .await
                .unwrap_or_else(|e| panic!("erase with a write error: {e:#}"));
            let err = node["last_error"].as_str().unwrap_or_default().to_string();
            println!("write error in erase_devices ({}): last_error = {err}", elapsed(t));
            assert!(err.contains("erase_devices"), "{err}");
            assert!(err.contains("/dev/vda"), "{err}");
            assert!(err.contains("Input/output error"), "{err}");
            // The pass flushes every 64 MiB: the message names the span
            // written since the last good flush, which holds the fault.
            let from = named_byte(&err, "writing bytes ");
            let to = named_byte(&err, &format!("writing bytes {from} to "));
            assert!(
                from <= ERASE_FAULT_BYTE && ERASE_FAULT_BYTE < to && to - from <= 64 << 20,
                "the failed span is {from}..{to}, the fault is at {ERASE_FAULT_BYTE}: {err}"
            );
            agent
                .still_serving("execute_clean_step", "Input/output error")
                .await;
            logs += 1;
            assert_eq!(ironic.deploy_logs().len(), logs, "agent logs collected");
            flow.power_off().await.unwrap();
            assert_no_bootable_image(&net, &disk, "after the erase's write error");
            let head = read_at(&disk, 0, 1 << 20);
            let old = read_at(&image.raw, 0, 1 << 20);
            assert_ne!(head, old, "the erase wrote nothing before the fault");
            println!("fault 3 (erase_devices, write) done in {}", elapsed(t));
        }

        // 4. Power cut while the image is written, at seeded random points.
        let seed = std::env::var("POWER_CUT_SEED")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| fastrand::u64(..));
        let cuts: usize = std::env::var("POWER_CUTS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(if power_mode { 5 } else { 0 });
        println!("power cuts: {cuts}, POWER_CUT_SEED={seed}");
        let mut rng = fastrand::Rng::with_seed(seed);
        for n in 1..=cuts {
            // Between 10 % and 90 % of the image downloaded (the agent
            // writes as it downloads; the first MiB is held back).
            let kill_at = rng.u64(image.size / 10..=image.size * 9 / 10);
            power_cut(&mut flow, &bmc, &net, deploy_info.clone(), &image, &blkdebug, kill_at, n)
                .await;
        }

        // 5. The conductor killed while it holds the node in `deploying`
        // (DISK_FAULTS=power, `ci/faults`).
        if power_mode {
            conductor_killed_while_deploying(&mut flow, &bmc, deploy_info.clone(), &blkdebug)
                .await;
        }

        // 6. The same domain, no fault left: a redeploy reaches `active`,
        // the image is on the disk and the disk boots it.
        let t = Instant::now();
        std::fs::write(&blkdebug, "").unwrap();
        to_available(&ironic, &uuid).await;
        // The BMC cannot make a disk first that libvirt does not describe
        // (sushy-tools: "Target libvirt device Hdd does not exist"), so
        // Ironic manages the boot device with `noop` for this deploy: the
        // domain network-boots the ramdisk as before, and the disk file is
        // booted in a plain machine afterwards.
        ironic
            .patch(
                &uuid,
                json!([{"op": "replace", "path": "/management_interface", "value": "noop"}]),
            )
            .await
            .unwrap();
        flow.start_deploy(deploy_info.clone(), None).await.unwrap();
        let node = flow
            .wait_for("active", FLOW_TIMEOUT)
            .await
            .unwrap_or_else(|e| panic!("the deploy after the faults: {e:#}"));
        assert!(node["last_error"].is_null(), "{}", node["last_error"]);
        flow.power_off().await.unwrap();
        assert_image_on_disk(&image.raw, &disk);
        let (booted, after) =
            boot_disk_file(&net, "healthy-boot", &disk, MARKER, DISK_BOOT_TIMEOUT).unwrap();
        assert_eq!(booted, Booted::Marker, "the deployed disk");
        println!(
            "deploy after the faults: active and the disk boots the image (marker {:.1} s after power-on; {} in all)",
            after.as_secs_f64(),
            elapsed(t)
        );
    })
    .unwrap();
    println!("disk faults: {}", elapsed(total));
    let _ = std::io::stdout().flush();
}

/// Nothing on `disk` a firmware would boot: no MBR boot signature, no
/// signature libblkid knows (partition tables, filesystems), and booted in
/// a plain SeaBIOS machine it shows SeaBIOS's "No bootable device.", not
/// the image's marker.
fn assert_no_bootable_image(net: &Net, disk: &Path, when: &str) {
    let left = disk_signatures(disk);
    assert!(left.is_empty(), "{when}: signatures left: {left}");
    let mbr = read_at(disk, 0, 512);
    assert_ne!(&mbr[510..], &[0x55, 0xaa], "{when}: an MBR boot signature");
    let (booted, after) = boot_disk_file(net, "faulted-boot", disk, MARKER, DISK_BOOT_TIMEOUT)
        .unwrap_or_else(|e| panic!("{when}: booting the disk: {e:#}"));
    assert!(
        matches!(booted, Booted::Nothing(_)),
        "{when}: the disk booted: {booted:?}"
    );
    println!(
        "{when}: the disk boots nothing ({booted:?} {:.1} s after power-on)",
        after.as_secs_f64()
    );
}

/// The image's bytes on `disk`, but for its primary GPT header and
/// entries (LBA 1-33) and its backup GPT (the last 33 sectors), which the
/// agent rewrites when it moves the backup GPT to the disk's end.
fn assert_image_on_disk(image: &Path, disk: &Path) {
    let img = std::fs::read(image).unwrap();
    let on_disk = read_at(disk, 0, img.len());
    let (from, to) = (34 * 512, img.len() - 33 * 512);
    assert!(
        img[..446] == on_disk[..446] && img[from..to] == on_disk[from..to],
        "the disk does not hold the image's bytes"
    );
}

/// The conductor killed (SIGKILL to every Ironic process) while it holds
/// the node in `deploying`, a transient state: the BMC is frozen once the
/// deploy waits for the agent, so after the agent's write Ironic's next
/// deploy step blocks in its first Redfish call with the node locked.
/// Ironic 39 on start fails the transient states it finds
/// (`base_manager._correct_stuck_states`): the node must be `deploy
/// failed` with that reason, and the agent, which finished its write and
/// was never told to power off, must still serve.
async fn conductor_killed_while_deploying(
    flow: &mut Flow<'_, '_>,
    bmc: &Bmc<'_>,
    deploy_info: Value,
    blkdebug: &Path,
) {
    let ironic = flow.ironic;
    let uuid = flow.uuid.clone();
    let t = Instant::now();
    std::fs::write(blkdebug, "").unwrap();
    to_available(ironic, &uuid).await;
    flow.start_deploy(deploy_info, None).await.unwrap();
    bmc.freeze().unwrap();
    let agent = AgentApi::capture(ironic, &uuid).await;
    let held = |node: &Value| {
        node["provision_state"] == json!("deploying")
            && !node["reservation"].is_null()
            && !matches!(
                node["deploy_step"]["step"].as_str(),
                None | Some("deploy" | "write_image")
            )
    };
    let node = loop {
        let node = ironic.node(&uuid).await.unwrap();
        if held(&node) {
            // Still there a moment later: held inside the step.
            tokio::time::sleep(Duration::from_secs(2)).await;
            let again = ironic.node(&uuid).await.unwrap();
            if held(&again) && again["deploy_step"] == node["deploy_step"] {
                break again;
            }
            continue;
        }
        let state = node["provision_state"].as_str().unwrap_or_default();
        assert!(
            !state.ends_with("failed"),
            "{state}: {}",
            node["last_error"]
        );
        assert!(
            t.elapsed() < FLOW_TIMEOUT,
            "never held in `deploying`: {node}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    println!(
        "conductor: node held in `deploying` at step {} (reservation {}); killing Ironic",
        node["deploy_step"]["step"], node["reservation"]
    );
    ironic.kill().unwrap();
    bmc.thaw().unwrap();
    let down = Instant::now();
    tokio::task::block_in_place(|| ironic.restart()).unwrap();
    println!("conductor: Ironic restarted in {}", elapsed(down));
    let node = flow
        .wait_for_any_target("deploy failed", Duration::from_secs(120))
        .await
        .unwrap_or_else(|e| panic!("the node after the conductor restart: {e:#}"));
    let err = node["last_error"].as_str().unwrap_or_default().to_string();
    println!("conductor: `deploy failed`: last_error = {err}");
    assert!(
        err.contains("The deploying state can't be resumed by conductor"),
        "{err}"
    );
    // The agent still serves, its write done.
    let commands = command_list(&agent.http, &agent.url, &agent.token)
        .await
        .unwrap_or_else(|e| panic!("the agent's API after the conductor restart: {e}"));
    let write = commands
        .iter()
        .find(|c| c["command_name"] == json!("execute_deploy_step"))
        .unwrap_or_else(|| panic!("no execute_deploy_step: {commands:?}"));
    assert_eq!(write["command_status"], json!("SUCCEEDED"), "{write}");
    println!("conductor killed in `deploying`: done in {}", elapsed(t));
}

/// The node's `last_error` once Ironic's worker has set it and released
/// the node: Ironic 39 moves a timed-out node to `deploy failed` first and
/// records the reason in the worker it spawns for the clean-up.
async fn last_error_settled(ironic: &Ironic, uuid: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let node = ironic.node(uuid).await.unwrap();
        let err = node["last_error"].as_str().unwrap_or_default();
        if !err.is_empty() && node["reservation"].is_null() {
            return err.to_string();
        }
        assert!(
            Instant::now() < deadline,
            "no last_error 60 s after the failure: {node}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Takes the node to `available` from where the last fault left it.
async fn to_available(ironic: &Ironic, uuid: &str) {
    let node = ironic.node(uuid).await.unwrap();
    let state = node["provision_state"].as_str().unwrap_or_default();
    match state {
        "available" => {}
        "deploy failed" | "active" => {
            ironic
                .move_to(uuid, "deleted", "available", Duration::from_secs(120))
                .await
                .unwrap();
        }
        "clean failed" | "manageable" => {
            // A failed clean put the node in maintenance.
            if node["maintenance"] == json!(true) {
                ironic.unset_maintenance(uuid).await.unwrap();
            }
            if state == "clean failed" {
                ironic
                    .move_to(uuid, "manage", "manageable", Duration::from_secs(60))
                    .await
                    .unwrap();
            }
            ironic
                .move_to(uuid, "provide", "available", Duration::from_secs(60))
                .await
                .unwrap();
        }
        other => panic!("the node is {other:?}, not where a fault leaves it"),
    }
}

/// A power cut while the agent writes the image: the old image on the
/// disk, a deploy, and the domain destroyed (libvirt's `destroy`: power
/// pulled) once the agent's progress shows `kill_at` bytes of the image
/// downloaded, still writing. The disk must boot nothing (the old image's
/// signatures were erased before writing, the new one's first MiB is held
/// back until the checksum matched), and Ironic, hearing nothing more,
/// must fail the deploy at its callback timeout with that reason.
#[allow(clippy::too_many_arguments)]
async fn power_cut(
    flow: &mut Flow<'_, '_>,
    bmc: &Bmc<'_>,
    net: &Net,
    deploy_info: Value,
    image: &TestImage,
    blkdebug: &Path,
    kill_at: u64,
    n: usize,
) {
    let ironic = flow.ironic;
    let uuid = flow.uuid.clone();
    let disk = flow.machine.disk().to_path_buf();
    let domain = flow.machine.system().name.clone();
    let t = Instant::now();
    std::fs::write(blkdebug, "").unwrap();
    seed(&image.raw, &disk);
    to_available(ironic, &uuid).await;
    flow.start_deploy(deploy_info, None).await.unwrap();
    let agent = AgentApi::capture(ironic, &uuid).await;
    let progress = loop {
        // A failed read (the agent busy) is tried again.
        let commands = command_list(&agent.http, &agent.url, &agent.token)
            .await
            .unwrap_or_default();
        if let Some(p) = write_progress(&commands) {
            let downloaded = p["bytes_downloaded"].as_u64().unwrap_or(0);
            if p["phase"] == json!("writing") && downloaded >= kill_at {
                bmc.virsh(&["destroy", &domain]).unwrap();
                break p;
            }
            assert!(
                matches!(p["phase"].as_str(), Some("preparing" | "writing")),
                "cut {n}: the write reached {} before byte {kill_at} (seed printed above): {p}",
                p["phase"]
            );
        }
        let ended = commands.iter().any(|c| {
            c["command_name"] == json!("execute_deploy_step")
                && c["command_status"] != json!("RUNNING")
        });
        assert!(
            !ended,
            "cut {n}: the write ended before byte {kill_at}: {commands:?}"
        );
        assert!(t.elapsed() < FLOW_TIMEOUT, "cut {n}: no write progress");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let cut_at = t.elapsed();
    println!(
        "cut {n}: power pulled at {} downloaded / {} written of {} (kill point {kill_at})",
        progress["bytes_downloaded"], progress["bytes_written"], image.size
    );
    flow.machine.wait_shut_off(Duration::from_secs(30)).unwrap();
    assert_no_bootable_image(net, &disk, &format!("after power cut {n}"));
    assert_eq!(read_at(&disk, 0, 512), vec![0u8; 512]);
    flow.wait_for_any_target(
        "deploy failed",
        Duration::from_secs(CALLBACK_TIMEOUT_SECS + 120),
    )
    .await
    .unwrap_or_else(|e| panic!("cut {n}: Ironic after the power cut: {e:#}"));
    let err = last_error_settled(ironic, &uuid).await;
    println!(
        "cut {n}: `deploy failed` {:.1} s after the cut: last_error = {err}",
        (t.elapsed() - cut_at).as_secs_f64()
    );
    assert!(
        err.contains("Timeout reached while waiting for callback") && err.contains(&uuid),
        "{err}"
    );
    println!("power cut {n} done in {}", elapsed(t));
}

/// A read error during a deploy, every time LBA 1 is read: the primary
/// GPT header of the old image on the disk, which the agent reads when it
/// erases the old signatures. The deploy must fail before writing, naming
/// the device and the error, and the old tables must be gone all the same.
async fn deploy_read_fault(
    flow: &mut Flow<'_, '_>,
    net: &Net,
    uuid: &str,
    deploy_info: Value,
    blkdebug: &Path,
    disk: &Path,
) {
    let ironic = flow.ironic;
    let t = Instant::now();
    std::fs::write(blkdebug, rules("read", 1, false)).unwrap();
    ironic
        .move_to(uuid, "provide", "available", Duration::from_secs(60))
        .await
        .unwrap();
    flow.start_deploy(deploy_info, None).await.unwrap();
    let agent = AgentApi::capture(ironic, uuid).await;
    let node = flow
        .wait_for_any_target("deploy failed", FLOW_TIMEOUT)
        .await
        .unwrap_or_else(|e| panic!("deploy with a read error: {e:#}"));
    let err = node["last_error"].as_str().unwrap_or_default().to_string();
    println!(
        "read error in a deploy ({}): last_error = {err}",
        elapsed(t)
    );
    assert!(
        err.contains("write_image")
            && err.contains("writing /dev/vda: erasing old metadata")
            && err.contains("Input/output error"),
        "{err}"
    );
    assert!(err.contains("zeroed anyway"), "{err}");
    agent
        .still_serving("execute_deploy_step", "Input/output error")
        .await;
    flow.power_off().await.unwrap();
    assert_no_bootable_image(net, disk, "after the deploy's read error");
    assert_eq!(read_at(disk, 0, 512), vec![0u8; 512]);
    println!("fault (deploy, read) done in {}", elapsed(t));
}

/// `DISK_FAULTS=read` (`ci/faults`; Ironic erases with the zero pass only):
/// a read error during `erase_devices`, every time a sector in the last MiB
/// is read, which the agent reads back after zeroing. The clean must fail
/// naming the device and the byte where the failed read started.
async fn erase_read_fault(
    flow: &mut Flow<'_, '_>,
    net: &Net,
    uuid: &str,
    blkdebug: &Path,
    disk: &Path,
) {
    let ironic = flow.ironic;
    let t = Instant::now();
    let size = DISK_GIB << 30;
    let fault = size - (512 << 10);
    std::fs::write(blkdebug, rules("read", fault / 512, false)).unwrap();
    ironic
        .move_to(uuid, "deleted", "available", Duration::from_secs(120))
        .await
        .unwrap();
    ironic
        .move_to(uuid, "manage", "manageable", Duration::from_secs(60))
        .await
        .unwrap();
    ironic
        .provision(
            uuid,
            json!({"target": "clean", "clean_steps": [{"interface": "deploy", "step": "erase_devices"}]}),
        )
        .await
        .unwrap();
    let agent = AgentApi::capture(ironic, uuid).await;
    let node = flow
        .wait_for_any_target("clean failed", FLOW_TIMEOUT)
        .await
        .unwrap_or_else(|e| panic!("erase with a read error: {e:#}"));
    let err = node["last_error"].as_str().unwrap_or_default().to_string();
    println!(
        "read error in erase_devices ({}): last_error = {err}",
        elapsed(t)
    );
    assert!(
        err.contains("/dev/vda") && err.contains("Input/output error"),
        "{err}"
    );
    let at = named_byte(&err, "reading back at byte ");
    assert!(
        at <= fault && fault < at + (1 << 20),
        "read at {at}, fault at {fault}: {err}"
    );
    agent
        .still_serving("execute_clean_step", "Input/output error")
        .await;
    flow.power_off().await.unwrap();
    assert_no_bootable_image(net, disk, "after the erase's read error");
}

/// Writes `image` over the start of `disk` (a bootable old content).
fn seed(image: &Path, disk: &Path) {
    hardware_tests::run(
        Command::new("dd")
            .arg(format!("if={}", image.display()))
            .arg(format!("of={}", disk.display()))
            .args(["bs=1M", "conv=notrunc,sparse", "status=none"]),
    )
    .unwrap();
    assert!(!disk_signatures(disk).is_empty());
}
