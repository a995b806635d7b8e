//! Software RAID on fixtures: configuration validation (IPA's rules and
//! messages), member choice by device hints, the partition plan under UEFI
//! and BIOS with its failures, and the md superblock (checked against the
//! kernel's layout and read back by libblkid).

use std::io::Write;
use std::path::PathBuf;

use serde_json::{json, Value};

use super::config::{self, Level, Size};
use super::plan::{self, MemberDisk, PlanError};
use super::superblock::{self, ArrayInfo, MemberInfo};
use crate::partimage::params::{BootMode, Label};
use agent_devices::inventory::Disk;

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;

fn disk(name: &str, size_gib: u64, serial: &str) -> Disk {
    Disk {
        model: Some("QEMU HARDDISK".into()),
        serial: Some(serial.into()),
        ..Disk::bare(&format!("/dev/{name}"), size_gib * GIB)
    }
}

fn geo(name: &str, size_gib: u64) -> MemberDisk {
    MemberDisk {
        path: PathBuf::from(format!("/dev/{name}")),
        sector: 512,
        total: size_gib * GIB / 512,
    }
}

fn parse(v: Value, disks: usize) -> Result<Option<config::RaidConfig>, config::ConfigError> {
    config::parse(&v, "node-1", disks)
}

fn problems(v: Value, disks: usize) -> Vec<String> {
    parse(v, disks).expect_err("must be refused").problems
}

#[test]
fn a_mirror_and_a_max_stripe_parse() {
    let cfg = parse(
        json!({"logical_disks": [
            {"controller": "software", "raid_level": "1", "size_gb": 10, "volume_name": "root", "is_root_volume": true},
            {"controller": "software", "raid_level": "0", "size_gb": "MAX"}
        ]}),
        2,
    )
    .unwrap()
    .unwrap();
    assert_eq!(cfg.logical_disks.len(), 2);
    assert_eq!(cfg.logical_disks[0].level, Level::R1);
    assert_eq!(cfg.logical_disks[0].size, Size::Gib(10));
    assert_eq!(cfg.logical_disks[0].volume_name.as_deref(), Some("root"));
    assert_eq!(cfg.logical_disks[0].root_volume, Some(true));
    assert_eq!(cfg.logical_disks[1].size, Size::Max);
    assert_eq!(cfg.logical_disks[1].root_volume, None);
}

#[test]
fn no_software_volume_means_nothing_to_do() {
    assert_eq!(parse(json!({}), 2).unwrap(), None);
    assert_eq!(
        parse(
            json!({"logical_disks": [{"controller": "PERC", "raid_level": "1", "size_gb": 10}]}),
            2
        )
        .unwrap(),
        None
    );
}

#[test]
fn ipa_rules_are_enforced_with_ipa_messages() {
    let p = problems(
        json!({"logical_disks": [
            {"controller": "software", "raid_level": "0", "size_gb": "MAX", "is_root_volume": true, "volume_name": "a"},
            {"controller": "software", "raid_level": "1", "size_gb": "MAX", "is_root_volume": true, "volume_name": "a"}
        ]}),
        2,
    );
    assert!(
        p.contains(
            &"Software RAID Configuration requires RAID-1 for the first logical disk".to_string()
        ),
        "{p:?}"
    );
    assert!(
        p.contains(&"Software RAID can have only one RAID device with size 'MAX'".to_string()),
        "{p:?}"
    );
    assert!(
        p.contains(&"Duplicate software RAID device name a detected".to_string()),
        "{p:?}"
    );
    assert!(
        p.contains(&"Software RAID configuration allows only one logical disk to be marked as is_root_volume".to_string()),
        "{p:?}"
    );
    let err = parse(json!({"logical_disks": []}), 2).unwrap_err();
    assert_eq!(
        err.to_string(),
        "Could not validate Software RAID config for node-1: RAID config contains no logical disks"
    );
    let p = problems(
        json!({"logical_disks": [
            {"controller": "software", "raid_level": "1", "size_gb": 10},
            {"controller": "software", "raid_level": "1", "size_gb": 10},
            {"controller": "software", "raid_level": "1", "size_gb": 10}
        ]}),
        2,
    );
    assert!(
        p.contains(&"Software RAID configuration requires one or two logical disks".to_string())
    );
    let p = problems(
        json!({"logical_disks": [
            {"controller": "software", "raid_level": "1", "size_gb": 10},
            {"controller": "hardware", "raid_level": "1", "size_gb": 10}
        ]}),
        2,
    );
    assert!(p[0].contains("'controller'='software'"), "{p:?}");
}

