//! The whole write pipeline (download, hash, write, verify) when the image
//! server holds each connection to 16 MiB/s, as a long path holds a TCP
//! stream: the first stream is cut and the rest comes in segments over
//! several connections (agent/crates/contents/src/image/fetch/parallel.rs),
//! the disk byte-identical; an image whose bytes change after the cut
//! fails the checksum and leaves no partition table.

mod image_support;

use agent_contents::image::ImageError;
use agent_testkit::image_server::Fault;
use image_support::*;

/// What the server sends per connection and second.
const RATE: u64 = 16 * MIB;

/// A 96 MiB GPT disk image, its one partition random data: some 32 MiB
/// come in the first stream's two seconds, the rest in segments.
fn large_image(b: &Bed) -> Vec<u8> {
    let path = b.dir.path().join("large.img");
    let f = std::fs::File::create(&path).unwrap();
    f.set_len(96 * MIB).unwrap();
    drop(f);
    agent_testkit::sfdisk(&path, "label: gpt\nstart=2048, name=data\n");
    let mut raw = std::fs::read(&path).unwrap();
    let mut rng = fastrand::Rng::with_seed(51);
    let end = raw.len() - MIB as usize;
    rng.fill(&mut raw[MIB as usize..end]);
    raw
}

/// The ranges the server was asked for, as `(first, last)` byte.
fn ranges(b: &Bed) -> Vec<(u64, u64)> {
    b.server
        .seen()
        .into_iter()
        .filter_map(|s| {
            let range = s.range?;
            let (a, z) = range.strip_prefix("bytes=")?.split_once('-')?;
            Some((a.parse().ok()?, z.parse().ok()?))
        })
        .collect()
}

#[test]
fn a_large_image_over_a_slow_path_is_written_over_several_connections() {
    let b = bed();
    b.server.limit_rate(RATE);
    let data = large_image(&b);
    let url = b.serve("/large.img", &data, &[], Fault::None);
    let target = b.target("t", 96 * MIB);
    let (res, progress) = write(&b.request(url, &sha256_hex(&data)), &target);
    let report = res.unwrap();
    assert_eq!(report.downloaded, 96 * MIB);
    assert!(std::fs::read(&target).unwrap() == data, "the disk differs");
    assert_eq!(progress.snapshot().resumes, 0);
    // The first request whole, then closed ranges tiling the rest.
    let seen = b.server.seen();
    assert_eq!(seen[0].range, None);
    let mut asked = ranges(&b);
    assert_eq!(asked.len(), seen.len() - 1, "{seen:?}");
    asked.sort();
    let cut = asked[0].0;
    // After one buffer at least; 32 MiB are left at the cut.
    assert!((2 * MIB..=64 * MIB).contains(&cut), "cut at {cut}");
    let mut at = cut;
    for (a, z) in asked {
        assert_eq!(a, at, "asked twice or skipped");
        at = z + 1;
    }
    assert_eq!(at, 96 * MIB);
}

#[test]
fn an_image_changed_after_the_cut_fails_the_checksum_and_leaves_no_table() {
    let b = bed();
    b.server.limit_rate(RATE);
    let data = large_image(&b);
    // Every reply covering byte 80 MiB serves it changed: only segments
    // reach it.
    let url = b.serve("/large.img", &data, &[], Fault::FlipByteAt(80 * MIB));
    let target = b.target("t", 96 * MIB);
    let (res, _) = write(&b.request(url, &sha256_hex(&data)), &target);
    let err = res.unwrap_err();
    assert!(matches!(err, ImageError::ChecksumMismatch { .. }), "{err}");
    assert!(!ranges(&b).is_empty(), "the segments were asked for");
    assert_wiped(&target);
}
