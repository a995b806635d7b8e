//! NVIDIA (Mellanox) NIC firmware, as IPA 13's `MellanoxDeviceHardwareManager`
//! updates it (`hardware_managers/nvidia/nvidia_fw_update.py`): the NICs
//! found with `lspci` and queried with `mstflint`, firmware images checked
//! (schema, checksum, PSID, version) and burnt, and firmware settings
//! checked and set with `mstconfig`. The command handlers are in
//! `commands/nicfw.rs`; this module runs the tools and owns the rules.
//!
//! Everything here takes the tools' search path ([`tools::Tools::find`]) and
//! a sysfs root ([`discovery::nic_present`]), so the tests run stand-in
//! tools on captured output instead of real NICs.
//!
//! - [`tools`]: finding mstflint, mstconfig, mstfwreset and lspci, IPA's
//!   prerequisite check, running them.
//! - [`query`]: parsing `mstflint query`, `lspci -Dn`, `mstconfig q` and
//!   `mstconfig i` output (pure functions; nothing parsed panics).
//! - [`discovery`]: whether a Mellanox NIC is present, and the NICs with
//!   their PCI address, device ID and firmware.
//! - [`image`], `update_nvidia_nic_firmware_image`.
//! - [`fetch`]: an image's download (http(s) through the agent's image
//!   client, `file://` copied) with its checksum.
//! - [`settings`], `update_nvidia_nic_firmware_settings`.

pub mod discovery;
pub(crate) mod fetch;
pub mod image;
pub(crate) mod query;
pub mod settings;
pub mod tools;

/// Why a firmware step failed. The variants named after an IPA exception
/// are reported as that class (`commands/nicfw.rs`); their text is the
/// details IPA gives, with the input (image, device, setting) named.
#[derive(Debug, thiserror::Error)]
pub enum NicFwError {
    /// A tool the steps need is not installed (IPA's `check_prereq`).
    #[error("{tool} was not found in {searched}: the NVIDIA NIC firmware steps run mstflint, mstconfig, mstfwreset and lspci, which must be built into the deploy ramdisk (its mstflint package and pciutils)")]
    ToolMissing {
        /// The tool.
        tool: &'static str,
        /// The directories searched.
        searched: String,
    },
    /// A tool ran and failed (IPA's `ProcessExecutionError`).
    #[error("{what}: {source}")]
    Tool {
        /// What it was doing.
        what: String,
        /// How it failed.
        source: agent_base::tool::ToolError,
    },
    /// A tool's output lacks what the step needs.
    #[error("{0}")]
    Output(String),
    /// Downloading or storing an image failed.
    #[error("firmware image {url}: {reason}")]
    Download {
        /// The image's URL.
        url: String,
        /// Why.
        reason: String,
    },
    /// IPA's `InvalidFirmwareImageConfig`.
    #[error("{0}")]
    InvalidImageConfig(String),
    /// IPA's `InvalidFirmwareSettingsConfig`.
    #[error("{0}")]
    InvalidSettingsConfig(String),
    /// IPA's `InvalidURLScheme`.
    #[error("{0}")]
    InvalidUrlScheme(String),
    /// IPA's `MismatchChecksumError`.
    #[error("{0}")]
    MismatchChecksum(String),
    /// IPA's `MismatchComponentFlavor` (the image's PSID).
    #[error("{0}")]
    MismatchComponentFlavor(String),
    /// IPA's `MismatchFWVersion`.
    #[error("{0}")]
    MismatchFwVersion(String),
    /// IPA's `DuplicateComponentFlavor`.
    #[error("{0}")]
    DuplicateComponentFlavor(String),
    /// IPA's `DuplicateDeviceID`.
    #[error("{0}")]
    DuplicateDeviceId(String),
    /// IPA's `UnSupportedConfigByMstflintPackage`.
    #[error("{0}")]
    UnsupportedByMstconfig(String),
    /// IPA's `UnSupportedConfigByFW`.
    #[error("{0}")]
    UnsupportedByFirmware(String),
}

#[cfg(test)]
mod tests;
