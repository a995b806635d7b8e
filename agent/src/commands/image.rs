//! Image commands: `standby.prepare_image` and the `write_image` deploy
//! step, both running the streaming pipeline of [`crate::image`] on the
//! target device, with progress visible in the command list while running;
//! then the partition check and the config drive ([`crate::configdrive`]).
//! Partition images go to [`super::partition_image`].

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::{json, Value};

use super::params::{ParamsError, PrepareImage, WriteImageArgs};
use super::steps::StepCall;
use super::{CommandError, ErrorKind, Outcome};
use crate::config::RunMode;
use crate::configdrive::{self, ConfigDriveError};
use crate::disk::WritePolicy;
use crate::image::fetch::HttpOptions;
use crate::image::policy::IPA_DEFAULT_PERMITTED;
use crate::image::progress::Progress;
use crate::image::{info, FormatPolicy, ImageError};
use crate::state::AgentState;

/// The IPA error class of an image write failure, for `command_error`.
pub fn error_kind(e: &ImageError) -> ErrorKind {
    match e {
        ImageError::InvalidParams(_) => ErrorKind::InvalidCommandParams,
        ImageError::Refused(_) => ErrorKind::ProtectedDevice,
        ImageError::HttpStatus { .. }
        | ImageError::Download { .. }
        | ImageError::TotalTimeout { .. }
        | ImageError::ChecksumFile { .. } => ErrorKind::ImageDownload,
        ImageError::ChecksumMismatch { .. } => ErrorKind::ImageChecksum,
        ImageError::NotPermitted { .. } => ErrorKind::InvalidImage,
        ImageError::Corrupt { .. }
        | ImageError::Unsupported { .. }
        | ImageError::TooLarge { .. }
        | ImageError::Write { .. } => ErrorKind::ImageWrite,
    }
}

pub(crate) fn image_error(e: ImageError) -> CommandError {
    CommandError::new(error_kind(&e), e.to_string())
}

pub(crate) fn crashed(what: &str, e: tokio::task::JoinError) -> CommandError {
    CommandError::new(ErrorKind::ImageWrite, format!("{what} crashed: {e}"))
}

fn configdrive_error(e: ConfigDriveError) -> CommandError {
    let kind = match e {
        ConfigDriveError::Invalid(_) | ConfigDriveError::TooLarge { .. } => {
            ErrorKind::InvalidCommandParams
        }
        ConfigDriveError::Download { .. } => ErrorKind::ImageDownload,
        ConfigDriveError::Place { .. } => ErrorKind::Deployment,
    };
    CommandError::new(kind, e.to_string())
}

/// After a verified whole-disk write: IPA's "at least one partition" check,
/// then the config drive (PROTOCOL.md §5.5, §6.2).
fn finish_whole_disk(device: &Path, configdrive: Option<&[u8]>) -> Result<(), CommandError> {
    let parts = configdrive::check_partitioned(device)
        .map_err(|e| CommandError::new(ErrorKind::Deployment, e.to_string()))?;
    tracing::info!(device = %device.display(), partitions = parts, "image partition table found");
    if let Some(data) = configdrive {
        let placed = configdrive::write(device, data).map_err(configdrive_error)?;
        tracing::info!(device = %device.display(), partition = placed.part.number,
            reused = placed.reused, label = ?placed.label, "config drive written");
        // CoreOS-like images get the config drive's Ignition config in
        // their boot filesystem (PROTOCOL.md §6.3).
        crate::ignition::from_config_drive(device, data)
            .map_err(|e| CommandError::new(ErrorKind::Deployment, format!("Ignition: {e}")))?;
    }
    Ok(())
}

pub(crate) fn http_options(state: &AgentState) -> HttpOptions {
    let c = &state.config;
    HttpOptions {
        insecure: c.insecure,
        cafile: c.cafile.clone(),
        client_certificate: c.client_certificate(),
        total_timeout: c.image_download_max_duration,
        stall_timeout: c.image_download_connection_timeout,
        retries: c.image_download_connection_retries,
        retry_interval: c.image_download_connection_retry_interval,
        ..HttpOptions::default()
    }
}

/// The conductor's deep image inspection settings from its lookup answer
/// (IPA's defaults before any lookup).
pub(crate) fn format_policy(state: &AgentState, disk_format: Option<&str>) -> FormatPolicy {
    let c = state.lookup_config();
    let permitted = c.as_ref().map_or_else(
        || IPA_DEFAULT_PERMITTED.map(String::from).to_vec(),
        |c| c.permitted_image_formats.clone(),
    );
    let deep = c.as_ref().is_none_or(|c| c.deep_image_inspection);
    FormatPolicy::from_conductor(deep, &permitted, disk_format)
}

