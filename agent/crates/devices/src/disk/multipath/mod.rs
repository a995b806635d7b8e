//! Multipath: owns finding the paths of one SAN LUN (whole `sd*` disks
//! that report the same WWID), assembling them into a device-mapper
//! `multipath` device in the ramdisk (what multipathd does in IPA 13's
//! ramdisk), telling a multipath device and its paths apart in sysfs, and
//! the partitions of a multipath device (dm `linear` maps, as kpartx makes
//! them: the kernel creates no partitions on a dm device). Keeping the
//! devices' paths up while the agent runs (failover, reinstatement, the
//! bound on queueing) is [`watch`]'s; reading a device's path states is
//! [`status`]'s.
//!
//! Everything that reads sysfs takes a root (`/` on the machine, a fixture
//! tree in tests) and never panics on what it reads. Names are as
//! multipathd's with `user_friendly_names`: `mpatha`, `mpathb`… in WWID
//! order; the dm uuid is `mpath-<WWID>`, the partition maps' `partN-<that>`
//! and their names `<name>-partN`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use super::dm::{self, Target};

pub mod status;
pub mod watch;

/// The dm uuid prefix of a multipath device.
pub const UUID_PREFIX: &str = "mpath-";

/// One path of a LUN.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathDev {
    /// Kernel name (`sdb`).
    pub name: String,
    /// `major:minor`.
    pub devno: (u64, u64),
    /// Its priority as multipathd's `alua` prioritizer gives it (higher is
    /// better): [`alua_priority`].
    pub priority: u32,
}

/// The paths of one LUN, seen on two or more.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    /// The WWID the paths share (the kernel's `wwid` form, `naa.…`).
    pub wwid: String,
    /// Size in 512-byte sectors (the same on every path).
    pub sectors: u64,
    /// The paths, by name.
    pub paths: Vec<PathDev>,
}

/// A multipath device that exists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Multipath {
    /// Kernel name (`dm-0`).
    pub kname: String,
    /// dm name (`mpatha`).
    pub name: String,
    /// dm uuid (`mpath-<WWID>`).
    pub uuid: String,
    /// Kernel names of its paths (`slaves/`), sorted.
    pub paths: Vec<String>,
}

fn read(path: &Path) -> Option<String> {
    let s = std::fs::read_to_string(path).ok()?;
    let s = s.trim();
    (!s.is_empty()).then(|| s.to_string())
}

fn sys_block(root: &Path) -> PathBuf {
    root.join("sys/block")
}

