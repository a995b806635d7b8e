//! Ignition for CoreOS-like whole-disk images (spec §6.3, issue 6): when the
//! image has a filesystem labelled `boot` and the config drive's
//! `openstack/latest/user_data` is an Ignition config, write it into that
//! filesystem as `ignition/config.ign` (directory 0700, file 0600, as
//! coreos-installer does), make sure the first-boot stamp
//! `ignition.firstboot` exists, and append any extra kernel arguments to
//! the `options` line of each BLS entry (`loader/entries/*.conf`).
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
use crate::configdrive::table::{self, Part};

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
            inject(device, &boot, &data, &[])?;
            Ok(true)
        }
        _ => {
            tracing::info!("CoreOS-like image, but the config drive's user data is not Ignition");
            Ok(false)
        }
    }
}

/// Writes `config` into the `boot` filesystem at `boot` and appends `kargs`.
pub fn inject(device: &Path, boot: &Part, config: &[u8], kargs: &[String]) -> Result<(), String> {
    if !is_ignition(config) {
        return Err("the Ignition config is not JSON with ignition.version".into());
    }
    let m = mount::Mounted::new(device, boot.start, boot.len, "ext4", false)?;
    let root = m.path();
    write_files(&root, config, kargs)?;
    m.unmount()?;
    tracing::info!(device = %device.display(), partition = boot.number, "Ignition config written");
    Ok(())
}

fn write_files(root: &Path, config: &[u8], kargs: &[String]) -> Result<(), String> {
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
        .map_err(|e| format!("writing {}: {e}", dest.display()))?;
    let stamp = root.join("ignition.firstboot");
    if !stamp.exists() {
        fs::write(&stamp, b"").map_err(|e| format!("creating {}: {e}", stamp.display()))?;
    }
    if !kargs.is_empty() {
        append_kargs(&root.join("loader/entries"), kargs)?;
    }
    Ok(())
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
    let extra = kargs.join(" ");
    let mut found = false;
    let mut out: Vec<String> = text
        .lines()
        .map(|l| match l.strip_prefix("options") {
            Some(rest) if rest.starts_with([' ', '\t']) || rest.is_empty() => {
                found = true;
                format!("options {} {extra}", rest.trim()).replace("options  ", "options ")
            }
            _ => l.to_string(),
        })
        .collect();
    if !found {
        out.push(format!("options {extra}"));
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
    }

    #[test]
    fn files_land_with_coreos_installer_permissions() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir_all(dir.path().join("loader/entries")).unwrap();
        fs::write(dir.path().join("loader/entries/a.conf"), "options rw\n").unwrap();
        let cfg = br#"{"ignition": {"version": "3.4.0"}}"#;
        write_files(dir.path(), cfg, &["quiet".into()]).unwrap();
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
    }
}
