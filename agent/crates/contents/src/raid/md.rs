//! The kernel's md driver, used directly: arrays created through
//! `/sys/module/md_mod/parameters/new_array`, assembled from members that
//! carry a version-1 superblock with the `SET_ARRAY_INFO`, `ADD_NEW_DISK`
//! and `RUN_ARRAY` ioctls (what `mdadm --assemble` does), stopped with
//! `STOP_ARRAY`, and described from sysfs (`/sys/block/mdN/md/…`,
//! `…/slaves`). Sysfs reads take a root path so they run on fixtures.
#![allow(unsafe_code)]

use std::fs::{self, File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

/// `mdu_array_info_t`.
#[repr(C)]
#[derive(Debug, Default)]
pub struct ArrayInfo {
    major_version: i32,
    minor_version: i32,
    patch_version: i32,
    ctime: u32,
    level: i32,
    size: i32,
    nr_disks: i32,
    raid_disks: i32,
    md_minor: i32,
    not_persistent: i32,
    utime: u32,
    state: i32,
    active_disks: i32,
    working_disks: i32,
    failed_disks: i32,
    spare_disks: i32,
    layout: i32,
    chunk_size: i32,
}

/// `mdu_disk_info_t`.
#[repr(C)]
#[derive(Debug, Default)]
pub struct DiskInfo {
    number: i32,
    major: i32,
    minor: i32,
    raid_disk: i32,
    state: i32,
}

/// `mdu_param_t` (ignored by the kernel for `RUN_ARRAY`).
#[repr(C)]
#[derive(Debug, Default)]
pub struct Param {
    personality: i32,
    chunk_size: i32,
    max_fault: i32,
}

const MD_MAJOR: u8 = 9;
nix::ioctl_write_ptr!(set_array_info, MD_MAJOR, 0x23, ArrayInfo);
nix::ioctl_write_ptr!(add_new_disk, MD_MAJOR, 0x21, DiskInfo);
nix::ioctl_write_ptr!(run_array, MD_MAJOR, 0x30, Param);
nix::ioctl_none!(stop_array, MD_MAJOR, 0x32);

/// How long a new md device node gets to appear.
const NODE_WAIT: Duration = Duration::from_secs(5);

/// Whether the running kernel has the md driver (`/sys/module/md_mod` or
/// `/proc/mdstat`).
pub fn available(root: &Path) -> bool {
    root.join("sys/module/md_mod").exists() || root.join("proc/mdstat").exists()
}

/// The RAID personalities the kernel has loaded (`raid1`, `raid10`,
/// `raid6`, …), from `/proc/mdstat`'s first line.
pub fn personalities(mdstat: &str) -> Vec<String> {
    mdstat
        .lines()
        .find_map(|l| l.strip_prefix("Personalities :"))
        .map(|rest| {
            rest.split_whitespace()
                .map(|p| p.trim_matches(|c| c == '[' || c == ']').to_string())
                .collect()
        })
        .unwrap_or_default()
}

/// One md device as sysfs shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Array {
    /// `md0`.
    pub name: String,
    /// `raid1`, … (empty while inactive).
    pub level: String,
    /// `clean`, `active`, `inactive`, `clear`, …
    pub state: String,
    /// Member kernel names (`vda2`).
    pub members: Vec<String>,
    /// Size in bytes.
    pub size: u64,
}

