//! The OCI runtime bundle's `config.json` for one container step, built
//! with `oci-spec` from the image's config (Entrypoint, Cmd, Env,
//! WorkingDir, User) and the step's [`RunOptions`], with podman's meaning:
//! podman's default capability set and `no_new_privileges`; podman's
//! default seccomp profile ([`super::seccomp`]) for those capabilities;
//! a cgroup of its own (`/ID`) whose device rules deny every device but
//! the ones crun allows every container podman runs ([`DEFAULT_DEVICES`])
//! and each `--device` with its permissions; `--network=host` keeps the
//! host's network namespace (else a new one with only loopback);
//! `--privileged` gives every capability, the host's `/dev` with every
//! device allowed, no seccomp filter and no masked or read-only paths;
//! `--device` creates that node in the container's `/dev`; `--volume`
//! bind-mounts; `--env` sets variables last.

use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;

use anyhow::{bail, Context, Result};
use oci_spec::image::ImageConfiguration;
use oci_spec::runtime::{
    Capabilities, Capability, LinuxCapabilitiesBuilder, LinuxDeviceBuilder, LinuxDeviceCgroup,
    LinuxDeviceCgroupBuilder, LinuxDeviceType, LinuxNamespaceType, Mount, MountBuilder, Spec,
    UserBuilder,
};

use super::options::RunOptions;
use super::seccomp::{Profile, Target};

/// podman's default capabilities (containers.conf `default_capabilities`).
pub(crate) const PODMAN_CAPS: [&str; 11] = [
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
];

/// Every capability Linux has, for `--privileged`, in the kernel's order:
/// the index is the capability's number (`<linux/capability.h>`).
const ALL_CAPS: [&str; 41] = [
    "CHOWN",
    "DAC_OVERRIDE",
    "DAC_READ_SEARCH",
    "FOWNER",
    "FSETID",
    "KILL",
    "SETGID",
    "SETUID",
    "SETPCAP",
    "LINUX_IMMUTABLE",
    "NET_BIND_SERVICE",
    "NET_BROADCAST",
    "NET_ADMIN",
    "NET_RAW",
    "IPC_LOCK",
    "IPC_OWNER",
    "SYS_MODULE",
    "SYS_RAWIO",
    "SYS_CHROOT",
    "SYS_PTRACE",
    "SYS_PACCT",
    "SYS_ADMIN",
    "SYS_BOOT",
    "SYS_NICE",
    "SYS_RESOURCE",
    "SYS_TIME",
    "SYS_TTY_CONFIG",
    "MKNOD",
    "LEASE",
    "AUDIT_WRITE",
    "AUDIT_CONTROL",
    "SETFCAP",
    "MAC_OVERRIDE",
    "MAC_ADMIN",
    "SYSLOG",
    "WAKE_ALARM",
    "BLOCK_SUSPEND",
    "AUDIT_READ",
    "PERFMON",
    "BPF",
    "CHECKPOINT_RESTORE",
];

/// The capabilities of `names` the agent itself may pass on: those in its
/// bounding set `bounding` (`CapBnd` of `/proc/self/status`), as podman
/// grants `--privileged` the capabilities it has rather than every one
/// (asking for one outside the set makes crun's `capset` fail).
fn within<'a>(names: &[&'a str], bounding: u64) -> Vec<&'a str> {
    names
        .iter()
        .copied()
        .filter(|n| {
            ALL_CAPS
                .iter()
                .position(|c| c == n)
                .is_some_and(|bit| bounding & (1u64 << bit) != 0)
        })
        .collect()
}

/// The bounding set in a `/proc/self/status` text (all capabilities when
/// it does not say).
pub(crate) fn bounding_set(status: &str) -> u64 {
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapBnd:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .unwrap_or(u64::MAX)
}

const DEFAULT_PATH: &str = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

fn caps(names: &[&str]) -> Result<Capabilities> {
    names
        .iter()
        .map(|n| {
            serde_json::from_value::<Capability>(serde_json::Value::String(format!("CAP_{n}")))
                .with_context(|| format!("capability {n}"))
        })
        .collect()
}

/// The process's argv: Entrypoint then Cmd.
fn args(image: &ImageConfiguration) -> Result<Vec<String>> {
    let cfg = image.config().as_ref();
    let mut args: Vec<String> = cfg.and_then(|c| c.entrypoint().clone()).unwrap_or_default();
    args.extend(cfg.and_then(|c| c.cmd().clone()).unwrap_or_default());
    if args.is_empty() {
        bail!("the image has neither an entrypoint nor a command");
    }
    Ok(args)
}

