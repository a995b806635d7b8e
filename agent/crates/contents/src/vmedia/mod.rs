//! What Ironic puts on virtual media for the ramdisk, read as
//! ironic-python-agent reads it: the boot ISO (labelled `config-2` when it
//! carries `openstack/` files such as `network_data.json`, else
//! `VMEDIA_BOOT_ISO`) with `etc/ironic-python-agent/` and
//! `etc/ironic-python-agent.d/` to copy into `/etc`, and the virtual floppy
//! `ir-vfd-dev` with `parameters.txt`.
//!
//! Only whole devices that look like a BMC's virtual media count (IPA's
//! rule): CD/DVD drives, and USB disks below 4 GiB. A partition labelled
//! `config-2` on a disk (an instance's config drive left from an earlier
//! deployment) is never read. CD/DVD drives are tried before USB disks, so
//! a USB stick an earlier tenant left labelled `config-2` does not win
//! over the BMC's virtual CD. Files are read from the device without
//! mounting it ([`crate::ignition::iso`], [`floppy`]), sizes bounded; a
//! malformed or looping filesystem costs a warning, never a hang.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use crate::ignition::iso;

pub mod floppy;

/// Labels of Ironic's virtual-media boot ISO.
pub const ISO_LABELS: [&str; 2] = ["config-2", "VMEDIA_BOOT_ISO"];

/// Label of Ironic's virtual floppy with `parameters.txt`.
pub const FLOPPY_LABEL: &str = "ir-vfd-dev";

/// Largest file copied off the media.
pub const MAX_FILE_BYTES: usize = 1 << 20;

/// Most files copied from one directory.
const MAX_FILES: usize = 256;

/// USB disks at or above this size are not virtual media (IPA's bound).
const USB_MEDIA_MAX_BYTES: u64 = 4 << 30;

/// What kind of virtual media a device can be, in the order they are
/// tried.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    /// A CD/DVD drive: how BMCs present a virtual CD.
    CdDvd,
    /// A small USB disk: a BMC's virtual floppy or USB stick, or a stick
    /// someone plugged in.
    UsbDisk,
}

/// A block device that can be virtual media.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    /// Kernel name (`sr0`, `sdb`).
    pub name: String,
    /// What kind of device it is.
    pub kind: Kind,
    /// Why it qualifies (`CD/DVD drive`, `USB disk of N bytes`).
    pub why: String,
}

/// Whole block devices under `sys/class/block` that can be virtual media:
/// CD/DVD drives first, then USB disks, each by name.
pub fn candidates(sys: &Path) -> Vec<Candidate> {
    let mut out: Vec<Candidate> = std::fs::read_dir(sys.join("class/block"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let dir = e.path();
            if dir.join("partition").exists() {
                return None;
            }
            let read = |f: &str| std::fs::read_to_string(dir.join(f)).ok();
            // SCSI peripheral type 5: a CD/DVD drive (sr*).
            if read("device/type").is_some_and(|t| t.trim() == "5") {
                return Some(Candidate {
                    name,
                    kind: Kind::CdDvd,
                    why: "CD/DVD drive".into(),
                });
            }
            let real = std::fs::canonicalize(&dir).unwrap_or_default();
            let usb = real
                .components()
                .any(|c| c.as_os_str().to_str().is_some_and(|s| s.starts_with("usb")));
            let bytes = read("size")
                .and_then(|s| s.trim().parse::<u64>().ok())
                .map(|sectors| sectors.saturating_mul(512))?;
            (usb && bytes > 0 && bytes < USB_MEDIA_MAX_BYTES).then(|| Candidate {
                name,
                kind: Kind::UsbDisk,
                why: format!("USB disk of {bytes} bytes"),
            })
        })
        .collect();
    out.sort_by(|a, b| (a.kind, &a.name).cmp(&(b.kind, &b.name)));
    out
}

