//! The profile's translation, on a small profile of each kind of rule and
//! on the real file podman reads.

use super::*;
use oci_spec::runtime::LinuxSyscall;

fn caps(names: &[&str]) -> Vec<String> {
    names.iter().map(|c| format!("CAP_{c}")).collect()
}

fn target<'a>(caps: &'a [String], arch: &'a str) -> Target<'a> {
    Target {
        arch,
        kernel: Some((6, 1)),
        caps,
    }
}

/// The rules (by their names) whose action is `action`.
fn rules<'a>(s: &'a LinuxSeccomp, name: &str) -> Vec<&'a LinuxSyscall> {
    s.syscalls()
        .iter()
        .flatten()
        .filter(|r| r.names().iter().any(|n| n == name))
        .collect()
}

const SMALL: &str = r#"{
  "defaultAction": "SCMP_ACT_ERRNO", "defaultErrnoRet": 38,
  "archMap": [
    {"architecture": "SCMP_ARCH_X86_64", "subArchitectures": ["SCMP_ARCH_X86", "SCMP_ARCH_X32"]},
    {"architecture": "SCMP_ARCH_AARCH64", "subArchitectures": ["SCMP_ARCH_ARM"]}
  ],
  "syscalls": [
    {"names": ["read", "write"], "action": "SCMP_ACT_ALLOW", "args": [], "comment": "", "includes": {}, "excludes": {}},
    {"names": ["personality"], "action": "SCMP_ACT_ALLOW",
     "args": [{"index": 0, "value": 8, "valueTwo": 0, "op": "SCMP_CMP_EQ"}]},
    {"names": ["arch_prctl"], "action": "SCMP_ACT_ALLOW", "includes": {"arches": ["amd64", "x32"]}},
    {"names": ["mount"], "action": "SCMP_ACT_ALLOW", "includes": {"caps": ["CAP_SYS_ADMIN"]}},
    {"names": ["mount"], "action": "SCMP_ACT_ERRNO", "errnoRet": 1, "excludes": {"caps": ["CAP_SYS_ADMIN"]}},
    {"names": ["both"], "action": "SCMP_ACT_ALLOW", "includes": {"caps": ["CAP_SYS_ADMIN", "CAP_SYS_PTRACE"]}},
    {"names": ["newer"], "action": "SCMP_ACT_ALLOW", "includes": {"minKernel": "6.5"}},
    {"names": ["older"], "action": "SCMP_ACT_ALLOW", "excludes": {"minKernel": "6.5"}},
    {"name": "single", "action": "SCMP_ACT_ALLOW", "args": null}
  ]
}"#;

#[test]
fn rules_follow_the_containers_capabilities_arch_and_kernel() {
    let p = Profile::parse(SMALL).unwrap();
    let none = caps(&["CHOWN"]);
    let s = p.for_container(&target(&none, "amd64")).unwrap();
    assert_eq!(s.default_action(), LinuxSeccompAction::ScmpActErrno);
    assert_eq!(s.default_errno_ret(), Some(38));
    assert_eq!(
        s.architectures().clone().unwrap(),
        [Arch::ScmpArchX86_64, Arch::ScmpArchX86, Arch::ScmpArchX32]
    );
    assert_eq!(rules(&s, "read").len(), 1);
    let pers = rules(&s, "personality");
    let arg = pers[0].args().clone().unwrap()[0];
    assert_eq!((arg.index(), arg.value()), (0, 8));
    assert_eq!(rules(&s, "arch_prctl").len(), 1);
    // No CAP_SYS_ADMIN: only the EPERM rule for mount.
    let mount = rules(&s, "mount");
    assert_eq!(mount.len(), 1);
    assert_eq!(mount[0].action(), LinuxSeccompAction::ScmpActErrno);
    assert_eq!(mount[0].errno_ret(), Some(1));
    assert!(rules(&s, "both").is_empty());
    // Kernel 6.1: not yet `newer`, still `older`.
    assert!(rules(&s, "newer").is_empty());
    assert_eq!(rules(&s, "older").len(), 1);
    assert_eq!(rules(&s, "single").len(), 1);

    // CAP_SYS_ADMIN: the allow rule instead; `both` needs CAP_SYS_PTRACE
    // too. arm64: its own architectures, no arch_prctl. Kernel 6.8.
    let admin = caps(&["SYS_ADMIN"]);
    let mut t = target(&admin, "arm64");
    t.kernel = Some((6, 8));
    let s = p.for_container(&t).unwrap();
    assert_eq!(
        s.architectures().clone().unwrap(),
        [Arch::ScmpArchAarch64, Arch::ScmpArchArm]
    );
    let mount = rules(&s, "mount");
    assert_eq!(mount.len(), 1);
    assert_eq!(mount[0].action(), LinuxSeccompAction::ScmpActAllow);
    assert!(rules(&s, "both").is_empty());
    assert!(rules(&s, "arch_prctl").is_empty());
    assert_eq!(rules(&s, "newer").len(), 1);
    assert!(rules(&s, "older").is_empty());
    let both = caps(&["SYS_ADMIN", "SYS_PTRACE"]);
    let s = p.for_container(&target(&both, "amd64")).unwrap();
    assert_eq!(rules(&s, "both").len(), 1);

    // The JSON a runtime reads.
    let j = serde_json::to_value(&s).unwrap();
    assert_eq!(j["defaultAction"], "SCMP_ACT_ERRNO");
    assert_eq!(j["defaultErrnoRet"], 38);
    assert_eq!(j["architectures"][0], "SCMP_ARCH_X86_64");
}

