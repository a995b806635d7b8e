//! qcow2 through the whole pipeline: qemu-img's variants converted while
//! streaming, corrupt tables and backing files refused with the disk wiped,
//! and images whose tables come after their data read again (Range, a
//! server that ignores Range, inside zstd).

mod image_support;

use std::path::Path;

use agent_contents::image::ImageError;
use agent_testkit::image_server::Fault;
use image_support::*;

#[test]
fn qcow2_images_are_converted_while_streaming_identical_to_qemu_img() {
    let b = bed();
    let src = b.image.display().to_string();
    let variants: [(&str, &[&str]); 4] = [
        ("plain.qcow2", &[]),
        ("comp.qcow2", &["-c"]),
        ("comp2m.qcow2", &["-c", "-o", "cluster_size=2M"]),
        ("v2.qcow2", &["-o", "compat=0.10"]),
    ];
    for (name, extra) in variants {
        let out = b.dir.path().join(name).display().to_string();
        let mut args = vec!["convert", "-f", "raw", "-O", "qcow2"];
        args.extend_from_slice(extra);
        args.extend_from_slice(&[&src, &out]);
        qemu_img(&args);
        let reference = b.dir.path().join(format!("{name}.raw"));
        qemu_img(&[
            "convert",
            "-f",
            "qcow2",
            "-O",
            "raw",
            &out,
            &reference.display().to_string(),
        ]);
        let data = std::fs::read(&out).unwrap();
        let url = b.serve(
            &format!("/{name}"),
            &data,
            &[Fault::DropAfter(MIB / 2 + 5)],
            Fault::None,
        );
        let target = b.target(&format!("t-{name}"), 24 * MIB);
        let (res, _) = write(&b.request(url, &sha256_hex(&data)), &target);
        let report = res.unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(report.format.name(), "qcow2");
        assert_eq!(report.image_size, 24 * MIB, "{name}");
        assert!(
            std::fs::read(&target).unwrap() == std::fs::read(&reference).unwrap(),
            "{name}: differs from qemu-img"
        );
    }
    // A qcow2 inside a zstd stream.
    let qcow = std::fs::read(b.dir.path().join("comp.qcow2")).unwrap();
    let zst = zstd::encode_all(&qcow[..], 3).unwrap();
    let url = b.serve("/comp.qcow2.zst", &zst, &[], Fault::None);
    let target = b.target("t-zst-qcow", 24 * MIB);
    let report = write(&b.request(url, &sha256_hex(&zst)), &target)
        .0
        .unwrap();
    assert_eq!(
        (report.format.name(), report.inner.map(|f| f.name())),
        ("zstd", Some("qcow2"))
    );
    assert_eq!(std::fs::read(&target).unwrap(), b.raw);
}

#[test]
fn a_corrupt_qcow2_table_or_a_backing_file_is_refused_and_the_disk_wiped() {
    let b = bed();
    let out = b.dir.path().join("img.qcow2");
    qemu_img(&[
        "convert",
        "-f",
        "raw",
        "-O",
        "qcow2",
        &b.image.display().to_string(),
        &out.display().to_string(),
    ]);
    let mut data = std::fs::read(&out).unwrap();
    // Point the first L1 entry at an unaligned offset.
    let l1 = u64::from_be_bytes(data[40..48].try_into().unwrap()) as usize;
    let entry = u64::from_be_bytes(data[l1..l1 + 8].try_into().unwrap());
    data[l1..l1 + 8].copy_from_slice(&(entry + 512).to_be_bytes());
    let url = b.serve("/bad.qcow2", &data, &[], Fault::None);
    let target = b.target("t", 24 * MIB);
    let err = write(&b.request(url, &sha256_hex(&data)), &target)
        .0
        .unwrap_err();
    let msg = err.to_string();
    assert!(
        matches!(
            err,
            ImageError::Corrupt {
                format: "qcow2",
                ..
            }
        ),
        "{msg}"
    );
    assert!(msg.contains("L1"), "{msg}");
    assert_wiped(&target);

    let overlay = b.dir.path().join("overlay.qcow2");
    qemu_img(&[
        "create",
        "-f",
        "qcow2",
        "-b",
        &out.display().to_string(),
        "-F",
        "qcow2",
        &overlay.display().to_string(),
    ]);
    let data = std::fs::read(&overlay).unwrap();
    let url = b.serve("/overlay.qcow2", &data, &[], Fault::None);
    let target = b.target("t2", 24 * MIB);
    let err = write(&b.request(url, &sha256_hex(&data)), &target)
        .0
        .unwrap_err();
    assert!(err.to_string().contains("backing file"), "{err}");
    assert_wiped(&target);
}

