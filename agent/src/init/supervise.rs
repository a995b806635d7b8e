//! PID 1's loop: reap every child (orphans included), restart the agent
//! when it exits with the reason on the console, and keep the debug shell
//! and the SSH server running when asked for.

use std::process::Command;
use std::time::{Duration, Instant};

use nix::sys::wait::{waitpid, WaitStatus};
use nix::unistd::Pid;

use super::clock::say;

/// What PID 1 keeps running.
#[derive(Debug)]
pub struct Services {
    /// Arguments of the agent service (run as `/proc/self/exe ARGS`).
    pub agent_args: Vec<String>,
    /// Open a root shell on the console too.
    pub shell: bool,
    /// Run the SSH server (an authorized key was given).
    pub ssh: bool,
}

/// Runs forever.
pub fn run(services: &Services) -> ! {
    let mut agent = spawn_agent(services);
    let mut shell = services.shell.then(spawn_shell).flatten();
    let mut ssh = services.ssh.then(spawn_ssh).flatten();
    let mut restarts = 0u32;
    loop {
        let status = match waitpid(Pid::from_raw(-1), None) {
            Ok(s) => s,
            Err(nix::errno::Errno::ECHILD) => {
                std::thread::sleep(Duration::from_secs(1));
                agent = agent.or_else(|| spawn_agent(services));
                continue;
            }
            Err(_) => continue,
        };
        let (pid, reason) = match status {
            WaitStatus::Exited(pid, code) => (pid, format!("exited with status {code}")),
            WaitStatus::Signaled(pid, sig, _) => (pid, format!("killed by {sig}")),
            _ => continue,
        };
        if Some(pid) == agent {
            restarts += 1;
            let delay = Duration::from_secs(u64::from(restarts.min(5)));
            say(&format!(
                "the agent {reason}; restarting it in {}s (restart {restarts})",
                delay.as_secs()
            ));
            let until = Instant::now() + delay;
            while Instant::now() < until {
                // Keep reaping while we wait.
                let _ = waitpid(
                    Pid::from_raw(-1),
                    Some(nix::sys::wait::WaitPidFlag::WNOHANG),
                );
                std::thread::sleep(Duration::from_millis(100));
            }
            agent = spawn_agent(services);
        } else if Some(pid) == shell {
            say(&format!("the debug shell {reason}; opening a new one"));
            std::thread::sleep(Duration::from_millis(500));
            shell = spawn_shell();
        } else if Some(pid) == ssh {
            say(&format!("the SSH server {reason}; restarting it"));
            std::thread::sleep(Duration::from_secs(1));
            ssh = spawn_ssh();
        }
    }
}

fn spawn_agent(services: &Services) -> Option<Pid> {
    // Not `tool::run`: a long-running child that the reaper loop above waits for.
    match Command::new("/proc/self/exe")
        .args(&services.agent_args)
        .spawn()
    {
        Ok(c) => Some(Pid::from_raw(c.id() as i32)),
        Err(e) => {
            say(&format!("cannot start the agent: {e}"));
            None
        }
    }
}

fn spawn_shell() -> Option<Pid> {
    say("debug shell on the console (the agent keeps running; try `agent inventory --human`)");
    // Not `tool::run`: a long-running child that the reaper loop above waits for.
    let res = Command::new("/bin/busybox")
        .args(["cttyhack", "/bin/sh", "-l"])
        .env("PATH", "/bin:/sbin:/usr/bin")
        .env("HOME", "/root")
        .env("PS1", "ramdisk# ")
        .spawn();
    match res {
        Ok(c) => Some(Pid::from_raw(c.id() as i32)),
        Err(e) => {
            say(&format!("cannot open the debug shell: {e}"));
            None
        }
    }
}

fn spawn_ssh() -> Option<Pid> {
    // Not `tool::run`: a long-running child that the reaper loop above waits for.
    match Command::new(super::ssh::DROPBEAR)
        .args(super::ssh::DROPBEAR_ARGS)
        .env("PATH", "/bin:/sbin:/usr/bin:/usr/sbin")
        .spawn()
    {
        Ok(c) => {
            say("SSH server on port 22 (key from sshkey=)");
            Some(Pid::from_raw(c.id() as i32))
        }
        Err(e) => {
            say(&format!(
                "cannot start the SSH server {}: {e}",
                super::ssh::DROPBEAR
            ));
            None
        }
    }
}
