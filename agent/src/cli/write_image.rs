//! `agent write-image`: the image pipeline from a console, with a progress
//! bar on a terminal (a line every few seconds otherwise). Outside the
//! ramdisk the device must be named with --device and be unmounted, exactly
//! as --allow-device works for `agent serve`.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::Args;

use super::progress_view::ProgressView;
use agent_base::config::{Config, RunMode};
use agent_contents::image::checksum::ChecksumSpec;
use agent_contents::image::fetch::HttpOptions;
use agent_contents::image::format::Format;
use agent_contents::image::progress::{human_bytes, Progress};
use agent_contents::image::WriteRequest;
use agent_devices::disk::WritePolicy;

/// Flags of `agent write-image`.
#[derive(Debug, Args)]
pub struct WriteImageArgs {
    /// Image URL (http, https, file://) or local path; repeat for mirrors.
    #[arg(long, required = true)]
    pub image: Vec<String>,
    /// Expected checksum: ALGO:HEX, a bare sha256/sha512 HEX, or the URL of a checksum file.
    #[arg(long)]
    pub checksum: String,
    /// Device (or, outside the ramdisk, a regular file) to write.
    #[arg(long)]
    pub device: PathBuf,
    /// Image format: auto (detected from the bytes), raw, qcow2, zstd, gzip or xz.
    #[arg(long, default_value = "auto")]
    pub format: String,
    /// Accept MD5 checksums.
    #[arg(long)]
    pub allow_md5: bool,
    /// Do not verify TLS certificates of the image server.
    #[arg(long)]
    pub insecure: bool,
    /// CA bundle for the image server.
    #[arg(long)]
    pub cafile: Option<PathBuf>,
    /// Seconds without data before a connection counts as dropped and is resumed.
    #[arg(long, default_value_t = 60)]
    pub stall_timeout: u64,
    /// Limit on the whole download in seconds (0: none).
    #[arg(long, default_value_t = 0)]
    pub max_duration: u64,
    /// Retries after failures that made no progress.
    #[arg(long, default_value_t = 9)]
    pub retries: u32,
    /// Most connections for the download: a large image from a server that
    /// takes ranges comes in segments over several (1: a single stream; at
    /// most 8).
    #[arg(long, default_value_t = agent_base::config::DEFAULT_IMAGE_DOWNLOAD_CONNECTIONS)]
    pub connections: u32,
}

/// Runs `agent write-image`.
pub(crate) async fn run(args: WriteImageArgs) -> Result<()> {
    let format = match args.format.as_str() {
        "auto" => None,
        f => Some(Format::parse(f).with_context(|| {
            format!("--format {f:?}: expected auto, raw, qcow2, zstd, gzip or xz")
        })?),
    };
    let checksum =
        ChecksumSpec::parse_cli(&args.checksum).map_err(|e| anyhow::anyhow!("--checksum: {e}"))?;
    let req = WriteRequest {
        urls: args.image.clone(),
        checksum,
        md5_allowed: args.allow_md5,
        format,
        // The operator's own command: no conductor policy applies.
        formats: agent_contents::image::FormatPolicy::any(),
        http: HttpOptions {
            insecure: args.insecure,
            cafile: args.cafile.clone(),
            stall_timeout: Duration::from_secs(args.stall_timeout.max(1)),
            retries: args.retries,
            total_timeout: (args.max_duration > 0).then(|| Duration::from_secs(args.max_duration)),
            connections: args.connections.clamp(1, 8) as usize,
            ..HttpOptions::default()
        },
    };
    let mode = if agent_core::power::in_ramdisk() {
        RunMode::Ramdisk
    } else {
        RunMode::Host
    };
    let policy = WritePolicy::from_config(&Config {
        mode,
        allowed_devices: vec![args.device.clone()],
        ..Config::default()
    });
    let progress = Arc::new(Progress::default());
    let shown = progress.clone();
    let view = ProgressView::start(Arc::new(move |tty| {
        let s = shown.snapshot();
        if tty {
            s.bar(30)
        } else {
            s.line()
        }
    }));
    let (p, dev) = (progress.clone(), args.device.clone());
    let result = tokio::task::spawn_blocking(move || {
        agent_contents::image::write_image(&req, &dev, &policy, &p)
    })
    .await
    .context("the image writer crashed")?;
    view.finish();
    match result {
        Ok(r) => {
            let inner = r.inner.map(|f| format!(" holding {f}")).unwrap_or_default();
            println!(
                "wrote {} ({}{inner}, {} downloaded) to {} in {:.1} s; {} verified{}{}; peak memory {:.1} MiB",
                human_bytes(r.image_size),
                r.format,
                human_bytes(r.downloaded),
                r.device,
                r.seconds,
                r.digest.algo.name(),
                if r.gpt_moved { "; backup GPT moved to the end of the disk" } else { "" },
                if r.resumes > 0 { format!("; {} connection(s) resumed", r.resumes) } else { String::new() },
                peak_rss_bytes().unwrap_or(0) as f64 / (1u64 << 20) as f64,
            );
            Ok(())
        }
        Err(e) if e.before_write() => {
            bail!(
                "{e} ({}); the device was not touched",
                agent_core::commands::image_errors::error_kind(&e).type_name()
            )
        }
        Err(e) => bail!(
            "{e} ({}); the device was left without a partition table",
            agent_core::commands::image_errors::error_kind(&e).type_name()
        ),
    }
}

/// This process's peak resident memory (`VmHWM`).
fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kib * 1024)
}
