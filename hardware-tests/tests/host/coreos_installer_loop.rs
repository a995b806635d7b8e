//! `install_coreos` in the container form with the **real**
//! `coreos-installer` 0.27 that `ci/install-deps` builds into
//! `target/tools/bin`, onto a loop device, through the command API. The
//! agent's `host_root` is a stand-in for the live system's root
//! ([`LiveRoot`]: this machine's `/usr`, `/etc`, `/sys`, `/proc`, a `/dev`
//! with only the test's loop device, and the test's own systemd-udevd's
//! `/run/udev`, which coreos-installer needs), so the tool runs chrooted exactly as in OpenShift's container:
//! - an image served without a checksum (`--image-url URL --insecure`):
//!   the Ignition file (the config drive's `user_data` plus the first-boot
//!   host name), the kernel arguments in the BLS entry, the image's own
//!   first-boot stamp, the image's bytes;
//! - no image (`--offline`): the real tool refuses outside a live system,
//!   at its osmet check, after it read our Ignition file in the chroot and
//!   opened our device;
//! - a failure after the image copy (an image without a `boot`
//!   filesystem), an unreachable image and a missing `coreos-installer`:
//!   IPA's error texts, three tries, and no partition table or signature
//!   left on the disk;
//! - a pre-rendered config drive: IPA's error before anything runs, the
//!   disk untouched;
//! - the log bundle with the host's (here empty) journal.
//!
//! The tests share `PATH` and the agent's environment variables, so they
//! run one at a time ([`SERIAL`]). Run as root, beside the udev suites
//! (`ci/test-jobs`).

use std::path::Path;
use std::time::Duration;

use agent_base::config::{Config, RunMode};
use agent_contents::ignition::mount::Mounted;
use agent_testkit::image_server::{Fault, ImageServer};
use hardware_tests::agentapi::AgentApi;
use hardware_tests::coreosimage::{coreos_image, BLS, STAMP};
use hardware_tests::liveroot::{LiveRoot, TOOLS};
use hardware_tests::loopdev::LoopDevice;
use hardware_tests::udevd::Udevd;
use serde_json::{json, Value};

const MIB: u64 = 1 << 20;