#[test]
fn levels_sizes_and_physical_disks_are_checked() {
    let p = problems(
        json!({"logical_disks": [
            {"controller": "software", "raid_level": "1", "size_gb": 10},
            {"controller": "software", "raid_level": "50", "size_gb": 10}
        ]}),
        4,
    );
    assert_eq!(
        p,
        vec!["Software RAID configuration does not support RAID level 50".to_string()]
    );
    let p = problems(
        json!({"logical_disks": [
            {"controller": "software", "raid_level": "1", "size_gb": 10},
            {"controller": "software", "raid_level": "5", "size_gb": "MAX"}
        ]}),
        2,
    );
    assert_eq!(
        p,
        vec!["Software RAID configuration is not possible for RAID level 5 with only 2 block devices found.".to_string()]
    );
    let p = problems(
        json!({"logical_disks": [{"controller": "software", "raid_level": "1", "size_gb": -3}]}),
        2,
    );
    assert!(p[0].contains("size_gb -3"), "{p:?}");
    let p = problems(
        json!({"logical_disks": [{"controller": "software", "raid_level": "1", "size_gb": "lots"}]}),
        2,
    );
    assert!(p[0].contains("size_gb \"lots\""), "{p:?}");
    let p = problems(
        json!({"logical_disks": [{"controller": "software", "raid_level": "1", "size_gb": 10, "physical_disks": [{"name": "/dev/sda"}]}]}),
        2,
    );
    assert!(p[0].starts_with(
        "The physical_disks parameter for software RAID must be a list with at least 2 items"
    ));
    let p = problems(
        json!({"logical_disks": [{"controller": "software", "raid_level": "1", "size_gb": 10, "physical_disks": ["/dev/sda", "/dev/sdb"]}]}),
        2,
    );
    assert!(
        p[0].ends_with("must be a list of device hints (dictionaries)"),
        "{p:?}"
    );
    let p = problems(
        json!({"logical_disks": [{"controller": "software", "raid_level": "1", "size_gb": 10, "volume_name": "a/b"}]}),
        2,
    );
    assert!(p[0].contains("volume_name \"a/b\""), "{p:?}");
    // "1+0" is Ironic's spelling of md's raid10.
    let cfg = parse(
        json!({"logical_disks": [
            {"controller": "software", "raid_level": "1", "size_gb": 10},
            {"controller": "software", "raid_level": "1+0", "size_gb": "MAX"}
        ]}),
        4,
    )
    .unwrap()
    .unwrap();
    assert_eq!(cfg.logical_disks[1].level.md_level(), 10);
    assert_eq!(cfg.logical_disks[1].level.layout(), 0x102);
}

fn mirror(extra: Value) -> config::RaidConfig {
    let mut ld = json!({"controller": "software", "raid_level": "1", "size_gb": "MAX"});
    for (k, v) in extra.as_object().unwrap() {
        ld[k] = v.clone();
    }
    parse(json!({"logical_disks": [ld]}), 3).unwrap().unwrap()
}

#[test]
fn physical_disks_pick_disks_by_hints() {
    let disks = vec![
        disk("sda", 20, "A1"),
        disk("sdb", 20, "B2"),
        disk("vda", 40, "C3"),
    ];
    let cfg = mirror(json!({"physical_disks": [{"serial": "C3"}, {"size": ">= 10"}]}));
    assert_eq!(
        plan::select_members(&disks, &cfg).unwrap(),
        vec![vec!["/dev/vda".to_string(), "/dev/sda".to_string()]]
    );
    // The same hints twice take two different disks.
    let cfg = mirror(json!({"physical_disks": [{"size": 20}, {"size": 20}]}));
    assert_eq!(
        plan::select_members(&disks, &cfg).unwrap(),
        vec![vec!["/dev/sda".to_string(), "/dev/sdb".to_string()]]
    );
    // No physical_disks: every disk.
    assert_eq!(
        plan::select_members(&disks, &mirror(json!({}))).unwrap()[0].len(),
        3
    );
}