/// sha256 of a file's first `len` bytes, read in 1 MiB pieces.
fn file_sha256(path: &Path, len: u64) -> String {
    use std::io::Read;
    let mut f = std::fs::File::open(path).unwrap();
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    let mut buf = vec![0u8; MIB as usize];
    let mut left = len;
    while left > 0 {
        let n = f.read(&mut buf[..left.min(MIB) as usize]).unwrap();
        assert!(n > 0, "{} is shorter than {len}", path.display());
        ctx.update(&buf[..n]);
        left -= n as u64;
    }
    ctx.finish()
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Requests for `path` that asked for a range, as the server saw them.
fn ranged_requests(b: &Bed, path: &str) -> Vec<String> {
    b.server
        .seen()
        .into_iter()
        .filter(|s| s.path == path)
        .filter_map(|s| s.range)
        .collect()
}

#[test]
fn a_qcow2_whose_l1_table_comes_last_is_read_again_by_range_or_by_a_second_download() {
    // qemu-img resize grows the L1 table by moving it to the end of the
    // file: the L2 table near the start has long left the window when the
    // L1 table names it, and so has the data it maps. Two rounds of reading
    // again: the L2 table, then the data.
    let b = bed();
    let dir = b.dir.path();
    let raw = dir.join("random.raw");
    let mut data = vec![0u8; 40 * MIB as usize];
    fastrand::Rng::with_seed(19).fill(&mut data[..32 * MIB as usize]);
    std::fs::write(&raw, &data).unwrap();
    drop(data);
    let q = dir.join("last.qcow2");
    let (raw_s, q_s) = (raw.display().to_string(), q.display().to_string());
    qemu_img(&["convert", "-f", "raw", "-O", "qcow2", &raw_s, &q_s]);
    qemu_img(&["resize", "-q", &q_s, "520M"]);
    let reference = dir.join("last.raw");
    qemu_img(&[
        "convert",
        "-f",
        "qcow2",
        "-O",
        "raw",
        &q_s,
        &reference.display().to_string(),
    ]);
    let size = 520 * MIB;
    let want = file_sha256(&reference, size);
    let qcow = std::fs::read(&q).unwrap();
    let l1 = u64::from_be_bytes(qcow[40..48].try_into().unwrap());
    assert!(l1 > 32 * MIB, "qemu-img kept the L1 table at {l1}");
    let sha = sha256_hex(&qcow);

    // Range honoured: the re-reads are Range requests for what is needed.
    let url = b.serve("/last.qcow2", &qcow, &[], Fault::None);
    let target = b.target("t-last", size);
    let report = write(&b.request(url, &sha), &target).0.unwrap();
    assert_eq!(report.image_size, size);
    assert_eq!(file_sha256(&target, size), want, "Range re-reads");
    let ranges = ranged_requests(&b, "/last.qcow2");
    assert!(
        ranges.len() >= 2,
        "expected two rounds of Range requests: {ranges:?}"
    );
    assert!(ranges
        .iter()
        .all(|r| r.starts_with("bytes=") && !r.ends_with('-')));

    // A server that ignores Range: the first re-read comes back whole and
    // the rest of each round comes from one more download.
    let url = b.serve("/ignoring.qcow2", &qcow, &[], Fault::IgnoreRange);
    let target = b.target("t-ignoring", size);
    write(&b.request(url, &sha), &target).0.unwrap();
    assert_eq!(file_sha256(&target, size), want, "after ignored ranges");
    let requests = b
        .server
        .seen()
        .into_iter()
        .filter(|s| s.path == "/ignoring.qcow2")
        .count();
    assert!(
        (3..=5).contains(&requests),
        "one download, then at most two per round: {requests} requests"
    );

    // Inside a zstd stream no Range request helps: each round downloads and
    // decompresses the stream again.
    let zst = zstd::encode_all(&qcow[..], 3).unwrap();
    let url = b.serve("/last.qcow2.zst", &zst, &[], Fault::None);
    let target = b.target("t-last-zst", size);
    let report = write(&b.request(url, &sha256_hex(&zst)), &target)
        .0
        .unwrap();
    assert_eq!(report.inner.map(|f| f.name()), Some("qcow2"));
    assert_eq!(file_sha256(&target, size), want, "zstd re-streams");
    let zst_requests: Vec<_> = b
        .server
        .seen()
        .into_iter()
        .filter(|s| s.path == "/last.qcow2.zst")
        .collect();
    assert_eq!(zst_requests.len(), 3, "{zst_requests:?}");
    assert!(zst_requests.iter().all(|s| s.range.is_none()));
}
