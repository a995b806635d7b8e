//! Filesystems IPA puts on a partition image's other partitions
//! (`utils.mkfs`): the EFI system partition as vfat labelled `efi-part`,
//! swap labelled `swap1`, the ephemeral partition labelled `ephemeral0`.
//! vfat and swap are written natively; ext2/3/4, xfs and btrfs need
//! `mkfs.<type>` on the PATH (the deploy ramdisk ships Debian's mke2fs as
//! mkfs.ext2/3/4 and mkfs.xfs: `image-builder/fetch-mkfs.sh`).

use std::fs::{File, OpenOptions};
use std::io::{Seek, SeekFrom};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::process::Command;

use anyhow::{bail, Context, Result};

/// IPA's labels.
pub(crate) const ESP_LABEL: &str = "efi-part";
/// Swap's label.
pub(crate) const SWAP_LABEL: &str = "swap1";
/// The ephemeral partition's label.
pub(crate) const EPHEMERAL_LABEL: &str = "ephemeral0";

fn open(path: &Path) -> Result<(File, u64)> {
    let mut f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .with_context(|| format!("opening {}", path.display()))?;
    let len = f
        .seek(SeekFrom::End(0))
        .with_context(|| format!("reading the size of {}", path.display()))?;
    f.rewind()?;
    Ok((f, len))
}

/// Formats the partition at `path` as vfat with `label` (a fresh volume id;
/// FAT12/16/32 chosen by size, as mkfs.fat does) for `sector`-byte sectors.
pub(crate) fn vfat(path: &Path, label: &str, sector: u64) -> Result<()> {
    let (f, len) = open(path)?;
    let sector16 = u16::try_from(sector).context("sector size")?;
    let total = u32::try_from(len / sector)
        .with_context(|| format!("{} is too large for vfat", path.display()))?;
    let mut l = [b' '; 11];
    for (d, s) in l.iter_mut().zip(label.bytes()) {
        *d = s;
    }
    fatfs::format_volume(
        &f,
        fatfs::FormatVolumeOptions::new()
            .bytes_per_sector(sector16)
            .total_sectors(total)
            .volume_label(l)
            .volume_id(fastrand::u32(..)),
    )
    .with_context(|| format!("formatting {} as vfat", path.display()))?;
    // FAT32's FSInfo gets its free cluster count (mkfs.fat writes it; fsck
    // reports it missing otherwise).
    let fs = fatfs::FileSystem::new(&f, fatfs::FsOptions::new())
        .with_context(|| format!("opening the new vfat on {}", path.display()))?;
    fs.stats()
        .with_context(|| format!("counting free clusters on {}", path.display()))?;
    fs.unmount()
        .with_context(|| format!("closing the new vfat on {}", path.display()))?;
    f.sync_all()
        .with_context(|| format!("flushing {}", path.display()))
}

/// Writes a Linux swap signature (`mkswap -L label`): version 1, a fresh
/// UUID, the last usable page, `SWAPSPACE2` at the end of the first page.
pub(crate) fn swap(path: &Path, label: &str) -> Result<uuid::Uuid> {
    let (f, len) = open(path)?;
    let page = nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE)
        .ok()
        .flatten()
        .map_or(4096, |p| p as u64);
    let pages = len / page;
    if pages < 10 {
        bail!(
            "{} ({len} bytes) is too small for swap (10 pages at least)",
            path.display()
        );
    }
    let mut head = vec![0u8; page as usize];
    let id = uuid::Uuid::new_v4();
    head[1024..1028].copy_from_slice(&1u32.to_le_bytes());
    let last = u32::try_from(pages - 1).unwrap_or(u32::MAX);
    head[1028..1032].copy_from_slice(&last.to_le_bytes());
    head[1036..1052].copy_from_slice(id.as_bytes());
    for (d, s) in head[1052..1068].iter_mut().zip(label.bytes()) {
        *d = s;
    }
    let magic = b"SWAPSPACE2";
    let at = head.len() - magic.len();
    head[at..].copy_from_slice(magic);
    f.write_all_at(&head, 0)
        .with_context(|| format!("writing the swap header to {}", path.display()))?;
    f.sync_all()
        .with_context(|| format!("flushing {}", path.display()))?;
    Ok(id)
}

