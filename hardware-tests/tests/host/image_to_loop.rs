//! The image pipeline on real block devices (loop devices this test makes):
//! O_DIRECT writes, BLKZEROOUT for zero runs, the backup GPT moved to the
//! end of a larger disk, the kernel re-reading the new partition table, and
//! after a failed write (wrong checksum) a device without any partition.

use std::path::Path;
use std::process::Command;

use agent_base::config::{Config, RunMode};
use agent_contents::image::checksum::ChecksumSpec;
use agent_contents::image::fetch::HttpOptions;
use agent_contents::image::progress::Progress;
use agent_contents::image::{write_image, ImageError, WriteRequest};
use agent_devices::disk::WritePolicy;
use agent_testkit::image_server::{Fault, ImageServer};
use hardware_tests::loopdev::LoopDevice;

const MIB: u64 = 1 << 20;

fn policy(dev: &Path) -> WritePolicy {
    WritePolicy::from_config(&Config {
        mode: RunMode::Host,
        allowed_devices: vec![dev.to_path_buf()],
        ..Config::default()
    })
}

/// A 32 MiB GPT image with three partitions, random data in the first, an
/// ext4 filesystem image in the second region left as zeros.
fn image(dir: &Path) -> (std::path::PathBuf, String) {
    let path = dir.join("disk.img");
    std::fs::File::create(&path)
        .unwrap()
        .set_len(32 * MIB)
        .unwrap();
    hardware_tests::run(Command::new("bash").args([
        "-c",
        &format!(
            "printf 'label: gpt\\nsize=8MiB, name=one\\nsize=8MiB, name=two\\nname=three\\n' | sfdisk --quiet --no-reread --no-tell-kernel {0} && head -c 6M /dev/urandom | dd of={0} bs=1M seek=1 conv=notrunc status=none",
            path.display()
        ),
    ]))
    .unwrap();
    let data = std::fs::read(&path).unwrap();
    let sha = ring::digest::digest(&ring::digest::SHA256, &data);
    (
        path,
        sha.as_ref().iter().map(|b| format!("{b:02x}")).collect(),
    )
}

fn request(url: String, sha: &str) -> WriteRequest {
    WriteRequest {
        urls: vec![url],
        checksum: ChecksumSpec::parse_cli(&format!("sha256:{sha}")).unwrap(),
        md5_allowed: false,
        format: None,
        formats: Default::default(),
        http: HttpOptions::default(),
    }
}

#[test]
fn a_gpt_image_lands_on_a_larger_block_device_and_the_kernel_sees_its_partitions() {
    hardware_tests::require_root("writing images to loop devices");
    let dir = tempfile::tempdir().unwrap();
    let (img, sha) = image(dir.path());
    let server = ImageServer::start().unwrap();
    server.route("/disk.img", &img, &[], Fault::None);
    let disk = LoopDevice::new(96 * MIB).unwrap();
    let report = write_image(
        &request(server.url("/disk.img"), &sha),
        &disk.path,
        &policy(&disk.path),
        &Progress::default(),
    )
    .unwrap();
    assert_eq!(report.image_size, 32 * MIB);
    assert!(report.gpt_moved);
    // The agent asked the kernel to re-read the table (BLKRRPART); this
    // host's loop driver does not scan partitions by itself, so have partx
    // add them from the table as the kernel reads it (again while a udev's
    // own re-read has them dropped).
    disk.settled_partitions(3).unwrap();
    let dump = hardware_tests::run(Command::new("sfdisk").arg("-d").arg(&disk.path)).unwrap();
    assert!(
        dump.contains(&format!("last-lba: {}", 96 * MIB / 512 - 34)),
        "{dump}"
    );
    // The partitions hold the image's bytes.
    let want = std::fs::read(&img).unwrap();
    let got = std::fs::read(&disk.path).unwrap();
    assert_eq!(
        got[(MIB as usize)..(31 * MIB as usize)],
        want[(MIB as usize)..(31 * MIB as usize)]
    );
}

#[test]
fn a_failed_write_leaves_a_block_device_without_partitions() {
    hardware_tests::require_root("writing images to loop devices");
    let dir = tempfile::tempdir().unwrap();
    let (img, _) = image(dir.path());
    let server = ImageServer::start().unwrap();
    server.route("/disk.img", &img, &[], Fault::None);
    let disk = LoopDevice::new(64 * MIB).unwrap();
    disk.partition_and_format().unwrap();
    assert!(!disk.kernel_partitions().is_empty());
    let err = write_image(
        &request(server.url("/disk.img"), &"0".repeat(64)),
        &disk.path,
        &policy(&disk.path),
        &Progress::default(),
    )
    .unwrap_err();
    assert!(matches!(err, ImageError::ChecksumMismatch { .. }), "{err}");
    assert!(
        disk.kernel_partitions().is_empty(),
        "{:?}",
        disk.kernel_partitions()
    );
    assert!(
        disk.signatures().unwrap().is_empty(),
        "{:?}",
        disk.signatures()
    );
}
