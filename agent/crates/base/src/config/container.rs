//! The agent as OpenShift's `ironic-agent` container (`agent container`,
//! agent/docs/container-form.md): where the host's root is, whether the
//! host is a CoreOS live system, and the configuration as that image reads
//! it (the kernel command line, then IPA's files with the image's
//! `--config-dir /etc/ironic-python-agent`).

use std::path::Path;

use super::{files, Config, RunMode};

/// Where OpenShift's unit binds the host's `/` into the container
/// (`--mount type=bind,src=/,dst=/mnt/coreos`).
pub const HOST_ROOT: &str = "/mnt/coreos";

/// The stamp a CoreOS live boot (live ISO or PXE) leaves, relative to the
/// host's root: the initramfs' `live-generator` creates `/run/ostree-live`
/// "that everything else should use to detect a live boot"
/// (coreos/fedora-coreos-config, `overlay.d/05core/usr/lib/dracut/modules.d/20live/live-generator`),
/// and `/run` carries over into the booted system.
pub const LIVE_MARKER: &str = "run/ostree-live";

/// Whether the host whose root is bound at `host_root` is a CoreOS live
/// system: the marker is a regular file (a symbolic link or a directory
/// does not count).
pub fn is_live(host_root: &Path) -> bool {
    std::fs::symlink_metadata(host_root.join(LIVE_MARKER)).is_ok_and(|m| m.file_type().is_file())
}

/// The container's configuration: the kernel parameters (`cmdline`, else
/// `/proc/cmdline`, which is the host kernel's), then IPA's files under
/// `config_root` as the image reads them ([`files::read_in_container`]),
/// with `host_root` recorded. The mode is [`RunMode::Container`] on a live
/// host, else [`RunMode::Host`] (only explicitly allowed devices written,
/// power simulated).
pub fn load(
    cmdline: Option<&Path>,
    config_root: &Path,
    host_root: &Path,
) -> anyhow::Result<Config> {
    let mut c = super::load_with(cmdline, Some(config_root), files::read_in_container)?;
    c.mode = if is_live(host_root) {
        RunMode::Container
    } else {
        RunMode::Host
    };
    c.host_root = Some(host_root.to_path_buf());
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_regular_marker_file_makes_the_host_live() {
        let host = tempfile::tempdir().unwrap();
        assert!(!is_live(host.path()), "no /run/ostree-live");
        std::fs::create_dir_all(host.path().join("run")).unwrap();
        std::os::unix::fs::symlink("/etc/hostname", host.path().join(LIVE_MARKER)).unwrap();
        assert!(!is_live(host.path()), "a symbolic link");
        std::fs::remove_file(host.path().join(LIVE_MARKER)).unwrap();
        std::fs::create_dir(host.path().join(LIVE_MARKER)).unwrap();
        assert!(!is_live(host.path()), "a directory");
        std::fs::remove_dir(host.path().join(LIVE_MARKER)).unwrap();
        std::fs::write(host.path().join(LIVE_MARKER), "").unwrap();
        assert!(is_live(host.path()));
    }

    #[test]
    fn the_mode_follows_the_host_and_the_unit_s_conf_file_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        let host = dir.path().join("host");
        std::fs::create_dir_all(root.join(files::CONTAINER_DIR)).unwrap();
        std::fs::create_dir_all(host.join("run")).unwrap();
        std::fs::write(
            root.join(files::CONTAINER_DIR).join("ignition.conf"),
            "[DEFAULT]\napi_url = http://192.0.2.1:6385\ninspection_callback_url = http://192.0.2.1:5050/v1/continue\n",
        )
        .unwrap();
        let cmdline = dir.path().join("cmdline");
        std::fs::write(&cmdline, "BOOT_IMAGE=/vmlinuz ip=dhcp\n").unwrap();
        let c = load(Some(&cmdline), &root, &host).unwrap();
        assert_eq!(c.mode, RunMode::Host, "not a live host");
        assert_eq!(c.host_root.as_deref(), Some(host.as_path()));
        assert_eq!(
            c.api_urls,
            super::super::ApiUrls::Urls(vec!["http://192.0.2.1:6385".into()])
        );
        assert_eq!(
            c.inspection_callback_url.as_deref(),
            Some("http://192.0.2.1:5050/v1/continue")
        );
        std::fs::write(host.join(LIVE_MARKER), "").unwrap();
        assert_eq!(
            load(Some(&cmdline), &root, &host).unwrap().mode,
            RunMode::Container
        );
        let e = load(Some(&dir.path().join("nope")), &root, &host).unwrap_err();
        assert!(format!("{e:#}").contains("nope"), "{e:#}");
    }
}
