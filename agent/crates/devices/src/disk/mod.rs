//! Block devices: which ones exist, and which ones the agent may write.
//!
//! Safety policy (hard rule): a device that is mounted, used as swap, held by
//! another device (device-mapper, md) or that holds the running system is
//! never written. Outside the deploy ramdisk, only devices named with
//! `--allow-device` (and their partitions) may be written at all.

pub mod busy;
pub(crate) mod dm;
pub mod erase;
pub mod flush;
pub mod fullerase;
pub mod gpt;
pub mod ioctl;
pub mod multipath;
pub(crate) mod nvme_admin;
pub mod probe;
pub mod table;

use std::fs;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use agent_base::config::{Config, RunMode};

/// A block device (or, in tests, a regular file standing in for one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Device {
    /// Path used to open it (`/dev/sda`, `/dev/loop3p1`).
    pub path: PathBuf,
    /// `major:minor` for block devices, `None` for regular files.
    pub devno: Option<(u64, u64)>,
}

/// Why a device may not be written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// Host mode and the device was not allowed explicitly.
    #[error("{0} was not given with --allow-device; outside the deploy ramdisk only allowed devices are written")]
    NotAllowed(String),
    /// The agent's container on a host that is not a CoreOS live system,
    /// and the device was not allowed explicitly.
    #[error("{0} was not given with --allow-device, and the host is not a CoreOS live system ({1} is missing): the container writes only allowed devices there")]
    NotLive(String, String),
    /// Mounted (itself or a partition).
    #[error("{0} is mounted at {1}")]
    Mounted(String, String),
    /// Used as swap.
    #[error("{0} is in use as swap")]
    Swap(String),
    /// Held by another device.
    #[error("{0} is held by {1} (device-mapper, RAID or similar)")]
    Held(String, String),
    /// Neither a block device nor (in host mode) an allowed regular file.
    #[error("{0} is not a block device")]
    NotBlockDevice(String),
    /// Could not be examined.
    #[error("{0} cannot be examined: {1}")]
    Unreadable(String, String),
}

impl Device {
    /// Examines `path`.
    pub fn open(path: &Path) -> Result<Self, Refusal> {
        let display = path.display().to_string();
        let meta =
            fs::metadata(path).map_err(|e| Refusal::Unreadable(display.clone(), e.to_string()))?;
        let devno = if meta.file_type().is_block_device() {
            let rdev = meta.rdev();
            Some((libc_major(rdev), libc_minor(rdev)))
        } else if meta.file_type().is_file() {
            None
        } else {
            return Err(Refusal::NotBlockDevice(display));
        };
        Ok(Self {
            path: path.to_path_buf(),
            devno,
        })
    }

    /// Kernel name (`sda`, `loop3p1`), from sysfs for block devices.
    pub fn kernel_name(&self) -> Option<String> {
        kernel_name_of(Path::new("/"), self.devno?)
    }

    /// Partitions of this (whole) device, as devices, found through sysfs;
    /// for a multipath device, its partition maps (`/dev/dm-N`).
    pub fn partitions(&self) -> Vec<Device> {
        let Some(name) = self.kernel_name() else {
            return Vec::new();
        };
        if name.starts_with("dm-") {
            return multipath::partition_maps(Path::new("/"), &name)
                .into_iter()
                .filter_map(|(_, k)| Device::open(&Path::new("/dev").join(k)).ok())
                .collect();
        }
        let Ok(entries) = fs::read_dir(format!("/sys/class/block/{name}")) else {
            return Vec::new();
        };
        let mut parts: Vec<Device> = entries
            .flatten()
            .filter(|e| e.path().join("partition").exists())
            .filter_map(|e| {
                let pname = e.file_name().to_string_lossy().into_owned();
                Device::open(&Path::new("/dev").join(&pname)).ok()
            })
            .collect();
        parts.sort_by(|a, b| a.path.cmp(&b.path));
        parts
    }
}

fn libc_major(rdev: u64) -> u64 {
    nix::sys::stat::major(rdev)
}

fn libc_minor(rdev: u64) -> u64 {
    nix::sys::stat::minor(rdev)
}

/// Decides whether the agent may write a device.
#[derive(Debug, Clone)]
pub struct WritePolicy {
    mode: RunMode,
    allowed: Vec<PathBuf>,
    proc_root: PathBuf,
    /// In the agent's container, the host's root: its mounts (those of the
    /// host's PID 1, `proc/1/mountinfo` under it) are checked as well as
    /// the container's own, and its live marker named in refusals.
    host_root: Option<PathBuf>,
}

