//! `image.install_bootloader` (PROTOCOL.md §5.8), called by Ironic after a UEFI
//! whole-disk deploy, a partition-image deploy, or any deploy onto software
//! RAID. Host mode never touches this machine's NVRAM: where the ramdisk
//! would write boot entries the command succeeds and says so. BIOS
//! whole-disk images need nothing; for UEFI the loaders on the image's EFI
//! system partition get boot entries written natively into efivarfs
//! ([`agent_contents::uefi`]). Failures fail the command unless
//! `ignore_bootloader_failure` is set.
//! A UEFI call for a partition image (a filesystem UUID as `root_uuid`)
//! first copies the image's own loaders to the ESP the deploy made
//! ([`agent_contents::partimage::efi`]; also in host mode, on the allowed device).
//!
//! BIOS for a partition image, or for an image on software RAID: GRUB
//! installed from the image itself ([`agent_contents::grub`]: its `grub-install
//! --target=i386-pc` in a chroot, onto the root device or every member
//! disk of the array, then its `grub-mkconfig`), only when the conductor's
//! lookup allowed it (`enable_bios_bootloader_install`, off by default
//! since that install runs the tenant's code as root); otherwise IPA's
//! `InvalidImage` refusal. A whole-disk image on RAID under BIOS needs the
//! image's root filesystem UUID (Ironic's `image_rootfs_uuid`); without it
//! the command fails precisely (IPA would return success and leave disks
//! that do not boot).
//!
//! Software RAID under UEFI: the image's own ESP, inside the array, is
//! copied onto the mirrored ESP `create_configuration` built
//! ([`agent_contents::raid::esp`]) and every member disk's ESP gets its own boot
//! entry for each loader, so the machine boots from either disk.

use std::sync::Arc;

use serde_json::Value;

use super::dispatch::params::InstallBootloader;
use super::{CommandError, ErrorKind, Outcome};
use crate::state::AgentState;
use agent_base::config::RunMode;
use ironic_types::node::Node;

/// `image.install_bootloader` (async).
/// `node`: the node cached from the conductor's last command (Ironic sends
/// none with this one): its root-device hints and protected disks choose
/// the device, as for the image write.
pub(crate) async fn install_bootloader(
    state: Arc<AgentState>,
    p: InstallBootloader,
    node: Option<Node>,
) -> Outcome {
    let node = node.as_ref();
    let mode = p.target_boot_mode.as_deref().unwrap_or("bios");
    let root_uuid = p.root_uuid.as_deref().unwrap_or_default();
    // The parameter, else `ipa-ignore-bootloader-failure`, as IPA.
    let ignore = p
        .ignore_bootloader_failure
        .or(state.config.ignore_bootloader_failure)
        .unwrap_or(false);
    let finish = |result: Result<(), CommandError>| match result {
        Ok(()) => Outcome::Done(Value::Null),
        Err(err) if ignore => {
            tracing::warn!("install_bootloader failed but failures are ignored: {err:?}");
            Outcome::Done(Value::Null)
        }
        Err(err) => Outcome::Failed(err),
    };
    if mode == "uefi" && !is_whole_disk(root_uuid) {
        // A partition image: its own loaders go to the ESP first.
        if let Err(e) = partition_image_loaders(&state, node, root_uuid).await {
            tracing::error!(root_uuid, "{}", e.details);
            return finish(Err(e));
        }
    }
    let software_raid = p.software_raid.unwrap_or(false);
    if mode != "uefi" {
        let whole = is_whole_disk(root_uuid);
        if whole && !software_raid {
            tracing::info!(
                root_uuid,
                "BIOS boot of a whole-disk image: the image's own boot loader is used"
            );
            return Outcome::Done(Value::Null);
        }
        if !grub_allowed(&state) {
            let err = bios_grub_refusal();
            tracing::error!(root_uuid, software_raid, "{}", err.details);
            return finish(Err(err));
        }
        if whole {
            // The image's own boot code sits inside the array, where BIOS
            // does not look, and GRUB from the image needs its root.
            let err = CommandError::new(
                ErrorKind::InvalidImage,
                format!(
                    "software RAID under BIOS: GRUB must be installed from the image onto every                      member disk, which needs the image's root filesystem UUID (Ironic sends                      instance_info image_rootfs_uuid, or the Glance image's rootfs_uuid);                      root_uuid was {root_uuid:?}"
                ),
            );
            tracing::error!("{}", err.details);
            return finish(Err(err));
        }
        return finish(bios_grub(&state, node, root_uuid).await);
    }
    if state.config.mode == RunMode::Host {
        tracing::warn!(
            target_boot_mode = mode,
            root_uuid,
            "host mode: this machine's boot entries are not touched"
        );
        return Outcome::Done(Value::Null);
    }
    let efivars = std::path::Path::new(agent_contents::uefi::efivars::EFIVARS);
    let result = match super::target::choose_device(&state, node).await {
        Err(e) => Err(e),
        Ok(_) if !efivars.is_dir() => Err(CommandError::new(
            ErrorKind::CommandExecution,
            "the ramdisk did not boot in UEFI mode (no efivarfs); cannot create boot entries",
        )),
        Ok(device) if software_raid || is_md(&device) => {
            tokio::task::spawn_blocking(move || raid_uefi(&device, efivars))
                .await
                .map_err(|e| CommandError::new(ErrorKind::CommandExecution, e.to_string()))
                .and_then(|r| {
                    r.map_err(|e| CommandError::from_anyhow(ErrorKind::CommandExecution, &e))
                })
                .map(|entries| {
                    tracing::info!(?entries, "UEFI boot entries created on every RAID member")
                })
        }
        Ok(device) => {
            tokio::task::spawn_blocking(move || agent_contents::uefi::install(&device, efivars))
                .await
                .map_err(|e| CommandError::new(ErrorKind::CommandExecution, e.to_string()))
                .and_then(|r| {
                    r.map_err(|e| CommandError::new(ErrorKind::CommandExecution, e.to_string()))
                })
                .map(|entries| tracing::info!(?entries, "UEFI boot entries created"))
        }
    };
    finish(result)
}