#[test]
fn unusable_profiles_are_refused() {
    for (text, why) in [
        ("{", "not a containers seccomp profile"),
        (
            r#"{"defaultAction": "SCMP_ACT_BOGUS"}"#,
            "not a containers seccomp profile",
        ),
        (
            r#"{"defaultAction": "SCMP_ACT_ERRNO", "architectures": ["SCMP_ARCH_X86_64"],
                "archMap": [{"architecture": "SCMP_ARCH_X86_64"}]}"#,
            "both `architectures` and `archMap`",
        ),
    ] {
        let e = Profile::parse(text).unwrap_err();
        assert!(format!("{e:#}").contains(why), "{text}: {e:#}");
    }
    let p = Profile::parse(
        r#"{"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [
            {"name": "a", "names": ["b"], "action": "SCMP_ACT_ALLOW"}]}"#,
    )
    .unwrap();
    let e = p.for_container(&target(&[], "amd64")).unwrap_err();
    assert!(
        format!("{e:#}").contains("both `name` and `names`"),
        "{e:#}"
    );
    let p = Profile::parse(
        r#"{"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [
            {"names": ["x"], "action": "SCMP_ACT_ALLOW", "includes": {"minKernel": "new"}}]}"#,
    )
    .unwrap();
    let e = p.for_container(&target(&[], "amd64")).unwrap_err();
    assert!(format!("{e:#}").contains("minKernel \"new\""), "{e:#}");
    let e = Profile::load(Path::new("/nonexistent/seccomp.json")).unwrap_err();
    assert!(
        format!("{e:#}").contains("the seccomp profile /nonexistent/seccomp.json"),
        "{e:#}"
    );
}

#[test]
fn kernel_versions() {
    assert_eq!(kernel_version("6.1.0-28-amd64"), Some((6, 1)));
    assert_eq!(kernel_version("6.18.44-fc-v1272\n"), Some((6, 18)));
    assert_eq!(kernel_version("5.4"), Some((5, 4)));
    assert_eq!(kernel_version("x"), None);
    assert!(running_kernel().is_some());
}

/// The file podman reads (ci/install-deps installs Debian's
/// golang-github-containers-common, the ramdisk carries it).
#[test]
fn the_real_profile_confines_a_default_container() {
    let p = Profile::load(Path::new(DEFAULT_PROFILE)).unwrap_or_else(|e| {
        panic!("{e:#} (ci/install-deps installs golang-github-containers-common)")
    });
    let podman = caps(&crate::container_steps::bundle::PODMAN_CAPS);
    let s = p.for_container(&target(&podman, "amd64")).unwrap();
    assert_eq!(s.default_action(), LinuxSeccompAction::ScmpActErrno);
    assert_eq!(s.default_errno_ret(), Some(38), "ENOSYS for the unlisted");
    assert_eq!(s.architectures().as_ref().unwrap()[0], Arch::ScmpArchX86_64);
    let allowed = |name: &str| {
        rules(&s, name)
            .iter()
            .any(|r| r.action() == LinuxSeccompAction::ScmpActAllow)
    };
    assert!(allowed("read") && allowed("execve") && allowed("chroot"));
    // Without CAP_SYS_ADMIN: sethostname and the like are refused (EPERM),
    // and personality only with the values the profile lists.
    assert!(!allowed("sethostname"));
    assert!(rules(&s, "sethostname")
        .iter()
        .all(|r| r.action() == LinuxSeccompAction::ScmpActErrno && r.errno_ret() == Some(1)));
    assert!(rules(&s, "add_key").is_empty(), "unlisted: the default");
    let pers = rules(&s, "personality");
    assert!(!pers.is_empty());
    assert!(pers.iter().all(|r| r
        .args()
        .as_ref()
        .is_some_and(|a| a.iter().all(|a| a.value() != 0x0040000))));
    // CAP_SYS_ADMIN (a container given it) gets the allow rule.
    let admin = caps(&["SYS_ADMIN"]);
    let s = p.for_container(&target(&admin, "amd64")).unwrap();
    assert!(rules(&s, "sethostname")
        .iter()
        .all(|r| r.action() == LinuxSeccompAction::ScmpActAllow));
}
