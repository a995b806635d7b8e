//! The disk burn-in's health checks around the workload
//! (`agent_burnin_fio_disk_smart_test`): each NVMe disk's health log before
//! and after, compared, and the extended SMART self-test on the others.

use std::sync::atomic::AtomicBool;
use std::time::Duration;

use serde_json::{Map, Value};

use super::BurninError;

/// `agent_burnin_fio_disk_smart_test` on NVMe disks, before the burn-in:
/// each disk's health log ([`super::nvme_health`]).
pub fn nvme_health_before(
    disks: &[std::path::PathBuf],
) -> Result<Vec<super::nvme_health::Health>, BurninError> {
    disks
        .iter()
        .map(|d| {
            let h = super::nvme_health::read(d).map_err(|e| {
                BurninError::failed("NVMe health", format!("{}: {e:#}", d.display()))
            })?;
            tracing::info!(disk = %d.display(), health = ?h, "NVMe health before the burn-in");
            Ok(h)
        })
        .collect()
}

/// After the burn-in: each NVMe disk's health log again, compared with
/// `before` (same order); a disk with problems fails the step naming them.
pub fn nvme_health_after(
    disks: &[std::path::PathBuf],
    before: Vec<super::nvme_health::Health>,
) -> Result<Map<String, Value>, BurninError> {
    let mut out = Map::new();
    let mut failed = Vec::new();
    for (d, before) in disks.iter().zip(before) {
        let name = d.display().to_string();
        let after = super::nvme_health::read(d)
            .map_err(|e| BurninError::failed("NVMe health", format!("{name}: {e:#}")))?;
        let checked = super::nvme_health::Checked { before, after };
        let problems = checked.problems();
        tracing::info!(disk = %name, health = ?after, ?problems, "NVMe health after the burn-in");
        if !problems.is_empty() {
            failed.push(format!("{name}: {}", problems.join(", ")));
        }
        out.insert(name, serde_json::to_value(&checked).unwrap_or(Value::Null));
    }
    if !failed.is_empty() {
        return Err(BurninError::failed(
            "NVMe health",
            format!("failed on {}", failed.join("; ")),
        ));
    }
    Ok(out)
}

/// `agent_burnin_fio_disk_smart_test`: the extended SMART self-test on every
/// disk after the burn-in ([`super::smart`]), polled every 30 s as IPA.
pub fn smart_self_tests(
    disks: &[std::path::PathBuf],
    cancel: &AtomicBool,
) -> super::smart::Outcome {
    let mut skipped = Vec::new();
    let testers: Vec<(String, super::smart::Ata)> = disks
        .iter()
        .filter_map(|d| {
            let name = d.display().to_string();
            match super::smart::Ata::open(d) {
                Ok(t) => Some((name, t)),
                Err(why) => {
                    skipped.push((name, why.to_string()));
                    None
                }
            }
        })
        .collect();
    let list: Vec<(String, &dyn super::smart::SelfTester)> = testers
        .iter()
        .map(|(n, t)| (n.clone(), t as &dyn super::smart::SelfTester))
        .collect();
    let mut out = super::smart::run(&list, Duration::from_secs(30), &|| {
        cancel.load(std::sync::atomic::Ordering::Relaxed)
    });
    skipped.append(&mut out.skipped);
    out.skipped = skipped;
    out
}
