//! Test fixtures shared by the agent's crates, below every one of them so
//! each crate's own tests can use them: [`image_server`], a stand-in image
//! server with scripted faults, [`sparse_disk`] and its kin (partition
//! tables made and read back by `sfdisk`), [`mellanox`] (stand-in
//! Mellanox/NVIDIA NIC tools), and [`write_demo_image`], a small disk
//! image with partition-table and filesystem signatures. Tests, the demo
//! and the benchmark only: the ramdisk's agent never links this crate.

use anyhow::{Context, Result};

pub mod image_server;
pub mod mellanox;
mod sfdisk;

pub use sfdisk::{sfdisk, sfdisk_json, sparse_disk};

/// A 64 MiB image with a protective MBR, primary and backup GPT headers and
/// an ext4 superblock magic.
pub fn write_demo_image(path: &std::path::Path) -> Result<()> {
    use std::os::unix::fs::FileExt;
    let size: u64 = 64 << 20;
    let f = std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
    f.set_len(size)?;
    let mut mbr = [0u8; 512];
    mbr[446 + 4] = 0xee;
    mbr[446 + 8..446 + 12].copy_from_slice(&1u32.to_le_bytes());
    mbr[446 + 12..446 + 16].copy_from_slice(&((size / 512 - 1) as u32).to_le_bytes());
    mbr[510] = 0x55;
    mbr[511] = 0xaa;
    f.write_all_at(&mbr, 0)?;
    f.write_all_at(b"EFI PART", 512)?;
    f.write_all_at(b"EFI PART", size - 512)?;
    f.write_all_at(&0xef53u16.to_le_bytes(), 1080)?;
    Ok(())
}
