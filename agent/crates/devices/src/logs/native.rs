//! Parts of the log bundle IPA 13 makes with tools (`parted -l`,
//! `multipath -ll`, pyudev's properties), made here from the disks and
//! sysfs: every disk's partition table, the device-mapper multipath
//! devices with their paths, and each block device's and NIC's kernel
//! (`uevent`) and udev properties. Each part is bounded ([`MAX_PART`]).

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use crate::disk::table;

/// Largest part kept (the rest is cut with a note).
pub(crate) const MAX_PART: usize = 4 << 20;

/// Most devices described in `udev/`.
const MAX_DEVICES: usize = 512;

/// `(file name, contents)` of every native part; `root` is `/` live.
pub(crate) fn parts(root: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = vec![
        (
            "partitions".to_string(),
            bounded(partitions(root).into_bytes()),
        ),
        (
            "multipath".to_string(),
            bounded(multipath(root).into_bytes()),
        ),
    ];
    for (kind, dir) in [("block", "sys/class/block"), ("net", "sys/class/net")] {
        let Ok(entries) = fs::read_dir(root.join(dir)) else {
            continue;
        };
        let mut names: Vec<String> = entries
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n != "lo")
            .collect();
        names.sort();
        for name in names.into_iter().take(MAX_DEVICES) {
            let props = properties(root, &root.join(dir).join(&name), kind);
            let json = serde_json::to_vec_pretty(&props).unwrap_or_default();
            out.push((format!("udev/{name}.json"), bounded(json)));
        }
    }
    out
}

fn bounded(mut data: Vec<u8>) -> Vec<u8> {
    if data.len() > MAX_PART {
        data.truncate(MAX_PART);
        data.extend_from_slice(format!("\n[cut at {MAX_PART} bytes]\n").as_bytes());
    }
    data
}