fn is_md(device: &std::path::Path) -> bool {
    device
        .file_name()
        .is_some_and(|n| n.to_string_lossy().starts_with("md"))
}

/// UEFI on software RAID: the image's ESP (inside the array `device`)
/// copied onto the mirrored ESP, and a boot entry per loader on every
/// member's ESP partition. Returns (entry number, label) of each.
fn raid_uefi(
    device: &std::path::Path,
    efivars: &std::path::Path,
) -> anyhow::Result<Vec<(u16, String)>> {
    use anyhow::Context;
    let esp = agent_contents::raid::esp::find()?.with_context(|| {
        format!(
            "{} is software RAID but no mirrored EFI system partition (the md array named esp) is running; \
             was the RAID built by create_configuration in UEFI mode?",
            device.display()
        )
    })?;
    let image_esp = agent_contents::raid::esp::copy_image_esp(device, &esp)?;
    // The whole array (its FAT is the image's, from byte 0).
    let size = std::fs::File::open(&esp.device)
        .and_then(|f| agent_devices::disk::ioctl::size_bytes(&f))
        .with_context(|| format!("reading the size of {}", esp.device.display()))?;
    let m = agent_contents::ignition::mount::Mounted::new(&esp.device, 0, size, "vfat", true)?;
    let found = agent_contents::uefi::loaders::find(&m.path());
    m.unmount()?;
    anyhow::ensure!(
        !found.is_empty(),
        "no boot loader found on the EFI system partition (partition {}) of the image on {}",
        image_esp.number,
        device.display()
    );
    tracing::info!(image = %device.display(), esp = %esp.device.display(), loaders = ?found, "the image's ESP copied onto the mirrored ESP");
    let vars = agent_contents::uefi::efivars::EfiVars::new(efivars);
    let mut out = Vec::new();
    // Registered in reverse so the first member's best loader ends up
    // first in BootOrder.
    for (disk, part, sector) in esp.members.iter().rev() {
        let p = agent_contents::uefi::loadopt::Partition {
            number: part.number,
            start_lba: part.start / sector,
            size_lba: part.len / sector,
            guid: part.guid,
        };
        for (label, loader) in found.iter().rev() {
            let label = format!("{label} ({})", disk.display());
            let n = agent_contents::uefi::efivars::install(&vars, &p, loader, &label)
                .with_context(|| format!("writing the boot entry {label:?}"))?;
            out.push((n, label));
        }
    }
    out.reverse();
    Ok(out)
}

