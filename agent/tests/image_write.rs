//! The image pipeline end to end on regular files standing in for disks:
//! every format, resumption, and every failure mode leaving no partition
//! table behind. Images are real GPT disks made by sfdisk.

mod image_support;

use std::io::Write;
use std::path::Path;
use std::time::Duration;

use agent_contents::image::checksum::Algo;
use agent_contents::image::progress::Progress;
use agent_contents::image::{write_image, ImageError};
use agent_core::commands::image_errors::error_kind;
use agent_testkit::image_server::Fault;
use image_support::*;

#[test]
fn raw_image_is_written_verified_and_the_backup_gpt_moved_to_the_end() {
    let b = bed();
    let url = b.serve("/disk.img", &b.raw, &[], Fault::None);
    let target = b.target("t", 64 * MIB);
    let (res, progress) = write(
        &b.request(url, &format!("sha256:{}", sha256_hex(&b.raw))),
        &target,
    );
    let report = res.unwrap();
    assert_eq!(report.image_size, 24 * MIB);
    assert_eq!(report.downloaded, 24 * MIB);
    assert!(report.gpt_moved);
    let got = std::fs::read(&target).unwrap();
    // Everything but the GPT headers (moved backup, updated primary) and the
    // protective MBR's size field is identical.
    assert_eq!(got[..458], b.raw[..458]);
    assert_eq!(got[462..512], b.raw[462..512]);
    assert_eq!(
        got[1024..24 * MIB as usize - 16896],
        b.raw[1024..24 * MIB as usize - 16896]
    );
    assert!(got[(24 * MIB) as usize..(64 * MIB - 16896) as usize]
        .iter()
        .all(|x| *x == 0));
    let dump = sfdisk_dump(&target);
    assert!(
        dump.contains(&format!("last-lba: {}", 64 * MIB / 512 - 34)),
        "{dump}"
    );
    assert!(
        dump.contains("name=\"data\"") && dump.contains("name=\"empty\""),
        "{dump}"
    );
    let snap = progress.snapshot();
    assert_eq!(snap.phase.name(), "done");
    assert_eq!(snap.downloaded, 24 * MIB);
}

#[test]
fn compressed_images_are_written_byte_identical() {
    let b = bed();
    let zst = zstd::encode_all(&b.raw[..], 3).unwrap();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(&b.raw).unwrap();
    let gz = gz.finish().unwrap();
    let mut xz = liblzma::write::XzEncoder::new(Vec::new(), 1);
    xz.write_all(&b.raw).unwrap();
    let xz = xz.finish().unwrap();
    for (name, data) in [("zst", zst), ("gz", gz), ("xz", xz)] {
        let url = b.serve(&format!("/disk.img.{name}"), &data, &[], Fault::None);
        let target = b.target(&format!("t-{name}"), 24 * MIB);
        let (res, _) = write(&b.request(url, &sha256_hex(&data)), &target);
        let report = res.unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(
            report.format.name(),
            match name {
                "zst" => "zstd",
                "gz" => "gzip",
                _ => "xz",
            }
        );
        assert_eq!(report.downloaded, data.len() as u64);
        assert!(
            std::fs::read(&target).unwrap() == b.raw,
            "{name}: content differs"
        );
    }
}

#[test]
fn dropped_connections_resume_with_range_and_keep_the_hash() {
    let b = bed();
    let url = b.serve(
        "/disk.img",
        &b.raw,
        &[Fault::DropAfter(3 * MIB + 17), Fault::DropAfter(5 * MIB)],
        Fault::None,
    );
    let target = b.target("t", 24 * MIB);
    let (res, progress) = write(&b.request(url, &sha256_hex(&b.raw)), &target);
    res.unwrap();
    assert_eq!(std::fs::read(&target).unwrap(), b.raw);
    assert_eq!(progress.snapshot().resumes, 2);
    let ranges: Vec<_> = b.server.seen().into_iter().map(|s| s.range).collect();
    let second = 3 * MIB + 17;
    assert_eq!(
        ranges,
        vec![
            None,
            Some(format!("bytes={second}-")),
            Some(format!("bytes={}-", second + 5 * MIB))
        ]
    );
}

