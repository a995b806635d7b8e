//! The agent's OCI image run by OpenShift's own unit (issue 47): the
//! `ExecStartPre` and `ExecStart` lines of openshift/ironic-agent-image's
//! `ignition/service` (`container_form/ironic-agent.service`, copied from
//! upstream unchanged) are run byte for byte, only `%REGISTRY%` and
//! `%PODMAN_FLAGS%` substituted as `ignition/build.py` does and the line
//! split as systemd splits it, so the test fails if the image needs any
//! other flag. The image (`image-builder/build-oci.sh`, `$OCI_DIR`, default
//! `target/oci`) is pushed with skopeo to Debian's `docker-registry` on
//! loopback (TLS, its own CA), pulled by the unit's `podman pull … --tls-verify=false`.
//!
//! Nothing of this machine's is changed:
//! - podman's storage, run and temporary directories are the test's own,
//!   given by `CONTAINERS_STORAGE_CONF` and `CONTAINERS_CONF` files in a
//!   temporary directory (not global options: the command lines stay the
//!   unit's exactly); the machine's container storage is never touched;
//! - each podman command runs in a private mount namespace (util-linux's
//!   `unshare`), where `/etc` is an overlay whose upper directory is a
//!   temporary one of that command's own: the unit's
//!   `/etc/ironic-python-agent.conf` is placed there before the mount
//!   (pointing at the in-process test conductor on 127.0.0.1), never in
//!   this machine's `/etc`, and no later command rewrites the file the
//!   running agent reads;
//! - the container is stopped and removed by its name, and its processes
//!   (conmon's and the agent's PIDs from `podman inspect`) are checked gone.
//!
//! Checked: the agent in the container inspects (the inventory is this
//! host's: its NICs' MACs, its disks from /sys, its memory), looks the node
//! up, heartbeats; since this machine is not a CoreOS live system (no
//! `/run/ostree-live`), a clean's `erase_devices_metadata` is refused naming
//! the missing marker and the disks' first sectors are unchanged, and
//! `standby.power_off` is simulated (this machine stays up: the test goes on);
//! the container's path to the host's mounts is this host's PID 1 table;
//! `podman stop` ends the agent by SIGTERM; and the docker-archive, loaded
//! with `podman load`, is the image the registry served (the same ID).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use agent::testconductor::{Settings, TestConductor};
use hardware_tests::registry::Registry;
use hardware_tests::run;
use serde_json::json;

/// OpenShift's unit, as upstream has it.
const UNIT: &str = include_str!("container_form/ironic-agent.service");

/// The `KEY=` line of the unit's `[Service]` section.
fn unit_line(key: &str) -> String {
    UNIT.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix('='))
        .unwrap_or_else(|| panic!("the unit has no {key}="))
        .to_string()
}

/// Splits a unit's command line as systemd does (`systemd.service(5)`,
/// "Command lines"): words separated by whitespace, single and double
/// quotes, C-style backslash escapes, `%%` for `%`. Any other `%`
/// specifier, or a prefix such as `-`/`@`/`+`/`!`, is refused: the test
/// would not run what systemd runs.
fn systemd_split(line: &str) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut cur: Option<String> = None;
    let mut quote: Option<char> = None;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            c if quote == Some(c) => quote = None,
            '"' | '\'' if quote.is_none() && cur.is_none() => {
                quote = Some(c);
                cur = Some(String::new());
            }
            '\\' => {
                let n = chars.next().ok_or("a trailing backslash")?;
                let e = match n {
                    'n' => '\n',
                    't' => '\t',
                    '\\' | '"' | '\'' | ' ' => n,
                    _ => return Err(format!("escape \\{n} not handled here")),
                };
                cur.get_or_insert_with(String::new).push(e);
            }
            '%' => match chars.next() {
                Some('%') => cur.get_or_insert_with(String::new).push('%'),
                s => return Err(format!("specifier %{s:?} not handled here")),
            },
            c if c.is_whitespace() && quote.is_none() => {
                if let Some(w) = cur.take() {
                    words.push(w);
                }
            }
            c => cur.get_or_insert_with(String::new).push(c),
        }
    }
    if quote.is_some() {
        return Err("an unterminated quote".into());
    }
    words.extend(cur);
    if words
        .first()
        .is_some_and(|w| w.starts_with(['-', '@', '+', '!', ':']))
    {
        return Err(format!("an executable prefix in {:?}", words[0]));
    }
    Ok(words)
}

