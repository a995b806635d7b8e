//! Partition images (PROTOCOL.md §5.6, §5.7): a Glance image of one
//! filesystem, deployed as IPA's `partition_utils.work_on_disk` does it.
//! [`params`] reads the layout keys and IPA's boot mode and table type,
//! [`layout`] plans the partitions, [`prepare`] writes the table natively
//! ([`agent_devices::disk::table::create`]) and fills every partition but the root
//! ([`format`]: ESP, swap, ephemeral; the config drive), the caller then
//! streams the image into the root partition with [`crate::image`], and
//! [`uuids`] reports what `standby.get_partition_uuids` returns. [`efi`]
//! copies the image's own UEFI loaders to the ESP for
//! `image.install_bootloader`. Any failure after the table was written
//! wipes it again ([`wipe_after_failure`]), so no half-made layout boots.

pub mod efi;
pub(crate) mod fatdots;
pub(crate) mod format;
pub mod layout;
pub mod params;

use std::fs::OpenOptions;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use serde_json::{json, Map, Value};

use agent_devices::disk::table::{self, create, Kind, Part};
use agent_devices::disk::{ioctl, Device};
use layout::{Layout, Role};
use params::Label;

/// How long the kernel gets to create the partition devices.
const PARTITION_WAIT: Duration = Duration::from_secs(10);
/// How long the kernel gets to read the new table itself.
const PARTITION_SCAN_WAIT: Duration = Duration::from_secs(2);

/// Why a partition image's disk could not be prepared.
#[derive(Debug, thiserror::Error)]
pub enum PartImageError {
    /// The layout does not fit the disk.
    #[error(transparent)]
    Layout(#[from] layout::LayoutError),
    /// Anything else, with its context.
    #[error("preparing the partitions of {device}: {source:#}")]
    Prepare {
        /// The disk.
        device: String,
        /// What failed.
        source: anyhow::Error,
    },
}

/// A disk laid out for a partition image, its partitions ready but the
/// root not yet written.
#[derive(Debug, Clone)]
pub struct Prepared {
    /// The disk.
    pub disk: PathBuf,
    /// The layout written.
    pub layout: Layout,
    /// Each partition's device, in layout order.
    pub paths: Vec<(Role, PathBuf)>,
    /// Each partition's PARTUUID, in layout order.
    pub partuuids: Vec<String>,
    /// Logical sector size.
    pub sector: u64,
    /// The table was kept (`preserve_ephemeral`).
    pub preserved: bool,
}

impl Prepared {
    /// The device of the partition with `role`.
    pub fn path(&self, role: Role) -> Option<&Path> {
        self.paths
            .iter()
            .find(|(r, _)| *r == role)
            .map(|(_, p)| p.as_path())
    }
}

fn fail(device: &Path, source: anyhow::Error) -> PartImageError {
    PartImageError::Prepare {
        device: device.display().to_string(),
        source,
    }
}

/// Lays out `disk` for a partition image: the table (unless
/// `preserve_ephemeral`, which keeps a table that must match the layout),
/// the ESP (vfat `efi-part`), swap (`swap1`), the ephemeral filesystem
/// (`ephemeral0`, unless preserved) and the config drive. On failure a
/// table this call wrote is wiped again.
pub fn prepare(
    disk: &Path,
    layout: &Layout,
    ephemeral_format: Option<&str>,
    preserve_ephemeral: bool,
    configdrive: Option<&[u8]>,
) -> Result<Prepared, PartImageError> {
    let dev = Device::open(disk).map_err(|e| fail(disk, e.into()))?;
    if dev.devno.is_none() {
        return Err(fail(
            disk,
            anyhow::anyhow!("a partition image needs a block device (its partitions are written through the kernel's partition devices), not a regular file"),
        ));
    }
    let (sector, total) = {
        let f = std::fs::File::open(disk)
            .with_context(|| format!("opening {}", disk.display()))
            .map_err(|e| fail(disk, e))?;
        let sector = ioctl::logical_sector_size(&f)
            .map(u64::from)
            .context("reading the sector size")
            .map_err(|e| fail(disk, e))?;
        let size = ioctl::size_bytes(&f)
            .context("reading the size")
            .map_err(|e| fail(disk, e))?;
        (sector, size / sector)
    };
    let entries = layout.entries(sector, total)?;
    if layout.get(Role::Ephemeral).is_some() && !preserve_ephemeral {
        let fs = ephemeral_format
            .context("an ephemeral partition needs ephemeral_format")
            .and_then(|fs| format::check_mkfs(fs).map(|()| fs));
        fs.map_err(|e| fail(disk, e))?;
    }
    let partuuids = if preserve_ephemeral {
        check_existing(disk, layout, sector).map_err(|e| fail(disk, e))?
    } else {
        write_table(disk, layout.label, sector, total, &entries).map_err(|e| {
            // A table written in part (the backup copy alone) goes too.
            wipe_table(disk);
            fail(disk, e)
        })?
    };
    let result = (|| -> anyhow::Result<Prepared> {
        let paths = partition_paths(&dev, layout)?;
        let prepared = Prepared {
            disk: disk.to_path_buf(),
            layout: layout.clone(),
            paths,
            partuuids,
            sector,
            preserved: preserve_ephemeral,
        };
        fill(&prepared, ephemeral_format, configdrive)?;
        Ok(prepared)
    })();
    result.map_err(|e| {
        if !preserve_ephemeral {
            wipe_table(disk);
        }
        fail(disk, e)
    })
}

/// Writes the new table (after erasing what the disk held) and has the
/// kernel read it. Returns the PARTUUIDs.
pub fn write_table(
    disk: &Path,
    label: Label,
    sector: u64,
    total: u64,
    entries: &[create::NewPart],
) -> anyhow::Result<Vec<String>> {
    agent_devices::disk::erase::erase_metadata(disk).context("erasing the old metadata")?;
    let mut f = agent_devices::disk::busy::retry(disk, "opening it exclusively", || {
        OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_EXCL)
            .open(disk)
    })
    .with_context(|| format!("opening {} exclusively", disk.display()))?;
    let uuids = match label {
        Label::Gpt => create::write_gpt(&mut f, sector, total, entries)?
            .iter()
            .map(|g| uuid::Uuid::from_bytes_le(*g).to_string())
            .collect(),
        Label::Msdos => {
            let sig = create::write_mbr(&mut f, sector, total, entries)?;
            (1..=entries.len())
                .map(|n| format!("{sig:08x}-{n:02x}"))
                .collect()
        }
    };
    f.sync_all().context("flushing the partition table")?;
    let reread = agent_devices::disk::busy::retry(disk, "re-reading the partition table", || {
        ioctl::reread_partitions(&f)
    });
    match reread {
        // A multipath device has no kernel partitions: partition_devices
        // maps them.
        Err(e)
            if e.raw_os_error() == Some(libc::EINVAL)
                && agent_devices::disk::multipath::is_multipath(disk) => {}
        r => r.context("having the kernel re-read the partition table")?,
    }
    tracing::info!(device = %disk.display(), ?label, partitions = entries.len(), "partition table written");
    Ok(uuids)
}

