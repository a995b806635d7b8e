//! A bare-metal deploy agent that an unmodified Ironic conductor drives
//! exactly as it drives ironic-python-agent: the top crate, serving and
//! driving. Below it, each a crate of its own so that an import can only
//! point down (the map for a newcomer: `agent/ARCHITECTURE.md`):
//! `ironic-types` (Ironic's data), `agent-base` (foundations),
//! `agent-devices` (hardware and devices), `agent-contents` (images and
//! what else is written to disks), `agent-conductor` (the client of
//! Ironic's ramdisk endpoints) and `agent-core` (commands and state).
//!
//! Here: [`agent`] (lookup, heartbeats), [`api`] and [`server`] (the
//! command API), [`startup`] (waits before the hardware is read),
//! [`inspect`] (the inspection document posted before lookup), [`init`]
//! (PID 1 in the ramdisk), [`cli`], and `testconductor`, a stand-in
//! conductor for tests and the demo, built only with the `test-conductor`
//! feature (the agent's own tests and `hardware-tests` turn it on; the
//! ramdisk's agent never has it).

pub mod agent;
pub mod api;
pub mod cli;
pub mod init;
pub mod inspect;
pub mod server;
pub mod startup;
// Also in the unit tests, without the feature: ci/test-aarch64-unit builds
// them alone (see Cargo.toml, dev-dependencies).
#[cfg(any(test, feature = "test-conductor"))]
pub mod testconductor;