fn list(dir: &Path) -> Vec<String> {
    let mut out: Vec<String> = std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

fn devno(s: &str) -> Option<(u64, u64)> {
    let (a, b) = s.split_once(':')?;
    Some((a.trim().parse().ok()?, b.trim().parse().ok()?))
}

/// The WWID a SCSI disk reports: its `wwid` or `device/wwid` attribute,
/// else the best designator of its VPD page 0x83.
pub fn wwid(root: &Path, name: &str) -> Option<String> {
    let b = sys_block(root).join(name);
    read(&b.join("wwid"))
        .or_else(|| read(&b.join("device/wwid")))
        .or_else(|| {
            std::fs::read(b.join("device/vpd_pg83"))
                .ok()
                .and_then(|p| vpd83_wwid(&p))
        })
        .map(|w| w.split_whitespace().collect::<Vec<_>>().join(" "))
        .filter(|w| !w.is_empty())
}

/// The identifier in a VPD page 0x83 as the kernel's `wwid` attribute
/// gives it: an NAA designator (`naa.<hex>`), else EUI-64 (`eui.<hex>`),
/// else a SCSI name string, else a T10 vendor id (`t10.<ascii>`); only
/// designators associated with the logical unit.
pub fn vpd83_wwid(page: &[u8]) -> Option<String> {
    if page.len() < 4 || page[1] != 0x83 {
        return None;
    }
    let len = usize::from(u16::from_be_bytes([page[2], page[3]]));
    let body = page.get(4..(4 + len).min(page.len()))?;
    let mut best: Option<(u8, String)> = None;
    let mut i = 0;
    while i + 4 <= body.len() {
        let code_set = body[i] & 0x0f;
        let assoc = (body[i + 1] >> 4) & 0x3;
        let kind = body[i + 1] & 0x0f;
        let dlen = usize::from(body[i + 3]);
        let Some(d) = body.get(i + 4..i + 4 + dlen) else {
            break;
        };
        i += 4 + dlen;
        if assoc != 0 || d.is_empty() {
            continue;
        }
        let hex = |d: &[u8]| d.iter().map(|b| format!("{b:02x}")).collect::<String>();
        let text = |d: &[u8]| {
            String::from_utf8_lossy(d)
                .trim_matches(|c: char| c == '\0' || c.is_whitespace())
                .to_string()
        };
        let found = match kind {
            3 if code_set == 1 => (4, format!("naa.{}", hex(d))),
            2 if code_set == 1 => (3, format!("eui.{}", hex(d))),
            8 if code_set == 3 => (2, text(d)),
            1 if code_set == 2 => (1, format!("t10.{}", text(d))),
            _ => continue,
        };
        if best.as_ref().is_none_or(|(rank, _)| found.0 > *rank) {
            best = Some(found);
        }
    }
    best.map(|(_, w)| w)
}

/// The dm uuid of `kname` when it is a multipath device (`mpath-…`).
fn dm_uuid(root: &Path, kname: &str) -> Option<String> {
    read(&sys_block(root).join(kname).join("dm/uuid"))
}

/// `kname` (`dm-0`) as a multipath device, when it is one.
pub fn multipath(root: &Path, kname: &str) -> Option<Multipath> {
    let uuid = dm_uuid(root, kname)?;
    if !uuid.starts_with(UUID_PREFIX) {
        return None;
    }
    let b = sys_block(root).join(kname);
    Some(Multipath {
        kname: kname.to_string(),
        name: read(&b.join("dm/name")).unwrap_or_else(|| kname.to_string()),
        uuid,
        paths: list(&b.join("slaves")),
    })
}

/// Every multipath device under `root/sys/block`, by kernel name.
pub fn all(root: &Path) -> Vec<Multipath> {
    list(&sys_block(root))
        .iter()
        .filter(|n| n.starts_with("dm-"))
        .filter_map(|n| multipath(root, n))
        .collect()
}

/// The multipath device that holds `kname` (a path), if any.
pub fn holder(root: &Path, kname: &str) -> Option<String> {
    list(&sys_block(root).join(kname).join("holders"))
        .into_iter()
        .find(|h| multipath(root, h).is_some())
}

/// The whole SCSI disks (`sd*`) under `root` that no device holds, of a
/// non-zero size and with a WWID, as (path, size in sectors, WWID): the
/// disks that may be paths of a LUN.
fn candidates(root: &Path) -> Vec<(PathDev, u64, String)> {
    let mut out = Vec::new();
    for name in list(&sys_block(root)) {
        if !name.starts_with("sd") {
            continue;
        }
        let b = sys_block(root).join(&name);
        if !list(&b.join("holders")).is_empty() {
            tracing::debug!(disk = %name, "multipath: held already, not a free path");
            continue;
        }
        let (Some(devno), Some(sectors)) = (
            read(&b.join("dev")).and_then(|d| devno(&d)),
            read(&b.join("size")).and_then(|s| s.parse::<u64>().ok()),
        ) else {
            continue;
        };
        if sectors == 0 {
            continue;
        }
        let Some(w) = wwid(root, &name) else {
            continue;
        };
        let path = PathDev {
            priority: alua_priority(root, &name),
            name,
            devno,
        };
        out.push((path, sectors, w));
    }
    out
}

/// The whole SCSI disks (`sd*`) under `root` that no device holds yet,
/// grouped by WWID; only groups of two or more paths of one size. Disks
/// without a WWID are single paths.
pub fn groups(root: &Path) -> Vec<Group> {
    let mut by_wwid: BTreeMap<String, Vec<(PathDev, u64)>> = BTreeMap::new();
    for (path, sectors, w) in candidates(root) {
        by_wwid.entry(w).or_default().push((path, sectors));
    }
    by_wwid
        .into_iter()
        .filter(|(_, paths)| paths.len() >= 2)
        .filter_map(|(wwid, paths)| {
            let sectors = paths[0].1;
            if paths.iter().any(|(_, s)| *s != sectors) {
                tracing::warn!(%wwid, "multipath: paths of one WWID differ in size; left as single disks");
                return None;
            }
            Some(Group {
                wwid,
                sectors,
                paths: paths.into_iter().map(|(p, _)| p).collect(),
            })
        })
        .collect()
}

/// multipathd's friendly name number `n`: `mpatha` … `mpathz`, `mpathaa` ….
pub fn alias(n: usize) -> String {
    let mut n = n + 1;
    let mut s = Vec::new();
    while n > 0 {
        n -= 1;
        s.push(b'a' + (n % 26) as u8);
        n /= 26;
    }
    s.reverse();
    format!("mpath{}", String::from_utf8_lossy(&s))
}

/// The dm uuid of a group (`mpath-<WWID>`, spaces as `_`).
pub fn uuid(wwid: &str) -> String {
    format!("{UUID_PREFIX}{}", wwid.replace(char::is_whitespace, "_"))
}

/// A path's priority from the ALUA state the kernel's `scsi_dh_alua`
/// reports (`device/access_state`), as multipathd's `alua` prioritizer
/// ranks it: active/optimized 50, active/non-optimized 10, lba-dependent
/// 5, standby 1, anything else (unavailable, offline, transitioning) 0.
/// A path without the attribute (no ALUA) ranks as active/optimized.
pub fn alua_priority(root: &Path, name: &str) -> u32 {
    let Some(state) = read(&sys_block(root).join(name).join("device/access_state")) else {
        return 50;
    };
    match state.as_str() {
        "active/optimized" => 50,
        "active/non-optimized" => 10,
        "lba-dependent" => 5,
        "standby" => 1,
        _ => 0,
    }
}

/// The multipath table over `paths` of a LUN of `sectors`, as multipathd
/// makes it with `path_grouping_policy group_by_prio`: one priority group
/// per priority, the best first (the kernel sends I/O to the first group
/// with a usable path, so an active/passive array's standby paths get none
/// while an active path is up), round-robin inside a group (a repeat count
/// of 1: the kernel's round-robin selector takes no other), and
/// `queue_if_no_path`: while no path is up I/O waits, for as long as
/// [`watch`] allows, instead of failing at once.
pub fn table_over(paths: &[PathDev], sectors: u64) -> Target {
    let mut priorities: Vec<u32> = paths.iter().map(|p| p.priority).collect();
    priorities.sort_unstable_by(|a, b| b.cmp(a));
    priorities.dedup();
    let mut params = format!("1 queue_if_no_path 0 {} 1", priorities.len());
    for prio in priorities {
        let group: Vec<&PathDev> = paths.iter().filter(|p| p.priority == prio).collect();
        params.push_str(&format!(" round-robin 0 {} 1", group.len()));
        for p in group {
            params.push_str(&format!(" {}:{} 1", p.devno.0, p.devno.1));
        }
    }
    Target {
        start: 0,
        length: sectors,
        kind: "multipath".into(),
        params,
    }
}

/// The multipath table of a group ([`table_over`] its paths).
pub fn table(g: &Group) -> Target {
    table_over(&g.paths, g.sectors)
}

/// What [`assemble`] made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assembled {
    /// dm name.
    pub name: String,
    /// `/dev/dm-N`.
    pub node: PathBuf,
    /// WWID.
    pub wwid: String,
    /// Paths.
    pub paths: Vec<String>,
    /// Its partition maps: (number, `/dev/dm-N`, size in bytes).
    pub partitions: Vec<(u32, PathBuf, u64)>,
}

