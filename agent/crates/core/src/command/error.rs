//! Typed command errors. Each kind has the error class name, HTTP-ish code and
//! fixed summary message that IPA uses (`ironic_python_agent/errors.py`);
//! Ironic shows `details` (else `message`) in the node's `last_error`.

use serde::ser::SerializeMap;
use serde::Serialize;

/// The error classes the agent reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// A clean step failed.
    Cleaning,
    /// A deploy step failed.
    Deployment,
    /// A service step failed.
    Servicing,
    /// Wrong or missing command parameters.
    InvalidCommandParams,
    /// Unexpected failure inside a command.
    CommandExecution,
    /// Erasing block devices failed.
    BlockDeviceErase,
    /// A device may not be touched (mounted, not allowed, holds the system).
    ProtectedDevice,
    /// The step or method is not implemented by this agent.
    IncompatibleHardwareMethod,
    /// The conductor's hardware manager versions do not match ours.
    VersionMismatch,
    /// The image checksum did not match.
    ImageChecksum,
    /// Downloading the image failed.
    ImageDownload,
    /// Writing the image failed.
    ImageWrite,
    /// A sync command did not finish within the conductor's command timeout.
    CommandTimeout,
    /// The image fails a security check (format not permitted, not what the
    /// conductor said, a BIOS boot loader install the conductor disabled).
    InvalidImage,
    /// Building or removing software RAID failed (IPA's `SoftwareRAIDError`).
    SoftwareRaid,
    /// A hardware manager an operator added is unusable (IPA's
    /// `HardwareManagerConfigurationError`).
    HardwareManagerConfiguration,
    /// A container step's image is not in `[container]allowed_containers`
    /// (IPA's `ContainerNotPermittedError`).
    ContainerNotPermitted,
    /// The NVIDIA NIC firmware classes of IPA 13
    /// (`hardware_managers/nvidia/nvidia_fw_update.py`).
    NicFirmware(NicFirmwareError),
}

/// IPA 13's NVIDIA NIC firmware error classes. They define only a
/// `_msg_fmt`, which IPA's `RESTError` does not use, so their `message` is
/// `RESTError`'s own, "An error occurred".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NicFirmwareError {
    /// `InvalidFirmwareImageConfig`.
    InvalidImageConfig,
    /// `InvalidFirmwareSettingsConfig`.
    InvalidSettingsConfig,
    /// `MismatchChecksumError`.
    MismatchChecksum,
    /// `MismatchComponentFlavor`.
    MismatchComponentFlavor,
    /// `MismatchFWVersion`.
    MismatchFwVersion,
    /// `DuplicateComponentFlavor`.
    DuplicateComponentFlavor,
    /// `DuplicateDeviceID`.
    DuplicateDeviceId,
    /// `UnSupportedConfigByMstflintPackage`.
    UnsupportedByMstconfig,
    /// `UnSupportedConfigByFW`.
    UnsupportedByFirmware,
    /// `InvalidURLScheme`.
    InvalidUrlScheme,
}

impl NicFirmwareError {
    /// IPA's class name.
    pub fn type_name(self) -> &'static str {
        match self {
            Self::InvalidImageConfig => "InvalidFirmwareImageConfig",
            Self::InvalidSettingsConfig => "InvalidFirmwareSettingsConfig",
            Self::MismatchChecksum => "MismatchChecksumError",
            Self::MismatchComponentFlavor => "MismatchComponentFlavor",
            Self::MismatchFwVersion => "MismatchFWVersion",
            Self::DuplicateComponentFlavor => "DuplicateComponentFlavor",
            Self::DuplicateDeviceId => "DuplicateDeviceID",
            Self::UnsupportedByMstconfig => "UnSupportedConfigByMstflintPackage",
            Self::UnsupportedByFirmware => "UnSupportedConfigByFW",
            Self::InvalidUrlScheme => "InvalidURLScheme",
        }
    }
}

