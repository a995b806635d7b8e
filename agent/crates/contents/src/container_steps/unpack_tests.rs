//! Layer unpacking against hostile and ordinary archives, each built here
//! byte by byte (the `tar` crate's builder refuses the hostile names).

use super::*;

/// One tar entry: name, type, link target, data.
struct E<'a>(&'a str, tar::EntryType, &'a str, &'a [u8]);

fn archive(entries: &[E<'_>]) -> Vec<u8> {
    let mut out = Vec::new();
    for E(name, kind, link, data) in entries {
        let mut h = tar::Header::new_gnu();
        {
            let g = h.as_gnu_mut().unwrap();
            g.name[..name.len()].copy_from_slice(name.as_bytes());
            g.linkname[..link.len()].copy_from_slice(link.as_bytes());
        }
        h.set_entry_type(*kind);
        h.set_mode(if kind.is_dir() { 0o755 } else { 0o644 });
        h.set_size(data.len() as u64);
        h.set_cksum();
        out.extend_from_slice(h.as_bytes());
        out.extend_from_slice(data);
        out.resize(out.len().div_ceil(512) * 512, 0);
    }
    out.resize(out.len() + 1024, 0);
    out
}

use tar::EntryType::{Directory as D, Link as H, Regular as F, Symlink as S};

use crate::container_steps::limits::Limits;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

/// The default budget: not a bound any test here comes near.
fn budget() -> Budget {
    Budget::new(&Limits::default(), Arc::new(AtomicBool::new(false)))
}

fn budget_of(unpacked_bytes: u64, entries: u64) -> Budget {
    let limits = Limits {
        unpacked_bytes,
        entries,
        ..Limits::default()
    };
    Budget::new(&limits, Arc::new(AtomicBool::new(false)))
}

#[test]
fn the_entry_bound_counts_every_entry_over_all_layers() {
    let names: Vec<String> = (0..10).map(|i| format!("f{i}")).collect();
    let entries: Vec<E<'_>> = names.iter().map(|n| E(n, F, "", b"")).collect();
    let tar = archive(&entries);
    let (_t, root) = scratch();
    let b = budget_of(u64::MAX, 15);
    unpack_tar(&tar[..], &root, &b).unwrap();
    assert_eq!(b.used().1, 10);
    let (_t, root2) = scratch();
    let e = unpack_tar(&tar[..], &root2, &b).unwrap_err();
    assert_eq!(
        format!("{e:#}"),
        "the image's layers hold more than 15 tar entries (the entry limit)"
    );
}

#[test]
fn the_unpacked_bound_stops_a_compression_bomb() {
    use std::io::Write;
    // 16 MiB of zeros in one file: some 16 KiB of gzip.
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    let mut h = tar::Header::new_gnu();
    h.set_path("zeros").unwrap();
    h.set_size(16 << 20);
    h.set_mode(0o644);
    h.set_cksum();
    gz.write_all(h.as_bytes()).unwrap();
    let zeros = vec![0u8; 1 << 20];
    for _ in 0..16 {
        gz.write_all(&zeros).unwrap();
    }
    gz.write_all(&[0; 1024]).unwrap();
    let gz = gz.finish().unwrap();
    assert!(gz.len() < 64 << 10, "{}", gz.len());
    let (_t, root) = scratch();
    let b = budget_of(1 << 20, u64::MAX);
    let e = unpack_layer(&gz[..], &root, &b).unwrap_err();
    assert_eq!(
        format!("{e:#}"),
        "the image's layers unpack to more than 1048576 bytes (the unpacked-size limit)"
    );
    let written = fs::metadata(root.join("zeros")).map_or(0, |m| m.len());
    assert!(written <= 1 << 20, "{written} bytes written");
    // Within the bound, the same layer unpacks.
    let (_t, root) = scratch();
    unpack_layer(&gz[..], &root, &budget_of(17 << 20, 10)).unwrap();
    assert_eq!(fs::metadata(root.join("zeros")).unwrap().len(), 16 << 20);
}

#[test]
fn a_stop_ends_the_unpacking() {
    let tar = archive(&[E("f", F, "", b"data")]);
    let stop = Arc::new(AtomicBool::new(true));
    let b = Budget::new(&Limits::default(), stop);
    let (_t, root) = scratch();
    let e = unpack_tar(&tar[..], &root, &b).unwrap_err();
    assert_eq!(format!("{e:#}"), "the pull was stopped");
    assert!(!root.join("f").exists());
}

/// A root inside a scratch dir, with a sentinel file beside it.
fn scratch() -> (tempfile::TempDir, PathBuf) {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("root");
    fs::create_dir(&root).unwrap();
    fs::write(t.path().join("outside"), b"untouched").unwrap();
    (t, root)
}

fn untouched(t: &tempfile::TempDir) {
    assert_eq!(fs::read(t.path().join("outside")).unwrap(), b"untouched");
}

#[test]
fn an_ordinary_layer_unpacks() {
    let (t, root) = scratch();
    let tar = archive(&[
        E("./", D, "", b""),
        E("./bin/", D, "", b""),
        E("./bin/busybox", F, "", b"ELF"),
        E("./bin/sh", S, "busybox", b""),
        E("./bin/ls", H, "./bin/busybox", b""),
        E("deep/er/file", F, "", b"x"),
    ]);
    let u = unpack_tar(&tar[..], &root, &budget()).unwrap();
    assert_eq!(u.created, 5);
    assert_eq!(fs::read(root.join("bin/busybox")).unwrap(), b"ELF");
    assert_eq!(
        fs::read_link(root.join("bin/sh")).unwrap(),
        Path::new("busybox")
    );
    assert_eq!(fs::read(root.join("bin/ls")).unwrap(), b"ELF");
    assert_eq!(fs::read(root.join("deep/er/file")).unwrap(), b"x");
    untouched(&t);
}

#[test]
fn compressed_layers_are_sniffed() {
    use std::io::Write;
    let tar = archive(&[E("f", F, "", b"data")]);
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(&tar).unwrap();
    let gz = gz.finish().unwrap();
    let zst = zstd::encode_all(&tar[..], 1).unwrap();
    for layer in [gz, zst] {
        let (_t, root) = scratch();
        unpack_layer(&layer[..], &root, &budget()).unwrap();
        assert_eq!(fs::read(root.join("f")).unwrap(), b"data");
    }
}

#[test]
fn names_leaving_the_root_are_refused() {
    for (name, needle) in [
        ("../x", "\"..\""),
        ("a/../../x", "\"..\""),
        ("/etc/x", "absolute"),
    ] {
        let (t, root) = scratch();
        let e =
            unpack_tar(&archive(&[E(name, F, "", b"pwned")])[..], &root, &budget()).unwrap_err();
        assert!(format!("{e:#}").contains(needle), "{name}: {e:#}");
        assert!(!t.path().join("x").exists());
        untouched(&t);
    }
}

#[test]
fn a_symlink_in_the_tree_is_never_followed() {
    let (t, root) = scratch();
    // a -> the scratch dir (the root's parent), then a file through it.
    let up = t.path().to_str().unwrap();
    let tar = archive(&[E("a", S, up, b""), E("a/outside", F, "", b"pwned")]);
    let e = unpack_tar(&tar[..], &root, &budget()).unwrap_err();
    assert!(
        format!("{e:#}").contains("a symbolic link on the way"),
        "{e:#}"
    );
    untouched(&t);

    // A link to / and a path through it.
    let (t, root) = scratch();
    let tar = archive(&[E("a", S, "/", b""), E("a/etc/passwd", F, "", b"pwned")]);
    assert!(unpack_tar(&tar[..], &root, &budget()).is_err());
    untouched(&t);

    // A file entry where a link already is replaces the link, never
    // writes through it.
    let (t, root) = scratch();
    let target = t.path().join("outside");
    let tar = archive(&[
        E("l", S, target.to_str().unwrap(), b""),
        E("l", F, "", b"new"),
    ]);
    unpack_tar(&tar[..], &root, &budget()).unwrap();
    assert_eq!(fs::read(root.join("l")).unwrap(), b"new");
    assert!(!fs::symlink_metadata(root.join("l"))
        .unwrap()
        .file_type()
        .is_symlink());
    untouched(&t);
}

#[test]
fn hard_links_stay_inside() {
    for (link, needle) in [
        ("/etc/shadow", "absolute"),
        ("../outside", "\"..\""),
        ("missing", "hard link target missing"),
    ] {
        let (t, root) = scratch();
        let e = unpack_tar(&archive(&[E("h", H, link, b"")])[..], &root, &budget()).unwrap_err();
        assert!(format!("{e:#}").contains(needle), "{link}: {e:#}");
        assert!(!root.join("h").exists());
        untouched(&t);
    }
    // Through a symlink in the tree, or to one.
    let (t, root) = scratch();
    let up = t.path().to_str().unwrap();
    let tar = archive(&[E("a", S, up, b""), E("h", H, "a/outside", b"")]);
    assert!(unpack_tar(&tar[..], &root, &budget()).is_err());
    let tar = archive(&[E("s", S, "/etc/shadow", b""), E("h2", H, "s", b"")]);
    let e = unpack_tar(&tar[..], &root, &budget()).unwrap_err();
    assert!(format!("{e:#}").contains("not a regular file"), "{e:#}");
    untouched(&t);
}

#[test]
fn device_nodes_are_skipped() {
    let (_t, root) = scratch();
    let tar = archive(&[
        E("dev/sda", tar::EntryType::Block, "", b""),
        E("dev/null", tar::EntryType::Char, "", b""),
        E("ok", F, "", b"1"),
    ]);
    let u = unpack_tar(&tar[..], &root, &budget()).unwrap();
    assert_eq!((u.created, u.skipped), (1, 2));
    assert!(!root.join("dev/sda").exists() && !root.join("dev/null").exists());
}

#[test]
fn whiteouts_remove_lower_layers_only() {
    let (_t, root) = scratch();
    let lower = archive(&[
        E("etc/a", F, "", b"1"),
        E("etc/b", F, "", b"2"),
        E("opt/x/y", F, "", b"3"),
        E("keep", F, "", b"4"),
    ]);
    unpack_tar(&lower[..], &root, &budget()).unwrap();
    let upper = archive(&[
        E("etc/new", F, "", b"5"),
        E("etc/.wh..wh..opq", F, "", b""),
        E("opt/.wh.x", F, "", b""),
    ]);
    let u = unpack_tar(&upper[..], &root, &budget()).unwrap();
    assert_eq!(u.whiteouts, 3);
    assert!(!root.join("etc/a").exists() && !root.join("etc/b").exists());
    assert_eq!(fs::read(root.join("etc/new")).unwrap(), b"5");
    assert!(!root.join("opt/x").exists());
    assert_eq!(fs::read(root.join("keep")).unwrap(), b"4");
    // A whiteout may not name the parent.
    let e = unpack_tar(
        &archive(&[E("opt/.wh...", F, "", b"")])[..],
        &root,
        &budget(),
    )
    .unwrap_err();
    assert!(format!("{e:#}").contains("not a valid whiteout"), "{e:#}");
}
