//! A partition image's own UEFI loaders put on the ESP the deploy created
//! (`image.install_bootloader`, PROTOCOL.md §5.8), as IPA's
//! `_preserve_efi_assets` does, without running anything from the image:
//! the root filesystem's `boot/efi/EFI` tree is copied to the (empty) ESP
//! natively (the `fatfs` crate, repaired by [`super::fatdots`]; no mount),
//! GRUB's `boot/grub2/grub.cfg` and `grubenv` are added to each of its
//! directories that lacks them, and the ESP is added to the image's
//! `/etc/fstab` (`UUID=… /boot/efi vfat umask=0077 0 1`). The boot entries
//! are then written by [`crate::uefi`].
//!
//! The root filesystem is the tenant's: it is mounted `nodev,nosuid,noexec`,
//! no symbolic link in it is followed ([`crate::ignition::beneath`]), and the
//! copy is bounded in files, depth and bytes.

use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use crate::ignition::beneath::Beneath;
use crate::ignition::mount::Mounted;
use agent_devices::disk::table::{self, Part};

/// Most files and directories copied.
const MAX_ENTRIES: usize = 4096;
/// Deepest directory nesting copied below `EFI`.
const MAX_DEPTH: usize = 8;
/// Largest file copied.
const MAX_FILE: u64 = 64 << 20;

/// What was done.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Preserved {
    /// Files copied to the ESP (paths below its root).
    pub files: Vec<String>,
    /// Whether `/etc/fstab` got the ESP's line.
    pub fstab: bool,
}

/// The partition of `disk` whose filesystem UUID (or PARTUUID) is
/// `root_uuid`, with the filesystem type.
pub fn find_root(disk: &Path, root_uuid: &str) -> Result<(Part, String)> {
    let f = std::fs::File::open(disk).with_context(|| format!("opening {}", disk.display()))?;
    let sector = agent_devices::disk::ioctl::logical_sector_size(&f).map_or(512, u64::from);
    let t = table::read(&f, sector)?.context("the disk has no partition table")?;
    drop(f);
    let want = root_uuid.to_ascii_lowercase();
    for p in t.parts {
        let (uuid, fstype) = probe(disk, &p);
        let partuuid = uuid::Uuid::from_bytes_le(p.guid).to_string();
        if uuid.as_deref().map(str::to_ascii_lowercase).as_deref() == Some(want.as_str())
            || partuuid == want
        {
            let fstype =
                fstype.with_context(|| format!("partition {} holds no filesystem", p.number))?;
            return Ok((p, fstype));
        }
    }
    bail!(
        "no partition of {} has the root filesystem UUID {root_uuid}",
        disk.display()
    )
}

/// (UUID, TYPE) of a partition, read through the kernel's partition device
/// when there is one (its cache is the one the deploy wrote through).
fn probe(disk: &Path, p: &Part) -> (Option<String>, Option<String>) {
    let via_part = part_device(disk, p).and_then(|dev| {
        let f = std::fs::File::open(dev).ok()?;
        Some((f, 0))
    });
    let (f, offset) = match via_part {
        Some(x) => x,
        None => match std::fs::File::open(disk) {
            Ok(f) => (f, p.start),
            Err(_) => return (None, None),
        },
    };
    (
        agent_devices::disk::probe::probe_value(&f, offset, p.len, "UUID"),
        agent_devices::disk::probe::probe_value(&f, offset, p.len, "TYPE"),
    )
}

/// `/dev/<name>` of the kernel's partition of `disk` at `p`'s range.
fn part_device(disk: &Path, p: &Part) -> Option<PathBuf> {
    let name = agent_devices::disk::Device::open(disk)
        .ok()?
        .kernel_name()?;
    let read = |p: PathBuf| -> Option<u64> { std::fs::read_to_string(p).ok()?.trim().parse().ok() };
    std::fs::read_dir(Path::new("/sys/class/block").join(&name))
        .ok()?
        .flatten()
        .find_map(|e| {
            let start = read(e.path().join("start"))? * 512;
            let size = read(e.path().join("size"))? * 512;
            (start == p.start && size == p.len).then(|| Path::new("/dev").join(e.file_name()))
        })
}

