//! The fail-closed protocol on regular files: nothing of the first MiB
//! reaches the disk before `commit`, zero runs become holes, and `abort`
//! leaves both ends zeroed.

use std::os::unix::fs::MetadataExt;

use super::*;

const MIB: u64 = 1 << 20;

fn disk(dir: &tempfile::TempDir, size: u64, fill: u8) -> PathBuf {
    let p = dir.path().join("disk");
    std::fs::write(&p, vec![fill; size as usize]).unwrap();
    p
}

#[test]
fn the_first_mib_reaches_the_disk_only_at_commit() {
    let dir = tempfile::tempdir().unwrap();
    let path = disk(&dir, 8 * MIB, 0);
    let progress = Progress::default();
    let mut t = Target::open(&path).unwrap();
    let mut data = vec![0u8; 4 * MIB as usize];
    data[..2].copy_from_slice(&[0xeb, 0x63]);
    data[440..444].copy_from_slice(&[1, 2, 3, 4]);
    data[MIB as usize + 7] = 9;
    t.write(0, &data, &progress).unwrap();
    let before = std::fs::read(&path).unwrap();
    assert!(
        before[..MIB as usize].iter().all(|b| *b == 0),
        "held bytes leaked before commit"
    );
    assert_eq!(
        before[MIB as usize + 7],
        9,
        "bytes after the first MiB are written at once"
    );
    let c = t.commit().unwrap();
    assert_eq!(c.image_size, 4 * MIB);
    assert_eq!(c.mbr_signature, u32::from_le_bytes([1, 2, 3, 4]));
    let after = std::fs::read(&path).unwrap();
    assert_eq!(after[..4 * MIB as usize], data[..]);
    assert_eq!(progress.snapshot().written, 4 * MIB);
}

#[test]
fn zero_runs_become_holes_and_abort_zeroes_both_ends() {
    let dir = tempfile::tempdir().unwrap();
    let path = disk(&dir, 16 * MIB, 0xaa);
    let blocks_before = std::fs::metadata(&path).unwrap().blocks();
    let progress = Progress::default();
    let mut t = Target::open(&path).unwrap();
    let mut data = vec![0u8; 12 * MIB as usize];
    data[2 * MIB as usize] = 1;
    t.write(0, &data, &progress).unwrap();
    let got = std::fs::read(&path).unwrap();
    assert!(got[MIB as usize..12 * MIB as usize]
        .iter()
        .enumerate()
        .all(|(i, b)| *b == data[MIB as usize + i]));
    let blocks_after = std::fs::metadata(&path).unwrap().blocks();
    assert!(
        blocks_after < blocks_before / 2,
        "zero runs must be punched, not written: {blocks_before} → {blocks_after}"
    );
    t.abort().unwrap();
    let got = std::fs::read(&path).unwrap();
    assert!(got[..MIB as usize].iter().all(|b| *b == 0));
    assert!(
        got[15 * MIB as usize..].iter().all(|b| *b == 0),
        "last MiB must be zeroed"
    );
}

#[test]
fn writes_past_the_end_are_refused_with_sizes() {
    let dir = tempfile::tempdir().unwrap();
    let path = disk(&dir, 2 * MIB, 0);
    let mut t = Target::open(&path).unwrap();
    let err = t
        .write(MIB, &vec![1u8; 2 * MIB as usize], &Progress::default())
        .unwrap_err();
    assert!(
        matches!(err, ImageError::TooLarge { needed, size, .. } if needed == 3 * MIB && size == 2 * MIB),
        "{err}"
    );
    assert!(t.check_fits(2 * MIB).is_ok());
}
