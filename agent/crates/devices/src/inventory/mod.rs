//! The hardware inventory Ironic receives (PROTOCOL.md §4.1), read directly from the
//! kernel's interfaces under a root directory: `/proc`, `/sys`, the SMBIOS
//! table, `/dev/disk/by-path` and the udev database when present. No external
//! tools. Production reads `/`; tests read captured fixture trees
//! (`agent/tests/fixtures/<machine>/`).
//!
//! Design: each part (CPU, memory, disks, NICs, system) has its own module
//! whose parsing functions are pure; [`collect`] only glues them together.
//! Every field has IPA's name, type and unit; what cannot be known is `null`
//! (or, for `system_vendor`, `""` as IPA sends), never a guess.

pub(crate) mod bmc;
pub mod cpu;
pub(crate) mod cpu_arm;
pub mod disks;
pub mod human;
pub(crate) mod memory;
pub mod nics;
pub mod signatures;
pub(crate) mod smbios;
pub mod system;

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

pub use cpu::Cpu;
pub use disks::Disk;
pub use memory::Memory;
pub use nics::{Addresses, Interface};
pub use system::{Boot, Firmware, SystemVendor};

/// The inventory document (`inventory` in the inspection data).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Inventory {
    /// Network interfaces.
    pub interfaces: Vec<Interface>,
    /// Processors.
    pub cpu: Cpu,
    /// Whole disks that can hold an OS.
    pub disks: Vec<Disk>,
    /// Memory.
    pub memory: Memory,
    /// BMC IPv4 address: null without IPMI.
    pub bmc_address: Option<String>,
    /// BMC IPv6 address: null without IPMI.
    pub bmc_v6address: Option<String>,
    /// BMC MAC; omitted when unknown, as IPA does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bmc_mac: Option<String>,
    /// Manufacturer, product, serial and firmware (SMBIOS).
    pub system_vendor: SystemVendor,
    /// Boot mode and PXE interface.
    pub boot: Boot,
    /// Host name.
    pub hostname: String,
}

/// What to read and from where.
#[derive(Debug, Clone)]
pub struct Options {
    /// Root of the tree holding `proc/`, `sys/`, `dev/`, `run/` (`/` live).
    pub root: PathBuf,
    /// The raw `BOOTIF` kernel argument.
    pub bootif: Option<String>,
    /// Interface addresses (kernel netlink via getifaddrs when live; a
    /// captured file for fixtures).
    pub addresses: Addresses,
    /// Kernel names of devices to list although they are normally skipped
    /// (loop devices given with `--allow-device` in host mode).
    pub extra_disks: Vec<String>,
    /// Skip IPMI detection (`agent_skip_bmc_detect`).
    pub skip_bmc: bool,
    /// Leave out USB network devices (`cdc_ether`, `cdc_ncm`): in the
    /// container form, as OpenShift's manager filters them (a BMC's USB NIC
    /// shares its MAC across hosts).
    pub filter_usb_nics: bool,
}

impl Options {
    /// Reading the running machine.
    pub fn live(bootif: Option<String>) -> Self {
        Self {
            root: PathBuf::from("/"),
            bootif,
            addresses: Addresses::live(),
            extra_disks: Vec::new(),
            skip_bmc: false,
            filter_usb_nics: false,
        }
    }

    /// Reading a captured tree: addresses come from its `ifaddrs` file
    /// (written by the capture script), the kernel command line from its
    /// `proc/cmdline` unless `bootif` is given.
    pub fn fixture(root: &Path) -> Self {
        let cmdline = std::fs::read_to_string(root.join("proc/cmdline")).unwrap_or_default();
        let bootif = agent_base::config::KernelParams::parse(&cmdline)
            .get("BOOTIF")
            .filter(|b| !b.is_empty())
            .map(String::from);
        Self {
            root: root.to_path_buf(),
            bootif,
            addresses: Addresses::from_file(&root.join("ifaddrs")),
            extra_disks: Vec::new(),
            skip_bmc: false,
            filter_usb_nics: false,
        }
    }
}

/// Reads the whole inventory. Only an unreadable `/proc` (CPU or memory) is
/// an error; everything else degrades to `null` with a debug log.
pub fn collect(opts: &Options) -> Result<Inventory> {
    let root = &opts.root;
    let cpu = cpu::read(root).context("reading the CPUs")?;
    let memory = memory::read(root).context("reading the memory size")?;
    let disks = disks::read(root, &opts.extra_disks).context("listing disks")?;
    let mut interfaces = nics::read(root, &opts.addresses);
    if opts.filter_usb_nics {
        interfaces.retain(|i| !nics::is_usb_network_device(i));
    }
    let system_vendor = system::vendor(root);
    let bmc = bmc::read(root, opts.skip_bmc);
    Ok(Inventory {
        interfaces,
        cpu,
        disks,
        memory,
        bmc_address: bmc.v4,
        bmc_v6address: bmc.v6,
        bmc_mac: bmc.mac,
        system_vendor,
        boot: Boot {
            current_boot_mode: system::boot_mode(root).into(),
            pxe_interface: opts.bootif.clone(),
        },
        hostname: system::hostname(root),
    })
}

/// Reads a sysfs/procfs attribute, trimmed; `None` when missing, unreadable
/// or blank.
pub fn read_attr(path: &Path) -> Option<String> {
    let s = std::fs::read_to_string(path).ok()?;
    let s = s.trim();
    (!s.is_empty()).then(|| s.to_string())
}

/// `root` joined with an absolute-looking path (`/sys/...`).
pub(crate) fn under(root: &Path, abs: &str) -> PathBuf {
    root.join(abs.trim_start_matches('/'))
}
