//! Running external tools (`mount`, `umount`, `ip`, …): the one place that
//! starts them, so every failure says the same things: the command line,
//! how it ended, and the tail of what it wrote to stderr.

use std::fmt;
use std::io;
use std::process::{Command, ExitStatus, Output};

/// How much of a failed tool's stderr an error keeps (its end).
const STDERR_TAIL: usize = 1000;

/// Why a tool run failed.
#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    /// It could not be started (missing, not executable).
    #[error("running `{cmdline}`: {source}")]
    Spawn {
        /// The command line.
        cmdline: String,
        /// Why it could not start.
        source: io::Error,
    },
    /// It ran and failed.
    #[error("`{cmdline}` failed ({status}){}", Tail(stderr))]
    Failed {
        /// The command line.
        cmdline: String,
        /// How it ended.
        status: ExitStatus,
        /// The end of its stderr, trimmed.
        stderr: String,
    },
}

/// `: <stderr>` when there is any.
struct Tail<'a>(&'a str);

impl fmt::Display for Tail<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            Ok(())
        } else {
            write!(f, ": {}", self.0)
        }
    }
}

/// The first executable file `name` in the directories of `search` (a
/// `PATH`-style list).
pub fn find_on_path(search: &std::ffi::OsStr, name: &str) -> Option<std::path::PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    std::env::split_paths(search)
        .map(|dir| dir.join(name))
        .find(|p| {
            p.metadata()
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// `cmd` as a shell-like line, for messages.
pub fn cmdline(cmd: &Command) -> String {
    std::iter::once(cmd.get_program())
        .chain(cmd.get_args())
        .map(|a| a.to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(" ")
}

/// Runs `cmd` to its end, capturing its output; a non-zero exit is an error
/// with the tail of its stderr.
pub fn run(cmd: &mut Command) -> Result<Output, ToolError> {
    run_allowing(cmd, &[])
}

/// Runs `cmd` to its end and returns its output however it ended: only a
/// tool that cannot be started is an error. For tools whose output is
/// wanted even when they fail (the log bundle records the exit status).
pub fn output(cmd: &mut Command) -> Result<Output, ToolError> {
    let line = cmdline(cmd);
    cmd.output().map_err(|source| ToolError::Spawn {
        cmdline: line,
        source,
    })
}

/// [`run`], with the exit codes in `also_ok` counting as success too (tools
/// that report "nothing to do" with a code of their own).
pub fn run_allowing(cmd: &mut Command, also_ok: &[i32]) -> Result<Output, ToolError> {
    let out = output(cmd)?;
    if out.status.success() || out.status.code().is_some_and(|c| also_ok.contains(&c)) {
        return Ok(out);
    }
    let line = cmdline(cmd);
    let text = String::from_utf8_lossy(&out.stderr);
    let text = text.trim();
    let start = text
        .char_indices()
        .rev()
        .nth(STDERR_TAIL - 1)
        .map_or(0, |(i, _)| i);
    Err(ToolError::Failed {
        cmdline: line,
        status: out.status,
        stderr: text[start..].to_string(),
    })
}

#[cfg(test)]
mod tests {
    //! Errors that name the command and keep the end of stderr.

    use super::*;

    #[test]
    fn failures_name_the_command_line_and_the_end_of_stderr() {
        let e =
            run(Command::new("sh")
                .args(["-c", "echo starting >&2; echo no such thing >&2; exit 3"]))
            .unwrap_err();
        let msg = e.to_string();
        assert!(msg.starts_with("`sh -c echo starting"), "{msg}");
        assert!(msg.contains("exit status: 3"), "{msg}");
        assert!(msg.ends_with("starting\nno such thing"), "{msg}");

        let long = format!("printf '%s' {} >&2; exit 1", "x".repeat(5000));
        let e = run(Command::new("sh").args(["-c", &long])).unwrap_err();
        let ToolError::Failed { stderr, .. } = e else {
            panic!("expected Failed")
        };
        assert_eq!(stderr.len(), STDERR_TAIL);

        let e = run(&mut Command::new("/nonexistent/tool")).unwrap_err();
        assert!(matches!(e, ToolError::Spawn { .. }), "{e}");
        assert!(e.to_string().contains("/nonexistent/tool"), "{e}");

        let out = run(Command::new("sh").args(["-c", "echo fine"])).unwrap();
        assert_eq!(out.stdout, b"fine\n");
    }

    #[test]
    fn other_exit_codes_can_count_as_success() {
        let out = run_allowing(Command::new("sh").args(["-c", "echo some; exit 2"]), &[2]).unwrap();
        assert_eq!(out.status.code(), Some(2));
        assert_eq!(out.stdout, b"some\n");
        let e = run_allowing(
            Command::new("sh").args(["-c", "echo bad >&2; exit 3"]),
            &[2],
        )
        .unwrap_err();
        assert!(e.to_string().contains("exit status: 3"), "{e}");
        assert!(e.to_string().ends_with(": bad"), "{e}");
        // A signal has no exit code: never allowed.
        let e = run_allowing(Command::new("sh").args(["-c", "kill -9 $$"]), &[0, 9]).unwrap_err();
        assert!(matches!(e, ToolError::Failed { .. }), "{e}");
    }

    #[test]
    fn output_keeps_what_a_failing_tool_wrote() {
        let out =
            output(Command::new("sh").args(["-c", "echo out; echo err >&2; exit 4"])).unwrap();
        assert_eq!(out.status.code(), Some(4));
        assert_eq!(
            (&out.stdout[..], &out.stderr[..]),
            (&b"out\n"[..], &b"err\n"[..])
        );
        let e = output(&mut Command::new("/nonexistent/tool")).unwrap_err();
        assert!(matches!(e, ToolError::Spawn { .. }), "{e}");
    }
}
