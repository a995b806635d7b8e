//! Where one flow's time goes (issue 18, "time to active"): Ironic's own
//! log (the conductor's timestamps) and the ramdisk's console (the
//! agent's and init's uptime stamps) of one flow, split into the power-on,
//! the boot up to the first heartbeat, what the agent did, how long the
//! conductor waited for a heartbeat after a command of the agent had
//! ended, the power-off, and the conductor's own work in between.
//!
//! The two clocks are joined at one moment both logs record: the agent's
//! first accepted heartbeat and Ironic's first `Heartbeat from node` (or,
//! in inspection, the agent's accepted inspection data and Ironic's
//! `RPC continue_inspection`). Both are logged while the same HTTP request
//! is answered, so the join is good to about a tenth of a second, the
//! console's stamps to a millisecond.

use std::fmt::Write as _;

/// One line of Ironic's log about the node, on Ironic's clock (seconds).
#[derive(Debug, Clone, PartialEq)]
enum Ironic {
    PowerOn,
    PowerOff,
    Heartbeat,
    InspectionData,
}

/// One line of the ramdisk's console, on its uptime clock (seconds).
#[derive(Debug, Clone, PartialEq)]
enum Agent {
    InitStart,
    ModulesDone,
    NetworkDone,
    LookupDone,
    FirstHeartbeat,
    InspectionAccepted,
    CommandStarted(String),
    CommandEnded(String),
    PowerOff,
}

/// Ironic's log line time: `2026-11-25 04:10:00.123 …` in seconds.
fn ironic_time(line: &str) -> Option<f64> {
    let date = line.get(..10)?;
    let clock = line.get(11..23)?;
    let mut d = date.split('-').map(|p| p.parse::<i32>().ok());
    let (y, m, day) = (d.next()??, d.next()??, d.next()??);
    let month = time::Month::try_from(u8::try_from(m).ok()?).ok()?;
    let julian = time::Date::from_calendar_date(y, month, u8::try_from(day).ok()?)
        .ok()?
        .to_julian_day();
    let mut c = clock.split([':', '.']).map(|p| p.parse::<f64>().ok());
    let (h, min, s, ms) = (c.next()??, c.next()??, c.next()??, c.next()??);
    // Seconds since the Unix epoch (Julian day 2440588), small enough for
    // an f64 to keep well below a millisecond.
    let days = f64::from(julian - 2_440_588);
    Some(days * 86400.0 + h * 3600.0 + min * 60.0 + s + ms / 1000.0)
}

fn ironic_events(log: &str, node: &str) -> Vec<(f64, Ironic)> {
    let mut out = Vec::new();
    for line in log.lines().filter(|l| l.contains(node)) {
        let Some(t) = ironic_time(line) else { continue };
        let event = if line.contains("power state to power on by") {
            Ironic::PowerOn
        } else if line.contains("power state to power off by") {
            Ironic::PowerOff
        } else if line.contains(&format!("Heartbeat from node {node} in state")) {
            Ironic::Heartbeat
        } else if line.contains("RPC continue_inspection called") {
            Ironic::InspectionData
        } else {
            continue;
        };
        out.push((t, event));
    }
    out
}

/// `[   6.397]  INFO lookup done…` or `[   2.258] init: phase …`: the
/// uptime and the rest. The kernel's own lines have six decimals and are
/// not ours.
fn console_stamp(line: &str) -> Option<(f64, &str)> {
    let (stamp, rest) = line.strip_prefix('[')?.split_once(']')?;
    let stamp = stamp.trim();
    let (_, frac) = stamp.split_once('.')?;
    if frac.len() != 3 {
        return None;
    }
    Some((stamp.parse().ok()?, rest.trim()))
}

fn command_name(rest: &str) -> String {
    rest.split_whitespace()
        .find_map(|w| w.strip_prefix("command="))
        .unwrap_or("?")
        .to_string()
}