#[test]
fn a_missing_member_is_named_with_the_reasons() {
    let disks = vec![disk("sda", 20, "A1"), disk("sdb", 20, "B2")];
    let cfg = mirror(
        json!({"volume_name": "root", "physical_disks": [{"serial": "A1"}, {"serial": "ZZ"}]}),
    );
    let e = plan::select_members(&disks, &cfg).unwrap_err();
    assert!(matches!(e, PlanError::NoCandidate { .. }));
    let msg = e.to_string();
    assert!(
        msg.contains("{\"serial\":\"ZZ\"}")
            && msg.contains("logical disk root")
            && msg.contains("/dev/sda"),
        "{msg}"
    );
    let cfg = mirror(json!({"physical_disks": [{"serial": "A1"}, {"serial": "A1"}]}));
    let e = plan::select_members(&disks, &cfg).unwrap_err();
    assert!(e.to_string().contains("No candidates left"), "{e}");
    // Only one disk: a mirror cannot be built.
    let e = plan::select_members(&disks[..1], &mirror(json!({}))).unwrap_err();
    assert_eq!(
        e.to_string(),
        "logical disk md0 (RAID level 1) needs at least 2 disks, 1 available: /dev/sda"
    );
}

#[test]
fn uefi_mirror_keeps_an_esp_on_every_member() {
    let cfg = parse(
        json!({"logical_disks": [
            {"controller": "software", "raid_level": "1", "size_gb": 10, "volume_name": "root"},
            {"controller": "software", "raid_level": "0", "size_gb": "MAX"}
        ]}),
        2,
    )
    .unwrap()
    .unwrap();
    let members = vec![vec!["/dev/sda".to_string(), "/dev/sdb".to_string()]; 2];
    let p = plan::plan(
        &cfg,
        &members,
        &[geo("sda", 40), geo("sdb", 30)],
        BootMode::Uefi,
        Label::Msdos,
    )
    .unwrap();
    assert_eq!(p.label, Label::Gpt, "UEFI always uses GPT");
    assert_eq!(p.disks.len(), 2);
    for d in &p.disks {
        assert_eq!(d.esp, Some(1));
        assert_eq!(d.parts[0].start, MIB / 512);
        assert_eq!(d.parts[0].sectors, plan::ESP_MIB * MIB / 512);
        assert_eq!(d.parts[0].gpt_type, plan::esp_type());
        // The mirror: 10 GiB of data plus md's 1 MiB data offset, from 551 MiB.
        assert_eq!(d.parts[1].start, 551 * MIB / 512);
        assert_eq!(d.parts[1].sectors, (10 * GIB + MIB) / 512);
        assert_eq!(d.parts[1].gpt_type, plan::linux_raid_type());
        assert_eq!(d.parts[1].name, "root");
    }
    let root = &p.arrays[0];
    assert_eq!(
        root.members,
        vec![
            (PathBuf::from("/dev/sda"), 2),
            (PathBuf::from("/dev/sdb"), 2)
        ]
    );
    assert_eq!(root.size_bytes(), 10 * GIB);
    // MAX takes what the smaller disk has left: the same on both members.
    let max = &p.arrays[1];
    assert_eq!(max.name, "md1");
    assert_eq!(p.disks[0].parts[2].sectors, p.disks[1].parts[2].sectors);
    let end = p.disks[1].parts[2].start + p.disks[1].parts[2].sectors;
    let (_, usable) = agent_devices::disk::table::create::gpt_usable(512, 30 * GIB / 512);
    assert!(
        end <= usable && usable - end < MIB / 512 * 2,
        "MAX fills sdb: {end} of {usable}"
    );
    assert_eq!(max.size_bytes(), 2 * max.data_sectors * 512);
}

