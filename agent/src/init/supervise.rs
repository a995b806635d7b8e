//! PID 1's loop: reap every child (orphans included), restart the agent
//! when it exits with the reason on the console, and keep the debug shell
//! and the SSH server running when asked for. Once the agent has rescued
//! the ramdisk (`/etc/.rescued`, PROTOCOL.md §1.8(d)) it is not restarted:
//! PID 1 keeps a login prompt on each console and an SSH server that takes
//! the `rescue` user's password instead, having locked root's password
//! first (unless `agent.rootpwd-after-rescue=1`, [`super::access`]).

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use nix::sys::wait::{waitpid, WaitStatus};
use nix::unistd::Pid;

use super::clock::say;

/// What PID 1 keeps running.
#[derive(Debug)]
pub(crate) struct Services {
    /// Arguments of the agent service (run as `/proc/self/exe ARGS`).
    pub agent_args: Vec<String>,
    /// Open a passwordless root shell on the console too (`agent.shell=1`).
    pub shell: bool,
    /// Run the SSH server (an authorized key was given).
    pub ssh: bool,
    /// A login prompt on each console (root has a password from `rootpwd=`).
    pub logins: bool,
    /// Root keeps its password after a rescue (`agent.rootpwd-after-rescue=1`).
    pub rootpwd_after_rescue: bool,
}

/// Runs forever.
pub(crate) fn run(services: &Services) -> ! {
    let mut rescued = agent_devices::rescue::account::rescued(Path::new("/"));
    let mut agent = if rescued { None } else { spawn_agent(services) };
    let mut shell = services.shell.then(spawn_shell).flatten();
    let mut ssh = services.ssh.then(spawn_ssh).flatten();
    let mut logins: Vec<(Pid, String)> = Vec::new();
    // The rescue SSH server's arguments, decided when entering rescue.
    let mut rescue_ssh = super::ssh::DROPBEAR_RESCUE_ARGS;
    if rescued {
        rescue_ssh = enter_rescue(services, &mut shell, &mut ssh, &mut logins);
    } else if services.logins && shell.is_none() {
        say("root login on the console (password from rootpwd=)");
        open_logins(&mut logins);
    } else if services.logins {
        say("rootpwd= given, but agent.shell=1 already gives root a shell on the console: no login prompt");
    }
    let mut restarts = 0u32;
    loop {
        let status = match waitpid(Pid::from_raw(-1), None) {
            Ok(s) => s,
            Err(nix::errno::Errno::ECHILD) => {
                std::thread::sleep(Duration::from_secs(1));
                if !rescued {
                    agent = agent.or_else(|| spawn_agent(services));
                }
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
            if agent_devices::rescue::account::rescued(Path::new("/")) {
                say(&format!(
                    "the agent {reason} after rescue; it stays stopped"
                ));
                agent = None;
                rescued = true;
                rescue_ssh = enter_rescue(services, &mut shell, &mut ssh, &mut logins);
                continue;
            }
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
            if rescued {
                shell = None;
                continue;
            }
            say(&format!("the debug shell {reason}; opening a new one"));
            std::thread::sleep(Duration::from_millis(500));
            shell = spawn_shell();
        } else if Some(pid) == ssh {
            say(&format!("the SSH server {reason}; restarting it"));
            std::thread::sleep(Duration::from_secs(1));
            ssh = if rescued {
                spawn_rescue_ssh(rescue_ssh)
            } else {
                spawn_ssh()
            };
        } else if let Some(i) = logins.iter().position(|(p, _)| *p == pid) {
            let (_, tty) = logins.remove(i);
            std::thread::sleep(Duration::from_millis(500));
            if let Some(p) = spawn_login(&tty) {
                logins.push((p, tty));
            }
        }
    }
}

/// Rescue mode: the debug shell closed (a login prompt takes the console),
/// root's password locked unless the operator kept it, the SSH server
/// restarted to take passwords, a login prompt on every console. Returns
/// the SSH server's arguments (for its restarts).
fn enter_rescue(
    services: &Services,
    shell: &mut Option<Pid>,
    ssh: &mut Option<Pid>,
    logins: &mut Vec<(Pid, String)>,
) -> &'static [&'static str] {
    say("rescue mode: log in as `rescue` on the console or over SSH with the rescue password");
    for pid in [shell.take(), ssh.take()].into_iter().flatten() {
        // Our own children, by PID; reaped by the loop.
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
        let _ = waitpid(pid, None);
    }
    let (args, note) = rescue_root(services.rootpwd_after_rescue, || {
        agent_devices::rescue::account::lock_root_password(Path::new("/"))
    });
    if let Some(note) = note {
        say(&note);
    }
    *ssh = spawn_rescue_ssh(args);
    if logins.is_empty() {
        open_logins(logins);
    }
    args
}

