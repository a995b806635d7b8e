//! Running one hook of an executable manager: the JSON input on its stdin,
//! its output lines into the agent's log, its time limit and Ironic's abort
//! enforced on its whole process group, and its exit status and last JSON
//! line turned into a result or an error an operator can read in Ironic's
//! `last_error`.

use std::collections::VecDeque;
use std::fmt;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};

use super::manifest::Hook;

/// How many of the last output lines an error keeps.
pub const TAIL_LINES: usize = 20;

/// A line longer than this is cut into pieces of this size (a JSON result
/// line must fit in one).
const MAX_LINE: u64 = 1 << 20;

/// Each kept tail line is cut to this many characters.
const TAIL_LINE_CHARS: usize = 300;

/// How long the output pipes may stay open after the hook's group is dead.
const DRAIN_LIMIT: Duration = Duration::from_secs(5);

/// How often the abort flag is looked at.
const ABORT_POLL: Duration = Duration::from_millis(200);

/// How a hook's process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// It exited with this code.
    Code(i32),
    /// A signal ended it.
    Signal(i32),
}

impl From<ExitStatus> for Exit {
    fn from(s: ExitStatus) -> Self {
        match (s.code(), s.signal()) {
            (Some(c), _) => Self::Code(c),
            (None, Some(sig)) => Self::Signal(sig),
            // Neither: not possible on Unix; report it as a failure code.
            (None, None) => Self::Code(-1),
        }
    }
}

impl fmt::Display for Exit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::Code(c) => write!(f, "status {c}"),
            Self::Signal(s) => match Signal::try_from(s) {
                Ok(sig) => write!(f, "signal {s} ({sig})"),
                Err(_) => write!(f, "signal {s}"),
            },
        }
    }
}

/// The last lines a hook wrote, for an error message.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tail(pub Vec<String>);

impl fmt::Display for Tail {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            f.write_str("; no output")
        } else {
            write!(f, "; last output:\n{}", self.0.join("\n"))
        }
    }
}

/// Why a hook did not succeed. `label` names the manager and the step
/// (e.g. `step hpe_raid of manager hpe`).
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The executable could not be started.
    #[error("cannot run {}: {source}", exe.display())]
    Spawn {
        /// The executable.
        exe: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Waiting for it failed (the agent's side, not the hook's).
    #[error("{label}: waiting for it failed: {source}")]
    Wait {
        /// What ran.
        label: String,
        /// Why.
        source: std::io::Error,
    },
    /// It ended with a non-zero status or a signal.
    #[error("{label} exited with {status}{tail}")]
    Failed {
        /// What ran.
        label: String,
        /// How it ended.
        status: Exit,
        /// Its last output lines.
        tail: Tail,
    },
    /// It outlived its time limit and was killed.
    #[error("{label} timed out after {} s and was killed{tail}", after.as_secs())]
    TimedOut {
        /// What ran.
        label: String,
        /// Its time limit.
        after: Duration,
        /// Its last output lines.
        tail: Tail,
    },
    /// Ironic aborted it; it was killed.
    #[error("{label} was aborted and killed")]
    Aborted {
        /// What ran.
        label: String,
    },
    /// It succeeded, but its answer is not one its hook may give.
    #[error("{label} answered {answer}, which is not {expected}")]
    Answer {
        /// What ran.
        label: String,
        /// Its last JSON line (`null` when it printed none).
        answer: String,
        /// What the hook may answer.
        expected: &'static str,
    },
}

/// The last lines of both streams, in the order they came.
#[derive(Default)]
struct Lines(Mutex<VecDeque<String>>);

impl Lines {
    fn push(&self, line: &str) {
        let mut short: String = line.chars().take(TAIL_LINE_CHARS).collect();
        if short.len() < line.len() {
            short.push('…');
        }
        let Ok(mut q) = self.0.lock() else { return };
        if q.len() == TAIL_LINES {
            q.pop_front();
        }
        q.push_back(short);
    }

    fn tail(&self) -> Tail {
        Tail(
            self.0
                .lock()
                .map(|q| q.iter().cloned().collect())
                .unwrap_or_default(),
        )
    }
}

