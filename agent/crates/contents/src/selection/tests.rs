//! The skip list read as IPA 13 reads it: every hint and operator, every
//! serial and WWN, partitions by name, RAID volume names, bad entries.

use serde_json::{json, Value};

use super::*;

/// The skip list of the node `doc`.
fn from_node(doc: &Value) -> Result<SkipList, SkipError> {
    SkipList::of(&Node::from_document(doc.clone()).unwrap())
}

const GIB: u64 = 1 << 30;

fn candidate(name: &str, gib: u64) -> Candidate {
    Candidate {
        path: PathBuf::from(format!("/dev/{name}")),
        disk: Disk {
            model: Some("QEMU HARDDISK".into()),
            ..Disk::bare(&format!("/dev/{name}"), gib * GIB)
        },
        partitions: Vec::new(),
        raid_volumes: Vec::new(),
    }
}

fn protected(skip: serde_json::Value, cands: &[Candidate]) -> Vec<String> {
    let node = json!({"properties": {"skip_block_devices": skip}});
    let list = from_node(&node).unwrap();
    Protection::decide(&list, cands)
        .protected()
        .iter()
        .map(|(p, _)| p.display().to_string())
        .collect()
}

fn two_disks() -> Vec<Candidate> {
    let mut a = candidate("sda", 5);
    a.disk.serial = Some("SER-A".into());
    a.disk.serials = vec!["SER-A".into(), "QEMU_HARDDISK_SER-A".into()];
    a.disk.wwn = Some("0x5000c500000000aa".into());
    a.disk.wwns = vec!["0x5000c500000000aa".into(), "naa.5000c500000000aa".into()];
    let mut b = candidate("sdb", 6);
    b.disk.serial = Some("SER-B".into());
    b.disk.serials = vec!["SER-B".into()];
    vec![a, b]
}

#[test]
fn entries_are_root_device_hints() {
    let d = two_disks();
    assert_eq!(protected(json!([{"size": 5}]), &d), ["/dev/sda"]);
    assert_eq!(protected(json!([{"size": ">= 6"}]), &d), ["/dev/sdb"]);
    assert_eq!(
        protected(json!([{"size": "<range-in> [ 1 5 ]"}]), &d),
        ["/dev/sda"]
    );
    assert_eq!(protected(json!([{"serial": "ser-b"}]), &d), ["/dev/sdb"]);
    assert_eq!(
        protected(json!([{"serial": "QEMU_HARDDISK_SER-A"}]), &d),
        ["/dev/sda"]
    );
    assert_eq!(
        protected(json!([{"wwn": "naa.5000c500000000aa"}]), &d),
        ["/dev/sda"]
    );
    assert_eq!(protected(json!([{"name": "/dev/sdb"}]), &d), ["/dev/sdb"]);
    assert_eq!(
        protected(json!([{"model": "<in> qemu"}]), &d),
        ["/dev/sda", "/dev/sdb"]
    );
    // Every hint of an entry must match; any entry protects.
    assert!(protected(json!([{"size": 5, "serial": "SER-B"}]), &d).is_empty());
    assert_eq!(
        protected(json!([{"size": 5}, {"serial": "SER-B"}]), &d),
        ["/dev/sda", "/dev/sdb"]
    );
    assert!(protected(json!([]), &d).is_empty());
}

#[test]
fn the_reason_names_the_entry() {
    let node =
        json!({"properties": {"skip_block_devices": [{"name": "/dev/sdx"}, {"serial": "SER-A"}]}});
    let list = from_node(&node).unwrap();
    let why = list.reason(&two_disks()[0]).unwrap();
    assert_eq!(
        why,
        r#"matches properties.skip_block_devices[1] {"serial":"SER-A"}"#
    );
}

#[test]
fn a_partition_named_protects_its_whole_disk() {
    let mut d = two_disks();
    d[1].partitions = vec![("/dev/sdb1".into(), GIB), ("/dev/sdb2".into(), 5 * GIB)];
    let node = json!({"properties": {"skip_block_devices": [{"name": "/dev/sdb2"}]}});
    let list = from_node(&node).unwrap();
    let p = Protection::decide(&list, &d);
    assert_eq!(
        p.reason(Path::new("/dev/sdb")),
        Some(
            r#"its partition /dev/sdb2 matches properties.skip_block_devices[0] {"name":"/dev/sdb2"}"#
        )
    );
    assert!(p.reason(Path::new("/dev/sda")).is_none());
    // A size alone does not pick partitions (it would protect disks by
    // coincidence): sdb2 is 5 GiB, but only sda is.
    assert_eq!(protected(json!([{"size": 5}]), &d), ["/dev/sda"]);
}

#[test]
fn a_raid_volume_name_protects_the_disks_holding_it() {
    let mut d = two_disks();
    d[0].raid_volumes = vec!["data".into()];
    d[1].raid_volumes = vec!["root".into()];
    let node = json!({"properties": {"skip_block_devices": [{"volume_name": "data"}]}});
    let list = from_node(&node).unwrap();
    assert_eq!(list.volume_names().collect::<Vec<_>>(), ["data"]);
    let p = Protection::decide(&list, &d);
    assert_eq!(
        p.reason(Path::new("/dev/sda")),
        Some(r#"holds software RAID volume "data", kept by properties.skip_block_devices[0]"#)
    );
    assert_eq!(
        p.retain(vec!["/dev/sda".into(), "/dev/sdb".into()]),
        [PathBuf::from("/dev/sdb")]
    );
}

#[test]
fn bad_entries_are_errors_naming_the_entry() {
    for (skip, needle) in [
        (json!({"name": "/dev/sda"}), "must be a list"),
        (
            json!(["/dev/sda"]),
            "skip_block_devices[0] must be an object",
        ),
        (
            json!([{"name": "/dev/sda"}, {}]),
            "skip_block_devices[1] must be an object",
        ),
        (
            json!([{"volume_name": 3}]),
            "skip_block_devices[0] must be an object",
        ),
        (
            json!([{"size": "big"}]),
            r#"skip_block_devices[0] {"size":"big"}: root device hint "size" is not an integer"#,
        ),
        (json!([{"colour": "red"}]), "are invalid"),
    ] {
        let node = json!({"properties": {"skip_block_devices": skip}});
        let e = from_node(&node).unwrap_err().to_string();
        assert!(e.contains(needle), "{skip}: {e}");
    }
    assert!(from_node(&json!({})).unwrap().is_empty());
    assert!(
        from_node(&json!({"properties": {"skip_block_devices": null}}))
            .unwrap()
            .is_empty()
    );
}
