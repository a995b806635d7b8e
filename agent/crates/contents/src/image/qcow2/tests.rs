//! Tests of the converter against `qemu-img`: images made by
//! `qemu-img convert -O qcow2` in every supported variant, converted here and
//! compared byte for byte with `qemu-img convert -O raw`; odd read and block
//! sizes; zero clusters and hand-made layouts. The refusals live in
//! `tests/refusals.rs`; the helpers here serve both.

use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::process::Command;

use super::stream;
use super::test_image::{self, Cluster, Order};
use super::*;

mod layouts;
mod refusals;

const MIB: usize = 1 << 20;
/// 24 MiB plus three sectors: the last cluster is partial for every cluster size.
const RAW_SIZE: usize = 24 * MIB + 3 * 512;

// ---------------------------------------------------------------- helpers

/// Runs `qemu-img` and fails loudly if it is missing or fails.
fn qemu_img(args: &[&str]) {
    run_tool("qemu-img", args);
}

/// Runs a QEMU tool, failing the test (not skipping it) if it is missing.
fn run_tool(tool: &str, args: &[&str]) {
    let out = Command::new(tool).args(args).output().unwrap_or_else(|e| {
        panic!(
            "{tool} is required by these tests but could not be run ({e}); \
             install QEMU's tools (Debian: apt-get install qemu-utils)"
        )
    });
    assert!(
        out.status.success(),
        "{tool} {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A scratch directory in /dev/shm (or the default temp dir), removed on drop.
fn scratch() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    let mut builder = tempfile::Builder::new();
    builder.prefix("qcow2-test-");
    if shm.is_dir() {
        builder.tempdir_in(shm).expect("temp dir in /dev/shm")
    } else {
        builder.tempdir().expect("temp dir")
    }
}

/// Path of `name` in `dir`, as a string for command lines.
fn path(dir: &tempfile::TempDir, name: &str) -> String {
    let p: PathBuf = dir.path().join(name);
    p.to_str().expect("utf-8 temp path").to_owned()
}

/// The test disk: random, zero, patterned, sparse and fragmented regions,
/// ending in a partial cluster.
fn raw_image() -> Vec<u8> {
    let mut rng = fastrand::Rng::with_seed(0x9c042);
    let mut img = vec![0u8; RAW_SIZE];
    rng.fill(&mut img[..4 * MIB]);
    // 4..6 MiB zeros.
    for (i, b) in img[6 * MIB..8 * MIB].iter_mut().enumerate() {
        *b = b"qcow2-stream-test "[i % 18];
    }
    for chunk in img[8 * MIB..10 * MIB].chunks_mut(8192) {
        rng.fill(&mut chunk[..4096]);
    }
    img[10 * MIB..12 * MIB].fill(0xaa);
    // 12..16 MiB zeros.
    for cluster in img[16 * MIB..20 * MIB].chunks_mut(65536) {
        let at = rng.usize(..65536 - 512);
        rng.fill(&mut cluster[at..at + 512]);
    }
    for (i, word) in img[20 * MIB..24 * MIB].chunks_mut(4).enumerate() {
        word.copy_from_slice(&(i as u32 / 7).to_le_bytes());
    }
    rng.fill(&mut img[24 * MIB..]);
    img
}

/// A sink that builds the disk in memory and records every call, so
/// coverage (each byte exactly once) and zero coalescing can be checked.
#[derive(Default)]
struct CheckSink {
    /// The disk; poisoned with 0x5c at `begin`, so missed zero calls show.
    disk: Vec<u8>,
    /// `begin` calls.
    begins: u32,
    /// Every data (false) or zero (true) call: (offset, len, is_zero).
    calls: Vec<(u64, u64, bool)>,
}

impl Sink for CheckSink {
    fn begin(&mut self, virtual_size: u64) -> io::Result<()> {
        assert_eq!(self.begins, 0, "begin called twice");
        assert!(self.calls.is_empty(), "begin after data");
        self.begins += 1;
        self.disk = vec![0x5c; virtual_size as usize];
        Ok(())
    }

    fn data(&mut self, offset: u64, bytes: &[u8]) -> io::Result<()> {
        assert_eq!(self.begins, 1, "data before begin");
        assert!(!bytes.is_empty(), "empty data call at {offset}");
        let end = offset as usize + bytes.len();
        assert!(
            end <= self.disk.len(),
            "data past the end: {offset}+{}",
            bytes.len()
        );
        self.disk[offset as usize..end].copy_from_slice(bytes);
        self.calls.push((offset, bytes.len() as u64, false));
        Ok(())
    }

    fn zero(&mut self, offset: u64, len: u64) -> io::Result<()> {
        assert_eq!(self.begins, 1, "zero before begin");
        assert!(len > 0, "empty zero call at {offset}");
        let end = (offset + len) as usize;
        assert!(end <= self.disk.len(), "zero past the end: {offset}+{len}");
        self.disk[offset as usize..end].fill(0);
        self.calls.push((offset, len, true));
        Ok(())
    }
}

impl CheckSink {
    /// Checks that the calls cover the disk exactly once with coalesced zero
    /// ranges, and returns the disk and the zero bytes reported.
    fn verify(mut self) -> (Vec<u8>, u64) {
        assert_eq!(self.begins, 1, "begin not called");
        self.calls.sort_unstable();
        let mut cursor = 0;
        let mut prev_zero = false;
        let mut zero_bytes = 0;
        for &(offset, len, is_zero) in &self.calls {
            assert!(
                offset >= cursor,
                "overlap: call at {offset} but bytes up to {cursor} already written"
            );
            assert_eq!(
                offset, cursor,
                "gap: bytes {cursor}..{offset} never written"
            );
            assert!(
                !(prev_zero && is_zero),
                "zero ranges not coalesced at {offset}"
            );
            cursor = offset + len;
            prev_zero = is_zero;
            if is_zero {
                zero_bytes += len;
            }
        }
        assert_eq!(cursor, self.disk.len() as u64, "tail never written");
        (self.disk, zero_bytes)
    }
}

/// Reads host ranges of an image in memory again, in pieces of `piece`
/// bytes, counting what it served; can serve one byte altered.
struct MemReread<'a> {
    /// The image.
    img: &'a [u8],
    /// Largest piece delivered at once.
    piece: usize,
    /// Host offset whose byte is served flipped.
    tamper: Option<u64>,
    /// Bytes served.
    served: u64,
}

