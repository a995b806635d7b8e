//! Keeps the multipath devices usable while the agent runs, as multipathd
//! does in IPA's ramdisk: PID 1 runs [`spawn`]'s thread in every boot of
//! the ramdisk, once it has assembled the devices there are. Every second a LUN that appeared since boot on two or
//! more paths is assembled as at boot, and for each multipath device:
//! - a path whose disk is gone (hot-unplugged) is dropped from the table
//!   while another path is up, and a new disk of the same WWID (the path
//!   coming back) is added: the table is reloaded without flushing, so I/O
//!   the device queued goes on over the new table;
//! - a path the kernel failed (an I/O error) but whose disk is still there
//!   is read every 5 s and reinstated once it answers;
//! - while no path is up the device queues I/O (`queue_if_no_path`, see
//!   [`super::table_over`]) for at most the bound given to [`spawn`]; past
//!   it the device is told `fail_if_no_path`, so queued and new I/O fail
//!   (a write then fails with an I/O error instead of hanging), and
//!   [`no_path`] names the reason for the error a write reports. A path
//!   that comes back turns queueing on again.
//!
//! What it does is told through the `say` function [`spawn`] is given (PID
//! 1's console lines: no tracing subscriber runs there).

use std::collections::BTreeMap;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver, TryRecvError};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use super::status::{self, Status};
use super::{alua_priority, candidates, dm, read, sys_block, PathDev};
use crate::disk::kernel_name_of;

/// Where the reason a device fails its I/O is kept, one file per device
/// (`dm-0`), for [`no_path`] in the agent's process.
pub const NO_PATH_DIR: &str = "/run/ironic-agent/multipath-no-path";
/// How long a device queues I/O with no path, unless the kernel command
/// line says otherwise (`agent.multipath-queue=SECONDS`): multipathd's
/// `no_path_retry 12` at its 5 s checker interval.
pub const DEFAULT_QUEUE: Duration = Duration::from_secs(60);
const TICK: Duration = Duration::from_secs(1);
/// Ticks between two reads of a failed path.
const CHECK_EVERY: u32 = 5;

/// What the watch remembers of one device between ticks.
#[derive(Default)]
struct Tracked {
    /// Since when no path has been up.
    no_path_since: Option<Instant>,
    /// Whether it was told `fail_if_no_path`.
    failing: bool,
    /// Ticks since its failed paths were last read.
    ticks: u32,
    /// Reads of failed paths still running (a dead path may block).
    checks: BTreeMap<(u64, u64), Receiver<bool>>,
    /// The last error told, so one that repeats every second is told once.
    last_error: Option<String>,
}

/// How the watch tells what it did.
pub type Say = fn(&str);

/// Starts the watch over every multipath device under `/`, queueing for
/// at most `queue` while a device has no path; `say` prints its lines.
pub fn spawn(queue: Duration, say: Say) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("multipath-watch".into())
        .spawn(move || {
            let mut tracked: BTreeMap<String, Tracked> = BTreeMap::new();
            let mut told = Vec::new();
            loop {
                tick(Path::new("/"), &mut tracked, &mut told, queue, say);
                std::thread::sleep(TICK);
            }
        })
}

/// One pass over every multipath device.
fn tick(
    root: &Path,
    tracked: &mut BTreeMap<String, Tracked>,
    told: &mut Vec<String>,
    queue: Duration,
    say: Say,
) {
    // The free disks, read once for every device's returning paths.
    let free = candidates(root);
    for m in super::all(root) {
        let t = tracked.entry(m.name.clone()).or_default();
        match watch(root, &m, &free, t, queue, say) {
            Ok(()) => t.last_error = None,
            Err(e) => {
                let e = format!("{e:#}");
                if t.last_error.as_deref() != Some(e.as_str()) {
                    say(&format!("multipath: {} ({}): {e}", m.name, m.kname));
                    t.last_error = Some(e);
                }
            }
        }
    }
    // A LUN that appeared since (zoned or mapped to the host after boot),
    // assembled as at boot; a failure is told once per LUN and paths.
    let (made, failures) = super::assemble();
    for line in made.iter().flat_map(|m| m.lines()) {
        say(&line);
    }
    for f in failures {
        if !told.contains(&f) {
            say(&format!("multipath: {f}"));
            told.push(f);
        }
    }
}

