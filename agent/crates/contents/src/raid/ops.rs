//! Building and removing software RAID on the machine's disks: [`create`]
//! lays out every member ([`super::plan`]), writes the superblocks
//! ([`super::superblock`]) and starts the arrays ([`super::md`]), undoing
//! everything it did when any part fails; [`delete`] stops every array and
//! removes every md superblock and the partition tables of the disks that
//! held one; [`assemble_existing`] starts the arrays found on the disks, as
//! udev and `mdadm --incremental` do in IPA's ramdisk.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};

use super::md;
use super::plan::{Plan, PlannedArray, DATA_OFFSET_SECTORS};
use super::superblock::{self, ArrayInfo, MemberInfo};
use agent_devices::disk::{ioctl, Device, WritePolicy};

/// Name of the mirrored ESP array (IPA's `--name esp`).
pub const ESP_NAME: &str = "esp";

/// What [`create`] built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Built {
    /// `(md device, name, member partitions)` of each array.
    pub arrays: Vec<(PathBuf, String, Vec<PathBuf>)>,
    /// The root volume's device (`is_root_volume`, else the first).
    pub root: Option<PathBuf>,
    /// The arrays whose logical disk set `is_root_volume`, in order.
    pub root_marks: Vec<RootMark>,
}

/// An array whose logical disk set `is_root_volume`, as IPA 13 keeps it
/// (`_raid_root_device_mapping`) for the root-device choice of a deploy in
/// the same boot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RootMark {
    /// The md device.
    pub device: PathBuf,
    /// `true`: the deploy's root device; `false`: never the root device,
    /// nor are its member disks and partitions.
    pub root: bool,
    /// Its member partitions.
    pub members: Vec<PathBuf>,
    /// The disks holding them.
    pub disks: Vec<PathBuf>,
}

fn size_of(path: &Path) -> Result<u64> {
    let f = File::open(path).with_context(|| format!("opening {}", path.display()))?;
    ioctl::size_bytes(&f).with_context(|| format!("reading the size of {}", path.display()))
}

/// Zeroes every md superblock (1.0, 1.1, 1.2 and 0.90) on `path`; returns
/// how many were found.
pub fn zero_superblocks(path: &Path) -> Result<usize> {
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .with_context(|| format!("opening {}", path.display()))?;
    let bytes = ioctl::size_bytes(&f).or_else(|_| f.metadata().map(|m| m.len()))?;
    zero_in(&f, path, 0, bytes)
}

/// Zeroes the md superblocks of the range `[base, base + len)` of the open
/// device `f` (a whole device, or a partition read from its table).
fn zero_in(f: &File, path: &Path, base: u64, len: u64) -> Result<usize> {
    let mut found = 0;
    for at in candidates(len) {
        let mut magic = [0u8; 4];
        if f.read_exact_at(&mut magic, base + at).is_err() {
            continue;
        }
        if u32::from_le_bytes(magic) == superblock::MAGIC {
            f.write_all_at(&[0u8; 4096], base + at).with_context(|| {
                format!(
                    "zeroing the md superblock at byte {} of {}",
                    base + at,
                    path.display()
                )
            })?;
            found += 1;
        }
    }
    f.sync_all()
        .with_context(|| format!("flushing {}", path.display()))?;
    Ok(found)
}

/// Zeroes the md superblocks inside every partition of `disk`'s table, read
/// from the disk itself (the kernel may not know the partitions).
fn zero_in_table(disk: &Path) -> Result<usize> {
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(disk)
        .with_context(|| format!("opening {}", disk.display()))?;
    let sector = ioctl::logical_sector_size(&f).map_or(512, u64::from);
    let Ok(Some(t)) = agent_devices::disk::table::read(&f, sector) else {
        return Ok(0);
    };
    let mut found = 0;
    for p in &t.parts {
        found += zero_in(&f, disk, p.start, p.len)?;
    }
    Ok(found)
}

/// Byte offsets where an md superblock may start on a device of `bytes`.
pub fn candidates(bytes: u64) -> Vec<u64> {
    let mut v: Vec<u64> = superblock::offsets(bytes / 512)
        .iter()
        .map(|s| s * 512)
        .collect();
    v.extend(superblock::v090_offset(bytes));
    v.retain(|&o| o + 4096 <= bytes);
    v.sort_unstable();
    v.dedup();
    v
}

