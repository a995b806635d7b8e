//! Reading a disk's partition table (GPT, else MBR) with an MBR's logical
//! partitions (its EBR chain), and adding the config-drive partition at its
//! end, with 512- and 4096-byte sectors, on a disk whose first bytes are
//! the input. Oracle: every logical partition lies inside its extended
//! partition, the new partition lies on the disk, and reading the table
//! again finds it.
#![no_main]

use agent_devices::disk::table::logical::{is_extended, logical_partitions};
use agent_devices::disk::table::{add_config_partition, read, Kind};
use agent_fuzz::SparseDisk;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // [flags][disk size in MiB, u32 LE][the disk's first bytes]
    if data.len() < 5 {
        return;
    }
    let sector = if data[0] & 1 == 0 { 512 } else { 4096 };
    let mib = u32::from_le_bytes(data[1..5].try_into().unwrap());
    let head = data[5..].to_vec();
    let size = (u64::from(mib) << 20).max(head.len() as u64);
    let mut disk = SparseDisk {
        head,
        size,
        dropped: false,
    };
    let Ok(Some(table)) = read(&disk, sector) else {
        return;
    };
    for p in &table.parts {
        let _ = p.start.checked_add(p.len);
    }
    if let (Ok(logical), Some(ext)) = (
        logical_partitions(&disk, &table),
        table.parts.iter().find(|p| is_extended(p)),
    ) {
        for (i, p) in logical.iter().enumerate() {
            assert_eq!(p.number, 5 + i as u32);
            let end = p.start.checked_add(p.len).expect("logical end overflows");
            assert!(
                p.start >= ext.start && end <= ext.start + ext.len,
                "logical partition {p:?} outside the extended {ext:?}"
            );
        }
    }
    let Ok(part) = add_config_partition(&mut disk, &table, size) else {
        return;
    };
    let end = part
        .start
        .checked_add(part.len)
        .expect("partition end overflows");
    assert!(
        end <= size,
        "config partition {}..{end} beyond the disk ({size})",
        part.start
    );
    assert!(part.len > 0);
    if disk.dropped {
        return;
    }
    let again = read(&disk, sector)
        .expect("the table reads again after adding the partition")
        .expect("a table is still there");
    if table.kind == Kind::Gpt || again.kind == table.kind {
        assert!(
            again
                .parts
                .iter()
                .any(|p| p.start == part.start && p.len == part.len),
            "the new partition {part:?} is not in the table read again: {:?}",
            again.parts
        );
    }
});