/// One test at a time: `PATH` and `IPA_COREOS_IP_OPTIONS` are the
/// process's.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A loop device watched by a udevd, the live root, an image server and
/// the in-process agent in the container form (fields drop in order: the
/// agent, the root's mounts, the disk, then udevd).
struct Fixture {
    api: AgentApi,
    root: LiveRoot,
    server: ImageServer,
    disk: LoopDevice,
    _udevd: Udevd,
    _scope: tempfile::TempDir,
    img: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

/// `label`: the image's boot filesystem label (`boot` for a CoreOS one).
/// `with_tool`: whether the live root has coreos-installer.
async fn fixture(label: &str, with_tool: bool) -> Fixture {
    hardware_tests::require_root("the coreos-installer loop-device test");
    agent::cli::init_tracing(false);
    let path = std::env::var("PATH").unwrap_or_default();
    if !path.split(':').any(|p| p == TOOLS) {
        std::env::set_var("PATH", format!("{TOOLS}:{path}"));
    }
    std::env::remove_var("IPA_COREOS_IP_OPTIONS");
    std::env::remove_var("IPA_COREOS_COPY_NETWORK");
    let dir = tempfile::tempdir().unwrap();
    let (img, _sha) = coreos_image(dir.path(), label);
    let server = ImageServer::start().unwrap();
    server.route("/fcos.raw", &img, &[], Fault::None);
    let scope = tempfile::tempdir().unwrap();
    let root = LiveRoot::new(with_tool, scope.path()).unwrap();
    let udevd = Udevd::start_with_run(scope.path(), Some(&root.run_dir())).unwrap();
    let disk = LoopDevice::new_in(scope.path(), 128 * MIB).unwrap();
    root.add_device(&disk.path).unwrap();
    let api = AgentApi::start(Config {
        mode: RunMode::Host,
        allowed_devices: vec![disk.path.clone()],
        host_root: Some(root.path().to_path_buf()),
        ..Config::default()
    })
    .await
    .unwrap();
    Fixture {
        api,
        root,
        server,
        disk,
        _udevd: udevd,
        _scope: scope,
        img,
        _dir: dir,
    }
}

fn step(instance_info: Value) -> Value {
    json!({"step": {"interface": "deploy", "step": "install_coreos", "args": {}},
           "node": {"uuid": "n1", "instance_info": instance_info, "properties": {}},
           "ports": []})
}

/// Runs the step and returns its result and the agent's log lines written
/// meanwhile.
async fn install(api: &AgentApi, instance_info: Value) -> (Value, String) {
    let before = agent_devices::logs::memlog::snapshot().len();
    let r = tokio::time::timeout(
        Duration::from_secs(300),
        api.run("deploy.execute_deploy_step", step(instance_info)),
    )
    .await
    .expect("install_coreos within 5 minutes")
    .unwrap();
    let log = agent_devices::logs::memlog::snapshot();
    let log = String::from_utf8_lossy(log.get(before..).unwrap_or(&log)).into_owned();
    (r, log)
}

/// The loop device's GPT headers and libblkid's signatures: what would
/// make it boot.
fn leftovers(disk: &Path) -> Vec<String> {
    use std::os::unix::fs::FileExt;
    let f = std::fs::File::open(disk).unwrap();
    let mut found = agent_devices::disk::erase::probe_signatures(&f).unwrap();
    let mut head = [0u8; 8];
    f.read_exact_at(&mut head, 512).unwrap();
    if &head == b"EFI PART" {
        found.push("primary GPT header".into());
    }
    f.read_exact_at(&mut head, 128 * MIB - 512).unwrap();
    if &head == b"EFI PART" {
        found.push("backup GPT header".into());
    }
    found
}

fn details(r: &Value) -> &str {
    r["command_error"]["details"].as_str().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_without_checksum_is_installed_with_ignition_and_kernel_arguments() {
    let _serial = SERIAL.lock().await;
    let f = fixture("boot", true).await;
    std::env::set_var("IPA_COREOS_IP_OPTIONS", "ip=dhcp6");
    let user_data = json!({"ignition": {"version": "3.2.0"},
        "passwd": {"users": [{"name": "core"}]}});
    let (r, log) = install(
        &f.api,
        json!({"image_source": f.server.url("/fcos.raw"),
               "configdrive": {"user_data": user_data.to_string(),
                   "meta_data": {"coreos_append_karg": ["console=ttyS0,115200n8"]}}}),
    )
    .await;
    std::env::remove_var("IPA_COREOS_IP_OPTIONS");
    assert_eq!(r["command_status"], "SUCCEEDED", "{r}\n{log}");
    let (dev, root) = (f.disk.path.display(), f.root.path().display());
    assert!(
        log.contains(&format!(
            "Executing CoreOS installer: chroot {root} coreos-installer install --preserve-on-error --ignition-file /tmp/ironic.ign --append-karg console=ttyS0,115200n8 --image-url {} --insecure --append-karg ip=dhcp6 {dev}",
            f.server.url("/fcos.raw")
        )),
        "{log}"
    );
    // Its own output, streamed: it found no signature and went on.
    assert!(
        log.contains("coreos-installer: Signature not found; skipping verification as requested"),
        "{log}"
    );
    assert!(log.contains("coreos-installer: Install complete."), "{log}");
    assert!(
        !f.root.path().join("tmp/ironic.ign").exists(),
        "the Ignition file is removed"
    );

    let boot = agent_contents::ignition::boot_partition(&f.disk.path)
        .unwrap()
        .unwrap();
    let m = Mounted::new(&f.disk.path, boot.start, boot.len, "ext4", true).unwrap();
    let read = |rel: &str| std::fs::read_to_string(m.path().join(rel)).unwrap();
    let written: Value = serde_json::from_str(&read("ignition/config.ign")).unwrap();
    let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    let mut want = user_data.clone();
    want["storage"] = json!({"files": [{"path": "/etc/hostname", "mode": 420, "overwrite": true,
        "contents": {"source": format!("data:,{}", hostname.trim())}}]});
    assert_eq!(written, want);
    assert_eq!(
        read("ignition.firstboot"),
        STAMP,
        "the image's stamp is kept"
    );
    assert_eq!(
        read("loader/entries/ostree-1.conf"),
        BLS.replace(
            "fedora-coreos/0\n",
            "fedora-coreos/0 console=ttyS0,115200n8 ip=dhcp6\n"
        )
    );
    m.unmount().unwrap();
    // The root partition holds the image's bytes.
    let want = std::fs::read(&f.img).unwrap();
    let got = std::fs::read(&f.disk.path).unwrap();
    let root = (33 * MIB) as usize..(65 * MIB) as usize;
    assert!(got[root.clone()] == want[root], "root partition differs");
    let paths: Vec<String> = f.server.seen().into_iter().map(|s| s.path).collect();
    assert!(paths.contains(&"/fcos.raw".to_string()), "{paths:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn offline_is_refused_by_the_real_tool_at_its_osmet_check() {
    let _serial = SERIAL.lock().await;
    let f = fixture("boot", true).await;
    f.disk.partition_and_format().unwrap();
    assert!(!leftovers(&f.disk.path).is_empty());
    let (r, log) = install(&f.api, json!({})).await;
    assert_eq!(r["command_status"], "FAILED", "{r}\n{log}");
    // Our arguments, our device and our chroot were right: coreos-installer
    // read the Ignition file at /tmp/ironic.ign inside the chroot, took the
    // device's sector size (it opens the device for that), and then found
    // no osmet image of a live system in /run/coreos-installer/osmet.
    assert_eq!(
        details(&r),
        "coreos-installer failed with code 1: Error: cannot perform offline install; metadata missing"
    );
    let (dev, root) = (f.disk.path.display(), f.root.path().display());
    let line = format!("Executing CoreOS installer: chroot {root} coreos-installer install --preserve-on-error --ignition-file /tmp/ironic.ign --offline {dev}");
    assert_eq!(log.matches(&line).count(), 3, "three tries:\n{log}");
    assert!(!log.contains("opening source Ignition config"), "{log}");
    assert!(!log.contains("getting sector size"), "{log}");
    assert_eq!(leftovers(&f.disk.path), Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failure_after_the_copy_leaves_no_bootable_disk() {
    let _serial = SERIAL.lock().await;
    let f = fixture("notboot", true).await;
    let (r, log) = install(&f.api, json!({"image_source": f.server.url("/fcos.raw")})).await;
    assert_eq!(r["command_status"], "FAILED", "{r}\n{log}");
    assert_eq!(r["command_error"]["type"], "DeploymentError", "{r}");
    assert_eq!(
        details(&r),
        "coreos-installer failed with code 1: Error: install failed"
    );
    // The tool wrote the image and kept it (--preserve-on-error), three
    // times; then the agent erased it.
    assert_eq!(
        log.matches("coreos-installer: Preserving partition table as requested")
            .count(),
        3,
        "{log}"
    );
    assert_eq!(leftovers(&f.disk.path), Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_image_and_a_missing_installer_are_ipas_errors() {
    let _serial = SERIAL.lock().await;
    let f = fixture("boot", true).await;
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let (r, log) = install(
        &f.api,
        json!({"image_source": format!("http://127.0.0.1:{closed}/fcos.raw")}),
    )
    .await;
    assert_eq!(r["command_status"], "FAILED", "{r}\n{log}");
    // IPA quotes the last line: here the end of anyhow's cause chain.
    assert_eq!(
        details(&r),
        "coreos-installer failed with code 1: 4: Connection refused (os error 111)"
    );
    assert_eq!(
        log.matches("coreos-installer: Error: fetching image URL")
            .count(),
        3
    );
    assert_eq!(log.matches("Executing CoreOS installer").count(), 3);
    assert_eq!(leftovers(&f.disk.path), Vec::<String>::new());
    drop(f);

    let f = fixture("boot", false).await;
    let (r, log) = install(&f.api, json!({"image_source": f.server.url("/fcos.raw")})).await;
    assert_eq!(r["command_status"], "FAILED", "{r}\n{log}");
    assert_eq!(
        details(&r),
        format!(
            "Cannot run coreos-installer, is it installed in {}?",
            f.root.path().display()
        )
    );
    assert_eq!(log.matches("Executing CoreOS installer").count(), 3);
    assert!(f.server.seen().is_empty(), "nothing was downloaded");
}

/// A config drive Ironic rendered (an ISO as base64 text) instead of data:
/// IPA's error before anything runs; nothing downloaded, the disk
/// untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pre_rendered_config_drive_is_ipas_error_before_anything_is_written() {
    let _serial = SERIAL.lock().await;
    let f = fixture("boot", true).await;
    let before = std::fs::read(&f.disk.path).unwrap();
    let (r, log) = install(
        &f.api,
        json!({"image_source": f.server.url("/fcos.raw"),
               "configdrive": "H4sICAAAAAAAA2NvbmZpZy1kcml2ZS5pc28A"}),
    )
    .await;
    assert_eq!(r["command_status"], "FAILED", "{r}\n{log}");
    assert_eq!(
        details(&r),
        "Cannot use a pre-rendered configdrive, please pass it as JSON data"
    );
    assert_eq!(
        log.matches("Executing CoreOS installer").count(),
        0,
        "{log}"
    );
    assert!(f.server.seen().is_empty(), "nothing was downloaded");
    assert!(
        std::fs::read(&f.disk.path).unwrap() == before,
        "the disk was written"
    );
}

/// The log bundle in the container form: the host's journal through the
/// chrooted `journalctl`. This machine keeps no journal, so it prints only
/// `-- No entries --`: logged as upstream logs it, the part left out and
/// the agent's own log kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_without_a_journal_keeps_the_agents_log_in_the_bundle() {
    use base64::Engine;
    let _serial = SERIAL.lock().await;
    let f = fixture("boot", false).await;
    let r = f
        .api
        .run("log.collect_system_logs", json!({}))
        .await
        .unwrap();
    assert_eq!(r["command_status"], "SUCCEEDED", "{r}");
    let gz = base64::engine::general_purpose::STANDARD
        .decode(r["command_result"]["system_logs"].as_str().unwrap())
        .unwrap();
    let mut tar = Vec::new();
    std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&gz[..]), &mut tar).unwrap();
    // ustar: each header's name is its first 100 bytes.
    let names: Vec<String> = tar
        .chunks(512)
        .filter(|h| h.len() == 512 && &h[257..262] == b"ustar")
        .map(|h| {
            String::from_utf8_lossy(&h[..100])
                .trim_end_matches('\0')
                .to_string()
        })
        .collect();
    assert!(names.contains(&"agent.log".to_string()), "{names:?}");
    assert!(!names.contains(&"journal".to_string()), "{names:?}");
    let log = String::from_utf8_lossy(&agent_devices::logs::memlog::snapshot()).into_owned();
    assert!(
        log.contains("Abnormally small journalctl output: -- No entries --"),
        "{log}"
    );
}
