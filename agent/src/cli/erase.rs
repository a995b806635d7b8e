//! `agent erase`: one disk erased from a console (the ramdisk's debug
//! shell, or a host), with the same code and checks as the `erase_devices`
//! clean step ([`agent_devices::disk::fullerase::erase_with`]) and a progress bar.
//!
//! Outside the ramdisk the device must be named twice, with `--device` and
//! `--allow-device`, exactly as `agent serve --allow-device` works: nothing
//! else is touched, and never a mounted, swap or held device. In the
//! ramdisk every disk may be erased, still never a mounted one.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::Args;

use super::progress_view::ProgressView;
use agent_base::config::{Config, RunMode};
use agent_contents::image::progress::{bar_cells, human_bytes};
use agent_devices::disk::fullerase::{erase_with, Knobs, Method};
use agent_devices::disk::{ioctl, WritePolicy};

/// Flags of `agent erase`.
#[derive(Debug, Args)]
pub struct EraseArgs {
    /// The disk to erase.
    #[arg(long)]
    pub device: PathBuf,
    /// auto (NVMe format, ATA security erase, discard, overwrite in that order), metadata, discard, overwrite, nvme or ata.
    #[arg(long, default_value = "auto")]
    pub method: String,
    /// Outside the ramdisk: the device again, to confirm it may be erased.
    #[arg(long = "allow-device")]
    pub allow_device: Vec<PathBuf>,
    /// Random passes of the overwrite method.
    #[arg(long, default_value_t = 1)]
    pub iterations: u32,
    /// No final zero pass after overwriting.
    #[arg(long)]
    pub no_zeroize: bool,
    /// Also erase disks holding GPFS/VMFS/gfs2.
    #[arg(long)]
    pub wipe_special_filesystems: bool,
}

/// Runs `agent erase`.
pub(crate) fn run(args: &EraseArgs) -> Result<()> {
    let method = Method::parse(&args.method).with_context(|| {
        format!(
            "--method {:?}: expected auto, metadata, discard, overwrite, nvme or ata",
            args.method
        )
    })?;
    let mode = if agent_core::power::in_ramdisk() {
        RunMode::Ramdisk
    } else {
        RunMode::Host
    };
    let canon = |p: &PathBuf| std::fs::canonicalize(p).unwrap_or_else(|_| p.clone());
    if mode == RunMode::Host
        && !args
            .allow_device
            .iter()
            .any(|a| canon(a) == canon(&args.device))
    {
        bail!(
            "{} is not allowed: outside the deploy ramdisk name it again with --allow-device",
            args.device.display()
        );
    }
    let policy = WritePolicy::from_config(&Config {
        mode,
        allowed_devices: args.allow_device.clone(),
        ..Config::default()
    });
    let knobs = Knobs {
        iterations: args.iterations,
        zeroize: !args.no_zeroize,
        wipe_special: args.wipe_special_filesystems,
        enable_nvme_secure_erase: true,
        enable_ata_secure_erase: true,
        // `--method auto` on the operator's own command keeps discard.
        enable_discard: true,
        ..Knobs::default()
    };
    let size = std::fs::File::open(&args.device)
        .with_context(|| format!("opening {}", args.device.display()))
        .map(|f| {
            ioctl::size_bytes(&f)
                .or_else(|_| f.metadata().map(|m| m.len()))
                .unwrap_or(0)
        })?;
    let passes = match method {
        Method::Overwrite | Method::Auto => u64::from(knobs.iterations) + u64::from(knobs.zeroize),
        _ => 1,
    };
    let total = size.saturating_mul(passes.max(1));
    let done = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let (d, name) = (done.clone(), args.device.display().to_string());
    let view = ProgressView::start(Arc::new(move |tty| {
        let n = d.load(Ordering::Relaxed);
        let frac = (total > 0).then(|| n as f64 / total as f64);
        let rate = n as f64 / started.elapsed().as_secs_f64().max(0.001) / 1e6;
        let line = format!(
            "erasing {name}: {} / {} ({:.0}%)  {rate:.0} MB/s",
            human_bytes(n),
            human_bytes(total),
            frac.unwrap_or(0.0) * 100.0
        );
        if tty {
            format!("{} {line}", bar_cells(frac, 30))
        } else {
            line
        }
    }));
    let result = erase_with(
        &args.device,
        &policy,
        &knobs,
        method,
        &AtomicBool::new(false),
        &done,
    );
    view.finish();
    let erased = result.with_context(|| format!("erasing {}", args.device.display()))?;
    println!(
        "{}: {} in {:.1} s",
        args.device.display(),
        erased.describe(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}
