//! Gives every directory entry of the ESP's root directory one fixed
//! timestamp. mtools keeps the source files' times (`mcopy -m`), but the
//! syslinux installer writes `ldlinux.sys` and `ldlinux.c32` at the current
//! time; this makes the image the same bytes for the same inputs.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

use anyhow::{bail, Result};

/// FAT date of 2020-01-01 (the time of day is 00:00:00).
const DATE: u16 = ((2020 - 1980) << 9) | (1 << 5) | 1;

fn u16_at(b: &[u8], at: usize) -> u64 {
    u64::from(u16::from_le_bytes([b[at], b[at + 1]]))
}

fn u32_at(b: &[u8], at: usize) -> u64 {
    u64::from(u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]))
}

/// Sets creation, access and modification time of each root entry of the
/// FAT32 filesystem in `image`.
pub(super) fn normalise_root(image: &Path) -> Result<()> {
    let f = File::options().read(true).write(true).open(image)?;
    let mut boot = [0u8; 512];
    f.read_exact_at(&mut boot, 0)?;
    let (bps, spc) = (u16_at(&boot, 11), u64::from(boot[13]));
    let (reserved, fats, fat_size) = (u16_at(&boot, 14), u64::from(boot[16]), u32_at(&boot, 36));
    let root = u32_at(&boot, 44);
    if bps < 512 || spc == 0 || fat_size == 0 || root < 2 || &boot[82..87] != b"FAT32" {
        bail!("{} is not a FAT32 filesystem", image.display());
    }
    let data = (reserved + fats * fat_size) * bps;
    let cluster_size = (spc * bps) as usize;
    let mut cluster = root;
    let mut buf = vec![0u8; cluster_size];
    for _ in 0..1024 {
        let at = data + (cluster - 2) * cluster_size as u64;
        f.read_exact_at(&mut buf, at)?;
        let mut end = false;
        for e in buf.chunks_mut(32) {
            if e[0] == 0 {
                end = true;
                break;
            }
            if e[0] == 0xE5 || e[11] == 0x0F {
                continue; // deleted, or a long-name part
            }
            e[13] = 0;
            e[14..16].fill(0);
            e[16..18].copy_from_slice(&DATE.to_le_bytes());
            e[18..20].copy_from_slice(&DATE.to_le_bytes());
            e[22..24].fill(0);
            e[24..26].copy_from_slice(&DATE.to_le_bytes());
        }
        f.write_all_at(&buf, at)?;
        if end {
            return Ok(());
        }
        let mut next = [0u8; 4];
        f.read_exact_at(&mut next, reserved * bps + cluster * 4)?;
        cluster = u32_at(&next, 0) & 0x0FFF_FFFF;
        if cluster >= 0x0FFF_FFF8 {
            return Ok(());
        }
        if cluster < 2 {
            bail!(
                "broken cluster chain in the root directory of {}",
                image.display()
            );
        }
    }
    bail!("root directory of {} too long", image.display())
}