fn attr(p: PathBuf) -> String {
    fs::read_to_string(p)
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// Every md device under `root/sys/block` (partitions of md devices are not
/// arrays and are not listed), sorted by name.
pub fn arrays(root: &Path) -> Vec<Array> {
    let dir = root.join("sys/block");
    let Ok(entries) = fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut out: Vec<Array> = entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let md = dir.join(&name).join("md");
            if !name.starts_with("md") || !md.is_dir() {
                return None;
            }
            let mut members: Vec<String> = fs::read_dir(dir.join(&name).join("slaves"))
                .map(|rd| {
                    rd.flatten()
                        .map(|s| s.file_name().to_string_lossy().into_owned())
                        .collect()
                })
                .unwrap_or_default();
            members.sort();
            Some(Array {
                level: attr(md.join("level")),
                state: attr(md.join("array_state")),
                size: attr(dir.join(&name).join("size"))
                    .parse::<u64>()
                    .unwrap_or(0)
                    * 512,
                members,
                name,
            })
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

/// The array's name from its superblock as md reports it
/// (`/sys/block/mdN/md/array_name` is not universal; the caller keeps names
/// from superblocks instead), here only whether the device is in use.
pub fn in_use(a: &Array) -> bool {
    !a.members.is_empty() || !matches!(a.state.as_str(), "" | "clear" | "inactive")
}

/// Makes `/dev/mdN` exist (a new, empty md device) and returns its path.
pub fn new_device(index: usize) -> Result<PathBuf> {
    let name = format!("md{index}");
    let sys = Path::new("/sys/block").join(&name);
    if !sys.exists() {
        // EEXIST (another creator raced us) is checked through sysfs below.
        let _ = fs::write("/sys/module/md_mod/parameters/new_array", &name);
    }
    if let Some(a) = arrays(Path::new("/")).into_iter().find(|a| a.name == name) {
        if in_use(&a) {
            bail!(
                "/dev/{name} is in use (state {:?}, members {:?}); run delete_configuration first",
                a.state,
                a.members
            );
        }
    } else {
        bail!("the kernel made no /sys/block/{name} (md driver missing?)");
    }
    let dev = Path::new("/dev").join(&name);
    let started = Instant::now();
    while !dev.exists() {
        if started.elapsed() > NODE_WAIT {
            bail!(
                "{} did not appear within {} s",
                dev.display(),
                NODE_WAIT.as_secs()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(dev)
}

fn open_md(md: &Path) -> Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .open(md)
        .with_context(|| format!("opening {}", md.display()))
}

/// Assembles and starts `md` from `members`, each carrying a version-1.`minor`
/// superblock of the same array.
pub fn assemble(md: &Path, minor: i32, members: &[PathBuf]) -> Result<()> {
    let f = open_md(md)?;
    let info = ArrayInfo {
        major_version: 1,
        minor_version: minor,
        ..ArrayInfo::default()
    };
    // SAFETY: valid fd; the kernel copies one mdu_array_info_t from `info`.
    unsafe { set_array_info(f.as_raw_fd(), &info) }
        .map_err(std::io::Error::from)
        .with_context(|| format!("SET_ARRAY_INFO (metadata 1.{minor}) on {}", md.display()))?;
    for (i, m) in members.iter().enumerate() {
        let meta = fs::metadata(m).with_context(|| format!("examining {}", m.display()))?;
        let rdev = meta.rdev();
        let d = DiskInfo {
            number: i as i32,
            major: nix::sys::stat::major(rdev) as i32,
            minor: nix::sys::stat::minor(rdev) as i32,
            raid_disk: i as i32,
            state: 0,
        };
        // SAFETY: valid fd; the kernel copies one mdu_disk_info_t from `d`.
        if let Err(e) = unsafe { add_new_disk(f.as_raw_fd(), &d) } {
            let err = anyhow::Error::from(std::io::Error::from(e))
                .context(format!("adding {} to {} (ADD_NEW_DISK; the kernel log says why it rejected the superblock)", m.display(), md.display()));
            let _ = stop(md);
            return Err(err);
        }
    }
    // SAFETY: valid fd; the kernel ignores the argument of RUN_ARRAY.
    if let Err(e) = unsafe { run_array(f.as_raw_fd(), &Param::default()) } {
        let err = anyhow::Error::from(std::io::Error::from(e))
            .context(format!("starting {} (RUN_ARRAY)", md.display()));
        let _ = stop(md);
        return Err(err);
    }
    Ok(())
}

/// Stops `md` (its members are released; their superblocks stay).
pub fn stop(md: &Path) -> Result<()> {
    let f = open_md(md)?;
    // SAFETY: valid fd; STOP_ARRAY takes no argument.
    unsafe { stop_array(f.as_raw_fd()) }
        .map_err(std::io::Error::from)
        .with_context(|| format!("stopping {} (STOP_ARRAY)", md.display()))?;
    Ok(())
}

/// The disks under array `name` (`md0`), from `root/sys`: for each member
/// (`/sys/block/md0/slaves/*`) the disk it is a partition of, or the
/// member itself when it is a whole disk; sorted, as `/dev` paths.
pub fn member_disks(root: &Path, name: &str) -> Vec<PathBuf> {
    let Some(array) = arrays(root).into_iter().find(|a| a.name == name) else {
        return Vec::new();
    };
    let mut disks: Vec<PathBuf> = array
        .members
        .iter()
        .map(|m| {
            let class = root.join("sys/class/block").join(m);
            let disk = fs::canonicalize(&class)
                .ok()
                .filter(|p| p.join("partition").exists())
                .and_then(|p| {
                    p.parent()
                        .and_then(|d| d.file_name())
                        .map(|n| n.to_string_lossy().into_owned())
                })
                .or_else(|| agent_devices::disk::multipath::partition_of(root, m).map(|(d, _)| d))
                .unwrap_or_else(|| m.clone());
            Path::new("/dev").join(disk)
        })
        .collect();
    disks.sort();
    disks.dedup();
    disks
}
