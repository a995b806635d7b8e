//! The machine's own floor for a raw write, measured in the same run as the
//! agent: the CPU time the transport and the device cost with no hashing at
//! all (a plain HTTP GET read straight into aligned buffers and written with
//! O_DIRECT, zero blocks by BLKZEROOUT), and what that leaves for a pipeline
//! that must also hash every byte on one core.
//!
//! On a CPU whose sha256 is slow this floor is the hash alone; on one with
//! SHA extensions (sha256 at ~1.5 GB/s) moving the bytes costs as much CPU as
//! hashing them, and with N cores (two here) the wall time can be no less
//! than `max(hash, (hash + transport) / N)`.

use std::fs::{File, OpenOptions};
use std::io::{Cursor, Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::time::Instant;

use agent_contents::image::buffers::AlignedBuf;
use anyhow::{bail, Context, Result};

const BLOCK: usize = 4 << 20;

/// Wall and machine-wide CPU seconds of one measured run.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Cost {
    pub wall: f64,
    pub cpu: f64,
}

impl Cost {
    /// The shorter wall time and the lesser CPU time of two runs.
    pub(crate) fn best(self, other: Cost) -> Cost {
        Cost {
            wall: self.wall.min(other.wall),
            cpu: self.cpu.min(other.cpu),
        }
    }
}

/// One measured floor copy (`f` returns the bytes it moved), checked to
/// have moved `size` bytes.
pub(crate) fn copy_once(size: u64, f: &mut dyn FnMut() -> Result<u64>) -> Result<Cost> {
    let (c, n) = measure(f)?;
    if n != size {
        bail!("the floor copy moved {n} bytes, expected {size}");
    }
    Ok(c)
}

/// Busy CPU seconds of the whole machine so far (`/proc/stat`: user, nice,
/// system, irq, softirq and steal), so kernel threads such as the loop
/// device's worker and the in-process HTTP server are counted too.
fn busy_cpu_seconds() -> Result<f64> {
    let stat = std::fs::read_to_string("/proc/stat").context("reading /proc/stat")?;
    let line = stat
        .lines()
        .find(|l| l.starts_with("cpu "))
        .context("/proc/stat has no cpu line")?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(str::parse)
        .collect::<Result<_, _>>()
        .context("parsing /proc/stat")?;
    if v.len() < 8 {
        bail!("/proc/stat cpu line too short: {line}");
    }
    let busy = v[0] + v[1] + v[2] + v[5] + v[6] + v[7];
    let hz = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .unwrap_or(100);
    Ok(busy as f64 / hz.max(1) as f64)
}

/// Runs `f`, returning its wall time and the CPU time the machine spent.
pub(crate) fn measure<T>(f: impl FnOnce() -> Result<T>) -> Result<(Cost, T)> {
    let cpu0 = busy_cpu_seconds()?;
    let t = Instant::now();
    let v = f()?;
    let wall = t.elapsed().as_secs_f64();
    let cpu = busy_cpu_seconds()? - cpu0;
    Ok((Cost { wall, cpu }, v))
}

