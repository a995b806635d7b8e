//! The per-boot, append-only list of commands and the rules for running them:
//! one agent-wide lock serialises command starts (a sync command holds it while
//! it runs), a second command while an async one runs is refused as busy, and
//! every async command that ends asks for an early heartbeat (PROTOCOL.md §1.4).
//!
//! The history runs a command as a ready future with its mode: it knows
//! neither the command table nor the agent's state, so `state` can own it
//! without a cycle.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::sync::watch;

use super::{CommandError, CommandResult, CommandStatus, ErrorKind, Outcome};
use agent_contents::image::progress::Progress;

/// Sync commands answer with their final result; async ones with `RUNNING`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Runs inside the request.
    Sync,
    /// Runs in the background; the conductor polls the command list.
    Async,
}

/// A boxed command future.
pub type CommandFuture = Pin<Box<dyn Future<Output = Outcome> + Send>>;

/// What runs when an async command has ended (the agent's early heartbeat).
pub type OnAsyncEnd = Box<dyn FnOnce() + Send>;

/// A command ready to run: its names, its mode and its work.
pub struct Ready {
    /// `extension.method`, for the log.
    pub full_name: String,
    /// The method alone, as the command list shows it.
    pub method: &'static str,
    /// Sync or async.
    pub mode: Mode,
    /// The work.
    pub work: CommandFuture,
}

impl std::fmt::Debug for Ready {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ready")
            .field("full_name", &self.full_name)
            .field("mode", &self.mode)
            .finish_non_exhaustive()
    }
}

/// Sync commands must answer within Ironic's `[agent]command_timeout`
/// (default 60 s); stop waiting a little before that.
pub const SYNC_COMMAND_TIMEOUT: Duration = Duration::from_secs(50);

/// One command: identity plus mutable state, observable until it finishes.
#[derive(Debug)]
pub struct Command {
    id: String,
    name: String,
    state: Mutex<State>,
    done: watch::Sender<bool>,
}

#[derive(Debug)]
struct State {
    status: CommandStatus,
    error: Option<CommandError>,
    result: Option<Value>,
}

impl Command {
    fn new(name: &str) -> Arc<Self> {
        Arc::new(Self {
            id: uuid::Uuid::new_v4().to_string(),
            name: name.to_string(),
            state: Mutex::new(State {
                status: CommandStatus::Running,
                error: None,
                result: None,
            }),
            done: watch::channel(false).0,
        })
    }

    /// The command's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The bare command name (`execute_clean_step`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether it is still running.
    pub fn is_running(&self) -> bool {
        self.lock().status == CommandStatus::Running
    }

    /// The result document as served by the API.
    pub fn snapshot(&self) -> CommandResult {
        let s = self.lock();
        CommandResult {
            id: self.id.clone(),
            command_name: self.name.clone(),
            command_status: s.status,
            command_error: s.error.clone(),
            command_result: s.result.clone(),
        }
    }

    /// Records the outcome; a command finishes once, later outcomes (e.g. of
    /// work that outlived a sync timeout) are ignored.
    fn finish(&self, outcome: Outcome) -> bool {
        let mut s = self.lock();
        if s.status != CommandStatus::Running {
            return false;
        }
        match outcome {
            Outcome::Done(v) => {
                s.status = CommandStatus::Succeeded;
                s.result = Some(v);
            }
            Outcome::Failed(e) => {
                s.status = CommandStatus::Failed;
                s.error = Some(e);
            }
            Outcome::VersionMismatch(e) => {
                s.status = CommandStatus::CleanVersionMismatch;
                s.error = Some(e);
            }
        }
        drop(s);
        self.done.send_replace(true);
        true
    }

    /// Waits until the command is no longer running.
    pub async fn wait(&self) {
        let mut rx = self.done.subscribe();
        // The sender lives as long as `self`, so this cannot fail.
        let _ = rx.wait_for(|done| *done).await;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The agent's command list for this boot.
#[derive(Debug, Default)]
pub struct CommandHistory {
    list: Mutex<Vec<Arc<Command>>>,
    start_lock: tokio::sync::Mutex<()>,
    running: Mutex<Option<Arc<Command>>>,
    progress: Mutex<Option<Arc<Progress>>>,
}

/// Why a command could not be started.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum StartError {
    /// Another (async) command is still running.
    #[error("executing command {0}")]
    Busy(String),
}

impl CommandHistory {
    /// All commands, oldest first.
    /// A running command shows the image write progress, if one is
    /// registered, as its `command_result` (Ironic ignores it while RUNNING).
    pub fn all(&self) -> Vec<CommandResult> {
        let progress = self
            .progress
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        self.lock_list()
            .iter()
            .map(|c| {
                let mut r = c.snapshot();
                if let (CommandStatus::Running, Some(p)) = (r.command_status, &progress) {
                    r.command_result = Some(p.snapshot().to_json());
                }
                r
            })
            .collect()
    }

