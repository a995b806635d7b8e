//! IPA 13's `MellanoxDeviceHardwareManager` (`hardware_managers/mlnx.py`,
//! version 1) as one of the agent's managers: support MAINLINE when an
//! interface under sysfs is on a Mellanox device (PCI vendor `0x15b3`),
//! else not loaded; two steps, the same in cleaning, deployment and
//! servicing: `update_nvidia_nic_firmware_image` and
//! `update_nvidia_nic_firmware_settings` (interface `deploy`, priority 0,
//! a reboot requested after them, not abortable). The handlers are
//! `commands/nicfw.rs`. On a host (`agent serve`), the agent does not
//! touch the machine's NIC firmware: the manager is not loaded there.

use std::ffi::OsString;
use std::path::Path;

use super::{ArgDesc, Manager, ManagerVersion, StepInfo, SUPPORT_MAINLINE, SUPPORT_NONE};
use crate::commands::dispatch::context::Context;
use crate::commands::dispatch::step_call::{PreparedStep, RawCall};
use crate::commands::dispatch::step_kind::StepKind;
use crate::commands::CommandError;
use crate::state::AgentState;
use agent_contents::nicfw::discovery::nic_present;

/// IPA's `HARDWARE_MANAGER_NAME`.
pub(crate) const NAME: &str = "MellanoxDeviceHardwareManager";
/// IPA's `HARDWARE_MANAGER_VERSION`.
pub(crate) const VERSION: &str = "1";
/// The firmware image step.
pub(crate) const IMAGE_STEP: &str = "update_nvidia_nic_firmware_image";
/// The firmware settings step.
pub(crate) const SETTINGS_STEP: &str = "update_nvidia_nic_firmware_settings";

/// The manager, with where its tools are looked for.
#[derive(Debug, Clone)]
pub(crate) struct NvidiaNicManager {
    support: u32,
    search_path: OsString,
}

impl NvidiaNicManager {
    /// The manager of a machine whose sysfs is at `sysfs` (IPA's
    /// `evaluate_hardware_support`), its tools looked for on `search_path`.
    pub(crate) fn detect(sysfs: &Path, search_path: OsString) -> Self {
        let support = if nic_present(sysfs) {
            tracing::debug!("Found Mellanox device");
            SUPPORT_MAINLINE
        } else {
            tracing::debug!("No Mellanox devices found");
            SUPPORT_NONE
        };
        NvidiaNicManager {
            support,
            search_path,
        }
    }

    /// The manager on a host: never loaded.
    pub(crate) fn off() -> Self {
        NvidiaNicManager {
            support: SUPPORT_NONE,
            search_path: OsString::new(),
        }
    }
}

fn step(name: &str, arg: &str, description: &str) -> StepInfo {
    StepInfo {
        step: name.into(),
        priority: 0,
        interface: "deploy".into(),
        reboot_requested: true,
        abortable: false,
        argsinfo: vec![ArgDesc {
            name: arg.into(),
            description: description.into(),
            required: true,
        }],
    }
}

impl Manager for NvidiaNicManager {
    fn name(&self) -> &str {
        NAME
    }

    fn version(&self) -> ManagerVersion {
        ManagerVersion {
            name: NAME.into(),
            version: VERSION.into(),
        }
    }

    fn support(&self) -> u32 {
        self.support
    }

    fn step_names(&self) -> Vec<String> {
        vec![IMAGE_STEP.into(), SETTINGS_STEP.into()]
    }

    /// The same two steps in every phase, as IPA's.
    fn steps(&self, _kind: StepKind, _: &AgentState) -> Result<Vec<StepInfo>, CommandError> {
        Ok(vec![
            step(
                IMAGE_STEP,
                "images",
                "Json blob contains a list of images, where each image contains a map of url: to firmware image (file://, http://), checksum: of the provided image, checksumType: sha256/sha512, componentFlavor: PSID of the nic, version: of the FW",
            ),
            step(
                SETTINGS_STEP,
                "settings",
                "Json blob contains a list of settings per device ID, where each settings contains a map of deviceID: device ID globalConfig: global config function0Config: function 0 config function1Config: function 1 config",
            ),
        ])
    }

    fn prepare(
        &self,
        name: &str,
        _kind: StepKind,
        call: RawCall,
        ctx: &Context,
    ) -> Option<Result<PreparedStep, CommandError>> {
        let path = self.search_path.clone();
        match name {
            IMAGE_STEP => Some(crate::commands::nicfw::prepare_image(call, ctx, path)),
            SETTINGS_STEP => Some(crate::commands::nicfw::prepare_settings(call, path)),
            _ => None,
        }
    }
}

#[cfg(test)]
#[path = "nvidia_tests.rs"]
mod tests;
