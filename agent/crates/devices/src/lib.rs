//! The machine's hardware and devices: [`inventory`] (what the machine
//! is) with its [`collectors`], [`hints`] (which disk is the root device),
//! [`hostroot`] (the live system's root when the agent is OpenShift's
//! container: its tools run chrooted), [`lldp`] (which switch port each
//! NIC sees), [`disk`] (device policy, partition tables, erasing),
//! [`logs`] (the agent's log and the system log bundle), [`netconf`] (NICs
//! up by DHCP in the ramdisk, or as `network_data.json` says: bonds,
//! VLANs, static addresses), [`pstore`] (the kernel's crash store),
//! [`burnin`] (the CPU, memory, disk and network burn-in workloads),
//! [`rescue`] (crypt hashes and the rescue login), [`lockdown`] (the
//! Secure Boot and lockdown state, and errors that name a lockdown
//! refusal).

pub mod burnin;
pub mod collectors;
pub mod disk;
pub mod hints;
pub mod hostroot;
pub mod inventory;
pub mod lldp;
pub mod lockdown;
pub mod logs;
pub mod netconf;
pub mod pstore;
pub mod rescue;
