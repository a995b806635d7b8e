//! Image commands: `standby.prepare_image` and the `write_image` deploy
//! step, both running the streaming pipeline of [`agent_contents::image`] on the
//! target device, with progress visible in the command list while running;
//! then the partition check and the config drive ([`agent_contents::configdrive`]).
//! Partition images go to [`super::partition_image`].

use std::path::Path;
use std::sync::Arc;

use serde_json::{json, Value};

use super::dispatch::context::{format_policy, http_options, md5_allowed, Context};
use super::dispatch::params::{ParamsError, PrepareImage, WriteImageArgs};
use super::dispatch::step_call::{PreparedStep, RawCall};
use super::image_errors::{crashed, image_error};
use super::target::choose_device;
use super::{CommandError, ErrorKind, Outcome};
use crate::state::AgentState;
use agent_contents::configdrive::{self, ConfigDriveError};
use agent_contents::image::fetch::HttpOptions;
use agent_contents::image::info;
use agent_contents::image::progress::Progress;
use agent_devices::disk::WritePolicy;
use ironic_types::node::Node;

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
        agent_contents::ignition::from_config_drive(device, data)
            .map_err(|e| CommandError::new(ErrorKind::Deployment, format!("Ignition: {e}")))?;
    }
    Ok(())
}

/// An image write's parameters, checked when the request arrived: the
/// image, a partition image's layout keys, the config drive as given (it
/// is decoded, or downloaded, by the write, before the disk is touched),
/// and the node (sent with the step, else the cached one).
#[derive(Debug)]
pub struct ImageRequest {
    image: info::ImageInfo,
    layout: Option<agent_contents::partimage::params::Params>,
    configdrive: Value,
    node: Option<Node>,
}

/// `standby.prepare_image`: the checked write, or the error its command
/// ends with.
pub(crate) type PrepareImageRequest = Result<ImageRequest, CommandError>;

/// Checks `image_info` with the agent's HTTP settings, and a partition
/// image's layout keys, before anything is downloaded or touched.
fn check_image(
    image_info: &Value,
    configdrive: Value,
    node: Option<Node>,
    ctx: &Context,
) -> Result<ImageRequest, CommandError> {
    let image = info::parse(image_info, ctx.http.clone(), ctx.md5_allowed).map_err(image_error)?;
    let layout = if image.partition {
        Some(super::partition_image::layout_params(image_info)?)
    } else {
        None
    };
    Ok(ImageRequest {
        image,
        layout,
        configdrive,
        node,
    })
}

/// `standby.prepare_image`'s parameters. An `image_info` that is wrong in
/// itself is refused with HTTP 400 (IPA's validator); one the agent's
/// settings refuse (an MD5 checksum the conductor disabled) fails the
/// command, as IPA's download does.
pub(crate) fn parse_prepare_image(
    params: Value,
    ctx: &Context,
) -> Result<PrepareImageRequest, ParamsError> {
    let p: PrepareImage = super::dispatch::params::parse(&params)?;
    let configdrive = p.configdrive.unwrap_or(Value::Null);
    match check_image(&p.image_info, configdrive, ctx.cached_node.clone(), ctx) {
        Ok(r) => Ok(Ok(r)),
        Err(e) => {
            let lenient = Context {
                cached_node: None,
                http: HttpOptions::default(),
                md5_allowed: true,
                ..Context::default()
            };
            match check_image(&p.image_info, Value::Null, None, &lenient) {
                Err(wrong) => Err(ParamsError::at("image_info", wrong.details)),
                Ok(_) => Ok(Err(e)),
            }
        }
    }
}

/// `standby.prepare_image` (async).
pub(crate) async fn prepare_image(state: Arc<AgentState>, request: PrepareImageRequest) -> Outcome {
    match request {
        Ok(r) => write(state, r).await.into(),
        Err(e) => Outcome::Failed(e),
    }
}

/// The `write_image` deploy step's arguments: its image checked as
/// `prepare_image`'s; without a `configdrive` argument, the one in
/// `image_info`.
pub(crate) fn prepare_write_image(
    call: RawCall,
    ctx: &Context,
) -> Result<PreparedStep, CommandError> {
    let args: WriteImageArgs = super::dispatch::params::for_command(&Value::Object(call.args))?;
    let configdrive = args
        .configdrive
        .or_else(|| args.image_info.get("configdrive").cloned())
        .unwrap_or(Value::Null);
    let request = check_image(&args.image_info, configdrive, call.node, ctx)?;
    Ok(Box::new(move |state| Box::pin(write(state, request))))
}

async fn write(state: Arc<AgentState>, request: ImageRequest) -> Result<Value, CommandError> {
    let ImageRequest {
        image,
        layout,
        configdrive,
        node,
    } = request;
    // The config drive is decoded (and downloaded) before the disk is
    // touched, so a bad one fails the step with the disk unchanged.
    let http = http_options(&state);
    let configdrive =
        tokio::task::spawn_blocking(move || configdrive::source::load(&configdrive, &http))
            .await
            .map_err(|e| crashed("config drive decoder", e))?
            .map_err(configdrive_error)?;
    if let Some(layout) = layout {
        return super::partition_image::write(state, image, layout, configdrive, node).await;
    }
    write_whole_disk(state, node.as_ref(), image, move |dev| {
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

/// [`parse_image_info`], an image without checksum accepted (unverified;
/// `install_coreos` only, as coreos-installer's `--insecure`).
pub(crate) fn parse_image_info_unverified(
    state: &AgentState,
    image_info: &Value,
) -> Result<info::ImageInfo, CommandError> {
    info::parse_allowing_unverified(image_info, http_options(state), md5_allowed(state))
        .map_err(image_error)
}

/// Writes the whole-disk image `parsed` to the chosen device with progress
/// in the command list, runs `finish` on the device after the verified
/// write (partition check, config drive, Ignition), and records the
/// partition UUIDs. Returns IPA's `prepare_image` result.
pub(crate) async fn write_whole_disk<F>(
    state: Arc<AgentState>,
    node: Option<&Node>,
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
    let device = choose_device(&state, node).await?;
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
        agent_contents::image::write_image(&req, &dev, &policy, &p).map_err(image_error)?;
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
pub(crate) fn whole_disk_partition_uuids(device: &Path) -> Result<Value, CommandError> {
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
