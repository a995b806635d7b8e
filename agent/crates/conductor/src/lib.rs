//! The client of Ironic's ramdisk endpoints: lookup, heartbeats and the
//! inspection callback ([`conductor`]).

pub mod conductor;