/// The kernel names (`loop3`) of the allowed devices that exist: in host
/// mode they are listed with the machine's disks.
pub fn allowed_kernel_names(config: &Config) -> Vec<String> {
    config
        .allowed_devices
        .iter()
        .filter_map(|p| fs::canonicalize(p).ok())
        .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .collect()
}

/// The machine's whole disks as the inventory describes them (as steps
/// and managers see them); in host mode the allowed devices (loop
/// devices, say) are listed too, and only they are kept.
pub fn machine_disks(config: &Config) -> Result<Vec<crate::inventory::Disk>> {
    let extra = allowed_kernel_names(config);
    let mut disks = crate::inventory::disks::read(Path::new("/"), &extra)?;
    if config.mode == RunMode::Host {
        let allowed = WritePolicy::from_config(config).allowed().to_vec();
        disks.retain(|d| allowed.iter().any(|a| a.as_os_str() == d.name.as_str()));
    }
    Ok(disks)
}

impl WritePolicy {
    /// The policy of a configuration (reading `/proc`).
    pub fn from_config(config: &Config) -> Self {
        Self {
            mode: config.mode,
            allowed: config
                .allowed_devices
                .iter()
                .map(|p| fs::canonicalize(p).unwrap_or_else(|_| p.clone()))
                .collect(),
            proc_root: PathBuf::from("/proc"),
            host_root: config.host_root.clone(),
        }
    }

    /// The devices the policy allows explicitly (host mode).
    pub fn allowed(&self) -> &[PathBuf] {
        &self.allowed
    }

    /// Checks that `dev` may be written now.
    pub fn check(&self, dev: &Device) -> Result<(), Refusal> {
        let display = dev.path.display().to_string();
        if self.mode == RunMode::Host && !self.is_allowed(dev) {
            return Err(match &self.host_root {
                Some(h) => Refusal::NotLive(
                    display,
                    h.join(agent_base::config::container::LIVE_MARKER)
                        .display()
                        .to_string(),
                ),
                None => Refusal::NotAllowed(display),
            });
        }
        let Some(devno) = dev.devno else {
            // Regular files stand in for disks only in host mode tests.
            return if self.mode == RunMode::Host {
                Ok(())
            } else {
                Err(Refusal::NotBlockDevice(display))
            };
        };
        let mut family = vec![devno];
        family.extend(dev.partitions().iter().filter_map(|p| p.devno));
        let mountinfo = fs::read_to_string(self.proc_root.join("self/mountinfo"))
            .map_err(|e| Refusal::Unreadable("/proc/self/mountinfo".into(), e.to_string()))?;
        if let Some(mnt) = mounted_at(&mountinfo, &family) {
            return Err(Refusal::Mounted(display, mnt));
        }
        if let Some(host) = &self.host_root {
            mounted_on_host(host, &family).map_err(|e| match e {
                Refusal::Mounted(_, at) => Refusal::Mounted(display.clone(), at),
                other => other,
            })?;
        }
        let swaps = fs::read_to_string(self.proc_root.join("swaps")).unwrap_or_default();
        for line in swaps.lines().skip(1) {
            let Some(path) = line.split_whitespace().next() else {
                continue;
            };
            if let Ok(meta) = fs::metadata(path) {
                let rdev = meta.rdev();
                if meta.file_type().is_block_device()
                    && family.contains(&(libc_major(rdev), libc_minor(rdev)))
                {
                    return Err(Refusal::Swap(display));
                }
            }
        }
        for (ma, mi) in &family {
            let holders = format!("/sys/dev/block/{ma}:{mi}/holders");
            let Ok(entries) = fs::read_dir(&holders) else {
                continue;
            };
            for h in entries.flatten() {
                // A multipath device's partition maps hold it; they are
                // its partitions (in `family`), checked themselves.
                let own = fs::read_to_string(h.path().join("dev"))
                    .ok()
                    .and_then(|d| {
                        let (a, b) = d.trim().split_once(':')?;
                        Some((a.parse().ok()?, b.parse().ok()?))
                    })
                    .is_some_and(|d| family.contains(&d));
                if !own {
                    return Err(Refusal::Held(
                        display,
                        h.file_name().to_string_lossy().into_owned(),
                    ));
                }
            }
        }
        Ok(())
    }

