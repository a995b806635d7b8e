//! `install_coreos` in the container form (`Config::host_root` set: the
//! agent is OpenShift's `ironic-agent` container on a CoreOS live system),
//! as OpenShift's hardware manager does it (PROTOCOL.md §6.3; its other
//! step is [`super::assisted`]).
//!
//! `install_coreos`, in order:
//! 1. the inputs, all checked before any disk is touched: the config drive
//!    must be data (a pre-rendered one is IPA's error); the Ignition config
//!    is `user_data` (or the step's `ignition`) with the first-boot host
//!    name added ([`installer::with_firstboot_hostname`]); the kernel
//!    arguments `meta_data.coreos_append_karg` (or `append_karg`);
//!    `instance_info.image_source` → `--image-url URL --insecure`, none →
//!    `--offline`; `IPA_COREOS_IP_OPTIONS`; `--copy-network` from
//!    `meta_data.coreos_copy_network` (or `copy_network`), else
//!    `IPA_COREOS_COPY_NETWORK=true`. The step's `image_info` is refused:
//!    coreos-installer verifies signatures, not checksums;
//! 2. software RAID deleted unless the node's `automated_clean` is false
//!    (a failure is a warning);
//! 3. the root device from the hints, as for any image write;
//! 4. the Ignition config written to the host's `/tmp/ironic.ign`, and
//!    `coreos-installer install` run chrooted, three tries
//!    ([`agent_devices::hostroot::installer`]);
//! 5. after success the partition table re-read and, when the machine booted
//!    in UEFI mode, boot entries for the disk's loaders (six tries, 5 s
//!    apart, as upstream; never in host mode);
//! 6. after the last failed try the root device's metadata is erased.
//!    OpenShift passes `--preserve-on-error` because IPA's cleaning wipes
//!    the disk later, but a failure after the image copy (writing the
//!    Ignition config, the kernel arguments, the network) leaves a complete
//!    CoreOS that would boot without its Ignition, and nothing promises
//!    cleaning runs first (`automated_clean` false); so the agent erases it.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use super::coreos_inputs::{inputs, HostEnv, Inputs};
use super::dispatch::params::InstallCoreosArgs;
use super::dispatch::step_call::StepCall;
use super::{CommandError, ErrorKind};
use crate::state::AgentState;
use agent_base::config::RunMode;
use agent_devices::disk::WritePolicy;
use agent_devices::hostroot::installer;

/// UEFI boot entries: tries and the pause between them (a firmware that
/// is slow to take the variables, Red Hat bug 2057668).
const UEFI_TRIES: u32 = 6;
const UEFI_PAUSE: Duration = Duration::from_secs(5);

fn deploy_error(msg: impl std::fmt::Display) -> CommandError {
    CommandError::new(ErrorKind::Deployment, msg.to_string())
}

/// The `install_coreos` deploy step in the container form.
pub(crate) async fn install_coreos(
    state: Arc<AgentState>,
    call: StepCall<InstallCoreosArgs>,
    host_root: PathBuf,
) -> Result<Value, CommandError> {
    let ii = call
        .node
        .as_ref()
        .map(|n| n.instance_info().clone())
        .unwrap_or_default();
    let hostname = agent_devices::inventory::system::hostname(Path::new("/"));
    let Inputs { ignition, mut plan } =
        inputs(&call.args, &ii, &HostEnv::from_process(), &hostname)?;
    if plan.image_url.is_none() {
        tracing::info!("install_coreos: no image_source, coreos-installer installs the live system's own image (--offline)");
    } else {
        tracing::warn!(
            image = plan.image_url.as_deref().unwrap_or_default(),
            "install_coreos: coreos-installer --insecure: the image is not verified"
        );
    }
    try_delete_raid(&state, &call).await;
    plan.device = super::target::choose_device(&state, call.node.as_ref()).await?;
    // What an earlier write reported no longer describes the disk.
    state.set_partition_uuids(Some(json!({})));
    let args = installer::args(&plan);
    let device = plan.device.clone();
    let root = host_root.clone();
    let policy = WritePolicy::from_config(&state.config);
    let uefi = state.config.mode != RunMode::Host;
    tokio::task::spawn_blocking(move || {
        run(&root, ignition.as_ref(), &args, &device, &policy, uefi)
    })
    .await
    .map_err(|e| deploy_error(format!("coreos-installer runner crashed: {e}")))??;
    tracing::info!(device = %plan.device.display(), "Successfully installed via CoreOS installer");
    Ok(Value::Null)
}

