//! A bare-metal deploy agent that an unmodified Ironic conductor drives
//! exactly as it drives ironic-python-agent.
//!
//! The modules form layers that point one way (checked by `build.rs` on
//! every build, with `layers/check.rs`, whose `LAYERS` is this list),
//! lowest first (the map
//! for a newcomer: `agent/ARCHITECTURE.md`):
//!
//! 1. Foundations: [`config`] (kernel command line, IPA's config files and
//!    flags), [`tls`] (with the pinned self-signed certificate rule),
//!    [`net`], [`node`] (the node as the conductor sends it),
//!    [`discovery`] (finding the conductor by mDNS), [`errfmt`], [`tool`]
//!    (running external tools), [`timesync`] (the clock before TLS),
//!    [`rtc`] (the hardware clock), [`metrics`] (statsd timers),
//!    [`bootphases`] (the seconds since boot of each start-up phase).
//! 2. Hardware and devices: [`inventory`] (what the machine is) with its
//!    [`collectors`], [`hints`] (which disk is the root device),
//!    [`hostroot`] (the live system's root when the agent is OpenShift's
//!    container: its tools run chrooted), [`lldp`]
//!    (which switch port each NIC sees), [`disk`] (device policy, partition
//!    tables, erasing), [`logs`] (the agent's log and the system log
//!    bundle), [`netconf`] (NICs up by DHCP in the ramdisk, or as
//!    `network_data.json` says: bonds, VLANs, static addresses), [`pstore`]
//!    (the kernel's crash store), [`burnin`] (the CPU, memory, disk and
//!    network burn-in workloads), [`rescue`] (crypt hashes and the rescue
//!    login), [`lockdown`] (the Secure Boot and lockdown state, and errors
//!    that name a lockdown refusal).
//! 3. Disk contents: [`image`] (the streaming image write), [`configdrive`]
//!    (config drives after an image write), [`container_steps`] (IPA's
//!    container steps: settings, steps file, options, allowlist), [`ignition`] (Ignition for
//!    CoreOS-like images), [`partimage`] (partition images: layout, table,
//!    the other partitions, their UEFI loaders), [`raid`] (software RAID),
//!    [`selection`] (which disks the node's `skip_block_devices` protect),
//!    [`uefi`] (boot entries), [`grub`] (BIOS GRUB
//!    installed from the deployed image), [`inject`] (`inject_files`:
//!    files written into the deployed disk's filesystems), [`vmedia`] (what
//!    Ironic puts on virtual media for the ramdisk), [`exec_steps`] (the
//!    operator's executable hardware managers: manifests and running them),
//!    [`nicfw`] (NVIDIA/Mellanox NIC firmware images and settings with
//!    mstflint, as IPA's Mellanox manager).
//! 4. [`conductor`]: the client of Ironic's ramdisk endpoints.
//! 5. The agent's core: [`command`] (a command's result, its IPA error
//!    classes, and the history that runs commands), [`state`] (the shared
//!    state, which owns the history), [`commands`] (every command and step
//!    handler, each request parsed into a typed command where it arrives),
//!    [`power`].
//! 6. Serving and driving: [`agent`] (lookup, heartbeats), [`api`] and
//!    [`server`] (the command API), [`startup`] (waits before the hardware
//!    is read), [`inspect`] (the inspection document
//!    posted before lookup), [`init`] (PID 1 in the ramdisk), [`cli`], and
//!    `testconductor`, a stand-in conductor for tests and the demo, built
//!    only with the `test-conductor` feature (the agent's own tests and
//!    `hardware-tests` turn it on; the ramdisk's agent never has it).

pub mod agent;
pub mod api;
pub mod bootphases;
pub mod burnin;
pub mod cli;
pub mod collectors;
pub mod command;
pub mod commands;
pub mod conductor;
pub mod config;
pub mod configdrive;
pub mod container_steps;
pub mod discovery;
pub mod disk;
pub mod errfmt;
pub mod exec_steps;
pub mod grub;
pub mod hints;
pub mod hostroot;
pub mod ignition;
pub mod image;
pub mod init;
pub mod inject;
pub mod inspect;
pub mod inventory;
pub mod lldp;
pub mod lockdown;
pub mod logs;
pub mod metrics;
pub mod net;
pub mod netconf;
pub mod nicfw;
pub mod node;
pub mod partimage;
pub mod power;
pub mod pstore;
pub mod raid;
pub mod rescue;
pub mod rtc;
pub mod selection;
pub mod server;
pub mod startup;
pub mod state;
// Also in the unit tests, without the feature: ci/test-aarch64-unit builds
// them alone (see Cargo.toml, dev-dependencies).
#[cfg(any(test, feature = "test-conductor"))]
pub mod testconductor;
pub mod timesync;
pub mod tls;
pub mod tool;
pub mod uefi;
pub mod vmedia;

/// The agent's version, as reported to the conductor and on `GET /v1`.
pub const AGENT_VERSION: &str = env!("CARGO_PKG_VERSION");