/// Reads `stream` line by line into the log and `lines`; returns the last
/// non-empty line.
async fn pump(
    stream: impl AsyncRead + Unpin,
    label: String,
    name: &'static str,
    lines: Arc<Lines>,
) -> String {
    let mut reader = BufReader::new(stream);
    let mut buf = Vec::new();
    let mut last = String::new();
    loop {
        buf.clear();
        match (&mut reader)
            .take(MAX_LINE)
            .read_until(b'\n', &mut buf)
            .await
        {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(target: "exec_steps", hook = %label, stream = name, "reading output: {e}");
                break;
            }
        }
        let text = String::from_utf8_lossy(&buf);
        let line = text.trim_end_matches(['\n', '\r']);
        tracing::info!(target: "exec_steps", hook = %label, stream = name, "{line}");
        lines.push(line);
        if !line.trim().is_empty() {
            last = line.to_string();
        }
    }
    last
}

/// Kills the process group of a spawned hook (its pid: `process_group(0)`
/// made it the group's leader), unless disarmed; also when the future
/// running the hook is dropped.
struct GroupKiller(Option<Pid>);

impl GroupKiller {
    fn kill(&mut self) {
        if let Some(pid) = self.0.take() {
            // ESRCH: nothing left in the group.
            let _ = killpg(pid, Signal::SIGKILL);
        }
    }
}