    fn is_allowed(&self, dev: &Device) -> bool {
        let canon = fs::canonicalize(&dev.path).unwrap_or_else(|_| dev.path.clone());
        if self.allowed.contains(&canon) {
            return true;
        }
        // A partition of an allowed disk is allowed.
        self.allowed.iter().any(|a| {
            Device::open(a)
                .map(|d| {
                    d.partitions()
                        .iter()
                        .any(|p| p.devno.is_some() && p.devno == dev.devno)
                })
                .unwrap_or(false)
        })
    }
}

/// Refuses `family` (a device's and its partitions' numbers) when the
/// host whose root is `host_root` has one of them mounted: the agent's
/// container sees the host's mounts made after it started only through
/// the host's own `/proc`, bound under the host root, whose PID 1 is the
/// host's init. An unreadable mount table is a refusal too.
fn mounted_on_host(host_root: &Path, family: &[(u64, u64)]) -> Result<(), Refusal> {
    let path = host_root.join("proc/1/mountinfo");
    let text = fs::read_to_string(&path)
        .map_err(|e| Refusal::Unreadable(path.display().to_string(), e.to_string()))?;
    match mounted_at(&text, family) {
        Some(mnt) => Err(Refusal::Mounted(
            String::new(),
            format!("{mnt} on the host"),
        )),
        None => Ok(()),
    }
}

/// Finds a mount of any of `devnos` in `/proc/self/mountinfo` text; returns
/// its mount point.
pub fn mounted_at(mountinfo: &str, devnos: &[(u64, u64)]) -> Option<String> {
    mountinfo.lines().find_map(|line| {
        let mut f = line.split_whitespace();
        let (_id, _parent, devno, _root, mnt) =
            (f.next()?, f.next()?, f.next()?, f.next()?, f.next()?);
        let (ma, mi) = devno.split_once(':')?;
        let d = (ma.parse().ok()?, mi.parse().ok()?);
        devnos.contains(&d).then(|| mnt.to_string())
    })
}

/// Whole disks that may hold an OS, from `/sys/block` under `sys_root`:
/// everything but loop, ram, zram, floppies, optical drives and
/// device-mapper/md virtual devices, except that a multipath device is
/// listed (`/dev/dm-N`) in place of its paths, which are left out.
pub fn whole_disks(sys_root: &Path) -> Result<Vec<PathBuf>> {
    let dir = sys_root.join("block");
    let root = sys_root.parent().unwrap_or(Path::new("/"));
    let mut out = Vec::new();
    for e in fs::read_dir(&dir).with_context(|| format!("listing {}", dir.display()))? {
        let name = e?.file_name().to_string_lossy().into_owned();
        const SKIP: [&str; 7] = ["loop", "ram", "zram", "fd", "sr", "dm-", "md"];
        if name.starts_with("dm-") && multipath::multipath(root, &name).is_some() {
            out.push(PathBuf::from("/dev").join(name));
            continue;
        }
        if SKIP.iter().any(|p| name.starts_with(p)) {
            continue;
        }
        if let Some(m) = multipath::holder(root, &name) {
            tracing::debug!(disk = %name, multipath = %m, "a path of a multipath device: left out");
            continue;
        }
        out.push(PathBuf::from("/dev").join(name));
    }
    out.sort();
    Ok(out)
}

/// Whole disks the erase steps may touch: the allowed devices in host mode,
/// every whole disk in the ramdisk.
pub fn erasable_disks(policy: &WritePolicy) -> Result<Vec<PathBuf>> {
    match policy.mode {
        RunMode::Host => match &policy.host_root {
            // The agent's container on a host that is not live: refuse
            // rather than erase nothing and report success.
            Some(h) if policy.allowed.is_empty() => anyhow::bail!(
                "the host is not a CoreOS live system ({} is missing): the agent's container writes no disk there unless one is given with --allow-device",
                h.join(agent_base::config::container::LIVE_MARKER).display()
            ),
            _ => Ok(policy.allowed.clone()),
        },
        RunMode::Ramdisk | RunMode::Container => whole_disks(Path::new("/sys")),
    }
}

/// Running md devices under `sys_root/block` (`md0`, not their partitions;
/// a stopped or empty one has size 0 and is left out, as IPA's `lsblk`
/// listing leaves out empty devices), sorted by name.
pub fn md_devices(sys_root: &Path) -> Vec<PathBuf> {
    let Ok(entries) = fs::read_dir(sys_root.join("block")) else {
        return Vec::new();
    };
    let mut out: Vec<PathBuf> = entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let size: u64 = fs::read_to_string(e.path().join("size"))
                .ok()?
                .trim()
                .parse()
                .ok()?;
            (name.starts_with("md") && e.path().join("md").is_dir() && size > 0)
                .then(|| PathBuf::from("/dev").join(name))
        })
        .collect();
    out.sort();
    out
}