/// Copies the UEFI loaders of the root filesystem (`root_uuid`) of `disk`
/// to its ESP. `Ok(None)`: the image has no `boot/efi/EFI` directory (it
/// needs GRUB installed, which this agent does not do). Nothing is copied
/// when the ESP already holds an `EFI` directory with loaders.
pub fn preserve_assets(disk: &Path, root_uuid: &str) -> Result<Option<Preserved>> {
    let (esp, _) = crate::uefi::esp(disk)?;
    let (root, fstype) = find_root(disk, root_uuid)?;
    let esp_uuid = probe(disk, &esp)
        .0
        .context("the EFI system partition holds no filesystem")?;
    let root_mnt = Mounted::new(disk, root.start, root.len, &fstype, false)?;
    let result = (|| -> Result<Option<Preserved>> {
        let top = Beneath::open(&root_mnt.path())?;
        let Ok(src) = top.dir("boot/efi/EFI") else {
            return Ok(None);
        };
        let files = copy_to_esp(disk, &esp, &top, &src)?;
        let fstab = append_fstab(&top, &esp_uuid)?;
        Ok(Some(Preserved { files, fstab }))
    })();
    let unmounted = root_mnt.unmount();
    let out = result?;
    unmounted?;
    Ok(out)
}

/// Writes the tree under `src` as `EFI` on the ESP (natively, no mount),
/// plus GRUB's files, then repairs what the FAT library wrote.
fn copy_to_esp(disk: &Path, esp: &Part, top: &Beneath, src: &Beneath) -> Result<Vec<String>> {
    let (file, base) = match part_device(disk, esp) {
        Some(dev) => (open_rw(&dev)?, 0),
        None => (open_rw(disk)?, esp.start),
    };
    let mut range = Range {
        file,
        base,
        len: esp.len,
        pos: 0,
    };
    let mut files = Vec::new();
    {
        let fs = fatfs::FileSystem::new(&mut range, fatfs::FsOptions::new())
            .context("opening the EFI system partition's FAT filesystem")?;
        {
            let root = fs.root_dir();
            if root.open_dir("EFI").is_ok() {
                tracing::info!(
                    "the EFI system partition already has an EFI directory; nothing copied"
                );
                return Ok(files);
            }
            let efi = root
                .create_dir("EFI")
                .context("creating EFI on the EFI system partition")?;
            copy_tree(src, &efi, "EFI", 0, &mut files)?;
            add_grub_files(top, &efi, &mut files)?;
        }
        // Counts the free clusters, so FAT32's FSInfo is written with them.
        fs.stats()
            .context("counting the EFI system partition's free clusters")?;
        fs.unmount()
            .context("closing the EFI system partition's filesystem")?;
    }
    super::fatdots::repair(&mut range).context("repairing the new directories' dot entries")?;
    range
        .file
        .sync_all()
        .context("flushing the EFI system partition")?;
    Ok(files)
}

fn open_rw(path: &Path) -> Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .with_context(|| format!("opening {}", path.display()))
}

/// `len` bytes of a file from `base`, as a stream for the FAT library.
struct Range {
    file: std::fs::File,
    base: u64,
    len: u64,
    pos: u64,
}

impl Range {
    fn room(&self, want: usize) -> usize {
        (self.len.saturating_sub(self.pos)).min(want as u64) as usize
    }
}

impl Read for Range {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.room(buf.len());
        let n = self.file.read_at(&mut buf[..n], self.base + self.pos)?;
        self.pos += n as u64;
        Ok(n)
    }
}

impl Write for Range {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.room(buf.len());
        if n == 0 && !buf.is_empty() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::WriteZero,
                "write beyond the end of the partition",
            ));
        }
        let n = self.file.write_at(&buf[..n], self.base + self.pos)?;
        self.pos += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.file.sync_data()
    }
}

impl Seek for Range {
    fn seek(&mut self, to: SeekFrom) -> std::io::Result<u64> {
        let new = match to {
            SeekFrom::Start(n) => Some(n),
            SeekFrom::End(d) => self.len.checked_add_signed(d),
            SeekFrom::Current(d) => self.pos.checked_add_signed(d),
        };
        match new {
            Some(n) if n <= self.len => {
                self.pos = n;
                Ok(n)
            }
            _ => Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "seek outside the partition",
            )),
        }
    }
}

/// Copies the directory `src` of the tenant's filesystem into `dst` on the
/// ESP; links, devices and the like are skipped with a warning.
fn copy_tree<T: fatfs::ReadWriteSeek>(
    src: &Beneath,
    dst: &fatfs::Dir<'_, T>,
    rel: &str,
    depth: usize,
    files: &mut Vec<String>,
) -> Result<()> {
    if depth > MAX_DEPTH {
        bail!("{rel}: directories nested deeper than {MAX_DEPTH}");
    }
    for name in src.names()? {
        if files.len() >= MAX_ENTRIES {
            bail!("more than {MAX_ENTRIES} files under boot/efi/EFI");
        }
        let here = format!("{rel}/{name}");
        if let Ok(sub) = src.dir(&name) {
            let d = dst
                .create_dir(&name)
                .with_context(|| format!("creating {here} on the EFI system partition"))?;
            copy_tree(&sub, &d, &here, depth + 1, files)?;
            continue;
        }
        match src.read_regular(&name, MAX_FILE) {
            Ok(data) => {
                write_file(dst, &name, &data)
                    .with_context(|| format!("writing {here} to the EFI system partition"))?;
                files.push(here);
            }
            Err(e) => tracing::warn!("not copied to the EFI system partition: {e:#}"),
        }
    }
    Ok(())
}

