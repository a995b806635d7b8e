//! `image.install_bootloader` (PROTOCOL.md §5.8), called by Ironic after a UEFI
//! whole-disk deploy. Host mode never touches this machine's NVRAM: the
//! command succeeds and says so. In the ramdisk, BIOS whole-disk images
//! need nothing; for UEFI the loaders on the image's EFI system partition
//! get boot entries written natively into efivarfs ([`crate::uefi`]).
//! Failures fail the command unless `ignore_bootloader_failure` is set.

use std::sync::Arc;

use serde_json::Value;

use super::params::InstallBootloader;
use super::{CommandError, ErrorKind, Outcome};
use crate::config::RunMode;
use crate::state::AgentState;

/// `image.install_bootloader` (async).
pub async fn install_bootloader(state: Arc<AgentState>, params: Value) -> Outcome {
    let p: InstallBootloader = match super::params::for_command(&params) {
        Ok(p) => p,
        Err(e) => return Outcome::Failed(e),
    };
    let mode = p.target_boot_mode.as_deref().unwrap_or("bios");
    let root_uuid = p.root_uuid.as_deref().unwrap_or_default();
    let ignore = p.ignore_bootloader_failure.unwrap_or(false);
    if state.config.mode == RunMode::Host {
        tracing::warn!(
            target_boot_mode = mode,
            root_uuid,
            "host mode: this machine's boot entries are not touched"
        );
        return Outcome::Done(Value::Null);
    }
    if mode != "uefi" {
        tracing::info!(
            root_uuid,
            "BIOS boot of a whole-disk image: the image's own boot loader is used"
        );
        return Outcome::Done(Value::Null);
    }
    let efivars = std::path::Path::new(crate::uefi::efivars::EFIVARS);
    let result = match super::image::choose_device(&state) {
        Err(e) => Err(e),
        Ok(_) if !efivars.is_dir() => Err(CommandError::new(
            ErrorKind::CommandExecution,
            "the ramdisk did not boot in UEFI mode (no efivarfs); cannot create boot entries",
        )),
        Ok(device) => tokio::task::spawn_blocking(move || crate::uefi::install(&device, efivars))
            .await
            .map_err(|e| CommandError::new(ErrorKind::CommandExecution, e.to_string()))
            .and_then(|r| {
                r.map_err(|e| CommandError::new(ErrorKind::CommandExecution, e.to_string()))
            })
            .map(|entries| tracing::info!(?entries, "UEFI boot entries created")),
    };
    let Err(err) = result else {
        return Outcome::Done(Value::Null);
    };
    if ignore {
        tracing::warn!("install_bootloader failed but failures are ignored: {err:?}");
        return Outcome::Done(Value::Null);
    }
    Outcome::Failed(err)
}
