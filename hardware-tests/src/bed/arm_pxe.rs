//! The Arm server network-booted by Ironic's own `pxe` boot interface
//! (issue 33; [`super::arm_server`] with [`ArmBoot::Pxe`]): Ironic's
//! configuration for it and what Ironic wrote into its TFTP root.
//!
//! Debian ships no arm64 iPXE, so on Arm Ironic's `pxe` interface (GRUB)
//! is what operators use. Ironic copies the loaders named in `[pxe]
//! loader_file_paths` into its `[pxe] tftp_root` when the conductor starts
//! (`pxe_utils.place_loaders_for_boot`), writes `grub/grub.cfg` there
//! (`place_common_config`, from `initial_grub_cfg.template`: `source
//! <tftp_root>/$net_default_mac.conf`), and for each ramdisk boot the
//! node's GRUB config `<uuid>/config` (from `pxe_grub_config.template`,
//! Ironic's default UEFI template), the links `grub.cfg-01-<mac>` and
//! `<mac>.conf` to it, and `<uuid>/deploy_kernel`, `<uuid>/deploy_ramdisk`
//! (from `[conductor] deploy_kernel_by_arch`/`deploy_ramdisk_by_arch`,
//! cached under `tftp_master_path`). With `[dhcp] dhcp_provider = none`
//! Ironic leaves DHCP to the bed's dnsmasq, which serves that same
//! directory and hands Arm UEFI clients (client-arch 11) the loader
//! `[pxe] pxe_bootfile_name_by_arch` names ([`super::IronicTftp`]), as
//! Metal3's dnsmasq does. Debian's network GRUB (`grubaa64.efi`, prefix
//! `/grub`) reads `grub/grub.cfg` and so the node's config.

use std::path::Path;

use image_builder::arch::Arch;

use crate::file_sha256;

/// How Ironic boots the Arm server's deploy ramdisk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArmBoot {
    /// `redfish-virtual-media`: an ISO Ironic builds, inserted through the
    /// BMC (what Metal3 runs).
    VirtualMedia {
        /// AAVMF with Microsoft's keys enforcing Secure Boot: the ISO's
        /// ESP starts shim, which starts Debian's signed GRUB, and the
        /// deploy kernel is the signed arm64 Image
        /// (`deploy.kernel.signed`); else the same ESP, the gzipped kernel.
        secure_boot: bool,
    },
    /// Ironic's `pxe` boot interface: GRUB and the ramdisk over TFTP from
    /// Ironic's `tftp_root`.
    Pxe {
        /// AAVMF with Microsoft's keys enforcing Secure Boot: the loader
        /// is `shimaa64.efi` (as [`SB_LOADER`]), which starts Debian's
        /// signed `grubaa64.efi`, and the deploy kernel the signed arm64
        /// Image (`deploy.kernel.signed`); else the loader is
        /// `grubaa64.efi` itself and the kernel the gzipped one.
        secure_boot: bool,
    },
}

/// Debian's signed network GRUB in Ironic's TFTP root (the aarch64
/// ramdisk's `grubaa64.efi`); the loader without Secure Boot, and the
/// name shim starts.
pub const GRUB_LOADER: &str = "grubaa64.efi";
/// shim (the aarch64 ramdisk's `shimaa64.efi`, signed with Microsoft's
/// key) in Ironic's TFTP root: the loader under Secure Boot, named as
/// the firmware's removable-media default.
pub const SB_LOADER: &str = "bootaa64.efi";