/// The agent's and init's milestones of the last ramdisk boot in `console`.
fn agent_events(console: &str) -> Vec<(f64, Agent)> {
    let mut out = Vec::new();
    for line in console.lines() {
        let Some((t, rest)) = console_stamp(line) else {
            continue;
        };
        let event = if rest.starts_with("init: phase init") {
            out.clear();
            Agent::InitStart
        } else if rest.starts_with("init: phase modules done") {
            Agent::ModulesDone
        } else if rest.starts_with("init: phase network done") {
            Agent::NetworkDone
        } else if rest.starts_with("INFO lookup done") {
            Agent::LookupDone
        } else if rest.starts_with("INFO first heartbeat accepted") {
            Agent::FirstHeartbeat
        } else if rest.starts_with("INFO inspection data accepted") {
            Agent::InspectionAccepted
        } else if rest.starts_with("INFO command started") {
            Agent::CommandStarted(command_name(rest))
        } else if rest.starts_with("INFO command succeeded")
            || rest.starts_with("WARN command failed")
            || rest.starts_with("ERROR command failed")
        {
            Agent::CommandEnded(command_name(rest))
        } else if rest.starts_with("INFO powering the machine") {
            Agent::PowerOff
        } else {
            continue;
        };
        out.push((t, event));
    }
    out
}

/// The split of one flow, in seconds; the parts add up to `total`.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Split {
    /// From the flow's request to the end state, as the caller measured it.
    pub total: f64,
    /// Request → Ironic reports the machine powered on.
    pub to_power_on: f64,
    /// Power on → the kernel starts: firmware, iPXE, kernel and initramfs
    /// download.
    pub firmware_and_download: f64,
    /// Kernel start → init (the kernel's own boot).
    pub kernel: f64,
    /// Init → modules loaded.
    pub modules: f64,
    /// Modules → network up.
    pub network: f64,
    /// Network up → first heartbeat (or inspection data) accepted.
    pub lookup: f64,
    /// The agent running commands, each `(name, seconds)` in order.
    pub commands: Vec<(String, f64)>,
    /// After an asynchronous command ended, until the agent's next
    /// heartbeat reached Ironic: the agent-side wait.
    pub heartbeat_waits: Vec<f64>,
    /// The agent powering off → Ironic reports power off.
    pub power_off: f64,
    /// Everything else: the conductor between calls and after the
    /// power-off.
    pub conductor: f64,
}

impl Split {
    /// Splits one flow of `total` seconds: `log` is Ironic's log from the
    /// flow's request on (its first line, the request's, is the start),
    /// `console` the machine's console since then, `node` the node's
    /// UUID. `None` when the logs lack the lines to join the clocks.
    pub fn of(total: f64, log: &str, console: &str, node: &str) -> Option<Split> {
        let started = log.lines().find_map(ironic_time)?;
        let ironic = ironic_events(log, node);
        let agent = agent_events(console);
        let first = |e: Ironic| ironic.iter().find(|(_, x)| *x == e).map(|(t, _)| *t);
        let agent_at = |e: Agent| agent.iter().find(|(_, x)| *x == e).map(|(t, _)| *t);
        // Join the clocks: Ironic time = uptime + offset.
        let offset = match (agent_at(Agent::FirstHeartbeat), first(Ironic::Heartbeat)) {
            (Some(u), Some(t)) => t - u,
            _ => first(Ironic::InspectionData)? - agent_at(Agent::InspectionAccepted)?,
        };
        let power_on = first(Ironic::PowerOn)?;
        let init = agent_at(Agent::InitStart)?;
        let modules = agent_at(Agent::ModulesDone)?;
        let network = agent_at(Agent::NetworkDone)?;
        let ready = agent_at(Agent::FirstHeartbeat).or(agent_at(Agent::InspectionAccepted))?;
        let mut s = Split {
            total,
            to_power_on: power_on - started,
            firmware_and_download: offset - power_on,
            kernel: init,
            modules: modules - init,
            network: network - modules,
            lookup: ready - network,
            ..Split::default()
        };
        let beats: Vec<f64> = ironic
            .iter()
            .filter(|(_, e)| *e == Ironic::Heartbeat)
            .map(|(t, _)| *t - offset)
            .collect();
        let mut open: Option<(String, f64)> = None;
        for (t, e) in &agent {
            match e {
                Agent::CommandStarted(name) => open = Some((name.clone(), *t)),
                Agent::CommandEnded(name) => {
                    if let Some((n, start)) = open.take().filter(|(n, _)| n == name) {
                        s.commands.push((n, t - start));
                    }
                    // Ironic learns of an ended step from the next heartbeat.
                    if name.contains("execute_") && name.ends_with("_step") {
                        if let Some(b) = beats.iter().find(|b| **b >= *t) {
                            s.heartbeat_waits.push(b - t);
                        }
                    }
                }
                Agent::PowerOff => {
                    if let Some(off) = ironic.iter().rev().find(|(_, e)| *e == Ironic::PowerOff) {
                        s.power_off = (off.0 - offset - t).max(0.0);
                    }
                }
                _ => {}
            }
        }
        s.conductor = total - s.accounted();
        // Rounding of the joined clocks can make an empty part a hair
        // below zero.
        for part in [
            &mut s.lookup,
            &mut s.conductor,
            &mut s.firmware_and_download,
        ] {
            *part = part.max(0.0);
        }
        Some(s)
    }

