//! Ignition for CoreOS-like whole-disk images (PROTOCOL.md §6.3, issue 6): when the
//! image has a filesystem labelled `boot` and an Ignition config is given
//! (the config drive's `openstack/latest/user_data`, or the `install_coreos`
//! step's argument, see `commands/coreos.rs`), write it into that
//! filesystem the way `coreos-installer install` does:
//!
//! * `ignition/config.ign` (directory 0700, file 0600) holds the config;
//! * `ignition.firstboot` at the top of the boot filesystem is the
//!   first-boot stamp: CoreOS's GRUB config sees it and adds
//!   `ignition.firstboot` (plus `$ignition_network_kcmdline`, which the
//!   file may set) to the kernel command line, and Ignition's
//!   firstboot-complete unit deletes it. CoreOS images ship it already; we
//!   create it (empty, so GRUB's default network arguments stay) only when
//!   it is missing, never overwriting what the image or an operator put there;
//! * extra kernel arguments (coreos-installer's `--append-karg`) are
//!   appended to the `options` line of every BLS entry
//!   (`loader/entries/*.conf`), which is what GRUB (blscfg) and ostree boot
//!   from; an argument already present is not added twice. An image without
//!   BLS entries cannot take kernel arguments and is refused.
//!
//! The user data is read from the config drive's ISO bytes ([`iso`]); the
//! boot filesystem is mounted by byte range ([`mount`]); nothing here needs
//! the kernel's partition devices.

pub(crate) mod beneath;
pub mod iso;
pub mod mount;

use std::fs;
use std::path::{Path, PathBuf};

use beneath::Beneath;

use crate::configdrive::probe_label;
use agent_devices::disk::table::{self, Part};
use agent_devices::netconf::nm_keyfile::{Keyfile, FIRSTBOOT_DIR};

/// Where the config drive keeps user data.
const USER_DATA: &str = "openstack/latest/user_data";

