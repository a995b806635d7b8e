//! Running a pulled image with crun, the OCI runtime the ramdisk carries:
//! the bundle ([`super::bundle`]) written into the work directory, then
//! `crun run` with its state kept there too, crun's cgroupfs manager
//! making the container's own cgroup (`/ID`; its device rules, a BPF
//! device program on cgroup v2) and removing it when the container is
//! deleted (and `--no-pivot` where `/` is the initramfs, which pivot_root
//! cannot move), its output logged line by line. Where nothing is mounted
//! at `/sys/fs/cgroup` (the ramdisk), cgroup v2 is mounted there first.
//! Unless the step is `--privileged`, podman's default seccomp profile
//! ([`super::seccomp::DEFAULT_PROFILE`]) must be there: without it the
//! step fails, it never runs unconfined.
//! A non-zero exit is an error naming the image, the status and the last
//! lines of output, each line cut to [`Limits::line_bytes`] (the log's
//! too); an abort kills the container (`crun kill ID KILL`, then
//! `crun delete --force ID`). The pull is bounded in time
//! ([`Limits::pull_time`]) and an abort stops it as it goes, not only
//! after it. The work directory is removed after.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use tokio::io::{AsyncBufRead, AsyncBufReadExt, BufReader};
use tokio::process::Command;
use tokio::sync::Mutex;

use super::limits::Limits;
use super::options::{PullOptions, RunOptions};
use super::policy::Permitted;
use super::ContainerError;

/// The runtime's program (looked up in `PATH`).
const CRUN: &str = "crun";

/// Where crun looks for the cgroup hierarchy.
const CGROUP_ROOT: &str = "/sys/fs/cgroup";

/// Lines of output kept for an error.
const TAIL_LINES: usize = 20;

/// How often the abort flag is looked at.
const ABORT_POLL: Duration = Duration::from_millis(200);

/// How long a stopped pull may take to wind down (an unpacking ends at
/// its next read; a pull waiting on the network is dropped).
const STOP_GRACE: Duration = Duration::from_secs(2);