impl<'a> MemReread<'a> {
    /// Serves `img` faithfully in 64 KiB pieces.
    fn new(img: &'a [u8]) -> Self {
        MemReread {
            img,
            piece: 65536,
            tamper: None,
            served: 0,
        }
    }
}

impl Reread for MemReread<'_> {
    fn reread(
        &mut self,
        runs: &[std::ops::Range<u64>],
        deliver: &mut dyn FnMut(u64, &[u8]) -> bool,
    ) -> io::Result<()> {
        for run in runs {
            let mut at = run.start;
            while at < run.end {
                let end = run.end.min(at + self.piece as u64);
                let mut piece = self.img[at as usize..end as usize].to_vec();
                if let Some(t) = self.tamper.filter(|t| (at..end).contains(t)) {
                    piece[(t - at) as usize] ^= 0x01;
                }
                self.served += piece.len() as u64;
                if !deliver(at, &piece) {
                    return Ok(());
                }
                at = end;
            }
        }
        Ok(())
    }
}

/// Converts `img` through `convert` and checks the calls.
fn convert_checked(img: &[u8], limits: &Limits) -> Result<(Summary, Vec<u8>), Qcow2Error> {
    let mut sink = CheckSink::default();
    let mut again = MemReread::new(img);
    let summary = convert(img, &mut again, &mut sink, limits)?;
    assert_eq!(summary.reread_bytes, again.served, "bytes read again");
    let (disk, zero_bytes) = sink.verify();
    assert_eq!(summary.zero_bytes, zero_bytes, "summary zero_bytes");
    assert_eq!(summary.virtual_size, disk.len() as u64);
    assert_eq!(
        summary.input_bytes,
        img.len() as u64,
        "input not read to its end"
    );
    Ok((summary, disk))
}

/// Reads a reader that returns 1..=7 bytes per call.
struct TinyReader<'a> {
    data: &'a [u8],
    rng: fastrand::Rng,
}

impl Read for TinyReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.rng.usize(1..=7).min(buf.len()).min(self.data.len());
        buf[..n].copy_from_slice(&self.data[..n]);
        self.data = &self.data[n..];
        Ok(n)
    }
}

/// A qcow2 image made by qemu-img from the test disk, with its reference
/// raw conversion.
struct Variant {
    /// The source disk.
    raw: Vec<u8>,
    /// The qcow2 image.
    qcow2: Vec<u8>,
    /// `qemu-img convert -O raw` of the qcow2 image.
    reference: Vec<u8>,
}