/// `ignition/build.py`'s substitution, then systemd's split.
fn command(key: &str, registry: &str, podman_flags: &str) -> Vec<String> {
    let line = unit_line(key)
        .replace("%REGISTRY%", registry)
        .replace("%PODMAN_FLAGS%", podman_flags);
    systemd_split(&line).unwrap_or_else(|e| panic!("{key}: {e}"))
}

/// podman with the test's own storage, in a private mount namespace whose
/// `/etc` is an overlay on the test's directory.
struct Podman {
    dir: tempfile::TempDir,
    /// Commands run so far: each gets its own overlay directories.
    runs: std::sync::atomic::AtomicUsize,
}

impl Podman {
    fn new(conf: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        for sub in ["storage", "run", "tmp"] {
            std::fs::create_dir_all(d.join(sub)).unwrap();
        }
        std::fs::write(
            d.join("storage.conf"),
            format!(
                "[storage]\ndriver = \"overlay\"\ngraphroot = \"{0}/storage\"\nrunroot = \"{0}/run\"\n",
                d.display()
            ),
        )
        .unwrap();
        // The test's machine, not the image, needs these: its PID 1 is not
        // systemd (cgroupfs, events to a file), and root here lacks
        // CAP_SYS_RESOURCE, so podman's default rlimits for root (1048576
        // open files and processes) fail in crun with EPERM: lower ones
        // (the open-file limit this process has; 16384 processes, as a
        // higher one failed here too).
        let nofile = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
            .map(|(_, hard)| hard.min(1 << 20))
            .unwrap_or(1024);
        std::fs::write(
            d.join("containers.conf"),
            format!(
                "[containers]\ndefault_ulimits = [\"nofile={nofile}:{nofile}\", \"nproc=16384:16384\"]\n\
                 [engine]\ncgroup_manager = \"cgroupfs\"\nevents_logger = \"file\"\n\
                 events_logfile_path = \"{0}/tmp/events.log\"\ntmp_dir = \"{0}/tmp\"\n\
                 static_dir = \"{0}/storage/libpod\"\nvolume_path = \"{0}/storage/volumes\"\n",
                d.display()
            ),
        )
        .unwrap();
        std::fs::write(d.join("ironic-python-agent.conf"), conf).unwrap();
        Self {
            dir,
            runs: Default::default(),
        }
    }

    /// `argv` (a podman or skopeo command line) in its own private mount
    /// namespace: `/etc` an overlay with the unit's configuration file in
    /// an upper directory of this command's own, written before the mount
    /// (a `cp` per command once truncated the file while the container's
    /// agent read it, and two live overlays must not share an upper
    /// directory); a tmpfs over `/var/lib/containers` (skopeo's
    /// blob cache; podman keeps its own under its storage); the hybrid
    /// cgroup layout's `unified` mount unmounted (crun refuses the hybrid
    /// layout; v1 is what it runs on here).
    fn command(&self, argv: &[String]) -> Command {
        let d = self.dir.path();
        let n = self.runs.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let etc = d.join(format!("etc-{n}"));
        std::fs::create_dir_all(etc.join("upper")).unwrap();
        std::fs::create_dir_all(etc.join("work")).unwrap();
        std::fs::copy(
            d.join("ironic-python-agent.conf"),
            etc.join("upper/ironic-python-agent.conf"),
        )
        .unwrap();
        let script = format!(
            "set -e; mount -t overlay overlay -o lowerdir=/etc,upperdir={0}/upper,workdir={0}/work /etc; \
             if [ -d /var/lib/containers ]; then mount -t tmpfs tmpfs /var/lib/containers; fi; \
             if mountpoint -q /sys/fs/cgroup/unified; then umount /sys/fs/cgroup/unified; fi; \
             exec \"$@\"",
            etc.display()
        );
        let mut c = Command::new("unshare");
        c.args([
            "--mount",
            "--propagation",
            "private",
            "--",
            "sh",
            "-c",
            &script,
            "sh",
        ])
        .args(argv)
        .env("CONTAINERS_STORAGE_CONF", d.join("storage.conf"))
        .env("CONTAINERS_CONF", d.join("containers.conf"));
        c
    }

