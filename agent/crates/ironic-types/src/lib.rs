//! Ironic's data as the conductor sends it, typed: [`node`] (the node,
//! its properties and instance info). Serde only, no I/O: every crate of
//! the agent sits above this one.

pub mod node;