impl Drop for GroupKiller {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Why the wait ended.
enum End {
    Exited(std::io::Result<ExitStatus>),
    TimedOut,
    Aborted,
}

async fn wait(child: &mut Child, timeout: Duration, abort: &AtomicBool) -> End {
    let deadline = tokio::time::sleep(timeout);
    tokio::pin!(deadline);
    let mut poll = tokio::time::interval(ABORT_POLL);
    loop {
        tokio::select! {
            status = child.wait() => return End::Exited(status),
            () = &mut deadline => return End::TimedOut,
            _ = poll.tick() => {
                if abort.load(Ordering::SeqCst) {
                    return End::Aborted;
                }
            }
        }
    }
}

/// The environment variable naming the agent's binary in every hook's
/// environment.
pub const AGENT_EXE: &str = "AGENT_EXE";

/// Runs `hook` with `input` as JSON on its stdin (closed after it), its
/// output lines logged under `label`. Its result is the last non-empty line
/// of its stdout if that is JSON, else `null`. Its whole process group is
/// killed when it outlives its time limit, when `abort` turns true (looked
/// at every 200 ms), and when it exits (nothing it started outlives it).
pub async fn run(
    hook: &Hook,
    label: &str,
    input: &Value,
    abort: Arc<AtomicBool>,
) -> Result<Value, RunError> {
    let mut cmd = Command::new(&hook.executable);
    // For `"$AGENT_EXE" json-get args.device` in the hook's scripts
    // (agent/docs/own-steps.md): the agent's own binary, unless its own
    // environment names it (the ramdisk's PID 1 sets `/bin/agent`, since
    // `/init` is taken for PID 1's code; tests running the agent inside
    // their own binary name the built `agent`).
    if std::env::var_os(AGENT_EXE).is_none() {
        if let Ok(exe) = std::env::current_exe() {
            cmd.env(AGENT_EXE, exe);
        }
    }
    cmd.args(&hook.args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    let mut child = cmd.spawn().map_err(|source| RunError::Spawn {
        exe: hook.executable.clone(),
        source,
    })?;
    let mut killer = GroupKiller(
        child
            .id()
            .and_then(|p| i32::try_from(p).ok())
            .map(Pid::from_raw),
    );
    tracing::info!(
        target: "exec_steps",
        hook = %label,
        executable = %hook.executable.display(),
        timeout_s = hook.timeout.as_secs(),
        "started"
    );
    let lines = Arc::new(Lines::default());
    let out = child
        .stdout
        .take()
        .map(|s| tokio::spawn(pump(s, label.to_string(), "stdout", lines.clone())));
    let err = child
        .stderr
        .take()
        .map(|s| tokio::spawn(pump(s, label.to_string(), "stderr", lines.clone())));
    if let Some(mut stdin) = child.stdin.take() {
        let bytes = serde_json::to_vec(input).unwrap_or_default();
        let label = label.to_string();
        // Its own task: a hook that never reads stdin must not block us.
        tokio::spawn(async move {
            if let Err(e) = stdin.write_all(&bytes).await {
                tracing::debug!(target: "exec_steps", hook = %label, "stdin not read to its end: {e}");
            }
            // Dropped here: the hook sees the end of its input.
        });
    }
    let end = wait(&mut child, hook.timeout, &abort).await;
    // The group's leader is done or about to be killed: end every process
    // it started too, so that none keeps the output pipes open.
    killer.kill();
    if !matches!(end, End::Exited(_)) {
        let _ = child.wait().await;
    }
    let last_stdout = drain(out).await;
    drain(err).await;
    let tail = lines.tail();
    let label = label.to_string();
    let done = label.clone();
    let result = match end {
        End::Exited(Ok(s)) if s.success() => {
            Ok(serde_json::from_str(last_stdout.trim()).unwrap_or(Value::Null))
        }
        End::Exited(Ok(s)) => Err(RunError::Failed {
            label,
            status: s.into(),
            tail,
        }),
        End::Exited(Err(source)) => Err(RunError::Wait { label, source }),
        End::TimedOut => Err(RunError::TimedOut {
            label,
            after: hook.timeout,
            tail,
        }),
        End::Aborted => Err(RunError::Aborted { label }),
    };
    match &result {
        Ok(_) => tracing::info!(target: "exec_steps", hook = %done, "succeeded"),
        Err(e) => tracing::warn!(target: "exec_steps", "{e}"),
    }
    result
}

/// The last non-empty line a stream's reader saw. Its group is dead by now,
/// so its pipe ends soon, unless a process escaped the group (`setsid`)
/// and holds it: then the reader is given up after [`DRAIN_LIMIT`].
async fn drain(reader: Option<tokio::task::JoinHandle<String>>) -> String {
    let Some(mut h) = reader else {
        return String::new();
    };
    match tokio::time::timeout(DRAIN_LIMIT, &mut h).await {
        Ok(last) => last.unwrap_or_default(),
        Err(_) => {
            h.abort();
            String::new()
        }
    }
}

/// Runs a per-disk erase hook on one disk (`input`:
/// `{"node": .., "block_device": {..}}`). `Ok(None)`: the hook declined the
/// disk (its last stdout line was `{"claimed": false}` and it exited 0), so
/// the next erase method gets it; `Ok(Some(result))`: it erased the disk.
pub async fn erase_block_device(
    hook: &Hook,
    label: &str,
    input: &Value,
    abort: Arc<AtomicBool>,
) -> Result<Option<Value>, RunError> {
    let result = run(hook, label, input, abort).await?;
    if result.get("claimed") == Some(&Value::Bool(false)) {
        tracing::info!(target: "exec_steps", hook = %label, "declined the disk");
        return Ok(None);
    }
    Ok(Some(result))
}

/// What an `os_install_device` hook may answer.
const INSTALL_DEVICE_ANSWERS: &str =
    "{\"name\": \"/dev/…\"} (the disk to write) or {\"claimed\": false} (no choice: the next manager chooses)";

/// Runs a root-disk hook (IPA's `get_os_install_device`; `input`:
/// `{"node": .., "disks": [..]}`). `Ok(None)`: the hook declined (its last
/// stdout line was `{"claimed": false}` and it exited 0), so the next
/// manager chooses; `Ok(Some(path))`: its choice, an absolute path
/// (`{"name": "/dev/sdb"}`). Any other answer is an error naming it.
pub async fn os_install_device(
    hook: &Hook,
    label: &str,
    input: &Value,
    abort: Arc<AtomicBool>,
) -> Result<Option<PathBuf>, RunError> {
    let result = run(hook, label, input, abort).await?;
    if result.get("claimed") == Some(&Value::Bool(false)) {
        tracing::info!(target: "exec_steps", hook = %label, "made no choice of the root disk");
        return Ok(None);
    }
    let name = result
        .as_object()
        .filter(|o| o.len() == 1)
        .and_then(|o| o.get("name"))
        .and_then(Value::as_str)
        .filter(|n| n.starts_with('/') && !n.contains('\0'));
    match name {
        Some(n) => Ok(Some(PathBuf::from(n))),
        None => {
            let mut answer = result.to_string();
            if answer.len() > 200 {
                answer = format!("{}…", answer.chars().take(200).collect::<String>());
            }
            Err(RunError::Answer {
                label: label.to_string(),
                answer,
                expected: INSTALL_DEVICE_ANSWERS,
            })
        }
    }
}
