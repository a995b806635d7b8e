//! Mounting one partition of a disk (or disk image) by byte range. When the
//! kernel has a partition device for exactly that range (a block device
//! whose table it read, e.g. after an image write in the ramdisk), a
//! multipath device has a partition map for it, or the range is a whole
//! block device, that device is mounted with mount(2)
//! itself: no program is needed, which OpenShift's container form (an
//! image holding the agent only) has none of, and the deploy ramdisk's
//! kernel has no loop driver loaded. Otherwise `mount -o
//! loop,offset=,sizelimit=`, so it works on loop devices that do not scan
//! partitions and on image files.
//! Unmounted (umount(2)) on drop; an unmount waits until the kernel has
//! released the loop device (its autoclear is asynchronous), so the disk
//! underneath can be opened exclusively right after.
//!
//! A busy mount is retried ([`umount`]): any process forked at the wrong
//! moment (another thread's tool run) holds copies of our descriptors into
//! the mount until it execs, which makes one unmount fail with EBUSY
//! although nothing uses the filesystem.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Why a partition could not be mounted or unmounted.
#[derive(Debug, thiserror::Error)]
pub enum MountError {
    /// The mount point could not be created.
    #[error("creating a mount point: {0}")]
    MountPoint(std::io::Error),
    /// Every random mount point name was taken.
    #[error("creating a mount point: no free name")]
    NoFreeName,
    /// `mount` (of an image file, through a loop device) failed.
    #[error("mounting {fstype} at byte {offset} of {}: {source}", .device.display())]
    Mount {
        /// The filesystem type.
        fstype: String,
        /// The partition's first byte.
        offset: u64,
        /// The disk or image.
        device: PathBuf,
        /// The tool's failure.
        source: agent_base::tool::ToolError,
    },
    /// mount(2) of a block device failed.
    #[error("mounting {fstype} {} (byte {offset} of {}): {source}", .source_device.display(), .device.display())]
    MountDevice {
        /// The filesystem type.
        fstype: String,
        /// The partition's first byte.
        offset: u64,
        /// The disk.
        device: PathBuf,
        /// The device mounted: the partition, or the disk itself.
        source_device: PathBuf,
        /// The kernel's answer.
        source: nix::errno::Errno,
    },
    /// The unmount failed.
    #[error(transparent)]
    Unmount(#[from] UmountError),
}

/// Why an unmount failed (after its retries).
#[derive(Debug, thiserror::Error)]
#[error("umount {}: {source}", .dir.display())]
pub struct UmountError {
    /// The mount point.
    pub dir: PathBuf,
    /// The kernel's answer to the last try.
    pub source: nix::errno::Errno,
}

/// A mounted partition.
#[derive(Debug)]
pub struct Mounted {
    dir: PathBuf,
    active: bool,
    /// The loop device mount(8) set up (`loop7`), released asynchronously
    /// by the kernel after the unmount.
    loop_name: Option<String>,
}

/// A fresh, empty, private directory under the temporary directory.
fn mount_point() -> Result<PathBuf, MountError> {
    use std::os::unix::fs::DirBuilderExt;
    for _ in 0..16 {
        let dir = std::env::temp_dir().join(format!(
            "agent-mnt-{}-{:016x}",
            std::process::id(),
            fastrand::u64(..)
        ));
        match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(MountError::MountPoint(e)),
        }
    }
    Err(MountError::NoFreeName)
}

impl Mounted {
    /// Mounts `len` bytes at `offset` of `device` (filesystem `fstype`).
    pub fn new(
        device: &Path,
        offset: u64,
        len: u64,
        fstype: &str,
        ro: bool,
    ) -> Result<Self, MountError> {
        // A tenant's filesystem: no device nodes, set-id bits or programs
        // from it take effect; links in it are not followed ([`super::beneath`]).
        let ro_opt = if ro {
            "ro,nodev,nosuid,noexec"
        } else {
            "rw,nodev,nosuid,noexec"
        };
        Self::with_options(device, offset, len, fstype, ro_opt)
    }

