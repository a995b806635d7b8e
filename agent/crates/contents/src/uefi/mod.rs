//! UEFI boot entries for a deployed disk (PROTOCOL.md §5.8, `image.install_bootloader`):
//! find the EFI system partition in the disk's GPT, mount it read-only,
//! pick its loaders ([`loaders`]), and write a boot entry for each into
//! efivarfs natively ([`efivars`], [`loadopt`]), first in `BootOrder`.
//! Only the ramdisk calls this; host mode never touches NVRAM.

pub(crate) mod devpath;
pub mod efivars;
pub mod loaders;
pub mod loadopt;

use std::path::{Path, PathBuf};

use crate::ignition::mount::{MountError, Mounted};
use agent_devices::disk::table::{self, Part};

/// `C12A7328-F81F-11D2-BA4B-00A0C93EC93B`, on-disk byte order.
pub const ESP_TYPE: [u8; 16] = [
    0x28, 0x73, 0x2a, 0xc1, 0x1f, 0xf8, 0xd2, 0x11, 0xba, 0x4b, 0x00, 0xa0, 0xc9, 0x3e, 0xc9, 0x3b,
];

/// Why boot entries could not be written.
#[derive(Debug, thiserror::Error)]
pub enum UefiError {
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
    /// It has none.
    #[error("the disk has no partition table")]
    NoTable,
    /// No partition of the ESP type.
    #[error("no EFI system partition found on {}; is the image UEFI-compatible?", .0.display())]
    NoEsp(PathBuf),
    /// The ESP cannot be mounted or unmounted.
    #[error(transparent)]
    Mount(#[from] MountError),
    /// The ESP holds no loader.
    #[error(
        "no boot loader found on the EFI system partition (partition {number}) of {}",
        .device.display()
    )]
    NoLoader {
        /// The ESP's partition number.
        number: u32,
        /// The disk.
        device: PathBuf,
    },
    /// Writing a variable failed.
    #[error("writing the boot entry {label:?}: {source}")]
    Entry {
        /// The entry's label.
        label: String,
        /// The system's error.
        source: std::io::Error,
    },
}

/// The EFI system partition of `device` and the sector size.
pub fn esp(device: &Path) -> Result<(Part, u64), UefiError> {
    let f = std::fs::File::open(device).map_err(|source| UefiError::Open {
        device: device.to_path_buf(),
        source,
    })?;
    let sector = agent_devices::disk::ioctl::logical_sector_size(&f).map_or(512, u64::from);
    let t = table::read(&f, sector)?.ok_or(UefiError::NoTable)?;
    t.parts
        .into_iter()
        .find(|p| p.type_guid == ESP_TYPE)
        .map(|p| (p, sector))
        .ok_or_else(|| UefiError::NoEsp(device.to_path_buf()))
}

/// Registers the loaders of `device`'s ESP in the variables under
/// `efivars_root`. Returns (entry number, label) per loader.
pub fn install(device: &Path, efivars_root: &Path) -> Result<Vec<(u16, String)>, UefiError> {
    let (esp, sector) = esp(device)?;
    let m = Mounted::new(device, esp.start, esp.len, "vfat", true)?;
    let found = loaders::find(&m.path());
    m.unmount()?;
    if found.is_empty() {
        return Err(UefiError::NoLoader {
            number: esp.number,
            device: device.to_path_buf(),
        });
    }
    let part = loadopt::Partition {
        number: esp.number,
        start_lba: esp.start / sector,
        size_lba: esp.len / sector,
        guid: esp.guid,
    };
    let vars = efivars::EfiVars::new(efivars_root);
    // Registered in reverse so the best loader ends up first in BootOrder.
    let mut out = Vec::new();
    for (label, loader) in found.iter().rev() {
        let n =
            efivars::install(&vars, &part, loader, label).map_err(|source| UefiError::Entry {
                label: label.clone(),
                source,
            })?;
        out.push((n, label.clone()));
    }
    out.reverse();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_esp_by_type_and_refuses_images_without_one() {
        let dir = tempfile::tempdir().unwrap();
        let disk = agent_testkit::sparse_disk(
            dir.path(),
            64,
            "label: gpt\nsize=16MiB, type=U\nname=root\n",
        );
        let (p, sector) = esp(&disk).unwrap();
        assert_eq!((p.number, p.start, sector), (1, 1 << 20, 512));
        let disk = agent_testkit::sparse_disk(dir.path(), 64, "label: gpt\nname=root\n");
        assert!(esp(&disk)
            .unwrap_err()
            .to_string()
            .contains("UEFI-compatible"));
    }
}
