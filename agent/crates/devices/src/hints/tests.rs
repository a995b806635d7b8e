//! Root device choice: every hint, every operator, the default and the
//! fail-closed cases.

use serde_json::{json, Value};

use super::*;

const GIB: u64 = 1 << 30;

fn disk(name: &str, size_gib: u64) -> Disk {
    Disk::bare(&format!("/dev/{name}"), size_gib * GIB)
}

/// sda: 60 GiB SAS HDD (PERC); sdb: 120 GiB SATA SSD; nvme0n1: 10 GiB; sdc: 2 GiB USB stick.
fn disks() -> Vec<Disk> {
    vec![
        Disk {
            model: Some("PERC H730".into()),
            vendor: Some("DELL".into()),
            serial: Some("61866da0".into()),
            wwn: Some("0x6b8ca3a0e2b1c000".into()),
            wwn_with_extension: Some("0x6b8ca3a0e2b1c0002a1b2c3d4e5f6071".into()),
            wwn_vendor_extension: Some("0x2a1b2c3d4e5f6071".into()),
            hctl: Some("0:2:0:0".into()),
            by_path: Some("/dev/disk/by-path/pci-0000:18:00.0-scsi-0:2:0:0".into()),
            rotational: true,
            tran: Some("sas".into()),
            ..disk("sda", 60)
        },
        Disk {
            model: Some("Samsung SSD 870".into()),
            vendor: Some("ATA".into()),
            serial: Some("S5XYNG0R123456".into()),
            wwn: Some("0x5002538e40a1b2c3".into()),
            hctl: Some("1:0:0:0".into()),
            by_path: Some("/dev/disk/by-path/pci-0000:00:17.0-ata-1.0".into()),
            tran: Some("sata".into()),
            ..disk("sdb", 120)
        },
        Disk {
            model: Some("QEMU NVMe Ctrl".into()),
            serial: Some("deadbeef".into()),
            wwn: Some("eui.0025388b91b2c3d4".into()),
            by_path: Some("/dev/disk/by-path/pci-0000:00:04.0-nvme-1".into()),
            tran: Some("nvme".into()),
            ..disk("nvme0n1", 10)
        },
        Disk {
            model: Some("Cruzer Blade".into()),
            vendor: Some("SanDisk".into()),
            tran: Some("usb".into()),
            removable: true,
            hctl: Some("7:0:0:0".into()),
            ..disk("sdc", 2)
        },
    ]
}

fn pick(hints: Value) -> String {
    choose(&disks(), Some(&hints))
        .unwrap_or_else(|e| panic!("{hints}: {e}"))
        .disk
        .name
}

fn fails(hints: Value) -> HintError {
    match choose(&disks(), Some(&hints)) {
        Ok(c) => panic!("{hints} chose {}", c.disk.name),
        Err(e) => e,
    }
}

#[test]
fn default_is_the_smallest_disk_of_at_least_4_gib() {
    let c = choose(&disks(), None).unwrap();
    assert_eq!(c.disk.name, "/dev/nvme0n1");
    assert!(c.reason.contains("smallest"), "{}", c.reason);
    let reasons: Vec<(&str, &str)> = c
        .rejected
        .iter()
        .map(|r| (r.name.as_str(), r.reason.as_str()))
        .collect();
    assert_eq!(reasons.len(), 3);
    assert!(
        reasons[0].1.starts_with("larger than /dev/nvme0n1"),
        "{reasons:?}"
    );
    assert!(reasons[2].0 == "/dev/sdc" && reasons[2].1.starts_with("smaller than 4 GiB"));
    // Empty hints are no hints.
    assert_eq!(pick(json!({})), "/dev/nvme0n1");
    assert_eq!(
        choose(&disks(), Some(&Value::Null)).unwrap().disk.name,
        "/dev/nvme0n1"
    );
}

#[test]
fn ties_are_broken_by_name_and_tiny_disks_fail() {
    let d = vec![disk("sdb", 8), disk("sda", 8), disk("sdz", 1)];
    let c = choose(&d, None).unwrap();
    assert_eq!(c.disk.name, "/dev/sda");
    assert!(c.rejected[0].reason.contains("same size as /dev/sda"));
    let e = choose(&[disk("sda", 3), disk("sdb", 1)], None).unwrap_err();
    assert!(matches!(e, HintError::NoDisk { .. }));
    let msg = e.to_string();
    assert!(msg.contains("/dev/sda: smaller than 4 GiB"), "{msg}");
    assert!(choose(&[], None)
        .unwrap_err()
        .to_string()
        .contains("no disks were found"));
}

