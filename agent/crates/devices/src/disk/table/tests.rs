//! Tables made by `sfdisk` on sparse files; the results are read back by
//! `sfdisk --json`, which checks both GPT copies and their CRCs.

use super::*;
use agent_testkit::{sfdisk_json, sparse_disk};
use std::path::Path;

#[test]
fn gpt_gets_a_config_2_partition_in_the_last_64_mib_with_valid_crcs() {
    let dir = tempfile::tempdir().unwrap();
    let path = sparse_disk(dir.path(), 256, "label: gpt\nsize=100MiB, name=root\n");
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    let t = read(&f, 512).unwrap().unwrap();
    assert_eq!((t.kind, t.parts.len()), (Kind::Gpt, 1));
    assert_eq!(t.parts[0].name, "root");
    let p = add_config_partition(&mut f, &t, 256 << 20).unwrap();
    assert_eq!(p.number, 2);
    assert_eq!(
        p.start,
        191 << 20,
        "aligned start, 64 MiB minus the backup GPT"
    );
    let again = read(&f, 512).unwrap().unwrap();
    assert_eq!(again.parts[1], p);
    let j = sfdisk_json(&path);
    let parts = j["partitiontable"]["partitions"].as_array().unwrap();
    assert_eq!(parts.len(), 2);
    assert_eq!(parts[1]["name"], "config-2");
    assert_eq!(parts[1]["start"], p.start / 512);
}

#[test]
fn mbr_gets_a_primary_partition_and_a_full_table_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = sparse_disk(dir.path(), 128, "label: dos\nsize=32MiB, type=83\n");
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    let t = read(&f, 512).unwrap().unwrap();
    assert_eq!(t.kind, Kind::Mbr);
    let p = add_config_partition(&mut f, &t, 128 << 20).unwrap();
    assert_eq!((p.number, p.start, p.len), (2, 64 << 20, 64 << 20));
    let j = sfdisk_json(&path);
    assert_eq!(j["partitiontable"]["partitions"][1]["type"], "c");

    let full = "label: dos\nsize=8MiB\nsize=8MiB\nsize=8MiB\nsize=8MiB\n";
    let path = sparse_disk(dir.path(), 128, full);
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    let t = read(&f, 512).unwrap().unwrap();
    let e = add_config_partition(&mut f, &t, 128 << 20)
        .unwrap_err()
        .to_string();
    assert!(e.contains("4 primary partitions"), "{e}");
}

#[test]
fn a_disk_filled_by_the_image_is_refused_with_the_blocking_partition() {
    let dir = tempfile::tempdir().unwrap();
    let path = sparse_disk(dir.path(), 128, "label: gpt\nname=root\n");
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    let t = read(&f, 512).unwrap().unwrap();
    let e = add_config_partition(&mut f, &t, 128 << 20)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("no free space") && e.contains("partition 1"),
        "{e}"
    );
}

#[test]
fn no_table_and_damaged_gpt_are_told_apart() {
    let mut blank = vec![0u8; 1 << 20];
    assert!(read(&blank, 512).unwrap().is_none());
    blank[512..520].copy_from_slice(b"EFI PART");
    put_u32(&mut blank, 512 + 12, 92);
    assert!(read(&blank, 512)
        .unwrap_err()
        .to_string()
        .contains("damaged"));
}

/// Rewrites the primary GPT header of the file at `path` with `edit`, then
/// fixes its CRC: a header a hostile image could carry.
fn patch_primary(path: &Path, edit: impl FnOnce(&mut [u8])) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let mut h = vec![0u8; 512];
    f.read_exact_at(&mut h, 512).unwrap();
    edit(&mut h);
    let size = u32_at(&h, 12) as usize;
    let crc = header_crc(&h[..size]);
    put_u32(&mut h, 16, crc);
    f.write_all_at(&h, 512).unwrap();
}

#[test]
fn a_valid_crc_header_asking_for_terabytes_of_entries_is_refused_not_allocated() {
    let dir = tempfile::tempdir().unwrap();
    let path = sparse_disk(dir.path(), 16, "label: gpt\nsize=4MiB, name=root\n");
    // 1024 entries of 0xFFFFFF00 bytes: 4 TiB if believed.
    patch_primary(&path, |h| {
        put_u32(h, 80, 1024);
        put_u32(h, 84, 0xFFFF_FF00);
    });
    let f = std::fs::File::open(&path).unwrap();
    let e = read(&f, 512).unwrap_err().to_string();
    assert!(e.contains("unsupported GPT entry array"), "{e}");
    // An entry size that is not 128 × 2^n is refused too.
    patch_primary(&path, |h| {
        put_u32(h, 80, 128);
        put_u32(h, 84, 200);
    });
    assert!(read(&f, 512).is_err());
}

#[test]
fn impossible_lbas_and_a_damaged_backup_header_are_errors_or_skipped_never_panics() {
    use std::os::unix::fs::FileExt;
    let dir = tempfile::tempdir().unwrap();
    let path = sparse_disk(dir.path(), 256, "label: gpt\nsize=100MiB, name=root\n");
    // The backup header claims a size larger than a sector: the backup is
    // skipped with a warning, the primary still gets the partition.
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    let mut backup = vec![0u8; 512];
    let last = (256u64 << 20) - 512;
    f.read_exact_at(&mut backup, last).unwrap();
    put_u32(&mut backup, 12, 4096);
    f.write_all_at(&backup, last).unwrap();
    let mut f2 = f.try_clone().unwrap();
    let t = read(&f, 512).unwrap().unwrap();
    add_config_partition(&mut f2, &t, 256 << 20).expect("primary updated");
    assert_eq!(read(&f, 512).unwrap().unwrap().parts.len(), 2);

    // Header LBAs so large that bytes would overflow: errors. (40, the
    // first usable LBA, overflowed unchecked: the partition_table fuzz
    // target's finding.)
    for (field, value) in [
        (32, u64::MAX / 2),
        (40, 1 << 55),
        (48, u64::MAX),
        (72, u64::MAX / 4),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let path = sparse_disk(dir.path(), 256, "label: gpt\nsize=100MiB, name=root\n");
        let t = {
            let f = std::fs::File::open(&path).unwrap();
            read(&f, 512).unwrap().unwrap()
        };
        patch_primary(&path, |h| put_u64(h, field, value));
        let mut f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        let mut t2 = t.clone();
        if let Some(g) = t2.gpt.as_mut() {
            *g = match read(&f, 512) {
                Ok(Some(t)) => t.gpt.unwrap(),
                // A header the reader refuses is fine too: no panic.
                _ => continue,
            };
        }
        let e = add_config_partition(&mut f, &t2, 256 << 20)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("beyond any disk") || e.contains("free space"),
            "field {field}: {e}"
        );
    }
}