/// The image's environment, PATH if it has none, then `--env`s (a later
/// value of a name replaces an earlier one).
fn env(image: &ImageConfiguration, run: &RunOptions) -> Vec<String> {
    let mut env: Vec<String> = image
        .config()
        .as_ref()
        .and_then(|c| c.env().clone())
        .unwrap_or_default();
    if !env.iter().any(|e| e.starts_with("PATH=")) {
        env.insert(0, DEFAULT_PATH.to_string());
    }
    for (k, v) in &run.env {
        let prefix = format!("{k}=");
        env.retain(|e| !e.starts_with(&prefix));
        env.push(format!("{k}={v}"));
    }
    env
}

/// The image's `User` as uid and gid: numeric only (no passwd lookup).
fn user(image: &ImageConfiguration) -> Result<(u32, u32)> {
    let u = image
        .config()
        .as_ref()
        .and_then(|c| c.user().clone())
        .unwrap_or_default();
    if u.is_empty() || u == "root" {
        return Ok((0, 0));
    }
    let (uid, gid) = u.split_once(':').unwrap_or((&u, "0"));
    match (uid.parse(), gid.parse()) {
        (Ok(uid), Ok(gid)) => Ok((uid, gid)),
        _ => bail!("the image's user {u:?}: only numeric users (UID[:GID]) are supported"),
    }
}

fn bind(source: &Path, destination: &Path, read_only: bool) -> Result<Mount> {
    MountBuilder::default()
        .destination(destination)
        .typ("bind")
        .source(source)
        .options(vec![
            "rbind".to_string(),
            if read_only { "ro" } else { "rw" }.to_string(),
        ])
        .build()
        .context("a bind mount")
}

/// The devices crun allows every container podman runs (crun's default
/// device rules; podman adds its `--device`s after them): mknod of any
/// node, and null, zero, full, random, urandom, tty, console, ptmx, the
/// pseudo-terminals and tun. Listed here so the rules are the same on any
/// runtime and on cgroup v1 and v2.
const DEFAULT_DEVICES: [(LinuxDeviceType, Option<i64>, Option<i64>, &str); 12] = [
    (LinuxDeviceType::C, None, None, "m"),
    (LinuxDeviceType::B, None, None, "m"),
    (LinuxDeviceType::C, Some(1), Some(3), "rwm"),
    (LinuxDeviceType::C, Some(1), Some(5), "rwm"),
    (LinuxDeviceType::C, Some(1), Some(7), "rwm"),
    (LinuxDeviceType::C, Some(1), Some(8), "rwm"),
    (LinuxDeviceType::C, Some(1), Some(9), "rwm"),
    (LinuxDeviceType::C, Some(5), Some(0), "rwm"),
    (LinuxDeviceType::C, Some(5), Some(1), "rwm"),
    (LinuxDeviceType::C, Some(5), Some(2), "rwm"),
    (LinuxDeviceType::C, Some(136), None, "rwm"),
    (LinuxDeviceType::C, Some(10), Some(200), "rwm"),
];

/// A device cgroup rule.
fn rule(
    allow: bool,
    typ: LinuxDeviceType,
    major: Option<i64>,
    minor: Option<i64>,
    access: &str,
) -> Result<LinuxDeviceCgroup> {
    let mut b = LinuxDeviceCgroupBuilder::default()
        .allow(allow)
        .typ(typ)
        .access(access);
    if let Some(m) = major {
        b = b.major(m);
    }
    if let Some(m) = minor {
        b = b.minor(m);
    }
    b.build().context("a device rule")
}

/// What the bundle takes from the agent and the machine.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Host<'a> {
    /// The container's id: its cgroup is `/ID` under the hierarchy's root.
    pub id: &'a str,
    /// The container's hostname.
    pub hostname: &'a str,
    /// The agent's bounding set ([`bounding_set`]): the process gets only
    /// capabilities in it.
    pub bounding: u64,
    /// podman's seccomp profile; required unless the run is privileged.
    pub seccomp: Option<&'a Profile>,
    /// The running kernel's (major, minor), for the profile's `minKernel`.
    pub kernel: Option<(u32, u32)>,
}

