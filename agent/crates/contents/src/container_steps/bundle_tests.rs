//! The runtime spec built from an image config and run options.

use super::*;
use crate::container_steps::options::{parse_run, Device};
use crate::container_steps::seccomp::Profile;
use oci_spec::runtime::LinuxNamespaceType;

/// The spec's device cgroup rules, in order.
fn device_rules(linux: &oci_spec::runtime::Linux) -> Vec<LinuxDeviceCgroup> {
    linux
        .resources()
        .as_ref()
        .unwrap()
        .devices()
        .clone()
        .unwrap()
}

fn image(json: serde_json::Value) -> ImageConfiguration {
    serde_json::from_value(json).unwrap()
}

fn base() -> ImageConfiguration {
    image(serde_json::json!({
        "architecture": "amd64", "os": "linux",
        "config": {"Entrypoint": ["/bin/busybox", "sh"], "Cmd": ["-c", "echo hi"],
                   "Env": ["PATH=/bin", "A=image"], "WorkingDir": "/work", "User": "10:20"},
        "rootfs": {"type": "layers", "diff_ids": []}
    }))
}

/// A small profile: every syscall but `mount` allowed; `mount` only with
/// CAP_SYS_ADMIN.
fn profile() -> &'static Profile {
    static P: std::sync::OnceLock<Profile> = std::sync::OnceLock::new();
    P.get_or_init(|| {
        Profile::parse(
            r#"{"defaultAction": "SCMP_ACT_ERRNO", "defaultErrnoRet": 38,
                "archMap": [{"architecture": "SCMP_ARCH_X86_64"}, {"architecture": "SCMP_ARCH_AARCH64"}],
                "syscalls": [{"names": ["read"], "action": "SCMP_ACT_ALLOW"},
                  {"names": ["mount"], "action": "SCMP_ACT_ALLOW", "includes": {"caps": ["CAP_SYS_ADMIN"]}}]}"#,
        )
        .unwrap()
    })
}

fn host(bounding: u64) -> Host<'static> {
    Host {
        id: "ipa-step-1",
        hostname: "step",
        bounding,
        seccomp: Some(profile()),
        kernel: Some((6, 1)),
    }
}

fn words(s: &str) -> Vec<String> {
    s.split_whitespace().map(String::from).collect()
}

fn has_netns(spec: &Spec) -> bool {
    let ns = spec.linux().as_ref().unwrap().namespaces().clone().unwrap();
    ns.iter().any(|n| n.typ() == LinuxNamespaceType::Network)
}

#[test]
fn the_image_config_becomes_the_process() {
    let run = parse_run(&words("--env A=run --env B=2")).unwrap();
    let spec = spec(&base(), &run, &host(u64::MAX)).unwrap();
    let p = spec.process().as_ref().unwrap();
    assert_eq!(
        p.args().clone().unwrap(),
        ["/bin/busybox", "sh", "-c", "echo hi"]
    );
    assert_eq!(p.env().clone().unwrap(), ["PATH=/bin", "A=run", "B=2"]);
    assert_eq!(p.cwd(), Path::new("/work"));
    assert_eq!((p.user().uid(), p.user().gid()), (10, 20));
    let caps = p
        .capabilities()
        .as_ref()
        .unwrap()
        .bounding()
        .clone()
        .unwrap();
    assert_eq!(caps.len(), PODMAN_CAPS.len());
    assert!(!caps.contains(&Capability::SysAdmin));
    assert!(
        has_netns(&spec),
        "no --network=host: a network namespace of its own"
    );
    // The JSON a runtime reads.
    let j = serde_json::to_value(&spec).unwrap();
    assert_eq!(j["root"]["path"], "rootfs");
    assert!(j["mounts"]
        .as_array()
        .unwrap()
        .iter()
        .all(|m| m["destination"] != "/sys/fs/cgroup"));
}

#[test]
fn host_network_privileged_volumes_and_devices() {
    let mut run = parse_run(&words("--network=host -v /srv:/data:ro")).unwrap();
    run.devices.push(Device {
        host: "/dev/null".into(),
        container: "/dev/target".into(),
        permissions: "rw".into(),
    });
    let s = spec(&base(), &run, &host(u64::MAX)).unwrap();
    assert!(!has_netns(&s));
    let linux = s.linux().as_ref().unwrap();
    let dev = &linux.devices().clone().unwrap()[0];
    assert_eq!(dev.path(), Path::new("/dev/target"));
    assert_eq!(
        (dev.typ(), dev.major(), dev.minor()),
        (LinuxDeviceType::C, 1, 3)
    );
    let rules = device_rules(linux);
    assert_eq!(rules.last().unwrap().access().as_deref(), Some("rw"));
    let mounts = s.mounts().clone().unwrap();
    let data = mounts
        .iter()
        .find(|m| m.destination() == Path::new("/data"))
        .unwrap();
    assert_eq!(data.source().as_deref(), Some(Path::new("/srv")));
    assert!(data.options().clone().unwrap().contains(&"ro".to_string()));

    let run = parse_run(&words("--privileged")).unwrap();
    let s = spec(&base(), &run, &host(u64::MAX)).unwrap();
    let p = s.process().as_ref().unwrap();
    let caps = p
        .capabilities()
        .as_ref()
        .unwrap()
        .bounding()
        .clone()
        .unwrap();
    assert_eq!(caps.len(), ALL_CAPS.len());
    let mounts = s.mounts().clone().unwrap();
    let dev = mounts
        .iter()
        .find(|m| m.destination() == Path::new("/dev"))
        .unwrap();
    assert_eq!(dev.typ().as_deref(), Some("bind"));
    assert!(s
        .linux()
        .as_ref()
        .unwrap()
        .masked_paths()
        .clone()
        .unwrap()
        .is_empty());
}