/// Whether crun runs here (`crun --version` succeeds), as IPA asks its
/// runner for its version rather than only finding it.
pub fn runtime_available() -> bool {
    std::process::Command::new(CRUN)
        .arg("--version")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Pulls the image the policy permitted (its reference, without
/// transport) with its pull options and runs it to completion with its run
/// options, in a directory under `work_dir` that is removed after.
/// `cafile` is the agent's CA bundle for the registry's certificate. The
/// bounds are [`Limits::for_this_machine`].
pub async fn run_container(
    permitted: &Permitted,
    cafile: Option<&Path>,
    work_dir: &Path,
    abort: Arc<AtomicBool>,
) -> Result<(), ContainerError> {
    let limits = Limits::for_this_machine();
    run_container_within(permitted, cafile, work_dir, abort, &limits).await
}

/// [`run_container`] within `limits`.
pub async fn run_container_within(
    permitted: &Permitted,
    cafile: Option<&Path>,
    work_dir: &Path,
    abort: Arc<AtomicBool>,
    limits: &Limits,
) -> Result<(), ContainerError> {
    let id = format!("ipa-step-{}", uuid::Uuid::new_v4().simple());
    let dir = work_dir.join(&id);
    let Permitted {
        reference,
        pull,
        run,
    } = permitted;
    let result = run_in(reference, pull, run, cafile, &dir, &id, &abort, limits).await;
    if let Err(e) = tokio::fs::remove_dir_all(&dir).await {
        if e.kind() != std::io::ErrorKind::NotFound {
            tracing::warn!(
                "removing the container's work directory {}: {e}",
                dir.display()
            );
        }
    }
    result
}

#[allow(clippy::too_many_arguments)]
async fn run_in(
    reference: &str,
    pull: &PullOptions,
    run: &RunOptions,
    cafile: Option<&Path>,
    dir: &Path,
    id: &str,
    abort: &AtomicBool,
    limits: &Limits,
) -> Result<(), ContainerError> {
    let failed = |source: anyhow::Error| ContainerError::Pull {
        image: reference.to_string(),
        source,
    };
    let run_err = |source: anyhow::Error| ContainerError::Run {
        image: reference.to_string(),
        source,
    };
    // Before anything is pulled: a step that is not --privileged never
    // runs unconfined.
    let profile = if run.privileged {
        None
    } else {
        let path = Path::new(super::seccomp::DEFAULT_PROFILE);
        let p = super::seccomp::Profile::load(path)
            .context("podman's default seccomp profile")
            .map_err(run_err)?;
        Some(p)
    };
    tokio::fs::create_dir_all(dir)
        .await
        .with_context(|| format!("creating {}", dir.display()))
        .map_err(failed)?;
    let image = pull_bounded(reference, pull, cafile, dir, abort, limits).await?;
    if abort.load(Ordering::SeqCst) {
        return Err(ContainerError::Aborted(reference.to_string()));
    }
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let host = super::bundle::Host {
        id,
        hostname: "container-step",
        bounding: super::bundle::bounding_set(&status),
        seccomp: profile.as_ref(),
        kernel: super::seccomp::running_kernel(),
    };
    let spec = super::bundle::spec(&image.config, run, &host).map_err(run_err)?;
    let config = dir.join("config.json");
    let text = serde_json::to_vec_pretty(&spec)
        .context("serialising config.json")
        .map_err(run_err)?;
    tokio::fs::write(&config, text)
        .await
        .with_context(|| format!("writing {}", config.display()))
        .map_err(run_err)?;
    ensure_cgroup2().map_err(run_err)?;
    tracing::info!(
        image = reference,
        digest = image.digest,
        id,
        "running the container"
    );
    crun_run(reference, dir, id, abort, limits.line_bytes).await
}

/// The pull, stopped by an abort or at the time limit: the stop flag ends
/// it at its next chunk of data (an unpacking on its blocking thread
/// included, so nothing writes into the work directory once this
/// returns); a pull still waiting on the network after [`STOP_GRACE`] is
/// dropped.
async fn pull_bounded(
    reference: &str,
    opts: &PullOptions,
    cafile: Option<&Path>,
    dir: &Path,
    abort: &AtomicBool,
    limits: &Limits,
) -> Result<super::pull::PulledImage, ContainerError> {
    let stop = Arc::new(AtomicBool::new(false));
    let pull = super::pull::pull(reference, opts, cafile, dir, limits, &stop);
    tokio::pin!(pull);
    let deadline = tokio::time::sleep(limits.pull_time);
    tokio::pin!(deadline);
    let why = loop {
        tokio::select! {
            r = &mut pull => {
                return r.map_err(|source| ContainerError::Pull {
                    image: reference.to_string(),
                    source,
                });
            }
            () = &mut deadline => break None,
            () = tokio::time::sleep(ABORT_POLL) => {
                if abort.load(Ordering::SeqCst) {
                    break Some(ContainerError::Aborted(reference.to_string()));
                }
            }
        }
    };
    stop.store(true, Ordering::SeqCst);
    let _ = tokio::time::timeout(STOP_GRACE, &mut pull).await;
    Err(why.unwrap_or_else(|| {
        tracing::error!(image = reference, "the pull ran out of time");
        ContainerError::Pull {
            image: reference.to_string(),
            source: anyhow::anyhow!(
                "the pull took longer than {} s (the pull time limit)",
                limits.pull_time.as_secs_f64()
            ),
        }
    }))
}

/// Mounts cgroup v2 at `/sys/fs/cgroup` when nothing is mounted there
/// (the directory is sysfs's own). A hierarchy already mounted, whatever
/// its kind, is left alone.
fn ensure_cgroup2() -> Result<()> {
    use nix::sys::statfs::{statfs, SYSFS_MAGIC};
    let path = Path::new(CGROUP_ROOT);
    let fs = statfs(path).with_context(|| format!("statfs {CGROUP_ROOT}"))?;
    if fs.filesystem_type() != SYSFS_MAGIC {
        return Ok(());
    }
    tracing::info!("mounting cgroup2 at {CGROUP_ROOT} for the container runtime");
    nix::mount::mount(
        Some("cgroup2"),
        path,
        Some("cgroup2"),
        nix::mount::MsFlags::MS_NOSUID
            | nix::mount::MsFlags::MS_NODEV
            | nix::mount::MsFlags::MS_NOEXEC,
        None::<&str>,
    )
    .with_context(|| format!("mounting cgroup2 at {CGROUP_ROOT}"))
}

/// Whether `/` is the kernel's initial root filesystem (`rootfs`: the
/// ramdisk's initramfs), which pivot_root(2) cannot move; from
/// `/proc/self/mountinfo` (the mount at `/` listed last is the visible one).
fn root_is_rootfs(mountinfo: &str) -> bool {
    mountinfo
        .lines()
        .rfind(|l| l.split_whitespace().nth(4) == Some("/"))
        .and_then(|l| l.split_once(" - "))
        .and_then(|(_, rest)| rest.split_whitespace().next())
        == Some("rootfs")
}

/// `crun` with its state under `dir`.
fn crun(dir: &Path) -> Command {
    let mut c = Command::new(CRUN);
    c.arg("--root")
        .arg(dir.join("state"))
        .arg("--cgroup-manager=cgroupfs");
    c.stdin(Stdio::null()).kill_on_drop(true);
    c
}

/// One line of `r` without its line end, at most `max` bytes of it kept
/// (the rest read and dropped, counted in the text); `None` at the end.
async fn bounded_line<R: AsyncBufRead + Unpin>(
    r: &mut R,
    max: usize,
) -> std::io::Result<Option<String>> {
    let mut kept = Vec::new();
    let mut dropped = 0usize;
    let mut any = false;
    loop {
        let buf = r.fill_buf().await?;
        if buf.is_empty() {
            break;
        }
        any = true;
        let end = buf.iter().position(|&b| b == b'\n');
        let part = &buf[..end.unwrap_or(buf.len())];
        let take = part.len().min(max.saturating_sub(kept.len()));
        kept.extend_from_slice(&part[..take]);
        dropped += part.len() - take;
        let used = end.map_or(buf.len(), |i| i + 1);
        r.consume(used);
        if end.is_some() {
            break;
        }
    }
    if !any {
        return Ok(None);
    }
    if kept.last() == Some(&b'\r') && dropped == 0 {
        kept.pop();
    }
    let mut line = String::from_utf8_lossy(&kept).into_owned();
    if dropped > 0 {
        line.push_str(&format!("… [{dropped} more bytes of this line dropped]"));
    }
    Ok(Some(line))
}

/// Forwards `stream`'s lines, each cut to `max` bytes, to the log and
/// keeps the last ones.
fn forward(
    stream: impl tokio::io::AsyncRead + Unpin + Send + 'static,
    tail: Arc<Mutex<VecDeque<String>>>,
    which: &'static str,
    max: usize,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut reader = BufReader::new(stream);
        while let Ok(Some(line)) = bounded_line(&mut reader, max).await {
            tracing::info!(stream = which, "container: {line}");
            let mut t = tail.lock().await;
            if t.len() == TAIL_LINES {
                t.pop_front();
            }
            t.push_back(line);
        }
    })
}