/// The table's paths whose disk exists, and the devnos of those gone.
fn present(root: &Path, st: &Status) -> (Vec<PathDev>, Vec<(u64, u64)>) {
    let mut here = Vec::new();
    let mut gone = Vec::new();
    for p in st.paths() {
        match kernel_name_of(root, p.devno) {
            Some(name) => here.push(PathDev {
                priority: alua_priority(root, &name),
                name,
                devno: p.devno,
            }),
            None => gone.push(p.devno),
        }
    }
    (here, gone)
}

fn names(paths: &[PathDev]) -> String {
    let n: Vec<&str> = paths.iter().map(|p| p.name.as_str()).collect();
    n.join(", ")
}

/// One device: its table kept to the paths there are, failed paths
/// reinstated, the no-path bound enforced.
fn watch(
    root: &Path,
    m: &super::Multipath,
    free: &[(PathDev, u64, String)],
    t: &mut Tracked,
    queue: Duration,
    say: Say,
) -> Result<()> {
    let targets = dm::status(&m.name)?;
    let Some(target) = targets.iter().find(|t| t.kind == "multipath") else {
        return Ok(());
    };
    let st = status::parse(&target.params)
        .with_context(|| format!("unreadable status {:?}", target.params))?;
    let (here, gone) = present(root, &st);
    let new: Vec<PathDev> = free
        .iter()
        .filter(|(_, sectors, wwid)| *sectors == target.length && super::uuid(wwid) == m.uuid)
        .map(|(p, _, _)| p.clone())
        .collect();
    if !new.is_empty() || (!gone.is_empty() && !here.is_empty()) {
        // A new disk may have the device number of a path gone (the kernel
        // reuses `sda`'s): one entry each.
        let mut paths: Vec<PathDev> = Vec::new();
        for p in here.iter().chain(&new) {
            if !paths.iter().any(|q| q.devno == p.devno) {
                paths.push(p.clone());
            }
        }
        dm::reload(&m.name, &[super::table_over(&paths, target.length)])?;
        say(&format!(
            "multipath: {} ({}): table reloaded over {} (new: {}; gone: {})",
            m.name,
            m.kname,
            names(&paths),
            if new.is_empty() {
                "none".into()
            } else {
                names(&new)
            },
            gone.len()
        ));
        t.checks.clear();
        return Ok(());
    }
    reinstate(root, m, &st, t, say);
    let up = st
        .paths()
        .filter(|p| p.active && here.iter().any(|h| h.devno == p.devno))
        .count();
    if up > 0 {
        t.no_path_since = None;
        if t.failing {
            dm::message(&m.name, "queue_if_no_path")?;
            t.failing = false;
            let _ = std::fs::remove_file(Path::new(NO_PATH_DIR).join(&m.kname));
            say(&format!(
                "multipath: {} ({}): a path is up again; I/O queues again while no path is",
                m.name, m.kname
            ));
        }
        return Ok(());
    }
    let since = *t.no_path_since.get_or_insert_with(Instant::now);
    if !t.failing && since.elapsed() >= queue {
        let why = format!(
            "multipath device {} ({}) has had no usable path for {} s (agent.multipath-queue)",
            m.name,
            m.kname,
            queue.as_secs()
        );
        std::fs::create_dir_all(NO_PATH_DIR)
            .and_then(|()| std::fs::write(Path::new(NO_PATH_DIR).join(&m.kname), &why))
            .unwrap_or_else(|e| say(&format!("multipath: writing {NO_PATH_DIR}: {e}")));
        dm::message(&m.name, "fail_if_no_path")?;
        t.failing = true;
        say(&format!("multipath: {why}: its I/O now fails"));
    }
    Ok(())
}

