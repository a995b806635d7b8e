//! Digests of large sparse files (the tests' virtual disks) that read only
//! their data extents (`SEEK_DATA`/`SEEK_HOLE`): hashing an 8 GiB disk
//! that holds a partition table costs kilobytes of reads, not 8 GiB of
//! zeros through sha256.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

use anyhow::{Context, Result};
use nix::unistd::{lseek, Whence};

/// Each data extent of `f` as (start, end): what `SEEK_DATA`/`SEEK_HOLE`
/// report, in order. On a filesystem without holes, one extent: the file.
pub fn data_extents(f: &File) -> Result<Vec<(u64, u64)>> {
    let len = f.metadata()?.len();
    let mut out = Vec::new();
    let mut at: i64 = 0;
    while (at as u64) < len {
        let Ok(start) = lseek(f, at, Whence::SeekData) else {
            break; // ENXIO: no data after `at`
        };
        let end = lseek(f, start, Whence::SeekHole).context("SEEK_HOLE")?;
        out.push((start as u64, end as u64));
        at = end;
    }
    Ok(out)
}

/// A hex sha256 of the file's bytes, equal for two files exactly when their
/// bytes are: it hashes the length, then every 4 KiB block that is not all
/// zeros with its offset. Holes and written zeros count alike, as in
/// `sha256sum`; only data extents are read.
pub fn content_sha256(path: &Path) -> Result<String> {
    const BLOCK: u64 = 4096;
    let f = File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let len = f.metadata()?.len();
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    ctx.update(&len.to_le_bytes());
    let zeros = [0u8; BLOCK as usize];
    let mut buf = vec![0u8; 4 << 20];
    // Past this offset nothing is hashed yet (extents may share a block).
    let mut done = 0u64;
    for (start, end) in data_extents(&f).with_context(|| format!("{}", path.display()))? {
        let mut at = (start / BLOCK * BLOCK).max(done);
        while at < end {
            let n = (end - at).min(buf.len() as u64) as usize;
            f.read_exact_at(&mut buf[..n], at)
                .with_context(|| format!("reading {} at {at}", path.display()))?;
            for (i, block) in buf[..n].chunks(BLOCK as usize).enumerate() {
                if block != &zeros[..block.len()] {
                    ctx.update(&(at + i as u64 * BLOCK).to_le_bytes());
                    ctx.update(block);
                }
            }
            at += n as u64;
        }
        done = at;
    }
    Ok(crate::hex(ctx.finish().as_ref()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Holes, written zeros and a file written densely with the same bytes
    /// give the same digest; one changed byte, or another length, does not.
    #[test]
    fn the_digest_follows_the_bytes_not_the_holes() {
        let dir = tempfile::tempdir().unwrap();
        let sparse = dir.path().join("sparse");
        let f = File::create(&sparse).unwrap();
        f.set_len(64 << 20).unwrap();
        f.write_all_at(b"GPT header", 512).unwrap();
        f.write_all_at(&[7u8; 10_000], 40 << 20).unwrap();
        f.write_all_at(&[0u8; 1 << 20], 50 << 20).unwrap(); // zeros written: data, same bytes
        let mut dense = vec![0u8; 64 << 20];
        dense[512..522].copy_from_slice(b"GPT header");
        dense[40 << 20..(40 << 20) + 10_000].fill(7);
        let dense_path = dir.path().join("dense");
        std::fs::write(&dense_path, &dense).unwrap();
        let digest = content_sha256(&sparse).unwrap();
        assert_eq!(digest, content_sha256(&dense_path).unwrap());
        assert!(
            data_extents(&f).unwrap().len() >= 2,
            "the file is sparse here"
        );

        f.write_all_at(b"x", (40 << 20) + 9_999).unwrap();
        assert_ne!(content_sha256(&sparse).unwrap(), digest);
        f.write_all_at(&[7], (40 << 20) + 9_999).unwrap();
        assert_eq!(content_sha256(&sparse).unwrap(), digest);
        f.set_len((64 << 20) + 1).unwrap();
        assert_ne!(content_sha256(&sparse).unwrap(), digest);
    }
}
