//! Planning a software RAID layout: which disks each logical disk is built
//! from ([`select_members`], IPA's `get_block_devices_for_raid`: each
//! `physical_disks` entry is a set of root-device hints and takes the first
//! matching disk not yet taken for this volume; without `physical_disks`,
//! every disk), and the partitions every member gets ([`plan`]).
//!
//! Each member disk gets the same table (GPT, or MBR for BIOS with
//! `disk_label` msdos): under UEFI partition 1 is a 550 MiB EFI system
//! partition from 1 MiB (IPA leaves this gap at 551 MiB and fills it at
//! `install_bootloader`; here it is made at once, unformatted, so nothing
//! boots before the bootloader is installed); under BIOS on GPT partition 1
//! is the BIOS boot partition from 1 MiB to 8 MiB (IPA's 8 MiB start); on an
//! MBR the first volume starts at 1 MiB. Then one "Linux RAID" partition
//! per logical disk using the member, in the configuration's order with the
//! `MAX` volume last, each aligned to 1 MiB.
//!
//! Sizes: `size_gb` is the size of the *array* (Ironic's meaning), so each
//! member gets `size_gb / data disks` (rounded up to a MiB) plus md's 1 MiB
//! data offset; IPA instead gives every member `size_gb`, which makes
//! RAID-0/5/6/1+0 arrays larger than asked. `MAX` takes what is left, the
//! smallest member deciding.

use std::path::PathBuf;

use serde_json::Value;

use super::config::{Level, LogicalDisk, RaidConfig, Size};
use crate::partimage::params::{BootMode, Label};
use agent_devices::disk::table::create::{self, NewPart};
use agent_devices::hints::{matching, parse};
use agent_devices::inventory::Disk;

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;
/// ESP size (IPA's `ESP_SIZE_MIB`).
pub const ESP_MIB: u64 = 550;
/// Where the arrays' partitions start on a GPT disk under BIOS (IPA).
pub const BIOS_GPT_START_MIB: u64 = 8;
/// md's data offset for v1.2 superblocks made here: 1 MiB, in 512-byte
/// sectors (the superblock sits at 4 KiB, the rest is reserved for it).
pub const DATA_OFFSET_SECTORS: u64 = 2048;

/// The GPT type of a Linux RAID member (on-disk byte order).
pub fn linux_raid_type() -> [u8; 16] {
    guid("a19d880f-05fc-4d3b-a006-743f0f84911e")
}

/// The GPT type of an EFI system partition.
pub fn esp_type() -> [u8; 16] {
    guid("c12a7328-f81f-11d2-ba4b-00a0c93ec93b")
}

/// The GPT type of a BIOS boot partition.
pub fn bios_boot_type() -> [u8; 16] {
    guid("21686148-6449-6e6f-744e-656564454649")
}

fn guid(s: &str) -> [u8; 16] {
    uuid::Uuid::parse_str(s)
        .map(|u| u.to_bytes_le())
        .unwrap_or([0; 16])
}

/// A member candidate: a whole disk with its geometry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberDisk {
    /// `/dev/sda`.
    pub path: PathBuf,
    /// Logical sector size in bytes.
    pub sector: u64,
    /// Size in logical sectors.
    pub total: u64,
}

