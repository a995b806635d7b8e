//! The three phases steps belong to: cleaning, deployment, servicing.

use crate::commands::ErrorKind;

/// Cleaning or deployment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepKind {
    /// `clean.*`
    Clean,
    /// `deploy.*`
    Deploy,
    /// `service.*`
    Service,
}

impl StepKind {
    /// `clean`, `deploy` or `service`.
    pub fn word(self) -> &'static str {
        match self {
            Self::Clean => "clean",
            Self::Deploy => "deploy",
            Self::Service => "service",
        }
    }

    /// The error class of a failed step of this phase.
    pub fn error_kind(self) -> ErrorKind {
        match self {
            Self::Clean => ErrorKind::Cleaning,
            Self::Deploy => ErrorKind::Deployment,
            Self::Service => ErrorKind::Servicing,
        }
    }
}