/// Why the Ignition config could not be put in place.
#[derive(Debug, thiserror::Error)]
pub enum IgnitionError {
    /// The disk cannot be opened.
    #[error("opening {}: {source}", .device.display())]
    Open {
        /// The disk.
        device: PathBuf,
        /// The system's error.
        source: std::io::Error,
    },
    /// Its partition table cannot be read.
    #[error(transparent)]
    Table(#[from] table::TableError),
    /// The config given is not Ignition.
    #[error("the Ignition config is not JSON with ignition.version")]
    NotIgnition,
    /// The boot filesystem cannot be mounted or unmounted.
    #[error(transparent)]
    Mount(#[from] mount::MountError),
    /// Writing into the boot filesystem failed (with its causes).
    #[error("{0:#}")]
    Files(anyhow::Error),
}

/// True when `data` is an Ignition config (a JSON object with
/// `ignition.version`).
pub fn is_ignition(data: &[u8]) -> bool {
    serde_json::from_slice::<serde_json::Value>(data)
        .ok()
        .is_some_and(|v| v["ignition"]["version"].is_string())
}

/// The partition whose filesystem (or GPT name) is `boot`.
pub fn boot_partition(device: &Path) -> Result<Option<Part>, IgnitionError> {
    let f = fs::File::open(device).map_err(|source| IgnitionError::Open {
        device: device.to_path_buf(),
        source,
    })?;
    let sector = 512; // Byte offsets only; table::read needs the LBA size.
    let sector = agent_devices::disk::ioctl::logical_sector_size(&f).map_or(sector, u64::from);
    let Some(t) = table::read(&f, sector)? else {
        return Ok(None);
    };
    Ok(t.parts
        .into_iter()
        .find(|p| p.name == "boot" || probe_label(&f, p.start, p.len).as_deref() == Some("boot")))
}

/// After the config drive (the ISO `drive`) was written: inject its user
/// data when it is an Ignition config and the image is CoreOS-like.
/// `Ok(false)`: nothing to do.
pub fn from_config_drive(device: &Path, drive: &[u8]) -> Result<bool, IgnitionError> {
    let Some(boot) = boot_partition(device)? else {
        return Ok(false);
    };
    match iso::read_file(drive, USER_DATA) {
        Some(data) if is_ignition(&data) => {
            inject(device, &boot, Some(&data), &[], &[])?;
            Ok(true)
        }
        _ => {
            tracing::info!("CoreOS-like image, but the config drive's user data is not Ignition");
            Ok(false)
        }
    }
}

/// Writes `config` (when given) into the `boot` filesystem at `boot`, makes
/// sure the first-boot stamp exists, appends `kargs` and puts the
/// `network` keyfiles where `coreos-installer --copy-network` does.
pub fn inject(
    device: &Path,
    boot: &Part,
    config: Option<&[u8]>,
    kargs: &[String],
    network: &[Keyfile],
) -> Result<(), IgnitionError> {
    if config.is_some_and(|c| !is_ignition(c)) {
        return Err(IgnitionError::NotIgnition);
    }
    let m = mount::Mounted::new(device, boot.start, boot.len, "ext4", false)?;
    let root = m.path();
    write_files(&root, config, kargs).map_err(IgnitionError::Files)?;
    if !network.is_empty() {
        write_network(&root, network).map_err(IgnitionError::Files)?;
    }
    m.unmount()?;
    tracing::info!(device = %device.display(), partition = boot.number, "Ignition config written");
    Ok(())
}

/// Writes the config, the first-boot stamp and the kernel arguments into the
/// boot filesystem mounted at `root`, never following a link and never
/// leaving `root` ([`beneath`]).
fn write_files(root: &Path, config: Option<&[u8]>, kargs: &[String]) -> anyhow::Result<()> {
    let root = Beneath::open(root)?;
    if let Some(config) = config {
        root.ensure_dir("ignition", 0o700)
            .and_then(|()| root.dir("ignition"))
            .and_then(|dir| dir.write_file("config.ign", config, 0o600))?;
    }
    root.create_if_missing("ignition.firstboot", 0o644)?;
    if !kargs.is_empty() {
        append_kargs(&root, kargs)?;
    }
    Ok(())
}

/// Writes the keyfiles into `coreos-firstboot-network/` of the boot
/// filesystem mounted at `root` (directory 0755, files 0600 as
/// NetworkManager requires), replacing files of the same name.
fn write_network(root: &Path, files: &[Keyfile]) -> anyhow::Result<()> {
    let root = Beneath::open(root)?;
    root.ensure_dir(FIRSTBOOT_DIR, 0o755)?;
    let dir = root.dir(FIRSTBOOT_DIR)?;
    for f in files {
        dir.write_file(&f.name, f.text.as_bytes(), 0o600)?;
    }
    tracing::info!(
        files = files.len(),
        "ramdisk network written to {}",
        root.display(FIRSTBOOT_DIR)
    );
    Ok(())
}

/// Appends `kargs` to the `options` line of every BLS entry in
/// `loader/entries`.
fn append_kargs(root: &Beneath, kargs: &[String]) -> anyhow::Result<()> {
    let dir = root.dir("loader/entries")?;
    let mut edited = 0;
    for name in dir.names()? {
        if !name.ends_with(".conf") {
            continue;
        }
        dir.edit_file(&name, |text| bls_append(text, kargs))?;
        edited += 1;
    }
    if edited == 0 {
        anyhow::bail!(
            "no BLS entries in {} for the kernel arguments",
            root.display("loader/entries")
        );
    }
    Ok(())
}

/// `text` with `kargs` appended to its `options` line (added if missing).
fn bls_append(text: &str, kargs: &[String]) -> String {
    let mut found = false;
    let mut out: Vec<String> = text
        .lines()
        .map(|l| match l.strip_prefix("options") {
            Some(rest) if rest.starts_with([' ', '\t']) || rest.is_empty() => {
                found = true;
                let mut args: Vec<&str> = rest.split_whitespace().collect();
                for k in kargs {
                    if !args.contains(&k.as_str()) {
                        args.push(k);
                    }
                }
                format!("options {}", args.join(" "))
            }
            _ => l.to_string(),
        })
        .collect();
    if !found {
        out.push(format!("options {}", kargs.join(" ")));
    }
    out.join("\n") + "\n"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recognises_ignition_and_edits_bls_options() {
        assert!(is_ignition(br#"{"ignition": {"version": "3.4.0"}}"#));
        assert!(!is_ignition(b"#cloud-config\n"));
        assert!(!is_ignition(br#"{"ignition": {}}"#));
        let entry = "title Fedora CoreOS\nlinux /vmlinuz\noptions root=UUID=x rw\n";
        let out = bls_append(entry, &["console=ttyS0".into(), "quiet".into()]);
        assert_eq!(
            out,
            "title Fedora CoreOS\nlinux /vmlinuz\noptions root=UUID=x rw console=ttyS0 quiet\n"
        );
        assert!(bls_append("title x\n", &["a".into()]).ends_with("options a\n"));
        // An argument the entry already has is not repeated.
        assert_eq!(
            bls_append("options\trw quiet\n", &["quiet".into()]),
            "options rw quiet\n"
        );
    }

    #[test]
    fn files_land_with_coreos_installer_permissions() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir_all(dir.path().join("loader/entries")).unwrap();
        fs::write(dir.path().join("loader/entries/a.conf"), "options rw\n").unwrap();
        let cfg = br#"{"ignition": {"version": "3.4.0"}}"#;
        write_files(dir.path(), Some(cfg), &["quiet".into()]).unwrap();
        let ign = dir.path().join("ignition/config.ign");
        assert_eq!(fs::read(&ign).unwrap(), cfg);
        let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&ign), 0o600);
        assert_eq!(mode(&dir.path().join("ignition")), 0o700);
        assert!(dir.path().join("ignition.firstboot").exists());
        assert_eq!(
            fs::read_to_string(dir.path().join("loader/entries/a.conf")).unwrap(),
            "options rw quiet\n"
        );
        // An existing stamp (it may set ignition_network_kcmdline) is kept.
        fs::write(dir.path().join("ignition.firstboot"), "set x=1\n").unwrap();
        write_files(dir.path(), None, &[]).unwrap();
        assert_eq!(
            fs::read_to_string(dir.path().join("ignition.firstboot")).unwrap(),
            "set x=1\n"
        );
    }

    /// A boot filesystem tree in `root` with one BLS entry.
    fn boot_tree(root: &Path) {
        fs::create_dir_all(root.join("loader/entries")).unwrap();
        fs::write(root.join("loader/entries/a.conf"), "options rw\n").unwrap();
    }

    #[test]
    fn writes_config_stamp_and_kernel_arguments() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        boot_tree(root);
        let config = br#"{"ignition": {"version": "3.4.0"}}"#;
        write_files(root, Some(config), &["quiet".into()]).unwrap();
        assert_eq!(fs::read(root.join("ignition/config.ign")).unwrap(), config);
        let mode = |p: &str| fs::metadata(root.join(p)).unwrap().permissions().mode() & 0o777;
        assert_eq!(
            (mode("ignition"), mode("ignition/config.ign")),
            (0o700, 0o600)
        );
        assert!(root.join("ignition.firstboot").is_file());
        assert_eq!(
            fs::read_to_string(root.join("loader/entries/a.conf")).unwrap(),
            "options rw quiet\n"
        );
        // Again: the config is replaced, the stamp and arguments not repeated.
        write_files(root, Some(b"{}"), &["quiet".into()]).unwrap();
        assert_eq!(fs::read(root.join("ignition/config.ign")).unwrap(), b"{}");
    }

    #[test]
    fn network_keyfiles_land_private_in_the_firstboot_directory() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let files = [Keyfile {
            name: "ironic-eth0.nmconnection".into(),
            text: "[connection]\n".into(),
        }];
        write_network(dir.path(), &files).unwrap();
        // Twice: a second deploy replaces, never fails on what is there.
        write_network(dir.path(), &files).unwrap();
        let p = dir
            .path()
            .join(FIRSTBOOT_DIR)
            .join("ironic-eth0.nmconnection");
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "[connection]\n");
        assert_eq!(
            std::fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o600
        );
        // A link planted in the image is not followed.
        let other = tempfile::tempdir().unwrap();
        let root2 = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(other.path(), root2.path().join(FIRSTBOOT_DIR)).unwrap();
        assert!(write_network(root2.path(), &files).is_err());
        assert_eq!(std::fs::read_dir(other.path()).unwrap().count(), 0);
    }

