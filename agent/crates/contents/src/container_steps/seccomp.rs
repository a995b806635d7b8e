//! podman's default seccomp profile for a container step: the containers
//! project's `seccomp.json` (podman's default `seccomp_profile`; Debian's
//! golang-github-containers-common ships it at [`DEFAULT_PROFILE`], and the
//! ramdisk carries that file) read into a typed [`Profile`] and turned into
//! the OCI `linux.seccomp` for one container as podman does:
//!
//! * the architectures: the native one and its sub-architectures from
//!   `archMap` (or the profile's `architectures` as they are);
//! * a rule is kept only when the container has every capability its
//!   `includes.caps` names (in its bounding set), the machine is one of
//!   `includes.arches` and its kernel at least `includes.minKernel`, and
//!   none of `excludes` holds (a capability it has, the architecture, a
//!   kernel at least that version);
//! * the default action and errno, each rule's action, errno and argument
//!   conditions unchanged.
//!
//! A profile that does not parse is an error naming the file: a container
//! step never runs unconfined because of it.

use std::path::Path;

use anyhow::{bail, Context, Result};
use oci_spec::runtime::{
    Arch, LinuxSeccomp, LinuxSeccompAction, LinuxSeccompArg, LinuxSeccompBuilder,
    LinuxSyscallBuilder,
};
use serde::Deserialize;

/// Where podman (containers.conf's default) and this agent read the profile.
pub(crate) const DEFAULT_PROFILE: &str = "/usr/share/containers/seccomp.json";

/// A containers-format seccomp profile.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Profile {
    default_action: LinuxSeccompAction,
    default_errno_ret: Option<u32>,
    architectures: Option<Vec<Arch>>,
    arch_map: Option<Vec<ArchMap>>,
    syscalls: Option<Vec<Rule>>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ArchMap {
    architecture: Arch,
    sub_architectures: Option<Vec<Arch>>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Rule {
    name: Option<String>,
    names: Option<Vec<String>>,
    action: LinuxSeccompAction,
    errno_ret: Option<u32>,
    args: Option<Vec<LinuxSeccompArg>>,
    includes: Option<Filter>,
    excludes: Option<Filter>,
}

/// A rule's `includes` or `excludes`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Filter {
    caps: Option<Vec<String>>,
    arches: Option<Vec<String>>,
    min_kernel: Option<String>,
}

/// The container and machine a profile is translated for.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Target<'a> {
    /// The machine's architecture in Go's names, as profiles spell it
    /// (`amd64`, `arm64`): [`native_arch`].
    pub arch: &'a str,
    /// The running kernel's (major, minor), when known.
    pub kernel: Option<(u32, u32)>,
    /// The container's bounding capabilities (`CAP_SYS_ADMIN`, ...).
    pub caps: &'a [String],
}

/// This machine's architecture in Go's names.
pub(crate) fn native_arch() -> &'static str {
    if cfg!(target_arch = "x86_64") {
        "amd64"
    } else if cfg!(target_arch = "aarch64") {
        "arm64"
    } else {
        std::env::consts::ARCH
    }
}

/// libseccomp's name of a Go architecture name (the profiles' `archMap`
/// keys), for the architectures this agent is built for.
fn seccomp_arch(go: &str) -> Option<Arch> {
    match go {
        "amd64" => Some(Arch::ScmpArchX86_64),
        "arm64" => Some(Arch::ScmpArchAarch64),
        _ => None,
    }
}

