//! Whole disks that can hold an OS, described as IPA describes them (what
//! `lsblk` and udev would say), read from sysfs, the udev database
//! (`/run/udev/data`) and `/dev/disk/by-path` when present.
//!
//! Sources per field, in order: udev properties (what IPA gets through
//! lsblk), then the kernel's own attributes (`serial`, `wwid`, VPD page 0x80,
//! the SCSI address), then a path computed from the sysfs device chain like
//! udev's `path_id`. Skipped: zero-size devices, loop (unless allowed), ram,
//! zram, floppies, optical drives and device-mapper devices. Software RAID
//! (md) arrays are listed, as IPA lists them, once running (an inactive
//! array has size zero).
//!
//! Multipath (as IPA 13 with multipathd): a device-mapper multipath device
//! is listed once, as `/dev/dm-N` with its own size and sector sizes and
//! the serial, WWN, model and vendor of its paths (no `hctl`, `by_path` or
//! transport: those belong to one path), and its paths (`sdX` held by it)
//! are not listed.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use super::{read_attr, under};
use crate::disk::multipath;

/// One entry of `inventory.disks`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Disk {
    /// `/dev/<kernel name>`.
    pub name: String,
    /// Model string.
    pub model: Option<String>,
    /// Size in bytes.
    pub size: u64,
    /// Spinning disk.
    pub rotational: bool,
    /// World Wide Name (`0x5000c500a1b2c3d4`, `eui.…`).
    pub wwn: Option<String>,
    /// Serial number.
    pub serial: Option<String>,
    /// Vendor (SCSI vendor, or the PCI vendor id of virtio devices).
    pub vendor: Option<String>,
    /// WWN with the vendor extension appended.
    pub wwn_with_extension: Option<String>,
    /// The vendor extension alone.
    pub wwn_vendor_extension: Option<String>,
    /// SCSI address `host:channel:target:lun`.
    pub hctl: Option<String>,
    /// `/dev/disk/by-path/...` link of the disk.
    pub by_path: Option<String>,
    /// Logical sector size in bytes.
    pub logical_sectors: u32,
    /// Physical sector size in bytes.
    pub physical_sectors: u32,
    /// Transport: `nvme`, `sata`, `sas`, `virtio`, `usb`, `iscsi`, `fc`, `spi`.
    pub tran: Option<String>,
    /// Read-only (`/sys/block/<d>/ro`); not sent by IPA.
    pub read_only: bool,
    /// Removable media (`/sys/block/<d>/removable`); not sent by IPA.
    pub removable: bool,
    /// Every serial number the disk reports (udev's short and long serial,
    /// the kernel's, VPD page 0x80), `serial` first; hints match any of
    /// them, as IPA 13's `all_serial_and_wwn` listing. Not sent.
    #[serde(default, skip_serializing)]
    pub serials: Vec<String>,
    /// Every WWN the disk reports (udev's, with and without extension, the
    /// kernel's `wwid`), `wwn` first; matched like `serials`. Not sent.
    #[serde(default, skip_serializing)]
    pub wwns: Vec<String>,
}

impl Disk {
    /// A disk known only by its name and size (a file standing in for a
    /// disk, a partition, a test's disk); the rest unknown.
    pub fn bare(name: &str, size: u64) -> Self {
        Self {
            name: name.to_string(),
            model: None,
            size,
            rotational: false,
            wwn: None,
            serial: None,
            vendor: None,
            wwn_with_extension: None,
            wwn_vendor_extension: None,
            hctl: None,
            by_path: None,
            logical_sectors: 512,
            physical_sectors: 512,
            tran: None,
            read_only: false,
            removable: false,
            serials: Vec::new(),
            wwns: Vec::new(),
        }
    }
}

const SKIPPED: [&str; 7] = ["ram", "zram", "loop", "fd", "sr", "dm-", "md"];