impl Assembled {
    /// What PID 1 tells of it on the console: the device, then each map.
    pub fn lines(&self) -> Vec<String> {
        let mut out = vec![format!(
            "multipath: {} ({}) assembled from {} (WWID {})",
            self.node.display(),
            self.name,
            self.paths.join(", "),
            self.wwid
        )];
        for (number, node, bytes) in &self.partitions {
            out.push(format!(
                "multipath: {} partition {number} mapped at {} ({bytes} bytes)",
                self.name,
                node.display()
            ));
        }
        out
    }
}

/// Creates a multipath device for every group of paths on the running
/// machine that has none yet (the ramdisk, after its drivers are loaded;
/// then [`watch`], for LUNs that appear later), then the partition
/// maps of the table on each. Returns what was made and, apart, what
/// failed (those paths are left as they are, single disks).
pub fn assemble() -> (Vec<Assembled>, Vec<String>) {
    let root = Path::new("/");
    let existing = all(root);
    let mut taken: Vec<String> = existing.iter().map(|m| m.name.clone()).collect();
    // A LUN that has a device already: its paths that come back are the
    // watch's to add, never a second device.
    let uuids: Vec<&str> = existing.iter().map(|m| m.uuid.as_str()).collect();
    let mut next = 0;
    let mut out = Vec::new();
    let mut failures = Vec::new();
    for g in groups(root) {
        if uuids.contains(&uuid(&g.wwid).as_str()) {
            continue;
        }
        let name = loop {
            let a = alias(next);
            next += 1;
            if !taken.contains(&a) {
                break a;
            }
        };
        let paths: Vec<String> = g.paths.iter().map(|p| p.name.clone()).collect();
        match dm::create(&name, &uuid(&g.wwid), &[table(&g)]) {
            Ok(c) => {
                tracing::info!(device = %c.node.display(), %name, wwid = %g.wwid, paths = ?paths,
                    "multipath device assembled");
                taken.push(name.clone());
                let partitions = match sync_partitions(&c.node) {
                    Ok(maps) => maps.unwrap_or_default(),
                    Err(e) => {
                        failures.push(format!("{} ({name}) partitions: {e:#}", c.node.display()));
                        Vec::new()
                    }
                };
                out.push(Assembled {
                    name,
                    node: c.node,
                    wwid: g.wwid,
                    paths,
                    partitions,
                });
            }
            Err(e) => failures.push(format!(
                "WWID {} on {}: not assembled: {e}",
                g.wwid,
                paths.join(", ")
            )),
        }
    }
    (out, failures)
}