/// `KEY=VALUE` lines (a `uevent` file, or the `E:` lines of udev's data).
fn pairs(text: &str, prefix: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| l.strip_prefix(prefix))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The kernel's and udev's properties of one block device or NIC (and of
/// the device behind it).
fn properties(root: &Path, dir: &Path, kind: &str) -> BTreeMap<String, BTreeMap<String, String>> {
    let read = |p: &Path| fs::read_to_string(p).unwrap_or_default();
    let mut out = BTreeMap::new();
    let uevent = pairs(&read(&dir.join("uevent")), "");
    let udev_key = match kind {
        "block" => read(&dir.join("dev")).trim().to_string(),
        _ => uevent.get("IFINDEX").cloned().unwrap_or_default(),
    };
    if !udev_key.is_empty() {
        let letter = if kind == "block" { "b" } else { "n" };
        let db = root
            .join("run/udev/data")
            .join(format!("{letter}{udev_key}"));
        let udev = pairs(&read(&db), "E:");
        if !udev.is_empty() {
            out.insert("udev".to_string(), udev);
        }
    }
    out.insert("uevent".to_string(), uevent);
    let device = pairs(&read(&dir.join("device/uevent")), "");
    if !device.is_empty() {
        out.insert("device".to_string(), device);
    }
    out
}

/// Every whole disk's partition table, as `parted -l` would summarize it.
pub(crate) fn partitions(root: &Path) -> String {
    let disks = crate::disk::whole_disks(&root.join("sys")).unwrap_or_default();
    let mut out = String::new();
    for d in disks {
        let name = d
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let dev = root.join("dev").join(&name);
        let sector: u64 = fs::read_to_string(
            root.join("sys/block")
                .join(&name)
                .join("queue/logical_block_size"),
        )
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(512);
        out.push_str(&format!("{}:\n", d.display()));
        let table = fs::File::open(&dev)
            .map_err(|e| e.to_string())
            .and_then(|f| table::read(&f, sector).map_err(|e| e.to_string()));
        match table {
            Ok(Some(t)) => {
                out.push_str(&format!(
                    "  table: {:?}, logical sector {sector} B\n",
                    t.kind
                ));
                for p in &t.parts {
                    out.push_str(&format!(
                        "  {:>3}  start {:>14}  length {:>14}  type {}  name {:?}\n",
                        p.number,
                        p.start,
                        p.len,
                        part_type(p),
                        p.name
                    ));
                }
            }
            Ok(None) => out.push_str("  no partition table\n"),
            Err(e) => out.push_str(&format!("  unreadable: {e}\n")),
        }
    }
    out
}

fn part_type(p: &table::Part) -> String {
    if p.type_guid == [0; 16] {
        format!("0x{:02x}", p.mbr_type)
    } else {
        uuid::Uuid::from_bytes_le(p.type_guid).to_string()
    }
}

/// The device-mapper devices with their names, UUIDs and paths, as
/// `multipath -ll` would name them.
pub(crate) fn multipath(root: &Path) -> String {
    let block = root.join("sys/block");
    let mut names: Vec<String> = fs::read_dir(&block)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("dm-"))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    let read = |p: std::path::PathBuf| fs::read_to_string(p).unwrap_or_default().trim().to_string();
    let mut out = String::new();
    for n in &names {
        let dir = block.join(n);
        let mut slaves: Vec<String> = fs::read_dir(dir.join("slaves"))
            .map(|d| {
                d.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        slaves.sort();
        out.push_str(&format!(
            "{n} name={} uuid={} size={} sectors paths=[{}]\n",
            read(dir.join("dm/name")),
            read(dir.join("dm/uuid")),
            read(dir.join("size")),
            slaves.join(", ")
        ));
    }
    if out.is_empty() {
        out.push_str("no device-mapper devices\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fixture_tree_gives_tables_maps_and_properties() {
        let root = tempfile::tempdir().unwrap();
        let r = root.path();
        // One disk with a GPT, one multipath device over two paths, a NIC.
        fs::create_dir_all(r.join("sys/block/vda/queue")).unwrap();
        fs::write(r.join("sys/block/vda/queue/logical_block_size"), "512\n").unwrap();
        fs::create_dir_all(r.join("dev")).unwrap();
        let disk = agent_testkit::sparse_disk(r, 8, "label: gpt\nname=root\n");
        fs::rename(disk, r.join("dev/vda")).unwrap();
        for n in ["sdb", "sdc"] {
            fs::create_dir_all(r.join("sys/block").join(n).join("holders/dm-0")).unwrap();
        }
        fs::create_dir_all(r.join("sys/block/dm-0/dm")).unwrap();
        fs::create_dir_all(r.join("sys/block/dm-0/slaves/sdb")).unwrap();
        fs::create_dir_all(r.join("sys/block/dm-0/slaves/sdc")).unwrap();
        fs::write(r.join("sys/block/dm-0/dm/name"), "mpatha\n").unwrap();
        fs::write(
            r.join("sys/block/dm-0/dm/uuid"),
            "mpath-naa.5000c500aa11bb22\n",
        )
        .unwrap();
        fs::write(r.join("sys/block/dm-0/size"), "2048\n").unwrap();
        fs::create_dir_all(r.join("sys/class/block/vda")).unwrap();
        fs::write(
            r.join("sys/class/block/vda/uevent"),
            "MAJOR=252\nMINOR=0\nDEVNAME=vda\nDEVTYPE=disk\n",
        )
        .unwrap();
        fs::write(r.join("sys/class/block/vda/dev"), "252:0\n").unwrap();
        fs::create_dir_all(r.join("run/udev/data")).unwrap();
        fs::write(
            r.join("run/udev/data/b252:0"),
            "S:disk/by-path/x\nE:ID_SERIAL=abc\n",
        )
        .unwrap();
        fs::create_dir_all(r.join("sys/class/net/eth0/device")).unwrap();
        fs::write(
            r.join("sys/class/net/eth0/uevent"),
            "INTERFACE=eth0\nIFINDEX=2\n",
        )
        .unwrap();
        fs::write(
            r.join("sys/class/net/eth0/device/uevent"),
            "DRIVER=virtio_net\n",
        )
        .unwrap();

        let parts: BTreeMap<String, String> = parts(r)
            .into_iter()
            .map(|(n, d)| (n, String::from_utf8(d).unwrap()))
            .collect();
        let t = &parts["partitions"];
        assert!(t.contains("/dev/dm-0:") && t.contains("/dev/vda:"), "{t}");
        assert!(
            t.contains("table: Gpt") && t.contains("name \"root\""),
            "{t}"
        );
        assert!(
            !t.contains("/dev/sdb"),
            "a multipath path is no disk of its own: {t}"
        );
        assert_eq!(
            parts["multipath"],
            "dm-0 name=mpatha uuid=mpath-naa.5000c500aa11bb22 size=2048 sectors paths=[sdb, sdc]\n"
        );
        let vda: serde_json::Value = serde_json::from_str(&parts["udev/vda.json"]).unwrap();
        assert_eq!(vda["udev"]["ID_SERIAL"], "abc");
        assert_eq!(vda["uevent"]["DEVTYPE"], "disk");
        let eth0: serde_json::Value = serde_json::from_str(&parts["udev/eth0.json"]).unwrap();
        assert_eq!(eth0["device"]["DRIVER"], "virtio_net");
    }

    #[test]
    fn parts_are_bounded() {
        let big = bounded(vec![b'x'; MAX_PART + 10]);
        assert!(big.len() < MAX_PART + 64);
        assert!(String::from_utf8_lossy(&big).ends_with("bytes]\n"));
    }
}