/// `preserve_ephemeral`: the disk's table must be the one the layout
/// describes (IPA then writes no table at all).
fn check_existing(disk: &Path, layout: &Layout, sector: u64) -> anyhow::Result<Vec<String>> {
    let f = std::fs::File::open(disk).with_context(|| format!("opening {}", disk.display()))?;
    let t = table::read(&f, sector)?
        .context("preserve_ephemeral is set but the disk has no partition table to preserve")?;
    let want = match layout.label {
        Label::Gpt => Kind::Gpt,
        Label::Msdos => Kind::Mbr,
    };
    if t.kind != want {
        bail!(
            "preserve_ephemeral is set but the disk's table is {:?}, the layout needs {:?}",
            t.kind,
            want
        );
    }
    let mut sig = [0u8; 4];
    std::os::unix::fs::FileExt::read_exact_at(&f, &mut sig, 440)?;
    let sig = u32::from_le_bytes(sig);
    let mut out = Vec::new();
    for p in &layout.parts {
        let found: Option<&Part> = t.parts.iter().find(|q| q.number == p.number);
        match found {
            Some(q) if q.start == p.start && q.len == p.len => out.push(match t.kind {
                Kind::Gpt => uuid::Uuid::from_bytes_le(q.guid).to_string(),
                Kind::Mbr => format!("{sig:08x}-{:02x}", q.number),
            }),
            _ => bail!(
                "preserve_ephemeral is set but partition {} ({}) is not at bytes {}..{} as the layout needs; \
                 the disk layout changed",
                p.number,
                p.role.key(),
                p.start,
                p.start + p.len
            ),
        }
    }
    if t.parts.len() != layout.parts.len() {
        bail!(
            "preserve_ephemeral is set but the disk has {} partitions, the layout {}",
            t.parts.len(),
            layout.parts.len()
        );
    }
    Ok(out)
}