async fn crun_run(
    reference: &str,
    dir: &Path,
    id: &str,
    abort: &AtomicBool,
    line_bytes: usize,
) -> Result<(), ContainerError> {
    let run_err = |source: anyhow::Error| ContainerError::Run {
        image: reference.to_string(),
        source,
    };
    let mut run = crun(dir);
    run.arg("run");
    if root_is_rootfs(&std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default()) {
        // pivot_root(2) refuses the initial root (EINVAL): in the ramdisk
        // crun moves the container's root over / and chroots instead.
        run.arg("--no-pivot");
    }
    let mut child = run
        .arg("--bundle")
        .arg(dir)
        .arg(id)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {CRUN}"))
        .map_err(run_err)?;
    let tail = Arc::new(Mutex::new(VecDeque::new()));
    let mut readers = Vec::new();
    if let Some(out) = child.stdout.take() {
        readers.push(forward(out, tail.clone(), "stdout", line_bytes));
    }
    if let Some(err) = child.stderr.take() {
        readers.push(forward(err, tail.clone(), "stderr", line_bytes));
    }
    let status = loop {
        tokio::select! {
            s = child.wait() => break s.context("waiting for the container").map_err(run_err)?,
            () = tokio::time::sleep(ABORT_POLL) => {
                if abort.load(Ordering::SeqCst) {
                    tracing::warn!(id, "aborting the container");
                    kill(dir, id).await;
                    let _ = child.wait().await;
                    delete(dir, id).await;
                    return Err(ContainerError::Aborted(reference.to_string()));
                }
            }
        }
    };
    for r in readers {
        let _ = r.await;
    }
    delete(dir, id).await;
    if status.success() {
        tracing::info!(image = reference, "the container step completed");
        return Ok(());
    }
    let output: Vec<String> = tail.lock().await.iter().cloned().collect();
    Err(ContainerError::Failed {
        image: reference.to_string(),
        status: status.to_string(),
        output: output.join("\n"),
    })
}

