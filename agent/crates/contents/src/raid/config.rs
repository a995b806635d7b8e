//! Reading and validating a software RAID `target_raid_config` (or an
//! `apply_configuration` step's `raid_config`) the way IPA 13's
//! `validate_configuration` does: one or two logical disks, all with
//! `controller: software`, the first RAID-1, at most one `MAX` size, one
//! root volume, unique volume names, `physical_disks` a list of at least two
//! device-hint objects. Every problem found is reported at once, joined by
//! `; ` after `Could not validate Software RAID config for <node>:`, as IPA
//! reports it.

use serde_json::Value;

/// md's names for the levels Ironic's schema allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// Striping.
    R0,
    /// Mirroring.
    R1,
    /// Mirrored stripes (md raid10, two near copies).
    R10,
    /// Single parity.
    R5,
    /// Double parity.
    R6,
}

impl Level {
    /// Ironic's spelling (`"1+0"`) to a level.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "0" => Self::R0,
            "1" => Self::R1,
            "1+0" => Self::R10,
            "5" => Self::R5,
            "6" => Self::R6,
            _ => return None,
        })
    }

    /// Ironic's spelling.
    pub fn ironic(self) -> &'static str {
        match self {
            Self::R0 => "0",
            Self::R1 => "1",
            Self::R10 => "1+0",
            Self::R5 => "5",
            Self::R6 => "6",
        }
    }

    /// md's level number (superblock `level`).
    pub fn md_level(self) -> u32 {
        match self {
            Self::R0 => 0,
            Self::R1 => 1,
            Self::R10 => 10,
            Self::R5 => 5,
            Self::R6 => 6,
        }
    }

    /// md's level name (`/sys/block/mdN/md/level`).
    pub fn md_name(self) -> &'static str {
        match self {
            Self::R0 => "raid0",
            Self::R1 => "raid1",
            Self::R10 => "raid10",
            Self::R5 => "raid5",
            Self::R6 => "raid6",
        }
    }

    /// The kernel module that runs it.
    pub fn module(self) -> &'static str {
        match self {
            Self::R0 => "raid0",
            Self::R1 => "raid1",
            Self::R10 => "raid10",
            Self::R5 | Self::R6 => "raid456",
        }
    }

    /// Fewest members the level can be built from.
    pub fn min_disks(self) -> usize {
        match self {
            Self::R0 | Self::R1 | Self::R10 => 2,
            Self::R5 => 3,
            Self::R6 => 4,
        }
    }

    /// How many members' worth of space holds data, with `n` members.
    pub fn data_disks(self, n: u64) -> u64 {
        match self {
            Self::R0 => n,
            Self::R1 => 1,
            // Two near copies: half the members' space.
            Self::R10 => n / 2,
            Self::R5 => n - 1,
            Self::R6 => n - 2,
        }
    }

    /// Whether raid10's "half the space" needs an even count to be exact;
    /// md's near-2 layout works on odd counts too, with n/2 data (rounded
    /// down here, so the array is never smaller than planned).
    /// md's `layout`: raid10 two near copies (0x102), raid5/6
    /// left-symmetric (2), 0 otherwise, as mdadm's defaults.
    pub fn layout(self) -> u32 {
        match self {
            Self::R10 => 0x102,
            Self::R5 | Self::R6 => 2,
            _ => 0,
        }
    }

    /// Chunk size in 512-byte sectors (mdadm's default 512 KiB; none for
    /// raid1).
    pub fn chunk_sectors(self) -> u32 {
        match self {
            Self::R1 => 0,
            _ => 1024,
        }
    }

    /// Whether the array holds redundancy that must be synchronised after
    /// creation.
    pub fn redundant(self) -> bool {
        !matches!(self, Self::R0)
    }
}

/// A logical disk's `size_gb`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Size {
    /// This many GiB (Ironic's `size_gb` is GiB).
    Gib(u64),
    /// What is left on the members.
    Max,
}

/// One validated logical disk.
#[derive(Debug, Clone, PartialEq)]
pub struct LogicalDisk {
    /// RAID level.
    pub level: Level,
    /// Size.
    pub size: Size,
    /// `volume_name` (the md array's name).
    pub volume_name: Option<String>,
    /// `is_root_volume`: `Some(true)` makes the array the root device of a
    /// deploy in the same boot, `Some(false)` keeps it and its member disks
    /// out of the root-device choice, `None` (absent) neither.
    pub root_volume: Option<bool>,
    /// `physical_disks`: device hints, one per member; all disks if absent.
    pub physical_disks: Option<Vec<Value>>,
}

/// A validated software RAID configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct RaidConfig {
    /// The logical disks, in the order given.
    pub logical_disks: Vec<LogicalDisk>,
}

/// The configuration is not one this agent (or IPA) builds.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("Could not validate Software RAID config for {node}: {}", .problems.join("; "))]
pub struct ConfigError {
    /// The node's UUID.
    pub node: String,
    /// Every problem found.
    pub problems: Vec<String>,
}

/// Longest `volume_name` an md superblock holds.
pub const MAX_NAME: usize = 32;

