//! Boot phase timings of the deploy ramdisk (issue 17): the seconds since
//! the kernel started (CLOCK_BOOTTIME, the clock of the kernel's own log)
//! at which each phase ended. PID 1 records its phases (`init`, `mounts`,
//! `modules`, `firmware`, `vmedia`, `network`), the agent its own
//! (`inspection`, `lookup`, `first_heartbeat`), as lines `<phase>
//! <seconds>` appended to [`RAMDISK_PATH`] (a tmpfs file: init and the
//! agent are separate processes). Operators see them through Ironic twice:
//! inspection posts them as the top-level `boot_phases` key (Ironic 39
//! keeps the keys beside `inventory` as plugin data, `GET
//! /v1/nodes/{node}/inventory` → `plugin_data.boot_phases`), and the logs
//! bundle Ironic collects carries the file, with the agent's one-line
//! summary at its first heartbeat in its log. Nothing is recorded outside
//! the ramdisk. Parsing never fails: malformed lines are skipped.

use std::io::{self, Write};
use std::path::Path;

use serde_json::{json, Value};

/// Where the ramdisk keeps the phases.
pub const RAMDISK_PATH: &str = "/run/ironic-agent/boot-phases";

/// Seconds since the kernel started.
pub fn since_boot() -> f64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_BOOTTIME)
        .map(|t| t.tv_sec() as f64 + t.tv_nsec() as f64 / 1e9)
        .unwrap_or(0.0)
}

/// One phase and when it ended.
#[derive(Debug, Clone, PartialEq)]
pub struct Phase {
    /// `init`, `modules`, `first_heartbeat`, …
    pub name: String,
    /// Seconds since the kernel started.
    pub seconds: f64,
}

/// Appends `phase` at `seconds` to the file at `path` (its directory is
/// created).
pub fn record_in(path: &Path, phase: &str, seconds: f64) -> io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?;
    // One write per line: init and the agent may append at once.
    f.write_all(format!("{phase} {seconds:.3}\n").as_bytes())
}

/// Records `phase` as ending now in [`RAMDISK_PATH`]; a failure is only
/// logged (timings must never stop a boot).
pub fn record(phase: &str) {
    record_at(phase, since_boot());
}

/// Records `phase` at `seconds` in [`RAMDISK_PATH`] (see [`record`]).
pub fn record_at(phase: &str, seconds: f64) {
    if let Err(e) = record_in(Path::new(RAMDISK_PATH), phase, seconds) {
        tracing::warn!("boot phase {phase} not recorded in {RAMDISK_PATH}: {e}");
    }
}

/// The phases in `text`, in order; a phase recorded again (the agent
/// restarted by PID 1 looks up again) keeps its first time.
pub fn parse(text: &str) -> Vec<Phase> {
    let mut out: Vec<Phase> = Vec::new();
    for line in text.lines() {
        let mut words = line.split_whitespace();
        let (Some(name), Some(secs), None) = (words.next(), words.next(), words.next()) else {
            continue;
        };
        let Ok(seconds) = secs.parse::<f64>() else {
            continue;
        };
        let name_ok = name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if !name_ok || !seconds.is_finite() || seconds < 0.0 || out.iter().any(|p| p.name == name) {
            continue;
        }
        out.push(Phase {
            name: name.to_string(),
            seconds,
        });
    }
    out
}

/// The phases recorded in the file at `path` (none when it is missing).
pub fn read_in(path: &Path) -> Vec<Phase> {
    std::fs::read_to_string(path)
        .map(|t| parse(&t))
        .unwrap_or_default()
}

/// The `boot_phases` value: `[{"phase": "init", "seconds": 2.91}, …]`, in
/// the order the phases happened.
pub fn to_json(phases: &[Phase]) -> Value {
    Value::Array(
        phases
            .iter()
            .map(|p| json!({"phase": p.name, "seconds": p.seconds}))
            .collect(),
    )
}

/// One line for logs: `init 2.910 s, modules 6.310 s, …`.
pub fn summary(phases: &[Phase]) -> String {
    phases
        .iter()
        .map(|p| format!("{} {:.3} s", p.name, p.seconds))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recorded_phases_read_back_in_order_first_time_wins() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("run/ironic-agent/boot-phases");
        assert!(read_in(&path).is_empty(), "no file, no phases");
        record_in(&path, "init", 2.9104).unwrap();
        record_in(&path, "modules", 6.31).unwrap();
        record_in(&path, "lookup", 6.75).unwrap();
        record_in(&path, "lookup", 99.0).unwrap();
        let phases = read_in(&path);
        let names: Vec<&str> = phases.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["init", "modules", "lookup"]);
        assert_eq!(phases[0].seconds, 2.91, "three decimals kept");
        assert_eq!(phases[2].seconds, 6.75, "the first lookup counts");
        assert_eq!(
            to_json(&phases),
            json!([{"phase": "init", "seconds": 2.91}, {"phase": "modules", "seconds": 6.31},
                   {"phase": "lookup", "seconds": 6.75}])
        );
        assert_eq!(
            summary(&phases),
            "init 2.910 s, modules 6.310 s, lookup 6.750 s"
        );
    }

    #[test]
    fn malformed_lines_are_skipped() {
        let text = "init 1.5\n\nbad\nx y\nnan NaN\nneg -1\ninf inf\nthree 1 2\n\
                    we\u{301}ird 2\nnetwork 3.25\n";
        let phases = parse(text);
        assert_eq!(
            phases,
            [
                Phase {
                    name: "init".into(),
                    seconds: 1.5
                },
                Phase {
                    name: "network".into(),
                    seconds: 3.25
                }
            ]
        );
    }

    #[test]
    fn the_clock_runs() {
        let a = since_boot();
        assert!(a > 0.0);
        assert!(since_boot() >= a);
    }
}
