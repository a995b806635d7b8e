//! `burnin_gpu` as IPA 13 runs it: NVIDIA's `gpu-burn`, which the operator
//! builds into the ramdisk (IPA ships none either), run from its install
//! directory: `./gpu_burn -l` to count the GPUs when a count is expected
//! (each output line starting with `ID` is one GPU), then
//! `./gpu_burn -m MEMORY TIMEOUT`. Not native like the other burn-ins: a
//! GPU is exercised only through its vendor's driver and CUDA. A tool that
//! is missing, fails, or finds another number of GPUs is an error naming
//! the command, its status and its last output lines; an abort kills it.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;

use super::BurninError;

/// How the operator configured `gpu-burn` (`driver_info` knobs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuBurn {
    /// `agent_burnin_gpu_install_dir` (`/opt/gpu-burn`).
    pub install_dir: PathBuf,
    /// `agent_burnin_gpu_memory` (`95%`): `-m`, N% or MB of GPU memory.
    pub memory: String,
    /// `agent_burnin_gpu_timeout` (86400 s).
    pub timeout_secs: u64,
    /// `agent_burnin_gpu_count` (0: not checked).
    pub count: u64,
}

/// What the run saw.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct GpuReport {
    /// GPUs `gpu_burn -l` listed, when a count was expected.
    pub gpus: Option<u64>,
    /// The burn's `-m` and time.
    pub memory: String,
    /// Seconds asked.
    pub timeout_s: u64,
    /// How long the burn ran.
    pub seconds: f64,
    /// The burn's last output lines.
    pub last_output: Vec<String>,
}

/// Output lines kept for errors and the report.
const TAIL: usize = 5;

/// Runs the count check (when asked) and the burn.
pub fn run(cfg: &GpuBurn, cancel: &AtomicBool) -> Result<GpuReport, BurninError> {
    let gpus = if cfg.count > 0 {
        let out = tool(&cfg.install_dir, &["-l"], cancel)?;
        let found = count_gpus(&out);
        if found != cfg.count {
            return Err(BurninError::failed(
                "GPUs",
                format!(
                    "gpu-burn found {found} GPUs, {} expected (agent_burnin_gpu_count)",
                    cfg.count
                ),
            ));
        }
        Some(found)
    } else {
        tracing::debug!("agent_burnin_gpu_count is 0: the number of GPUs is not checked");
        None
    };
    let started = Instant::now();
    let timeout = cfg.timeout_secs.to_string();
    let out = tool(&cfg.install_dir, &["-m", &cfg.memory, &timeout], cancel)?;
    Ok(GpuReport {
        gpus,
        memory: cfg.memory.clone(),
        timeout_s: cfg.timeout_secs,
        seconds: started.elapsed().as_secs_f64(),
        last_output: tail(&out),
    })
}

/// GPUs in `gpu_burn -l`'s output: lines starting with `ID`.
pub fn count_gpus(out: &str) -> u64 {
    out.lines().filter(|l| l.starts_with("ID")).count() as u64
}

fn tail(out: &str) -> Vec<String> {
    let lines: Vec<&str> = out.lines().filter(|l| !l.trim().is_empty()).collect();
    lines[lines.len().saturating_sub(TAIL)..]
        .iter()
        .map(|l| l.to_string())
        .collect()
}

/// `./gpu_burn ARGS` in `dir`: its standard output, or an error naming the
/// command with its status and last lines; killed when `cancel` rises.
fn tool(dir: &Path, args: &[&str], cancel: &AtomicBool) -> Result<String, BurninError> {
    let shown = format!("{}/gpu_burn {}", dir.display(), args.join(" "));
    let fail = |reason: String| BurninError::failed("gpu-burn", format!("{shown}: {reason}"));
    let mut child = Command::new("./gpu_burn")
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| {
            fail(format!(
                "cannot start it ({e}); install gpu-burn there or set agent_burnin_gpu_install_dir"
            ))
        })?;
    let readers = [
        child.stdout.take().map(reader),
        child.stderr.take().map(reader),
    ];
    let started = Instant::now();
    let status = loop {
        if cancel.load(Ordering::Relaxed) {
            let _ = child.kill();
            let _ = child.wait();
            return Err(BurninError::Aborted(started.elapsed().as_secs_f64()));
        }
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) => std::thread::sleep(Duration::from_millis(100)),
            Err(e) => return Err(fail(format!("cannot wait for it: {e}"))),
        }
    };
    let [out, err] = readers.map(|r| r.and_then(|h| h.join().ok()).unwrap_or_default());
    tracing::debug!(command = shown, "gpu-burn output:\n{out}");
    if !status.success() {
        let mut last = tail(&out);
        last.extend(tail(&err));
        return Err(fail(format!("{status}; last output: {}", last.join(" | "))));
    }
    Ok(out)
}

fn reader(mut r: impl Read + Send + 'static) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = r.read_to_end(&mut buf);
        String::from_utf8_lossy(&buf).into_owned()
    })
}

#[cfg(test)]
mod tests;