async fn kill(dir: &Path, id: &str) {
    match crun(dir).args(["kill", id, "KILL"]).output().await {
        Ok(o) if o.status.success() => {}
        Ok(o) => tracing::warn!(
            id,
            "crun kill: {}",
            String::from_utf8_lossy(&o.stderr).trim()
        ),
        Err(e) => tracing::warn!(id, "crun kill: {e}"),
    }
}

async fn delete(dir: &Path, id: &str) {
    // `crun run` removes a container that exits; this covers the others.
    if let Ok(o) = crun(dir).args(["delete", "--force", id]).output().await {
        if !o.status.success() {
            tracing::debug!(
                id,
                "crun delete: {}",
                String::from_utf8_lossy(&o.stderr).trim()
            );
        }
    }
}

/// The default parent of containers' work directories: tmpfs in the
/// ramdisk.
pub fn default_work_dir() -> PathBuf {
    PathBuf::from("/run/container-steps")
}

#[cfg(test)]
mod tests {
    #[tokio::test]
    async fn output_lines_are_cut_to_their_bound() {
        // A 32 MiB line between two short ones, CRLF endings, no final
        // newline.
        let mut input = b"first\r\n".to_vec();
        input.extend(std::iter::repeat_n(b'x', 32 << 20));
        input.extend_from_slice(b"\nlast");
        let mut r = tokio::io::BufReader::new(&input[..]);
        let line = |s: Option<String>| s.unwrap();
        assert_eq!(line(super::bounded_line(&mut r, 8).await.unwrap()), "first");
        let long = line(super::bounded_line(&mut r, 8).await.unwrap());
        assert_eq!(
            long,
            format!(
                "xxxxxxxx… [{} more bytes of this line dropped]",
                (32 << 20) - 8
            )
        );
        assert_eq!(line(super::bounded_line(&mut r, 8).await.unwrap()), "last");
        assert_eq!(super::bounded_line(&mut r, 8).await.unwrap(), None);
        // Invalid UTF-8 is kept, replaced, rather than ending the output.
        let mut r = tokio::io::BufReader::new(&b"a\xffb\nnext\n"[..]);
        assert_eq!(
            line(super::bounded_line(&mut r, 100).await.unwrap()),
            "a\u{fffd}b"
        );
        assert_eq!(
            line(super::bounded_line(&mut r, 100).await.unwrap()),
            "next"
        );
    }

    #[test]
    fn the_initial_root_is_recognised() {
        let initramfs = "1 1 0:2 / / rw shared:1 - rootfs rootfs rw\n\
                         20 1 0:19 / /proc rw,nosuid - proc proc rw\n";
        assert!(super::root_is_rootfs(initramfs));
        let host = "1 1 0:2 / / rw - rootfs rootfs rw\n\
                    25 1 8:1 / / rw,relatime - ext4 /dev/sda1 rw\n";
        assert!(!super::root_is_rootfs(host));
        assert!(!super::root_is_rootfs(""));
    }
}
