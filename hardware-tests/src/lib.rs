//! Fixtures for end-to-end tests: real Ironic 39.0.0 on loopback (started
//! with `ci/ironic/start.sh`, stopped by PID on drop), loop devices the test
//! creates (detached on drop), and a small client of Ironic's admin API.
//! Everything a fixture creates is removed when it is dropped, also when a
//! test fails. [`testimage`] builds the bootable disk image that the deploy
//! tests write and boot.

pub mod agentapi;
pub mod agentproc;
pub mod arm_demo;
pub mod bed;
pub mod coreosimage;
pub mod debs;
pub mod grubimage;
pub mod images;
pub mod ironic;
pub mod listeners;
pub mod liveroot;
pub mod loopdev;
pub mod netns;
pub mod own_server;
pub mod partimage;
pub mod registry;
pub mod slow_proxy;
pub mod sparse;
pub mod testimage;
pub mod udevd;

use std::path::PathBuf;
use std::process::Command;

use anyhow::{bail, Context, Result};

/// The repository root.
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("hardware-tests sits in the repository")
        .to_path_buf()
}

/// Fails the test with a reason unless running as root (loop devices need it).
pub fn require_root(what: &str) {
    assert!(
        is_root(),
        "{what} needs root (loop devices); run ci/test as root"
    );
}

/// Whether this process runs as root.
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(|u| u == "0"))
        })
        .unwrap_or(false)
}

/// Runs a command to completion; on failure the error names the command and
/// carries its output. Returns the trimmed standard output.
pub fn run(cmd: &mut Command) -> Result<String> {
    let out = cmd.output().with_context(|| format!("running {cmd:?}"))?;
    if !out.status.success() {
        bail!(
            "{cmd:?} failed ({}): {}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout).trim(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// mtools' `tool` on the FAT filesystem `image` (a file or device, with
/// `@@OFFSET` for one inside a disk image): `tool -i IMAGE`, without
/// mtools' drive-geometry sanity check, which our small images fail.
pub fn mtools(tool: &str, image: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut c = Command::new(tool);
    c.env("MTOOLS_SKIP_CHECK", "1").arg("-i").arg(image);
    c
}

/// `host` as it goes into a URL's authority: an IPv6 literal bracketed
/// (`fd99::1` → `[fd99::1]`, RFC 3986), anything else as it is.
pub fn url_host(host: &str) -> String {
    if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]")
    } else {
        host.to_string()
    }
}

/// The socket address of `host` (an IP address, IPv6 without brackets)
/// and `port`.
pub fn socket_addr(host: &str, port: u16) -> Result<std::net::SocketAddr> {
    let ip: std::net::IpAddr = host
        .parse()
        .with_context(|| format!("{host:?} is not an IP address"))?;
    Ok(std::net::SocketAddr::new(ip, port))
}

/// Lower-case hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Hex sha256 of the first `len` bytes of a file (`u64::MAX`: all of it),
/// read in 4 MiB pieces so large images never sit in memory.
pub fn sha256_prefix(path: &std::path::Path, len: u64) -> std::io::Result<String> {
    sha256_range(path, 0, len)
}

/// Hex sha256 of a whole file.
pub fn file_sha256(path: &std::path::Path) -> std::io::Result<String> {
    sha256_prefix(path, u64::MAX)
}

/// Hex sha256 of `len` bytes of a file from `offset` (fewer at its end).
pub fn sha256_range(path: &std::path::Path, offset: u64, len: u64) -> std::io::Result<String> {
    use std::io::{Read, Seek};
    let mut f = std::fs::File::open(path)?;
    f.seek(std::io::SeekFrom::Start(offset))?;
    let mut f = f.take(len);
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    let mut buf = vec![0u8; 4 << 20];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        ctx.update(&buf[..n]);
    }
    Ok(hex(ctx.finish().as_ref()))
}

/// A 4 MiB vfat config drive as mkfs.vfat makes it (512-byte sectors,
/// label CONFIG-2) holding `openstack/latest/NAME` for each (NAME, text),
/// built in `dir` with mtools (no mount); returns its bytes.
pub fn vfat_config_drive(dir: &std::path::Path, files: &[(&str, &str)]) -> Result<Vec<u8>> {
    let img = dir.join("cd.vfat");
    run(Command::new("mkfs.vfat")
        .args(["-C", "-S", "512", "-n", "CONFIG-2"])
        .arg(&img)
        .arg("4096"))?;
    let tree = dir.join("openstack/latest");
    std::fs::create_dir_all(&tree)?;
    for (name, text) in files {
        std::fs::write(tree.join(name), text)?;
    }
    run(Command::new("mcopy")
        .args(["-s", "-i"])
        .arg(&img)
        .arg(dir.join("openstack"))
        .arg("::/"))?;
    Ok(std::fs::read(img)?)
}