/// Makes the test disk into qcow2 with `qemu-img convert -O qcow2 <opts>`.
fn variant(opts: &[&str]) -> Variant {
    let dir = scratch();
    let raw = raw_image();
    std::fs::write(path(&dir, "disk.raw"), &raw).expect("write raw");
    let mut args = vec!["convert", "-f", "raw", "-O", "qcow2"];
    args.extend_from_slice(opts);
    let (src, q, back) = (
        path(&dir, "disk.raw"),
        path(&dir, "disk.qcow2"),
        path(&dir, "back.raw"),
    );
    args.extend_from_slice(&[&src, &q]);
    qemu_img(&args);
    qemu_img(&["convert", "-f", "qcow2", "-O", "raw", &q, &back]);
    Variant {
        raw,
        qcow2: std::fs::read(&q).expect("read qcow2"),
        reference: std::fs::read(&back).expect("read reference"),
    }
}

/// Asserts that `disk` equals the reference, naming the first difference.
fn assert_same(disk: &[u8], reference: &[u8], what: &str) {
    assert_eq!(disk.len(), reference.len(), "{what}: size differs");
    if let Some(i) = disk.iter().zip(reference).position(|(a, b)| a != b) {
        panic!(
            "{what}: first difference at guest offset {i}: got {:#04x}, expected {:#04x}",
            disk[i], reference[i]
        );
    }
}

/// Converts a qemu-img variant and compares it with qemu-img's raw output.
fn check_variant(opts: &[&str], cluster_size: u64, compressed: bool) -> Variant {
    let v = variant(opts);
    let (summary, disk) =
        convert_checked(&v.qcow2, &Limits::default()).unwrap_or_else(|e| panic!("{opts:?}: {e}"));
    assert_same(&disk, &v.reference, &format!("{opts:?} vs qemu-img"));
    assert_same(&disk, &v.raw, &format!("{opts:?} vs source"));
    assert_eq!(summary.cluster_size, cluster_size, "{opts:?}");
    assert_eq!(summary.virtual_size, RAW_SIZE as u64);
    assert!(summary.data_clusters > 0, "{opts:?}: no data clusters");
    assert!(
        summary.zero_bytes >= 6 * MIB as u64,
        "{opts:?}: zeros not found"
    );
    if compressed {
        assert!(
            summary.compressed_clusters > 0,
            "{opts:?}: nothing compressed"
        );
    } else {
        assert_eq!(summary.compressed_clusters, 0, "{opts:?}");
    }
    v
}

/// Converts with a given internal block size and a tiny-read reader.
fn convert_blocks(img: &[u8], block_size: usize, tiny: bool) -> Result<Vec<u8>, Qcow2Error> {
    let mut sink = CheckSink::default();
    let limits = Limits::default();
    if tiny {
        let reader = TinyReader {
            data: img,
            rng: fastrand::Rng::with_seed(block_size as u64),
        };
        stream::run(
            reader,
            &mut MemReread::new(img),
            &mut sink,
            &limits,
            block_size,
        )?;
    } else {
        stream::run(
            img,
            &mut MemReread::new(img),
            &mut sink,
            &limits,
            block_size,
        )?;
    }
    Ok(sink.verify().0)
}

/// Compressed L2 entries in host order: (guest, host offset, host end).
fn compressed(img: &[u8]) -> Vec<(u64, u64, u64)> {
    let (bits, _, _) = test_image::geometry(img);
    let x = 62 - (bits - 8);
    let mut all: Vec<_> = test_image::l2_entries(img)
        .into_iter()
        .filter(|e| e.raw & (1 << 62) != 0)
        .map(|e| {
            let host = e.raw & ((1 << x) - 1);
            let sectors = ((e.raw >> x) & ((1 << (bits - 8)) - 1)) + 1;
            (e.guest, host, (host & !511) + sectors * 512)
        })
        .collect();
    all.sort_unstable_by_key(|&(_, host, _)| host);
    all
}

/// The first compressed L2 entry in host order: (guest, host offset).
fn first_compressed(img: &[u8]) -> (u64, u64) {
    let (guest, host, _) = compressed(img)[0];
    (guest, host)
}

/// A small qcow2 made by `qemu-img create` with extra arguments.
fn created(args: &[&str]) -> Vec<u8> {
    let dir = scratch();
    let img = path(&dir, "img.qcow2");
    let mut all = vec!["create", "-f", "qcow2"];
    all.extend_from_slice(args);
    all.push(&img);
    all.push("4M");
    qemu_img(&all);
    std::fs::read(&img).expect("read image")
}

