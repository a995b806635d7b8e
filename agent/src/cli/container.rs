//! `agent container`: the agent as OpenShift's `ironic-agent` container,
//! the OCI image's entrypoint (agent/docs/container-form.md). The host (a
//! CoreOS live system) did PID 1's work — modules, mounts, network, clock,
//! console — so this only reads the configuration as that image does
//! ([`agent_base::config::container`]), makes the host's udev database visible,
//! and runs the agent: lookup, heartbeats, the command API. The mode is
//! [`RunMode::Container`] when the host root shows a live system, else
//! host mode (only `--allow-device` devices written, power simulated).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::Args;

use agent_base::config::{self, Config, RunMode};

/// Flags of `agent container` (none in OpenShift's unit; tests set them).
#[derive(Debug, Args)]
pub struct ContainerArgs {
    /// Where the host's `/` is bound (the unit's `dst=/mnt/coreos`).
    #[arg(long, default_value = config::container::HOST_ROOT)]
    pub host_root: PathBuf,
    /// Read kernel parameters from this file instead of /proc/cmdline.
    #[arg(long)]
    pub cmdline_file: Option<PathBuf>,
    /// Root under which IPA's configuration files are read.
    #[arg(long, default_value = "/", hide = true)]
    pub config_root: PathBuf,
    /// A device the agent may write when the host is not a live system
    /// (repeatable); on a live host every disk it has not mounted is.
    #[arg(long = "allow-device")]
    pub allow_device: Vec<PathBuf>,
}

/// The container's configuration ([`config::container::load`]), with the
/// flags.
pub(crate) fn container_config(args: &ContainerArgs, debug: bool) -> Result<Config> {
    let mut c = config::container::load(
        args.cmdline_file.as_deref(),
        &args.config_root,
        &args.host_root,
    )?;
    c.debug |= debug;
    match c.mode {
        RunMode::Container => {
            if !args.allow_device.is_empty() {
                tracing::info!(
                    "the host is a live system: --allow-device is not needed and is ignored"
                );
            }
            tracing::info!(
                host_root = %args.host_root.display(),
                "the host is a CoreOS live system: disks it has not mounted may be written, power actions are real"
            );
        }
        _ => {
            c.allowed_devices = args.allow_device.clone();
            tracing::warn!(
                host_root = %args.host_root.display(),
                marker = config::container::LIVE_MARKER,
                allowed = ?c.allowed_devices,
                "the host is not a CoreOS live system: only allowed devices are written, power actions are simulated"
            );
        }
    }
    Ok(c)
}

/// Runs the container's agent until it fails or the container is stopped
/// (SIGTERM: as PID 1 of its namespace the agent gets no default action).
pub(crate) async fn run(args: &ContainerArgs, debug: bool) -> Result<()> {
    let config = container_config(args, debug)?;
    if std::process::id() == 1 {
        // Only inside the container: these paths are its own.
        link_host_udev(&args.host_root, Path::new("/run/udev"));
    }
    // OpenShift's manager fixes a `localhost` host's name at start (to
    // IPA_DEFAULT_HOSTNAME) and writes it to the container's /etc/hostname:
    // only on a live host, and only as the container's PID 1 (that file is
    // then the container's own, never a machine's).
    if config.mode == RunMode::Container && std::process::id() == 1 {
        if let Some(root) = &config.host_root {
            let outcome = agent_devices::hostroot::hostname::fix_at_start(root)
                .context("Failed to update hostname")?;
            tracing::info!(?outcome, "the host's name at start");
        }
    }
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        r = crate::agent::run(config) => r,
        _ = term.recv() => {
            tracing::info!("SIGTERM: the container is stopping");
            Ok(())
        }
        _ = tokio::signal::ctrl_c() => Ok(()),
    }
}

/// Makes the host's udev database (`/run/udev` under the host root) the
/// container's `/run/udev` (a symbolic link), so the inventory and the
/// root-device hints see the disks' WWNs, serials and `by-path` names as
/// the host's udev recorded them. Left alone when the container has one.
pub(crate) fn link_host_udev(host_root: &Path, link: &Path) {
    let target = host_root.join("run/udev");
    if std::fs::symlink_metadata(link).is_ok() || !target.is_dir() {
        return;
    }
    let made = link
        .parent()
        .map_or(Ok(()), std::fs::create_dir_all)
        .and_then(|()| std::os::unix::fs::symlink(&target, link));
    match made {
        Ok(()) => {
            tracing::info!(link = %link.display(), target = %target.display(), "the host's udev database")
        }
        Err(e) => {
            tracing::warn!(link = %link.display(), "cannot link the host's udev database: {e}")
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::cli::{Cli, Command};

    fn args(extra: &[&str]) -> ContainerArgs {
        let cli = Cli::try_parse_from([&["agent", "container"], extra].concat()).unwrap();
        match cli.command {
            Command::Container(a) => a,
            other => panic!("parsed as {other:?}"),
        }
    }

    #[test]
    fn defaults_are_openshifts_unit() {
        let a = args(&[]);
        assert_eq!(a.host_root, Path::new("/mnt/coreos"));
        assert_eq!(a.config_root, Path::new("/"));
        assert!(a.cmdline_file.is_none() && a.allow_device.is_empty());
    }

    #[test]
    fn allowed_devices_count_only_on_a_host_that_is_not_live() {
        let dir = tempfile::tempdir().unwrap();
        let cmdline = dir.path().join("cmdline");
        std::fs::write(&cmdline, "").unwrap();
        let host = dir.path().join("host");
        std::fs::create_dir_all(host.join("run")).unwrap();
        let (h, c) = (host.to_str().unwrap(), cmdline.to_str().unwrap());
        let flags = [
            "--host-root",
            h,
            "--cmdline-file",
            c,
            "--config-root",
            h,
            "--allow-device",
            "/dev/loop7",
        ];
        let cfg = container_config(&args(&flags), false).unwrap();
        assert_eq!(cfg.mode, RunMode::Host);
        assert_eq!(cfg.allowed_devices, [PathBuf::from("/dev/loop7")]);
        assert_eq!(cfg.host_root.as_deref(), Some(host.as_path()));
        std::fs::write(host.join(config::container::LIVE_MARKER), "").unwrap();
        let cfg = container_config(&args(&flags), true).unwrap();
        assert_eq!(cfg.mode, RunMode::Container);
        assert!(
            cfg.allowed_devices.is_empty(),
            "every unmounted disk, not a list"
        );
        assert!(cfg.debug);
    }

    #[test]
    fn the_host_udev_database_is_linked_once() {
        let dir = tempfile::tempdir().unwrap();
        let host = dir.path().join("host");
        let link = dir.path().join("run/udev");
        link_host_udev(&host, &link);
        assert!(
            std::fs::symlink_metadata(&link).is_err(),
            "no host database: no link"
        );
        std::fs::create_dir_all(host.join("run/udev/data")).unwrap();
        link_host_udev(&host, &link);
        assert_eq!(std::fs::read_link(&link).unwrap(), host.join("run/udev"));
        assert!(link.join("data").is_dir());
        link_host_udev(&dir.path().join("other"), &link);
        assert_eq!(std::fs::read_link(&link).unwrap(), host.join("run/udev"));
    }
}
