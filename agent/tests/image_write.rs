//! The image pipeline end to end on regular files standing in for disks:
//! every format, resumption, and every failure mode leaving no partition
//! table behind. Images are real GPT disks made by sfdisk.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use agent::commands::image::error_kind;
use agent::config::{Config, RunMode};
use agent::disk::WritePolicy;
use agent::image::checksum::{Algo, ChecksumSpec};
use agent::image::fetch::HttpOptions;
use agent::image::progress::Progress;
use agent::image::{write_image, ImageError, WriteReport, WriteRequest};
use agent::testconductor::image_server::{Fault, ImageServer};

const MIB: u64 = 1 << 20;

struct Bed {
    dir: tempfile::TempDir,
    server: ImageServer,
    image: PathBuf,
    raw: Vec<u8>,
}

/// A 24 MiB GPT disk image: partition 1 random data, partition 2 zeros
/// with a text marker, and the backup GPT at its end.
fn make_image(path: &Path) -> Vec<u8> {
    let f = std::fs::File::create(path).unwrap();
    f.set_len(24 * MIB).unwrap();
    drop(f);
    let mut sf = Command::new("sfdisk");
    sf.args(["--quiet", "--no-reread", "--no-tell-kernel"])
        .arg(path)
        .stdin(std::process::Stdio::piped());
    let mut child = sf.spawn().expect("sfdisk (package fdisk) is needed");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"label: gpt\nlabel-id: 0D1F8A2C-4B5E-4C6D-8E9F-0A1B2C3D4E5F\nstart=2048, size=20480, name=data\nstart=22528, size=20480, name=empty\n")
        .unwrap();
    assert!(child.wait().unwrap().success());
    let mut raw = std::fs::read(path).unwrap();
    let mut rng = fastrand::Rng::with_seed(7);
    for b in &mut raw[(MIB as usize)..(6 * MIB as usize)] {
        *b = rng.u8(..);
    }
    raw[(15 * MIB as usize)..(15 * MIB as usize + 12)].copy_from_slice(b"hello, disk!");
    std::fs::write(path, &raw).unwrap();
    raw
}

fn sha256_hex(data: &[u8]) -> String {
    let d = ring::digest::digest(&ring::digest::SHA256, data);
    d.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

fn bed() -> Bed {
    let dir = tempfile::tempdir().unwrap();
    let image = dir.path().join("disk.img");
    let raw = make_image(&image);
    let server = ImageServer::start().unwrap();
    Bed {
        dir,
        server,
        image,
        raw,
    }
}

impl Bed {
    /// A target "disk" of `size` bytes, holding an old GPT disk so that
    /// tests can see it is gone after a failure.
    fn target(&self, name: &str, size: u64) -> PathBuf {
        let path = self.dir.path().join(name);
        std::fs::copy(&self.image, &path).unwrap();
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(size)
            .unwrap();
        path
    }

    fn request(&self, url: String, checksum: &str) -> WriteRequest {
        WriteRequest {
            urls: vec![url],
            checksum: ChecksumSpec::parse_cli(checksum).unwrap(),
            md5_allowed: false,
            format: None,
            http: HttpOptions {
                stall_timeout: Duration::from_secs(2),
                retries: 3,
                retry_interval: Duration::from_millis(200),
                ..HttpOptions::default()
            },
        }
    }

    fn serve(&self, path: &str, data: &[u8], script: &[Fault], then: Fault) -> String {
        let file = self
            .dir
            .path()
            .join(format!("served{}", path.replace('/', "_")));
        std::fs::write(&file, data).unwrap();
        self.server.route(path, file, script, then);
        self.server.url(path)
    }
}

fn policy(device: &Path) -> WritePolicy {
    WritePolicy::from_config(&Config {
        mode: RunMode::Host,
        allowed_devices: vec![device.to_path_buf()],
        ..Config::default()
    })
}

fn write(req: &WriteRequest, target: &Path) -> (Result<WriteReport, ImageError>, Progress) {
    let progress = Progress::default();
    (
        write_image(req, target, &policy(target), &progress),
        progress,
    )
}

/// No partition table or other signature anywhere libblkid looks, and the
/// first MiB is zero.
fn assert_wiped(target: &Path) {
    let f = std::fs::File::open(target).unwrap();
    let sigs = agent::disk::erase::probe_signatures(&f).unwrap();
    assert!(
        sigs.is_empty(),
        "signatures left on {}: {sigs:?}",
        target.display()
    );
    let data = std::fs::read(target).unwrap();
    assert!(
        data[..MIB as usize].iter().all(|b| *b == 0),
        "first MiB not zero"
    );
}

fn sfdisk_dump(target: &Path) -> String {
    let out = Command::new("sfdisk")
        .arg("-d")
        .arg(target)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "sfdisk -d: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

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
fn a_redirect_moves_the_download_to_reqwest_which_resumes_too() {
    let b = bed();
    // Plain http:// is read by the direct path until a reply needs reqwest.
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
            let by = s.user_agent.unwrap_or_default();
            let by = if by.starts_with("ironic-deploy-agent/") {
                "direct"
            } else {
                "reqwest"
            };
            (s.path, s.range, by)
        })
        .collect();
    let resumed = Some(format!("bytes={}-", 3 * MIB + 17));
    assert_eq!(
        seen,
        vec![
            ("/disk.img".into(), None, "direct"),
            ("/disk.img".into(), None, "reqwest"),
            ("/real.img".into(), None, "reqwest"),
            ("/disk.img".into(), resumed.clone(), "reqwest"),
            ("/real.img".into(), resumed, "reqwest"),
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

fn qemu_img(args: &[&str]) {
    let out = Command::new("qemu-img")
        .args(args)
        .output()
        .expect("qemu-img (package qemu-utils) is needed; ci/install-deps installs it");
    assert!(
        out.status.success(),
        "qemu-img {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

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
    let sigs = agent::disk::erase::probe_signatures(&f).unwrap();
    assert!(sigs.iter().any(|s| s == "gpt"), "{sigs:?}");
}
