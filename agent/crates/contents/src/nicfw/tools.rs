//! The tools IPA's NVIDIA NIC steps run, found on a search path, and IPA's
//! prerequisite check (`check_prereq`: `mstflint -v`, `mstconfig -v`,
//! `mstfwreset -v`, `lspci --version`, in that order). The deploy ramdisk
//! does not carry mstflint unless it is built in; a missing tool fails the
//! step naming it.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::process::Command;

use super::NicFwError;

/// Where tools are looked for when the agent has no `PATH`.
pub const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// The agent's `PATH` (else [`DEFAULT_PATH`]).
pub fn agent_path() -> OsString {
    std::env::var_os("PATH").unwrap_or_else(|| DEFAULT_PATH.into())
}

/// The four tools, by path.
#[derive(Debug, Clone)]
pub struct Tools {
    /// `mstflint`: queries and burns firmware.
    pub mstflint: PathBuf,
    /// `mstconfig`: queries and sets firmware settings.
    pub mstconfig: PathBuf,
    /// `mstfwreset`: resets a NIC so it loads its new firmware.
    pub mstfwreset: PathBuf,
    /// `lspci`: lists the NICs.
    pub lspci: PathBuf,
}

impl Tools {
    /// Finds every tool on `search` (a `PATH`-style list) and runs IPA's
    /// prerequisite check on each, in IPA's order.
    pub fn find(search: &OsStr) -> Result<Tools, NicFwError> {
        let tools = Tools {
            mstflint: locate(search, "mstflint")?,
            mstconfig: locate(search, "mstconfig")?,
            mstfwreset: locate(search, "mstfwreset")?,
            lspci: locate(search, "lspci")?,
        };
        for (tool, arg) in [
            (&tools.mstflint, "-v"),
            (&tools.mstconfig, "-v"),
            (&tools.mstfwreset, "-v"),
            (&tools.lspci, "--version"),
        ] {
            run(tool, &[arg], "prerequisite check")?;
        }
        Ok(tools)
    }
}

/// The first executable file `name` in `search`'s directories.
fn locate(search: &OsStr, name: &'static str) -> Result<PathBuf, NicFwError> {
    agent_base::tool::find_on_path(search, name).ok_or_else(|| NicFwError::ToolMissing {
        tool: name,
        searched: search.to_string_lossy().into_owned(),
    })
}

/// Runs `tool` with `args`; its stdout (lossy UTF-8) or an error saying
/// `what` it was for.
pub fn run(tool: &Path, args: &[&str], what: &str) -> Result<String, NicFwError> {
    tracing::debug!(tool = %tool.display(), ?args, "running");
    let out = agent_base::tool::run(Command::new(tool).args(args)).map_err(|source| {
        NicFwError::Tool {
            what: what.to_string(),
            source,
        }
    })?;
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}