    /// `podman ARGS…` (for the test's own inspection and clean-up).
    fn podman(&self, args: &[&str]) -> anyhow::Result<String> {
        let mut argv = vec!["/bin/podman".to_string()];
        argv.extend(args.iter().map(|s| s.to_string()));
        run(&mut self.command(&argv))
    }
}

/// The unit's container, stopped, removed and its processes checked gone
/// when dropped (also when the test fails).
struct Running<'a> {
    podman: &'a Podman,
    child: Child,
    log: PathBuf,
    pids: Vec<i32>,
}

impl Running<'_> {
    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// `podman stop` (SIGTERM, SIGKILL after 10 s): how long it took.
    fn stop(&mut self) -> Duration {
        let t = Instant::now();
        if let Err(e) = self
            .podman
            .podman(&["stop", "--time", "10", "ironic-agent"])
        {
            eprintln!("podman stop: {e:#}");
        }
        t.elapsed()
    }
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.stop();
        if let Err(e) = self.podman.podman(&["rm", "--force", "ironic-agent"]) {
            eprintln!("podman rm: {e:#}");
        }
        let _ = self.child.wait();
        for pid in &self.pids {
            let gone = (0..50).any(|_| {
                let g = !Path::new(&format!("/proc/{pid}")).exists();
                if !g {
                    std::thread::sleep(Duration::from_millis(100));
                }
                g
            });
            if !gone && !std::thread::panicking() {
                panic!("process {pid} of the container is still running");
            }
        }
    }
}

/// This machine's physical NICs' MACs (a `device` link in sysfs, as the
/// inventory lists NICs).
fn host_macs() -> Vec<String> {
    let mut out: Vec<String> = std::fs::read_dir("/sys/class/net")
        .unwrap()
        .flatten()
        .filter(|e| e.path().join("device").exists())
        .filter_map(|e| std::fs::read_to_string(e.path().join("address")).ok())
        .map(|m| m.trim().to_ascii_lowercase())
        .filter(|m| m.len() == 17 && m != "00:00:00:00:00:00")
        .collect();
    out.sort();
    out.dedup();
    out
}