    /// [`Mounted::new`] with the mount options `ro_opt` (`rw` for a
    /// filesystem whose programs are to run: [`crate::grub`]'s chroot).
    pub fn with_options(
        device: &Path,
        offset: u64,
        len: u64,
        fstype: &str,
        ro_opt: &str,
    ) -> Result<Self, MountError> {
        let dir = mount_point()?;
        // The whole block device (an md array holding a filesystem): no loop.
        let whole = offset == 0
            && std::fs::File::open(device)
                .ok()
                .and_then(|f| agent_devices::disk::ioctl::size_bytes(&f).ok())
                == Some(len);
        let block = match partition_device(Path::new("/sys/class/block"), device, offset, len) {
            _ if whole => Some(device.to_path_buf()),
            Some(part) => Some(Path::new("/dev").join(part)),
            // A SAN disk's multipath device: its partition maps hold it, so
            // neither it nor a loop device over it can be mounted; the map
            // of that partition can.
            None => agent_devices::disk::multipath::partition_map_at(device, offset, len),
        };
        let mounted = match block {
            Some(source_device) => {
                let (flags, data) = mount_flags(ro_opt);
                nix::mount::mount(
                    Some(&source_device),
                    &dir,
                    Some(fstype),
                    flags,
                    (!data.is_empty()).then_some(data.as_str()),
                )
                .map_err(|source| MountError::MountDevice {
                    fstype: fstype.to_string(),
                    offset,
                    device: device.to_path_buf(),
                    source_device,
                    source,
                })
                .map(|()| None)
            }
            None => agent_base::tool::run(
                Command::new("mount")
                    .args(["-t", fstype, "-o"])
                    .arg(format!("loop,offset={offset},sizelimit={len},{ro_opt}"))
                    .arg(device)
                    .arg(&dir),
            )
            // The loop device mount(8) set up, which the kernel releases
            // asynchronously after the unmount.
            .map(|_| {
                mount_source(&dir)
                    .and_then(|src| src.strip_prefix("/dev/").map(str::to_string))
                    .filter(|n| n.starts_with("loop"))
            })
            .map_err(|source| MountError::Mount {
                fstype: fstype.to_string(),
                offset,
                device: device.to_path_buf(),
                source,
            }),
        };
        let loop_name = match mounted {
            Ok(name) => name,
            Err(e) => {
                let _ = std::fs::remove_dir(&dir);
                return Err(e);
            }
        };
        Ok(Self {
            dir,
            active: true,
            loop_name,
        })
    }

    /// Where it is mounted.
    pub fn path(&self) -> PathBuf {
        self.dir.clone()
    }

    /// Unmounts, reporting failure.
    pub fn unmount(mut self) -> Result<(), MountError> {
        self.active = false;
        self.release()?;
        Ok(())
    }

    /// Unmounts ([`umount`]) and removes the mount point, also after a
    /// failure that left it detached lazily (the directory is empty then);
    /// after a success, waits for the loop device's release.
    fn release(&self) -> Result<(), UmountError> {
        let unmounted = umount(&self.dir);
        let _ = std::fs::remove_dir(&self.dir);
        if unmounted.is_ok() {
            self.wait_loop_released();
        }
        unmounted
    }

    /// Waits (up to 5 s) until the kernel has detached the loop device, so
    /// the disk under it is free for exclusive opens again.
    fn wait_loop_released(&self) {
        let Some(name) = &self.loop_name else {
            return;
        };
        let backing = PathBuf::from(format!("/sys/block/{name}/loop/backing_file"));
        for _ in 0..250 {
            if !backing.exists() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        tracing::warn!(device = %name, "loop device still attached 5 s after the unmount");
    }
}

/// The kernel's partition of block device `device` that spans exactly
/// `len` bytes from `offset` (from `<sysfs>/<disk>/<part>/start` and
/// `size`, in 512-byte units), e.g. `vda1`.
fn partition_device(sysfs: &Path, device: &Path, offset: u64, len: u64) -> Option<String> {
    use std::os::unix::fs::FileTypeExt;
    if !std::fs::metadata(device)
        .ok()?
        .file_type()
        .is_block_device()
    {
        return None;
    }
    let disk = std::fs::canonicalize(device).ok()?;
    let disk = disk.file_name()?.to_str()?;
    let read = |p: PathBuf| -> Option<u64> { std::fs::read_to_string(p).ok()?.trim().parse().ok() };
    std::fs::read_dir(sysfs.join(disk))
        .ok()?
        .flatten()
        .find_map(|e| {
            let name = e.file_name().to_str()?.to_string();
            let start = read(e.path().join("start"))?;
            let size = read(e.path().join("size"))?;
            (name.starts_with(disk) && start * 512 == offset && size * 512 == len).then_some(name)
        })
}

/// The source device of the mount at `dir` (from /proc/self/mountinfo).
fn mount_source(dir: &Path) -> Option<String> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let dir = dir.to_str()?;
    info.lines().rev().find_map(|l| {
        let fields: Vec<&str> = l.split(' ').collect();
        let sep = fields.iter().position(|f| *f == "-")?;
        (fields.get(4) == Some(&dir))
            .then(|| fields.get(sep + 2).map(|s| (*s).to_string()))
            .flatten()
    })
}

