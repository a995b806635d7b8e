//! Ironic's virtual floppy (`ir-vfd-dev`, a FAT image of about 100 KiB
//! that Ironic's `create_vfat_image` makes with `parameters.txt` in its
//! root directory), read by a small reader of its own: only from a device
//! of at most [`FLOPPY_MAX_BYTES`], read whole into memory first, only
//! FAT12 or FAT16 (whose root directory has a fixed place and size), and
//! with the one cluster chain it follows (the file's) walked at most once
//! per cluster, so a loop or an overlong chain ends the read with a
//! [`Refusal`] instead of a hang. Nothing read from the device is indexed
//! or computed on unchecked: hostile bytes give a refusal, never a panic.

mod fat;

use std::io::{Read, Seek, SeekFrom};

use super::{FLOPPY_LABEL, MAX_FILE_BYTES};

/// Largest device read as Ironic's floppy: its image is about 100 KiB
/// (presented by BMCs as a 1.44 MB floppy or a small USB disk); 16 MiB
/// leaves room for any such presentation while bounding what a
/// candidate that is not the floppy can cost (one read of at most this
/// many bytes).
pub(crate) const FLOPPY_MAX_BYTES: u64 = 16 << 20;

/// The file the floppy carries.
pub(crate) const PARAMETERS_FILE: &str = "parameters.txt";

/// Why a device gave no parameters.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// No FAT boot sector: another kind of media.
    #[error("no FAT boot sector")]
    NotFat,
    /// A FAT volume, but labelled otherwise (or not at all).
    #[error("FAT volume labelled {0:?}, not {FLOPPY_LABEL}")]
    OtherLabel(String),
    /// Labelled as the floppy, but larger than a floppy can be.
    #[error("labelled {FLOPPY_LABEL} but {0} bytes, over the {FLOPPY_MAX_BYTES}-byte bound of a virtual floppy")]
    TooLarge(u64),
    /// FAT32 (Ironic's floppy is FAT12).
    #[error("labelled {FLOPPY_LABEL} but FAT32; only FAT12 and FAT16 are read")]
    Fat32,
    /// exFAT (its label is not read: refused whatever it is).
    #[error("exFAT; only FAT12 and FAT16 are read")]
    ExFat,
    /// A boot sector or FAT that does not describe a usable volume.
    #[error("malformed FAT volume: {0}")]
    Malformed(String),
    /// The root directory has no `parameters.txt`.
    #[error("no {PARAMETERS_FILE} in the root directory")]
    NoParameters,
    /// `parameters.txt` is larger than [`MAX_FILE_BYTES`].
    #[error("{PARAMETERS_FILE} is {0} bytes, over {MAX_FILE_BYTES}")]
    FileTooLarge(u32),
    /// The file's cluster chain comes back to a cluster it already passed.
    #[error("{PARAMETERS_FILE}'s cluster chain loops back to cluster {0}")]
    Loop(u32),
    /// The file's cluster chain leaves the volume, runs into a free or bad
    /// cluster, or ends before the file does.
    #[error("{PARAMETERS_FILE}'s cluster chain {0}")]
    BadChain(String),
    /// `parameters.txt` is not UTF-8 text.
    #[error("{PARAMETERS_FILE} is not UTF-8 text")]
    NotText,
    /// Reading the device failed.
    #[error("reading the device: {0}")]
    Io(String),
}

impl Refusal {
    /// Whether the device is simply not the floppy (nothing to warn about).
    pub(crate) fn is_other_media(&self) -> bool {
        matches!(self, Refusal::NotFat | Refusal::OtherLabel(_))
    }
}

/// Whether `label` (padded or not, any case) is [`FLOPPY_LABEL`].
fn is_floppy_label(label: &str) -> bool {
    label.trim().eq_ignore_ascii_case(FLOPPY_LABEL)
}

/// The refusal of an image of `bytes` bytes (over [`FLOPPY_MAX_BYTES`])
/// whose first sector is `boot`: a warning only when it says it is the
/// floppy.
fn oversize(boot: &[u8], bytes: u64) -> Refusal {
    match fat::boot_label(boot) {
        Some(l) if is_floppy_label(&l) => Refusal::TooLarge(bytes),
        Some(l) => Refusal::OtherLabel(l),
        None => Refusal::NotFat,
    }
}

/// `parameters.txt` of a floppy image in memory.
pub fn parameters(image: &[u8]) -> Result<String, Refusal> {
    let boot = image.get(..fat::BOOT_SECTOR).ok_or(Refusal::NotFat)?;
    let bytes = u64::try_from(image.len()).unwrap_or(u64::MAX);
    if bytes > FLOPPY_MAX_BYTES {
        return Err(oversize(boot, bytes));
    }
    let volume = fat::Volume::parse(image)?;
    let entry = volume.root_entries(image)?;
    let label_ok = fat::boot_label(boot).is_some_and(|l| is_floppy_label(&l))
        || entry.label.as_deref().is_some_and(is_floppy_label);
    if !label_ok {
        return Err(Refusal::OtherLabel(
            entry
                .label
                .or_else(|| fat::boot_label(boot))
                .unwrap_or_default(),
        ));
    }
    let (first, size) = entry.parameters.ok_or(Refusal::NoParameters)?;
    let limit = u32::try_from(MAX_FILE_BYTES).unwrap_or(u32::MAX);
    if size > limit {
        return Err(Refusal::FileTooLarge(size));
    }
    let data = volume.read_chain(image, first, usize::try_from(size).unwrap_or(usize::MAX))?;
    String::from_utf8(data).map_err(|_| Refusal::NotText)
}

/// `parameters.txt` of the floppy on `device`: its size checked first,
/// then (when its first sector is a FAT boot sector) the whole device read
/// into memory at once and parsed there.
pub fn read_device<D: Read + Seek>(device: &mut D) -> Result<String, Refusal> {
    let io = |e: std::io::Error| Refusal::Io(e.to_string());
    let bytes = device.seek(SeekFrom::End(0)).map_err(io)?;
    device.seek(SeekFrom::Start(0)).map_err(io)?;
    let mut boot = vec![0; fat::BOOT_SECTOR];
    if bytes < fat::BOOT_SECTOR as u64 {
        return Err(Refusal::NotFat);
    }
    device.read_exact(&mut boot).map_err(io)?;
    if bytes > FLOPPY_MAX_BYTES {
        return Err(oversize(&boot, bytes));
    }
    fat::check_boot_sector(&boot)?;
    // At most FLOPPY_MAX_BYTES (checked above); `take` also bounds a
    // device that grows while it is read.
    let mut image = boot;
    device
        .take(FLOPPY_MAX_BYTES.saturating_sub(fat::BOOT_SECTOR as u64))
        .read_to_end(&mut image)
        .map_err(io)?;
    parameters(&image)
}

#[cfg(test)]
mod tests;
