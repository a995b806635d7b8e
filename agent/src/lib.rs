//! A bare-metal deploy agent that an unmodified Ironic conductor drives
//! exactly as it drives ironic-python-agent.
//!
//! Map: [`config`] (kernel command line and flags) → [`agent`] (lookup,
//! command API, heartbeats) → [`api`] (HTTP routes) → [`commands`] (the
//! command table, history and steps) → [`disk`] (device policy and erase).
//! [`discovery`] finds the conductor by mDNS; [`conductor`] is the client of Ironic's ramdisk endpoints;
//! [`testconductor`] a stand-in conductor for tests and the demo.
//! [`inventory`] (what the machine is) → [`hints`] (which disk is the root
//! device) and [`lldp`] (which switch port each NIC sees) → [`inspect`]
//! (the inspection document posted before lookup). [`configdrive`] places
//! config drives after an image write, [`ignition`] injects Ignition into
//! CoreOS-like images, [`uefi`] writes boot entries; [`logs`] keeps the agent's log in
//! memory and bundles the system logs for the conductor.
//! In the ramdisk, [`init`] is PID 1 (mounts, module coldplug, supervision)
//! and [`netconf`] brings the NICs up by DHCP before the agent starts.

pub mod agent;
pub mod api;
pub mod cli;
pub mod collectors;
pub mod commands;
pub mod conductor;
pub mod config;
pub mod configdrive;
pub mod discovery;
pub mod disk;
pub mod hints;
pub mod ignition;
pub mod image;
pub mod init;
pub mod inspect;
pub mod inventory;
pub mod lldp;
pub mod logs;
pub mod net;
pub mod netconf;
pub mod power;
pub mod server;
pub mod state;
pub mod testconductor;
pub mod tls;
pub mod uefi;