fn md5_allowed(state: &AgentState) -> bool {
    state.lookup_config().is_some_and(|c| c.md5_allowed)
}

/// Parameter check of `standby.prepare_image` (HTTP 400 on failure).
pub fn validate_prepare_image(params: &Value) -> Result<(), ParamsError> {
    let p: PrepareImage = super::params::parse(params)?;
    let parsed = info::parse(&p.image_info, HttpOptions::default(), true)
        .map_err(|e| ParamsError::at("image_info", e.to_string()))?;
    if parsed.partition {
        super::partition_image::layout_params(&p.image_info)
            .map_err(|e| ParamsError::at("image_info", e.details))?;
    }
    Ok(())
}

/// `standby.prepare_image` (async).
pub async fn prepare_image(state: Arc<AgentState>, params: Value) -> Outcome {
    let p: PrepareImage = match super::params::for_command(&params) {
        Ok(p) => p,
        Err(e) => return Outcome::Failed(e),
    };
    let node = state.node();
    write(
        state,
        p.image_info,
        p.configdrive.unwrap_or(Value::Null),
        node,
    )
    .await
    .into()
}

/// The `write_image` deploy step.
pub async fn write_image_step(
    state: Arc<AgentState>,
    call: StepCall,
) -> Result<Value, CommandError> {
    let args: WriteImageArgs = super::params::for_command(&Value::Object(call.args))?;
    let configdrive = args
        .configdrive
        .or_else(|| args.image_info.get("configdrive").cloned())
        .unwrap_or(Value::Null);
    let node = Some(call.node)
        .filter(Value::is_object)
        .or_else(|| state.node());
    write(state, args.image_info, configdrive, node).await
}

async fn write(
    state: Arc<AgentState>,
    image_info: Value,
    configdrive: Value,
    node: Option<Value>,
) -> Result<Value, CommandError> {
    let parsed = parse_image_info(&state, &image_info)?;
    // A partition image's layout keys are checked before anything is
    // downloaded or touched.
    let layout = if parsed.partition {
        Some(super::partition_image::layout_params(&image_info)?)
    } else {
        None
    };
    // The config drive is decoded (and downloaded) before the disk is
    // touched, so a bad one fails the step with the disk unchanged.
    let http = http_options(&state);
    let configdrive =
        tokio::task::spawn_blocking(move || configdrive::source::load(&configdrive, &http))
            .await
            .map_err(|e| crashed("config drive decoder", e))?
            .map_err(configdrive_error)?;
    if let Some(layout) = layout {
        return super::partition_image::write(state, parsed, layout, configdrive, node).await;
    }
    write_whole_disk(state, parsed, move |dev| {
        finish_whole_disk(dev, configdrive.as_deref())
    })
    .await
}

/// Validates `image_info` with the agent's HTTP settings.
pub(crate) fn parse_image_info(
    state: &AgentState,
    image_info: &Value,
) -> Result<info::ImageInfo, CommandError> {
    info::parse(image_info, http_options(state), md5_allowed(state)).map_err(image_error)
}

/// Writes the whole-disk image `parsed` to the chosen device with progress
/// in the command list, runs `finish` on the device after the verified
/// write (partition check, config drive, Ignition), and records the
/// partition UUIDs. Returns IPA's `prepare_image` result.
pub(crate) async fn write_whole_disk<F>(
    state: Arc<AgentState>,
    parsed: info::ImageInfo,
    finish: F,
) -> Result<Value, CommandError>
where
    F: FnOnce(&Path) -> Result<(), CommandError> + Send + 'static,
{
    if parsed.partition {
        return Err(CommandError::new(
            ErrorKind::InvalidCommandParams,
            format!(
                "image {} is a partition image (image_type partition); this step writes whole-disk images only",
                parsed.id
            ),
        ));
    }
    let device = choose_device(&state)?;
    let policy = WritePolicy::from_config(&state.config);
    let progress = Arc::new(Progress::default());
    state.commands.set_progress(Some(progress.clone()));
    if let Some(hint) = parsed.disk_format.as_deref() {
        tracing::info!(image = %parsed.id, disk_format = hint, "conductor's disk_format (the image bytes decide)");
    }
    // What an earlier write reported no longer describes the disk.
    state.set_partition_uuids(Some(json!({})));
    let mut req = parsed.request.clone();
    req.formats = format_policy(&state, parsed.disk_format.as_deref());
    let (dev, p) = (device.clone(), progress.clone());
    let result = tokio::task::spawn_blocking(move || {
        crate::image::write_image(&req, &dev, &policy, &p).map_err(image_error)?;
        finish(&dev)?;
        whole_disk_partition_uuids(&dev)
    })
    .await;
    state.commands.set_progress(None);
    let uuids = result.map_err(|e| crashed("image writer", e))??;
    let root_uuid = uuids["root uuid"].as_str().unwrap_or_default().to_string();
    state.set_partition_uuids(Some(uuids));
    Ok(json!({
        "result": format!(
            "prepare_image: image ({}) written to device {} root_uuid={root_uuid}",
            parsed.id,
            device.display()
        )
    }))
}