#[test]
fn a_max_volume_listed_first_is_numbered_last_as_ipa_does() {
    // IPA 13 moves the MAX volume last, then numbers: the 10 GiB stripe is
    // md0 (named md0) on partition 2, the MAX mirror md1 on partition 3.
    let cfg = parse(
        json!({"logical_disks": [
            {"controller": "software", "raid_level": "1", "size_gb": "MAX", "is_root_volume": true},
            {"controller": "software", "raid_level": "0", "size_gb": 10}
        ]}),
        2,
    )
    .unwrap()
    .unwrap();
    assert_eq!(plan::md_numbers(&cfg), [1, 0]);
    let members = vec![vec!["/dev/sda".to_string(), "/dev/sdb".to_string()]; 2];
    let p = plan::plan(
        &cfg,
        &members,
        &[geo("sda", 40), geo("sdb", 40)],
        BootMode::Uefi,
        Label::Gpt,
    )
    .unwrap();
    let shape: Vec<_> = p
        .arrays
        .iter()
        .map(|a| {
            (
                a.index,
                a.name.as_str(),
                a.level.ironic(),
                a.root_volume == Some(true),
                a.members[0].1,
            )
        })
        .collect();
    assert_eq!(
        shape,
        [(0, "md0", "0", false, 2), (1, "md1", "1", true, 3)],
        "{shape:?}"
    );
    // The stripe: 5 GiB of data per member plus md's 1 MiB data offset.
    assert_eq!(p.disks[0].parts[1].sectors, (5 * GIB + MIB) / 512);
    // Errors name the volume by that number too.
    let e = plan::select_members(&[disk("sda", 40, "A")], &cfg).unwrap_err();
    assert!(e.to_string().contains("md1"), "{e}");
}

#[test]
fn bios_layouts_follow_the_table_type() {
    let cfg = mirror(json!({"size_gb": 4}));
    let members = vec![vec!["/dev/sda".to_string(), "/dev/sdb".to_string()]];
    let gpt = plan::plan(
        &cfg,
        &members,
        &[geo("sda", 8), geo("sdb", 8)],
        BootMode::Bios,
        Label::Gpt,
    )
    .unwrap();
    assert_eq!(gpt.disks[0].bios_boot, Some(1));
    assert_eq!(gpt.disks[0].parts[0].gpt_type, plan::bios_boot_type());
    assert_eq!(
        gpt.disks[0].parts[1].start,
        8 * MIB / 512,
        "IPA's 8 MiB start"
    );
    let mbr = plan::plan(
        &cfg,
        &members,
        &[geo("sda", 8), geo("sdb", 8)],
        BootMode::Bios,
        Label::Msdos,
    )
    .unwrap();
    assert_eq!(mbr.label, Label::Msdos);
    assert_eq!(mbr.disks[0].parts.len(), 1);
    assert_eq!(mbr.disks[0].parts[0].start, MIB / 512);
    assert_eq!(mbr.disks[0].parts[0].mbr_type, 0xfd);
}

#[test]
fn sizes_are_array_sizes_for_every_level() {
    let members4 = vec![
        vec!["/dev/sda".to_string(), "/dev/sdb".to_string()],
        vec![
            "/dev/sda".to_string(),
            "/dev/sdb".to_string(),
            "/dev/sdc".to_string(),
            "/dev/sdd".to_string(),
        ],
    ];
    let geos: Vec<MemberDisk> = ["sda", "sdb", "sdc", "sdd"]
        .iter()
        .map(|n| geo(n, 40))
        .collect();
    for (level, per_member_gib_x2) in [("0", 5), ("1+0", 10), ("5", 7), ("6", 10)] {
        let cfg = parse(
            json!({"logical_disks": [
                {"controller": "software", "raid_level": "1", "size_gb": 1},
                {"controller": "software", "raid_level": level, "size_gb": 10}
            ]}),
            4,
        )
        .unwrap()
        .unwrap();
        let p = plan::plan(&cfg, &members4, &geos, BootMode::Bios, Label::Gpt).unwrap();
        let a = &p.arrays[1];
        assert!(
            a.size_bytes() >= 10 * GIB,
            "level {level}: {} bytes",
            a.size_bytes()
        );
        assert!(
            a.size_bytes() < 10 * GIB + 4 * MIB,
            "level {level}: {} bytes",
            a.size_bytes()
        );
        // Per member: size / data disks (rounded up to a MiB).
        let approx = a.data_sectors * 512 * 2 / GIB;
        assert!(
            approx.abs_diff(per_member_gib_x2) <= 1,
            "level {level}: {approx}"
        );
        assert_eq!(a.members.len(), 4);
        assert_eq!(
            a.data_sectors % u64::from(a.level.chunk_sectors().max(1)),
            0
        );
    }
}