/// How often and how long a busy unmount is retried: 10 tries over ~10 s.
const UMOUNT_TRIES: u32 = 10;

/// Unmounts `dir` (umount(2)), retrying while it is busy (a transient
/// holder, see the module's notes); IPA retries its unmounts too. When it
/// stays busy the mount is detached lazily, so nothing stays visible, and
/// the last failure is returned: the caller's command fails naming it.
pub fn umount(dir: &Path) -> Result<(), UmountError> {
    use nix::errno::Errno;
    let mut attempt = 1;
    let failure = loop {
        match nix::mount::umount(dir) {
            Ok(()) => {
                if attempt > 1 {
                    tracing::info!(dir = %dir.display(), attempt, "unmounted after a retry");
                }
                return Ok(());
            }
            // Anything but busy (nothing mounted there: EINVAL) cannot
            // change by retrying.
            Err(e) if attempt >= UMOUNT_TRIES || e != Errno::EBUSY => break e,
            Err(e) => tracing::warn!(dir = %dir.display(), attempt, "umount: {e}"),
        }
        std::thread::sleep(std::time::Duration::from_millis(200 * u64::from(attempt)));
        attempt += 1;
    };
    if failure == Errno::EBUSY {
        if let Err(e) = nix::mount::umount2(dir, nix::mount::MntFlags::MNT_DETACH) {
            tracing::error!(dir = %dir.display(), "lazy unmount: {e}");
        }
    }
    Err(UmountError {
        dir: dir.to_path_buf(),
        source: failure,
    })
}

/// mount(2)'s flags for the options `opts` (`ro`, `rw`, `nodev`, `nosuid`,
/// `noexec`), and the rest joined as the filesystem's data.
fn mount_flags(opts: &str) -> (nix::mount::MsFlags, String) {
    use nix::mount::MsFlags;
    let mut flags = MsFlags::empty();
    let mut data = Vec::new();
    for o in opts.split(',').filter(|o| !o.is_empty()) {
        match o {
            "ro" => flags |= MsFlags::MS_RDONLY,
            "rw" => flags.remove(MsFlags::MS_RDONLY),
            "nodev" => flags |= MsFlags::MS_NODEV,
            "nosuid" => flags |= MsFlags::MS_NOSUID,
            "noexec" => flags |= MsFlags::MS_NOEXEC,
            other => data.push(other),
        }
    }
    (flags, data.join(","))
}

impl Drop for Mounted {
    fn drop(&mut self) {
        if self.active {
            if let Err(e) = self.release() {
                tracing::error!("{e}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::mount::MsFlags;

    #[test]
    fn options_become_flags_and_the_rest_is_data() {
        let (f, d) = mount_flags("ro,nodev,nosuid,noexec");
        assert_eq!(
            f,
            MsFlags::MS_RDONLY | MsFlags::MS_NODEV | MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC
        );
        assert_eq!(d, "");
        let (f, d) = mount_flags("rw");
        assert_eq!(f, MsFlags::empty());
        assert_eq!(d, "");
        let (f, d) = mount_flags("ro,umask=077,,shortname=mixed");
        assert_eq!(f, MsFlags::MS_RDONLY);
        assert_eq!(d, "umask=077,shortname=mixed");
    }
}
