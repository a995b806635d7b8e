//! From a request's JSON to a handler: the table that maps
//! `extension.method` names to parsers ([`registry`]), the typed request a
//! parser makes of the JSON where it arrives ([`request::Request`]) and
//! that runs its handler, the node and parameter checks at that edge
//! ([`node_check`], [`params`]), what a request is parsed and run with
//! ([`context`]), and a step's typed call ([`step_call`], [`step_kind`]).
//! The handlers are the other modules of `commands`.

pub mod context;
pub(crate) mod node_check;
pub(crate) mod params;
pub mod registry;
pub(crate) mod request;
pub(crate) mod step_call;
pub(crate) mod step_kind;