#[test]
fn a_redirect_is_followed_and_the_download_resumes_at_the_final_url() {
    let b = bed();
    let url = b.serve("/disk.img", &b.raw, &[], Fault::Redirect("/real.img"));
    b.serve(
        "/real.img",
        &b.raw,
        &[Fault::DropAfter(3 * MIB + 17)],
        Fault::None,
    );
    let target = b.target("t", 24 * MIB);
    let (res, progress) = write(&b.request(url, &sha256_hex(&b.raw)), &target);
    res.unwrap();
    assert_eq!(std::fs::read(&target).unwrap(), b.raw);
    assert_eq!(progress.snapshot().resumes, 1);
    let seen: Vec<_> = b
        .server
        .seen()
        .into_iter()
        .map(|s| {
            let ours = s
                .user_agent
                .is_some_and(|u| u.starts_with("ironic-deploy-agent/"));
            (s.path, s.range, ours)
        })
        .collect();
    let resumed = Some(format!("bytes={}-", 3 * MIB + 17));
    assert_eq!(
        seen,
        vec![
            ("/disk.img".into(), None, true),
            ("/real.img".into(), None, true),
            ("/real.img".into(), resumed, true),
        ]
    );
}

#[test]
fn a_server_ignoring_range_is_read_again_from_the_start() {
    let b = bed();
    let url = b.serve(
        "/disk.img",
        &b.raw,
        &[Fault::DropAfter(7 * MIB)],
        Fault::IgnoreRange,
    );
    let target = b.target("t", 24 * MIB);
    let (res, progress) = write(&b.request(url, &sha256_hex(&b.raw)), &target);
    assert_eq!(res.unwrap().downloaded, 24 * MIB);
    assert_eq!(std::fs::read(&target).unwrap(), b.raw);
    assert_eq!(progress.snapshot().resumes, 1);
}

#[test]
fn server_errors_are_retried_and_client_errors_are_final() {
    let b = bed();
    let url = b.serve(
        "/flaky.img",
        &b.raw,
        &[Fault::Status(503), Fault::Status(502)],
        Fault::None,
    );
    let target = b.target("t", 24 * MIB);
    write(&b.request(url, &sha256_hex(&b.raw)), &target)
        .0
        .unwrap();

    let url = b.serve("/gone.img", &b.raw, &[], Fault::Status(404));
    let target = b.target("t2", 24 * MIB);
    let err = write(&b.request(url.clone(), &sha256_hex(&b.raw)), &target)
        .0
        .unwrap_err();
    assert!(
        matches!(err, ImageError::HttpStatus { status: 404, .. }),
        "{err}"
    );
    assert_eq!(
        b.server
            .seen()
            .iter()
            .filter(|s| s.path == "/gone.img")
            .count(),
        1,
        "4xx must not be retried"
    );
    assert_wiped(&target);
}

#[test]
fn a_stalled_server_ends_in_a_precise_error_and_a_wiped_disk() {
    let b = bed();
    let url = b.serve("/disk.img", &b.raw, &[], Fault::StallAt(2 * MIB));
    let target = b.target("t", 24 * MIB);
    let mut req = b.request(url, &sha256_hex(&b.raw));
    req.http.stall_timeout = Duration::from_millis(500);
    req.http.retries = 2;
    let err = write(&req, &target).0.unwrap_err();
    let msg = err.to_string();
    assert!(
        matches!(err, ImageError::Download { attempts: 3, offset, .. } if offset == 2 * MIB),
        "{msg}"
    );
    assert!(
        msg.contains("stalled: no data for 0.5 s at byte 2097152"),
        "{msg}"
    );
    assert_eq!(error_kind(&err).type_name(), "ImageDownloadError");
    assert_wiped(&target);
}

#[test]
fn a_wrong_checksum_leaves_no_partition_table() {
    let b = bed();
    let url = b.serve("/disk.img", &b.raw, &[], Fault::None);
    let target = b.target("t", 24 * MIB);
    let wrong = "0".repeat(64);
    let err = write(&b.request(url, &wrong), &target).0.unwrap_err();
    let msg = err.to_string();
    assert!(
        matches!(err, ImageError::ChecksumMismatch { bytes, .. } if bytes == 24 * MIB),
        "{msg}"
    );
    assert!(
        msg.contains(&format!(
            "expected sha256 {wrong}, computed {}",
            sha256_hex(&b.raw)
        )),
        "{msg}"
    );
    assert_eq!(error_kind(&err).type_name(), "ImageChecksumError");
    assert_wiped(&target);
}

