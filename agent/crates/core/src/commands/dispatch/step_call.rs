//! What a step handler receives ([`StepCall`]: the node and the step's
//! typed arguments) and how a step row turns the request's arguments into
//! them ([`typed`]), so that a bad argument fails before the step runs,
//! naming it.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::commands::CommandError;
use crate::state::AgentState;
use agent_contents::selection::{SkipError, SkipList};
use ironic_types::node::{Node, Ports};

/// What a step handler receives: the node sent with the step (else the
/// one cached from an earlier command; secrets masked) and the step's
/// arguments, parsed when the request arrived.
#[derive(Debug, Clone)]
pub struct StepCall<A = NoArgs> {
    /// The node.
    pub node: Option<Node>,
    /// The node's ports as the conductor sent them (none if it sent
    /// none).
    pub ports: Ports,
    /// `step.args`, typed.
    pub args: A,
}

impl<A> StepCall<A> {
    /// The node's document, `null` when the conductor sent none.
    pub fn node_document(&self) -> &Value {
        static NULL: Value = Value::Null;
        self.node.as_ref().map_or(&NULL, Node::document)
    }

    /// The disks the node protects (`properties.skip_block_devices`),
    /// as the commands' edge checked them when the node arrived.
    pub fn skip_list(&self) -> Result<SkipList, SkipError> {
        SkipList::of(self.node_or_empty())
    }

    /// The node, an empty one when the conductor sent none.
    pub fn node_or_empty(&self) -> &Node {
        static EMPTY: std::sync::LazyLock<Node> = std::sync::LazyLock::new(Node::default);
        self.node.as_ref().unwrap_or(&EMPTY)
    }
}

#[cfg(test)]
impl StepCall {
    /// A call without arguments with the node `doc` (tests).
    pub fn with_node(doc: Value) -> Self {
        StepCall {
            node: Node::from_document(doc),
            ports: Ports::default(),
            args: NoArgs {},
        }
    }
}

/// The arguments of a step that takes none: any given are ignored, as IPA
/// ignores them.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct NoArgs {}

/// A boxed step future.
pub(crate) type StepFuture = Pin<Box<dyn Future<Output = Result<Value, CommandError>> + Send>>;

/// A step whose arguments were parsed: its work, given the agent's state.
pub(crate) type PreparedStep = Box<dyn FnOnce(Arc<AgentState>) -> StepFuture + Send>;

/// The arguments as they came (`step.args`).
pub(crate) type RawCall = StepCall<Map<String, Value>>;

/// Parses `call`'s arguments as an `A` (a bad one is the command's
/// `InvalidCommandParams` failure, naming it) and prepares `handler` with
/// them.
pub(crate) fn typed<A, F, Fut>(call: RawCall, handler: F) -> Result<PreparedStep, CommandError>
where
    A: DeserializeOwned + Send + 'static,
    F: FnOnce(Arc<AgentState>, StepCall<A>) -> Fut + Send + 'static,
    Fut: Future<Output = Result<Value, CommandError>> + Send + 'static,
{
    let args: A = super::params::for_command(&Value::Object(call.args))?;
    let call = StepCall {
        node: call.node,
        ports: call.ports,
        args,
    };
    Ok(Box::new(move |state| Box::pin(handler(state, call))))
}