#[test]
fn no_room_is_a_precise_error() {
    let members = vec![vec!["/dev/sda".to_string(), "/dev/sdb".to_string()]];
    // A 20 GiB mirror on a 40 GiB and a 16 GiB disk.
    let e = plan::plan(
        &mirror(json!({"size_gb": 20})),
        &members,
        &[geo("sda", 40), geo("sdb", 16)],
        BootMode::Uefi,
        Label::Gpt,
    )
    .unwrap_err();
    assert!(matches!(e, PlanError::NoRoom { .. }));
    assert!(e.to_string().starts_with("/dev/sdb has no room for logical disk md0 (20 GiB at RAID level 1): 20481 MiB needed from 551 MiB"), "{e}");
    // A disk too small for the ESP itself.
    let tiny = MemberDisk {
        path: PathBuf::from("/dev/sdb"),
        sector: 512,
        total: 300 * MIB / 512,
    };
    let e = plan::plan(
        &mirror(json!({})),
        &members,
        &[geo("sda", 40), tiny],
        BootMode::Uefi,
        Label::Gpt,
    )
    .unwrap_err();
    assert!(
        e.to_string().starts_with(
            "/dev/sdb has no room for the EFI system partition: 550 MiB needed from 1 MiB"
        ),
        "{e}"
    );
    // MAX with nothing left after the ESP.
    let small = MemberDisk {
        path: PathBuf::from("/dev/sdb"),
        sector: 512,
        total: 552 * MIB / 512,
    };
    let e = plan::plan(
        &mirror(json!({})),
        &members,
        &[geo("sda", 40), small],
        BootMode::Uefi,
        Label::Gpt,
    )
    .unwrap_err();
    assert!(
        e.to_string().contains("no room for logical disk md0 (MAX"),
        "{e}"
    );
    // A sector size GPT cannot use is refused.
    let odd = MemberDisk {
        path: PathBuf::from("/dev/sdb"),
        sector: 520,
        total: 1 << 24,
    };
    let e = plan::plan(
        &mirror(json!({})),
        &members,
        &[geo("sda", 40), odd],
        BootMode::Uefi,
        Label::Gpt,
    )
    .unwrap_err();
    assert!(matches!(e, PlanError::Sector { .. }), "{e}");
}

fn array_info() -> ArrayInfo {
    ArrayInfo {
        uuid: [0x11; 16],
        name: "root".into(),
        ctime: 1_700_000_000,
        level: 1,
        layout: 0,
        chunk_sectors: 0,
        raid_disks: 2,
        size: 2048 * 10,
        resync_offset: 0,
    }
}

