//! Choosing the disk the OS image will overwrite (PROTOCOL.md §4.2, §5.5).
//!
//! With root device hints, the first disk (in inventory order) that
//! satisfies every hint wins; when hints are given and none matches, the
//! choice **fails closed** — no fallback to a default disk. Without hints,
//! the smallest disk of at least 4 GiB wins (ties broken by name), as IPA's
//! `guess_root_disk`. Read-only devices are never chosen (unlike IPA). Every other disk gets the reason it was not chosen,
//! and the decision is logged, so an operator can see why.

pub mod matching;
pub mod parse;

use std::fmt;

use serde::Serialize;
use serde_json::Value;

use crate::inventory::Disk;

/// IPA's minimum size for a guessed root disk.
pub const MIN_ROOT_SIZE: u64 = 4 << 30;

/// Why a disk was not chosen.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Rejection {
    /// `/dev/...`.
    pub name: String,
    /// Human-readable reason.
    pub reason: String,
}

/// The chosen disk.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Choice {
    /// The disk.
    pub disk: Disk,
    /// Why it was chosen.
    pub reason: String,
    /// Every other disk, with its reason.
    pub rejected: Vec<Rejection>,
}

/// No disk can be chosen.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum HintError {
    /// The hints do not parse.
    #[error("invalid root device hints: {0}")]
    Invalid(#[from] parse::ParseError),
    /// Hints were given and no disk satisfies them all (fail closed).
    #[error("no disk matches the root device hints {hints}; {}", Reasons(.rejected))]
    NoMatch {
        /// The hints as given.
        hints: String,
        /// Every disk and why it does not match.
        rejected: Vec<Rejection>,
    },
    /// No hints, and no disk is big enough.
    #[error("no disk of at least 4 GiB for the root device; {}", Reasons(.rejected))]
    NoDisk {
        /// Every disk and why it was not taken.
        rejected: Vec<Rejection>,
    },
}

struct Reasons<'a>(&'a [Rejection]);

impl fmt::Display for Reasons<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return write!(f, "no disks were found");
        }
        let parts: Vec<String> = self
            .0
            .iter()
            .map(|r| format!("{}: {}", r.name, r.reason))
            .collect();
        write!(f, "{}", parts.join("; "))
    }
}

/// Chooses the root device among `disks`, never one of `excluded` (the
/// disks `skip_block_devices` protect, with their reasons), and logs the
/// decision. `hints` `None`, `null` or `{}` mean "no hints".
pub fn root_device(
    disks: &[Disk],
    hints: Option<&Value>,
    excluded: &[Rejection],
) -> Result<Choice, HintError> {
    let result = choose_excluding(disks, hints, excluded);
    match &result {
        Ok(c) => {
            tracing::info!(disk = %c.disk.name, reason = %c.reason, "root device chosen");
            for r in &c.rejected {
                tracing::info!(disk = %r.name, reason = %r.reason, "not the root device");
            }
        }
        Err(e) => tracing::error!("{e}"),
    }
    result
}

/// [`choose`] among the disks not in `excluded`; each excluded disk is
/// among the rejected with its reason.
pub fn choose_excluding(
    disks: &[Disk],
    hints: Option<&Value>,
    excluded: &[Rejection],
) -> Result<Choice, HintError> {
    let open: Vec<Disk> = disks
        .iter()
        .filter(|d| !excluded.iter().any(|r| r.name == d.name))
        .cloned()
        .collect();
    let mut result = choose(&open, hints);
    let kept = || {
        excluded
            .iter()
            .filter(|r| disks.iter().any(|d| d.name == r.name))
            .cloned()
    };
    match &mut result {
        Ok(Choice { rejected, .. })
        | Err(HintError::NoMatch { rejected, .. })
        | Err(HintError::NoDisk { rejected }) => rejected.extend(kept()),
        Err(HintError::Invalid(_)) => {}
    }
    result
}

/// The decision without logging.
pub fn choose(disks: &[Disk], hints: Option<&Value>) -> Result<Choice, HintError> {
    let parsed = parse::parse(hints.unwrap_or(&Value::Null))?;
    if parsed.is_empty() {
        return guess(disks);
    }
    let shown = hints.map(Value::to_string).unwrap_or_default();
    let mut chosen: Option<&Disk> = None;
    let mut rejected = Vec::new();
    for d in disks {
        if d.read_only {
            rejected.push(read_only(d));
            continue;
        }
        let failures: Vec<String> = parsed
            .iter()
            .filter_map(|h| matching::check(d, h).err().map(|m| m.to_string()))
            .collect();
        match (failures.is_empty(), chosen) {
            (true, None) => chosen = Some(d),
            (true, Some(first)) => rejected.push(Rejection {
                name: d.name.clone(),
                reason: format!("also matches the hints, but {} comes first", first.name),
            }),
            (false, _) => rejected.push(Rejection {
                name: d.name.clone(),
                reason: failures.join(", "),
            }),
        }
    }
    match chosen {
        Some(d) => Ok(Choice {
            disk: d.clone(),
            reason: format!("first disk matching the root device hints {shown}"),
            rejected,
        }),
        None => Err(HintError::NoMatch {
            hints: shown,
            rejected,
        }),
    }
}

fn guess(disks: &[Disk]) -> Result<Choice, HintError> {
    let mut sorted: Vec<&Disk> = disks.iter().filter(|d| !d.read_only).collect();
    sorted.sort_by(|a, b| (a.size, &a.name).cmp(&(b.size, &b.name)));
    let Some(pick) = sorted.iter().find(|d| d.size >= MIN_ROOT_SIZE).copied() else {
        return Err(HintError::NoDisk {
            rejected: disks
                .iter()
                .map(|d| {
                    if d.read_only {
                        read_only(d)
                    } else {
                        Rejection {
                            name: d.name.clone(),
                            reason: too_small(d),
                        }
                    }
                })
                .collect(),
        });
    };
    let rejected = disks
        .iter()
        .filter(|d| d.name != pick.name)
        .map(|d| Rejection {
            name: d.name.clone(),
            reason: if d.read_only {
                read_only(d).reason
            } else if d.size < MIN_ROOT_SIZE {
                too_small(d)
            } else if d.size > pick.size {
                format!(
                    "larger than {} ({} > {} bytes); without hints the smallest disk of at least 4 GiB is used",
                    pick.name, d.size, pick.size
                )
            } else {
                format!("same size as {}, whose name sorts first", pick.name)
            },
        })
        .collect();
    Ok(Choice {
        disk: pick.clone(),
        reason: format!(
            "no root device hints: the smallest disk of at least 4 GiB ({} bytes)",
            pick.size
        ),
        rejected,
    })
}

/// A read-only device can never receive the image (IPA would pick it and
/// fail at the write): it is never chosen, with or without hints.
fn read_only(d: &Disk) -> Rejection {
    Rejection {
        name: d.name.clone(),
        reason: "read-only device".into(),
    }
}

fn too_small(d: &Disk) -> String {
    format!("smaller than 4 GiB ({} bytes)", d.size)
}

#[cfg(test)]
mod tests;