impl ArmBoot {
    /// The loader dnsmasq hands the Arm client (`None`: virtual media).
    pub fn loader(self) -> Option<&'static str> {
        match self {
            Self::VirtualMedia { .. } => None,
            Self::Pxe { secure_boot: false } => Some(GRUB_LOADER),
            Self::Pxe { secure_boot: true } => Some(SB_LOADER),
        }
    }

    /// Ironic's boot interface.
    pub fn interface(self) -> &'static str {
        match self {
            Self::VirtualMedia { .. } => "redfish-virtual-media",
            Self::Pxe { .. } => "pxe",
        }
    }

    /// The aarch64 deploy kernel's file in the ramdisk directory: the
    /// signed Image under Secure Boot (shim verifies it), else the gzipped
    /// one.
    pub fn kernel_file(self) -> &'static str {
        if self.secure_boot() {
            "deploy.kernel.signed"
        } else {
            "deploy.kernel"
        }
    }

    /// Whether AAVMF enforces Secure Boot with Microsoft's keys.
    pub fn secure_boot(self) -> bool {
        match self {
            Self::VirtualMedia { secure_boot } | Self::Pxe { secure_boot } => secure_boot,
        }
    }
}

/// The `[pxe]` section for the `pxe` boot interface with
/// `tftp_root` and the loaders from the aarch64 ramdisk in `ramdisk`;
/// `loader` is what dnsmasq hands out (and what Ironic would put in a DHCP
/// reply of its own: `pxe_bootfile_name_by_arch`). The node's GRUB config
/// comes from Ironic's default UEFI template (`[pxe]
/// uefi_pxe_config_template`, `pxe_grub_config.template`), its kernel
/// command line from `kernel_append_params` plus what Ironic adds
/// (`ipa-api-url`, inspection's callback).
pub fn pxe_conf_lines(tftp_root: &Path, ramdisk: &Path, loader: &str) -> String {
    format!(
        "[pxe]\n\
         tftp_root = {root}\n\
         tftp_master_path = {root}/master_images\n\
         kernel_append_params = console={console}\n\
         pxe_bootfile_name_by_arch = aarch64:{loader}\n\
         loader_file_paths = {GRUB_LOADER}:{grub},{SB_LOADER}:{shim}\n",
        root = tftp_root.display(),
        console = Arch::Aarch64.serial_console(),
        grub = ramdisk.join("grubaa64.efi").display(),
        shim = ramdisk.join("shimaa64.efi").display(),
    )
}

/// What Ironic wrote into its TFTP root for a ramdisk boot of the node.
#[derive(Debug, Clone)]
pub struct ArmTftp {
    /// Every path under the root, one a line (`master_images` left out).
    pub listing: String,
    /// `grub/grub.cfg`, Ironic's master GRUB config.
    pub master: String,
    /// The node's GRUB config (`<uuid>/config`).
    pub config: String,
    /// The config `grub.cfg-01-<mac>` leads to, read through the link.
    pub mac_config: Option<String>,
    /// The config `<mac>.conf` (what the master config sources) leads to.
    pub mac_conf: Option<String>,
    /// The sha256 of `<uuid>/deploy_kernel`.
    pub kernel_sha256: Option<String>,
    /// The sha256 of the loaders Ironic placed, by name.
    pub loaders: Vec<(String, Option<String>)>,
}

/// What Ironic wrote into `root` for node `uuid` with port `mac`; `None`
/// until the node's config is there.
pub fn read_tftp(root: &Path, uuid: &str, mac: &str) -> Option<ArmTftp> {
    let config = std::fs::read_to_string(root.join(uuid).join("config")).ok()?;
    let mut listing: Vec<String> = paths_under(root)
        .into_iter()
        .filter(|p| !p.starts_with("master_images"))
        .collect();
    listing.sort();
    let read = |name: &str| std::fs::read_to_string(root.join(name)).ok();
    let mac_dashes = mac.to_lowercase().replace(':', "-");
    Some(ArmTftp {
        listing: listing.join("\n"),
        master: read("grub/grub.cfg").unwrap_or_default(),
        mac_config: read(&format!("grub.cfg-01-{mac_dashes}")),
        mac_conf: read(&format!("{}.conf", mac.to_lowercase())),
        kernel_sha256: file_sha256(&root.join(uuid).join("deploy_kernel")).ok(),
        loaders: [GRUB_LOADER, SB_LOADER]
            .iter()
            .map(|l| (l.to_string(), file_sha256(&root.join(l)).ok()))
            .collect(),
        config,
    })
}

