//! The agent's own writes: `agent write-image` run `--reps` times against
//! the loop device, the device checked after each, and the fastest kept.
//! Right before each write the row's hash bound is measured (the row's file
//! hashed alone), and its floor copy runs if it has one (floor.rs), so that
//! a write and the bound and floor it is held against see the machine in
//! the same state: on this shared machine the CPU time of the same write
//! varies by half from one run to the next, and drifts over minutes; the
//! single-core hash rate moves too, by an eighth between runs
//! (agent/docs/image-writing.md).

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use anyhow::{bail, Context, Result};

use crate::{floor, sh, sha256_prefix, Opts};

/// The device written and what it must hold afterwards.
pub(crate) struct Device<'a> {
    pub path: &'a Path,
    /// sha256 of the image's first `size` bytes.
    pub image_sha: &'a str,
    pub size: u64,
}

/// What the agent wrote to the device.
pub(crate) struct Write<'a> {
    pub url: &'a str,
    /// `algo:hex`.
    pub checksum: &'a str,
    pub cafile: Option<&'a Path>,
}

/// The fastest of the agent's writes.
pub(crate) struct Ours {
    pub secs: f64,
    /// Machine-wide CPU seconds of the fastest run.
    pub cpu: f64,
    pub peak_rss_mib: f64,
}

/// A floor copy of the same image: returns the bytes it moved.
pub(crate) type FloorCopy<'f> = &'f mut dyn FnMut() -> Result<u64>;

/// The row's file hashed alone, on one core, by the faster implementation
/// of this run: the row's hash bound.
pub(crate) type HashRun<'f> = &'f mut dyn FnMut() -> Result<()>;

/// A row's figures: its fastest write, and from the runs right before each
/// write the hash's shortest time and the floor's shortest wall and least
/// CPU time.
pub(crate) struct Row {
    pub ours: Ours,
    pub hash_secs: f64,
    pub floor: Option<floor::Cost>,
}

/// `o.reps` writes, each right after one run of `hash` and of `floor` if
/// there is one.
pub(crate) fn run_agent(
    o: &Opts,
    w: &Write,
    dev: &Device,
    hash: HashRun,
    mut floor: Option<FloorCopy>,
) -> Result<Row> {
    let mut best_run: Option<(floor::Cost, String)> = None;
    let mut floor_best: Option<floor::Cost> = None;
    let mut hash_best = f64::INFINITY;
    for _ in 0..o.reps {
        if let Some(f) = floor.as_mut() {
            let c = floor::copy_once(dev.size, f)?;
            floor_best = Some(floor_best.map_or(c, |b| b.best(c)));
        }
        let t = Instant::now();
        hash()?;
        hash_best = hash_best.min(t.elapsed().as_secs_f64());
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
    Ok(Row {
        ours: Ours {
            secs: cost.wall,
            cpu: cost.cpu,
            peak_rss_mib: peak,
        },
        hash_secs: hash_best,
        floor: floor_best,
    })
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
                .args(
                    o.connections
                        .iter()
                        .flat_map(|n| ["--connections".to_string(), n.to_string()]),
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