/// Reads `raid_config`. `Ok(None)`: no logical disk asks for
/// `controller: software` (IPA does nothing then). `disk_count` is how many
/// disks the machine has (levels 5 and 6 need 3 and 4).
pub fn parse(
    raid_config: &Value,
    node_uuid: &str,
    disk_count: usize,
) -> Result<Option<RaidConfig>, ConfigError> {
    let err = |problems: Vec<String>| ConfigError {
        node: node_uuid.to_string(),
        problems,
    };
    let Some(lds) = raid_config.get("logical_disks") else {
        return if raid_config.as_object().is_some_and(|o| o.is_empty()) || raid_config.is_null() {
            Ok(None)
        } else {
            Err(err(vec!["RAID config contains no logical disks".into()]))
        };
    };
    let Some(lds) = lds.as_array().filter(|a| !a.is_empty()) else {
        return Err(err(vec!["RAID config contains no logical disks".into()]));
    };
    if !lds
        .iter()
        .any(|ld| ld.get("controller").and_then(Value::as_str) == Some("software"))
    {
        return Ok(None);
    }
    let mut problems = Vec::new();
    if !(1..=2).contains(&lds.len()) {
        problems.push("Software RAID configuration requires one or two logical disks".to_string());
    }
    let mut names: Vec<String> = Vec::new();
    let mut root_seen = false;
    let mut out = Vec::new();
    for (i, ld) in lds.iter().enumerate() {
        let n = i + 1;
        if !ld.is_object() {
            problems.push(format!("logical disk {n} is not an object"));
            continue;
        }
        if ld.get("controller").and_then(Value::as_str) != Some("software") {
            problems.push("Software RAID configuration requires all logical disks to have 'controller'='software'".into());
        }
        let level = match ld.get("raid_level") {
            Some(Value::String(s)) => match Level::parse(s) {
                Some(l) => Some(l),
                None => {
                    problems.push(format!(
                        "Software RAID configuration does not support RAID level {s}"
                    ));
                    None
                }
            },
            Some(other) => {
                problems.push(format!("logical disk {n}: raid_level must be a string such as \"1\" or \"1+0\", not {other}"));
                None
            }
            None => {
                problems.push(format!("logical disk {n} has no raid_level"));
                None
            }
        };
        let size = match ld.get("size_gb") {
            Some(Value::String(s)) if s == "MAX" => Some(Size::Max),
            Some(Value::String(s)) => match s.trim().parse::<u64>() {
                Ok(g) if g > 0 => Some(Size::Gib(g)),
                _ => {
                    problems.push(format!("logical disk {n}: size_gb {s:?} is neither a positive number of GiB nor \"MAX\""));
                    None
                }
            },
            Some(Value::Number(num)) => match num.as_u64().filter(|g| *g > 0) {
                Some(g) => Some(Size::Gib(g)),
                None => {
                    problems.push(format!(
                        "logical disk {n}: size_gb {num} is not a positive whole number of GiB"
                    ));
                    None
                }
            },
            Some(other) => {
                problems.push(format!(
                    "logical disk {n}: size_gb {other} is neither a number of GiB nor \"MAX\""
                ));
                None
            }
            None => {
                problems.push(format!("logical disk {n} has no size_gb"));
                None
            }
        };
        let volume_name = match ld.get("volume_name") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => {
                if names.contains(s) {
                    problems.push(format!("Duplicate software RAID device name {s} detected"));
                } else {
                    names.push(s.clone());
                }
                if s.is_empty()
                    || s.len() > MAX_NAME
                    || s.contains(['/', ':'])
                    || s.chars().any(char::is_control)
                {
                    problems.push(format!("logical disk {n}: volume_name {s:?} must be 1 to {MAX_NAME} bytes without '/', ':' or control characters (the md superblock's name field)"));
                }
                Some(s.clone())
            }
            Some(other) => {
                problems.push(format!(
                    "logical disk {n}: volume_name {other} is not a string"
                ));
                None
            }
        };
        let root_volume = match ld.get("is_root_volume") {
            None | Some(Value::Null) => None,
            Some(Value::Bool(b)) => Some(*b),
            Some(other) => {
                problems.push(format!(
                    "logical disk {n}: is_root_volume {other} is not a boolean"
                ));
                None
            }
        };
        if root_volume == Some(true) {
            if root_seen {
                problems.push("Software RAID configuration allows only one logical disk to be marked as is_root_volume".into());
            }
            root_seen = true;
        }
        let physical_disks = match ld.get("physical_disks") {
            None | Some(Value::Null) => None,
            Some(Value::Array(items)) => {
                if items.len() < 2 {
                    problems.push("The physical_disks parameter for software RAID must be a list with at least 2 items, each specifying a disk in the device hints format".into());
                }
                if items.iter().any(|i| !i.is_object()) {
                    problems.push("The physical_disks parameter for software RAID must be a list of device hints (dictionaries)".into());
                }
                Some(items.clone())
            }
            Some(_) => {
                problems.push("The physical_disks parameter for software RAID must be a list with at least 2 items, each specifying a disk in the device hints format".into());
                None
            }
        };
        if let (Some(level), Some(size)) = (level, size) {
            if let Some(pd) = &physical_disks {
                if pd.len() >= 2 && pd.len() < level.min_disks() {
                    problems.push(format!(
                        "logical disk {n}: RAID level {} needs at least {} physical disks, physical_disks names {}",
                        level.ironic(),
                        level.min_disks(),
                        pd.len()
                    ));
                }
            } else if disk_count < level.min_disks() {
                problems.push(format!(
                    "Software RAID configuration is not possible for RAID level {} with only {disk_count} block devices found.",
                    level.ironic()
                ));
            }
            out.push(LogicalDisk {
                level,
                size,
                volume_name,
                root_volume,
                physical_disks,
            });
        }
    }
    if let Some(first) = out.first() {
        if first.level != Level::R1 && lds.first().and_then(|l| l.get("raid_level")).is_some() {
            problems.push(
                "Software RAID Configuration requires RAID-1 for the first logical disk".into(),
            );
        }
    }
    if out.iter().filter(|l| l.size == Size::Max).count() > 1 {
        problems.push("Software RAID can have only one RAID device with size 'MAX'".into());
    }
    if problems.is_empty() {
        Ok(Some(RaidConfig { logical_disks: out }))
    } else {
        Err(err(problems))
    }
}