/// Root's password at rescue, before the SSH server takes passwords: kept
/// when `keep` (`agent.rootpwd-after-rescue=1`), else locked by `lock`
/// (which says whether root had one). If it cannot be locked, the SSH
/// server stays keys-only (the `rescue` login is then on the console only)
/// rather than take root's password. The server's arguments and what to
/// say on the console.
fn rescue_root(
    keep: bool,
    lock: impl FnOnce() -> anyhow::Result<bool>,
) -> (&'static [&'static str], Option<String>) {
    use super::ssh::{DROPBEAR_ARGS, DROPBEAR_RESCUE_ARGS};
    if keep {
        return (
            DROPBEAR_RESCUE_ARGS,
            Some(
                "agent.rootpwd-after-rescue: root keeps its rootpwd= password (console and SSH)"
                    .into(),
            ),
        );
    }
    match lock() {
        Ok(true) => (
            DROPBEAR_RESCUE_ARGS,
            Some("root's password (rootpwd=) locked for the rescue: log in as `rescue`".into()),
        ),
        Ok(false) => (DROPBEAR_RESCUE_ARGS, None),
        Err(e) => (
            DROPBEAR_ARGS,
            Some(format!(
                "cannot lock root's password: {e:#}; SSH stays keys-only, the rescue login is on the console"
            )),
        ),
    }
}

/// A login prompt on every console.
fn open_logins(logins: &mut Vec<(Pid, String)>) {
    for tty in
        console_ttys(&std::fs::read_to_string("/sys/class/tty/console/active").unwrap_or_default())
    {
        if let Some(p) = spawn_login(&tty) {
            logins.push((p, tty));
        }
    }
}

/// The terminals behind `/dev/console` (`/sys/class/tty/console/active`,
/// e.g. `tty0 ttyS0`); `tty0`, the current virtual terminal, is `tty1`.
pub(crate) fn console_ttys(active: &str) -> Vec<String> {
    let mut out: Vec<String> = active
        .split_whitespace()
        .map(|t| {
            if t == "tty0" {
                "tty1".to_string()
            } else {
                t.to_string()
            }
        })
        .collect();
    out.dedup();
    if out.is_empty() {
        out.push("console".into());
    }
    out
}

fn spawn_login(tty: &str) -> Option<Pid> {
    // Not `tool::run`: a long-running child that the reaper loop above waits for.
    let baud = if tty.starts_with("ttyS") || tty.starts_with("ttyAMA") {
        "115200"
    } else {
        "38400"
    };
    match Command::new("/bin/busybox")
        .args(["getty", "-L", baud, tty, "vt100"])
        .env("PATH", "/bin:/sbin:/usr/bin:/usr/sbin")
        .spawn()
    {
        Ok(c) => Some(Pid::from_raw(c.id() as i32)),
        Err(e) => {
            say(&format!("cannot open a login prompt on {tty}: {e}"));
            None
        }
    }
}

fn spawn_rescue_ssh(args: &[&str]) -> Option<Pid> {
    if !Path::new(super::ssh::DROPBEAR).exists() {
        say("this ramdisk has no SSH server: the rescue login is on the console only");
        return None;
    }
    // Where dropbear makes its host keys (made by `sshkey=` otherwise).
    if let Err(e) = std::fs::create_dir_all("/etc/dropbear") {
        say(&format!("cannot create /etc/dropbear: {e}"));
    }
    // Not `tool::run`: a long-running child that the reaper loop above waits for.
    match Command::new(super::ssh::DROPBEAR)
        .args(args)
        .env("PATH", "/bin:/sbin:/usr/bin:/usr/sbin")
        .spawn()
    {
        Ok(c) => {
            say(if args == super::ssh::DROPBEAR_ARGS {
                "SSH server on port 22 (rescue: keys only)"
            } else {
                "SSH server on port 22 (rescue: passwords accepted)"
            });
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
    say("debug shell on the console (agent.shell=1: whoever reaches the console is root; the agent keeps running; try `agent inventory --human`)");
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rescue_locks_root_before_ssh_takes_passwords() {
        use crate::init::ssh::{DROPBEAR_ARGS, DROPBEAR_RESCUE_ARGS};
        // Kept on purpose: not locked, passwords on.
        let (args, note) = rescue_root(true, || panic!("locked although kept"));
        assert_eq!(args, DROPBEAR_RESCUE_ARGS);
        assert!(note.unwrap().contains("keeps its rootpwd= password"));
        // Root had a password: locked, said, then passwords on.
        let mut called = false;
        let (args, note) = rescue_root(false, || {
            called = true;
            Ok(true)
        });
        assert!(called);
        assert_eq!(args, DROPBEAR_RESCUE_ARGS);
        assert!(note.unwrap().contains("locked"));
        // Nothing to lock: quiet.
        assert_eq!(
            rescue_root(false, || Ok(false)),
            (DROPBEAR_RESCUE_ARGS, None)
        );
        // Could not lock: no password logins at all.
        let (args, note) = rescue_root(false, || Err(anyhow::anyhow!("read-only /etc")));
        assert_eq!(args, DROPBEAR_ARGS);
        assert!(note.unwrap().contains("read-only /etc"));
    }

    #[test]
    fn login_prompts_go_to_the_consoles_terminals() {
        assert_eq!(console_ttys("ttyS0\n"), ["ttyS0"]);
        assert_eq!(console_ttys("tty0 ttyS0\n"), ["tty1", "ttyS0"]);
        assert_eq!(console_ttys(""), ["console"]);
    }
}
