//! Container-based steps as IPA 13's `ContainerHardwareManager` defines
//! them (`ironic_python_agent/hardware_managers/container.py`): the
//! `[container]` settings and the lookup's `agent_containers` overlay
//! ([`settings`]), the steps file baked into the ramdisk ([`steps_file`]),
//! podman's option syntax translated to typed options ([`options`]), the
//! allowlist applied before anything is pulled ([`policy`]), the registry
//! pull ([`pull`], [`manifest`], over plain HTTP only as podman falls
//! back to it: [`scheme`]) within bounds ([`limits`]) with safe layer
//! unpacking ([`unpack`]), and the run with crun ([`bundle`], [`runtime`])
//! confined as podman confines a container (capabilities, device cgroup,
//! [`seccomp`]).
//!
//! This is the lower layer: it knows nothing of commands or the agent's
//! state; the command layer's adapter maps [`ContainerError`] to IPA's
//! error classes.

pub(crate) mod bundle;
pub mod limits;
pub(crate) mod manifest;
pub mod options;
pub mod policy;
pub mod pull;
pub mod runtime;
pub(crate) mod scheme;
pub(crate) mod seccomp;
pub mod settings;
pub mod steps_file;
pub mod unpack;

pub use runtime::{run_container, run_container_within, runtime_available};

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
    /// The image could not be pulled or unpacked (registry, TLS,
    /// credentials, digest, layer contents).
    #[error("pulling container image {image}: {source:#}")]
    Pull {
        /// The image.
        image: String,
        /// What failed.
        source: anyhow::Error,
    },
    /// The container could not be set up or started.
    #[error("running container image {image}: {source:#}")]
    Run {
        /// The image.
        image: String,
        /// What failed.
        source: anyhow::Error,
    },
    /// The container ran and exited unsuccessfully.
    #[error("container image {image} exited with {status}; its last output:\n{output}")]
    Failed {
        /// The image.
        image: String,
        /// The exit status, as the OS reports it.
        status: String,
        /// The last lines of its output.
        output: String,
    },
    /// The step was aborted and the container killed.
    #[error("container image {0}: aborted, the container was killed")]
    Aborted(
        /// The image.
        String,
    ),
}