    #[test]
    fn links_in_the_tenant_filesystem_are_never_followed() {
        use std::os::unix::fs::symlink;
        let config = br#"{"ignition": {"version": "3.4.0"}}"#;
        let karg = ["quiet".to_string()];
        let dir = tempfile::tempdir().unwrap();
        let outside = dir.path().join("host");
        fs::create_dir_all(outside.join("entries")).unwrap();
        fs::write(outside.join("entries/x.conf"), "options host\n").unwrap();
        let fresh = |name: &str| {
            let root = dir.path().join(name);
            boot_tree(&root);
            root
        };

        // ignition -> a host directory: the config is not written there.
        let root = fresh("a");
        symlink(&outside, root.join("ignition")).unwrap();
        let e = format!("{:#}", write_files(&root, Some(config), &[]).unwrap_err());
        assert!(e.contains("symbolic link"), "{e}");
        assert!(!outside.join("config.ign").exists());

        // ignition.firstboot -> a host path: it exists, so it is left alone,
        // and nothing is created where it points.
        let root = fresh("b");
        symlink(outside.join("stamp"), root.join("ignition.firstboot")).unwrap();
        write_files(&root, None, &[]).unwrap();
        assert!(!outside.join("stamp").exists());

        // A BLS entry that links to a host file: refused, the file unchanged.
        let root = fresh("c");
        symlink(
            outside.join("entries/x.conf"),
            root.join("loader/entries/b.conf"),
        )
        .unwrap();
        let e = format!("{:#}", write_files(&root, None, &karg).unwrap_err());
        assert!(e.contains("b.conf") && e.contains("symbolic link"), "{e}");
        assert_eq!(
            fs::read_to_string(outside.join("entries/x.conf")).unwrap(),
            "options host\n"
        );

        // loader -> a host directory holding entries/: refused.
        let root = dir.path().join("d");
        fs::create_dir_all(&root).unwrap();
        symlink(&outside, root.join("loader")).unwrap();
        let e = format!("{:#}", write_files(&root, None, &karg).unwrap_err());
        assert!(e.contains("symbolic link"), "{e}");
        assert_eq!(
            fs::read_to_string(outside.join("entries/x.conf")).unwrap(),
            "options host\n"
        );

        // A FIFO as a BLS entry: refused at once, not waited on.
        let root = fresh("e");
        nix::unistd::mkfifo(
            &root.join("loader/entries/f.conf"),
            nix::sys::stat::Mode::from_bits_truncate(0o644),
        )
        .unwrap();
        let e = format!("{:#}", write_files(&root, None, &karg).unwrap_err());
        assert!(e.contains("not a regular file"), "{e}");
    }
}