/// Why a layout cannot be planned.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    /// A `physical_disks` entry matches no disk.
    #[error("No candidates for physical disk {hints} of logical disk {volume}; {reasons}")]
    NoCandidate {
        /// Which logical disk.
        volume: String,
        /// The hints as given.
        hints: String,
        /// Every disk and why it does not match.
        reasons: String,
    },
    /// Every matching disk was already taken for this volume.
    #[error("No candidates left for physical disk {hints} of logical disk {volume}: {candidates} already picked")]
    NoneLeft {
        /// Which logical disk.
        volume: String,
        /// The hints.
        hints: String,
        /// The disks that matched.
        candidates: String,
    },
    /// The hints are malformed.
    #[error("physical disk {hints} of logical disk {volume}: {reason}")]
    BadHints {
        /// Which logical disk.
        volume: String,
        /// The hints.
        hints: String,
        /// Why.
        reason: String,
    },
    /// Too few members for the level.
    #[error("logical disk {volume} (RAID level {level}) needs at least {need} disks, {have} available: {disks}")]
    TooFewDisks {
        /// Which logical disk.
        volume: String,
        /// Ironic's level.
        level: &'static str,
        /// Minimum.
        need: usize,
        /// Found.
        have: usize,
        /// Which.
        disks: String,
    },
    /// A member is too small.
    #[error("{disk} has no room for {what}: {need_mib} MiB needed from {start_mib} MiB, the disk's usable space ends at {end_mib} MiB")]
    NoRoom {
        /// The disk.
        disk: String,
        /// What did not fit (`the EFI system partition`, `logical disk md0 (10 GiB)`).
        what: String,
        /// Needed, MiB.
        need_mib: u64,
        /// Where it would start, MiB.
        start_mib: u64,
        /// End of the usable space, MiB.
        end_mib: u64,
    },
    /// A member's sector size differs, or is unusable.
    #[error("{disk}: logical sector size {sector} cannot hold this layout (512 or 4096 bytes)")]
    Sector {
        /// The disk.
        disk: String,
        /// Its sector size.
        sector: u64,
    },
    /// An MBR holds only four primary partitions.
    #[error("{disk}: {count} partitions do not fit an MBR (at most 4); use a GPT (disk_label gpt or UEFI)")]
    TooManyForMbr {
        /// The disk.
        disk: String,
        /// Partitions wanted.
        count: usize,
    },
}

/// The name a logical disk goes by in messages: its `volume_name`, else
/// `md<N>`.
pub fn volume_label(ld: &LogicalDisk, index: usize) -> String {
    ld.volume_name
        .clone()
        .unwrap_or_else(|| format!("md{index}"))
}

/// The md number of each logical disk of `config`, by its position in
/// `config`: IPA 13 moves the `MAX` volume last, then numbers the volumes
/// in order (`[MAX, 10]` gives `md1`, `md0`).
pub fn md_numbers(config: &RaidConfig) -> Vec<usize> {
    let mut order: Vec<usize> = (0..config.logical_disks.len()).collect();
    order.sort_by_key(|&i| config.logical_disks[i].size == Size::Max);
    let mut out = vec![0; order.len()];
    for (index, i) in order.into_iter().enumerate() {
        out[i] = index;
    }
    out
}

/// The member disks of each logical disk, by name, in order.
pub fn select_members(disks: &[Disk], config: &RaidConfig) -> Result<Vec<Vec<String>>, PlanError> {
    let usable: Vec<&Disk> = disks.iter().filter(|d| !d.read_only).collect();
    let numbers = md_numbers(config);
    let mut out = Vec::new();
    for (i, ld) in config.logical_disks.iter().enumerate() {
        let volume = volume_label(ld, numbers[i]);
        let mut picked: Vec<String> = Vec::new();
        match &ld.physical_disks {
            Some(list) => {
                for hints in list {
                    picked.push(pick(&usable, hints, &picked, &volume)?);
                }
            }
            None => picked = usable.iter().map(|d| d.name.clone()).collect(),
        }
        if picked.len() < ld.level.min_disks() {
            return Err(PlanError::TooFewDisks {
                volume,
                level: ld.level.ironic(),
                need: ld.level.min_disks(),
                have: picked.len(),
                disks: if picked.is_empty() {
                    "none".into()
                } else {
                    picked.join(", ")
                },
            });
        }
        out.push(picked);
    }
    Ok(out)
}

fn pick(
    disks: &[&Disk],
    hints: &Value,
    taken: &[String],
    volume: &str,
) -> Result<String, PlanError> {
    let shown = hints.to_string();
    let parsed = parse::parse(hints).map_err(|e| PlanError::BadHints {
        volume: volume.into(),
        hints: shown.clone(),
        reason: e.to_string(),
    })?;
    let mut candidates = Vec::new();
    let mut reasons = Vec::new();
    for d in disks {
        let fails: Vec<String> = parsed
            .iter()
            .filter_map(|h| matching::check(d, h).err().map(|m| m.to_string()))
            .collect();
        if fails.is_empty() {
            candidates.push(d.name.clone());
        } else {
            reasons.push(format!("{}: {}", d.name, fails.join(", ")));
        }
    }
    if candidates.is_empty() {
        return Err(PlanError::NoCandidate {
            volume: volume.into(),
            hints: shown,
            reasons: if reasons.is_empty() {
                "no disks were found".into()
            } else {
                reasons.join("; ")
            },
        });
    }
    candidates
        .iter()
        .find(|c| !taken.contains(c))
        .cloned()
        .ok_or(PlanError::NoneLeft {
            volume: volume.into(),
            hints: shown,
            candidates: candidates.join(", "),
        })
}

