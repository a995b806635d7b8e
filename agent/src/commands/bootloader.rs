//! `image.install_bootloader` (spec §5.8), called by Ironic after a UEFI
//! whole-disk deploy. Host mode never touches this machine's NVRAM: the
//! command succeeds and says so. In the ramdisk, BIOS (and whole-disk images
//! without a root UUID) need nothing; UEFI boot entries are not written yet,
//! so a UEFI request fails unless `ignore_bootloader_failure` is set.

use std::sync::Arc;

use serde_json::Value;

use super::{CommandError, ErrorKind, Outcome};
use crate::config::RunMode;
use crate::state::AgentState;

/// `image.install_bootloader` (async).
pub async fn install_bootloader(state: Arc<AgentState>, params: Value) -> Outcome {
    let mode = params["target_boot_mode"].as_str().unwrap_or("bios");
    let root_uuid = params["root_uuid"].as_str().unwrap_or_default();
    let ignore = params["ignore_bootloader_failure"]
        .as_bool()
        .unwrap_or(false);
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
    let err = CommandError::new(
        ErrorKind::IncompatibleHardwareMethod,
        "creating UEFI boot entries is not implemented by this agent yet",
    );
    if ignore {
        tracing::warn!("install_bootloader failed but failures are ignored: {err:?}");
        return Outcome::Done(Value::Null);
    }
    Outcome::Failed(err)
}
