//! The partition layout IPA makes for a partition image
//! (`disk_utils.make_partitions`, `DiskPartitioner.commit`): from 1 MiB on,
//! back to back, each exactly its size in MiB, in this order: EFI system
//! partition (UEFI, 550 MiB unless `[disk_utils]
//! efi_system_partition_size` says otherwise), BIOS boot partition (BIOS
//! on GPT, 1 MiB or `[disk_utils] bios_boot_partition_size`; not
//! on ppc64), PReP boot partition (BIOS on ppc64*, 8 MiB), ephemeral,
//! swap, config drive, and the root partition last (so that cloud-init can
//! grow it). Types as parted gives them: `fat32` with the `boot` flag on
//! GPT is the ESP type, `bios_grub` the BIOS boot type, `prep` the PReP
//! type (MBR 0x41, active on an MBR), `linux-swap` the swap type (MBR
//! 0x82), everything else Linux data (MBR 0x83); on an MBR the root
//! partition is active (BIOS, not ppc64).
//!
//! The CPU architecture is the agent's own (IPA passes
//! `get_cpus().architecture`, `platform.machine()`: `ppc64le`), not a node
//! property.

use super::params::{BootMode, Label, Params};
use agent_devices::disk::table::create::{self, NewPart};

/// IPA's PReP boot partition size, MiB.
pub const PREP_MB: u64 = 8;
/// Where the first partition starts, MiB.
const LEAD_MB: u64 = 1;
const MIB: u64 = 1 << 20;

/// What a partition is for; the names are IPA's `partitions` keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The EFI system partition.
    Esp,
    /// GRUB's BIOS boot partition.
    BiosBoot,
    /// The PReP boot partition of ppc64 machines (GRUB's core image).
    PrepBoot,
    /// The ephemeral partition.
    Ephemeral,
    /// Swap.
    Swap,
    /// The config drive.
    ConfigDrive,
    /// The root filesystem (the image).
    Root,
}

impl Role {
    /// IPA's key in `get_partition_uuids`' `partitions`.
    pub fn key(self) -> &'static str {
        match self {
            Role::Esp => "efi system partition",
            Role::BiosBoot => "BIOS Boot partition",
            Role::PrepBoot => "PReP Boot partition",
            Role::Ephemeral => "ephemeral",
            Role::Swap => "swap",
            Role::ConfigDrive => "configdrive",
            Role::Root => "root",
        }
    }
}

/// One planned partition, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Planned {
    /// Its role.
    pub role: Role,
    /// 1-based partition number.
    pub number: u32,
    /// First byte.
    pub start: u64,
    /// Length in bytes.
    pub len: u64,
}

/// A planned table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// Table type.
    pub label: Label,
    /// Partitions in number order.
    pub parts: Vec<Planned>,
    /// The CPU architecture it was planned for (`x86_64`, `ppc64le`).
    pub cpu_arch: String,
}

/// Why the layout does not fit the disk.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LayoutError {
    /// The partitions end beyond the usable part of the disk.
    #[error(
        "the partition layout needs {needed_mb} MiB ({parts}) but {device_mb} MiB of the disk are usable"
    )]
    TooSmall {
        /// End of the last partition, MiB.
        needed_mb: u64,
        /// Usable MiB.
        device_mb: u64,
        /// The partitions and sizes.
        parts: String,
    },
    /// An MBR cannot address the layout (2 TiB limit).
    #[error("the partition layout ends at {end_mb} MiB, beyond what an MBR (msdos) table addresses; use disk_label gpt")]
    BeyondMbr {
        /// End of the last partition, MiB.
        end_mb: u64,
    },
}

impl Layout {
    /// The partition with `role`.
    pub fn get(&self, role: Role) -> Option<&Planned> {
        self.parts.iter().find(|p| p.role == role)
    }

    /// End of the last partition, bytes.
    pub fn end(&self) -> u64 {
        self.parts.last().map_or(0, |p| p.start + p.len)
    }

    /// The table entries for a disk of `total` sectors of `sector` bytes;
    /// fails, naming sizes, when the layout does not fit.
    pub fn entries(&self, sector: u64, total: u64) -> Result<Vec<NewPart>, LayoutError> {
        let (_, usable_end) = match self.label {
            Label::Gpt => create::gpt_usable(sector, total),
            Label::Msdos => create::mbr_usable(total),
        };
        let end = self.end();
        if self.label == Label::Msdos && end > (1u64 << 32) * sector {
            return Err(LayoutError::BeyondMbr { end_mb: end / MIB });
        }
        if end > usable_end * sector {
            return Err(LayoutError::TooSmall {
                needed_mb: end.div_ceil(MIB),
                device_mb: usable_end * sector / MIB,
                parts: self
                    .parts
                    .iter()
                    .map(|p| format!("{} {} MiB", p.role.key(), p.len / MIB))
                    .collect::<Vec<_>>()
                    .join(", "),
            });
        }
        Ok(self
            .parts
            .iter()
            .map(|p| NewPart {
                start: p.start / sector,
                sectors: p.len / sector,
                gpt_type: gpt_type(p.role),
                name: "primary".into(),
                mbr_type: match p.role {
                    Role::Swap => 0x82,
                    Role::PrepBoot => 0x41,
                    _ => 0x83,
                },
                bootable: self.label == Label::Msdos
                    && match p.role {
                        Role::Root => !self.cpu_arch.starts_with("ppc64"),
                        Role::PrepBoot => true,
                        _ => false,
                    },
            })
            .collect())
    }
}

