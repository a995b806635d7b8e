//! Container steps end to end on this machine, as root: Debian's
//! docker-registry on loopback with TLS from a CA made by the test, an
//! image built from Debian's busybox-static (umoci) and pushed (skopeo),
//! then the agent's container module applies the allowlist, pulls over
//! TLS, unpacks and runs it with crun, with a loop device the test made
//! passed in with `--device`; the container writes a marker on it.
//! Also: an image not allowed is refused before any request reaches the
//! registry; the registry's certificate is refused without its CA unless
//! `--tls-verify=false`. Registry input is bounded: each limit (manifest,
//! config, layer, unpacked bytes, entries) refuses by name; a pull through
//! a slow relay meets the time limit, and an abort stops it as it goes;
//! credentials never go to an unverified registry. The container is
//! confined as podman confines it (its cgroup's device rules keep a
//! read-only `--device` read-only and an ungranted device unreachable,
//! podman's seccomp profile and capabilities, the agent's loopback
//! `/v1/local/status` refuses it), `--privileged` lifts that as in podman.

use std::io::{Read, Seek, SeekFrom, Write};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agent::api::{self, local_key};
use agent::server::Server;
use agent_base::config::Config;
use agent_base::tls;
use agent_contents::container_steps::limits::Limits;
use agent_contents::container_steps::policy::{apply, Origin};
use agent_contents::container_steps::settings::ContainerSettings;
use agent_contents::container_steps::{
    run_container, run_container_within, runtime_available, ContainerError,
};
use agent_core::state::AgentState;
use hardware_tests::loopdev::LoopDevice;
use hardware_tests::registry::{isolation_probe, probe_report, with_crun_cgroups, Registry};
use hardware_tests::slow_proxy::SlowProxy;

const MARKER: &[u8] = b"CONTAINER-STEP-MARKER";

fn marker_at_sector_one(dev: &std::path::Path) -> Vec<u8> {
    let mut f = std::fs::File::open(dev).unwrap();
    f.seek(SeekFrom::Start(512)).unwrap();
    let mut buf = vec![0; MARKER.len()];
    f.read_exact(&mut buf).unwrap();
    buf
}

/// Pushes `name`: busybox writing [`MARKER`] at sector 1 of `/dev/target`.
fn push_marker_tool(registry: &Registry, name: &str) -> String {
    let script = format!(
        "/bin/busybox printf {} | /bin/busybox dd of=/dev/target bs=512 seek=1 conv=notrunc,fsync",
        std::str::from_utf8(MARKER).unwrap()
    );
    registry
        .push_busybox_image(name, &["/bin/busybox", "sh", "-c", &script])
        .unwrap()
}

/// Settings allowing `tool` only, run with `disk` as `/dev/target`.
fn allowing_on(tool: &str, disk: &LoopDevice) -> ContainerSettings {
    ContainerSettings {
        allowed_containers: vec![tool.to_string()],
        run_options: vec![
            "--rm --network=host".into(),
            format!("--device {}:/dev/target", disk.path.display()),
        ],
        ..ContainerSettings::default()
    }
}