/// The version-1 superblock on `path`, if any: `(minor version, contents)`.
pub fn examine(path: &Path) -> Option<(i32, superblock::Found)> {
    let (f, bytes) = open_sized(path)?;
    let offsets = superblock::offsets(bytes / 512);
    for (minor, sector) in offsets.iter().enumerate() {
        let mut b = vec![0u8; 4096];
        if f.read_exact_at(&mut b, sector * 512).is_err() {
            continue;
        }
        if let Some(found) = superblock::decode(&b, *sector) {
            return Some((minor as i32, found));
        }
    }
    None
}

/// `path` carries a version-0.90 superblock at its end ([`superblock::is_v090`]).
pub fn has_v090(path: &Path) -> bool {
    let Some((f, at)) =
        open_sized(path).and_then(|(f, bytes)| Some((f, superblock::v090_offset(bytes)?)))
    else {
        return false;
    };
    let mut b = [0u8; 12];
    f.read_exact_at(&mut b, at).is_ok() && superblock::is_v090(&b)
}

/// `path` opened for reading, with its size (a block device's or a file's).
fn open_sized(path: &Path) -> Option<(File, u64)> {
    let f = File::open(path).ok()?;
    let bytes = ioctl::size_bytes(&f)
        .or_else(|_| f.metadata().map(|m| m.len()))
        .ok()?;
    Some((f, bytes))
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// A new array's shape, for [`write_superblocks`].
#[derive(Clone, Copy)]
struct Shape<'a> {
    name: &'a str,
    level: u32,
    layout: u32,
    chunk: u32,
    redundant: bool,
    /// Superblock minor version: 2 (at 4 KiB, data from 1 MiB) or 0 (at
    /// the end, data from 0, for an ESP firmware reads as plain FAT).
    minor: i32,
}

/// Writes a new array's superblocks on `members` (each gets `data_sectors`
/// of data).
fn write_superblocks(shape: &Shape<'_>, members: &[PathBuf], data_sectors: u64) -> Result<()> {
    let Shape {
        name,
        level,
        layout,
        chunk,
        redundant,
        minor,
    } = *shape;
    let array = ArrayInfo {
        uuid: *uuid::Uuid::new_v4().as_bytes(),
        name: name.to_string(),
        ctime: now(),
        level,
        layout,
        chunk_sectors: chunk,
        raid_disks: members.len() as u32,
        size: data_sectors,
        resync_offset: if redundant { 0 } else { superblock::IN_SYNC },
    };
    for (role, m) in members.iter().enumerate() {
        let sectors = size_of(m)? / 512;
        let (super_offset, data_offset, data_size) = if minor == 2 {
            (
                8,
                DATA_OFFSET_SECTORS,
                sectors.saturating_sub(DATA_OFFSET_SECTORS),
            )
        } else {
            let sb = superblock::offsets(sectors)[0];
            (sb, 0, sb)
        };
        if data_size < data_sectors {
            bail!(
                "{} holds {data_size} sectors of data, the array needs {data_sectors}",
                m.display()
            );
        }
        zero_superblocks(m)?;
        let sb = superblock::encode(
            &array,
            &MemberInfo {
                role: role as u32,
                uuid: *uuid::Uuid::new_v4().as_bytes(),
                data_offset,
                data_size,
                super_offset,
            },
        );
        let f = OpenOptions::new()
            .write(true)
            .open(m)
            .with_context(|| format!("opening {}", m.display()))?;
        f.write_all_at(&sb, super_offset * 512)
            .with_context(|| format!("writing the md superblock of {}", m.display()))?;
        f.sync_all()
            .with_context(|| format!("flushing {}", m.display()))?;
    }
    Ok(())
}