    fn accounted(&self) -> f64 {
        self.to_power_on
            + self.firmware_and_download
            + self.kernel
            + self.modules
            + self.network
            + self.lookup
            + sum(self.commands.iter().map(|(_, t)| *t))
            + sum(self.heartbeat_waits.iter().copied())
            + self.power_off
    }

    /// One line: `30.0 s = power on 0.9 | firmware, iPXE, download 7.1 | …`.
    pub fn line(&self) -> String {
        let mut out = format!(
            "{:.1} s = to power on {:.1} | firmware, iPXE, download {:.1} | kernel {:.1} | \
             modules {:.1} | network {:.1} | lookup, first heartbeat {:.1} | agent commands {:.1}",
            self.total,
            self.to_power_on,
            self.firmware_and_download,
            self.kernel,
            self.modules,
            self.network,
            self.lookup,
            sum(self.commands.iter().map(|(_, t)| *t)),
        );
        let long: Vec<String> = self
            .commands
            .iter()
            .filter(|(_, t)| *t >= 0.1)
            .map(|(n, t)| format!("{n} {t:.1}"))
            .collect();
        if !long.is_empty() {
            let _ = write!(out, " ({})", long.join(", "));
        }
        let waits = sum(self.heartbeat_waits.iter().copied());
        let _ = write!(
            out,
            " | heartbeat after a step ended {waits:.1} ({}×) | power off {:.1} | conductor {:.1}",
            self.heartbeat_waits.len(),
            self.power_off,
            self.conductor
        );
        out
    }
}

/// A sum that is +0.0 when empty (`Iterator::sum` gives -0.0, printed
/// `-0.0`).
fn sum(parts: impl Iterator<Item = f64>) -> f64 {
    parts.fold(0.0, |a, b| a + b)
}

#[cfg(test)]
mod tests {
    use super::*;

    const NODE: &str = "32b57430-f259-4343-8eaa-079716c80b70";

    fn ironic_line(clock: &str, msg: &str) -> String {
        format!(
            "2026-11-25 {clock} 4242 INFO ironic.conductor.utils [None req-1 - - - - - -] {msg}\n"
        )
    }

    #[test]
    fn ironic_times_cross_midnight() {
        let a = ironic_time("2026-12-31 23:59:59.900 1 INFO x").unwrap();
        let b = ironic_time("2027-01-01 00:00:00.100 1 INFO x").unwrap();
        assert!((b - a - 0.2).abs() < 1e-3, "{a} {b}");
        assert_eq!(ironic_time("garbage"), None);
    }