    /// Registers (or clears) the progress of the running command's image write.
    pub fn set_progress(&self, progress: Option<Arc<Progress>>) {
        *self.progress.lock().unwrap_or_else(|p| p.into_inner()) = progress;
    }

    /// One command by id.
    pub fn get(&self, id: &str) -> Option<Arc<Command>> {
        self.lock_list().iter().find(|c| c.id == id).cloned()
    }

    /// Forgets every command, as after a reboot. A command still running keeps
    /// the agent busy until it ends, even though it is no longer listed.
    pub fn reset(&self) {
        self.lock_list().clear();
    }

    /// Name of the command that makes the agent busy, if any.
    pub fn busy_with(&self) -> Option<String> {
        let running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = running.as_ref().filter(|c| c.is_running()) {
            return Some(c.name.clone());
        }
        self.lock_list()
            .last()
            .filter(|c| c.is_running())
            .map(|c| c.name.clone())
    }

    /// Runs `ready`: a sync command to completion (bounded by
    /// [`SYNC_COMMAND_TIMEOUT`]); an async one in the background, waiting for
    /// it only when `wait` is set, and calling `on_async_end` when it ends.
    pub async fn execute(
        &self,
        ready: Ready,
        wait: bool,
        on_async_end: OnAsyncEnd,
    ) -> Result<CommandResult, StartError> {
        let Ready {
            full_name,
            method,
            mode,
            work,
        } = ready;
        let guard = self.start_lock.lock().await;
        if let Some(name) = self.busy_with() {
            return Err(StartError::Busy(name));
        }
        let cmd = Command::new(method);
        self.lock_list().push(cmd.clone());
        tracing::info!(command = %full_name, id = %cmd.id, "command started");
        let task = {
            let (cmd, name) = (cmd.clone(), full_name.clone());
            tokio::spawn(async move {
                let outcome = work.await;
                log_outcome(&name, &cmd, &outcome);
                let finished = cmd.finish(outcome);
                if mode == Mode::Async && finished {
                    on_async_end();
                }
            })
        };
        match mode {
            Mode::Sync => {
                if tokio::time::timeout(SYNC_COMMAND_TIMEOUT, cmd.wait())
                    .await
                    .is_err()
                {
                    cmd.finish(Outcome::Failed(CommandError::new(
                        ErrorKind::CommandTimeout,
                        format!(
                            "{full_name} did not finish within {} s; it goes on in the background",
                            SYNC_COMMAND_TIMEOUT.as_secs()
                        ),
                    )));
                }
                drop(guard);
            }
            Mode::Async => {
                // A finished command in this slot no longer makes the agent
                // busy ([`Self::busy_with`] checks its status).
                *self.running.lock().unwrap_or_else(|p| p.into_inner()) = Some(cmd.clone());
                drop(guard);
                if wait {
                    cmd.wait().await;
                }
            }
        }
        drop(task);
        Ok(cmd.snapshot())
    }

    fn lock_list(&self) -> std::sync::MutexGuard<'_, Vec<Arc<Command>>> {
        self.list.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn log_outcome(name: &str, cmd: &Command, outcome: &Outcome) {
    match outcome {
        Outcome::Done(_) => tracing::info!(command = %name, id = %cmd.id, "command succeeded"),
        Outcome::Failed(e) => {
            tracing::error!(command = %name, id = %cmd.id, error = %e, "command failed")
        }
        Outcome::VersionMismatch(e) => {
            tracing::warn!(command = %name, id = %cmd.id, error = %e, "hardware manager version mismatch")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_running_command_shows_the_registered_progress() {
        let h = CommandHistory::default();
        let running = Command::new("execute_deploy_step");
        let done = Command::new("get_deploy_steps");
        done.finish(Outcome::Done(Value::Null));
        h.lock_list().extend([done, running]);
        let p = Arc::new(Progress::default());
        p.add_downloaded(42);
        h.set_progress(Some(p));
        let all = h.all();
        assert_eq!(all[0].command_result, Some(Value::Null));
        assert_eq!(
            all[1].command_result.as_ref().unwrap()["progress"]["bytes_downloaded"],
            42
        );
        h.set_progress(None);
        assert_eq!(h.all()[1].command_result, None);
    }
}
