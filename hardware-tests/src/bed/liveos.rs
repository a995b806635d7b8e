//! The bed's stand-in for OpenShift's CoreOS live system (issue 47,
//! `image-builder/liveos.sh`) and what CoreOS's Ignition would put on it
//! for OpenShift: the agent's configuration at `/etc/ironic-python-agent.conf`
//! and openshift/ironic-agent-image's `ironic-agent.service`, enabled,
//! with only `%REGISTRY%` and `%PODMAN_FLAGS%` filled in as that project's
//! `ignition/build.py` fills them. They reach the live system as a second
//! cpio archive appended to its initramfs ([`super::ironic_flow::PxeRoot::start_appending`]).

use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context, Result};
use image_builder::cpio::{Entry, Writer};

use crate::{repo_root, run};

/// OpenShift's unit, as upstream has it (the container-form test runs the
/// same lines on this machine).
pub const UNIT: &str = include_str!("../../tests/host/container_form/ironic-agent.service");

/// The live system's kernel and initramfs (`deploy.kernel`,
/// `deploy.initramfs`), built by `image-builder/liveos.sh` unless built
/// from the same inputs already.
pub fn dir() -> Result<PathBuf> {
    let out = repo_root().join("target/liveos");
    let tools = repo_root().join("target/tools/bin/coreos-installer");
    run(Command::new(repo_root().join("image-builder/liveos.sh"))
        .arg(&out)
        .env("COREOS_INSTALLER", tools))
    .context("building the live system (image-builder/liveos.sh)")?;
    Ok(out)
}

/// The agent's OCI image layout (`image-builder/build-oci.sh`, the
/// ramdisk's static agent; cargo rebuilds nothing when that is current).
pub fn agent_image() -> Result<PathBuf> {
    let out = repo_root().join("target/oci");
    run(Command::new(repo_root().join("image-builder/build-oci.sh")).arg(&out))
        .context("building the agent's OCI image (image-builder/build-oci.sh)")?;
    Ok(out.join("oci"))
}

/// The bed's stand-in for the assisted installer's `agent.service`, which
/// the assisted flow's Ignition ships without enabling it and
/// `start_assisted_install` starts: it says on the console that it ran and
/// runs long enough (20 s) for the step's 15-second poll to see it active.
pub const ASSISTED_UNIT: &str = "[Unit]\n\
    Description=Assisted Installer Agent (the bed's stand-in)\n\
    [Service]\n\
    Type=oneshot\n\
    StandardOutput=journal+console\n\
    ExecStart=/bin/echo assisted-agent: started\n\
    ExecStart=/bin/sleep 20\n\
    ExecStart=/bin/echo assisted-agent: finished\n";

/// What Ignition writes for OpenShift, as a gzip'd newc archive: `conf` at
/// `/etc/ironic-python-agent.conf`, the unit with the `registry` (and
/// `--tls-verify=false`, `build.py`'s `--insecure-registry`) enabled for
/// `multi-user.target`, the assisted flow's [`ASSISTED_UNIT`] as
/// `agent.service`, not enabled, and Ironic's CA `ca_pem` at [`HOST_CA`].
pub fn ignition_archive(conf: &str, registry: &str, ca_pem: &[u8]) -> Result<Vec<u8>> {
    let unit = UNIT
        .replace("%REGISTRY%", registry)
        .replace("%PODMAN_FLAGS%", "--tls-verify=false");
    let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    let mut w = Writer::new(gz, 0);
    for d in [
        "etc",
        "etc/systemd",
        "etc/systemd/system",
        "etc/systemd/system/multi-user.target.wants",
    ] {
        w.add(d, &Entry::Dir { mode: 0o755 })?;
    }
    let file = |data: &[u8]| Entry::File {
        mode: 0o644,
        data: data.to_vec(),
    };
    w.add("etc/ironic-python-agent.conf", &file(conf.as_bytes()))?;
    w.add(HOST_CA.trim_start_matches('/'), &file(ca_pem))?;
    w.add(
        "etc/systemd/system/ironic-agent.service",
        &file(unit.as_bytes()),
    )?;
    w.add(
        "etc/systemd/system/agent.service",
        &file(ASSISTED_UNIT.as_bytes()),
    )?;
    w.add(
        "etc/systemd/system/multi-user.target.wants/ironic-agent.service",
        &Entry::Symlink {
            target: "/etc/systemd/system/ironic-agent.service".into(),
        },
    )?;
    Ok(w.finish()?.finish()?)
}

/// Where Ignition puts Ironic's CA on the live system; the agent in the
/// container reads it through the unit's bind mount of `/` at
/// `/mnt/coreos` ([`agent_conf`]'s `cafile`).
pub const HOST_CA: &str = "/etc/ironic-ca.crt";

/// The agent's configuration as `ignition/build.py` writes it with `--tls
/// on` (an `https` API URL), with `cafile` the live system's [`HOST_CA`]
/// as the container sees it, then `options` (one `key = value` per line).
pub fn agent_conf(api_url: &str, options: &[&str]) -> String {
    let mut conf = format!("[DEFAULT]\napi_url = {api_url}\ncafile = /mnt/coreos{HOST_CA}\n");
    for o in options {
        conf.push_str(o);
        conf.push('\n');
    }
    conf
}