/// What the erase steps consider in the deploy ramdisk, as IPA 13's
/// `list_block_devices` lists them: the whole disks and the running md
/// devices (`lsblk` reports arrays as disks of type `raid1` …). In host
/// mode only the allowed devices.
pub fn erasable_devices(policy: &WritePolicy) -> Result<Vec<PathBuf>> {
    let mut out = erasable_disks(policy)?;
    if matches!(policy.mode, RunMode::Ramdisk | RunMode::Container) {
        out.extend(md_devices(Path::new("/sys")));
    }
    Ok(out)
}

/// Devices the erase steps consider: `disks` (from [`erasable_disks`], less
/// the node's `skip_block_devices`), each preceded by its partitions.
/// Disks by name descending, each disk's partitions descending before it
/// (as IPA does; for `sd*` and `nvme*` names the same order as sorting
/// all by name, and a multipath device's partition maps, `dm-N` too, stay
/// with their disk whatever their numbers).
pub fn erase_candidates(disks: &[PathBuf]) -> Result<Vec<Device>> {
    let mut sorted: Vec<&PathBuf> = disks.iter().collect();
    sorted.sort_by(|a, b| b.cmp(a));
    let mut out: Vec<Device> = Vec::new();
    for d in sorted {
        let dev = Device::open(d).with_context(|| format!("examining {}", d.display()))?;
        let mut parts = dev.partitions();
        parts.sort_by(|a, b| b.path.cmp(&a.path));
        for p in parts.into_iter().chain([dev]) {
            if !out.contains(&p) {
                out.push(p);
            }
        }
    }
    Ok(out)
}