#[test]
fn a_truncated_image_is_caught_by_its_checksum_or_its_format() {
    let b = bed();
    let short = &b.raw[..(10 * MIB as usize + 5)];
    let url = b.serve("/short.img", short, &[], Fault::None);
    let target = b.target("t", 24 * MIB);
    let err = write(&b.request(url, &sha256_hex(&b.raw)), &target)
        .0
        .unwrap_err();
    assert!(
        matches!(err, ImageError::ChecksumMismatch { bytes, .. } if bytes == 10 * MIB + 5),
        "{err}"
    );
    assert_wiped(&target);

    let zst = zstd::encode_all(&b.raw[..], 3).unwrap();
    let cut = &zst[..zst.len() / 2];
    let url = b.serve("/short.img.zst", cut, &[], Fault::None);
    let target = b.target("t2", 24 * MIB);
    let err = write(&b.request(url, &sha256_hex(cut)), &target)
        .0
        .unwrap_err();
    let msg = err.to_string();
    assert!(
        matches!(err, ImageError::Corrupt { format: "zstd", .. }),
        "{msg}"
    );
    assert_wiped(&target);
}

#[test]
fn corrupt_and_trailing_compressed_data_are_refused() {
    let b = bed();
    // As the zstd tool makes them: with a content checksum.
    let mut enc = zstd::stream::Encoder::new(Vec::new(), 3).unwrap();
    enc.include_checksum(true).unwrap();
    enc.write_all(&b.raw).unwrap();
    let mut zst = enc.finish().unwrap();
    let mid = zst.len() / 2;
    for x in &mut zst[mid..mid + 64] {
        *x ^= 0x5a;
    }
    let url = b.serve("/bad.img.zst", &zst, &[], Fault::None);
    let target = b.target("t", 24 * MIB);
    let err = write(&b.request(url, &sha256_hex(&zst)), &target)
        .0
        .unwrap_err();
    let msg = err.to_string();
    assert!(
        matches!(err, ImageError::Corrupt { format: "zstd", .. }),
        "{msg}"
    );
    assert!(msg.contains("at compressed byte"), "{msg}");
    assert_eq!(error_kind(&err).type_name(), "ImageWriteError");
    assert_wiped(&target);

    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(&b.raw).unwrap();
    let mut gz = gz.finish().unwrap();
    gz.extend_from_slice(b"trailing junk");
    let url = b.serve("/junk.img.gz", &gz, &[], Fault::None);
    let target = b.target("t2", 24 * MIB);
    let err = write(&b.request(url, &sha256_hex(&gz)), &target)
        .0
        .unwrap_err();
    assert!(
        matches!(err, ImageError::Corrupt { format: "gzip", .. }),
        "{err}"
    );
    assert_wiped(&target);
}

#[test]
fn checksum_files_are_fetched_and_matched_by_name() {
    let b = bed();
    let url = b.serve("/images/disk.img", &b.raw, &[], Fault::None);
    let sums = format!(
        "{}  other.img\n{}  disk.img\n",
        "1".repeat(64),
        sha256_hex(&b.raw)
    );
    let sums_url = b.serve("/images/SHA256SUMS", sums.as_bytes(), &[], Fault::None);
    let target = b.target("t", 24 * MIB);
    let report = write(&b.request(url.clone(), &sums_url), &target)
        .0
        .unwrap();
    assert_eq!(report.digest.algo, Algo::Sha256);

    let bsd_url = b.serve(
        "/images/SUMS.bsd",
        b"SHA256 (else.img) = 00\n",
        &[],
        Fault::None,
    );
    let target = b.target("t2", 24 * MIB);
    let err = write(&b.request(url, &bsd_url), &target).0.unwrap_err();
    assert!(
        err.to_string()
            .contains("no checksum listed for \"disk.img\""),
        "{err}"
    );
    // Nothing was touched: the old disk is still there.
    assert_eq!(std::fs::read(&target).unwrap(), b.raw);
}

#[test]
fn an_image_larger_than_the_disk_or_a_disallowed_disk_is_refused() {
    let b = bed();
    let url = b.serve("/disk.img", &b.raw, &[], Fault::None);
    let target = b.target("small", 16 * MIB);
    let err = write(&b.request(url.clone(), &sha256_hex(&b.raw)), &target)
        .0
        .unwrap_err();
    assert!(
        matches!(err, ImageError::TooLarge { needed, size, .. } if needed == 24 * MIB && size == 16 * MIB),
        "{err}"
    );
    assert_wiped(&target);

    let target = b.target("other", 24 * MIB);
    let req = b.request(url, &sha256_hex(&b.raw));
    let progress = Progress::default();
    let err = write_image(
        &req,
        &target,
        &policy(Path::new("/dev/null-not-this")),
        &progress,
    )
    .unwrap_err();
    assert!(matches!(err, ImageError::Refused(_)), "{err}");
    assert_eq!(error_kind(&err).type_name(), "ProtectedDeviceError");
    assert_eq!(
        std::fs::read(&target).unwrap(),
        b.raw,
        "a refused disk must be untouched"
    );
}