/// Checks everything [`create`] needs before it writes anything: the md
/// driver and each level's personality, free md device numbers, and every
/// member writable and without partitions (IPA: "Partitions detected on
/// devices … during RAID config").
pub fn preflight(plan: &Plan, policy: &WritePolicy, esp: bool) -> Result<()> {
    if !md::available(Path::new("/")) {
        bail!("the running kernel has no md (software RAID) driver: /sys/module/md_mod and /proc/mdstat are missing");
    }
    let mdstat = std::fs::read_to_string("/proc/mdstat").unwrap_or_default();
    let have = md::personalities(&mdstat);
    let mut levels: Vec<&str> = plan.arrays.iter().map(|a| a.level.md_name()).collect();
    if esp {
        levels.push("raid1");
    }
    for l in levels {
        // raid456 registers raid4, raid5 and raid6.
        if !have.iter().any(|h| h == l) {
            bail!(
                "the kernel has no {l} personality (module {} not loaded; loaded: {})",
                super::config::Level::parse(match l {
                    "raid0" => "0",
                    "raid1" => "1",
                    "raid10" => "1+0",
                    "raid5" => "5",
                    _ => "6",
                })
                .map(|l| l.module())
                .unwrap_or("?"),
                if have.is_empty() {
                    "none".to_string()
                } else {
                    have.join(" ")
                }
            );
        }
    }
    let busy: Vec<String> = md::arrays(Path::new("/"))
        .into_iter()
        .filter(md::in_use)
        .map(|a| format!("/dev/{} ({})", a.name, a.members.join(", ")))
        .collect();
    if !busy.is_empty() {
        bail!(
            "software RAID devices exist already: {}; run delete_configuration first",
            busy.join("; ")
        );
    }
    let mut with_parts = Vec::new();
    for d in &plan.disks {
        let dev = Device::open(&d.disk.path).map_err(anyhow::Error::from)?;
        policy.check(&dev).map_err(anyhow::Error::from)?;
        if dev.devno.is_none() {
            bail!(
                "{} is not a block device; md arrays are built from partition devices",
                d.disk.path.display()
            );
        }
        if !dev.partitions().is_empty() {
            with_parts.push(d.disk.path.display().to_string());
        }
    }
    if !with_parts.is_empty() {
        bail!(
            "Partitions detected on devices {} during RAID config; run delete_configuration (or erase_devices_metadata) first",
            with_parts.join(", ")
        );
    }
    Ok(())
}

/// Builds `plan`: tables, superblocks, arrays, and under UEFI the mirrored
/// ESP (`esp`, RAID-1 with version-1.0 superblocks at the end so firmware
/// reads each member as plain FAT) formatted vfat. On any failure every
/// array it started is stopped and every member's superblocks and table
/// are removed again.
pub fn create(plan: &Plan, policy: &WritePolicy) -> Result<Built> {
    let esp = plan.disks.iter().any(|d| d.esp.is_some());
    preflight(plan, policy, esp)?;
    let mut made: Vec<PathBuf> = Vec::new();
    let result = build(plan, &mut made);
    if result.is_err() {
        undo(plan, &made);
    }
    result
}

fn build(plan: &Plan, made: &mut Vec<PathBuf>) -> Result<Built> {
    // Partition devices of every member disk, by number.
    let mut parts: BTreeMap<PathBuf, Vec<PathBuf>> = BTreeMap::new();
    for d in &plan.disks {
        crate::partimage::write_table(
            &d.disk.path,
            plan.label,
            d.disk.sector,
            d.disk.total,
            &d.parts,
        )
        .with_context(|| format!("writing the partition table of {}", d.disk.path.display()))?;
        let dev = Device::open(&d.disk.path).map_err(anyhow::Error::from)?;
        let spec: Vec<(u32, u64, u64)> = d
            .parts
            .iter()
            .enumerate()
            .map(|(i, p)| {
                (
                    i as u32 + 1,
                    p.start * d.disk.sector,
                    p.sectors * d.disk.sector,
                )
            })
            .collect();
        let paths = crate::partimage::partition_devices(&dev, &spec)?;
        parts.insert(d.disk.path.clone(), paths);
    }
    let part = |disk: &Path, n: u32| -> Result<PathBuf> {
        parts
            .get(disk)
            .and_then(|v| v.get(n as usize - 1))
            .cloned()
            .with_context(|| format!("partition {n} of {} is missing (internal)", disk.display()))
    };
    let mut built = Built {
        arrays: Vec::new(),
        root: None,
        root_marks: Vec::new(),
    };
    for a in &plan.arrays {
        let members: Vec<PathBuf> = a
            .members
            .iter()
            .map(|(d, n)| part(d, *n))
            .collect::<Result<_>>()?;
        start(a, &members, made)?;
        let dev = PathBuf::from(format!("/dev/md{}", a.index));
        if a.root_volume == Some(true) {
            built.root = Some(dev.clone());
        }
        if let Some(root) = a.root_volume {
            built.root_marks.push(RootMark {
                device: dev.clone(),
                root,
                members: members.clone(),
                disks: a.members.iter().map(|(d, _)| d.clone()).collect(),
            });
        }
        built.arrays.push((dev, a.name.clone(), members));
    }
    if built.root.is_none() {
        built.root = built.arrays.first().map(|(d, _, _)| d.clone());
    }
    if plan.disks.iter().any(|d| d.esp.is_some()) {
        let members: Vec<PathBuf> = plan
            .disks
            .iter()
            .filter_map(|d| d.esp.map(|n| part(&d.disk.path, n)))
            .collect::<Result<_>>()?;
        let index = plan.arrays.iter().map(|a| a.index + 1).max().unwrap_or(0);
        let smallest = members
            .iter()
            .map(|m| size_of(m))
            .collect::<Result<Vec<_>>>()?
            .into_iter()
            .min()
            .unwrap_or(0);
        let data = superblock::offsets(smallest / 512)[0] / 8 * 8;
        let shape = Shape {
            name: ESP_NAME,
            level: 1,
            layout: 0,
            chunk: 0,
            redundant: true,
            minor: 0,
        };
        write_superblocks(&shape, &members, data)?;
        let dev = md::new_device(index)?;
        made.push(dev.clone());
        md::assemble(&dev, 0, &members)?;
        let sector = plan.disks.first().map(|d| d.disk.sector).unwrap_or(512);
        crate::partimage::format::vfat(&dev, crate::partimage::format::ESP_LABEL, sector)
            .with_context(|| format!("formatting the mirrored ESP {}", dev.display()))?;
        tracing::info!(device = %dev.display(), members = ?members, "mirrored EFI system partition built");
        built.arrays.push((dev, ESP_NAME.to_string(), members));
    }
    Ok(built)
}

