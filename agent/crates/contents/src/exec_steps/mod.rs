//! Executable hardware managers: what an operator adds to the ramdisk
//! without rebuilding the agent. A directory of YAML manifests (one per
//! manager, [`manifest`]) names executables that provide clean, deploy and
//! service steps, a per-disk erase method, extra inspection data and the
//! choice of the root disk; [`run`]
//! runs one of them with its JSON input, time limit and abort. How they
//! become steps of the agent is `commands`' business (layers above).

pub(crate) mod dir;
pub mod manifest;
pub mod run;

#[cfg(test)]
mod manifest_tests;
#[cfg(test)]
mod run_tests;

/// Where the deploy ramdisk's agent looks for manifests (image-builder's
/// `--managers DIR` puts a directory there; an initrd appended at boot can
/// add files to it).
pub const RAMDISK_DIR: &str = "/etc/ironic-python-agent/managers";

pub use dir::load_dir;
pub use manifest::{
    parse_manifest, ArgSpec, ExecManager, ExecStep, Hook, Interface, ManifestError,
};
pub use run::{erase_block_device, os_install_device, run, Exit, RunError, Tail};