#[test]
fn the_total_download_time_is_limited_separately_from_stalls() {
    let b = bed();
    let url = b.serve("/slow.img", &b.raw, &[], Fault::StallAt(3 * MIB));
    let target = b.target("t", 24 * MIB);
    let mut req = b.request(url, &sha256_hex(&b.raw));
    req.http.stall_timeout = Duration::from_secs(30);
    req.http.total_timeout = Some(Duration::from_secs(1));
    let started = std::time::Instant::now();
    let err = write(&req, &target).0.unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the total limit must cut the stall short"
    );
    assert!(
        matches!(err, ImageError::TotalTimeout { secs: 1, offset, .. } if offset == 3 * MIB),
        "{err}"
    );
    assert_wiped(&target);
}

#[test]
fn an_authorization_value_with_cr_lf_is_refused_before_any_request() {
    let b = bed();
    let url = b.serve("/auth.img", &b.raw, &[], Fault::None);
    let mut req = b.request(url, &sha256_hex(&b.raw));
    req.http.authorization = Some("Basic dTpw\r\nX-Injected: 1".into());
    let target = b.target("t-auth", 24 * MIB);
    let err = write(&req, &target).0.unwrap_err();
    assert_eq!(
        error_kind(&err).type_name(),
        "InvalidCommandParamsError",
        "{err}"
    );
    assert!(err.to_string().contains("Authorization"), "{err}");
    assert!(
        b.server.seen().iter().all(|s| s.path != "/auth.img"),
        "a request went out"
    );
}

#[test]
fn bad_tls_settings_are_found_before_the_disk_is_touched() {
    let b = bed();
    let mut req = b.request("https://127.0.0.1:9/disk.img".into(), &sha256_hex(&b.raw));
    req.http.cafile = Some("/nonexistent/ca.pem".into());
    let target = b.target("t-tls", 24 * MIB);
    let err = write(&req, &target).0.unwrap_err();
    assert_eq!(
        error_kind(&err).type_name(),
        "InvalidCommandParamsError",
        "{err}"
    );
    assert!(err.before_write(), "{err}");
    // The old disk is as it was: its partition table is still there.
    let f = std::fs::File::open(&target).unwrap();
    let sigs = agent_devices::disk::erase::probe_signatures(&f).unwrap();
    assert!(sigs.iter().any(|s| s == "gpt"), "{sigs:?}");
}

/// The conductor's deep image inspection (`permitted_image_formats`,
/// `disk_format`): judged on what the image holds, also inside zstd, and
/// refused before a byte of it reaches the disk (the old table is wiped,
/// fail-closed, never half-written).
#[test]
fn formats_the_conductor_does_not_permit_are_refused_before_writing() {
    use agent_contents::image::FormatPolicy;
    let b = bed();
    let sha = format!("sha256:{}", sha256_hex(&b.raw));
    let zst = zstd::encode_all(&b.raw[..], 3).unwrap();
    let zst_sha = format!("sha256:{}", sha256_hex(&zst));
    let only_qcow2 = vec!["qcow2".to_string()];
    for (name, data, checksum) in [("/p.img", &b.raw, &sha), ("/p.img.zst", &zst, &zst_sha)] {
        let url = b.serve(name, data, &[], Fault::None);
        let target = b.target(&format!("t{}", name.len()), 64 * MIB);
        let mut req = b.request(url, checksum);
        req.formats = FormatPolicy::from_conductor(true, &only_qcow2, None);
        let err = write(&req, &target).0.unwrap_err();
        assert!(matches!(err, ImageError::NotPermitted { .. }), "{err}");
        let text = err.to_string();
        assert!(
            text.contains("Detected image format was gpt, but only qcow2 are allowed"),
            "{text}"
        );
        assert_eq!(error_kind(&err).type_name(), "InvalidImage");
        assert_wiped(&target);

        // The conductor announced qcow2; the image is a GPT disk.
        req.formats = FormatPolicy::from_conductor(
            true,
            &["raw".into(), "gpt".into(), "qcow2".into()],
            Some("qcow2"),
        );
        let err = write(&req, &target).0.unwrap_err().to_string();
        assert!(
            err.contains("Expected format was qcow2, but image was actually gpt"),
            "{err}"
        );

        // Deep inspection disabled by the conductor: written.
        req.formats = FormatPolicy::from_conductor(false, &only_qcow2, Some("qcow2"));
        write(&req, &target).0.unwrap();
        // (The backup GPT moves to the larger disk's end: compare the data.)
        let written = std::fs::read(&target).unwrap();
        let data = MIB as usize..16 * MIB as usize;
        assert!(
            written[data.clone()] == b.raw[data],
            "the image data differs"
        );
    }
}