/// Lists the whole disks under `root/sys/block`, sorted by name.
/// `extra` names devices to keep although their prefix is skipped.
pub fn read(root: &Path, extra: &[String]) -> Result<Vec<Disk>> {
    let dir = under(root, "/sys/block");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .with_context(|| format!("listing {}", dir.display()))?
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| {
            extra.contains(n)
                || !SKIPPED.iter().any(|p| n.starts_with(p))
                || (n.starts_with("md") && dir.join(n).join("md").is_dir())
                || (n.starts_with("dm-") && multipath::multipath(root, n).is_some())
        })
        .filter(|n| match multipath::holder(root, n) {
            Some(m) => {
                tracing::debug!(disk = %n, multipath = %m, "a path of a multipath device: not listed");
                false
            }
            None => true,
        })
        .collect();
    names.sort();
    let by_path_links = by_path_links(root);
    let mut disks = Vec::new();
    for name in names {
        match read_one(root, &name, &by_path_links) {
            Some(d) if d.size > 0 => disks.push(d),
            Some(_) => tracing::debug!(disk = %name, "skipping a zero-size device"),
            None => tracing::debug!(disk = %name, "skipping an unreadable device"),
        }
    }
    Ok(disks)
}

fn read_one(root: &Path, name: &str, by_path_links: &HashMap<String, String>) -> Option<Disk> {
    if let Some(m) = multipath::multipath(root, name) {
        return read_multipath(root, &m, by_path_links);
    }
    let b = under(root, "/sys/block").join(name);
    let attr = |p: &str| read_attr(&b.join(p));
    let num = |p: &str| attr(p).and_then(|v| v.parse::<u64>().ok());
    let sectors = num("size")?;
    let udev = attr("dev")
        .map(|d| udev_properties(root, &d))
        .unwrap_or_default();
    let prop = |k: &str| udev.get(k).filter(|v| !v.is_empty()).cloned();
    let canonical = std::fs::canonicalize(&b).unwrap_or_else(|_| b.clone());
    let rel = canonical
        .strip_prefix(std::fs::canonicalize(root).unwrap_or_else(|_| root.to_path_buf()))
        .map(Path::to_path_buf)
        .unwrap_or_else(|_| canonical.clone());
    let rel = format!("/{}", rel.display());
    let hctl = std::fs::read_dir(b.join("device/scsi_device"))
        .ok()
        .and_then(|mut d| d.next())
        .and_then(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned());

    let sysfs_wwn = attr("wwid")
        .or_else(|| attr("device/wwid"))
        .map(|w| split_wwid(&w));
    let (wwn, wwn_with_extension, wwn_vendor_extension) = match prop("ID_WWN") {
        Some(w) => (
            Some(w.clone()),
            prop("ID_WWN_WITH_EXTENSION").or(Some(w)),
            prop("ID_WWN_VENDOR_EXTENSION"),
        ),
        None => sysfs_wwn.clone().unwrap_or_default(),
    };
    let vpd = || {
        std::fs::read(b.join("device/vpd_pg80"))
            .ok()
            .and_then(|v| vpd_serial(&v))
    };
    let serial_sources = [
        prop("ID_SERIAL_SHORT").or_else(|| prop("DM_SERIAL_SHORT")),
        attr("serial"),
        attr("device/serial"),
        vpd(),
        usb_serial(&canonical),
        prop("ID_SERIAL").or_else(|| prop("DM_SERIAL")),
    ];
    let serials = distinct(serial_sources);
    let serial = serials.first().cloned();
    let wwns = distinct([
        wwn.clone(),
        prop("DM_WWN"),
        wwn_with_extension.clone(),
        sysfs_wwn.as_ref().and_then(|w| w.0.clone()),
        sysfs_wwn.as_ref().and_then(|w| w.1.clone()),
    ]);
    let by_path = prop("ID_PATH")
        .map(|p| format!("/dev/disk/by-path/{p}"))
        .or_else(|| by_path_links.get(name).cloned())
        .or_else(|| {
            path_id(&rel, name, hctl.as_deref(), &b).map(|p| format!("/dev/disk/by-path/{p}"))
        });
    Some(Disk {
        name: format!("/dev/{name}"),
        model: attr("device/model").or_else(|| prop("ID_MODEL")),
        size: sectors * 512,
        rotational: attr("queue/rotational").as_deref() == Some("1"),
        wwn,
        serial,
        vendor: attr("device/vendor").or_else(|| prop("ID_VENDOR")),
        wwn_with_extension,
        wwn_vendor_extension,
        hctl,
        by_path,
        logical_sectors: num("queue/logical_block_size").unwrap_or(512) as u32,
        physical_sectors: num("queue/physical_block_size").unwrap_or(512) as u32,
        tran: transport(&rel, name),
        read_only: attr("ro").as_deref() == Some("1"),
        removable: attr("removable").as_deref() == Some("1"),
        serials,
        wwns,
    })
}