impl ErrorKind {
    /// IPA's error class name, sent as `type`.
    pub fn type_name(self) -> &'static str {
        match self {
            Self::Cleaning => "CleaningError",
            Self::Deployment => "DeploymentError",
            Self::Servicing => "ServicingError",
            Self::InvalidCommandParams => "InvalidCommandParamsError",
            Self::CommandExecution => "CommandExecutionError",
            Self::BlockDeviceErase => "BlockDeviceEraseError",
            Self::ProtectedDevice => "ProtectedDeviceError",
            Self::IncompatibleHardwareMethod => "IncompatibleHardwareMethodError",
            Self::VersionMismatch => "VersionMismatch",
            Self::ImageChecksum => "ImageChecksumError",
            Self::ImageDownload => "ImageDownloadError",
            Self::ImageWrite => "ImageWriteError",
            Self::CommandTimeout => "CommandTimeoutError",
            Self::InvalidImage => "InvalidImage",
            Self::SoftwareRaid => "SoftwareRAIDError",
            Self::HardwareManagerConfiguration => "HardwareManagerConfigurationError",
            Self::ContainerNotPermitted => "ContainerNotPermittedError",
            Self::NicFirmware(e) => e.type_name(),
        }
    }

    /// The fixed summary, sent as `message`.
    pub fn message(self) -> &'static str {
        match self {
            Self::Cleaning => "Clean step failed",
            Self::Deployment => "Deploy step failed",
            Self::Servicing => "Service step failed",
            Self::InvalidCommandParams => "Invalid command parameters",
            Self::CommandExecution => "Command execution failed",
            Self::BlockDeviceErase => "Error erasing block device",
            Self::ProtectedDevice => "Protected device located, refusing to touch it",
            Self::IncompatibleHardwareMethod => "Method not supported by this agent",
            Self::VersionMismatch => "Hardware managers version mismatch",
            Self::ImageChecksum => "Image checksum mismatch",
            Self::ImageDownload => "Error downloading image",
            Self::ImageWrite => "Error writing image to device",
            Self::CommandTimeout => "Command did not finish in time",
            Self::InvalidImage => "The provided image is not valid for use",
            Self::SoftwareRaid => "Software RAID caused unknown error",
            Self::HardwareManagerConfiguration => "Hardware manager configuration error",
            Self::ContainerNotPermitted => "Container image not permitted",
            Self::NicFirmware(_) => "An error occurred",
        }
    }

    /// HTTP-ish status code, sent as `code`.
    pub fn code(self) -> u16 {
        match self {
            Self::InvalidCommandParams => 400,
            Self::VersionMismatch => 409,
            _ => 500,
        }
    }
}

/// A command failure: a kind plus the specifics (`details`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}: {details}", kind.message())]
pub struct CommandError {
    /// Error class.
    pub kind: ErrorKind,
    /// What exactly went wrong, naming the input and the reason.
    pub details: String,
}

impl CommandError {
    /// A new error of `kind` with `details`.
    pub fn new(kind: ErrorKind, details: impl Into<String>) -> Self {
        Self {
            kind,
            details: details.into(),
        }
    }

    /// Wraps an internal error chain, printing every cause.
    pub fn from_anyhow(kind: ErrorKind, err: &anyhow::Error) -> Self {
        Self::new(kind, format!("{err:#}"))
    }
}

impl Serialize for CommandError {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(4))?;
        m.serialize_entry("type", self.kind.type_name())?;
        m.serialize_entry("code", &self.kind.code())?;
        m.serialize_entry("message", self.kind.message())?;
        m.serialize_entry("details", &self.details)?;
        m.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serialises_as_ironic_expects() {
        let e = CommandError::new(ErrorKind::Cleaning, "Failed to erase /dev/sdb: busy");
        let v = serde_json::to_value(&e).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"type": "CleaningError", "code": 500,
                "message": "Clean step failed", "details": "Failed to erase /dev/sdb: busy"})
        );
        assert_eq!(
            e.to_string(),
            "Clean step failed: Failed to erase /dev/sdb: busy"
        );
    }
}