/// `standby.get_partition_uuids` for a whole-disk image (PROTOCOL.md §5.7), read
/// from the device after everything was written: `root uuid` is the MBR
/// disk signature (bytes 440..444, little-endian, `0x%08x`, IPA's
/// `hexdump -s 440 -n 4 -e '"0x%08x"'`; `0x00000000` on GPT-only images).
/// That is the only key IPA reports for whole-disk images and the only one
/// Ironic 39 reads for them (`agent.py` `prepare_instance_boot` stores it as
/// `root_uuid_or_disk_id` and passes it to `install_bootloader`; the EFI and
/// PReP keys are read for partition images only).
pub fn whole_disk_partition_uuids(device: &Path) -> Result<Value, CommandError> {
    use std::os::unix::fs::FileExt;
    let fail = |what: &str, e: std::io::Error| {
        CommandError::new(
            ErrorKind::ImageWrite,
            format!("{what} {}: {e}", device.display()),
        )
    };
    let f = std::fs::File::open(device).map_err(|e| fail("opening", e))?;
    let mut sig = [0u8; 4];
    f.read_exact_at(&mut sig, 440)
        .map_err(|e| fail("reading the disk identifier of", e))?;
    Ok(json!({"root uuid": format!("0x{:08x}", u32::from_le_bytes(sig))}))
}

/// The disk to write, never one the node's `skip_block_devices` protect
/// ([`crate::selection`]): in the ramdisk the disk chosen by the node's
/// root-device hints (fail closed when hints match nothing), else the
/// smallest disk of at least 4 GiB. In host mode the same choice among
/// the allowed devices; a single allowed device is the target whatever the
/// hints say (unless it is protected).
pub(crate) fn choose_device(state: &AgentState) -> Result<PathBuf, CommandError> {
    let fail = |msg: String| CommandError::new(ErrorKind::Deployment, msg);
    let node = state.node();
    let node = node.as_ref();
    let skip = node
        .map(crate::selection::SkipList::from_node)
        .transpose()
        .map_err(|e| fail(e.to_string()))?
        .unwrap_or_default();
    let hints = node.and_then(crate::hints::hints_from_node);
    let disks: Vec<crate::inventory::Disk> = if state.config.mode == RunMode::Host {
        let allowed = &state.config.allowed_devices;
        if allowed.is_empty() {
            return Err(fail(
                "host mode writes images only to an --allow-device; none is allowed".into(),
            ));
        }
        // Named as allowed, so the choice is one of the given paths.
        let disks: Vec<crate::inventory::Disk> = allowed
            .iter()
            .zip(crate::selection::gather::describe(allowed))
            .map(|(path, d)| crate::inventory::Disk {
                name: path.display().to_string(),
                ..d
            })
            .collect();
        if let [one] = allowed.as_slice() {
            return match protected(&skip, &disks).first() {
                Some(r) => Err(fail(format!(
                    "{} is the only allowed device, and it is {}",
                    one.display(),
                    r.reason
                ))),
                None => Ok(one.clone()),
            };
        }
        disks
    } else {
        // The BMC plays no part in choosing a disk: not probed.
        let opts = crate::inventory::Options {
            skip_bmc: true,
            ..crate::inventory::Options::live(None)
        };
        crate::inventory::collect(&opts)
            .map_err(|e| fail(format!("reading the hardware inventory: {e:#}")))?
            .disks
    };
    let choice = crate::hints::root_device(&disks, hints.as_ref(), &protected(&skip, &disks))
        .map_err(|e| fail(e.to_string()))?;
    Ok(PathBuf::from(&choice.disk.name))
}

/// The disks `skip` protects among `disks`, as rejections of the root-device
/// choice.
fn protected(
    skip: &crate::selection::SkipList,
    disks: &[crate::inventory::Disk],
) -> Vec<crate::hints::Rejection> {
    if skip.is_empty() {
        return Vec::new();
    }
    let candidates = crate::selection::candidates_named(disks);
    crate::selection::Protection::decide(skip, &candidates)
        .protected()
        .iter()
        .map(|(p, why)| crate::hints::Rejection {
            name: p.display().to_string(),
            reason: format!("protected: {why}"),
        })
        .collect()
}