/// A multipath device: its own name, size and sector sizes; what its paths
/// report about the LUN (every serial and WWN of every path, the first
/// path's model and vendor).
fn read_multipath(
    root: &Path,
    m: &multipath::Multipath,
    by_path_links: &HashMap<String, String>,
) -> Option<Disk> {
    let b = under(root, "/sys/block").join(&m.kname);
    let attr = |p: &str| read_attr(&b.join(p));
    let num = |p: &str| attr(p).and_then(|v| v.parse::<u64>().ok());
    let sectors = num("size")?;
    let paths: Vec<Disk> = m
        .paths
        .iter()
        .filter_map(|p| read_one(root, p, by_path_links))
        .collect();
    let first = paths.first();
    let from_first = |f: fn(&Disk) -> Option<String>| first.and_then(f);
    let mut serials: Vec<String> = Vec::new();
    let mut wwns: Vec<String> = Vec::new();
    for p in &paths {
        for s in &p.serials {
            if !serials.contains(s) {
                serials.push(s.clone());
            }
        }
        for w in &p.wwns {
            if !wwns.contains(w) {
                wwns.push(w.clone());
            }
        }
    }
    Some(Disk {
        name: format!("/dev/{}", m.kname),
        model: from_first(|d| d.model.clone()),
        size: sectors * 512,
        rotational: attr("queue/rotational").as_deref() == Some("1"),
        wwn: from_first(|d| d.wwn.clone()),
        serial: from_first(|d| d.serial.clone()),
        vendor: from_first(|d| d.vendor.clone()),
        wwn_with_extension: from_first(|d| d.wwn_with_extension.clone()),
        wwn_vendor_extension: from_first(|d| d.wwn_vendor_extension.clone()),
        hctl: None,
        by_path: None,
        logical_sectors: num("queue/logical_block_size").unwrap_or(512) as u32,
        physical_sectors: num("queue/physical_block_size").unwrap_or(512) as u32,
        tran: None,
        read_only: attr("ro").as_deref() == Some("1"),
        removable: false,
        serials,
        wwns,
    })
}

/// The non-empty values, trimmed, each once, in order.
fn distinct<const N: usize>(values: [Option<String>; N]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for v in values.into_iter().flatten() {
        let v = v.trim().to_string();
        if !v.is_empty() && !out.contains(&v) {
            out.push(v);
        }
    }
    out
}

/// Properties (`E:KEY=VALUE` lines) of a block device in the udev database.
pub fn udev_properties(root: &Path, devno: &str) -> HashMap<String, String> {
    let path = under(root, "/run/udev/data").join(format!("b{devno}"));
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.strip_prefix("E:"))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Kernel name → `/dev/disk/by-path/<link>` for the links present.
fn by_path_links(root: &Path) -> HashMap<String, String> {
    let mut out = HashMap::new();
    let Ok(entries) = std::fs::read_dir(under(root, "/dev/disk/by-path")) else {
        return out;
    };
    let mut entries: Vec<_> = entries.flatten().collect();
    // Prefer the shortest link (udev also creates compatibility aliases).
    entries.sort_by_key(|e| std::cmp::Reverse(e.file_name().len()));
    for e in entries {
        let Ok(target) = std::fs::read_link(e.path()) else {
            continue;
        };
        if let Some(t) = target.file_name() {
            out.insert(
                t.to_string_lossy().into_owned(),
                format!("/dev/disk/by-path/{}", e.file_name().to_string_lossy()),
            );
        }
    }
    out
}

