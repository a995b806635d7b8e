//! The runtime spec built from an image config and run options.

use super::*;
use crate::container_steps::options::{parse_run, Device};
use oci_spec::runtime::LinuxNamespaceType;

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
    let spec = spec(&base(), &run, "step", u64::MAX).unwrap();
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
    let s = spec(&base(), &run, "step", u64::MAX).unwrap();
    assert!(!has_netns(&s));
    let linux = s.linux().as_ref().unwrap();
    let dev = &linux.devices().clone().unwrap()[0];
    assert_eq!(dev.path(), Path::new("/dev/target"));
    assert_eq!(
        (dev.typ(), dev.major(), dev.minor()),
        (LinuxDeviceType::C, 1, 3)
    );
    let rules = linux
        .resources()
        .as_ref()
        .unwrap()
        .devices()
        .clone()
        .unwrap();
    assert_eq!(rules[0].access().as_deref(), Some("rw"));
    let mounts = s.mounts().clone().unwrap();
    let data = mounts
        .iter()
        .find(|m| m.destination() == Path::new("/data"))
        .unwrap();
    assert_eq!(data.source().as_deref(), Some(Path::new("/srv")));
    assert!(data.options().clone().unwrap().contains(&"ro".to_string()));

    let run = parse_run(&words("--privileged")).unwrap();
    let s = spec(&base(), &run, "step", u64::MAX).unwrap();
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
    let e = spec(&none, &RunOptions::default(), "s", u64::MAX).unwrap_err();
    assert!(format!("{e:#}").contains("neither an entrypoint nor a command"));
    let named = image(serde_json::json!({
        "architecture": "amd64", "os": "linux",
        "config": {"Cmd": ["x"], "User": "nobody"},
        "rootfs": {"type": "layers", "diff_ids": []}
    }));
    let e = spec(&named, &RunOptions::default(), "s", u64::MAX).unwrap_err();
    assert!(format!("{e:#}").contains("only numeric users"));
    let mut run = RunOptions::default();
    run.devices.push(Device {
        host: "/etc/hostname".into(),
        container: "/dev/x".into(),
        permissions: "rwm".into(),
    });
    assert!(spec(&base(), &run, "s", u64::MAX).is_err());
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
    let s = spec(&base(), &run, "s", bounding).unwrap();
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