/// The partition maps of multipath device `kname` under `root`: (number,
/// kernel name), by number.
pub fn partition_maps(root: &Path, kname: &str) -> Vec<(u32, String)> {
    let Some(parent) = dm_uuid(root, kname).filter(|u| u.starts_with(UUID_PREFIX)) else {
        return Vec::new();
    };
    let mut out: Vec<(u32, String)> = list(&sys_block(root).join(kname).join("holders"))
        .into_iter()
        .filter_map(|h| {
            let u = dm_uuid(root, &h)?;
            let (part, rest) = u.split_once('-')?;
            let n = part.strip_prefix("part")?.parse().ok()?;
            (rest == parent).then_some((n, h))
        })
        .collect();
    out.sort();
    out
}

/// A multipath partition map `kname` under `root` as (its multipath
/// device's kernel name, partition number); what the kernel's `partition`
/// attribute and parent directory give for a disk's own partitions.
pub fn partition_of(root: &Path, kname: &str) -> Option<(String, u32)> {
    let uuid = dm_uuid(root, kname)?;
    let (part, rest) = uuid.split_once('-')?;
    let number = part.strip_prefix("part")?.parse().ok()?;
    if !rest.starts_with(UUID_PREFIX) {
        return None;
    }
    let parent = list(&sys_block(root).join(kname).join("slaves"))
        .into_iter()
        .find(|s| dm_uuid(root, s).as_deref() == Some(rest))?;
    Some((parent, number))
}

/// The multipath device behind `/dev` path `dev`, if it is one.
fn multipath_of(dev: &Path) -> Option<Multipath> {
    let d = super::Device::open(dev).ok()?;
    multipath(Path::new("/"), &d.kernel_name()?)
}

/// Whether `/dev` path `dev` is a multipath device.
pub fn is_multipath(dev: &Path) -> bool {
    multipath_of(dev).is_some()
}