/// Writes the Ignition file, runs the installer, and finishes or erases.
fn run(
    root: &Path,
    ignition: Option<&Value>,
    args: &[String],
    device: &Path,
    policy: &WritePolicy,
    uefi: bool,
) -> Result<(), CommandError> {
    let written = match ignition {
        Some(cfg) => {
            tracing::debug!(ignition = %cfg, "Will use ignition");
            Some(installer::write_ignition(root, cfg).map_err(|e| {
                deploy_error(format!(
                    "writing the Ignition config to {}{}: {e}",
                    root.display(),
                    installer::IGNITION_PATH
                ))
            })?)
        }
        None => None,
    };
    let result = installer::install(root, args);
    if let Some(path) = written {
        // It may hold secrets; coreos-installer has copied it.
        let _ = std::fs::remove_file(path);
    }
    if let Err(e) = result {
        erase_after_failure(device, policy);
        return Err(deploy_error(e));
    }
    rescan(device);
    if uefi && Path::new("/sys/firmware/efi").is_dir() {
        uefi_entries(device)?;
    } else if Path::new("/sys/firmware/efi").is_dir() {
        tracing::warn!(device = %device.display(), "host mode: this machine's UEFI boot entries are not touched");
    }
    Ok(())
}

/// After the last failed try: the device's tables and signatures erased,
/// so a half-installed CoreOS cannot boot.
fn erase_after_failure(device: &Path, policy: &WritePolicy) {
    match agent_devices::disk::erase::erase_all_metadata(&[device.to_path_buf()], policy) {
        Ok(()) => {
            tracing::warn!(device = %device.display(), "coreos-installer failed: the device's metadata was erased so it does not boot a partial install")
        }
        Err(e) => {
            tracing::error!(device = %device.display(), "coreos-installer failed, and erasing the device's metadata also failed: {e:#}")
        }
    }
}

/// Has the kernel re-read the new partition table (a warning if it
/// cannot).
fn rescan(device: &Path) {
    let r = agent_devices::disk::busy::retry(device, "re-reading its partition table", || {
        std::fs::File::open(device).and_then(|f| agent_devices::disk::ioctl::reread_partitions(&f))
    });
    if let Err(e) = r {
        tracing::warn!(device = %device.display(), "re-reading the partition table after coreos-installer: {e}");
    }
}

/// Boot entries for the installed disk's loaders.
fn uefi_entries(device: &Path) -> Result<(), CommandError> {
    tracing::info!(device = %device.display(), "Configuring UEFI boot");
    let efivars = Path::new(agent_contents::uefi::efivars::EFIVARS);
    let mut tries = 0;
    loop {
        tries += 1;
        match agent_contents::uefi::install(device, efivars) {
            Ok(entries) => {
                tracing::info!(?entries, "UEFI boot entries created");
                return Ok(());
            }
            Err(e) if tries < UEFI_TRIES => {
                tracing::warn!("UEFI boot configuration failed (retrying): {e}");
                std::thread::sleep(UEFI_PAUSE);
            }
            Err(e) => {
                return Err(CommandError::new(
                    ErrorKind::CommandExecution,
                    format!("configuring UEFI boot from {}: {e}", device.display()),
                ))
            }
        }
    }
}

/// `delete_configuration` before the install, unless cleaning is off.
async fn try_delete_raid(state: &Arc<AgentState>, call: &StepCall<InstallCoreosArgs>) {
    if call.node_document().get("automated_clean") == Some(&Value::Bool(false)) {
        tracing::debug!("Cleaning is disabled, will not try to delete software RAID");
        return;
    }
    tracing::info!("Deleting any software RAID devices");
    let node = call.node_or_empty().clone();
    let state = state.clone();
    let r = tokio::task::spawn_blocking(move || super::raid::delete_all(&state, &node)).await;
    match r {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::warn!(
            "Unable to delete software RAID configuration, deployment may fail: {}",
            e.details
        ),
        Err(e) => {
            tracing::warn!("Unable to delete software RAID configuration, deployment may fail: {e}")
        }
    }
}