/// Splits a kernel `wwid` into `(wwn, wwn_with_extension, vendor_extension)`
/// as udev's scsi_id does: an NAA identifier becomes `0x…`, and a 32-digit
/// (NAA 6 registered extended) one carries a 16-digit vendor extension.
pub fn split_wwid(wwid: &str) -> (Option<String>, Option<String>, Option<String>) {
    let wwid = wwid.trim();
    if let Some(hex) = wwid.strip_prefix("naa.") {
        let hex = hex.to_ascii_lowercase();
        if hex.len() == 32 {
            let (id, ext) = hex.split_at(16);
            return (
                Some(format!("0x{id}")),
                Some(format!("0x{hex}")),
                Some(format!("0x{ext}")),
            );
        }
        let w = format!("0x{hex}");
        return (Some(w.clone()), Some(w), None);
    }
    // A T10 vendor id is not a world wide name (udev sets no ID_WWN for it).
    if wwid.is_empty() || wwid.starts_with("t10.") {
        return (None, None, None);
    }
    (Some(wwid.to_string()), Some(wwid.to_string()), None)
}

/// The serial number in a SCSI VPD page 0x80 (4-byte header, then ASCII).
pub fn vpd_serial(page: &[u8]) -> Option<String> {
    if page.len() < 4 || page[1] != 0x80 {
        return None;
    }
    let len = usize::from(u16::from_be_bytes([page[2], page[3]]));
    let body = page.get(4..(4 + len).min(page.len()))?;
    let s = String::from_utf8_lossy(body)
        .trim_matches(|c: char| c.is_whitespace() || c == '\0')
        .to_string();
    (!s.is_empty()).then_some(s)
}

/// A USB disk's serial: the `serial` attribute of the USB device above it.
fn usb_serial(canonical: &Path) -> Option<String> {
    if !canonical.to_string_lossy().contains("/usb") {
        return None;
    }
    canonical
        .ancestors()
        .take_while(|p| {
            !p.file_name()
                .is_some_and(|n| is_pci_address(&n.to_string_lossy()))
        })
        .find_map(|p| read_attr(&p.join("serial")))
}

/// The transport, from the device's sysfs path (as lsblk's TRAN column).
pub fn transport(sys_path: &str, name: &str) -> Option<String> {
    let has = |s: &str| sys_path.contains(s);
    let t = if name.starts_with("nvme") {
        "nvme"
    } else if has("/usb") {
        "usb"
    } else if has("/end_device-") || has("/sas_") {
        "sas"
    } else if has("/rport-") {
        "fc"
    } else if has("/session") && has("/target") {
        "iscsi"
    } else if sys_path.split('/').any(is_ata_port) {
        "sata"
    } else if name.starts_with("vd") || (has("/virtio") && !has("/host")) {
        "virtio"
    } else {
        return None;
    };
    Some(t.to_string())
}