#[test]
fn superblock_layout_and_checksum_match_the_kernel() {
    let member = MemberInfo {
        role: 1,
        uuid: [0x22; 16],
        data_offset: 2048,
        data_size: 2048 * 11,
        super_offset: 8,
    };
    let sb = superblock::encode(&array_info(), &member);
    assert_eq!(sb.len(), 512);
    assert_eq!(&sb[0..4], &0xa92b_4efcu32.to_le_bytes());
    assert_eq!(&sb[4..8], &1u32.to_le_bytes());
    assert_eq!(&sb[32..36], b"root");
    assert_eq!(&sb[144..152], &8u64.to_le_bytes(), "super_offset");
    assert_eq!(&sb[160..164], &1u32.to_le_bytes(), "dev_number");
    assert_eq!(&sb[220..224], &128u32.to_le_bytes(), "max_dev");
    assert_eq!(&sb[256..260], &[0, 0, 1, 0], "roles 0 and 1");
    assert_eq!(&sb[260..262], &[0xff, 0xff], "spare slots");
    // calc_sb_1_csum: 32-bit sum of the little-endian words with the
    // checksum field zero, folded once.
    let mut sum: u64 = 0;
    for (i, w) in sb.chunks(4).enumerate() {
        if i != 216 / 4 {
            sum += u64::from(u32::from_le_bytes([w[0], w[1], w[2], w[3]]));
        }
    }
    let folded = ((sum & 0xffff_ffff) + (sum >> 32)) as u32;
    assert_eq!(&sb[216..220], &folded.to_le_bytes());
    let found = superblock::decode(&sb, 8).unwrap();
    assert_eq!(found.name, "root");
    assert_eq!(found.role, Some(1));
    assert_eq!(found.raid_disks, 2);
    assert_eq!(found.data_offset, 2048);
    assert_eq!(found.uuid_text(), "11111111:11111111:11111111:11111111");
    // Anywhere else, or with one bit changed, it is not a superblock.
    assert!(superblock::decode(&sb, 0).is_none());
    let mut bad = sb.clone();
    bad[100] ^= 1;
    assert!(superblock::decode(&bad, 8).is_none());
}

#[test]
fn superblock_offsets_are_the_kernels() {
    // super_1_load: 1.0 at (size - 8 KiB) rounded down to 4 KiB, 1.1 at 0, 1.2 at 4 KiB.
    assert_eq!(
        superblock::offsets(1_000_003),
        [(1_000_003 - 16) & !7, 0, 8]
    );
    assert_eq!(superblock::v090_offset(64 * MIB), Some(64 * MIB - 65536));
    assert_eq!(superblock::v090_offset(1000), None);
    assert_eq!(
        super::ops::candidates(64 * MIB),
        vec![0, 4096, 64 * MIB - 65536, 64 * MIB - 8192]
    );
}

#[test]
fn a_version_090_superblock_makes_a_member() {
    // mdp_super_t at the last 64 KiB-aligned 64 KiB: magic, 0, 90 (LE).
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("member.img");
    let f = std::fs::File::create(&path).unwrap();
    f.set_len(64 * MIB + 4096).unwrap();
    let dev = agent_devices::disk::Device::open(&path).unwrap();
    assert_eq!(super::member::member_reason(&dev), None);
    let mut sb = Vec::new();
    for v in [superblock::V090_MAGIC, 0, 90] {
        sb.extend_from_slice(&v.to_le_bytes());
    }
    use std::os::unix::fs::FileExt;
    f.write_all_at(&sb, 64 * MIB - 65536).unwrap();
    let why = super::member::member_reason(&dev).expect("a 0.90 member");
    assert!(why.contains("0.90"), "{why}");
    // Version 1 at that place, or 0.90's magic with another version: no.
    f.write_all_at(&1u32.to_le_bytes(), 64 * MIB - 65536 + 4)
        .unwrap();
    assert_eq!(super::member::member_reason(&dev), None);
}

#[test]
fn libblkid_reads_the_superblock_as_an_md_member() {
    // A 16 MiB member with a v1.2 superblock: libblkid checks magic,
    // position and checksum, then reports linux_raid_member with the name.
    let mut f = tempfile::tempfile().unwrap();
    f.write_all(&vec![0u8; 16 << 20]).unwrap();
    let member = MemberInfo {
        role: 0,
        uuid: [0x33; 16],
        data_offset: 2048,
        data_size: (16 << 20) / 512 - 2048,
        super_offset: 8,
    };
    let sb = superblock::encode(&array_info(), &member);
    std::os::unix::fs::FileExt::write_all_at(&f, &sb, 4096).unwrap();
    let probe = |key| agent_devices::disk::probe::probe_value(&f, 0, 16 << 20, key);
    assert_eq!(probe("TYPE").as_deref(), Some("linux_raid_member"));
    assert_eq!(probe("LABEL").as_deref(), Some("root"));
    assert_eq!(
        probe("UUID").as_deref(),
        Some("11111111-1111-1111-1111-111111111111")
    );
    // A 1.0 superblock at the end is found too.
    let g = tempfile::tempfile().unwrap();
    g.set_len(16 << 20).unwrap();
    let at = superblock::offsets((16 << 20) / 512)[0];
    let sb = superblock::encode(
        &ArrayInfo {
            name: "esp".into(),
            ..array_info()
        },
        &MemberInfo {
            super_offset: at,
            data_offset: 0,
            data_size: at,
            ..member
        },
    );
    std::os::unix::fs::FileExt::write_all_at(&g, &sb, at * 512).unwrap();
    assert_eq!(
        agent_devices::disk::probe::probe_value(&g, 0, 16 << 20, "LABEL").as_deref(),
        Some("esp")
    );
}