/// The kernel name of block device `major:minor` under `root` (`/` on the
/// machine), from its `sys/dev/block` link; `None` when it does not exist.
pub fn kernel_name_of(root: &Path, (major, minor): (u64, u64)) -> Option<String> {
    let link = fs::read_link(root.join(format!("sys/dev/block/{major}:{minor}"))).ok()?;
    Some(link.file_name()?.to_string_lossy().into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTINFO: &str = "\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
23 22 0:21 / /proc rw - proc proc rw
40 22 7:3 / /mnt/data rw - ext4 /dev/loop3 rw
";

    #[test]
    fn finds_mounts_by_device_number() {
        assert_eq!(mounted_at(MOUNTINFO, &[(8, 0), (8, 1)]), Some("/".into()));
        assert_eq!(mounted_at(MOUNTINFO, &[(7, 3)]), Some("/mnt/data".into()));
        assert_eq!(mounted_at(MOUNTINFO, &[(7, 4)]), None);
    }

    #[test]
    fn md_devices_are_the_running_arrays() {
        let dir = tempfile::tempdir().unwrap();
        let block = dir.path().join("block");
        for (name, size, md) in [
            ("md0", "2097152", true),
            ("md1", "0", true),
            ("md127", "1024", true),
            ("sda", "4096", false),
            ("mdx", "4096", false),
        ] {
            fs::create_dir_all(block.join(name)).unwrap();
            fs::write(block.join(name).join("size"), size).unwrap();
            if md {
                fs::create_dir(block.join(name).join("md")).unwrap();
            }
        }
        assert_eq!(
            md_devices(dir.path()),
            [PathBuf::from("/dev/md0"), PathBuf::from("/dev/md127")]
        );
    }

    #[test]
    fn whole_disks_list_a_multipath_device_in_place_of_its_paths() {
        let dir = tempfile::tempdir().unwrap();
        let block = dir.path().join("sys/block");
        for name in ["sda", "sdb", "sdc", "dm-0", "dm-1", "loop0"] {
            fs::create_dir_all(block.join(name).join("holders")).unwrap();
        }
        fs::create_dir_all(block.join("dm-0/dm")).unwrap();
        fs::write(block.join("dm-0/dm/uuid"), "mpath-naa.5000c50015ea71ad").unwrap();
        fs::create_dir_all(block.join("dm-1/dm")).unwrap();
        fs::write(
            block.join("dm-1/dm/uuid"),
            "part1-mpath-naa.5000c50015ea71ad",
        )
        .unwrap();
        for s in ["sdb", "sdc"] {
            fs::create_dir(block.join(s).join("holders/dm-0")).unwrap();
        }
        assert_eq!(
            whole_disks(&dir.path().join("sys")).unwrap(),
            [PathBuf::from("/dev/dm-0"), PathBuf::from("/dev/sda")]
        );
    }

    #[test]
    fn host_mode_refuses_devices_not_allowed() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("disk.img");
        fs::write(&f, [0u8; 4096]).unwrap();
        let dev = Device::open(&f).unwrap();
        let mut config = Config::default();
        let policy = WritePolicy::from_config(&config);
        let err = policy.check(&dev).unwrap_err();
        assert!(matches!(err, Refusal::NotAllowed(_)), "{err}");
        assert!(err.to_string().contains("--allow-device"));
        config.allowed_devices = vec![f.clone()];
        WritePolicy::from_config(&config).check(&dev).unwrap();
    }

    #[test]
    fn the_container_on_a_host_that_is_not_live_names_the_missing_marker() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("disk.img");
        fs::write(&f, [0u8; 4096]).unwrap();
        let config = Config {
            host_root: Some(dir.path().join("host")),
            ..Config::default()
        };
        let err = WritePolicy::from_config(&config)
            .check(&Device::open(&f).unwrap())
            .unwrap_err();
        assert!(matches!(err, Refusal::NotLive(..)), "{err}");
        assert!(
            err.to_string().contains("host/run/ostree-live is missing"),
            "{err}"
        );
        // The erase steps refuse too, rather than erase nothing.
        let e = erasable_disks(&WritePolicy::from_config(&config)).unwrap_err();
        assert!(e.to_string().contains("not a CoreOS live system"), "{e}");
        let allowed = Config {
            allowed_devices: vec![f.clone()],
            ..config
        };
        assert_eq!(
            erasable_disks(&WritePolicy::from_config(&allowed)).unwrap(),
            [f]
        );
    }

    #[test]
    fn a_disk_the_host_has_mounted_is_refused_and_an_unreadable_table_too() {
        let host = tempfile::tempdir().unwrap();
        let e = mounted_on_host(host.path(), &[(253, 0)]).unwrap_err();
        assert!(matches!(e, Refusal::Unreadable(..)), "{e}");
        fs::create_dir_all(host.path().join("proc/1")).unwrap();
        // The host's table as CoreOS's live ISO has it: the ISO on sr0,
        // a disk's partition mounted by the operator.
        fs::write(
            host.path().join("proc/1/mountinfo"),
            "1 0 0:31 / / rw - overlay overlay rw
             40 1 11:0 / /run/media/iso ro - iso9660 /dev/sr0 ro
             52 1 253:3 / /var/mnt rw - xfs /dev/vda3 rw
",
        )
        .unwrap();
        let e = mounted_on_host(host.path(), &[(253, 0), (253, 3)]).unwrap_err();
        assert!(e.to_string().contains("/var/mnt on the host"), "{e}");
        assert!(
            mounted_on_host(host.path(), &[(11, 0)]).is_err(),
            "the live ISO"
        );
        mounted_on_host(host.path(), &[(253, 16), (253, 17)]).unwrap();
    }

    #[test]
    fn ramdisk_mode_refuses_regular_files() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("disk.img");
        fs::write(&f, [0u8; 512]).unwrap();
        let config = Config {
            mode: RunMode::Ramdisk,
            ..Config::default()
        };
        let err = WritePolicy::from_config(&config)
            .check(&Device::open(&f).unwrap())
            .unwrap_err();
        assert!(matches!(err, Refusal::NotBlockDevice(_)));
    }

    #[test]
    fn the_root_filesystem_device_is_refused_even_when_allowed() {
        // Whatever holds "/" here is mounted: allowing it must not help.
        let mountinfo = fs::read_to_string("/proc/self/mountinfo").unwrap();
        let root = mountinfo
            .lines()
            .find(|l| l.split_whitespace().nth(4) == Some("/"))
            .unwrap();
        let source = root
            .split(" - ")
            .nth(1)
            .unwrap()
            .split_whitespace()
            .nth(1)
            .unwrap();
        if !source.starts_with("/dev/") || !Path::new(source).exists() {
            eprintln!("root is {source}, not a block device here; nothing to check");
            return;
        }
        let config = Config {
            allowed_devices: vec![PathBuf::from(source)],
            ..Config::default()
        };
        let err = WritePolicy::from_config(&config)
            .check(&Device::open(Path::new(source)).unwrap())
            .unwrap_err();
        assert!(matches!(err, Refusal::Mounted(..)), "{err}");
    }
}