/// Ironic's boot ISO, found on a candidate.
#[derive(Debug)]
pub struct Disc {
    /// The device it is on.
    pub candidate: Candidate,
    /// The device's path under `dev`.
    pub path: PathBuf,
    /// The device, opened.
    pub file: std::fs::File,
}

/// The boot ISO among `candidates` (its device under `dev`), opened: the
/// first in their order (CD/DVD drives first).
pub fn find_iso(dev: &Path, candidates: &[Candidate]) -> Option<Disc> {
    candidates.iter().find_map(|c| {
        let path = dev.join(&c.name);
        let file = std::fs::File::open(&path).ok()?;
        let label = iso::volume_id(&file)?;
        ISO_LABELS
            .iter()
            .any(|l| l.eq_ignore_ascii_case(&label))
            .then(|| Disc {
                candidate: c.clone(),
                path,
                file,
            })
    })
}

/// Copies `etc/ironic-python-agent/` and `etc/ironic-python-agent.d/` from
/// the ISO to the same places under `root`; returns the files written.
pub fn copy_config(media: &(impl iso::Media + ?Sized), root: &Path) -> Result<Vec<PathBuf>> {
    let mut written = Vec::new();
    for dir in ["etc/ironic-python-agent", "etc/ironic-python-agent.d"] {
        let Some(entries) = iso::list_dir(media, dir) else {
            continue;
        };
        let dest = root.join(dir);
        for e in entries.iter().filter(|e| !e.is_dir).take(MAX_FILES) {
            if e.name.is_empty() || e.name.contains('/') || e.name == "." || e.name == ".." {
                tracing::warn!(
                    "virtual media: {dir}/{:?} has an unusable name; skipped",
                    e.name
                );
                continue;
            }
            let Some(bytes) =
                iso::read_file_from(media, &format!("{dir}/{}", e.name), MAX_FILE_BYTES)
            else {
                tracing::warn!(
                    "virtual media: {dir}/{} unreadable or over {MAX_FILE_BYTES} bytes; skipped",
                    e.name
                );
                continue;
            };
            std::fs::create_dir_all(&dest)
                .with_context(|| format!("creating {}", dest.display()))?;
            let path = dest.join(&e.name);
            std::fs::write(&path, bytes).with_context(|| format!("writing {}", path.display()))?;
            written.push(path);
        }
    }
    Ok(written)
}

/// What the search for the virtual floppy found.
#[derive(Debug, Default)]
pub struct FloppySearch {
    /// The device that supplied `parameters.txt`, and its text.
    pub found: Option<(Candidate, String)>,
    /// One line for each candidate that looked like the floppy but was
    /// refused (device and reason); each was also logged as a warning.
    pub notes: Vec<String>,
}

/// `parameters.txt` of the virtual floppy: the first of `candidates` (in
/// their order) whose device under `dev` is a FAT12/FAT16 volume labelled
/// [`FLOPPY_LABEL`] with the file ([`floppy::read_device`]).
pub fn floppy_parameters(dev: &Path, candidates: &[Candidate]) -> FloppySearch {
    let mut search = FloppySearch::default();
    for c in candidates {
        let path = dev.join(&c.name);
        let Ok(mut f) = std::fs::File::open(&path) else {
            // An empty drive (no medium) or a device gone since listing.
            continue;
        };
        match floppy::read_device(&mut f) {
            Ok(text) => {
                tracing::info!(
                    "virtual media: {FLOPPY_LABEL} parameters from {} ({})",
                    path.display(),
                    c.why
                );
                search.found = Some((c.clone(), text));
                break;
            }
            Err(e) if e.is_other_media() => {
                tracing::debug!("virtual media: {}: not the floppy: {e}", path.display());
            }
            Err(e) => {
                let note = format!(
                    "{} ({}): {e}; not read as the floppy",
                    path.display(),
                    c.why
                );
                tracing::warn!("virtual media: {note}");
                search.notes.push(note);
            }
        }
    }
    search
}

#[cfg(test)]
mod tests;