/// Checks, before the disk is touched, that a `fs` filesystem can be made:
/// vfat always, the others when `mkfs.<fs>` is on the PATH.
pub(crate) fn check_mkfs(fs: &str) -> Result<()> {
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/sbin:/usr/bin:/sbin:/bin".into());
    check_mkfs_in(fs, &path)
}

fn check_mkfs_in(fs: &str, path: &std::ffi::OsStr) -> Result<()> {
    if fs == "vfat" {
        return Ok(());
    }
    if !matches!(fs, "ext2" | "ext3" | "ext4" | "xfs" | "btrfs") {
        bail!("cannot make a {fs:?} filesystem");
    }
    let tool = format!("mkfs.{fs}");
    if agent_base::tool::find_on_path(path, &tool).is_none() {
        bail!(
            "ephemeral_format {fs} needs {tool}, which is not installed here \
             (the deploy ramdisk ships mkfs.ext2/3/4 and mkfs.xfs; vfat is made natively)"
        );
    }
    Ok(())
}

/// Makes a `fs` filesystem labelled `label` on `path` (IPA's
/// `utils.mkfs`): vfat natively, the others with `mkfs.<fs>`.
pub(crate) fn mkfs(fs: &str, path: &Path, label: &str, sector: u64) -> Result<()> {
    let mut cmd = match fs {
        "vfat" => return vfat(path, label, sector),
        "ext2" | "ext3" | "ext4" => {
            let mut c = Command::new(format!("mkfs.{fs}"));
            c.args(["-q", "-F", "-L", label]);
            c
        }
        "xfs" | "btrfs" => {
            let mut c = Command::new(format!("mkfs.{fs}"));
            c.args(["-q", "-f", "-L", label]);
            c
        }
        other => bail!("cannot make a {other:?} filesystem"),
    };
    cmd.arg(path);
    agent_base::tool::run(&mut cmd)
        .with_context(|| format!("making the {fs} filesystem on {}", path.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(dir: &Path, mib: u64) -> std::path::PathBuf {
        let p = dir.join("part.img");
        File::create(&p).unwrap().set_len(mib << 20).unwrap();
        p
    }

    fn probe(path: &Path, key: &str) -> Option<String> {
        let f = File::open(path).unwrap();
        let len = f.metadata().unwrap().len();
        agent_devices::disk::probe::probe_value(&f, 0, len, key)
    }

    #[test]
    fn swap_header_is_what_libblkid_calls_swap_with_label_and_uuid() {
        let dir = tempfile::tempdir().unwrap();
        let p = file(dir.path(), 4);
        let id = swap(&p, SWAP_LABEL).unwrap();
        assert_eq!(probe(&p, "TYPE").as_deref(), Some("swap"));
        assert_eq!(probe(&p, "LABEL").as_deref(), Some("swap1"));
        assert_eq!(probe(&p, "UUID"), Some(id.to_string()));
        let tiny = dir.path().join("tiny");
        File::create(&tiny).unwrap().set_len(8192).unwrap();
        assert!(swap(&tiny, SWAP_LABEL)
            .unwrap_err()
            .to_string()
            .contains("too small"));
    }

    #[test]
    fn esp_is_vfat_labelled_efi_part() {
        let dir = tempfile::tempdir().unwrap();
        let p = file(dir.path(), 40);
        vfat(&p, ESP_LABEL, 512).unwrap();
        assert_eq!(probe(&p, "TYPE").as_deref(), Some("vfat"));
        assert_eq!(probe(&p, "LABEL").as_deref(), Some("efi-part"));
        assert!(probe(&p, "UUID").is_some());
    }

    #[test]
    fn missing_mkfs_tools_are_found_before_the_disk_is_touched() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let tool = dir.path().join("mkfs.ext4");
        std::fs::write(&tool, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
        let path = dir.path().as_os_str();
        check_mkfs_in("vfat", path).unwrap();
        check_mkfs_in("ext4", path).unwrap();
        let e = check_mkfs_in("xfs", path).unwrap_err().to_string();
        assert!(e.contains("needs mkfs.xfs"), "{e}");
        assert!(check_mkfs_in("ntfs", path).is_err());
        // Not executable: not a tool.
        std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(check_mkfs_in("ext4", path).is_err());
    }

    #[test]
    fn unknown_filesystems_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let p = file(dir.path(), 1);
        assert!(mkfs("ntfs", &p, EPHEMERAL_LABEL, 512).is_err());
    }
}
