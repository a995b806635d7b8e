//! The incumbent in the same run: ironic-python-agent 13.0.0's own image
//! code (`standby.prepare_image` from the pinned venv of
//! `ci/ipa/install.sh`, run by `ipa_write.py` with only the root-device
//! lookup stubbed) writes the same images from the same server to the same
//! device. Raw goes through IPA's streaming path (`stream_raw_images`),
//! qcow2 through its download-then-`qemu-img convert` path with its
//! temporary file on the bench's tmpfs, as a ramdisk's `/tmp` is. IPA
//! takes no zstd, gzip or xz images.

use std::path::Path;
use std::process::Command;

use anyhow::{bail, Context, Result};

/// The harness, written next to the images at run time.
const HARNESS: &str = include_str!("ipa_write.py");

/// One image as IPA is asked to write it.
pub(crate) struct Image<'a> {
    /// Where the server has it.
    pub url: &'a str,
    /// Its sha256.
    pub sha256: &'a str,
    /// Ironic's `disk_format`: `raw` or `qcow2`.
    pub disk_format: &'a str,
}

/// IPA's best wall time over `reps` runs writing `image` to `dev` (with
/// `python` from IPA's venv, temporary files in `workdir`), each checked
/// by `check` to leave the image on the device.
pub(crate) fn write(
    python: &Path,
    workdir: &Path,
    image: &Image<'_>,
    dev: &Path,
    check: impl Fn() -> Result<()>,
    reps: usize,
) -> Result<f64> {
    let Image {
        url,
        sha256,
        disk_format,
    } = *image;
    let script = workdir.join("ipa_write.py");
    std::fs::write(&script, HARNESS)?;
    let mut info = serde_json::json!({
        "id": format!("bench-{disk_format}"),
        "urls": [url],
        "os_hash_algo": "sha256",
        "os_hash_value": sha256,
        "disk_format": disk_format,
    });
    if disk_format == "raw" {
        info["stream_raw_images"] = true.into();
    }
    let mut best: Option<f64> = None;
    for _ in 0..reps {
        // Start from a device holding something else, as for ours.
        hardware_tests::run(
            Command::new("dd")
                .arg("if=/dev/zero")
                .arg(format!("of={}", dev.display()))
                .args(["bs=4M", "count=4", "oflag=direct", "status=none"]),
        )?;
        let out = hardware_tests::run(
            Command::new(python)
                .arg(&script)
                .arg(info.to_string())
                .arg(dev)
                .env("TMPDIR", workdir),
        )
        .context("running IPA 13.0.0's prepare_image")?;
        let line = out.lines().last().unwrap_or_default();
        let v: serde_json::Value =
            serde_json::from_str(line).with_context(|| format!("IPA harness printed {out:?}"))?;
        if v["status"] != "SUCCEEDED" {
            bail!("IPA 13.0.0 failed to write {url}: {}", v["error"]);
        }
        let _ = std::fs::remove_file(workdir.join(format!("bench-{disk_format}")));
        check()?;
        let secs = v["secs"].as_f64().context("no time from the harness")?;
        eprintln!("  IPA 13.0.0 {disk_format}: {secs:.2} s");
        best = Some(best.map_or(secs, |b: f64| b.min(secs)));
    }
    best.context("reps ≥ 1")
}