fn is_ata_port(c: &str) -> bool {
    c.strip_prefix("ata")
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

fn is_pci_address(c: &str) -> bool {
    let b = c.as_bytes();
    b.len() == 12
        && b[4] == b':'
        && b[7] == b':'
        && b[10] == b'.'
        && c.chars()
            .enumerate()
            .all(|(i, ch)| matches!(i, 4 | 7 | 10) || ch.is_ascii_hexdigit())
}

/// A by-path name computed like udev's `path_id` for the common cases: the
/// nearest PCI device, then `nvme-<nsid>`, `ata-<port>.0` or
/// `scsi-<h:c:t:l>`; virtio-blk is the PCI device alone.
pub fn path_id(sys_path: &str, name: &str, hctl: Option<&str>, block_dir: &Path) -> Option<String> {
    let comps: Vec<&str> = sys_path.split('/').collect();
    let pci_idx = comps.iter().rposition(|c| is_pci_address(c))?;
    let pci = format!("pci-{}", comps[pci_idx]);
    let below = &comps[pci_idx + 1..];
    if name.starts_with("nvme") {
        let nsid = read_attr(&block_dir.join("nsid")).or_else(|| {
            name.rsplit_once('n')
                .map(|(_, n)| n.to_string())
                .filter(|n| n.bytes().all(|b| b.is_ascii_digit()))
        })?;
        return Some(format!("{pci}-nvme-{nsid}"));
    }
    if let Some(port) = below.iter().find(|c| is_ata_port(c)) {
        let n = &port[3..];
        return Some(format!("{pci}-ata-{n}.0"));
    }
    // USB: the interface (`2-1:1.0`) becomes `usb-0:1:1.0`; udev numbers
    // the SCSI host behind it from 0.
    let usb = below
        .iter()
        .find(|c| {
            c.contains(':') && c.contains('-') && c.starts_with(|ch: char| ch.is_ascii_digit())
        })
        .and_then(|c| c.split_once('-').map(|(_, port)| format!("-usb-0:{port}")));
    if let Some(h) = hctl {
        let h = match &usb {
            Some(_) => h
                .split_once(':')
                .map(|(_, rest)| format!("0:{rest}"))
                .unwrap_or_else(|| h.to_string()),
            None => h.to_string(),
        };
        return Some(format!("{pci}{}-scsi-{h}", usb.unwrap_or_default()));
    }
    Some(format!("{pci}{}", usb.unwrap_or_default()))
}

/// A disk's path in a fixture or live tree, for messages.
pub fn sys_block(root: &Path, name: &str) -> PathBuf {
    under(root, "/sys/block").join(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wwids() {
        assert_eq!(
            split_wwid("naa.5000c500a1b2c3d4"),
            (
                Some("0x5000c500a1b2c3d4".into()),
                Some("0x5000c500a1b2c3d4".into()),
                None
            )
        );
        assert_eq!(
            split_wwid("naa.6B8CA3A0E2B1C0002A1B2C3D4E5F6071"),
            (
                Some("0x6b8ca3a0e2b1c000".into()),
                Some("0x6b8ca3a0e2b1c0002a1b2c3d4e5f6071".into()),
                Some("0x2a1b2c3d4e5f6071".into())
            )
        );
        assert_eq!(
            split_wwid("eui.0025388b91b2c3d4").0.as_deref(),
            Some("eui.0025388b91b2c3d4")
        );
        assert_eq!(split_wwid(""), (None, None, None));
        assert_eq!(
            split_wwid("t10.ATA     QEMU HARDDISK   QM00001"),
            (None, None, None)
        );
    }

    /// A fixture tree: `sda` a plain disk; `sdb` and `sdc` two virtio-scsi
    /// paths of one LUN (same serial and WWID) held by multipath device
    /// `dm-0` (`mpatha`); `dm-1` an LVM volume (not listed).
    fn multipath_tree() -> tempfile::TempDir {
        use std::fs;
        let t = tempfile::tempdir().unwrap();
        let block = t.path().join("sys/block");
        let dev = |name: &str, devno: &str, size: &str| {
            let b = block.join(name);
            for d in ["holders", "slaves", "queue", "device"] {
                fs::create_dir_all(b.join(d)).unwrap();
            }
            fs::write(b.join("dev"), devno).unwrap();
            fs::write(b.join("size"), size).unwrap();
            fs::write(b.join("queue/logical_block_size"), "512").unwrap();
            fs::write(b.join("queue/physical_block_size"), "4096").unwrap();
            b
        };
        dev("sda", "8:0", "2048");
        for (i, name) in ["sdb", "sdc"].iter().enumerate() {
            let b = dev(name, &format!("8:{}", 16 * (i + 1)), "8192");
            fs::write(b.join("device/wwid"), "naa.5000c50015ea71ad").unwrap();
            fs::write(b.join("device/model"), "SANLUN").unwrap();
            fs::write(b.join("device/vendor"), "QEMU").unwrap();
            let mut p = vec![0, 0x80, 0, 8];
            p.extend_from_slice(b"MPATH001");
            fs::write(b.join("device/vpd_pg80"), p).unwrap();
            fs::create_dir_all(b.join(format!("device/scsi_device/0:0:{i}:0"))).unwrap();
            fs::create_dir(b.join("holders/dm-0")).unwrap();
        }
        let m = dev("dm-0", "254:0", "8192");
        fs::remove_dir(m.join("device")).unwrap();
        fs::create_dir_all(m.join("dm")).unwrap();
        fs::write(m.join("dm/uuid"), "mpath-naa.5000c50015ea71ad").unwrap();
        fs::write(m.join("dm/name"), "mpatha").unwrap();
        for s in ["sdb", "sdc"] {
            fs::create_dir(m.join("slaves").join(s)).unwrap();
        }
        let lv = dev("dm-1", "254:1", "100");
        fs::create_dir_all(lv.join("dm")).unwrap();
        fs::write(lv.join("dm/uuid"), "LVM-xyz").unwrap();
        t
    }

    #[test]
    fn a_multipath_device_is_listed_once_and_its_paths_not_at_all() {
        let t = multipath_tree();
        let disks = read(t.path(), &[]).unwrap();
        let names: Vec<&str> = disks.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(names, ["/dev/dm-0", "/dev/sda"]);
        let m = &disks[0];
        assert_eq!(m.size, 8192 * 512);
        assert_eq!(m.serial.as_deref(), Some("MPATH001"));
        assert_eq!(m.wwn.as_deref(), Some("0x5000c50015ea71ad"));
        assert_eq!(m.model.as_deref(), Some("SANLUN"));
        assert_eq!(m.vendor.as_deref(), Some("QEMU"));
        assert_eq!(
            (m.hctl.as_ref(), m.by_path.as_ref(), m.tran.as_ref()),
            (None, None, None)
        );
        assert_eq!((m.logical_sectors, m.physical_sectors), (512, 4096));
        assert!(m.serials.contains(&"MPATH001".to_string()));
        assert_eq!(m.wwns, ["0x5000c50015ea71ad"]);
        // Without the multipath device, both paths are disks again.
        std::fs::remove_dir_all(t.path().join("sys/block/dm-0")).unwrap();
        for s in ["sdb", "sdc"] {
            std::fs::remove_dir(t.path().join("sys/block").join(s).join("holders/dm-0")).unwrap();
        }
        let names: Vec<String> = read(t.path(), &[])
            .unwrap()
            .into_iter()
            .map(|d| d.name)
            .collect();
        assert_eq!(names, ["/dev/sda", "/dev/sdb", "/dev/sdc"]);
    }

    #[test]
    fn vpd_page_80() {
        let mut p = vec![0, 0x80, 0, 20];
        p.extend_from_slice(b"QM00001             ");
        assert_eq!(vpd_serial(&p).as_deref(), Some("QM00001"));
        assert_eq!(vpd_serial(&[0, 0x80, 0, 200]), None);
        assert_eq!(vpd_serial(&[0, 0x83, 0, 1, b'x']), None);
        assert_eq!(vpd_serial(&[0, 0x80]), None);
    }

    #[test]
    fn transports_and_paths() {
        let nvme = "/sys/devices/pci0000:00/0000:00:04.0/nvme/nvme0/nvme0n1";
        let sata = "/sys/devices/pci0000:00/0000:00:1f.2/ata3/host2/target2:0:0/2:0:0:0/block/sda";
        let vscsi =
            "/sys/devices/pci0000:00/0000:00:05.0/virtio3/host6/target6:0:0/6:0:0:0/block/sdb";
        let vblk = "/sys/devices/pci0000:00/0000:00:02.0/virtio1/block/vda";
        let usb = "/sys/devices/pci0000:00/0000:00:14.0/usb2/2-1/2-1:1.0/host7/target7:0:0/7:0:0:0/block/sdc";
        let sas = "/sys/devices/pci0000:00/0000:18:00.0/host0/port-0:0/end_device-0:0/target0:0:0/0:0:0:0/block/sdd";
        assert_eq!(transport(nvme, "nvme0n1").as_deref(), Some("nvme"));
        assert_eq!(transport(sata, "sda").as_deref(), Some("sata"));
        assert_eq!(transport(vscsi, "sdb"), None);
        assert_eq!(transport(vblk, "vda").as_deref(), Some("virtio"));
        assert_eq!(transport(usb, "sdc").as_deref(), Some("usb"));
        assert_eq!(transport(sas, "sdd").as_deref(), Some("sas"));
        let none = Path::new("/nonexistent");
        assert_eq!(
            path_id(nvme, "nvme0n1", None, none).as_deref(),
            Some("pci-0000:00:04.0-nvme-1")
        );
        assert_eq!(
            path_id(sata, "sda", Some("2:0:0:0"), none).as_deref(),
            Some("pci-0000:00:1f.2-ata-3.0")
        );
        assert_eq!(
            path_id(vscsi, "sdb", Some("6:0:0:0"), none).as_deref(),
            Some("pci-0000:00:05.0-scsi-6:0:0:0")
        );
        assert_eq!(
            path_id(vblk, "vda", None, none).as_deref(),
            Some("pci-0000:00:02.0")
        );
        assert_eq!(
            path_id("/sys/devices/virtual/block/x", "x", None, none),
            None
        );
    }
}