/// Converts and returns the error, failing if it succeeds.
fn convert_err(img: &[u8], limits: &Limits) -> Qcow2Error {
    match convert(
        img,
        &mut MemReread::new(img),
        &mut CheckSink::default(),
        limits,
    ) {
        Ok(s) => panic!("conversion succeeded unexpectedly: {s:?}"),
        Err(e) => e,
    }
}

// ------------------------------------------------- qemu-img variants

#[test]
fn default_v3_64k() {
    check_variant(&[], 65536, false);
}

#[test]
fn deflate_compressed() {
    check_variant(&["-c"], 65536, true);
}

#[test]
fn zstd_compressed() {
    let v = check_variant(&["-c", "-o", "compression_type=zstd"], 65536, true);
    assert_eq!(
        v.qcow2[104], 1,
        "qemu-img did not write compression_type zstd"
    );
}

#[test]
fn compressed_by_one_coroutine_and_by_sixteen_out_of_order() {
    check_variant(&["-c", "-m", "1"], 65536, true);
    check_variant(&["-c", "-m", "16", "-W"], 65536, true);
}

#[test]
fn extended_l2_entries() {
    let v = check_variant(&["-o", "extended_l2=on"], 65536, false);
    assert_ne!(v.qcow2[79] & 0x10, 0, "qemu-img did not set extended L2");
    check_variant(
        &["-c", "-o", "extended_l2=on,cluster_size=128k"],
        128 << 10,
        true,
    );
}

#[test]
fn internal_snapshots_are_ignored_and_the_active_state_written() {
    let dir = scratch();
    let raw = raw_image();
    let (src, q, back) = (
        path(&dir, "disk.raw"),
        path(&dir, "disk.qcow2"),
        path(&dir, "back.raw"),
    );
    std::fs::write(&src, &raw).expect("write raw");
    qemu_img(&["convert", "-f", "raw", "-O", "qcow2", &src, &q]);
    qemu_img(&["snapshot", "-c", "before", &q]);
    // Change the active state after the snapshot: its clusters are copied.
    run_tool("qemu-io", &["-f", "qcow2", "-c", "write -P 0x5a 1M 2M", &q]);
    qemu_img(&["snapshot", "-c", "after", &q]);
    qemu_img(&["convert", "-f", "qcow2", "-O", "raw", &q, &back]);
    let img = std::fs::read(&q).expect("read qcow2");
    let (summary, disk) = convert_checked(&img, &Limits::default()).expect("convert");
    assert_same(&disk, &std::fs::read(&back).expect("read"), "snapshots");
    assert!(disk[MIB..3 * MIB].iter().all(|&b| b == 0x5a));
    assert_eq!(summary.snapshots, 2);
}

#[test]
fn cluster_2m() {
    check_variant(&["-o", "cluster_size=2M"], 2 * MIB as u64, false);
}

#[test]
fn cluster_2m_compressed() {
    check_variant(&["-c", "-o", "cluster_size=2M"], 2 * MIB as u64, true);
}

#[test]
fn v2_compat_0_10() {
    let v = check_variant(&["-o", "compat=0.10"], 65536, false);
    assert_eq!(test_image::get32(&v.qcow2, 4), 2, "not a version 2 image");
}

#[test]
fn v2_compressed() {
    check_variant(&["-c", "-o", "compat=0.10"], 65536, true);
}

#[test]
fn cluster_4k() {
    check_variant(&["-o", "cluster_size=4096"], 4096, false);
}

#[test]
fn cluster_512_compressed() {
    check_variant(&["-c", "-o", "cluster_size=512"], 512, true);
}

// ---------------------------------------------- chunk boundaries

#[test]
fn tiny_reads_compressed() {
    let v = variant(&["-c"]);
    let reader = TinyReader {
        data: &v.qcow2,
        rng: fastrand::Rng::with_seed(7),
    };
    let mut sink = CheckSink::default();
    let summary = convert(
        reader,
        &mut NoReread("not needed"),
        &mut sink,
        &Limits::default(),
    )
    .expect("tiny reads");
    assert_eq!(summary.input_bytes, v.qcow2.len() as u64);
    assert_same(&sink.verify().0, &v.reference, "tiny reads");
}

