//! The `install_coreos` custom deploy step of Metal3/OpenShift (PROTOCOL.md §6.3).
//! Two forms:
//! * **container** (`Config::host_root` set: the agent is OpenShift's
//!   `ironic-agent` container on a CoreOS live system): the live system's
//!   `coreos-installer` run as OpenShift's hardware manager runs it
//!   ([`super::coreos_host`]);
//! * **ramdisk** (and host mode): done natively on top of the whole-disk
//!   pipeline: write the CoreOS image to the root device, then put the
//!   Ignition config, the first-boot stamp and extra kernel arguments into
//!   the image's `boot` filesystem ([`agent_contents::ignition`] describes the
//!   layout). This module.
//!
//! Inputs of the ramdisk form, first found wins:
//! * image: step argument `image_info` (as for `write_image`), else built
//!   from the node's `instance_info` (`image_url`/`image_source`, with
//!   `image_os_hash_algo`+`image_os_hash_value` or `image_checksum`). An
//!   image without any checksum is written unverified, as
//!   `coreos-installer --insecure` does, with a warning naming it. There is
//!   no `--offline` image in the ramdisk (that is the live system's own), so
//!   no image is an error saying so;
//! * Ignition: step argument `ignition` (a JSON object or its text), else
//!   `user_data` of the node's `instance_info.configdrive` when it is a dict
//!   (what OpenShift reads), else the `openstack/latest/user_data` of a
//!   rendered (gzip+base64 or URL) config drive;
//! * kernel arguments: step argument `append_karg` (a list, or one string
//!   split at commas like coreos-installer's `--append-karg`), else the
//!   config drive dict's `meta_data.coreos_append_karg`.
//!
//! * the ramdisk's network (coreos-installer's `--copy-network`): step
//!   argument `copy_network`, else the config drive dict's
//!   `meta_data.coreos_copy_network` (what OpenShift's hardware manager
//!   reads). NetworkManager keyfiles rendered from the record init wrote
//!   after bring-up ([`agent_devices::netconf::record`]) go to the boot
//!   filesystem's `coreos-firstboot-network/`, which CoreOS's initramfs
//!   copies into the system on first boot. Asked for without a record
//!   (host mode without `--network-record`) is an error before the write.
//!
//! The root device comes from the root-device hints, as for `write_image`.
//! Everything is validated and the config drive decoded before the disk is
//! touched.

use std::path::Path;
use std::sync::Arc;

use serde_json::{json, Value};

use super::coreos_inputs::{kernel_args, meta_copy_network};
use super::dispatch::params::{IgnitionText, InstallCoreosArgs};
use super::dispatch::step_call::StepCall;
use super::image::{parse_image_info, parse_image_info_unverified, write_whole_disk};
use super::{CommandError, ErrorKind};
use crate::state::AgentState;
use agent_contents::image::checksum::ChecksumSource;
use agent_devices::netconf::nm_keyfile::{self, Keyfile};
use agent_devices::netconf::record::NetRecord;
use ironic_types::node::{ConfigDrive, InstanceInfo};

fn invalid(msg: impl Into<String>) -> CommandError {
    CommandError::new(ErrorKind::InvalidCommandParams, msg.into())
}

fn deploy_error(msg: impl std::fmt::Display) -> CommandError {
    CommandError::new(ErrorKind::Deployment, msg.to_string())
}

/// The `install_coreos` deploy step.
pub async fn install_coreos_step(
    state: Arc<AgentState>,
    call: StepCall<InstallCoreosArgs>,
) -> Result<Value, CommandError> {
    if let Some(root) = state.config.host_root.clone() {
        return super::coreos_host::install_coreos(state, call, root).await;
    }
    let instance_info = call
        .node
        .as_ref()
        .map(|n| n.instance_info().clone())
        .unwrap_or_default();
    let args = call.args;
    let parsed = match args.image_info {
        Some(v) => parse_image_info(&state, &v)?,
        None => {
            let info = image_info_from_instance(&instance_info)?;
            let parsed = parse_image_info_unverified(&state, &info)?;
            if parsed.request.checksum.source == ChecksumSource::Unverified {
                tracing::warn!(
                    image = %info["urls"][0].as_str().unwrap_or_default(),
                    "install_coreos: the node's image has no checksum; it is written unverified, as coreos-installer --insecure does"
                );
            }
            parsed
        }
    };
    let kargs = kernel_args(args.append_karg, &instance_info)?;
    let ignition = ignition_config(&state, args.ignition, &instance_info).await?;
    let network = match copy_network(args.copy_network, &instance_info)? {
        true => network_keyfiles(state.config.network_record.as_deref())?,
        false => Vec::new(),
    };
    tracing::info!(
        image = %parsed.id,
        ignition = ignition.is_some(),
        kargs = ?kargs,
        network_files = network.len(),
        "installing CoreOS"
    );
    let mut result = write_whole_disk(state, call.node.as_ref(), parsed, move |dev| {
        finish(dev, ignition.as_deref(), &kargs, &network)
    })
    .await?;
    if let Some(r) = result.get_mut("result") {
        *r = json!(format!(
            "install_coreos: {}",
            r.as_str().unwrap_or_default()
        ));
    }
    Ok(result)
}

