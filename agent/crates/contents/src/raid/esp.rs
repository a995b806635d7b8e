//! The mirrored EFI system partition of a software RAID layout
//! (`create_configuration` builds it: a RAID-1 named `esp` over partition 1
//! of every member, version-1.0 metadata at the end, so firmware reads each
//! member as plain FAT). For `install_bootloader` after a whole-disk image
//! was written onto an array: [`find`] locates it and its members' disks
//! and partitions, [`copy_image_esp`] copies the image's own ESP (inside
//! the array) onto it byte for byte, as IPA's
//! `prepare_boot_partitions_for_softraid` does with `dd`.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use super::{md, ops};
use agent_devices::disk::table::{self, Part};

/// The mirrored ESP array and, per member, its disk and partition.
#[derive(Debug, Clone)]
pub struct MirroredEsp {
    /// `/dev/mdN`.
    pub device: PathBuf,
    /// `(disk, its ESP partition, logical sector size)` of each member.
    pub members: Vec<(PathBuf, Part, u64)>,
}

/// The disk and partition number of partition device `name` (`vda1`),
/// from sysfs.
fn parent(name: &str) -> Option<(PathBuf, u32)> {
    if let Some((disk, number)) = agent_devices::disk::multipath::partition_of(Path::new("/"), name)
    {
        return Some((Path::new("/dev").join(disk), number));
    }
    let sys = std::fs::canonicalize(Path::new("/sys/class/block").join(name)).ok()?;
    let number = std::fs::read_to_string(sys.join("partition"))
        .ok()?
        .trim()
        .parse()
        .ok()?;
    let disk = sys.parent()?.file_name()?.to_string_lossy().into_owned();
    Some((Path::new("/dev").join(disk), number))
}

/// The running array named `esp`, if any.
pub fn find() -> Result<Option<MirroredEsp>> {
    for a in md::arrays(Path::new("/")) {
        let Some(first) = a.members.first() else {
            continue;
        };
        let named_esp = ops::examine(&Path::new("/dev").join(first))
            .is_some_and(|(_, f)| f.name == ops::ESP_NAME);
        if !named_esp {
            continue;
        }
        let mut members = Vec::new();
        for m in &a.members {
            let (disk, number) =
                parent(m).with_context(|| format!("the disk of ESP member {m} is not in sysfs"))?;
            let f = File::open(&disk).with_context(|| format!("opening {}", disk.display()))?;
            let sector = agent_devices::disk::ioctl::logical_sector_size(&f).map_or(512, u64::from);
            let t = table::read(&f, sector)?
                .with_context(|| format!("{} has no partition table", disk.display()))?;
            let part = t
                .parts
                .into_iter()
                .find(|p| p.number == number)
                .with_context(|| {
                    format!(
                        "partition {number} of {} is not in its table",
                        disk.display()
                    )
                })?;
            members.push((disk, part, sector));
        }
        return Ok(Some(MirroredEsp {
            device: Path::new("/dev").join(&a.name),
            members,
        }));
    }
    Ok(None)
}

/// Copies the ESP of the image written on `image` (an array) onto the
/// mirrored ESP (the FAT's own size is the image's; the rest of the array
/// is unused). Returns the image's ESP.
pub fn copy_image_esp(image: &Path, esp: &MirroredEsp) -> Result<Part> {
    let (src_part, _) = crate::uefi::esp(image).map_err(anyhow::Error::from)?;
    let src = File::open(image).with_context(|| format!("opening {}", image.display()))?;
    let dst = OpenOptions::new()
        .write(true)
        .open(&esp.device)
        .with_context(|| format!("opening {}", esp.device.display()))?;
    let room =
        agent_devices::disk::ioctl::size_bytes(&dst).context("reading the mirrored ESP's size")?;
    if src_part.len > room {
        bail!(
            "the image's EFI system partition ({} MiB) does not fit the mirrored ESP {} ({} MiB)",
            src_part.len >> 20,
            esp.device.display(),
            room >> 20
        );
    }
    let mut buf = vec![0u8; 1 << 20];
    let mut done = 0;
    while done < src_part.len {
        let n = buf.len().min((src_part.len - done) as usize);
        src.read_exact_at(&mut buf[..n], src_part.start + done)
            .with_context(|| format!("reading the image's ESP from {}", image.display()))?;
        dst.write_all_at(&buf[..n], done)
            .with_context(|| format!("writing {}", esp.device.display()))?;
        done += n as u64;
    }
    dst.sync_all()
        .with_context(|| format!("flushing {}", esp.device.display()))?;
    Ok(src_part)
}
