//! The typed command: a request's JSON parsed once, where it arrives, into
//! a [`Request`] carrying typed values (the [`Node`], step arguments, the
//! checked image), so no handler takes loose JSON or reads the node from
//! the agent's state. [`Request::ready`] turns it into the future the
//! command history runs.

use std::sync::Arc;

use super::params::InstallBootloader;
use crate::commands::history::{CommandFuture, Mode, Ready};
use crate::commands::rescue::FinalizeRescue;
use crate::commands::steps::{Execution, StepKind};
use crate::state::AgentState;
use ironic_types::node::Node;

/// Every command Ironic sends, with its parameters parsed.
#[derive(Debug)]
pub enum Request {
    /// `get_clean_steps`, `get_deploy_steps`, `get_service_steps`.
    GetSteps {
        /// Which steps.
        kind: StepKind,
        /// The node sent with it, cached for later commands.
        node: Option<Node>,
    },
    /// `execute_clean_step`, `execute_deploy_step`, `execute_service_step`.
    ExecuteStep(Execution),
    /// `standby.prepare_image`.
    PrepareImage(Box<crate::commands::image::PrepareImageRequest>),
    /// `standby.get_partition_uuids`.
    GetPartitionUuids,
    /// `standby.sync`.
    Sync,
    /// `standby.power_off`.
    PowerOff,
    /// `standby.reboot` and `standby.run_image`.
    Reboot,
    /// `image.install_bootloader`, with the cached node.
    InstallBootloader(InstallBootloader, Option<Node>),
    /// `log.collect_system_logs`.
    CollectSystemLogs,
    /// `rescue.finalize_rescue`.
    FinalizeRescue(FinalizeRescue),
    /// `system.lockdown`.
    Lockdown,
}

impl Request {
    /// The command's work, on `state`.
    pub fn run(self, state: Arc<AgentState>) -> CommandFuture {
        match self {
            Request::GetSteps { kind, node } => {
                Box::pin(crate::commands::steps::get_steps(state, kind, node))
            }
            Request::ExecuteStep(e) => Box::pin(crate::commands::steps::execute_step(state, e)),
            Request::PrepareImage(p) => Box::pin(crate::commands::image::prepare_image(state, *p)),
            Request::GetPartitionUuids => {
                Box::pin(crate::commands::standby::get_partition_uuids(state))
            }
            Request::Sync => Box::pin(crate::commands::standby::sync(state)),
            Request::PowerOff => Box::pin(crate::commands::standby::power_off(state)),
            Request::Reboot => Box::pin(crate::commands::standby::reboot(state)),
            Request::InstallBootloader(p, node) => Box::pin(
                crate::commands::bootloader::install_bootloader(state, p, node),
            ),
            Request::CollectSystemLogs => {
                Box::pin(crate::commands::logs::collect_system_logs(state))
            }
            Request::FinalizeRescue(p) => {
                Box::pin(crate::commands::rescue::finalize_rescue(state, p))
            }
            Request::Lockdown => Box::pin(crate::commands::system::lockdown(state)),
        }
    }

    /// The command ready for the history: `extension.method` and its mode.
    pub fn ready(
        self,
        state: Arc<AgentState>,
        extension: &str,
        method: &'static str,
        mode: Mode,
    ) -> Ready {
        Ready {
            full_name: format!("{extension}.{method}"),
            method,
            mode,
            work: self.run(state),
        }
    }
}

/// What parsing a request gives.
pub(crate) type ParseResult = Result<Request, super::params::ParamsError>;

/// Parses and runs the command `name` with `params` as the API would,
/// without the history (tests of handlers through the command table).
#[cfg(test)]
pub(crate) async fn run_named(
    state: Arc<AgentState>,
    name: &str,
    params: serde_json::Value,
) -> crate::commands::Outcome {
    let spec = super::registry::lookup(name).expect("a known command");
    let request =
        (spec.parse)(params, &super::context::Context::of(&state)).expect("parameters that parse");
    request.run(state).await
}