/// `GET url` over plain HTTP/1.1; the reader returned yields the body
/// (Content-Length bytes) straight from the socket.
pub(crate) fn http_body(url: &str) -> Result<impl Read> {
    let rest = url
        .strip_prefix("http://")
        .with_context(|| format!("{url}: only http:// is measured"))?;
    let (host, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let conn = TcpStream::connect(host).with_context(|| format!("connecting to {host}"))?;
    get_body(
        conn,
        url,
        &format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n"),
    )
}

/// Sends `request` on `conn` (in one write: one TLS record over TLS) and
/// reads the response head; the reader returned yields exactly the body's
/// Content-Length bytes (the server may keep the connection open).
pub(crate) fn get_body<S: Read + Write>(
    mut conn: S,
    url: &str,
    request: &str,
) -> Result<impl Read> {
    conn.write_all(request.as_bytes())?;
    conn.flush()?;
    let mut head = Vec::new();
    let mut chunk = [0u8; 4096];
    let body_start = loop {
        let n = conn.read(&mut chunk)?;
        if n == 0 {
            bail!("{url}: connection closed inside the headers");
        }
        head.extend_from_slice(&chunk[..n]);
        if let Some(i) = head.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        if head.len() > 64 << 10 {
            bail!("{url}: headers longer than 64 KiB");
        }
    };
    if !head.starts_with(b"HTTP/1.1 200") {
        let status = String::from_utf8_lossy(&head[..head.len().min(40)]).into_owned();
        bail!("{url}: {status}");
    }
    let text = String::from_utf8_lossy(&head[..body_start]).to_ascii_lowercase();
    let len: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .with_context(|| format!("{url}: no Content-Length"))?;
    let rest = head.split_off(body_start);
    Ok(Cursor::new(rest).chain(conn).take(len))
}

/// Copies `src` to `dev` in 4 MiB blocks: O_DIRECT writes, all-zero blocks
/// by BLKZEROOUT (on a block device). No hashing and no other work. Returns
/// the bytes copied.
pub(crate) fn direct_copy(mut src: impl Read, dev: &Path) -> Result<u64> {
    use std::os::unix::fs::FileTypeExt;
    let is_block = std::fs::metadata(dev)?.file_type().is_block_device();
    let out = OpenOptions::new()
        .write(true)
        .custom_flags(nix::libc::O_DIRECT)
        .open(dev)
        .with_context(|| format!("opening {} with O_DIRECT", dev.display()))?;
    let mut buf = AlignedBuf::new(BLOCK);
    let mut offset = 0u64;
    loop {
        buf.set_len(0);
        while !buf.is_full() {
            let filled = buf.len();
            let n = src.read(&mut buf.spare()[filled..])?;
            if n == 0 {
                break;
            }
            buf.set_len(buf.len() + n);
        }
        let data = &buf[..];
        if data.is_empty() {
            return Ok(offset);
        }
        if data.len() % 512 != 0 {
            bail!("the image is not a whole number of 512-byte sectors");
        }
        if is_block && is_zero(data) {
            zero(&out, offset, data.len() as u64)?;
        } else {
            out.write_all_at(data, offset)
                .with_context(|| format!("writing {} at {offset}", dev.display()))?;
        }
        offset += data.len() as u64;
    }
}

fn zero(dev: &File, offset: u64, len: u64) -> Result<()> {
    agent_devices::disk::ioctl::zero_out(dev, offset, len).context("BLKZEROOUT")
}

fn is_zero(data: &[u8]) -> bool {
    const PAGE: [u8; 4096] = [0; 4096];
    data.chunks(PAGE.len()).all(|c| c == &PAGE[..c.len()])
}

/// The CPUs this process may run on (the `cores` of [`floor_secs`]).
pub(crate) fn cores() -> f64 {
    std::thread::available_parallelism().map_or(1, |n| n.get()) as f64
}

/// The least wall time a verified write can take on `cores` CPUs: the hash
/// on one core, no stage faster than it runs alone (`longest_stage`, e.g.
/// the decompressor), and everything else (`other_cpu`: transport, decoding
/// and the device, measured without the hash) sharing what is left.
pub(crate) fn floor_secs(cores: f64, hash_secs: f64, other_cpu: f64, longest_stage: f64) -> f64 {
    hash_secs
        .max(longest_stage)
        .max((hash_secs + other_cpu) / cores.max(1.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_floor_is_the_hash_until_the_transport_outweighs_it() {
        assert_eq!(floor_secs(2.0, 2.0, 1.0, 0.5), 2.0);
        assert_eq!(floor_secs(2.0, 1.4, 2.0, 0.5), 1.7);
        assert_eq!(floor_secs(2.0, 0.4, 1.0, 0.9), 0.9);
        // More cores share the rest further, never below the hash.
        assert_eq!(floor_secs(4.0, 1.4, 2.0, 0.5), 1.4);
        assert_eq!(floor_secs(4.0, 0.4, 3.6, 0.5), 1.0);
    }

    #[test]
    fn direct_copy_writes_data_and_zero_blocks() {
        let dir = tempfile::tempdir().unwrap();
        let dev = dir.path().join("dev");
        std::fs::write(&dev, vec![0xAAu8; 3 * BLOCK]).unwrap();
        let mut src = vec![7u8; BLOCK];
        src.extend(vec![0u8; BLOCK]);
        src.extend(vec![9u8; 4096]);
        // tmpfs and others refuse O_DIRECT: nothing to measure there.
        match direct_copy(&src[..], &dev) {
            Ok(n) => assert_eq!(n, src.len() as u64),
            Err(e) if format!("{e:#}").contains("O_DIRECT") => return,
            Err(e) => panic!("{e:#}"),
        }
        let got = std::fs::read(&dev).unwrap();
        assert_eq!(&got[..src.len()], &src[..]);
    }
}
