//! What `erase_devices` must not erase (PROTOCOL.md §7.2, §7.5): the virtual-media
//! device the ramdisk may have booted from, Linux RAID members (skipped with
//! a note), and disks holding shared cluster filesystems (GPFS and VMFS
//! partition types, gfs2), which abort the erase with a protected-device
//! error unless the operator allowed wiping them (`wipe_special_filesystems`
//! in `driver_internal_info` or `driver_info`, as IPA reads it).

use std::fs::File;
use std::path::Path;

use serde_json::Value;

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

/// Whether the operator allowed wiping special filesystems.
pub fn wipe_special_allowed(node: &Value) -> bool {
    ["driver_internal_info", "driver_info"]
        .iter()
        .any(|k| node[k]["wipe_special_filesystems"].as_bool() == Some(true))
}

/// A reason to skip `device` quietly, if any.
pub fn skip_reason(device: &Path, file: &File, size: u64) -> Option<String> {
    let vm = std::fs::canonicalize(VIRTUAL_MEDIA).ok();
    if vm.is_some() && vm == std::fs::canonicalize(device).ok() {
        return Some("the virtual-media device".into());
    }
    (probe_value(file, 0, size, "TYPE").as_deref() == Some("linux_raid_member"))
        .then(|| "a Linux RAID member".into())
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
    use crate::disk::table::tests::sparse_disk;
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
        assert!(!wipe_special_allowed(&json!({})));
        assert!(wipe_special_allowed(
            &json!({"driver_info": {"wipe_special_filesystems": true}})
        ));
    }
}