/// The GPT type parted gives each role.
fn gpt_type(role: Role) -> [u8; 16] {
    let guid = match role {
        Role::Esp => "c12a7328-f81f-11d2-ba4b-00a0c93ec93b",
        Role::BiosBoot => "21686148-6449-6e6f-744e-656564454649",
        Role::PrepBoot => "9e1a2d38-c612-4316-aa26-8b49521e5a8b",
        Role::Swap => "0657fd6d-a4ab-43c4-84e5-0933c84b4f4f",
        _ => "0fc63daf-8483-4772-8e79-3d69d8477de4",
    };
    uuid::Uuid::parse_str(guid)
        .expect("a constant GUID")
        .to_bytes_le()
}

/// IPA's layout for `params` in `mode` with a `label` table and a config
/// drive of `configdrive_mb` MiB (0: none), on a `cpu_arch` machine.
pub fn plan(
    params: &Params,
    mode: BootMode,
    label: Label,
    configdrive_mb: u64,
    cpu_arch: &str,
) -> Layout {
    let ppc64 = cpu_arch.starts_with("ppc64");
    let mut sizes = Vec::new();
    if mode == BootMode::Uefi {
        sizes.push((Role::Esp, params.esp_mb));
    }
    if mode == BootMode::Bios && label == Label::Gpt && !ppc64 {
        sizes.push((Role::BiosBoot, params.bios_boot_mb));
    }
    if mode == BootMode::Bios && ppc64 {
        sizes.push((Role::PrepBoot, PREP_MB));
    }
    for (role, mb) in [
        (Role::Ephemeral, params.ephemeral_mb),
        (Role::Swap, params.swap_mb),
        (Role::ConfigDrive, configdrive_mb),
    ] {
        if mb > 0 {
            sizes.push((role, mb));
        }
    }
    sizes.push((Role::Root, params.root_mb));
    let mut start = LEAD_MB * MIB;
    let parts = sizes
        .into_iter()
        .enumerate()
        .map(|(i, (role, mb))| {
            let p = Planned {
                role,
                number: i as u32 + 1,
                start,
                len: mb * MIB,
            };
            start += mb * MIB;
            p
        })
        .collect();
    Layout {
        label,
        parts,
        cpu_arch: cpu_arch.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(root: u64, swap: u64, eph: u64) -> Params {
        Params {
            root_mb: root,
            swap_mb: swap,
            ephemeral_mb: eph,
            ephemeral_format: (eph > 0).then(|| "ext4".into()),
            preserve_ephemeral: false,
            deploy_boot_mode: None,
            disk_label: None,
            esp_mb: agent_base::config::groups::EFI_SYSTEM_PARTITION_MB,
            bios_boot_mb: agent_base::config::groups::BIOS_BOOT_PARTITION_MB,
        }
    }

    fn roles(l: &Layout) -> Vec<(Role, u32, u64, u64)> {
        l.parts
            .iter()
            .map(|p| (p.role, p.number, p.start / MIB, p.len / MIB))
            .collect()
    }

    #[test]
    fn uefi_layout_is_esp_ephemeral_swap_configdrive_root() {
        let l = plan(
            &params(4096, 512, 1024),
            BootMode::Uefi,
            Label::Gpt,
            2,
            "x86_64",
        );
        assert_eq!(
            roles(&l),
            [
                (Role::Esp, 1, 1, 550),
                (Role::Ephemeral, 2, 551, 1024),
                (Role::Swap, 3, 1575, 512),
                (Role::ConfigDrive, 4, 2087, 2),
                (Role::Root, 5, 2089, 4096),
            ]
        );
        assert_eq!(l.end(), 6185 * MIB);
        let e = l.entries(512, 8 << 21).unwrap();
        assert_eq!(e[0].gpt_type, gpt_type(Role::Esp));
        assert_eq!(e[0].start, 2048);
        assert_eq!(e[4].sectors, 4096 * 2048);
        assert!(e.iter().all(|p| !p.bootable));
    }

    #[test]
    fn bios_layouts_gpt_gets_a_bios_boot_partition_msdos_an_active_root() {
        let l = plan(&params(100, 0, 0), BootMode::Bios, Label::Gpt, 0, "x86_64");
        assert_eq!(
            roles(&l),
            [(Role::BiosBoot, 1, 1, 1), (Role::Root, 2, 2, 100)]
        );
        let e = l.entries(512, 1 << 20).unwrap();
        assert_eq!(e[0].gpt_type, gpt_type(Role::BiosBoot));
        let l = plan(
            &params(100, 64, 0),
            BootMode::Bios,
            Label::Msdos,
            1,
            "x86_64",
        );
        assert_eq!(
            roles(&l),
            [
                (Role::Swap, 1, 1, 64),
                (Role::ConfigDrive, 2, 65, 1),
                (Role::Root, 3, 66, 100)
            ]
        );
        let e = l.entries(512, 1 << 20).unwrap();
        assert_eq!(
            e.iter()
                .map(|p| (p.mbr_type, p.bootable))
                .collect::<Vec<_>>(),
            [(0x82, false), (0x83, false), (0x83, true)]
        );
    }

    #[test]
    fn ppc64_bios_gets_a_prep_partition_instead_of_bios_boot() {
        let l = plan(
            &params(100, 0, 16),
            BootMode::Bios,
            Label::Gpt,
            1,
            "ppc64le",
        );
        assert_eq!(
            roles(&l),
            [
                (Role::PrepBoot, 1, 1, 8),
                (Role::Ephemeral, 2, 9, 16),
                (Role::ConfigDrive, 3, 25, 1),
                (Role::Root, 4, 26, 100)
            ]
        );
        let e = l.entries(512, 1 << 20).unwrap();
        assert_eq!(
            e[0].gpt_type,
            uuid::Uuid::parse_str("9e1a2d38-c612-4316-aa26-8b49521e5a8b")
                .unwrap()
                .to_bytes_le()
        );
        assert!(e.iter().all(|p| !p.bootable), "no boot flags on GPT");
        // On an MBR: type 0x41 and active; the root is not (ppc64).
        let l = plan(&params(100, 0, 0), BootMode::Bios, Label::Msdos, 0, "ppc64");
        assert_eq!(
            roles(&l),
            [(Role::PrepBoot, 1, 1, 8), (Role::Root, 2, 9, 100)]
        );
        let e = l.entries(512, 1 << 20).unwrap();
        assert_eq!(
            e.iter()
                .map(|p| (p.mbr_type, p.bootable))
                .collect::<Vec<_>>(),
            [(0x41, true), (0x83, false)]
        );
        // UEFI on ppc64: the ESP and no PReP (IPA adds it for BIOS only).
        let l = plan(&params(100, 0, 0), BootMode::Uefi, Label::Gpt, 0, "ppc64le");
        assert_eq!(
            roles(&l),
            [(Role::Esp, 1, 1, 550), (Role::Root, 2, 551, 100)]
        );
    }

    #[test]
    fn configured_boot_partition_sizes_are_laid_out() {
        let sized = Params {
            esp_mb: 1024,
            bios_boot_mb: 2,
            ..params(100, 0, 0)
        };
        let l = plan(&sized, BootMode::Uefi, Label::Gpt, 0, "x86_64");
        assert_eq!(
            roles(&l),
            [(Role::Esp, 1, 1, 1024), (Role::Root, 2, 1025, 100)]
        );
        let l = plan(&sized, BootMode::Bios, Label::Gpt, 0, "x86_64");
        assert_eq!(
            roles(&l),
            [(Role::BiosBoot, 1, 1, 2), (Role::Root, 2, 3, 100)]
        );
    }

    #[test]
    fn a_layout_larger_than_the_disk_is_refused_with_the_sizes() {
        let l = plan(&params(1024, 0, 0), BootMode::Uefi, Label::Gpt, 0, "x86_64");
        // 1 + 550 + 1024 MiB on a 1 GiB disk.
        let e = l.entries(512, (1 << 30) / 512).unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("needs 1575 MiB"), "{msg}");
        assert!(
            msg.contains("efi system partition 550 MiB, root 1024 MiB"),
            "{msg}"
        );
        // The backup GPT takes the last 33 sectors: exactly the layout's
        // size is too small, 1 MiB more fits.
        assert!(l.entries(512, 1575 * 2048).is_err());
        assert!(l.entries(512, 1576 * 2048).is_ok());
        let l = plan(
            &params(3 << 20, 0, 0),
            BootMode::Bios,
            Label::Msdos,
            0,
            "x86_64",
        );
        assert!(matches!(
            l.entries(512, 1 << 40),
            Err(LayoutError::BeyondMbr { .. })
        ));
    }

    #[test]
    fn four_k_sectors_keep_mib_boundaries() {
        let l = plan(&params(64, 8, 0), BootMode::Uefi, Label::Gpt, 0, "x86_64");
        let e = l.entries(4096, (2 << 30) / 4096).unwrap();
        assert_eq!((e[0].start, e[0].sectors), (256, 550 * 256));
        assert_eq!(e[2].start, (1 + 550 + 8) * 256);
    }
}