/// Reads each failed path that is still there (every [`CHECK_EVERY`]
/// ticks, in a thread of its own: a dead path may block) and reinstates the
/// ones that answered.
fn reinstate(root: &Path, m: &super::Multipath, st: &Status, t: &mut Tracked, say: Say) {
    let mut answered = Vec::new();
    t.checks.retain(|devno, rx| match rx.try_recv() {
        Ok(ok) => {
            if ok {
                answered.push(*devno);
            }
            false
        }
        Err(TryRecvError::Empty) => true,
        Err(TryRecvError::Disconnected) => false,
    });
    for devno in answered {
        let msg = format!("reinstate_path {}:{}", devno.0, devno.1);
        match dm::message(&m.name, &msg) {
            Ok(()) => say(&format!(
                "multipath: {} ({}): path {}:{} answers again, reinstated",
                m.name, m.kname, devno.0, devno.1
            )),
            Err(e) => say(&format!("multipath: {} ({}): {msg}: {e}", m.name, m.kname)),
        }
    }
    t.ticks += 1;
    if t.ticks < CHECK_EVERY {
        return;
    }
    t.ticks = 0;
    for p in st.paths().filter(|p| !p.active) {
        if t.checks.contains_key(&p.devno) {
            continue;
        }
        let Some(name) = kernel_name_of(root, p.devno) else {
            continue;
        };
        let (tx, rx) = mpsc::channel();
        let node = Path::new("/dev").join(&name);
        let spawned = std::thread::Builder::new()
            .name("multipath-check".into())
            .spawn(move || {
                let _ = tx.send(answers(&node));
            });
        if spawned.is_ok() {
            t.checks.insert(p.devno, rx);
        }
    }
}

/// Whether a path's first 4 KiB read back, bypassing the page cache.
fn answers(node: &Path) -> bool {
    use std::os::unix::fs::FileExt;
    let Ok(f) = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(node)
    else {
        return false;
    };
    let mut buf = vec![0u8; 8192];
    let skip = buf.as_ptr().align_offset(4096);
    let Some(aligned) = buf.get_mut(skip..skip + 4096) else {
        return false;
    };
    f.read_exact_at(aligned, 0).is_ok()
}

/// Why the multipath device under `/dev` path `dev` (or the one its
/// partition map sits on) fails its I/O, when [`watch`] made it fail: for
/// the error a write reports.
pub fn no_path(dev: &Path) -> Option<String> {
    let dev = std::fs::canonicalize(dev).unwrap_or_else(|_| dev.to_path_buf());
    let kname = dev.file_name()?.to_string_lossy().into_owned();
    let mut names = vec![kname.clone()];
    let slaves: PathBuf = sys_block(Path::new("/")).join(&kname).join("slaves");
    names.extend(super::list(&slaves));
    names
        .iter()
        .find_map(|n| read(&Path::new(NO_PATH_DIR).join(n)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    /// `tests::tree` plus the sysfs links of its disks' device numbers.
    fn tree_with_devnos() -> tempfile::TempDir {
        let t = super::super::tests::tree();
        let devs = t.path().join("sys/dev/block");
        fs::create_dir_all(&devs).unwrap();
        for (name, devno) in [("sdb", "8:16"), ("sdc", "8:32")] {
            std::os::unix::fs::symlink(format!("../../block/{name}"), devs.join(devno)).unwrap();
        }
        t
    }

    #[test]
    fn the_tables_paths_split_into_present_and_gone() {
        let t = tree_with_devnos();
        let st = status::parse("2 0 0 0 1 1 A 0 3 0 8:16 A 0 8:32 F 1 8:80 F 2").unwrap();
        let (here, gone) = present(t.path(), &st);
        assert_eq!(names(&here), "sdb, sdc");
        assert_eq!(here[1].devno, (8, 32));
        assert_eq!(gone, [(8, 80)]);
    }

    #[test]
    fn a_new_disk_of_the_luns_wwid_is_a_candidate_path() {
        let t = tree_with_devnos();
        // sdc held by the device: only sdb is free.
        fs::create_dir_all(t.path().join("sys/block/sdc/holders/dm-0")).unwrap();
        let c = candidates(t.path());
        let b: Vec<&str> = c
            .iter()
            .filter(|(_, _, w)| super::super::uuid(w) == "mpath-naa.5000c50015ea71ad")
            .map(|(p, _, _)| p.name.as_str())
            .collect();
        assert_eq!(b, ["sdb"]);
    }

    #[test]
    fn a_device_that_is_not_failing_has_no_reason() {
        assert_eq!(no_path(Path::new("/nonexistent/dm-99")), None);
    }
}
