//! Shared by the image-pipeline tests: a bed with a real GPT disk image
//! made by sfdisk, an image server on loopback, targets holding an old disk,
//! and the checks on what a failed write leaves behind.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use agent_base::config::{Config, RunMode};
use agent_contents::image::checksum::ChecksumSpec;
use agent_contents::image::fetch::HttpOptions;
use agent_contents::image::progress::Progress;
use agent_contents::image::{write_image, ImageError, WriteReport, WriteRequest};
use agent_devices::disk::WritePolicy;
use agent_testkit::image_server::{Fault, ImageServer};

pub(crate) const MIB: u64 = 1 << 20;

pub(crate) struct Bed {
    pub dir: tempfile::TempDir,
    pub server: ImageServer,
    pub image: PathBuf,
    pub raw: Vec<u8>,
}

/// A 24 MiB GPT disk image: partition 1 random data, partition 2 zeros
/// with a text marker, and the backup GPT at its end.
pub(crate) fn make_image(path: &Path) -> Vec<u8> {
    let f = std::fs::File::create(path).unwrap();
    f.set_len(24 * MIB).unwrap();
    drop(f);
    agent_testkit::sfdisk(
        path,
        "label: gpt\nlabel-id: 0D1F8A2C-4B5E-4C6D-8E9F-0A1B2C3D4E5F\nstart=2048, size=20480, name=data\nstart=22528, size=20480, name=empty\n",
    );
    let mut raw = std::fs::read(path).unwrap();
    let mut rng = fastrand::Rng::with_seed(7);
    for b in &mut raw[(MIB as usize)..(6 * MIB as usize)] {
        *b = rng.u8(..);
    }
    raw[(15 * MIB as usize)..(15 * MIB as usize + 12)].copy_from_slice(b"hello, disk!");
    std::fs::write(path, &raw).unwrap();
    raw
}

pub(crate) fn sha256_hex(data: &[u8]) -> String {
    let d = ring::digest::digest(&ring::digest::SHA256, data);
    d.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

pub(crate) fn bed() -> Bed {
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
    pub(crate) fn target(&self, name: &str, size: u64) -> PathBuf {
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

    pub(crate) fn request(&self, url: String, checksum: &str) -> WriteRequest {
        WriteRequest {
            urls: vec![url],
            checksum: ChecksumSpec::parse_cli(checksum).unwrap(),
            md5_allowed: false,
            format: None,
            formats: Default::default(),
            http: HttpOptions {
                stall_timeout: Duration::from_secs(2),
                retries: 3,
                retry_interval: Duration::from_millis(200),
                ..HttpOptions::default()
            },
        }
    }

    pub(crate) fn serve(&self, path: &str, data: &[u8], script: &[Fault], then: Fault) -> String {
        let file = self
            .dir
            .path()
            .join(format!("served{}", path.replace('/', "_")));
        std::fs::write(&file, data).unwrap();
        self.server.route(path, file, script, then);
        self.server.url(path)
    }
}

pub(crate) fn policy(device: &Path) -> WritePolicy {
    WritePolicy::from_config(&Config {
        mode: RunMode::Host,
        allowed_devices: vec![device.to_path_buf()],
        ..Config::default()
    })
}

pub(crate) fn write(
    req: &WriteRequest,
    target: &Path,
) -> (Result<WriteReport, ImageError>, Progress) {
    let progress = Progress::default();
    (
        write_image(req, target, &policy(target), &progress),
        progress,
    )
}

/// No partition table or other signature anywhere libblkid looks, and the
/// first MiB is zero.
pub(crate) fn assert_wiped(target: &Path) {
    let f = std::fs::File::open(target).unwrap();
    let sigs = agent_devices::disk::erase::probe_signatures(&f).unwrap();
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

pub(crate) fn sfdisk_dump(target: &Path) -> String {
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

pub(crate) fn qemu_img(args: &[&str]) {
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