#[test]
fn odd_block_sizes_split_entries_and_clusters() {
    // Blocks that are not multiples of 8 split table entries; small ones
    // split clusters, compressed clusters and tables across many blocks.
    for opts in [
        &["-c", "-o", "cluster_size=4096"][..],
        &["-o", "cluster_size=2M"][..],
    ] {
        let v = variant(opts);
        for block in [1001, 4099, 65537] {
            let disk = convert_blocks(&v.qcow2, block, false)
                .unwrap_or_else(|e| panic!("{opts:?} block {block}: {e}"));
            assert_same(&disk, &v.reference, &format!("{opts:?} block {block}"));
        }
        let disk = convert_blocks(&v.qcow2, 3001, true).expect("tiny reads, odd blocks");
        assert_same(&disk, &v.reference, &format!("{opts:?} tiny reads"));
    }
}

// ---------------------------------------- zero clusters and layouts

#[test]
fn zero_flag_clusters_are_not_read() {
    let dir = scratch();
    let img = path(&dir, "z.qcow2");
    let back = path(&dir, "z.raw");
    qemu_img(&["create", "-f", "qcow2", &img, "4M"]);
    run_tool(
        "qemu-io",
        &[
            "-f",
            "qcow2",
            "-c",
            "write -P 0x5a 0 4M",
            "-c",
            "write -z 1M 1M",
            &img,
        ],
    );
    qemu_img(&["convert", "-f", "qcow2", "-O", "raw", &img, &back]);
    let qcow2 = std::fs::read(&img).expect("read");
    let preallocated_zero = test_image::l2_entries(&qcow2)
        .iter()
        .filter(|e| e.raw & 1 == 1 && e.raw & 0x00ff_ffff_ffff_fe00 != 0)
        .count();
    assert!(
        preallocated_zero > 0,
        "qemu-io wrote no preallocated zero clusters"
    );
    let (summary, disk) = convert_checked(&qcow2, &Limits::default()).expect("convert");
    assert_same(&disk, &std::fs::read(&back).expect("read"), "zero flags");
    assert!(disk[MIB..2 * MIB].iter().all(|&b| b == 0));
    assert_eq!(summary.zero_bytes, MIB as u64);
}

#[test]
fn hand_made_layouts_match_qemu() {
    let cs = 4096usize;
    let mut rng = fastrand::Rng::with_seed(3);
    let mut clusters = Vec::new();
    // 600 data clusters (2.4 MiB) at scattered guest offsets, some zero-flagged.
    for i in 0..600u64 {
        let guest = i * 3 + (i % 5);
        if i % 50 == 7 {
            clusters.push((guest, Cluster::PreallocatedZero));
        } else {
            let mut data = vec![0u8; cs];
            rng.fill(&mut data);
            clusters.push((guest, Cluster::Data(data)));
        }
    }
    for order in [Order::TablesFirst, Order::DataFirst] {
        let img = test_image::build(12, 8 * MIB as u64 + 1024, &clusters, order);
        let dir = scratch();
        let (q, back) = (path(&dir, "h.qcow2"), path(&dir, "h.raw"));
        std::fs::write(&q, &img).expect("write");
        qemu_img(&["check", "-f", "qcow2", &q]);
        qemu_img(&["convert", "-f", "qcow2", "-O", "raw", &q, &back]);
        let (summary, disk) =
            convert_checked(&img, &Limits::default()).unwrap_or_else(|e| panic!("{order:?}: {e}"));
        assert_same(
            &disk,
            &std::fs::read(&back).expect("read"),
            &format!("{order:?}"),
        );
        assert_eq!(summary.data_clusters, 588, "{order:?}");
    }
}

#[test]
fn empty_disk() {
    let dir = scratch();
    let img = path(&dir, "e.qcow2");
    qemu_img(&["create", "-f", "qcow2", &img, "0"]);
    let bytes = std::fs::read(&img).expect("read");
    let (summary, disk) = convert_checked(&bytes, &Limits::default()).expect("convert");
    assert!(disk.is_empty());
    assert_eq!((summary.data_clusters, summary.zero_bytes), (0, 0));
}

#[test]
fn dirty_bit_is_accepted() {
    let mut img = created(&[]);
    img[79] |= 1;
    let (summary, disk) = convert_checked(&img, &Limits::default()).expect("dirty image");
    assert_eq!(summary.zero_bytes, 4 * MIB as u64);
    assert!(disk.iter().all(|&b| b == 0));
}