/// The bundle's `config.json` for `image` run with `run` on `host`; its
/// root filesystem is `rootfs` beside it.
pub(crate) fn spec(image: &ImageConfiguration, run: &RunOptions, host: &Host<'_>) -> Result<Spec> {
    let mut spec = Spec::default();
    spec.set_hostname(Some(host.hostname.to_string()));
    let (uid, gid) = user(image)?;
    let cfg = image.config().as_ref();
    let cwd = cfg
        .and_then(|c| c.working_dir().clone())
        .filter(|w| !w.is_empty())
        .unwrap_or_else(|| "/".into());
    let cap_names = within(
        if run.privileged {
            &ALL_CAPS
        } else {
            &PODMAN_CAPS
        },
        host.bounding,
    );
    let caps = caps(&cap_names)?;
    let process = spec.process_mut().as_mut().context("the default process")?;
    process.set_args(Some(args(image)?));
    process.set_env(Some(env(image, run)));
    process.set_cwd(cwd.into());
    process.set_user(
        UserBuilder::default()
            .uid(uid)
            .gid(gid)
            .build()
            .context("the user")?,
    );
    process.set_no_new_privileges(Some(!run.privileged));
    process.set_capabilities(Some(
        LinuxCapabilitiesBuilder::default()
            .bounding(caps.clone())
            .effective(caps.clone())
            .permitted(caps.clone())
            .inheritable(Capabilities::new())
            .ambient(Capabilities::new())
            .build()
            .context("the capabilities")?,
    ));
    if let Some(root) = spec.root_mut().as_mut() {
        root.set_path("rootfs".into());
        root.set_readonly(Some(false));
    }

    // No cgroup mount: the container does not see the hierarchy.
    let mut mounts: Vec<Mount> = spec.mounts().clone().unwrap_or_default();
    mounts.retain(|m| m.destination() != Path::new("/sys/fs/cgroup"));
    if run.privileged {
        mounts.retain(|m| !m.destination().starts_with("/dev"));
        mounts.push(bind(Path::new("/dev"), Path::new("/dev"), false)?);
        for m in &mut mounts {
            if m.destination() == Path::new("/sys") {
                let opts = m.options().clone().unwrap_or_default();
                m.set_options(Some(opts.into_iter().filter(|o| o != "ro").collect()));
            }
        }
    }
    for v in &run.volumes {
        mounts.push(bind(&v.host, &v.container, v.read_only)?);
    }
    spec.set_mounts(Some(mounts));

    let linux = spec
        .linux_mut()
        .as_mut()
        .context("the default linux section")?;
    if run.network_host {
        if let Some(ns) = linux.namespaces_mut().as_mut() {
            ns.retain(|n| n.typ() != LinuxNamespaceType::Network);
        }
    }
    linux.set_cgroups_path(Some(format!("/{}", host.id).into()));
    if run.privileged {
        // podman: a privileged container is unconfined.
        linux.set_seccomp(None);
    } else {
        let profile = host
            .seccomp
            .context("no seccomp profile for a container that is not --privileged")?;
        let names: Vec<String> = cap_names.iter().map(|c| format!("CAP_{c}")).collect();
        let target = Target {
            arch: super::seccomp::native_arch(),
            kernel: host.kernel,
            caps: &names,
        };
        linux.set_seccomp(Some(profile.for_container(&target)?));
    }
    let mut nodes = Vec::new();
    // Deny all, then what may be used (a later rule wins).
    let mut rules = vec![rule(false, LinuxDeviceType::A, None, None, "rwm")?];
    if run.privileged {
        linux.set_masked_paths(Some(Vec::new()));
        linux.set_readonly_paths(Some(Vec::new()));
        rules.push(rule(true, LinuxDeviceType::A, None, None, "rwm")?);
    } else {
        for (typ, major, minor, access) in DEFAULT_DEVICES {
            rules.push(rule(true, typ, major, minor, access)?);
        }
    }
    for d in &run.devices {
        let meta =
            std::fs::metadata(&d.host).with_context(|| format!("--device {}", d.host.display()))?;
        let typ = if meta.file_type().is_block_device() {
            LinuxDeviceType::B
        } else if meta.file_type().is_char_device() {
            LinuxDeviceType::C
        } else {
            bail!("--device {}: not a device node", d.host.display());
        };
        let major = i64::try_from(nix::sys::stat::major(meta.rdev())).context("major")?;
        let minor = i64::try_from(nix::sys::stat::minor(meta.rdev())).context("minor")?;
        if !run.privileged {
            nodes.push(
                LinuxDeviceBuilder::default()
                    .path(&d.container)
                    .typ(typ)
                    .major(major)
                    .minor(minor)
                    .file_mode(meta.mode() & 0o7777)
                    .uid(0u32)
                    .gid(0u32)
                    .build()
                    .context("a device")?,
            );
        }
        rules.push(rule(true, typ, Some(major), Some(minor), &d.permissions)?);
    }
    linux.set_devices(Some(nodes));
    if let Some(res) = linux.resources_mut().as_mut() {
        res.set_devices(Some(rules));
    }
    Ok(spec)
}

#[cfg(test)]
#[path = "bundle_tests.rs"]
mod tests;