    #[test]
    fn a_deploy_splits_into_parts_that_add_up() {
        let mut log = ironic_line("10:00:00.000", "GET /v1/nodes/x");
        log += &ironic_line(
            "10:00:01.000",
            &format!("Successfully set node {NODE} power state to power on by rebooting."),
        );
        log += &ironic_line(
            "10:00:15.500",
            &format!("Heartbeat from node {NODE} in state wait call-back (target state active)"),
        );
        log += &ironic_line(
            "10:00:22.000",
            &format!("Heartbeat from node {NODE} in state wait call-back (target state active)"),
        );
        log += &ironic_line(
            "10:00:25.000",
            &format!("Successfully set node {NODE} power state to power off by power off."),
        );
        log += &ironic_line("10:00:26.000", "Heartbeat from node other-node in state x");
        let console = "\
[    0.000000] Linux version 6.1
[   2.000] init: phase init: deploy ramdisk init starting
[   5.000] init: phase modules done: 49 loaded
[   6.000] init: phase network done
[   6.300]  INFO lookup done: node found
[   6.500]  INFO first heartbeat accepted
[   6.600]  INFO command started command=deploy.execute_deploy_step id=1
[   8.000]  INFO command succeeded command=deploy.execute_deploy_step id=1
[  13.100]  INFO command started command=standby.power_off id=2
[  13.100]  INFO powering the machine action=PowerOff
[  13.101]  INFO command succeeded command=standby.power_off id=2
";
        let s = Split::of(30.0, &log, console, NODE).unwrap();
        // Uptime 6.5 is 10:00:15.5: the kernel started at 10:00:09.
        assert!((s.to_power_on - 1.0).abs() < 1e-3, "{s:?}");
        assert!((s.firmware_and_download - 8.0).abs() < 1e-3, "{s:?}");
        assert!((s.kernel - 2.0).abs() < 1e-3, "{s:?}");
        assert!((s.modules - 3.0).abs() < 1e-3, "{s:?}");
        assert!((s.network - 1.0).abs() < 1e-3, "{s:?}");
        assert!((s.lookup - 0.5).abs() < 1e-3, "{s:?}");
        assert_eq!(s.commands.len(), 2, "{s:?}");
        assert!((s.commands[0].1 - 1.4).abs() < 1e-3, "{s:?}");
        // The write ended at uptime 8.0; the next heartbeat came at 13.0.
        assert_eq!(s.heartbeat_waits.len(), 1, "{s:?}");
        assert!((s.heartbeat_waits[0] - 5.0).abs() < 1e-3, "{s:?}");
        // Powering at uptime 13.1 = 10:00:22.1; Ironic saw off at 25.0.
        assert!((s.power_off - 2.9).abs() < 1e-3, "{s:?}");
        assert!((s.accounted() + s.conductor - 30.0).abs() < 1e-3, "{s:?}");
        let line = s.line();
        assert!(
            line.contains("heartbeat after a step ended 5.0 (1×)"),
            "{line}"
        );
        assert!(line.contains("deploy.execute_deploy_step 1.4"), "{line}");
    }

    #[test]
    fn inspection_joins_the_clocks_at_the_inspection_data() {
        let mut log = ironic_line("10:00:00.500", "moved to provision state");
        log += &ironic_line(
            "10:00:01.000",
            &format!("Successfully set node {NODE} power state to power on by power on."),
        );
        log += &ironic_line(
            "10:00:16.000",
            &format!("RPC continue_inspection called for the node {NODE}"),
        );
        let console = "\
[   2.000] init: phase init: deploy ramdisk init starting
[   5.000] init: phase modules done
[   6.000] init: phase network done
[   6.700]  INFO inspection data accepted node=x
";
        let s = Split::of(20.0, &log, console, NODE).unwrap();
        assert!(
            (s.firmware_and_download - (16.0 - 6.7 - 1.0)).abs() < 1e-3,
            "{s:?}"
        );
        assert!((s.lookup - 0.7).abs() < 1e-3, "{s:?}");
        assert!(s.commands.is_empty());
    }

    #[test]
    fn without_a_join_there_is_no_split() {
        let console = "[   2.000] init: phase init: deploy ramdisk init starting\n";
        assert_eq!(Split::of(1.0, "", console, NODE), None);
    }
}