/// The partitions of the table on multipath device `dev` (open as `f`) as
/// kpartx maps them: every partition, an MBR's logical ones included (5,
/// 6, …), its extended partition as the kernel shows it (its first 1 KiB).
/// `Ok(None)`: no table.
fn mapped_partitions(f: &std::fs::File, dev: &Path) -> Result<Option<Vec<super::table::Part>>> {
    let sector = u64::from(super::ioctl::logical_sector_size(f).unwrap_or(512)).max(512);
    let Some(table) = super::table::read(f, sector)
        .with_context(|| format!("reading the partition table of {}", dev.display()))?
    else {
        return Ok(None);
    };
    let logical = super::table::logical::logical_partitions(f, &table)
        .with_context(|| format!("reading the logical partitions of {}", dev.display()))?;
    let mut parts = table.parts;
    for p in &mut parts {
        if super::table::logical::is_extended(p) {
            p.len = p.len.min(1024);
        }
    }
    parts.extend(logical);
    Ok(Some(parts))
}

/// The partition map (`/dev/dm-N`) of multipath device `dev` that covers
/// exactly `len` bytes from byte `offset` (a partition of the table on it,
/// logical ones included): what mounts a partition of a SAN disk, whose
/// device the partition maps hold (so it cannot be mounted itself).
pub fn partition_map_at(dev: &Path, offset: u64, len: u64) -> Option<PathBuf> {
    let m = multipath_of(dev)?;
    let f = std::fs::File::open(dev).ok()?;
    let number = mapped_partitions(&f, dev)
        .ok()??
        .into_iter()
        .find(|p| p.start == offset && p.len == len)?
        .number;
    let root = Path::new("/");
    let (_, kname) = partition_maps(root, &m.kname)
        .into_iter()
        .find(|(n, _)| *n == number)?;
    let sectors: u64 = read(&sys_block(root).join(&kname).join("size"))?
        .parse()
        .ok()?;
    (sectors * 512 == len).then(|| Path::new("/dev").join(kname))
}

/// Removes the partition maps of `dev` when it is a multipath device (as
/// `kpartx -d`): they hold it, so it cannot be opened exclusively, and a
/// write of a new table or image makes them stale.
pub fn drop_partitions(dev: &Path) -> Result<()> {
    let Some(m) = multipath_of(dev) else {
        return Ok(());
    };
    for (n, kname) in partition_maps(Path::new("/"), &m.kname) {
        let name = read(&sys_block(Path::new("/")).join(&kname).join("dm/name"))
            .with_context(|| format!("the dm name of {kname}"))?;
        dm::remove(&name)
            .with_context(|| format!("removing partition {n} ({name}) of {}", m.name))?;
        tracing::info!(device = %dev.display(), partition = n, %name, "multipath partition map removed");
    }
    Ok(())
}