fn write_file<T: fatfs::ReadWriteSeek>(
    dir: &fatfs::Dir<'_, T>,
    name: &str,
    data: &[u8],
) -> std::io::Result<()> {
    let mut f = dir.create_file(name)?;
    f.truncate()?;
    f.write_all(data)?;
    f.flush()
}

/// IPA's addition: `boot/grub2/grub.cfg` and `grubenv` into each directory
/// under `EFI` that lacks them.
fn add_grub_files<T: fatfs::ReadWriteSeek>(
    top: &Beneath,
    efi: &fatfs::Dir<'_, T>,
    files: &mut Vec<String>,
) -> Result<()> {
    let Ok(grub2) = top.dir("boot/grub2") else {
        return Ok(());
    };
    let dirs: Vec<String> = efi
        .iter()
        .filter_map(|e| e.ok())
        .filter(|e| e.is_dir() && e.file_name() != "." && e.file_name() != "..")
        .map(|e| e.file_name())
        .collect();
    for name in ["grub.cfg", "grubenv"] {
        let Ok(data) = grub2.read_regular(name, MAX_FILE) else {
            continue;
        };
        for d in &dirs {
            let dir = efi.open_dir(d)?;
            if dir.open_file(name).is_err() {
                write_file(&dir, name, &data).with_context(|| format!("writing EFI/{d}/{name}"))?;
                files.push(format!("EFI/{d}/{name}"));
            }
        }
    }
    Ok(())
}

/// Adds the ESP to the image's `/etc/fstab` (IPA's `_append_uefi_to_fstab`)
/// unless the file is missing or already names it.
fn append_fstab(top: &Beneath, esp_uuid: &str) -> Result<bool> {
    let Ok(etc) = top.dir("etc") else {
        return Ok(false);
    };
    if !etc.names()?.iter().any(|n| n == "fstab") {
        return Ok(false);
    }
    let key = format!("UUID={esp_uuid}");
    let mut added = false;
    etc.edit_file("fstab", |text| {
        if text.contains(&key) {
            return text.to_string();
        }
        added = true;
        let mut out = text.to_string();
        if !out.is_empty() && !out.ends_with('\n') {
            out.push('\n');
        }
        out.push_str(&format!("{key}\t/boot/efi\tvfat\tumask=0077\t0\t1\n"));
        out
    })?;
    Ok(added)
}

#[cfg(test)]
mod tests {
    use std::io::Cursor;

    use super::*;

    #[test]
    fn the_copy_follows_no_link_out_of_the_tenant_filesystem() {
        let dir = tempfile::tempdir().unwrap();
        let efi = dir.path().join("boot/efi/EFI");
        std::fs::create_dir_all(efi.join("BOOT")).unwrap();
        std::fs::write(efi.join("BOOT/BOOTX64.EFI"), b"loader").unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), b"not the tenant's").unwrap();
        std::os::unix::fs::symlink(outside.path(), efi.join("evil")).unwrap();
        std::os::unix::fs::symlink(outside.path().join("secret"), efi.join("BOOT/link.efi"))
            .unwrap();
        let top = Beneath::open(dir.path()).unwrap();
        let src = top.dir("boot/efi/EFI").unwrap();

        let mut img = Cursor::new(vec![0u8; 8 << 20]);
        fatfs::format_volume(&mut img, fatfs::FormatVolumeOptions::new()).unwrap();
        let mut files = Vec::new();
        {
            let fs = fatfs::FileSystem::new(&mut img, fatfs::FsOptions::new()).unwrap();
            {
                let dst = fs.root_dir().create_dir("EFI").unwrap();
                copy_tree(&src, &dst, "EFI", 0, &mut files).unwrap();
            }
            fs.unmount().unwrap();
        }
        assert_eq!(files, ["EFI/BOOT/BOOTX64.EFI"]);
        img.set_position(0);
        let fs = fatfs::FileSystem::new(&mut img, fatfs::FsOptions::new()).unwrap();
        let root = fs.root_dir();
        let mut data = Vec::new();
        root.open_file("EFI/BOOT/BOOTX64.EFI")
            .unwrap()
            .read_to_end(&mut data)
            .unwrap();
        assert_eq!(data, b"loader");
        assert!(root.open_dir("EFI/evil").is_err());
        assert!(root.open_file("EFI/BOOT/link.efi").is_err());
    }
}