/// After the verified write: the image must be CoreOS-like (a `boot`
/// filesystem); then the Ignition config and kernel arguments go there.
fn finish(
    device: &Path,
    ignition: Option<&[u8]>,
    kargs: &[String],
    network: &[Keyfile],
) -> Result<(), CommandError> {
    agent_contents::configdrive::check_partitioned(device).map_err(deploy_error)?;
    let boot = agent_contents::ignition::boot_partition(device)
        .map_err(deploy_error)?
        .ok_or_else(|| {
            deploy_error(format!(
                "the image written to {} has no partition or filesystem labelled 'boot': not a CoreOS image",
                device.display()
            ))
        })?;
    if ignition.is_none() {
        tracing::warn!("install_coreos without an Ignition config");
    }
    agent_contents::ignition::inject(device, &boot, ignition, kargs, network)
        .map_err(|e| deploy_error(format!("Ignition: {e}")))
}

/// The ramdisk form without an image (OpenShift's `--offline` call).
pub const NO_OFFLINE_IMAGE: &str = "install_coreos: the node has no instance_info.image_source and the step no image_info; without an image OpenShift installs with coreos-installer --offline, which writes the live system's own CoreOS image, and the ramdisk form has none: boot OpenShift's CoreOS live system, where the agent runs as its ironic-agent container, or give an image";

/// `image_info` from the node's `instance_info`, as Ironic would send it
/// for `write_image`.
fn image_info_from_instance(ii: &InstanceInfo) -> Result<Value, CommandError> {
    let url = ii
        .image_location()
        .ok_or_else(|| invalid(NO_OFFLINE_IMAGE))?;
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        return Err(invalid(format!(
            "install_coreos: instance_info.image_source {url:?} is not an http(s) URL; pass image_info"
        )));
    }
    let id = url
        .trim_end_matches('/')
        .rsplit('/')
        .next()
        .filter(|s| !s.is_empty())
        .unwrap_or("coreos");
    let mut info = json!({"id": id, "urls": [url]});
    for (value, to) in [
        (&ii.image_checksum, "checksum"),
        (&ii.image_os_hash_algo, "os_hash_algo"),
        (&ii.image_os_hash_value, "os_hash_value"),
        (&ii.image_disk_format, "disk_format"),
    ] {
        if let Some(v) = value {
            info[to] = json!(v);
        }
    }
    Ok(info)
}

/// Whether to carry the ramdisk's network over: the step argument, else
/// the config drive dict's `meta_data.coreos_copy_network` (a boolean, or
/// its usual string forms).
fn copy_network(arg: Option<bool>, ii: &InstanceInfo) -> Result<bool, CommandError> {
    match arg {
        Some(b) => Ok(b),
        None => Ok(meta_copy_network(ii)?.unwrap_or(false)),
    }
}

/// The keyfiles for the ramdisk's network, from the record at `path`.
fn network_keyfiles(path: Option<&Path>) -> Result<Vec<Keyfile>, CommandError> {
    let path = path.ok_or_else(|| {
        invalid("install_coreos: coreos_copy_network asks for the ramdisk's network configuration, but this agent runs outside the ramdisk and was given no --network-record")
    })?;
    let record = NetRecord::load(path)
        .map_err(|e| deploy_error(format!("install_coreos: coreos_copy_network: {e:#}")))?
        .ok_or_else(|| {
            deploy_error(format!(
                "install_coreos: coreos_copy_network asks for the ramdisk's network configuration, but there is no record of it at {}",
                path.display()
            ))
        })?;
    if record.ifaces.is_empty() {
        return Err(deploy_error(format!(
            "install_coreos: coreos_copy_network: the record at {} has no configured interface",
            path.display()
        )));
    }
    Ok(nm_keyfile::render(&record))
}

/// The Ignition config, as bytes, checked to be Ignition.
async fn ignition_config(
    state: &AgentState,
    arg: Option<IgnitionText>,
    ii: &InstanceInfo,
) -> Result<Option<Vec<u8>>, CommandError> {
    let (bytes, what) = if let Some(IgnitionText(bytes)) = arg {
        (bytes, "the ignition argument")
    } else {
        match &ii.configdrive {
            None => return Ok(None),
            Some(ConfigDrive::Data(cd)) => match cd.get("user_data").filter(|v| !v.is_null()) {
                Some(v) => (
                    json_or_text(v, "configdrive.user_data")?,
                    "the config drive's user_data",
                ),
                None => return Ok(None),
            },
            Some(rendered @ ConfigDrive::Rendered(_)) => {
                let http = super::dispatch::context::http_options(state);
                let rendered = rendered.to_value();
                let iso = tokio::task::spawn_blocking(move || {
                    agent_contents::configdrive::source::load(&rendered, &http)
                })
                .await
                .map_err(|e| deploy_error(format!("config drive decoder crashed: {e}")))?
                .map_err(|e| {
                    invalid(format!(
                        "install_coreos: instance_info.configdrive is neither a dict nor a readable config drive ({e}); pass it as JSON data or give the ignition argument"
                    ))
                })?;
                match iso.and_then(|iso| {
                    agent_contents::ignition::iso::read_file(&iso, "openstack/latest/user_data")
                }) {
                    Some(b) => (b, "the config drive's user_data"),
                    None => return Ok(None),
                }
            }
        }
    };
    if !agent_contents::ignition::is_ignition(&bytes) {
        return Err(invalid(format!(
            "install_coreos: {what} is not an Ignition config (JSON with ignition.version)"
        )));
    }
    Ok(Some(bytes))
}

fn json_or_text(v: &Value, what: &str) -> Result<Vec<u8>, CommandError> {
    IgnitionText::from_value(v)
        .map(|t| t.0)
        .map_err(|e| invalid(format!("{what}: {e}")))
}

#[cfg(test)]
#[path = "coreos_tests.rs"]
mod tests;