/// The kernel's device for each partition of the layout (`/dev/sda3`,
/// `/dev/nvme0n1p3`, `/dev/loop7p3`), from sysfs, waiting for them.
fn partition_paths(dev: &Device, layout: &Layout) -> anyhow::Result<Vec<(Role, PathBuf)>> {
    let parts: Vec<(u32, u64, u64)> = layout
        .parts
        .iter()
        .map(|p| (p.number, p.start, p.len))
        .collect();
    let paths = partition_devices(dev, &parts)?;
    Ok(layout.parts.iter().map(|p| p.role).zip(paths).collect())
}

/// The kernel's device for each of `parts` (number, start and length in
/// bytes) of `dev`, from sysfs, waiting for them. A kernel that did not
/// parse the new table itself (one without the partition parsers) is told
/// each partition with BLKPG, as `partx` does.
pub fn partition_devices(dev: &Device, parts: &[(u32, u64, u64)]) -> anyhow::Result<Vec<PathBuf>> {
    let name = dev
        .kernel_name()
        .context("the disk's kernel name is not in sysfs")?;
    if let Some(maps) = agent_devices::disk::multipath::sync_partitions(&dev.path)? {
        // A multipath device: its partitions are the dm maps just made.
        return parts
            .iter()
            .map(|(number, _, len)| {
                maps.iter()
                    .find(|(n, _, size)| n == number && size == len)
                    .map(|(_, path, _)| path.clone())
                    .with_context(|| {
                        format!("multipath device {name} has no partition {number} of {len} bytes after mapping its table (maps: {maps:?})")
                    })
            })
            .collect();
    }
    let started = Instant::now();
    let mut told = false;
    loop {
        let found = partitions_by_number(&name);
        let all: Option<Vec<PathBuf>> = parts
            .iter()
            .map(|(number, _, len)| {
                found
                    .iter()
                    .find(|(n, path, size)| n == number && size == len && path.exists())
                    .map(|(_, path, _)| path.clone())
            })
            .collect();
        if let Some(all) = all {
            return Ok(all);
        }
        if !told && started.elapsed() > PARTITION_SCAN_WAIT {
            told = true;
            tell_kernel(&dev.path, parts, &found)?;
            continue;
        }
        if started.elapsed() > PARTITION_WAIT {
            bail!(
                "the kernel shows no device for some partition of {name} after {} s (found {:?})",
                PARTITION_WAIT.as_secs(),
                found
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Adds the partitions the kernel does not show (replacing any by the same
/// number with another size) with BLKPG.
fn tell_kernel(
    disk: &Path,
    parts: &[(u32, u64, u64)],
    found: &[(u32, PathBuf, u64)],
) -> anyhow::Result<()> {
    let f = std::fs::File::open(disk).with_context(|| format!("opening {}", disk.display()))?;
    for &(number, start, len) in parts {
        match found.iter().find(|(n, _, _)| *n == number) {
            Some((_, _, size)) if *size == len => continue,
            Some(_) => ioctl::delete_partition(&f, number)
                .with_context(|| format!("removing the kernel's old partition {number}"))?,
            None => {}
        }
        ioctl::add_partition(&f, number, start, len)
            .with_context(|| format!("telling the kernel about partition {number}"))?;
    }
    tracing::info!(device = %disk.display(), "the kernel did not read the new table itself; partitions added with BLKPG");
    Ok(())
}

/// (number, `/dev/<name>`, size in bytes) of each partition of `disk`.
fn partitions_by_number(disk: &str) -> Vec<(u32, PathBuf, u64)> {
    let read = |p: PathBuf| -> Option<u64> { std::fs::read_to_string(p).ok()?.trim().parse().ok() };
    let Ok(entries) = std::fs::read_dir(Path::new("/sys/class/block").join(disk)) else {
        return Vec::new();
    };
    let mut out: Vec<_> = entries
        .flatten()
        .filter_map(|e| {
            let n = read(e.path().join("partition"))?;
            let size = read(e.path().join("size"))? * 512;
            let name = e.file_name().to_str()?.to_string();
            Some((n as u32, Path::new("/dev").join(name), size))
        })
        .collect();
    out.sort();
    out
}

/// Formats the ESP and swap, makes the ephemeral filesystem (unless
/// preserved) and writes the config drive.
fn fill(
    p: &Prepared,
    ephemeral_format: Option<&str>,
    configdrive: Option<&[u8]>,
) -> anyhow::Result<()> {
    if let Some(esp) = p.path(Role::Esp) {
        format::vfat(esp, format::ESP_LABEL, p.sector)?;
        tracing::info!(partition = %esp.display(), "EFI system partition formatted (vfat)");
    }
    if let Some(swap) = p.path(Role::Swap) {
        format::swap(swap, format::SWAP_LABEL)?;
        tracing::info!(partition = %swap.display(), "swap partition formatted");
    }
    if let Some(eph) = p.path(Role::Ephemeral) {
        if p.preserved {
            tracing::info!(partition = %eph.display(), "ephemeral partition preserved");
        } else {
            let fs = ephemeral_format.context("no ephemeral_format")?;
            format::mkfs(fs, eph, format::EPHEMERAL_LABEL, p.sector)?;
            tracing::info!(partition = %eph.display(), fs, "ephemeral partition formatted");
        }
    }
    match (p.path(Role::ConfigDrive), configdrive) {
        (Some(cd), Some(data)) => {
            let label = crate::configdrive::write_partition(cd, data)?;
            tracing::info!(partition = %cd.display(), ?label, "config drive written");
        }
        (None, None) => {}
        _ => bail!("the config drive and its partition do not match (internal)"),
    }
    Ok(())
}

/// Removes the table this deploy wrote (after a failed image write or
/// formatting), so nothing half-made boots. With `preserve_ephemeral` the
/// table is kept and the first MiB of the ESP, the PReP partition and the
/// root is zeroed instead.
pub fn wipe_after_failure(p: &Prepared) {
    if !p.preserved {
        wipe_table(&p.disk);
        return;
    }
    for role in [Role::Esp, Role::PrepBoot, Role::Root] {
        if let Some(path) = p.path(role) {
            let zeroed = OpenOptions::new().write(true).open(path).and_then(|f| {
                std::os::unix::fs::FileExt::write_all_at(&f, &vec![0u8; 1 << 20], 0)?;
                f.sync_all()
            });
            if let Err(e) = zeroed {
                tracing::error!(partition = %path.display(), "zeroing after the failure: {e}");
            }
        }
    }
}

fn wipe_table(disk: &Path) {
    match agent_devices::disk::erase::erase_metadata(disk) {
        Ok(w) => {
            tracing::warn!(device = %disk.display(), signatures = ?w.signatures, "partition table wiped after the failure")
        }
        Err(e) => {
            tracing::error!(device = %disk.display(), "wiping the partition table after the failure: {e:#}")
        }
    }
}

/// The filesystem UUID libblkid reads on a partition device.
pub fn fs_uuid(path: &Path) -> Option<String> {
    let f = std::fs::File::open(path).ok()?;
    let len = ioctl::size_bytes(&f).ok()?;
    agent_devices::disk::probe::probe_value(&f, 0, len, "UUID")
}

/// `standby.get_partition_uuids` for a partition image, as IPA's
/// `work_on_disk` returns it: `partitions` (IPA's keys → devices),
/// `root uuid`, `efi system partition uuid` and, on ppc machines, `PReP
/// Boot partition uuid` (the filesystem UUID, else the PARTUUID, as
/// `block_uuid` does; a key is `null` without its partition). Read back from the devices after everything was written.
pub fn uuids(p: &Prepared) -> Value {
    let partitions: Map<String, Value> = p
        .paths
        .iter()
        .map(|(r, path)| (r.key().to_string(), json!(path.display().to_string())))
        .collect();
    let block_uuid = |role: Role| -> Value {
        let Some(i) = p.paths.iter().position(|(r, _)| *r == role) else {
            return Value::Null;
        };
        let uuid = fs_uuid(&p.paths[i].1).unwrap_or_else(|| p.partuuids[i].clone());
        Value::String(uuid)
    };
    let mut out = json!({
        "partitions": partitions,
        "root uuid": block_uuid(Role::Root),
        "efi system partition uuid": block_uuid(Role::Esp),
    });
    // IPA adds the PReP key on ppc machines only (`cpu_arch.startswith('ppc')`).
    if p.layout.cpu_arch.starts_with("ppc") {
        out["PReP Boot partition uuid"] = block_uuid(Role::PrepBoot);
    }
    out
}