/// The table written on one member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedDisk {
    /// The disk.
    pub disk: MemberDisk,
    /// Its partitions, in order.
    pub parts: Vec<NewPart>,
    /// 1-based number of its ESP (UEFI).
    pub esp: Option<u32>,
    /// 1-based number of its BIOS boot partition (BIOS on GPT).
    pub bios_boot: Option<u32>,
}

/// One md array to build.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedArray {
    /// `N` of `/dev/mdN`: the logical disk's index once `MAX` is moved
    /// last, as IPA numbers them.
    pub index: usize,
    /// Level.
    pub level: Level,
    /// Name stored in the superblock (`volume_name`, else `mdN`).
    pub name: String,
    /// `is_root_volume` ([`super::config::LogicalDisk::root_volume`]).
    pub root_volume: Option<bool>,
    /// Members: the disk and the 1-based partition number, in role order.
    pub members: Vec<(PathBuf, u32)>,
    /// Sectors (512 B) used on each member for data.
    pub data_sectors: u64,
}

impl PlannedArray {
    /// The array's size in bytes.
    pub fn size_bytes(&self) -> u64 {
        self.level.data_disks(self.members.len() as u64) * self.data_sectors * 512
    }
}

/// The whole layout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Table type.
    pub label: Label,
    /// One entry per member disk, in first-use order.
    pub disks: Vec<PlannedDisk>,
    /// The arrays, by index.
    pub arrays: Vec<PlannedArray>,
}

