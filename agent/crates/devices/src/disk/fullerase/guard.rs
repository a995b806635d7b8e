//! What `erase_devices` must not erase (PROTOCOL.md §7.2, §7.5): the virtual-media
//! device the ramdisk may have booted from, Linux RAID members (skipped with
//! a note), and disks holding shared cluster filesystems (GPFS and VMFS
//! partition types, gfs2), which abort the erase with a protected-device
//! error unless the operator turned the guard off: the kernel's
//! `ipa-guard-special-filesystems=0`, or the node's
//! `driver_internal_info.wipe_special_filesystems` set to `false` — IPA
//! 13's reading (`safety_check_block_device`: the check runs when the key
//! is absent or true), kept so a node means here what it meant there.

use std::fs::File;
use std::path::Path;

use ironic_types::node::DriverInternalInfo;

use crate::disk::probe::probe_value;
use crate::disk::table;

/// Label of the virtual-media device Ironic attaches.
const VIRTUAL_MEDIA: &str = "/dev/disk/by-label/ir-vfd-dev";
/// GPT partition types of shared cluster filesystems.
const SPECIAL_TYPES: &[(&str, &str)] = &[
    ("37AFFC90-EF7D-4E96-91C3-2D7AE055B174", "IBM GPFS"),
    ("AA31E02A-400F-11DB-9590-000C2911D1B8", "VMware VMFS"),
];
/// MBR partition type of VMFS.
const VMFS_MBR: u8 = 0xfb;

/// Whether the node turns the guard off (IPA 13: an explicit `false` in
/// `driver_internal_info.wipe_special_filesystems`).
pub fn wipe_special_allowed(info: &DriverInternalInfo) -> bool {
    info.wipe_special_filesystems == Some(false)
}

/// How to let a guarded erase go on, for messages.
pub const HOW_TO_ALLOW: &str = "boot the ramdisk with ipa-guard-special-filesystems=0 (or set the node's driver_internal_info.wipe_special_filesystems to false, as IPA 13 reads it)";

/// A reason to skip `device` quietly, if any.
pub fn skip_reason(device: &Path, file: &File, size: u64) -> Option<String> {
    let vm = std::fs::canonicalize(VIRTUAL_MEDIA).ok();
    if vm.is_some() && vm == std::fs::canonicalize(device).ok() {
        return Some("the virtual-media device".into());
    }
    (probe_value(file, 0, size, "TYPE").as_deref() == Some("linux_raid_member"))
        .then(|| "a Linux RAID member".into())
}

/// The first of `devices` (disks, partitions) holding a special
/// filesystem, with what was found; read-only probes, nothing written.
/// IPA 13 checks each device as it reaches it (`safety_check_block_device`);
/// checking all first means a refusal leaves every device as it was.
pub fn first_special(devices: &[std::path::PathBuf]) -> Option<(std::path::PathBuf, String)> {
    devices.iter().find_map(|d| {
        let f = File::open(d).ok()?;
        let size = crate::disk::ioctl::size_bytes(&f)
            .or_else(|_| f.metadata().map(|m| m.len()))
            .ok()?;
        let sector = crate::disk::ioctl::logical_sector_size(&f).map_or(512, u64::from);
        special_filesystem(&f, size, sector).map(|why| (d.clone(), why))
    })
}

/// The special filesystem found on the disk, if any.
pub fn special_filesystem(file: &File, size: u64, sector: u64) -> Option<String> {
    if probe_value(file, 0, size, "TYPE").as_deref() == Some("gfs2") {
        return Some("a gfs2 filesystem".into());
    }
    let t = table::read(file, sector).ok()??;
    for p in &t.parts {
        if p.mbr_type == VMFS_MBR {
            return Some(format!("partition {} has the VMFS type 0xfb", p.number));
        }
        for (guid, name) in SPECIAL_TYPES {
            let bytes = uuid::Uuid::parse_str(guid)
                .expect("valid GUID")
                .to_bytes_le();
            if p.type_guid == bytes {
                return Some(format!("partition {} has the {name} type", p.number));
            }
        }
        if probe_value(file, p.start, p.len, "TYPE").as_deref() == Some("gfs2") {
            return Some(format!("partition {} holds a gfs2 filesystem", p.number));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use agent_testkit::sparse_disk;
    use serde_json::json;

    #[test]
    fn vmfs_and_gpfs_partitions_are_found_and_plain_disks_are_not() {
        let dir = tempfile::tempdir().unwrap();
        let size = 64 << 20;
        let plain = sparse_disk(dir.path(), 64, "label: gpt\nname=root\n");
        assert_eq!(
            special_filesystem(&File::open(&plain).unwrap(), size, 512),
            None
        );
        let vmfs = sparse_disk(
            dir.path(),
            64,
            "label: gpt\nsize=8MiB\ntype=AA31E02A-400F-11DB-9590-000C2911D1B8\n",
        );
        let why = special_filesystem(&File::open(&vmfs).unwrap(), size, 512).unwrap();
        assert!(why.contains("partition 2") && why.contains("VMFS"), "{why}");
        let mbr = sparse_disk(dir.path(), 64, "label: dos\ntype=fb\n");
        assert!(special_filesystem(&File::open(&mbr).unwrap(), size, 512)
            .unwrap()
            .contains("0xfb"));
        // IPA 13's reading: guarded unless an explicit false.
        let info = |v| serde_json::from_value::<DriverInternalInfo>(v).unwrap();
        assert!(!wipe_special_allowed(&info(json!({}))));
        assert!(!wipe_special_allowed(&info(
            json!({"wipe_special_filesystems": true})
        )));
        assert!(!wipe_special_allowed(&info(
            json!({"wipe_special_filesystems": "false"})
        )));
        assert!(wipe_special_allowed(&info(
            json!({"wipe_special_filesystems": false})
        )));
    }
}
