//! Moving a GPT's backup copy to the disk's end (`sgdisk -e`) on the held
//! first bytes of an image, with 512- and 4096-byte sectors. Oracle: the
//! planned backup lies on the disk, after the primary entries.
#![no_main]

use agent_devices::disk::gpt::relocate_backup;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // [flags][disk size in sectors, u64 LE][the image's first bytes]
    if data.len() < 9 {
        return;
    }
    let sector = if data[0] & 1 == 0 { 512 } else { 4096 };
    let disk_sectors = u64::from_le_bytes(data[1..9].try_into().unwrap());
    let mut first = data[9..].to_vec();
    if let Ok(Some(r)) = relocate_backup(&mut first, sector, disk_sectors) {
        assert_eq!(r.header_lba, disk_sectors - 1);
        assert_eq!(r.header.len(), sector);
        assert_eq!(r.entries.len() % sector, 0);
        assert!(r.entries_lba + (r.entries.len() / sector) as u64 <= r.header_lba);
        assert_eq!(first.len(), data.len() - 9);
    }
});
