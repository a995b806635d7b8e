//! The agent's own writes: `agent write-image` run `--reps` times against
//! the loop device, the device checked after each, and the fastest kept.
//! A row with a floor (floor.rs) runs its floor copy right before each of
//! its writes, so that a write and the floor it is held against see the
//! machine in the same state: on this shared machine the CPU time of the
//! same write varies by half from one run to the next, and drifts over
//! minutes (agent/docs/image-writing.md).

use std::path::Path;
use std::process::Command;

use anyhow::{bail, Context, Result};

use crate::{floor, sh, sha256_prefix, Opts};

/// The device written and what it must hold afterwards.
pub struct Device<'a> {
    pub path: &'a Path,
    /// sha256 of the image's first `size` bytes.
    pub image_sha: &'a str,
    pub size: u64,
}

/// What the agent wrote to the device.
pub struct Write<'a> {
    pub url: &'a str,
    /// `algo:hex`.
    pub checksum: &'a str,
    pub cafile: Option<&'a Path>,
}

/// The fastest of the agent's writes.
pub struct Ours {
    pub secs: f64,
    /// Machine-wide CPU seconds of the fastest run.
    pub cpu: f64,
    pub peak_rss_mib: f64,
}

/// A floor copy of the same image: returns the bytes it moved.
pub type FloorCopy<'f> = &'f mut dyn FnMut() -> Result<u64>;

/// `o.reps` writes, each after one run of `floor` if there is one; the
/// fastest write, and the floor's shortest wall and least CPU time.
pub fn run_agent(
    o: &Opts,
    w: &Write,
    dev: &Device,
    mut floor: Option<FloorCopy>,
) -> Result<(Ours, Option<floor::Cost>)> {
    let mut best_run: Option<(floor::Cost, String)> = None;
    let mut floor_best: Option<floor::Cost> = None;
    for _ in 0..o.reps {
        if let Some(f) = floor.as_mut() {
            let c = floor::copy_once(dev.size, f)?;
            floor_best = Some(floor_best.map_or(c, |b| b.best(c)));
        }
        let (cost, out) = write_once(o, w, dev)?;
        if best_run.as_ref().is_none_or(|(b, _)| cost.wall < b.wall) {
            best_run = Some((cost, out));
        }
    }
    let (cost, out) = best_run.expect("reps >= 1");
    let peak = out
        .split("peak memory ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|v| v.parse::<f64>().ok())
        .with_context(|| format!("no peak memory in the agent's output: {out}"))?;
    let ours = Ours {
        secs: cost.wall,
        cpu: cost.cpu,
        peak_rss_mib: peak,
    };
    Ok((ours, floor_best))
}

/// One write, timed, and the device checked afterwards (outside the
/// timed part).
fn write_once(o: &Opts, w: &Write, dev: &Device) -> Result<(floor::Cost, String)> {
    // Start from a device holding something else, as a real disk does.
    sh(&format!(
        "dd if=/dev/zero of={} bs=4M count=4 oflag=direct status=none",
        dev.path.display()
    ))?;
    let (cost, out) = floor::measure(|| {
        hardware_tests::run(
            Command::new(&o.agent)
                .args([
                    "write-image",
                    "--image",
                    w.url,
                    "--checksum",
                    w.checksum,
                    "--device",
                ])
                .arg(dev.path)
                .args(
                    w.cafile
                        .iter()
                        .flat_map(|c| [std::ffi::OsStr::new("--cafile"), c.as_os_str()]),
                )
                .env("RUST_LOG", "warn"),
        )
    })?;
    eprintln!(
        "  {:.2} s ({:.2} CPU-s): {}",
        cost.wall,
        cost.cpu,
        out.trim()
    );
    let got = sha256_prefix(dev.path, dev.size)?;
    if got != dev.image_sha {
        bail!(
            "{}: the device does not hold the image afterwards ({got})",
            w.url
        );
    }
    Ok((cost, out))
}