#[test]
fn personalities_and_arrays_are_read_from_fixtures() {
    let mdstat = "Personalities : [raid1] [raid0] [raid10] [raid6] [raid5] [raid4] \nmd0 : active raid1 vdb2[1] vda2[0]\n";
    assert_eq!(
        super::md::personalities(mdstat),
        vec!["raid1", "raid0", "raid10", "raid6", "raid5", "raid4"]
    );
    assert!(super::md::personalities("").is_empty());
    let root = tempfile::tempdir().unwrap();
    let md0 = root.path().join("sys/block/md0");
    std::fs::create_dir_all(md0.join("md")).unwrap();
    std::fs::create_dir_all(md0.join("slaves/vda2")).unwrap();
    std::fs::create_dir_all(md0.join("slaves/vdb2")).unwrap();
    std::fs::write(md0.join("md/level"), "raid1\n").unwrap();
    std::fs::write(md0.join("md/array_state"), "clean\n").unwrap();
    std::fs::write(md0.join("size"), "20480\n").unwrap();
    std::fs::create_dir_all(root.path().join("sys/block/md1/md")).unwrap();
    std::fs::write(root.path().join("sys/block/md1/md/array_state"), "clear\n").unwrap();
    std::fs::create_dir_all(root.path().join("sys/block/vda")).unwrap();
    let arrays = super::md::arrays(root.path());
    assert_eq!(arrays.len(), 2);
    assert_eq!(arrays[0].name, "md0");
    assert_eq!(arrays[0].members, vec!["vda2", "vdb2"]);
    assert_eq!(arrays[0].size, 20480 * 512);
    assert!(super::md::in_use(&arrays[0]));
    assert!(
        !super::md::in_use(&arrays[1]),
        "an empty, cleared md device is free"
    );
}

#[test]
fn member_disks_are_the_disks_of_the_member_partitions() {
    let root = tempfile::tempdir().unwrap();
    let md0 = root.path().join("sys/block/md0");
    std::fs::create_dir_all(md0.join("md")).unwrap();
    // Partitions vda2, vdb2 and a whole-disk member vdc, as sysfs links
    // them under /sys/class/block.
    let devices = root.path().join("sys/devices/virtio");
    for (disk, part) in [("vda", Some("vda2")), ("vdb", Some("vdb2")), ("vdc", None)] {
        let dir = match part {
            Some(p) => devices.join(disk).join(p),
            None => devices.join(disk),
        };
        std::fs::create_dir_all(&dir).unwrap();
        if part.is_some() {
            std::fs::write(dir.join("partition"), "2\n").unwrap();
        }
        let name = part.unwrap_or(disk);
        std::fs::create_dir_all(md0.join("slaves").join(name)).unwrap();
        std::fs::create_dir_all(root.path().join("sys/class/block")).unwrap();
        std::os::unix::fs::symlink(&dir, root.path().join("sys/class/block").join(name)).unwrap();
    }
    assert_eq!(
        super::md::member_disks(root.path(), "md0"),
        ["/dev/vda", "/dev/vdb", "/dev/vdc"].map(std::path::PathBuf::from)
    );
    assert!(super::md::member_disks(root.path(), "md9").is_empty());
}
