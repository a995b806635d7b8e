//! A simulated power-off (host mode, or a container without the host's
//! root): the machine "stays off" until the conductor has finished the
//! operation it powered the machine off in.
//!
//! A real machine powered off at the end of a deploy never answers again:
//! the conductor goes on with its last deploy steps (network, boot device,
//! power on) in `deploying`, where a lookup still succeeds, and then moves
//! the node to `active`, where Ironic logs any heartbeat as an error. An
//! agent that looked up at once would take a fresh token in that window and
//! heartbeat into `active`. So after a simulated power-off the lookup loop
//! takes no answer for a node whose deploy is still under way, until the
//! conductor refuses a lookup (the node left the states an agent serves),
//! for at most [`OFF_AT_MOST`]. An answer for a node with no deploy under
//! way (a new operation, such as cleaning) is taken at once.

use std::time::Duration;

use tokio::time::Instant;

use agent_conductor::conductor::{ConductorError, LookupResult};
use ironic_types::node::Node;

/// How long a simulated power-off lasts at most, should the conductor
/// never show that it moved on (unreachable, or a node that stays put).
pub(super) const OFF_AT_MOST: Duration = Duration::from_secs(600);

/// A simulated power-off still in force.
#[derive(Debug)]
pub(super) struct PoweredOff {
    until: Instant,
}

impl PoweredOff {
    pub(super) fn new() -> Self {
        tracing::info!(
            "powered off (simulated): no session until the conductor has moved the node on"
        );
        PoweredOff {
            until: Instant::now() + OFF_AT_MOST,
        }
    }

    /// Why `found` is not taken, or `None` to take it (the power-off is
    /// then over).
    pub(super) fn holds(&self, found: &LookupResult) -> Option<String> {
        if Instant::now() >= self.until {
            tracing::warn!(
                "powered off (simulated) for {} s without seeing the conductor move the node on; back on",
                OFF_AT_MOST.as_secs()
            );
            return None;
        }
        let deploying = Node::parse(found.node.clone())
            .ok()
            .flatten()
            .is_some_and(|n| n.deploy_under_way());
        deploying.then(|| {
            format!(
                "powered off (simulated): the deploy of node {} is still under way",
                found.node_uuid
            )
        })
    }

    /// Whether `e` shows the conductor moved the node on: a refusal other
    /// than a lock (Ironic answers 404 for a node in no state an agent
    /// serves).
    pub(super) fn ended_by(&self, e: &ConductorError) -> bool {
        let moved_on = e
            .status()
            .is_some_and(|s| (400..500).contains(&s) && s != 409);
        if moved_on {
            tracing::info!(
                "powered off (simulated): the conductor refused a lookup ({e}); back on"
            );
        }
        moved_on
    }
}
