//! Which process listens on a TCP port in this process's network namespace,
//! read from `/proc/net/tcp`, `/proc/net/tcp6` and every process's
//! `/proc/PID/fd`: for messages that name what holds a port ("port 6385
//! is held by pid 4242, `ironic: ServiceWrapper worker(0)`") and for
//! making sure a stopped server really let go of its port.

use std::path::Path;

/// A process holding a listening socket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    /// Its PID.
    pub pid: i32,
    /// Its command line, arguments separated by spaces.
    pub cmdline: String,
    /// Its process group, when `/proc/PID/stat` could be read.
    pub pgid: Option<i32>,
}

impl std::fmt::Display for Holder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "pid {} ({})", self.pid, self.cmdline)
    }
}

/// The processes listening on TCP `port` (any address) in the network
/// namespace whose tables `proc` shows (`/proc` for this process's).
/// Empty when nothing listens, or when the owner cannot be read.
pub fn listening_on(proc: &Path, port: u16) -> Vec<Holder> {
    let mut inodes = Vec::new();
    for table in ["net/tcp", "net/tcp6"] {
        let text = std::fs::read_to_string(proc.join(table)).unwrap_or_default();
        inodes.extend(listen_inodes(&text, port));
    }
    if inodes.is_empty() {
        return Vec::new();
    }
    let mut found = Vec::new();
    for pid in processes(proc) {
        let dir = proc.join(pid.to_string());
        let Ok(fds) = std::fs::read_dir(dir.join("fd")) else {
            continue;
        };
        let holds = fds.flatten().any(|fd| {
            std::fs::read_link(fd.path())
                .ok()
                .and_then(|t| socket_inode(&t.to_string_lossy()))
                .is_some_and(|i| inodes.contains(&i))
        });
        if holds {
            let raw = std::fs::read(dir.join("cmdline")).unwrap_or_default();
            let cmdline = String::from_utf8_lossy(&raw)
                .split('\0')
                .filter(|s| !s.is_empty())
                .collect::<Vec<_>>()
                .join(" ");
            found.push(Holder {
                pid,
                cmdline,
                pgid: pgid(proc, pid),
            });
        }
    }
    found
}

/// Every PID `proc` lists, in ascending order.
pub fn processes(proc: &Path) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir(proc) else {
        return Vec::new();
    };
    let mut pids: Vec<i32> = entries
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse().ok()))
        .collect();
    pids.sort_unstable();
    pids
}

/// The process group of `pid`, when `proc/PID/stat` can be read.
pub fn pgid(proc: &Path, pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(proc.join(pid.to_string()).join("stat")).ok()?;
    pgid_in_stat(&stat)
}

/// The socket inodes of the LISTEN (state `0A`) rows for `port` in one
/// `/proc/net/tcp`-format table.
fn listen_inodes(table: &str, port: u16) -> Vec<u64> {
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            let local_port = f.get(1)?.rsplit(':').next()?;
            let listening = *f.get(3)? == "0A";
            (listening && u16::from_str_radix(local_port, 16).ok()? == port)
                .then(|| f.get(9)?.parse().ok())?
        })
        .collect()
}

/// The process group in a `/proc/PID/stat` line (`pid (comm) state ppid
/// pgrp …`; the command may hold spaces and parentheses).
fn pgid_in_stat(stat: &str) -> Option<i32> {
    let after = &stat[stat.rfind(')')? + 1..];
    after.split_whitespace().nth(2)?.parse().ok()
}

/// The inode of an fd link target `socket:[N]`.
fn socket_inode(target: &str) -> Option<u64> {
    target
        .strip_prefix("socket:[")?
        .strip_suffix(']')?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const TCP: &str = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100630A:18F1 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 31337 1 0000000000000000 100 0 0 10 0
   1: 0100630A:18F1 3D00630A:C350 06 00000000:00000000 03:00000F8C 00000000     0        0 0 3 0000000000000000
   2: 0100007F:1F98 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4242 1 0000000000000000 100 0 0 10 0
";

    #[test]
    fn finds_the_listening_socket_of_a_port_and_ignores_other_states_and_ports() {
        assert_eq!(listen_inodes(TCP, 6385), vec![31337]);
        assert_eq!(listen_inodes(TCP, 8088), vec![4242]);
        assert!(listen_inodes(TCP, 22).is_empty());
        assert!(listen_inodes("garbage\nx y z\n", 6385).is_empty());
    }

    #[test]
    fn names_the_process_holding_the_socket_in_a_proc_tree() {
        let proc = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(proc.path().join("net")).unwrap();
        std::fs::write(proc.path().join("net/tcp"), TCP).unwrap();
        for (pid, inode, cmd) in [
            (77, 31337, "ironic: ServiceWrapper worker(0)\0"),
            (78, 99, "other\0"),
        ] {
            let fd = proc.path().join(format!("{pid}/fd"));
            std::fs::create_dir_all(&fd).unwrap();
            std::os::unix::fs::symlink(format!("socket:[{inode}]"), fd.join("3")).unwrap();
            std::fs::write(proc.path().join(format!("{pid}/cmdline")), cmd).unwrap();
            std::fs::write(
                proc.path().join(format!("{pid}/stat")),
                format!("{pid} (ironic: (x) y) S 1 70 70 0 -1"),
            )
            .unwrap();
        }
        assert_eq!(
            listening_on(proc.path(), 6385),
            vec![Holder {
                pid: 77,
                cmdline: "ironic: ServiceWrapper worker(0)".into(),
                pgid: Some(70),
            }]
        );
        assert!(listening_on(proc.path(), 9999).is_empty());
        std::fs::create_dir_all(proc.path().join("self")).unwrap();
        assert_eq!(processes(proc.path()), vec![77, 78]);
        assert_eq!(pgid(proc.path(), 78), Some(70));
        assert_eq!(pgid(proc.path(), 79), None);
    }

    #[test]
    fn finds_this_process_listening_on_loopback() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let me = std::process::id() as i32;
        let me_group = nix::unistd::getpgrp().as_raw();
        assert!(listening_on(Path::new("/proc"), port)
            .iter()
            .any(|h| h.pid == me && h.pgid == Some(me_group)));
        drop(l);
        assert!(listening_on(Path::new("/proc"), port).is_empty());
    }
}