/// Plans partitions and arrays. `members[i]` are the disk names of logical
/// disk `i` (from [`select_members`]), `geometry` every disk's size.
pub fn plan(
    config: &RaidConfig,
    members: &[Vec<String>],
    geometry: &[MemberDisk],
    mode: BootMode,
    label: Label,
) -> Result<Plan, PlanError> {
    let label = if mode == BootMode::Uefi {
        Label::Gpt
    } else {
        label
    };
    // Disks in first-use order, each with where the next partition starts (bytes).
    let mut disks: Vec<(PlannedDisk, u64, u64)> = Vec::new();
    for name in members.iter().flatten() {
        if disks
            .iter()
            .any(|(d, _, _)| d.disk.path.as_os_str() == name.as_str())
        {
            continue;
        }
        let Some(g) = geometry
            .iter()
            .find(|g| g.path.as_os_str() == name.as_str())
        else {
            return Err(PlanError::NoCandidate {
                volume: "(any)".into(),
                hints: name.clone(),
                reasons: "the disk disappeared while planning".into(),
            });
        };
        if !(g.sector == 512 || g.sector == 4096) {
            return Err(PlanError::Sector {
                disk: name.clone(),
                sector: g.sector,
            });
        }
        let (_, end_excl) = match label {
            Label::Gpt => create::gpt_usable(g.sector, g.total),
            Label::Msdos => create::mbr_usable(g.total),
        };
        let end = (end_excl * g.sector) / MIB * MIB;
        let mut pd = PlannedDisk {
            disk: g.clone(),
            parts: Vec::new(),
            esp: None,
            bios_boot: None,
        };
        let mut next = MIB;
        let add =
            |pd: &mut PlannedDisk, next: &mut u64, len: u64, what: &str, gpt_type, mbr_type| {
                if *next + len > end {
                    return Err(PlanError::NoRoom {
                        disk: name.clone(),
                        what: what.to_string(),
                        need_mib: len / MIB,
                        start_mib: *next / MIB,
                        end_mib: end / MIB,
                    });
                }
                pd.parts.push(NewPart {
                    start: *next / g.sector,
                    sectors: len / g.sector,
                    gpt_type,
                    name: "primary".into(),
                    mbr_type,
                    bootable: false,
                });
                *next += len;
                Ok(pd.parts.len() as u32)
            };
        match (mode, label) {
            (BootMode::Uefi, _) => {
                pd.esp = Some(add(
                    &mut pd,
                    &mut next,
                    ESP_MIB * MIB,
                    "the EFI system partition",
                    esp_type(),
                    0xef,
                )?);
            }
            (BootMode::Bios, Label::Gpt) => {
                let len = (BIOS_GPT_START_MIB - 1) * MIB;
                pd.bios_boot = Some(add(
                    &mut pd,
                    &mut next,
                    len,
                    "the BIOS boot partition",
                    bios_boot_type(),
                    0,
                )?);
            }
            (BootMode::Bios, Label::Msdos) => {}
        }
        disks.push((pd, next, end));
    }
    // Volumes with a fixed size first, MAX last (IPA's order). As in IPA
    // 13 (`create_configuration` reorders the logical disks, then numbers
    // them), an array's md number and default name are its position in
    // this order, not in `target_raid_config`.
    let numbers = md_numbers(config);
    let mut order: Vec<usize> = (0..config.logical_disks.len()).collect();
    order.sort_by_key(|&i| numbers[i]);
    let mut arrays = Vec::new();
    for i in order {
        let index = numbers[i];
        let ld = &config.logical_disks[i];
        let names = &members[i];
        let n = names.len() as u64;
        let volume = volume_label(ld, index);
        let per_member = match ld.size {
            Size::Gib(g) => {
                let data = (g * GIB)
                    .div_ceil(ld.level.data_disks(n).max(1))
                    .div_ceil(MIB)
                    * MIB;
                Some(data + DATA_OFFSET_SECTORS * 512)
            }
            Size::Max => None,
        };
        // MAX: the smallest room left on any member.
        let len = match per_member {
            Some(len) => len,
            None => names
                .iter()
                .filter_map(|nm| {
                    disks
                        .iter()
                        .find(|(d, _, _)| d.disk.path.as_os_str() == nm.as_str())
                })
                .map(|(_, next, end)| end.saturating_sub(*next))
                .min()
                .unwrap_or(0),
        };
        let what = match ld.size {
            Size::Gib(g) => format!(
                "logical disk {volume} ({g} GiB at RAID level {})",
                ld.level.ironic()
            ),
            Size::Max => format!(
                "logical disk {volume} (MAX at RAID level {})",
                ld.level.ironic()
            ),
        };
        let mut array_members = Vec::new();
        for nm in names {
            let Some((pd, next, end)) = disks
                .iter_mut()
                .find(|(d, _, _)| d.disk.path.as_os_str() == nm.as_str())
            else {
                continue;
            };
            // At least the data offset and one MiB of data.
            if len < DATA_OFFSET_SECTORS * 512 + MIB || *next + len > *end {
                return Err(PlanError::NoRoom {
                    disk: nm.clone(),
                    what,
                    need_mib: (len.max(DATA_OFFSET_SECTORS * 512 + MIB)) / MIB,
                    start_mib: *next / MIB,
                    end_mib: *end / MIB,
                });
            }
            let sector = pd.disk.sector;
            pd.parts.push(NewPart {
                start: *next / sector,
                sectors: len / sector,
                gpt_type: linux_raid_type(),
                name: volume.clone(),
                mbr_type: 0xfd,
                bootable: false,
            });
            *next += len;
            if label == Label::Msdos && pd.parts.len() > 4 {
                return Err(PlanError::TooManyForMbr {
                    disk: nm.clone(),
                    count: pd.parts.len(),
                });
            }
            array_members.push((pd.disk.path.clone(), pd.parts.len() as u32));
        }
        // Data per member: the partition less the data offset, whole MiB
        // (a multiple of every chunk size used).
        let data_sectors = (len / 512 - DATA_OFFSET_SECTORS) / 2048 * 2048;
        arrays.push(PlannedArray {
            index,
            level: ld.level,
            name: volume,
            root_volume: ld.root_volume,
            members: array_members,
            data_sectors,
        });
    }
    arrays.sort_by_key(|a| a.index);
    Ok(Plan {
        label,
        disks: disks.into_iter().map(|(d, _, _)| d).collect(),
        arrays,
    })
}