#[test]
fn unusable_images_are_refused() {
    let none = image(serde_json::json!({
        "architecture": "amd64", "os": "linux", "config": {},
        "rootfs": {"type": "layers", "diff_ids": []}
    }));
    let e = spec(&none, &RunOptions::default(), &host(u64::MAX)).unwrap_err();
    assert!(format!("{e:#}").contains("neither an entrypoint nor a command"));
    let named = image(serde_json::json!({
        "architecture": "amd64", "os": "linux",
        "config": {"Cmd": ["x"], "User": "nobody"},
        "rootfs": {"type": "layers", "diff_ids": []}
    }));
    let e = spec(&named, &RunOptions::default(), &host(u64::MAX)).unwrap_err();
    assert!(format!("{e:#}").contains("only numeric users"));
    let mut run = RunOptions::default();
    run.devices.push(Device {
        host: "/etc/hostname".into(),
        container: "/dev/x".into(),
        permissions: "rwm".into(),
    });
    assert!(spec(&base(), &run, &host(u64::MAX)).is_err());
}

#[test]
fn privileged_gets_only_the_capabilities_the_agent_has() {
    // This machine's kind of sandbox: CAP_SYS_RESOURCE (24) dropped.
    let bounding = bounding_set("Name:\tagent\nCapBnd:\t000001fffeffffff\n");
    assert_eq!(bounding, 0x0000_01ff_feff_ffff);
    let run = RunOptions {
        privileged: true,
        ..RunOptions::default()
    };
    let s = spec(&base(), &run, &host(bounding)).unwrap();
    let caps = s
        .process()
        .as_ref()
        .and_then(|p| p.capabilities().as_ref())
        .and_then(|c| c.bounding().clone())
        .unwrap();
    assert_eq!(caps.len(), ALL_CAPS.len() - 1);
    let text = serde_json::to_string(&caps).unwrap();
    assert!(!text.contains("CAP_SYS_RESOURCE"), "{text}");
    assert!(text.contains("CAP_SYS_ADMIN"), "{text}");
    assert_eq!(bounding_set("no such line"), u64::MAX);
}

#[test]
fn cgroup_device_rules_and_seccomp_are_podmans() {
    let mut run = RunOptions::default();
    run.devices.push(Device {
        host: "/dev/null".into(),
        container: "/dev/ro".into(),
        permissions: "r".into(),
    });
    let s = spec(&base(), &run, &host(u64::MAX)).unwrap();
    let linux = s.linux().as_ref().unwrap();
    assert_eq!(
        linux.cgroups_path().as_deref(),
        Some(Path::new("/ipa-step-1"))
    );
    let rules = device_rules(linux);
    let text: Vec<String> = rules
        .iter()
        .map(|r| {
            let n = |v: Option<i64>| v.map_or("*".to_string(), |v| v.to_string());
            format!(
                "{} {:?} {}:{} {}",
                if r.allow() { "allow" } else { "deny" },
                r.typ().unwrap(),
                n(r.major()),
                n(r.minor()),
                r.access().clone().unwrap()
            )
        })
        .collect();
    assert_eq!(text[0], "deny A *:* rwm", "deny all first: {text:?}");
    for allowed in [
        "C 1:3 rwm",
        "C 1:9 rwm",
        "C 5:2 rwm",
        "C 136:* rwm",
        "B *:* m",
    ] {
        assert!(text.contains(&format!("allow {allowed}")), "{text:?}");
    }
    assert_eq!(text.last().unwrap(), "allow C 1:3 r", "the grant last");
    assert!(!text.iter().any(|t| t.starts_with("allow A")), "{text:?}");
    // Seccomp from the profile, without the CAP_SYS_ADMIN rule.
    let sc = linux.seccomp().as_ref().expect("a seccomp filter");
    let names: Vec<&String> = sc
        .syscalls()
        .iter()
        .flatten()
        .flat_map(|r| r.names())
        .collect();
    assert_eq!(names, ["read"]);
    assert_eq!(
        s.process().as_ref().unwrap().no_new_privileges(),
        Some(true)
    );

    // Privileged: no filter, every device, no profile needed.
    let run = RunOptions {
        privileged: true,
        ..RunOptions::default()
    };
    let mut h = host(u64::MAX);
    h.seccomp = None;
    let s = spec(&base(), &run, &h).unwrap();
    let linux = s.linux().as_ref().unwrap();
    assert!(linux.seccomp().is_none());
    let rules = device_rules(linux);
    let last = rules.last().unwrap();
    assert!(last.allow() && last.typ() == Some(LinuxDeviceType::A));
    assert_eq!(last.access().as_deref(), Some("rwm"));
    assert_eq!(
        s.process().as_ref().unwrap().no_new_privileges(),
        Some(false)
    );
    // Not privileged and no profile: refused, never unconfined.
    let e = spec(&base(), &RunOptions::default(), &h).unwrap_err();
    assert!(format!("{e:#}").contains("no seccomp profile"), "{e:#}");
}