fn start(a: &PlannedArray, members: &[PathBuf], made: &mut Vec<PathBuf>) -> Result<()> {
    let shape = Shape {
        name: &a.name,
        level: a.level.md_level(),
        layout: a.level.layout(),
        chunk: a.level.chunk_sectors(),
        redundant: a.level.redundant(),
        minor: 2,
    };
    write_superblocks(&shape, members, a.data_sectors)?;
    let dev = md::new_device(a.index)?;
    made.push(dev.clone());
    md::assemble(&dev, 2, members).with_context(|| {
        format!(
            "building {} ({}, RAID level {})",
            dev.display(),
            a.name,
            a.level.ironic()
        )
    })?;
    tracing::info!(device = %dev.display(), name = %a.name, level = a.level.ironic(), members = ?members, bytes = a.size_bytes(), "software RAID device built");
    Ok(())
}

fn undo(plan: &Plan, made: &[PathBuf]) {
    for dev in made.iter().rev() {
        if let Err(e) = md::stop(dev) {
            tracing::warn!(device = %dev.display(), "stopping after the failure: {e:#}");
        }
    }
    for d in &plan.disks {
        if let Ok(dev) = Device::open(&d.disk.path) {
            for p in dev.partitions() {
                if let Err(e) = zero_superblocks(&p.path) {
                    tracing::warn!(partition = %p.path.display(), "removing md superblocks after the failure: {e:#}");
                }
            }
        }
        match agent_devices::disk::erase::erase_metadata(&d.disk.path) {
            Ok(_) => {
                tracing::warn!(device = %d.disk.path.display(), "partition table removed after the failure")
            }
            Err(e) => {
                tracing::error!(device = %d.disk.path.display(), "removing the partition table after the failure: {e:#}")
            }
        }
    }
}

/// What [`delete`] removed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Deleted {
    /// Arrays stopped.
    pub stopped: Vec<String>,
    /// Devices whose superblocks were zeroed.
    pub zeroed: Vec<String>,
    /// Disks whose partition table was removed.
    pub wiped: Vec<String>,
}

/// IPA's `delete_configuration`: stops every md array, zeroes every md
/// superblock on `disks` and their partitions, and removes the partition
/// table of each disk that held one. `disks` are the whole disks the agent
/// may write; a disk the policy refuses is an error before anything is
/// touched.
pub fn delete(disks: &[PathBuf], policy: &WritePolicy) -> Result<Deleted> {
    let mut out = Deleted::default();
    // Stop the arrays whose members are on these disks, partitions of md
    // devices aside (they go with their array).
    let names: Vec<String> = disks
        .iter()
        .filter_map(|d| Device::open(d).ok()?.kernel_name())
        .collect();
    for a in md::arrays(Path::new("/")) {
        let ours = a.members.is_empty()
            || a.members
                .iter()
                .any(|m| names.iter().any(|n| m.starts_with(n.as_str())));
        if !ours {
            continue;
        }
        if a.members.is_empty() && !md::in_use(&a) {
            continue;
        }
        let dev = PathBuf::from("/dev").join(&a.name);
        md::stop(&dev).with_context(|| {
            format!(
                "Failed to stop {} (members {})",
                dev.display(),
                a.members.join(", ")
            )
        })?;
        tracing::info!(device = %dev.display(), members = ?a.members, "software RAID device stopped");
        out.stopped.push(dev.display().to_string());
    }
    for d in disks {
        let dev = Device::open(d).map_err(anyhow::Error::from)?;
        // The kernel drops a stopped array's holder links as it releases
        // the members: give it a moment before calling the disk held.
        let started = std::time::Instant::now();
        loop {
            match policy.check(&dev) {
                Ok(()) => break,
                Err(agent_devices::disk::Refusal::Held(..))
                    if started.elapsed() < std::time::Duration::from_secs(5) =>
                {
                    std::thread::sleep(std::time::Duration::from_millis(100));
                }
                Err(e) => return Err(e.into()),
            }
        }
        let mut held = false;
        let mut parts = dev.partitions();
        parts.reverse();
        for p in parts.iter().chain(std::iter::once(&dev)) {
            let n = zero_superblocks(&p.path)?;
            if n > 0 {
                held = true;
                tracing::info!(device = %p.path.display(), superblocks = n, "md superblocks removed");
                out.zeroed.push(p.path.display().to_string());
            }
        }
        // Partitions in the table the kernel does not show (yet).
        let n = zero_in_table(d)?;
        if n > 0 {
            held = true;
            tracing::info!(device = %d.display(), superblocks = n, "md superblocks removed inside its partitions");
            out.zeroed
                .push(format!("{} (partition table)", d.display()));
        }
        if held {
            agent_devices::disk::erase::erase_metadata(d)
                .with_context(|| format!("Failed to remove partitions on {}", d.display()))?;
            out.wiped.push(d.display().to_string());
        }
    }
    Ok(out)
}