fn zero_sector_one(dev: &std::path::Path) {
    let mut f = std::fs::OpenOptions::new().write(true).open(dev).unwrap();
    f.seek(SeekFrom::Start(512)).unwrap();
    f.write_all(&[0; 512]).unwrap();
    f.sync_all().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn container_step_pulls_over_tls_and_writes_the_device() {
    hardware_tests::require_root("container_registry_loop");
    if !with_crun_cgroups("container_step_pulls_over_tls_and_writes_the_device") {
        return;
    }
    assert!(
        runtime_available(),
        "crun must run here (ci/install-deps installs it)"
    );
    // The agent's log in memory, as log.collect_system_logs reads it.
    agent::cli::init_tracing(false);
    let registry = Registry::start().unwrap();
    let tool = push_marker_tool(&registry, "tool:1");
    let forbidden = registry
        .push_busybox_image("forbidden:1", &["/bin/busybox", "true"])
        .unwrap();
    let disk = LoopDevice::new(8 << 20).unwrap();
    let work = tempfile::tempdir().unwrap();
    let settings = allowing_on(&tool, &disk);
    let abort = Arc::new(AtomicBool::new(false));

    // Allowed, registry certificate verified against the CA.
    let plain = tool.trim_start_matches("docker://");
    let p = apply(&settings, plain, &[], &[], Origin::Arguments).unwrap();
    assert!(p.pull.tls_verify);
    run_container(&p, Some(&registry.ca_file()), work.path(), abort.clone())
        .await
        .unwrap();
    assert_eq!(marker_at_sector_one(&disk.path), MARKER);
    assert_eq!(
        std::fs::read_dir(work.path()).unwrap().count(),
        0,
        "work dir left behind"
    );

    // Not allowed: refused by name, and the registry never hears of it.
    let e = apply(&settings, &forbidden, &[], &[], Origin::Arguments).unwrap_err();
    assert!(matches!(e, ContainerError::NotPermitted(_)), "{e}");
    assert_eq!(
        e.to_string(),
        format!(
            "Container image {forbidden} is not in [container]allowed_containers and \
             [container]allow_arbitrary_containers is not enabled."
        )
    );
    // The registry's access log: the agent's client (oci-client's user
    // agent) fetched the allowed image and asked nothing about the other.
    let log = registry.log();
    let ours = |repo: &str| {
        log.lines()
            .filter(|l| l.contains("oci-client") && l.contains(&format!("/v2/{repo}/")))
            .count()
    };
    assert!(
        ours("tool") >= 2,
        "manifest, config and layer fetched: {log}"
    );
    assert_eq!(ours("forbidden"), 0, "{log}");

    // Without the CA the certificate is refused; nothing runs.
    zero_sector_one(&disk.path);
    let e = run_container(&p, None, work.path(), abort.clone())
        .await
        .unwrap_err();
    assert!(matches!(e, ContainerError::Pull { .. }), "{e}");
    assert!(e.to_string().to_lowercase().contains("certificate"), "{e}");
    assert_eq!(marker_at_sector_one(&disk.path), vec![0; MARKER.len()]);

    // --tls-verify=false in [container] pull_options: pulled without it.
    let insecure = ContainerSettings {
        pull_options: vec!["--tls-verify=false".into()],
        ..settings.clone()
    };
    let p = apply(&insecure, &tool, &[], &[], Origin::Arguments).unwrap();
    assert!(!p.pull.tls_verify);
    let verified_pulls =
        String::from_utf8_lossy(&agent_devices::logs::memlog::snapshot()).into_owned();
    // (Other tests of this binary log such pulls of their own images.)
    assert!(!verified_pulls
        .lines()
        .any(|l| l.contains("WITHOUT TLS verification") && l.contains(&p.reference)));
    run_container(&p, None, work.path(), abort.clone())
        .await
        .unwrap();
    assert_eq!(marker_at_sector_one(&disk.path), MARKER);
    // ...and said so, naming the image.
    let log = String::from_utf8_lossy(&agent_devices::logs::memlog::snapshot()).into_owned();
    let warning = log
        .lines()
        .find(|l| l.contains("WITHOUT TLS verification"))
        .unwrap_or_else(|| panic!("no warning for the unverified pull in:\n{log}"));
    assert!(
        warning.contains("WARN") && warning.contains(&p.reference),
        "{warning}"
    );
}

/// A registry that speaks plain HTTP (a lab's, a disconnected mirror's):
/// refused by name while TLS is verified; with `--tls-verify=false`
/// (Ironic's default `pull_options`) pulled over HTTP as podman does, and
/// the log says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_http_registry_is_used_only_without_tls_verification() {
    hardware_tests::require_root("container_registry_loop");
    if !with_crun_cgroups("a_plain_http_registry_is_used_only_without_tls_verification") {
        return;
    }
    agent::cli::init_tracing(false);
    let registry = Registry::start_plain_http().unwrap();
    let tool = push_marker_tool(&registry, "mirror/tool:1");
    let disk = LoopDevice::new(8 << 20).unwrap();
    let work = tempfile::tempdir().unwrap();
    let verified = allowing_on(&tool, &disk);
    let abort = Arc::new(AtomicBool::new(false));

    // TLS verified: refused, naming the registry and the way out.
    let p = apply(&verified, &tool, &[], &[], Origin::Arguments).unwrap();
    assert!(p.pull.tls_verify);
    let e = run_container(&p, None, work.path(), abort.clone())
        .await
        .unwrap_err();
    assert!(matches!(e, ContainerError::Pull { .. }), "{e}");
    let msg = e.to_string();
    assert!(
        msg.contains(&format!("the registry {} speaks plain HTTP", registry.addr))
            && msg.contains("--tls-verify=false"),
        "{msg}"
    );
    assert_eq!(marker_at_sector_one(&disk.path), vec![0; MARKER.len()]);

    // --tls-verify=false: pulled over HTTP and run, with a warning.
    let insecure = ContainerSettings {
        pull_options: vec!["--tls-verify=false".into()],
        ..verified
    };
    let p = apply(&insecure, &tool, &[], &[], Origin::Arguments).unwrap();
    assert!(!p.pull.tls_verify);
    run_container(&p, None, work.path(), abort.clone())
        .await
        .unwrap();
    assert_eq!(marker_at_sector_one(&disk.path), MARKER);
    let log = String::from_utf8_lossy(&agent_devices::logs::memlog::snapshot()).into_owned();
    let warning = log
        .lines()
        .find(|l| l.contains("speaks plain HTTP: pulling"))
        .unwrap_or_else(|| panic!("no warning for the plain-HTTP pull in:\n{log}"));
    assert!(
        warning.contains("WARN") && warning.contains(&registry.addr),
        "{warning}"
    );
    // The registry served the manifest and the blobs to the agent's client.
    let access = registry.log();
    let fetched = access
        .lines()
        .filter(|l| l.contains("oci-client") && l.contains("/v2/mirror/tool/"))
        .count();
    assert!(fetched >= 2, "manifest, config and layer fetched: {access}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_container_names_its_status_and_output_and_abort_kills() {
    hardware_tests::require_root("container_registry_loop");
    if !with_crun_cgroups("a_failing_container_names_its_status_and_output_and_abort_kills") {
        return;
    }
    let registry = Registry::start().unwrap();
    let failing = registry
        .push_busybox_image(
            "fails:1",
            &["/bin/busybox", "sh", "-c", "echo about to fail; exit 3"],
        )
        .unwrap();
    let sleeper = registry
        .push_busybox_image("sleeps:1", &["/bin/busybox", "sleep", "600"])
        .unwrap();
    let work = tempfile::tempdir().unwrap();
    let settings = ContainerSettings {
        allow_arbitrary_containers: true,
        ..ContainerSettings::default()
    };
    let ca = registry.ca_file();
    let abort = Arc::new(AtomicBool::new(false));

    let p = apply(&settings, &failing, &[], &[], Origin::Arguments).unwrap();
    let e = run_container(&p, Some(&ca), work.path(), abort.clone())
        .await
        .unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, ContainerError::Failed { .. }), "{msg}");
    assert!(
        msg.contains("fails:1") && msg.contains("exit status: 3"),
        "{msg}"
    );
    assert!(msg.contains("about to fail"), "{msg}");

    let p = apply(&settings, &sleeper, &[], &[], Origin::Arguments).unwrap();
    let flag = abort.clone();
    tokio::spawn(async move {
        tokio::time::sleep(std::time::Duration::from_secs(5)).await;
        flag.store(true, std::sync::atomic::Ordering::SeqCst);
    });
    let started = std::time::Instant::now();
    let e = run_container(&p, Some(&ca), work.path(), abort)
        .await
        .unwrap_err();
    assert!(matches!(e, ContainerError::Aborted(_)), "{e}");
    assert!(
        started.elapsed().as_secs() < 60,
        "the sleeper was not killed"
    );
    assert_eq!(std::fs::read_dir(work.path()).unwrap().count(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registry_credentials_from_creds_or_an_authfile() {
    hardware_tests::require_root("container_registry_loop");
    if !with_crun_cgroups("registry_credentials_from_creds_or_an_authfile") {
        return;
    }
    let registry = Registry::start_with_user(("deployer", "s3cret")).unwrap();
    let image = registry
        .push_busybox_image("private:1", &["/bin/busybox", "true"])
        .unwrap();
    let work = tempfile::tempdir().unwrap();
    let ca = registry.ca_file();
    let abort = Arc::new(AtomicBool::new(false));
    let run = |pull: &str| {
        let settings = ContainerSettings {
            allowed_containers: vec![image.clone()],
            pull_options: vec![pull.to_string()],
            ..ContainerSettings::default()
        };
        apply(&settings, &image, &[], &[], Origin::Arguments).unwrap()
    };

    // Anonymous: the registry says no.
    let p = run("");
    let e = run_container(&p, Some(&ca), work.path(), abort.clone())
        .await
        .unwrap_err();
    assert!(matches!(e, ContainerError::Pull { .. }), "{e}");
    assert!(e.to_string().contains("Not authorized"), "{e}");
    // A wrong password neither.
    let p = run("--creds deployer:wrong");
    assert!(run_container(&p, Some(&ca), work.path(), abort.clone())
        .await
        .is_err());
    // --creds.
    let p = run("--creds deployer:s3cret");
    run_container(&p, Some(&ca), work.path(), abort.clone())
        .await
        .unwrap();
    // --authfile in containers-auth.json format.
    use base64::Engine as _;
    let authfile = work.path().join("auth.json");
    std::fs::write(
        &authfile,
        serde_json::json!({"auths": {registry.addr.clone(): {
            "auth": base64::engine::general_purpose::STANDARD.encode("deployer:s3cret")}}})
        .to_string(),
    )
    .unwrap();
    let p = run(&format!("--authfile {}", authfile.display()));
    run_container(&p, Some(&ca), work.path(), abort)
        .await
        .unwrap();
    let log = registry.log();
    assert!(log.contains("deployer"), "the registry saw the user: {log}");
}

/// The error of running `p` within `limits` (it must fail), with the work
/// directory checked empty after.
async fn refused_within(
    p: &agent_contents::container_steps::policy::Permitted,
    ca: &std::path::Path,
    limits: &Limits,
) -> ContainerError {
    let work = tempfile::tempdir().unwrap();
    let abort = Arc::new(AtomicBool::new(false));
    let e = run_container_within(p, Some(ca), work.path(), abort, limits)
        .await
        .unwrap_err();
    assert_eq!(
        std::fs::read_dir(work.path()).unwrap().count(),
        0,
        "work dir left behind after: {e}"
    );
    e
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_registry_bound_refuses_by_name() {
    hardware_tests::require_root("container_registry_loop");
    if !with_crun_cgroups("each_registry_bound_refuses_by_name") {
        return;
    }
    let registry = Registry::start().unwrap();
    let image = registry
        .push_busybox_image("bounded:1", &["/bin/busybox", "true"])
        .unwrap();
    let settings = ContainerSettings {
        allow_arbitrary_containers: true,
        ..ContainerSettings::default()
    };
    let p = apply(&settings, &image, &[], &[], Origin::Arguments).unwrap();
    let ca = registry.ca_file();
    let cases = [
        (
            Limits {
                manifest_bytes: 100,
                ..Limits::default()
            },
            "larger than 100 bytes (the manifest-size limit)",
        ),
        (
            Limits {
                config_bytes: 16,
                ..Limits::default()
            },
            "over the 16-byte config-size limit",
        ),
        (
            Limits {
                blob_bytes: 64 << 10,
                ..Limits::default()
            },
            "over the 65536-byte layer-size limit",
        ),
        (
            Limits {
                unpacked_bytes: 256 << 10,
                ..Limits::default()
            },
            "the image's layers unpack to more than 262144 bytes (the unpacked-size limit)",
        ),
        (
            Limits {
                entries: 2,
                ..Limits::default()
            },
            "the image's layers hold more than 2 tar entries (the entry limit)",
        ),
    ];
    for (limits, expected) in cases {
        let e = refused_within(&p, &ca, &limits).await;
        assert!(matches!(e, ContainerError::Pull { .. }), "{e}");
        let msg = e.to_string();
        assert!(msg.contains(expected) && msg.contains("bounded:1"), "{msg}");
    }
    // Within the default bounds the same image runs.
    let work = tempfile::tempdir().unwrap();
    run_container_within(
        &p,
        Some(&ca),
        work.path(),
        Arc::new(AtomicBool::new(false)),
        &Limits::default(),
    )
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_pull_meets_the_time_limit_and_an_abort_stops_it() {
    hardware_tests::require_root("container_registry_loop");
    if !with_crun_cgroups("a_slow_pull_meets_the_time_limit_and_an_abort_stops_it") {
        return;
    }
    let registry = Registry::start().unwrap();
    let direct = registry
        .push_busybox_image("slow:1", &["/bin/busybox", "true"])
        .unwrap();
    // The same registry through a relay answering at 64 KiB/s: busybox's
    // layer (about 1 MiB) takes some 15 s.
    let proxy = SlowProxy::start(&registry.addr, 64 << 10).unwrap();
    let slow = direct.replace(&registry.addr, &proxy.addr);
    let settings = ContainerSettings {
        allow_arbitrary_containers: true,
        ..ContainerSettings::default()
    };
    let p = apply(&settings, &slow, &[], &[], Origin::Arguments).unwrap();
    let ca = registry.ca_file();

    let limits = Limits {
        pull_time: Duration::from_secs(2),
        ..Limits::default()
    };
    let started = Instant::now();
    let e = refused_within(&p, &ca, &limits).await;
    let took = started.elapsed();
    assert!(matches!(e, ContainerError::Pull { .. }), "{e}");
    assert!(
        e.to_string()
            .contains("the pull took longer than 2 s (the pull time limit)"),
        "{e}"
    );
    assert!(took < Duration::from_secs(6), "stopped after {took:?}");

    // Ironic's abort during the pull: stopped within a second or so, the
    // work directory gone.
    let work = tempfile::tempdir().unwrap();
    let abort = Arc::new(AtomicBool::new(false));
    let flag = abort.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(2)).await;
        flag.store(true, std::sync::atomic::Ordering::SeqCst);
    });
    let started = Instant::now();
    let e = run_container_within(&p, Some(&ca), work.path(), abort, &Limits::default())
        .await
        .unwrap_err();
    let took = started.elapsed();
    assert!(matches!(e, ContainerError::Aborted(_)), "{e}");
    assert!(took < Duration::from_secs(5), "stopped after {took:?}");
    assert_eq!(std::fs::read_dir(work.path()).unwrap().count(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_never_go_to_an_unverified_registry() {
    hardware_tests::require_root("container_registry_loop");
    if !with_crun_cgroups("credentials_never_go_to_an_unverified_registry") {
        return;
    }
    let registry = Registry::start_with_user(("deployer", "s3cret")).unwrap();
    let image = registry
        .push_busybox_image("private:1", &["/bin/busybox", "true"])
        .unwrap();
    let settings = ContainerSettings {
        allowed_containers: vec![image.clone()],
        pull_options: vec!["--tls-verify=false --creds deployer:s3cret".into()],
        ..ContainerSettings::default()
    };
    let p = apply(&settings, &image, &[], &[], Origin::Arguments).unwrap();
    let before = registry
        .log()
        .lines()
        .filter(|l| l.contains("oci-client"))
        .count();
    let e = refused_within(&p, &registry.ca_file(), &Limits::default()).await;
    assert!(matches!(e, ContainerError::Pull { .. }), "{e}");
    assert!(
        e.to_string().contains("refusing to send credentials"),
        "{e}"
    );
    let after = registry
        .log()
        .lines()
        .filter(|l| l.contains("oci-client"))
        .count();
    assert_eq!(
        before,
        after,
        "the registry was contacted: {}",
        registry.log()
    );

    // [container] require_tls_verify refuses the pull itself, by name,
    // before anything is asked of the registry.
    let strict = ContainerSettings {
        require_tls_verify: true,
        pull_options: vec!["--tls-verify=false".into()],
        ..settings
    };
    let e = apply(&strict, &image, &[], &[], Origin::Arguments).unwrap_err();
    assert!(
        e.to_string().contains("[container] require_tls_verify"),
        "{e}"
    );
}

/// Runs `image` to completion, allowed with `run_options` (so the
/// configured options apply).
async fn run_allowed(registry: &Registry, image: &str, run_options: Vec<String>) {
    let work = tempfile::tempdir().unwrap();
    let settings = ContainerSettings {
        allowed_containers: vec![image.to_string()],
        run_options,
        ..ContainerSettings::default()
    };
    let p = apply(&settings, image, &[], &[], Origin::Arguments).unwrap();
    run_container(
        &p,
        Some(&registry.ca_file()),
        work.path(),
        Arc::new(AtomicBool::new(false)),
    )
    .await
    .unwrap();
}

/// Runs `image` with `run_options` ([`run_allowed`]) and returns what it
/// wrote to the directory mounted at `/out`.
async fn run_reporting(
    registry: &Registry,
    image: &str,
    run_options: Vec<String>,
    out: &std::path::Path,
) -> (String, String, String) {
    run_allowed(registry, image, run_options).await;
    let read = |f: &str| std::fs::read_to_string(out.join(f)).unwrap_or_default();
    (read("env"), read("caps"), read("netdev"))
}

/// Whether a `CapEff:` line holds CAP_SYS_ADMIN (bit 21).
fn has_sys_admin(caps: &str) -> bool {
    caps.split_whitespace()
        .nth(1)
        .and_then(|hex| u64::from_str_radix(hex, 16).ok())
        .is_some_and(|bits| bits & (1 << 21) != 0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn env_volume_privileged_and_the_network_take_effect() {
    hardware_tests::require_root("container_registry_loop");
    if !with_crun_cgroups("env_volume_privileged_and_the_network_take_effect") {
        return;
    }
    let registry = Registry::start().unwrap();
    let script = "/bin/busybox printf %s \"$MARK\" > /out/env; \
                  /bin/busybox grep CapEff /proc/self/status > /out/caps; \
                  /bin/busybox cat /proc/net/dev > /out/netdev";
    let image = registry
        .push_busybox_image("reporter:1", &["/bin/busybox", "sh", "-c", script])
        .unwrap();
    let image = image.trim_start_matches("docker://").to_string();

    // --env and --volume; no --network=host: a network namespace of its
    // own (loopback only); no --privileged: no CAP_SYS_ADMIN.
    let out = tempfile::tempdir().unwrap();
    let volume = format!("--volume {}:/out", out.path().display());
    let (env, caps, netdev) = run_reporting(
        &registry,
        &image,
        vec!["--rm --env MARK=from-run-options".into(), volume.clone()],
        out.path(),
    )
    .await;
    assert_eq!(env, "from-run-options");
    assert!(!has_sys_admin(&caps), "unprivileged: {caps}");
    let nics: Vec<&str> = netdev
        .lines()
        .skip(2)
        .filter_map(|l| l.split(':').next())
        .map(str::trim)
        .collect();
    assert_eq!(nics, ["lo"], "isolated network: {netdev}");

    // --privileged and --network=host: every capability, this machine's
    // interfaces.
    let out = tempfile::tempdir().unwrap();
    let volume = format!("--volume {}:/out", out.path().display());
    let (_, caps, netdev) = run_reporting(
        &registry,
        &image,
        vec!["--rm --privileged --network=host".into(), volume],
        out.path(),
    )
    .await;
    assert!(has_sys_admin(&caps), "privileged: {caps}");
    let host = std::fs::read_to_string("/proc/net/dev").unwrap();
    assert_eq!(
        netdev.lines().count(),
        host.lines().count(),
        "host network: {netdev} vs {host}"
    );
}

/// Runs the probe image allowed with `run_options`; its report.
async fn probe(
    registry: &Registry,
    image: &str,
    run_options: Vec<String>,
    out: &std::path::Path,
) -> std::collections::HashMap<String, (i32, String)> {
    run_allowed(registry, image, run_options).await;
    let text = std::fs::read_to_string(out.join("report")).unwrap();
    println!("{text}");
    probe_report(&text)
}

/// The container cgroups left under the hierarchy's root (cgroup v2) or
/// the v1 `devices` controller's.
fn step_cgroups() -> Vec<String> {
    ["/sys/fs/cgroup", "/sys/fs/cgroup/devices"]
        .iter()
        .filter_map(|d| std::fs::read_dir(d).ok())
        .flatten()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with("ipa-step-"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn isolation_is_podmans_device_rules_seccomp_and_no_local_status() {
    hardware_tests::require_root("container_registry_loop");
    if !with_crun_cgroups("isolation_is_podmans_device_rules_seccomp_and_no_local_status") {
        return;
    }
    // The agent's API on loopback, plain HTTP (busybox-static's wget
    // cannot do TLS; the bed's ramdisk serves it over TLS), with its local
    // status key written where the agent writes it.
    let state = Arc::new(AgentState::new(Config::default(), None));
    let server = Server::start(
        "127.0.0.1:0".parse().unwrap(),
        api::router(state.clone()),
        None,
    )
    .await
    .unwrap();
    let port = server.local_addr.port();
    let key = local_key::write(
        std::path::Path::new(local_key::DIR),
        port,
        state.local_key().unwrap(),
    )
    .unwrap();
    let url = format!("http://127.0.0.1:{port}/v1/local/status");
    // The key opens it (as `agent status` sends it); nothing else does.
    let http = tls::http_client(true, None, std::time::Duration::from_secs(10)).unwrap();
    let with = http
        .get(&url)
        .header(local_key::HEADER, state.local_key().unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(with.status(), 200);
    assert_eq!(http.get(&url).send().await.unwrap().status(), 401);

    let registry = Registry::start().unwrap();
    let script = format!(
        "{{ {}; }} > /out/report",
        isolation_probe(Some((
            &format!("$B nc 127.0.0.1 {port}"),
            &key.path().display().to_string()
        )))
    );
    let image = registry
        .push_busybox_image("probe:1", &["/bin/busybox", "sh", "-c", &script])
        .unwrap();
    let image = image.trim_start_matches("docker://").to_string();
    let ro = LoopDevice::new(1 << 20).unwrap();
    let other = LoopDevice::new(1 << 20).unwrap();
    {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .open(&ro.path)
            .unwrap();
        f.write_all(MARKER).unwrap();
        f.sync_all().unwrap();
    }

    // Not privileged: --device ...:r, another device node bind-mounted but
    // not granted, the host's network.
    let out = tempfile::tempdir().unwrap();
    let r = probe(
        &registry,
        &image,
        vec![
            "--rm --network=host".into(),
            format!("--volume {}:/out", out.path().display()),
            format!("--device {}:/dev/ro:r", ro.path.display()),
            format!("--volume {}:/dev/other", other.path.display()),
        ],
        out.path(),
    )
    .await;
    let status = &r["status"].1;
    assert!(status.contains("Seccomp: 2"), "a seccomp filter: {status}");
    assert!(status.contains("NoNewPrivs: 1"), "{status}");
    // podman's 11 capabilities: CHOWN DAC_OVERRIDE FOWNER FSETID KILL
    // SETGID SETUID SETPCAP NET_BIND_SERVICE SYS_CHROOT SETFCAP.
    assert!(status.contains("CapEff: 00000000800405fb"), "{status}");
    assert_eq!(
        r["ro-read"].0, 0,
        "the read-only grant reads: {:?}",
        r["ro-read"]
    );
    assert_ne!(
        r["ro-write"].0, 0,
        "a write to the read-only grant: {:?}",
        r["ro-write"]
    );
    assert!(
        r["ro-write"].1.contains("Operation not permitted"),
        "{:?}",
        r["ro-write"]
    );
    assert_eq!(
        marker_at(&ro.path, 0),
        MARKER,
        "the read-only device was written"
    );
    assert_ne!(
        r["ungranted"].0, 0,
        "an ungranted device: {:?}",
        r["ungranted"]
    );
    let mut head = vec![0; 22];
    std::fs::File::open(&other.path)
        .unwrap()
        .read_exact(&mut head)
        .unwrap();
    assert_eq!(head, vec![0; 22], "the ungranted device was written");
    assert!(
        r["ungranted"].1.contains("Operation not permitted"),
        "{:?}",
        r["ungranted"]
    );
    // ENOSYS, the profile's default action: seccomp, not capabilities.
    assert_ne!(r["personality"].0, 0, "{:?}", r["personality"]);
    assert!(
        r["personality"].1.contains("Function not implemented"),
        "{:?}",
        r["personality"]
    );
    assert!(
        r["local"].1.contains(" 401 Unauthorized"),
        "refused, not unreachable: {:?}",
        r["local"]
    );
    assert!(
        r["keyfile"].1.contains("No such file"),
        "{:?}",
        r["keyfile"]
    );
    assert!(
        step_cgroups().is_empty(),
        "cgroups left: {:?}",
        step_cgroups()
    );

    // --privileged: unconfined, as podman runs it.
    let script = format!("{{ {}; }} > /out/report", isolation_probe(None));
    let image = registry
        .push_busybox_image("probe-privileged:1", &["/bin/busybox", "sh", "-c", &script])
        .unwrap();
    let image = image.trim_start_matches("docker://").to_string();
    let out = tempfile::tempdir().unwrap();
    let r = probe(
        &registry,
        &image,
        vec![
            "--rm --privileged".into(),
            format!("--volume {}:/out", out.path().display()),
        ],
        out.path(),
    )
    .await;
    let status = &r["status"].1;
    assert!(status.contains("Seccomp: 0"), "no filter: {status}");
    assert!(status.contains("NoNewPrivs: 0"), "{status}");
    assert_eq!(r["personality"].0, 0, "{:?}", r["personality"]);
    assert!(
        step_cgroups().is_empty(),
        "cgroups left: {:?}",
        step_cgroups()
    );
    server.stop();
}

fn marker_at(dev: &std::path::Path, offset: u64) -> Vec<u8> {
    let mut f = std::fs::File::open(dev).unwrap();
    f.seek(SeekFrom::Start(offset)).unwrap();
    let mut buf = vec![0; MARKER.len()];
    f.read_exact(&mut buf).unwrap();
    buf
}