/// The paths under `root`, relative, directories included.
fn paths_under(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut todo = vec![root.to_path_buf()];
    while let Some(dir) = todo.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let path = e.path();
            if let Ok(rel) = path.strip_prefix(root) {
                out.push(rel.display().to_string());
            }
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                todo.push(path);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_loader_and_kernel_follow_secure_boot() {
        let sb = ArmBoot::Pxe { secure_boot: true };
        let plain = ArmBoot::Pxe { secure_boot: false };
        assert_eq!(sb.loader(), Some(SB_LOADER));
        assert_eq!(plain.loader(), Some(GRUB_LOADER));
        let vm_sb = ArmBoot::VirtualMedia { secure_boot: true };
        let vm = ArmBoot::VirtualMedia { secure_boot: false };
        assert_eq!(vm.loader(), None);
        assert_eq!(vm_sb.loader(), None);
        assert_eq!(sb.kernel_file(), "deploy.kernel.signed");
        assert_eq!(vm_sb.kernel_file(), "deploy.kernel.signed");
        assert_eq!(plain.kernel_file(), "deploy.kernel");
        assert_eq!(vm.kernel_file(), "deploy.kernel");
        assert!(vm_sb.secure_boot() && !vm.secure_boot());
        assert_eq!(vm.interface(), "redfish-virtual-media");
        assert_eq!(sb.interface(), "pxe");
    }

    #[test]
    fn the_pxe_conf_names_ironics_root_and_both_loaders() {
        let conf = pxe_conf_lines(Path::new("/t/tftp"), Path::new("/r"), SB_LOADER);
        for want in [
            "tftp_root = /t/tftp\n",
            "tftp_master_path = /t/tftp/master_images\n",
            "kernel_append_params = console=ttyAMA0\n",
            "pxe_bootfile_name_by_arch = aarch64:bootaa64.efi\n",
            "loader_file_paths = grubaa64.efi:/r/grubaa64.efi,bootaa64.efi:/r/shimaa64.efi\n",
        ] {
            assert!(conf.contains(want), "{want:?} not in\n{conf}");
        }
    }

    #[test]
    fn what_ironic_wrote_is_read_through_its_links() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        assert!(read_tftp(root, "u-1", "52:54:00:AA:00:01").is_none());
        std::fs::create_dir_all(root.join("u-1")).unwrap();
        std::fs::create_dir_all(root.join("grub")).unwrap();
        std::fs::create_dir_all(root.join("master_images")).unwrap();
        std::fs::write(root.join("u-1/config"), "menuentry deploy {}\n").unwrap();
        std::fs::write(root.join("u-1/deploy_kernel"), "k").unwrap();
        std::fs::write(root.join("grub/grub.cfg"), "source x\n").unwrap();
        std::os::unix::fs::symlink("u-1/config", root.join("grub.cfg-01-52-54-00-aa-00-01"))
            .unwrap();
        let t = read_tftp(root, "u-1", "52:54:00:AA:00:01").unwrap();
        assert_eq!(t.config, "menuentry deploy {}\n");
        assert_eq!(t.mac_config.as_deref(), Some("menuentry deploy {}\n"));
        assert_eq!(t.mac_conf, None);
        assert_eq!(t.master, "source x\n");
        assert_eq!(
            t.kernel_sha256.as_deref(),
            Some("8254c329a92850f6d539dd376f4816ee2764517da5e0235514af433164480d7a")
        );
        assert!(t.listing.contains("u-1/config"), "{}", t.listing);
        assert!(!t.listing.contains("master_images"), "{}", t.listing);
        assert!(t.loaders.iter().all(|(_, sha)| sha.is_none()));
    }
}
