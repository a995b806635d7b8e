//! The assisted installer's agent on the live system (`start_assisted_install`,
//! OpenShift's converged flow): its Ignition ships `agent.service` without
//! starting it; the step starts it and waits until it is neither
//! `activating` nor `active`, and `failed` is the step's failure.
//!
//! OpenShift's manager asks systemd over D-Bus (`StartUnit(unit, "fail")`,
//! then the unit's `ActiveState` and the service's `Result` every 15 s).
//! The agent runs the host's own `systemctl` chrooted into the host's root
//! instead: the same requests over the host's system bus
//! (`/run/dbus/system_bus_socket` in the host's `/run`, which the unit
//! binds with the rest of the root), with no D-Bus client in the agent.
//! `SYSTEMCTL_FORCE_BUS=1`: as root, `systemctl` would otherwise talk to
//! PID 1's private socket, and refuse it from the container: the peer's
//! PID (the host's PID 1) does not exist in the container's PID namespace
//! ("Failed to connect to bus: No data available", seen on the bed).
//! `start --no-block --job-mode=fail` queues the job as `StartUnit` does;
//! `SYSTEMD_IGNORE_CHROOT=1` keeps `systemctl` from ignoring the request
//! when it thinks it runs in a chroot.

use std::path::Path;
use std::time::Duration;

use agent_base::tool::ToolError;

/// The assisted installer's agent.
pub const ASSISTED_UNIT: &str = "agent.service";
/// How often its state is read while it runs.
pub const POLL: Duration = Duration::from_secs(15);

/// A unit's state as systemd reports it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct UnitState {
    /// `ActiveState`: `active`, `activating`, `failed`, `inactive` …
    pub active: String,
    /// The service's `Result`: `success`, `exit-code` …
    pub result: String,
}

impl UnitState {
    /// From `systemctl show -p ActiveState -p Result` (`KEY=value` lines).
    pub fn parse(text: &str) -> Self {
        let mut s = UnitState::default();
        for line in text.lines() {
            match line.split_once('=') {
                Some(("ActiveState", v)) => s.active = v.trim().to_string(),
                Some(("Result", v)) => s.result = v.trim().to_string(),
                _ => {}
            }
        }
        s
    }

    /// `activating` or `active`.
    pub fn running(&self) -> bool {
        matches!(self.active.as_str(), "activating" | "active")
    }
}

/// The host's `systemctl`.
pub trait Systemctl {
    /// Queues the start of `unit` (fails if a conflicting job is queued).
    fn start(&mut self, unit: &str) -> Result<(), ToolError>;
    /// The state of `unit`.
    fn state(&mut self, unit: &str) -> Result<UnitState, ToolError>;
}

/// `systemctl` run chrooted into the host's root.
#[derive(Debug)]
pub struct Chrooted<'a>(pub &'a Path);

impl Chrooted<'_> {
    fn systemctl(&self) -> std::process::Command {
        let mut c = super::command(self.0, "systemctl");
        c.env("SYSTEMD_IGNORE_CHROOT", "1")
            .env("SYSTEMCTL_FORCE_BUS", "1");
        c
    }
}

impl Systemctl for Chrooted<'_> {
    fn start(&mut self, unit: &str) -> Result<(), ToolError> {
        agent_base::tool::run(self.systemctl().args([
            "start",
            "--no-block",
            "--job-mode=fail",
            unit,
        ]))
        .map(|_| ())
    }

    fn state(&mut self, unit: &str) -> Result<UnitState, ToolError> {
        let out = agent_base::tool::run(self.systemctl().args([
            "show",
            "-p",
            "ActiveState",
            "-p",
            "Result",
            unit,
        ]))?;
        Ok(UnitState::parse(&String::from_utf8_lossy(&out.stdout)))
    }
}

