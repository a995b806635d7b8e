//! `standby.prepare_image` and the `write_image` step for partition images
//! (`image_type: partition`, PROTOCOL.md §5.6): IPA's boot mode and table
//! type for the node, the layout ([`agent_contents::partimage`]) written to the
//! chosen disk, the image streamed into the root partition through the same
//! fail-closed pipeline as whole disks, and the partition UUIDs recorded
//! for `standby.get_partition_uuids`. Any failure after the table was
//! written wipes it.

use std::path::Path;
use std::sync::Arc;

use serde_json::{json, Value};

use super::dispatch::context::format_policy;
use super::image_errors::{crashed, image_error};
use super::target::choose_device;
use super::{CommandError, ErrorKind};
use crate::state::AgentState;
use agent_contents::image::info::ImageInfo;
use agent_contents::image::progress::Progress;
use agent_contents::partimage::layout::{self, Role};
use agent_contents::partimage::params::{self, BootMode};
use agent_contents::partimage::{self as pi, PartImageError};
use agent_devices::disk::{Device, WritePolicy};
use ironic_types::node::Node;

const MIB: u64 = 1 << 20;

fn prepare_error(e: PartImageError) -> CommandError {
    let kind = match e {
        PartImageError::Layout(_) => ErrorKind::InvalidCommandParams,
        PartImageError::Prepare { .. } => ErrorKind::Deployment,
    };
    CommandError::new(kind, e.to_string())
}

/// The layout keys of a partition image's `image_info`; a bad one is
/// `InvalidCommandParamsError` naming the key.
pub(crate) fn layout_params(image_info: &Value) -> Result<params::Params, CommandError> {
    let obj = image_info.as_object().ok_or_else(|| {
        CommandError::new(
            ErrorKind::InvalidCommandParams,
            "image_info must be an object",
        )
    })?;
    params::from_image_info(obj)
        .map_err(|e| CommandError::new(ErrorKind::InvalidCommandParams, e.to_string()))
}

/// The boot partitions' sizes of the agent's configuration (`[disk_utils]`
/// of its files) laid over `params`.
fn with_configured_sizes(
    mut params: params::Params,
    config: &agent_base::config::Config,
) -> params::Params {
    params.esp_mb = config.efi_system_partition_mb;
    params.bios_boot_mb = config.bios_boot_partition_mb;
    params
}

/// Deploys the partition image `parsed` with the layout keys `params` and
/// the decoded config drive. Returns IPA's `prepare_image` result.
pub(crate) async fn write(
    state: Arc<AgentState>,
    parsed: ImageInfo,
    params: params::Params,
    configdrive: Option<Vec<u8>>,
    node: Option<Node>,
) -> Result<Value, CommandError> {
    let device = choose_device(&state, node.as_ref()).await?;
    let params = with_configured_sizes(params, &state.config);
    let ramdisk_uefi = Path::new("/sys/firmware/efi").is_dir();
    let mode = params::boot_mode(node.as_ref(), &params, ramdisk_uefi);
    let label = params::label(node.as_ref(), &params, mode);
    let cd_mb = configdrive
        .as_ref()
        .map_or(0, |d| (d.len() as u64).div_ceil(MIB));
    // IPA lays out for the machine the agent runs on (`get_cpus()`).
    let cpu_arch = agent_devices::inventory::cpu::read(Path::new("/"))
        .map(|c| c.architecture)
        .unwrap_or_else(|_| std::env::consts::ARCH.to_string());
    let plan = layout::plan(&params, mode, label, cd_mb, &cpu_arch);
    tracing::info!(image = %parsed.id, device = %device.display(), ?mode, ?label,
        partitions = ?plan.parts.iter().map(|p| (p.number, p.role.key(), p.len / MIB)).collect::<Vec<_>>(),
        preserve_ephemeral = params.preserve_ephemeral, "partition image layout");
    let policy = WritePolicy::from_config(&state.config);
    let progress = Arc::new(Progress::default());
    state.commands.set_progress(Some(progress.clone()));
    state.set_partition_uuids(Some(json!({})));
    let mut req = parsed.request.clone();
    req.formats = format_policy(&state, parsed.disk_format.as_deref());
    let (dev, p) = (device.clone(), progress.clone());
    let result = tokio::task::spawn_blocking(move || -> Result<Value, CommandError> {
        // The disk itself is checked before its table is written; the
        // image writer checks the root partition again.
        policy
            .check(&Device::open(&dev).map_err(|e| image_error(e.into()))?)
            .map_err(|e| image_error(e.into()))?;
        let prepared = pi::prepare(
            &dev,
            &plan,
            params.ephemeral_format.as_deref(),
            params.preserve_ephemeral,
            configdrive.as_deref(),
        )
        .map_err(prepare_error)?;
        let root = prepared
            .path(Role::Root)
            .map(Path::to_path_buf)
            .ok_or_else(|| {
                CommandError::new(ErrorKind::Deployment, "no root partition (internal)")
            })?;
        if let Err(e) = agent_contents::image::write_image(&req, &root, &policy, &p) {
            pi::wipe_after_failure(&prepared);
            return Err(image_error(e));
        }
        Ok(pi::uuids(&prepared))
    })
    .await;
    state.commands.set_progress(None);
    let uuids = result.map_err(|e| crashed("partition image writer", e))??;
    let text = |k: &str| uuids[k].as_str().unwrap_or_default().to_string();
    let (root_uuid, esp_uuid) = (text("root uuid"), text("efi system partition uuid"));
    tracing::info!(device = %device.display(), root_uuid, esp_uuid, "partition image written");
    state.set_partition_uuids(Some(uuids));
    // IPA's `_message_format`.
    let mut msg = format!(
        "prepare_image: image ({}) written to device {} root_uuid={root_uuid}",
        parsed.id,
        device.display()
    );
    if mode == BootMode::Uefi && !esp_uuid.is_empty() {
        msg.push_str(&format!(" efi_system_partition_uuid={esp_uuid}"));
    }
    Ok(json!({ "result": msg }))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const SHA: &str = "1b265f9dbb875c7efe7a36aede88e97fc9606beb54674bdc997b405a99bc9d31";

    #[test]
    fn a_bad_layout_key_is_one_invalid_params_error_naming_it() {
        let info = json!({"id": "p.img", "urls": ["http://h/p.img"], "checksum": SHA,
            "image_type": "partition", "root_mb": 1024, "swap_mb": "lots"});
        let e = layout_params(&info).unwrap_err();
        assert_eq!(e.kind, ErrorKind::InvalidCommandParams);
        assert!(
            e.details
                .starts_with("image_info.swap_mb must be a non-negative integer"),
            "{}",
            e.details
        );
        // A direct prepare_image is refused before it runs (HTTP 400).
        let ctx = crate::commands::dispatch::context::Context::default();
        let e = super::super::image::parse_prepare_image(json!({"image_info": info}), &ctx)
            .unwrap_err()
            .to_string();
        assert!(e.contains("image_info.swap_mb"), "{e}");
        let ok = json!({"image_info": {"id": "p.img", "urls": ["http://h/p.img"],
            "checksum": SHA, "image_type": "partition", "root_mb": 1024}});
        let parsed = super::super::image::parse_prepare_image(ok, &ctx).unwrap();
        assert!(parsed.is_ok(), "{parsed:?}");
    }
}
