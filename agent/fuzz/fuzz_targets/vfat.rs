//! A vfat config drive rebuilt for a disk with larger sectors (fatfs reads
//! the input, the agent copies it and fixes the dot entries).
#![no_main]

use agent_contents::configdrive::vfat::{adapt, fat_sector_size};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // [flags][the config drive]
    let Some((&flags, image)) = data.split_first() else {
        return;
    };
    let _ = fat_sector_size(image);
    let sector = [512, 1024, 2048, 4096, 4095, 8192][usize::from(flags % 6)];
    let room: u64 = if flags & 0x80 == 0 { 64 << 20 } else { 1 << 20 };
    if let Ok(Some(rebuilt)) = adapt(image, sector, room) {
        assert!(
            rebuilt.len() as u64 <= room,
            "the rebuilt drive does not fit"
        );
        assert_eq!(rebuilt.len() as u64 % sector, 0);
        assert_eq!(fat_sector_size(&rebuilt), Some(sector as u16));
    }
});