/// Why the assisted installation did not succeed.
#[derive(Debug, thiserror::Error)]
pub enum AssistedError {
    /// The unit ended `failed` (IPA's `DeploymentError` text).
    #[error("Assisted Installer Agent has failed with result \"{0}\". Check the ramdisk logs for more details.")]
    Failed(String),
    /// `systemctl` could not start it or read its state.
    #[error("Assisted Installer Agent: {0}")]
    Tool(#[from] ToolError),
}

/// Starts [`ASSISTED_UNIT`] and waits for it to end; `sleep` waits between
/// reads (1 s after the start, then `poll`).
pub fn run_assisted(
    sys: &mut dyn Systemctl,
    poll: Duration,
    sleep: &mut dyn FnMut(Duration),
) -> Result<(), AssistedError> {
    if running(sys)? {
        tracing::error!("Assisted Installer Agent should not be active at this stage");
    }
    sys.start(ASSISTED_UNIT)?;
    tracing::info!("Triggered installation via the assisted agent");
    // Not to read systemd's state between the job and its start.
    sleep(Duration::from_secs(1));
    while running(sys)? {
        tracing::debug!("Still waiting for the assisted agent to finish");
        sleep(poll);
    }
    tracing::info!("Successfully installed using the assisted agent");
    Ok(())
}

/// Whether the unit runs; `failed` is an error.
fn running(sys: &mut dyn Systemctl) -> Result<bool, AssistedError> {
    let s = sys.state(ASSISTED_UNIT)?;
    tracing::debug!(state = %s.active, result = %s.result, "Assisted Agent state");
    if s.active == "failed" {
        return Err(AssistedError::Failed(s.result));
    }
    Ok(s.running())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// systemd as a script of states, one per read.
    struct Script {
        states: Vec<&'static str>,
        started: Vec<String>,
        reads: usize,
    }

    impl Systemctl for Script {
        fn start(&mut self, unit: &str) -> Result<(), ToolError> {
            self.started.push(unit.to_string());
            Ok(())
        }
        fn state(&mut self, _unit: &str) -> Result<UnitState, ToolError> {
            let line = self.states[self.reads.min(self.states.len() - 1)];
            self.reads += 1;
            Ok(UnitState::parse(line))
        }
    }

    fn script(states: Vec<&'static str>) -> Script {
        Script {
            states,
            started: Vec::new(),
            reads: 0,
        }
    }

    #[test]
    fn show_output_parses() {
        let s = UnitState::parse("ActiveState=activating\nResult=success\nOther=x\n");
        assert_eq!(s.active, "activating");
        assert_eq!(s.result, "success");
        assert!(s.running());
        assert!(!UnitState::parse("ActiveState=inactive\n").running());
    }

    #[test]
    fn the_step_waits_until_the_agent_ends() {
        let mut sys = script(vec![
            "ActiveState=inactive\nResult=success",
            "ActiveState=activating\nResult=success",
            "ActiveState=active\nResult=success",
            "ActiveState=inactive\nResult=success",
        ]);
        let mut slept = Vec::new();
        run_assisted(&mut sys, POLL, &mut |d| slept.push(d)).unwrap();
        assert_eq!(sys.started, [ASSISTED_UNIT]);
        assert_eq!(sys.reads, 4);
        assert_eq!(slept, [Duration::from_secs(1), POLL, POLL]);
    }

    #[test]
    fn a_failed_agent_is_ipas_deployment_error() {
        let mut sys = script(vec![
            "ActiveState=inactive\nResult=success",
            "ActiveState=active\nResult=success",
            "ActiveState=failed\nResult=exit-code",
        ]);
        let e = run_assisted(&mut sys, POLL, &mut |_| {}).unwrap_err();
        assert_eq!(
            e.to_string(),
            "Assisted Installer Agent has failed with result \"exit-code\". Check the ramdisk logs for more details."
        );
        // Failed before the start too: not started.
        let mut sys = script(vec!["ActiveState=failed\nResult=timeout"]);
        assert!(run_assisted(&mut sys, POLL, &mut |_| {}).is_err());
        assert!(sys.started.is_empty());
    }

    #[test]
    fn systemctl_goes_through_the_system_bus_and_ignores_the_chroot() {
        let c = Chrooted(Path::new("/mnt/coreos")).systemctl();
        let envs: Vec<_> = c.get_envs().collect();
        for var in ["SYSTEMCTL_FORCE_BUS", "SYSTEMD_IGNORE_CHROOT"] {
            assert!(
                envs.contains(&(std::ffi::OsStr::new(var), Some(std::ffi::OsStr::new("1")))),
                "{var} not set: {envs:?}"
            );
        }
    }

    #[test]
    fn systemctl_in_a_missing_root_is_an_error() {
        let mut sys = Chrooted(Path::new("/nonexistent/host/root"));
        let e = run_assisted(&mut sys, POLL, &mut |_| {}).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("Assisted Installer Agent: running `systemctl show"),
            "{e}"
        );
    }
}