/// Starts the version-1 arrays whose members are on `disks` (partitions
/// and whole disks), as udev with `mdadm --incremental` does at boot in
/// IPA's ramdisk: members grouped by array UUID, each group assembled as
/// `/dev/md<N>`, N the first free number, in the order
/// `create_configuration` numbered them (volumes by partition number, the
/// mirrored ESP last; a `MAX` volume that was not the last one configured
/// comes after the others); arrays already running are left
/// alone. A group that does not start (too few members) is logged and
/// skipped. Returns the devices started.
pub fn assemble_existing(disks: &[PathBuf]) -> Vec<PathBuf> {
    if !md::available(Path::new("/")) {
        return Vec::new();
    }
    let running: Vec<String> = md::arrays(Path::new("/"))
        .into_iter()
        .flat_map(|a| a.members)
        .collect();
    // Array UUID → (superblock minor version, name, (role, member)).
    type Group = (i32, String, Vec<(u32, PathBuf)>);
    let mut groups: BTreeMap<[u8; 16], Group> = BTreeMap::new();
    for d in disks {
        let Ok(dev) = Device::open(d) else { continue };
        for p in dev
            .partitions()
            .into_iter()
            .chain(std::iter::once(dev.clone()))
        {
            if p.kernel_name().is_some_and(|n| running.contains(&n)) {
                continue;
            }
            if let Some((minor, found)) = examine(&p.path) {
                let e = groups
                    .entry(found.uuid)
                    .or_insert((minor, found.name.clone(), Vec::new()));
                e.2.push((found.dev_number, p.path.clone()));
            }
        }
    }
    // The order create_configuration numbered them in: by the members'
    // partition number (volumes are laid out in that order), the mirrored
    // ESP last.
    let part_number = |p: &Path| -> u32 {
        p.file_name()
            .and_then(|n| {
                std::fs::read_to_string(Path::new("/sys/class/block").join(n).join("partition"))
                    .ok()
            })
            .and_then(|t| t.trim().parse().ok())
            .or_else(|| {
                let n = p.file_name()?.to_str()?;
                agent_devices::disk::multipath::partition_of(Path::new("/"), n)
                    .map(|(_, number)| number)
            })
            .unwrap_or(0)
    };
    let mut groups: Vec<Group> = groups.into_values().collect();
    groups.sort_by_key(|(_, name, members)| {
        let first = members
            .iter()
            .map(|(_, p)| part_number(p))
            .min()
            .unwrap_or(0);
        (name == ESP_NAME, first, name.clone())
    });
    let mut started = Vec::new();
    for (minor, name, mut members) in groups {
        members.sort();
        let paths: Vec<PathBuf> = members.into_iter().map(|(_, p)| p).collect();
        let index = (0..512)
            .find(|i| {
                !md::arrays(Path::new("/"))
                    .iter()
                    .any(|a| a.name == format!("md{i}") && md::in_use(a))
            })
            .unwrap_or(127);
        let result =
            md::new_device(index).and_then(|dev| md::assemble(&dev, minor, &paths).map(|()| dev));
        match result {
            Ok(dev) => {
                tracing::info!(device = %dev.display(), %name, members = ?paths, "software RAID device assembled");
                started.push(dev);
            }
            Err(e) => {
                tracing::warn!(%name, members = ?paths, "software RAID device not assembled: {e:#}")
            }
        }
    }
    started
}