/// UEFI, partition image: copies the image's loaders (its root
/// filesystem's `boot/efi/EFI`) to the ESP the deploy created
/// ([`agent_contents::partimage::efi`]). An image without them would need GRUB
/// installed from it: IPA's refusal then, as for BIOS.
async fn partition_image_loaders(
    state: &AgentState,
    node: Option<&Node>,
    root_uuid: &str,
) -> Result<(), CommandError> {
    let device = super::target::choose_device(state, node).await?;
    let root = root_uuid.to_string();
    let preserved = tokio::task::spawn_blocking(move || {
        agent_contents::partimage::efi::preserve_assets(&device, &root)
    })
    .await
    .map_err(|e| CommandError::new(ErrorKind::CommandExecution, e.to_string()))?
    .map_err(|e| {
        CommandError::new(
            ErrorKind::CommandExecution,
            format!("copying the image's UEFI loaders to the EFI system partition: {e:#}"),
        )
    })?;
    match preserved {
        Some(p) => {
            tracing::info!(files = ?p.files, fstab = p.fstab, "the image's UEFI loaders are on the EFI system partition");
            Ok(())
        }
        None => {
            tracing::warn!(
                "the partition image has no boot/efi/EFI directory: it needs GRUB installed"
            );
            Err(if grub_allowed(state) {
                CommandError::new(
                    ErrorKind::IncompatibleHardwareMethod,
                    "the partition image has no UEFI loaders under /boot/efi/EFI; installing \
                     GRUB for UEFI from the image is not supported by this agent",
                )
            } else {
                bios_grub_refusal()
            })
        }
    }
}

/// Whether `root_uuid` is what a whole-disk image reports (nothing, or the
/// MBR disk signature `0x%08x` of `get_partition_uuids`), not a partition
/// image's root filesystem UUID.
fn is_whole_disk(root_uuid: &str) -> bool {
    root_uuid.is_empty() || root_uuid.starts_with("0x")
}

/// The conductor's `enable_bios_bootloader_install` from its lookup.
fn grub_allowed(state: &AgentState) -> bool {
    state
        .lookup_config()
        .is_some_and(|c| c.bios_bootloader_install)
}

/// IPA's refusal of GRUB from the image when the conductor did not allow
/// it.
fn bios_grub_refusal() -> CommandError {
    CommandError::new(
        ErrorKind::InvalidImage,
        "Install of legacy BIOS bootloaders disabled by the conductor \
         (enable_bios_bootloader_install is false in its lookup answer; Ironic's \
         [agent]enable_bios_bootloader_install) as part of CVE-2026-43003 mitigation",
    )
}

/// BIOS, allowed by the conductor: GRUB installed from the image whose
/// root filesystem is `root_uuid` on the root device ([`agent_contents::grub`]),
/// into every member disk when that is a software RAID array.
async fn bios_grub(
    state: &AgentState,
    node: Option<&Node>,
    root_uuid: &str,
) -> Result<(), CommandError> {
    bios_grub_arch(std::env::consts::ARCH)?;
    let device = super::target::choose_device(state, node).await?;
    let disks = match device.file_name().map(|n| n.to_string_lossy().into_owned()) {
        Some(name) if is_md(&device) => {
            let disks = agent_contents::raid::md::member_disks(std::path::Path::new("/"), &name);
            if disks.is_empty() {
                return Err(CommandError::new(
                    ErrorKind::CommandExecution,
                    format!("{} has no member disks in sysfs", device.display()),
                ));
            }
            disks
        }
        _ => vec![device.clone()],
    };
    let root = root_uuid.to_string();
    let installed = tokio::task::spawn_blocking(move || {
        agent_contents::grub::install_bios(&device, &root, &disks)
    })
    .await
    .map_err(|e| CommandError::new(ErrorKind::CommandExecution, e.to_string()))?
    .map_err(|e| {
        CommandError::new(
            ErrorKind::CommandExecution,
            format!("Installing GRUB2 boot loader from the image failed: {e:#}"),
        )
    })?;
    tracing::info!(disks = ?installed.disks, config = %installed.config, "GRUB2 successfully installed for BIOS boot");
    Ok(())
}

/// GRUB for BIOS boot is `grub-install --target=i386-pc`: x86 only. An
/// aarch64 machine has no BIOS (its firmware is UEFI), so a BIOS request
/// there is a node configured wrongly, said before the image is touched.
fn bios_grub_arch(arch: &str) -> Result<(), CommandError> {
    if matches!(arch, "x86_64" | "x86") {
        return Ok(());
    }
    Err(CommandError::new(
        ErrorKind::InvalidImage,
        format!(
            "BIOS boot was asked for on a {arch} machine: GRUB's BIOS target (i386-pc) exists \
             on x86 only and {arch} machines boot through UEFI; set the node's boot_mode to uefi"
        ),
    ))
}

#[cfg(test)]
#[path = "bootloader_tests.rs"]
mod tests;
