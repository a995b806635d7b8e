//! Image commands: `standby.prepare_image` and the `write_image` deploy
//! step, both running the streaming pipeline of [`crate::image`] on the
//! target device, with progress visible in the command list while running.

use std::path::PathBuf;
use std::sync::Arc;

use serde_json::{json, Value};

use super::steps::StepCall;
use super::{CommandError, ErrorKind, Outcome};
use crate::config::RunMode;
use crate::disk::WritePolicy;
use crate::image::fetch::HttpOptions;
use crate::image::progress::Progress;
use crate::image::{info, ImageError};
use crate::state::AgentState;

fn image_error(e: ImageError) -> CommandError {
    CommandError::new(e.kind(), e.to_string())
}

fn http_options(state: &AgentState) -> HttpOptions {
    HttpOptions {
        insecure: state.config.insecure,
        cafile: state.config.cafile.clone(),
        total_timeout: state.config.image_download_max_duration,
        ..HttpOptions::default()
    }
}

fn md5_allowed(state: &AgentState) -> bool {
    state.lookup_config().is_some_and(|c| c.md5_allowed)
}

/// Parameter check of `standby.prepare_image` (HTTP 400 on failure).
pub fn validate_prepare_image(params: &Value) -> Result<(), String> {
    let image_info = params.get("image_info").ok_or("image_info is missing")?;
    info::parse(image_info, HttpOptions::default(), true)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// `standby.prepare_image` (async).
pub async fn prepare_image(state: Arc<AgentState>, params: Value) -> Outcome {
    let image_info = params.get("image_info").cloned().unwrap_or(Value::Null);
    let configdrive = params.get("configdrive").cloned().unwrap_or(Value::Null);
    write(state, image_info, configdrive).await.into()
}

/// The `write_image` deploy step.
pub async fn write_image_step(
    state: Arc<AgentState>,
    call: StepCall,
) -> Result<Value, CommandError> {
    let image_info = call.args.get("image_info").cloned().unwrap_or(Value::Null);
    let configdrive = call
        .args
        .get("configdrive")
        .filter(|v| !v.is_null())
        .or_else(|| image_info.get("configdrive"))
        .cloned()
        .unwrap_or(Value::Null);
    write(state, image_info, configdrive).await
}

async fn write(
    state: Arc<AgentState>,
    image_info: Value,
    configdrive: Value,
) -> Result<Value, CommandError> {
    let parsed =
        info::parse(&image_info, http_options(&state), md5_allowed(&state)).map_err(image_error)?;
    if !configdrive.is_null() && configdrive != json!("") {
        return Err(CommandError::new(
            ErrorKind::InvalidCommandParams,
            "a config drive was given, but writing config drives is not supported by this agent yet",
        ));
    }
    let device = choose_device(&state)?;
    let policy = WritePolicy::from_config(&state.config);
    let progress = Arc::new(Progress::default());
    state.commands.set_progress(Some(progress.clone()));
    if let Some(hint) = parsed.disk_format.as_deref() {
        tracing::info!(image = %parsed.id, disk_format = hint, "conductor's disk_format (the image bytes decide)");
    }
    let (req, dev, p) = (parsed.request.clone(), device.clone(), progress.clone());
    let result =
        tokio::task::spawn_blocking(move || crate::image::write_image(&req, &dev, &policy, &p))
            .await;
    state.commands.set_progress(None);
    let report = match result {
        Ok(r) => r.map_err(image_error)?,
        Err(e) => {
            return Err(CommandError::new(
                ErrorKind::ImageWrite,
                format!("image writer crashed: {e}"),
            ))
        }
    };
    let root_uuid = format!("0x{:08x}", report.mbr_signature);
    state.set_partition_uuids(Some(json!({"root uuid": root_uuid})));
    Ok(json!({
        "result": format!(
            "prepare_image: image ({}) written to device {} root_uuid={root_uuid}",
            parsed.id,
            device.display()
        )
    }))
}

/// The disk to write: in host mode the one allowed device; in the ramdisk
/// the disk chosen by the node's root-device hints (fail closed when hints
/// match nothing), else the smallest disk of at least 4 GiB.
fn choose_device(state: &AgentState) -> Result<PathBuf, CommandError> {
    let fail = |msg: String| CommandError::new(ErrorKind::Deployment, msg);
    if state.config.mode == RunMode::Host {
        return match state.config.allowed_devices.as_slice() {
            [one] => Ok(one.clone()),
            other => Err(fail(format!(
                "host mode writes images only to a single --allow-device; {} are allowed",
                other.len()
            ))),
        };
    }
    let hints = state
        .node()
        .as_ref()
        .and_then(crate::hints::hints_from_node);
    let inventory = crate::inventory::collect(&crate::inventory::Options::live(None))
        .map_err(|e| fail(format!("reading the hardware inventory: {e:#}")))?;
    let choice =
        crate::hints::root_device(&inventory, hints.as_ref()).map_err(|e| fail(e.to_string()))?;
    tracing::info!(device = %choice.disk.name, reason = %choice.reason, "root device chosen");
    for r in &choice.rejected {
        tracing::info!(device = %r.name, reason = %r.reason, "not the root device");
    }
    Ok(PathBuf::from(&choice.disk.name))
}