#[test]
fn string_hints_with_every_operator() {
    assert_eq!(pick(json!({"name": "/dev/sdb"})), "/dev/sdb");
    assert_eq!(pick(json!({"name": "s== /dev/sdb"})), "/dev/sdb");
    assert_eq!(
        pick(json!({"model": "perc h730"})),
        "/dev/sda",
        "case-insensitive"
    );
    assert_eq!(pick(json!({"model": "<in> nvme"})), "/dev/nvme0n1");
    assert_eq!(
        pick(json!({"model": "<in> Samsung SSD"})),
        "/dev/sdb",
        "quoted spaces"
    );
    assert_eq!(pick(json!({"vendor": "<or> foo <or> ATA"})), "/dev/sdb");
    assert_eq!(pick(json!({"vendor": "s!= dell"})), "/dev/sdb");
    assert_eq!(pick(json!({"serial": "S5XYNG0R123456"})), "/dev/sdb");
    assert_eq!(pick(json!({"serial": "s< 7"})), "/dev/sda");
    assert_eq!(pick(json!({"serial": "s<= 61866da0"})), "/dev/sda");
    assert_eq!(pick(json!({"serial": "s> 7"})), "/dev/sdb");
    assert_eq!(pick(json!({"serial": "s>= deadbeef"})), "/dev/sdb");
    assert_eq!(pick(json!({"wwn": "0x5002538e40a1b2c3"})), "/dev/sdb");
    assert_eq!(pick(json!({"wwn": "eui.0025388b91b2c3d4"})), "/dev/nvme0n1");
    assert_eq!(
        pick(json!({"wwn_with_extension": "0x6b8ca3a0e2b1c0002a1b2c3d4e5f6071"})),
        "/dev/sda"
    );
    assert_eq!(
        pick(json!({"wwn_vendor_extension": "0x2a1b2c3d4e5f6071"})),
        "/dev/sda"
    );
    assert_eq!(pick(json!({"hctl": "1:0:0:0"})), "/dev/sdb");
    assert_eq!(
        pick(json!({"by_path": "/dev/disk/by-path/pci-0000:00:04.0-nvme-1"})),
        "/dev/nvme0n1"
    );
    assert_eq!(pick(json!({"tran": "sas"})), "/dev/sda");
    // A by-path link given as the name.
    assert_eq!(
        pick(json!({"name": "/dev/disk/by-path/pci-0000:00:17.0-ata-1.0"})),
        "/dev/sdb"
    );
}

#[test]
fn size_hints_in_gib_with_every_operator() {
    assert_eq!(pick(json!({"size": 120})), "/dev/sdb");
    assert_eq!(pick(json!({"size": "120"})), "/dev/sdb");
    assert_eq!(pick(json!({"size": "== 10"})), "/dev/nvme0n1");
    assert_eq!(pick(json!({"size": ">= 100"})), "/dev/sdb");
    assert_eq!(pick(json!({"size": "> 60"})), "/dev/sdb");
    assert_eq!(pick(json!({"size": "<= 10"})), "/dev/nvme0n1");
    assert_eq!(pick(json!({"size": "< 5"})), "/dev/sdc");
    assert_eq!(pick(json!({"size": "!= 60"})), "/dev/sdb");
    assert_eq!(
        pick(json!({"size": "= 61"})),
        "/dev/sdb",
        "legacy = means >="
    );
    assert_eq!(pick(json!({"size": "<or> 2 <or> 120"})), "/dev/sdb");
}

#[test]
fn rotational_and_combined_hints() {
    assert_eq!(pick(json!({"rotational": true})), "/dev/sda");
    assert_eq!(pick(json!({"rotational": "false"})), "/dev/sdb");
    assert_eq!(
        pick(json!({"rotational": false, "size": "< 50"})),
        "/dev/nvme0n1"
    );
    let c = choose(&disks(), Some(&json!({"rotational": false}))).unwrap();
    assert_eq!(c.disk.name, "/dev/sdb");
    let nvme = c
        .rejected
        .iter()
        .find(|r| r.name == "/dev/nvme0n1")
        .unwrap();
    assert!(nvme.reason.contains("also matches"), "{}", nvme.reason);
    let sda = c.rejected.iter().find(|r| r.name == "/dev/sda").unwrap();
    assert!(sda.reason.contains("rotational is true"), "{}", sda.reason);
}

