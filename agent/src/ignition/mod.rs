//! Ignition for CoreOS-like whole-disk images (spec §6.3, issue 6): when the
//! image has a filesystem labelled `boot` and an Ignition config is given
//! (the config drive's `openstack/latest/user_data`, or the `install_coreos`
//! step's argument, see [`crate::commands::coreos`]), write it into that
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

pub mod iso;
pub mod mount;

use std::fs;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::Path;

use crate::configdrive::probe_label;
use crate::disk::table::{self, Part};

/// Where the config drive keeps user data.
const USER_DATA: &str = "openstack/latest/user_data";

/// True when `data` is an Ignition config (a JSON object with
/// `ignition.version`).
pub fn is_ignition(data: &[u8]) -> bool {
    serde_json::from_slice::<serde_json::Value>(data)
        .ok()
        .is_some_and(|v| v["ignition"]["version"].is_string())
}

/// The partition whose filesystem (or GPT name) is `boot`.
pub fn boot_partition(device: &Path) -> Result<Option<Part>, String> {
    let f = fs::File::open(device).map_err(|e| format!("opening {}: {e}", device.display()))?;
    let sector = 512; // Byte offsets only; table::read needs the LBA size.
    let sector = crate::disk::ioctl::logical_sector_size(&f).map_or(sector, u64::from);
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
pub fn from_config_drive(device: &Path, drive: &[u8]) -> Result<bool, String> {
    let Some(boot) = boot_partition(device)? else {
        return Ok(false);
    };
    match iso::read_file(drive, USER_DATA) {
        Some(data) if is_ignition(&data) => {
            inject(device, &boot, Some(&data), &[])?;
            Ok(true)
        }
        _ => {
            tracing::info!("CoreOS-like image, but the config drive's user data is not Ignition");
            Ok(false)
        }
    }
}

/// Writes `config` (when given) into the `boot` filesystem at `boot`, makes
/// sure the first-boot stamp exists and appends `kargs`.
pub fn inject(
    device: &Path,
    boot: &Part,
    config: Option<&[u8]>,
    kargs: &[String],
) -> Result<(), String> {
    if config.is_some_and(|c| !is_ignition(c)) {
        return Err("the Ignition config is not JSON with ignition.version".into());
    }
    let m = mount::Mounted::new(device, boot.start, boot.len, "ext4", false)?;
    let root = m.path();
    write_files(&root, config, kargs)?;
    m.unmount()?;
    tracing::info!(device = %device.display(), partition = boot.number, "Ignition config written");
    Ok(())
}

fn write_files(root: &Path, config: Option<&[u8]>, kargs: &[String]) -> Result<(), String> {
    if let Some(config) = config {
        write_config(root, config)?;
    }
    let stamp = root.join("ignition.firstboot");
    if !stamp.exists() {
        fs::write(&stamp, b"").map_err(|e| format!("creating {}: {e}", stamp.display()))?;
    }
    if !kargs.is_empty() {
        append_kargs(&root.join("loader/entries"), kargs)?;
    }
    Ok(())
}

fn write_config(root: &Path, config: &[u8]) -> Result<(), String> {
    let dir = root.join("ignition");
    if !dir.is_dir() {
        fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .map_err(|e| format!("creating {}: {e}", dir.display()))?;
    }
    let dest = dir.join("config.ign");
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&dest)
        .map_err(|e| format!("creating {}: {e}", dest.display()))?;
    f.write_all(config)
        .and_then(|()| f.sync_all())
        .map_err(|e| format!("writing {}: {e}", dest.display()))
}

/// Appends `kargs` to the `options` line of every BLS entry in `dir`.
fn append_kargs(dir: &Path, kargs: &[String]) -> Result<(), String> {
    let entries = fs::read_dir(dir).map_err(|e| format!("reading {}: {e}", dir.display()))?;
    let mut edited = 0;
    for e in entries.flatten() {
        let p = e.path();
        if p.extension().is_none_or(|x| x != "conf") {
            continue;
        }
        let text = fs::read_to_string(&p).map_err(|e| format!("reading {}: {e}", p.display()))?;
        fs::write(&p, bls_append(&text, kargs))
            .map_err(|e| format!("writing {}: {e}", p.display()))?;
        edited += 1;
    }
    if edited == 0 {
        return Err(format!(
            "no BLS entries in {} for the kernel arguments",
            dir.display()
        ));
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
}