/// Makes the partition maps of `dev` (a multipath device) match the
/// partition table on it, as kpartx does: stale maps removed, a `linear`
/// map for each partition (an MBR's logical ones included). Returns (number, `/dev/dm-N`, size in bytes) of
/// each partition. Not a multipath device: nothing, `Ok(None)`.
pub fn sync_partitions(dev: &Path) -> Result<Option<Vec<(u32, PathBuf, u64)>>> {
    let Some(m) = multipath_of(dev) else {
        return Ok(None);
    };
    drop_partitions(dev)?;
    let f = std::fs::File::open(dev).with_context(|| format!("opening {}", dev.display()))?;
    let Some(parts) = mapped_partitions(&f, dev)? else {
        return Ok(Some(Vec::new()));
    };
    let parent = &m.uuid;
    let devno = read(&sys_block(Path::new("/")).join(&m.kname).join("dev"))
        .with_context(|| format!("the device number of {}", m.kname))?;
    let mut out = Vec::new();
    for p in parts {
        if p.start % 512 != 0 || p.len % 512 != 0 || p.len == 0 {
            bail!(
                "partition {} of {} is not in whole 512-byte sectors",
                p.number,
                dev.display()
            );
        }
        let name = format!("{}-part{}", m.name, p.number);
        let target = Target {
            start: 0,
            length: p.len / 512,
            kind: "linear".into(),
            params: format!("{devno} {}", p.start / 512),
        };
        let c = dm::create(&name, &format!("part{}-{parent}", p.number), &[target])
            .with_context(|| format!("creating the map of partition {}", p.number))?;
        tracing::info!(device = %dev.display(), partition = p.number, map = %c.node.display(), %name,
            "multipath partition map created");
        out.push((p.number, c.node, p.len));
    }
    Ok(Some(out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    /// A fixture tree: `sda` (a lone SATA disk), `sdb` and `sdc` (two paths
    /// of one LUN, WWID from `device/wwid` and VPD 0x83), `sdd` (a path
    /// whose twin reports another size), `sde`/`sdf` of another size pair.
    pub(crate) fn tree() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let disk = |name: &str, dev: &str, size: &str| {
            let b = dir.path().join("sys/block").join(name);
            fs::create_dir_all(b.join("device")).unwrap();
            fs::create_dir_all(b.join("holders")).unwrap();
            fs::write(b.join("dev"), dev).unwrap();
            fs::write(b.join("size"), size).unwrap();
            b
        };
        disk("sda", "8:0\n", "1000\n");
        let b = disk("sdb", "8:16\n", "4096\n");
        fs::write(b.join("device/wwid"), "naa.5000c50015ea71ad\n").unwrap();
        let c = disk("sdc", "8:32\n", "4096\n");
        fs::write(c.join("device/vpd_pg83"), vpd83_naa()).unwrap();
        let d = disk("sdd", "8:48\n", "4096\n");
        fs::write(d.join("wwid"), "naa.6000000000000001").unwrap();
        let e = disk("sde", "8:64\n", "8192\n");
        fs::write(e.join("wwid"), "naa.6000000000000001").unwrap();
        dir
    }

    fn vpd83_naa() -> Vec<u8> {
        // A T10 vendor id, then an NAA designator (the better one).
        let mut body = vec![0x02, 0x01, 0, 8];
        body.extend_from_slice(b"QEMU    ");
        body.extend_from_slice(&[
            0x01, 0x03, 0, 8, 0x50, 0x00, 0xc5, 0x00, 0x15, 0xea, 0x71, 0xad,
        ]);
        // A port designator (association 1) is not the LU's.
        body.extend_from_slice(&[0x01, 0x13, 0, 8, 1, 2, 3, 4, 5, 6, 7, 8]);
        let mut p = vec![0, 0x83, 0, body.len() as u8];
        p.extend(body);
        p
    }

    #[test]
    fn vpd_page_83() {
        assert_eq!(
            vpd83_wwid(&vpd83_naa()).as_deref(),
            Some("naa.5000c50015ea71ad")
        );
        let mut t10 = vec![0, 0x83, 0, 12, 0x02, 0x01, 0, 8];
        t10.extend_from_slice(b"QEMU  A ");
        assert_eq!(vpd83_wwid(&t10).as_deref(), Some("t10.QEMU  A"));
        // Truncated or wrong pages give nothing and never panic.
        assert_eq!(vpd83_wwid(&[0, 0x83, 0, 200, 1, 3, 0, 50]), None);
        assert_eq!(vpd83_wwid(&[0, 0x80, 0, 0]), None);
        assert_eq!(vpd83_wwid(&[0, 0x83]), None);
        for n in 0..vpd83_naa().len() {
            let _ = vpd83_wwid(&vpd83_naa()[..n]);
        }
    }

    #[test]
    fn paths_are_grouped_by_wwid_and_size() {
        let t = tree();
        let g = groups(t.path());
        assert_eq!(g.len(), 1, "{g:?}");
        assert_eq!(g[0].wwid, "naa.5000c50015ea71ad");
        assert_eq!(g[0].sectors, 4096);
        assert_eq!(
            g[0].paths,
            [
                PathDev {
                    name: "sdb".into(),
                    devno: (8, 16),
                    priority: 50,
                },
                PathDev {
                    name: "sdc".into(),
                    devno: (8, 32),
                    priority: 50,
                },
            ]
        );
        assert_eq!(
            table(&g[0]).params,
            "1 queue_if_no_path 0 1 1 round-robin 0 2 1 8:16 1 8:32 1"
        );
        assert_eq!(table(&g[0]).length, 4096);
        assert_eq!(uuid(&g[0].wwid), "mpath-naa.5000c50015ea71ad");
        // An active/passive LUN: the standby path in a group of its own,
        // after the active one's.
        fs::write(
            t.path().join("sys/block/sdb/device/access_state"),
            "standby\n",
        )
        .unwrap();
        fs::write(
            t.path().join("sys/block/sdc/device/access_state"),
            "active/optimized\n",
        )
        .unwrap();
        let g = groups(t.path());
        assert_eq!((g[0].paths[0].priority, g[0].paths[1].priority), (1, 50));
        assert_eq!(
            table(&g[0]).params,
            "1 queue_if_no_path 0 2 1 round-robin 0 1 1 8:32 1 round-robin 0 1 1 8:16 1"
        );
        fs::write(
            t.path().join("sys/block/sdb/device/access_state"),
            "unavailable",
        )
        .unwrap();
        assert_eq!(alua_priority(t.path(), "sdb"), 0);
        // A held path (already in a device) is not grouped again.
        fs::create_dir_all(t.path().join("sys/block/sdc/holders/dm-0")).unwrap();
        assert!(groups(t.path()).is_empty());
    }

    #[test]
    fn friendly_names() {
        assert_eq!(alias(0), "mpatha");
        assert_eq!(alias(25), "mpathz");
        assert_eq!(alias(26), "mpathaa");
        assert_eq!(alias(27), "mpathab");
    }

    #[test]
    fn multipath_devices_their_paths_and_partition_maps() {
        let t = tree();
        let dm = |name: &str, uuid: &str, dmname: &str| {
            let b = t.path().join("sys/block").join(name);
            fs::create_dir_all(b.join("dm")).unwrap();
            fs::create_dir_all(b.join("slaves")).unwrap();
            fs::create_dir_all(b.join("holders")).unwrap();
            fs::write(b.join("dm/uuid"), uuid).unwrap();
            fs::write(b.join("dm/name"), dmname).unwrap();
            b
        };
        let m = dm("dm-0", "mpath-naa.5000c50015ea71ad\n", "mpatha\n");
        dm("dm-1", "LVM-abc", "vg-lv");
        dm("dm-2", "part1-mpath-naa.5000c50015ea71ad", "mpatha-part1");
        dm("dm-3", "part2-mpath-naa.other", "mpathb-part2");
        for s in ["sdb", "sdc"] {
            fs::create_dir(m.join("slaves").join(s)).unwrap();
            fs::create_dir(t.path().join("sys/block").join(s).join("holders/dm-0")).unwrap();
        }
        for h in ["dm-2", "dm-3"] {
            fs::create_dir(m.join("holders").join(h)).unwrap();
        }
        fs::create_dir(t.path().join("sys/block/sda/holders/dm-1")).unwrap();
        let found = all(t.path());
        assert_eq!(
            found,
            [Multipath {
                kname: "dm-0".into(),
                name: "mpatha".into(),
                uuid: "mpath-naa.5000c50015ea71ad".into(),
                paths: vec!["sdb".into(), "sdc".into()],
            }]
        );
        assert_eq!(holder(t.path(), "sdb").as_deref(), Some("dm-0"));
        assert_eq!(holder(t.path(), "sdc").as_deref(), Some("dm-0"));
        // Held by LVM, not by a multipath device.
        assert_eq!(holder(t.path(), "sda"), None);
        assert_eq!(holder(t.path(), "sdd"), None);
        assert_eq!(multipath(t.path(), "dm-1"), None);
        assert_eq!(partition_maps(t.path(), "dm-0"), [(1, "dm-2".to_string())]);
        fs::create_dir_all(t.path().join("sys/block/dm-2/slaves/dm-0")).unwrap();
        assert_eq!(partition_of(t.path(), "dm-2"), Some(("dm-0".into(), 1)));
        // Its multipath device is not among its slaves: not a partition.
        assert_eq!(partition_of(t.path(), "dm-3"), None);
        assert_eq!(partition_of(t.path(), "dm-0"), None);
        assert_eq!(partition_of(t.path(), "sdb"), None);
        assert!(partition_maps(t.path(), "dm-1").is_empty());
    }
}