#[test]
fn hints_that_match_nothing_fail_closed() {
    let e = fails(json!({"serial": "NOPE"}));
    let HintError::NoMatch { rejected, .. } = &e else {
        panic!("{e}")
    };
    assert_eq!(rejected.len(), 4, "every disk has a reason");
    let sdc = rejected.iter().find(|r| r.name == "/dev/sdc").unwrap();
    assert!(sdc.reason.contains("has no serial"), "{}", sdc.reason);
    let sda = rejected.iter().find(|r| r.name == "/dev/sda").unwrap();
    assert!(
        sda.reason.contains("\"61866da0\" does not match"),
        "{}",
        sda.reason
    );
    let msg = e.to_string();
    assert!(
        msg.starts_with("no disk matches the root device hints {\"serial\":\"NOPE\"}"),
        "{msg}"
    );
    // All hints must match: each one alone would.
    fails(json!({"model": "perc h730", "tran": "sata"}));
    fails(json!({"size": 11}));
    fails(json!({"name": "sdb"}));
    fails(json!({"hctl": "<in> 9:"}));
}

#[test]
fn invalid_hints_are_refused_not_ignored() {
    let e = fails(json!({"disk": "/dev/sda"}));
    assert!(matches!(e, HintError::Invalid(_)), "{e}");
    assert!(matches!(
        fails(json!({"size": "ten"})),
        HintError::Invalid(_)
    ));
}

#[test]
fn read_only_disks_are_never_chosen() {
    let mut d = disks();
    d[2].read_only = true; // nvme0n1, the default pick
    let c = choose(&d, None).unwrap();
    assert_eq!(c.disk.name, "/dev/sda");
    let nvme = c
        .rejected
        .iter()
        .find(|r| r.name == "/dev/nvme0n1")
        .unwrap();
    assert_eq!(nvme.reason, "read-only device");
    let e = choose(&d, Some(&json!({"name": "/dev/nvme0n1"}))).unwrap_err();
    assert!(
        e.to_string().contains("/dev/nvme0n1: read-only device"),
        "{e}"
    );
}

#[test]
fn every_serial_and_wwn_a_disk_reports_is_matched() {
    let mut d = disks();
    // sdb reports a second serial (udev's long one) and a second WWN.
    d[1].serials = vec![
        "S5XYNG0R123456".into(),
        "Samsung_SSD_870_S5XYNG0R123456".into(),
    ];
    d[1].wwns = vec!["0x5002538e40a1b2c3".into(), "naa.5002538e40a1b2c3".into()];
    let pick_in = |h: Value| choose(&d, Some(&h)).unwrap().disk.name;
    assert_eq!(
        pick_in(json!({"serial": "samsung_ssd_870_s5xyng0r123456"})),
        "/dev/sdb"
    );
    assert_eq!(pick_in(json!({"wwn": "naa.5002538e40a1b2c3"})), "/dev/sdb");
    assert_eq!(
        pick_in(json!({"serial": "<all-in> S5XYNG0R123456 Samsung_SSD_870_S5XYNG0R123456"})),
        "/dev/sdb"
    );
    let e = choose(
        &d,
        Some(&json!({"serial": "<all-in> S5XYNG0R123456 other"})),
    )
    .unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains("serial \"S5XYNG0R123456, Samsung_SSD_870_S5XYNG0R123456\" does not match"),
        "{msg}"
    );
}

#[test]
fn range_in_compares_numbers_within_bounds() {
    assert_eq!(pick(json!({"size": "<range-in> [ 100 200 ]"})), "/dev/sdb");
    assert_eq!(pick(json!({"size": "<range-in> [10 10]"})), "/dev/nvme0n1");
    assert_eq!(pick(json!({"size": "<range-in> (10 60]"})), "/dev/sda");
    assert_eq!(pick(json!({"size": "<range-in> ( 1 10 )"})), "/dev/sdc");
    fails(json!({"size": "<range-in> ( 10 60 )"}));
    // A string attribute that reads as a number.
    let mut d = disks();
    d[3].serial = Some("42".into());
    let c = choose(&d, Some(&json!({"serial": "<range-in> [ 40 50 )"}))).unwrap();
    assert_eq!(c.disk.name, "/dev/sdc");
}