/// (major, minor) of a kernel release such as `6.1.0-28-amd64`.
pub(crate) fn kernel_version(release: &str) -> Option<(u32, u32)> {
    let mut parts = release.trim().split(['.', '-', '+']);
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

/// The running kernel's (major, minor).
pub(crate) fn running_kernel() -> Option<(u32, u32)> {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .ok()
        .as_deref()
        .and_then(kernel_version)
}

impl Profile {
    /// Parses a profile's JSON text.
    pub(crate) fn parse(text: &str) -> Result<Self> {
        let p: Profile = serde_json::from_str(text).context("not a containers seccomp profile")?;
        if p.architectures.as_ref().is_some_and(|a| !a.is_empty())
            && p.arch_map.as_ref().is_some_and(|a| !a.is_empty())
        {
            bail!("it has both `architectures` and `archMap`");
        }
        Ok(p)
    }

    /// Reads the profile at `path`.
    pub(crate) fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("the seccomp profile {}", path.display()))?;
        Self::parse(&text).with_context(|| format!("the seccomp profile {}", path.display()))
    }

    /// The OCI `linux.seccomp` of a container: see the module's header.
    pub(crate) fn for_container(&self, t: &Target<'_>) -> Result<LinuxSeccomp> {
        let mut arches: Vec<Arch> = self.architectures.clone().unwrap_or_default();
        if let Some(native) = seccomp_arch(t.arch) {
            if let Some(m) = self
                .arch_map
                .iter()
                .flatten()
                .find(|m| m.architecture == native)
            {
                arches.push(m.architecture);
                arches.extend(m.sub_architectures.iter().flatten().copied());
            }
        }
        let mut syscalls = Vec::new();
        for (i, rule) in self.syscalls.iter().flatten().enumerate() {
            if !rule.applies(t).with_context(|| format!("syscalls[{i}]"))? {
                continue;
            }
            let names = match (&rule.name, &rule.names) {
                (Some(n), Some(ns)) if !n.is_empty() && !ns.is_empty() => {
                    bail!("syscalls[{i}] has both `name` and `names`")
                }
                (Some(n), _) if !n.is_empty() => vec![n.clone()],
                (_, Some(ns)) if !ns.is_empty() => ns.clone(),
                _ => continue,
            };
            let mut call = LinuxSyscallBuilder::default()
                .names(names)
                .action(rule.action);
            if let Some(e) = rule.errno_ret {
                call = call.errno_ret(e);
            }
            if let Some(args) = rule.args.as_ref().filter(|a| !a.is_empty()) {
                call = call.args(args.clone());
            }
            syscalls.push(call.build().with_context(|| format!("syscalls[{i}]"))?);
        }
        let mut b = LinuxSeccompBuilder::default()
            .default_action(self.default_action)
            .syscalls(syscalls);
        if let Some(e) = self.default_errno_ret {
            b = b.default_errno_ret(e);
        }
        if !arches.is_empty() {
            b = b.architectures(arches);
        }
        b.build().context("the seccomp section")
    }
}

impl Rule {
    /// Whether the rule is kept for `t` (podman's order: excludes, then
    /// includes).
    fn applies(&self, t: &Target<'_>) -> Result<bool> {
        let has = |c: &String| t.caps.contains(c);
        if let Some(ex) = &self.excludes {
            if ex.arches.iter().flatten().any(|a| a == t.arch)
                || ex.caps.iter().flatten().any(has)
                || at_least(t.kernel, ex.min_kernel.as_deref())?.unwrap_or(false)
            {
                return Ok(false);
            }
        }
        if let Some(inc) = &self.includes {
            if inc.arches.as_ref().is_some_and(|a| !a.is_empty())
                && !inc.arches.iter().flatten().any(|a| a == t.arch)
            {
                return Ok(false);
            }
            if !inc.caps.iter().flatten().all(has) {
                return Ok(false);
            }
            if !at_least(t.kernel, inc.min_kernel.as_deref())?.unwrap_or(true) {
                return Ok(false);
            }
        }
        Ok(true)
    }
}

/// Whether `kernel` is at least `min` (`None` when the rule names no
/// version); an error when it names one this machine's kernel cannot be
/// compared with.
fn at_least(kernel: Option<(u32, u32)>, min: Option<&str>) -> Result<Option<bool>> {
    let Some(min) = min.filter(|m| !m.is_empty()) else {
        return Ok(None);
    };
    let want = kernel_version(min).with_context(|| format!("minKernel {min:?}"))?;
    let have = kernel.context("the running kernel's version is unknown")?;
    Ok(Some(have >= want))
}

#[cfg(test)]
#[path = "seccomp_tests.rs"]
mod tests;
