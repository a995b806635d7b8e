//! Burn-in: the workloads behind IPA's `burnin_cpu`, `burnin_memory`,
//! `burnin_disk` and `burnin_network` steps, native instead of IPA's
//! `stress-ng` and `fio` (PROTOCOL.md §7.7); `burnin_gpu` runs NVIDIA's
//! `gpu-burn` as IPA does ([`gpu`]). Each workload checks what it
//! computes, writes or receives, stops at its deadline or when the
//! operation is aborted, and returns a report; a failing component is an
//! error naming it (the CPU, the memory offset, the device and byte, the
//! partner and port). The steps that read the node's `driver_info` knobs
//! ([`knobs`]) are `commands/burnin.rs`.
//!
//! Why native: the ramdisk is ~21 MiB with a static agent; stress-ng and
//! fio with their libraries would add several MiB and two more programs
//! whose output must be parsed, while each workload here is a few hundred
//! lines whose checks are stronger than the tools' defaults (every byte
//! written to a disk or memory is regenerated and compared).

pub mod cpu;
pub mod disk;
pub mod disk_health;
pub mod gpu;
pub mod knobs;
pub mod memory;
pub mod network;
pub mod nvme_health;
pub mod pairing;
pub mod settings;
pub(crate) mod smart;

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

/// Why a burn-in did not pass.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BurninError {
    /// A `driver_info` knob has a value the workload cannot use.
    #[error("{key}: {reason}")]
    Knob {
        /// The knob's name.
        key: String,
        /// What is wrong with its value.
        reason: String,
    },
    /// Something IPA does that this agent cannot do, said precisely.
    #[error("{0}")]
    Unsupported(String),
    /// A component failed the burn-in (or could not be exercised).
    #[error("{component}: {reason}")]
    Failed {
        /// What failed: `CPU 3`, `memory`, `/dev/sdb`, `network partner …`.
        component: String,
        /// How.
        reason: String,
    },
    /// The operation was aborted (token wiped, power action).
    #[error("burn-in aborted after {0:.1} s")]
    Aborted(f64),
}

impl BurninError {
    /// A failure of `component`.
    pub fn failed(component: impl Into<String>, reason: impl Into<String>) -> Self {
        Self::Failed {
            component: component.into(),
            reason: reason.into(),
        }
    }
}

/// When a workload stops: its deadline, or the operation's abort flag.
#[derive(Debug, Clone, Copy)]
pub struct Stop<'a> {
    /// The end of the run (`None`: run to completion of the passes asked).
    pub deadline: Option<Instant>,
    /// Raised when the operation ends under the step.
    pub cancel: &'a AtomicBool,
}

impl Stop<'_> {
    /// The deadline has passed.
    pub fn expired(&self) -> bool {
        self.deadline.is_some_and(|d| Instant::now() >= d)
    }

    /// The operation was aborted.
    pub fn aborted(&self) -> bool {
        self.cancel.load(Ordering::Relaxed)
    }
}

/// One 64-bit word of a reproducible stream (splitmix64 of `seed + i`):
/// what a workload writes is regenerated from the seed to check it.
pub fn pattern_word(seed: u64, i: u64) -> u64 {
    let mut z = seed.wrapping_add(i.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pattern_is_reproducible_and_varies() {
        assert_eq!(pattern_word(7, 3), pattern_word(7, 3));
        assert_ne!(pattern_word(7, 3), pattern_word(7, 4));
        assert_ne!(pattern_word(7, 3), pattern_word(8, 3));
    }
}
