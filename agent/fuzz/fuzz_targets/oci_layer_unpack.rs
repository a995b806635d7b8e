//! Container image layers (tar, gzip or zstd) unpacked into a scratch
//! root: whatever the archive says, nothing may appear or change outside
//! the root (a sentinel file beside it stays as it was, and the parent
//! holds only the root and the sentinel), and nothing may panic.
#![no_main]

use agent::container_steps::unpack::unpack_layer;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(scratch) = tempfile::tempdir() else {
        return;
    };
    let root = scratch.path().join("root");
    let sentinel = scratch.path().join("sentinel");
    std::fs::create_dir(&root).unwrap();
    std::fs::write(&sentinel, b"outside").unwrap();
    let _ = unpack_layer(data, &root);
    assert_eq!(std::fs::read(&sentinel).unwrap(), b"outside");
    let mut names: Vec<_> = std::fs::read_dir(scratch.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    names.sort();
    assert_eq!(names, ["root", "sentinel"]);
    assert!(std::fs::symlink_metadata(&root).unwrap().is_dir());
});
