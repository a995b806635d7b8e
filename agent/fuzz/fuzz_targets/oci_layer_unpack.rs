//! Container image layers (tar, gzip or zstd) unpacked into a scratch
//! root: whatever the archive says, nothing may appear or change outside
//! the root (a sentinel file beside it stays as it was, and the parent
//! holds only the root and the sentinel), and nothing may panic. Within a
//! small budget (1 MiB unpacked, 1,000 entries), the files made hold no
//! more bytes than the budget.
#![no_main]

use std::collections::HashSet;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use agent_contents::container_steps::limits::{Budget, Limits};
use agent_contents::container_steps::unpack::unpack_layer;
use libfuzzer_sys::fuzz_target;

const BYTES: u64 = 1 << 20;
const ENTRIES: u64 = 1000;

/// Bytes of the regular files under `dir`, each inode once.
fn file_bytes(dir: &Path, seen: &mut HashSet<u64>) -> u64 {
    let mut bytes = 0;
    for e in std::fs::read_dir(dir).unwrap() {
        let path = e.unwrap().path();
        let m = std::fs::symlink_metadata(&path).unwrap();
        if m.is_dir() {
            bytes += file_bytes(&path, seen);
        } else if m.is_file() && seen.insert(m.ino()) {
            bytes += m.len();
        }
    }
    bytes
}

fuzz_target!(|data: &[u8]| {
    let Ok(scratch) = tempfile::tempdir() else {
        return;
    };
    let root = scratch.path().join("root");
    let sentinel = scratch.path().join("sentinel");
    std::fs::create_dir(&root).unwrap();
    std::fs::write(&sentinel, b"outside").unwrap();
    let limits = Limits {
        unpacked_bytes: BYTES,
        entries: ENTRIES,
        ..Limits::default()
    };
    let budget = Budget::new(&limits, Arc::new(AtomicBool::new(false)));
    let _ = unpack_layer(data, &root, &budget);
    assert_eq!(std::fs::read(&sentinel).unwrap(), b"outside");
    let mut names: Vec<_> = std::fs::read_dir(scratch.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    names.sort();
    assert_eq!(names, ["root", "sentinel"]);
    assert!(std::fs::symlink_metadata(&root).unwrap().is_dir());
    let bytes = file_bytes(&root, &mut HashSet::new());
    assert!(bytes <= BYTES, "{bytes} bytes unpacked");
});