/// This machine's whole disks that Ironic would see (virtio, SCSI, NVMe).
fn host_disks() -> Vec<String> {
    let mut out: Vec<String> = std::fs::read_dir("/sys/block")
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| ["vd", "sd", "nvme", "xvd"].iter().any(|p| n.starts_with(p)))
        .collect();
    out.sort();
    out
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[test]
fn systemd_split_is_the_units() {
    let pre = command("ExecStartPre", "127.0.0.1:5000", "--tls-verify=false");
    assert_eq!(
        pre,
        [
            "/bin/podman",
            "pull",
            "127.0.0.1:5000/ironic-agent",
            "--tls-verify=false"
        ]
    );
    let secure = command("ExecStartPre", "quay.example", "");
    assert_eq!(secure, ["/bin/podman", "pull", "quay.example/ironic-agent"]);
    let run = command("ExecStart", "x", "");
    assert_eq!(run[..3], ["/bin/podman", "run", "--privileged"]);
    assert_eq!(run.last().unwrap(), "ironic-agent");
    assert_eq!(
        systemd_split(r#"a "b c" 'd' e\ f %%"#).unwrap(),
        ["a", "b c", "d", "e f", "%"]
    );
    assert!(systemd_split("a %n").is_err());
    assert!(systemd_split("-/bin/x").is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openshifts_unit_runs_the_image_and_nothing_is_written_off_a_live_system() {
    hardware_tests::require_root("the container form test (podman, mount namespaces)");
    assert!(
        !Path::new("/run/ostree-live").exists(),
        "this test needs a machine that is not a CoreOS live system"
    );
    let oci = std::env::var_os("OCI_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| hardware_tests::repo_root().join("target/oci"));
    assert!(
        oci.join("oci/index.json").is_file(),
        "no OCI image at {}: build it with image-builder/build-oci.sh",
        oci.display()
    );

    // The conductor, and a node with this machine's MACs.
    let conductor = TestConductor::start(Settings::default()).await.unwrap();
    let macs = host_macs();
    assert!(!macs.is_empty(), "this machine has no NIC with a MAC");
    let uuid = conductor.enroll(&macs.iter().map(String::as_str).collect::<Vec<_>>());
    conductor.start_inspect(&uuid).unwrap();

    // The registry, and our image in it.
    let registry = Registry::start().unwrap();

    // The unit's configuration file, as ignition/build.py writes it (and
    // what a test needs: loopback, short lookup intervals).
    let port = free_port();
    let conf = format!(
        "[DEFAULT]\napi_url = {0}\ninspection_callback_url = {0}/v1/continue_inspection\n\
         listen_host = 127.0.0.1\nlisten_port = {port}\nadvertise_host = 127.0.0.1\nadvertise_port = {port}\n\
         lookup_interval = 1\ninspection_collectors = default\ncollect_lldp = False\n",
        conductor.url()
    );
    let podman = Podman::new(&conf);
    let push: Vec<String> = [
        "skopeo".to_string(),
        "copy".into(),
        "--quiet".into(),
        "--dest-tls-verify=false".into(),
        format!("oci:{}:latest", oci.join("oci").display()),
        format!("docker://{}/ironic-agent:latest", registry.addr),
    ]
    .into();
    run(&mut podman.command(&push)).expect("pushing the image");

    // ExecStartPre, then ExecStart, exactly as systemd would run them.
    let pre = command("ExecStartPre", &registry.addr, "--tls-verify=false");
    run(&mut podman.command(&pre)).expect("the unit's ExecStartPre");
    let start = command("ExecStart", &registry.addr, "--tls-verify=false");
    let log = podman.dir.path().join("agent.log");
    let out = std::fs::File::create(&log).unwrap();
    let child = podman
        .command(&start)
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let mut running = Running {
        podman: &podman,
        child,
        log,
        pids: Vec::new(),
    };
    let t = Instant::now();
    while running.pids.is_empty() {
        if let Ok(p) = podman.podman(&[
            "inspect",
            "--format",
            "{{.State.Pid}} {{.State.ConmonPid}}",
            "ironic-agent",
        ]) {
            running.pids = p
                .split_whitespace()
                .filter_map(|x| x.parse().ok())
                .filter(|p| *p > 0)
                .collect();
        }
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "the container did not start:\n{}",
            running.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // Inspection: the inventory is this host's.
    let node = conductor
        .wait_for_state(&uuid, "manageable", Duration::from_secs(60))
        .await
        .unwrap_or_else(|e| panic!("{e:#}\n{}", running.log()));
    let inv = &node.inspection_data.expect("inspection data")["inventory"];
    let mut got: Vec<String> = inv["interfaces"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|i| i["mac_address"].as_str().map(str::to_ascii_lowercase))
        .collect();
    got.sort();
    got.dedup();
    for m in &macs {
        assert!(got.contains(m), "{m} not in the inventory's NICs {got:?}");
    }
    let disks: Vec<&str> = inv["disks"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|d| d["name"].as_str())
        .collect();
    for d in host_disks() {
        assert!(
            disks.contains(&format!("/dev/{d}").as_str()),
            "{d} not in the inventory's disks {disks:?}"
        );
    }
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap();
    let total_kib: u64 = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    assert_eq!(
        inv["memory"]["total"],
        json!(total_kib * 1024),
        "{}",
        inv["memory"]
    );
    eprintln!(
        "inventory from the container: hostname {} ({} NICs, disks {disks:?})",
        inv["hostname"],
        got.len()
    );

    // A clean that writes the disks: refused off a live system.
    // Their first 64 KiB where this machine lets root read its disks (a
    // sandbox may refuse even that: then the refusal alone is checked).
    let first = |d: &str| hardware_tests::sha256_prefix(Path::new(&format!("/dev/{d}")), 64 << 10);
    let sectors: Vec<(String, String)> = host_disks()
        .iter()
        .filter_map(|d| match first(d) {
            Ok(h) => Some((d.clone(), h)),
            Err(e) => {
                eprintln!("/dev/{d} cannot be read here ({e}): not compared");
                None
            }
        })
        .collect();
    conductor
        .start_clean(
            &uuid,
            Some(vec![
                json!({"interface": "deploy", "step": "erase_devices_metadata", "args": {}}),
            ]),
        )
        .unwrap();
    let e = conductor
        .wait_for_state(&uuid, "manageable", Duration::from_secs(90))
        .await
        .expect_err("the clean must fail");
    let e = format!("{e:#}");
    assert!(
        e.contains("not a CoreOS live system") && e.contains("/mnt/coreos/run/ostree-live"),
        "{e}\n{}",
        running.log()
    );
    for (d, before) in &sectors {
        assert_eq!(&first(d).unwrap(), before, "/dev/{d} changed");
    }
    let node = conductor.node(&uuid).unwrap();
    assert!(node.heartbeats > 0, "no heartbeat:\n{}", running.log());

    // Power off as Ironic sends it: simulated, this machine stays up. The
    // failed clean wiped the token; the node waiting again (for an
    // inspection, where heartbeats drive nothing) has the agent look it up
    // and heartbeat anew.
    conductor.start_inspect(&uuid).unwrap();
    let t = Instant::now();
    while conductor.node(&uuid).unwrap().agent_url.is_none() {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "no heartbeat after the failed clean:\n{}",
            running.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let v = conductor
        .agent_command(&uuid, "standby.power_off", json!({}))
        .await
        .unwrap_or_else(|e| panic!("{e:#}\n{}", running.log()));
    assert_eq!(v["command_status"], "SUCCEEDED", "{v}");
    let t = Instant::now();
    while !running.log().contains("not touching this machine's power") {
        assert!(t.elapsed() < Duration::from_secs(20), "{}", running.log());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        podman
            .podman(&["inspect", "--format", "{{.State.Running}}", "ironic-agent"])
            .unwrap()
            .contains("true"),
        "the container stopped after the simulated power off:\n{}",
        running.log()
    );
    // The agent reads the host's mounts where the unit binds `/`: host PID
    // 1's table, seen through the container's mount namespace.
    let pid = running.pids[0];
    let through = format!("/proc/{pid}/root/mnt/coreos/proc/1/mountinfo");
    let same = (0..3).any(|_| {
        std::fs::read_to_string(&through).ok() == std::fs::read_to_string("/proc/1/mountinfo").ok()
    });
    assert!(same, "{through} is not this host's PID 1 mount table");
    let log = running.log();
    assert!(
        log.contains("the host is not a CoreOS live system"),
        "{log}"
    );
    // The agent, PID 1 of the container, ends on podman's SIGTERM.
    let took = running.stop();
    assert!(
        running.log().contains("SIGTERM: the container is stopping")
            && took < Duration::from_secs(8),
        "stopped in {took:?}:\n{}",
        running.log()
    );
    drop(running);
    assert!(
        podman
            .podman(&["container", "exists", "ironic-agent"])
            .is_err(),
        "the container was not removed"
    );

    // The docker-archive is the same image (its ID is the config's digest).
    let pulled = podman
        .podman(&[
            "image",
            "inspect",
            "--format",
            "{{.Id}}",
            &format!("{}/ironic-agent", registry.addr),
        ])
        .unwrap();
    let archive = oci.join("ironic-agent.docker.tar").display().to_string();
    podman
        .podman(&["load", "--quiet", "--input", &archive])
        .unwrap();
    let loaded = podman
        .podman(&[
            "image",
            "inspect",
            "--format",
            "{{.Id}} {{.Config.Entrypoint}}",
            "localhost/ironic-agent:latest",
        ])
        .unwrap();
    assert_eq!(loaded, format!("{pulled} [/usr/bin/agent container]"));
}
