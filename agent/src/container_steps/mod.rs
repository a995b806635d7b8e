//! Container-based steps as IPA 13's `ContainerHardwareManager` defines
//! them (`ironic_python_agent/hardware_managers/container.py`): the
//! `[container]` settings and the lookup's `agent_containers` overlay
//! ([`settings`]), the steps file baked into the ramdisk ([`steps_file`]),
//! podman's option syntax translated to typed options ([`options`]), and
//! the allowlist applied before anything is pulled ([`policy`]).
//!
//! This is the lower layer: it knows nothing of commands or the agent's
//! state; the command layer's adapter maps [`ContainerError`] to IPA's
//! error classes.

pub mod options;
pub mod policy;
pub mod settings;
pub mod steps_file;

/// What can go wrong with a container step, one variant per IPA error
/// class the conductor sees.
#[derive(Debug, thiserror::Error)]
pub enum ContainerError {
    /// IPA's `ContainerNotPermittedError` (the message is IPA's).
    #[error(
        "Container image {0} is not in [container]allowed_containers and [container]allow_arbitrary_containers is not enabled."
    )]
    NotPermitted(String),
    /// IPA's `InvalidCommandParamsError`: a step argument is unusable.
    #[error("{0}")]
    InvalidParams(String),
    /// IPA's `HardwareManagerConfigurationError`: the steps file or the
    /// `[container]` settings are unusable.
    #[error("{0}")]
    Configuration(String),
    /// A `pull_options` / `run_options` word outside the supported subset
    /// of podman's syntax, or one whose value does not parse.
    #[error(transparent)]
    Option(#[from] options::OptionError),
}
