//! The `numa-topology` inspection collector: IPA's `numa_topology` (memory
//! per node, physical cores with their thread siblings per node, NICs per
//! node) from `/sys/devices/system/node` and `/sys/class/net/*/device/numa_node`,
//! with the shapes of IPA's `numa_inspector.py`.
//!
//! As in IPA, one unreadable or malformed file makes the whole collector
//! report nothing (the caller logs why); there is no partial topology.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use crate::inventory::{read_attr, under};

/// Why the topology cannot be reported.
#[derive(Debug, thiserror::Error)]
pub enum NumaError {
    /// The node directory cannot be listed.
    #[error("no NUMA nodes: {}: {source}", .dir.display())]
    NoNodes {
        /// The directory.
        dir: PathBuf,
        /// The system's error.
        source: std::io::Error,
    },
    /// A node's meminfo cannot be read.
    #[error("memory of NUMA node {node}: {source}")]
    Memory {
        /// The node.
        node: u32,
        /// The system's error.
        source: std::io::Error,
    },
    /// A node's meminfo has no total.
    #[error("no MemTotal for NUMA node {0}")]
    NoMemTotal(u32),
    /// A node's directory cannot be listed.
    #[error("CPUs of NUMA node {node}: {source}")]
    Cpus {
        /// The node.
        node: u32,
        /// The system's error.
        source: std::io::Error,
    },
    /// A CPU without a readable core id.
    #[error("no core id for CPU {cpu} of NUMA node {node}")]
    NoCoreId {
        /// The CPU.
        cpu: u32,
        /// The node.
        node: u32,
    },
    /// The network class directory cannot be listed.
    #[error("no NICs: {}: {source}", .dir.display())]
    NoNics {
        /// The directory.
        dir: PathBuf,
        /// The system's error.
        source: std::io::Error,
    },
    /// A NIC whose `numa_node` is not a number.
    #[error("bad NUMA node for NIC {0}")]
    BadNicNode(String),
}

/// `{"ram": [...], "cpus": [...], "nics": [...]}` for the tree under `root`.
pub fn topology(root: &Path) -> Result<Value, NumaError> {
    let node_dir = under(root, "/sys/devices/system/node");
    let entries = std::fs::read_dir(&node_dir).map_err(|source| NumaError::NoNodes {
        dir: node_dir.clone(),
        source,
    })?;
    let mut nodes: Vec<(u32, std::path::PathBuf)> = entries
        .flatten()
        .filter(|e| e.path().is_dir())
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let id = name.strip_prefix("node")?.parse().ok()?;
            Some((id, e.path()))
        })
        .collect();
    nodes.sort();

    let mut ram = Vec::new();
    // (node, core id) → thread ids, in order.
    let mut cores: BTreeMap<(u32, u64), Vec<u32>> = BTreeMap::new();
    for (id, dir) in &nodes {
        let meminfo = std::fs::read_to_string(dir.join("meminfo"))
            .map_err(|source| NumaError::Memory { node: *id, source })?;
        ram.push(
            json!({"numa_node": id, "size_kb": node_mem_total_kb(&meminfo)
            .ok_or(NumaError::NoMemTotal(*id))?}),
        );
        let mut threads: Vec<u32> = std::fs::read_dir(dir)
            .map_err(|source| NumaError::Cpus { node: *id, source })?
            .flatten()
            .filter_map(|e| {
                e.file_name()
                    .to_string_lossy()
                    .strip_prefix("cpu")?
                    .parse()
                    .ok()
            })
            .collect();
        threads.sort();
        for t in threads {
            let core: u64 = read_attr(&dir.join(format!("cpu{t}/topology/core_id")))
                .and_then(|v| v.parse().ok())
                .ok_or(NumaError::NoCoreId { cpu: t, node: *id })?;
            cores.entry((*id, core)).or_default().push(t);
        }
    }
    let cpus: Vec<Value> = cores
        .into_iter()
        .map(|((node, cpu), siblings)| {
            json!({"cpu": cpu, "numa_node": node, "thread_siblings": siblings})
        })
        .collect();
    Ok(json!({"ram": ram, "cpus": cpus, "nics": nics(root)?}))
}

/// `Node 0 MemTotal:  1234 kB` → 1234 (IPA reports kB as given).
pub fn node_mem_total_kb(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.contains("MemTotal"))?;
    let value = line.split_once(':')?.1.split_whitespace().next()?;
    value.parse().ok()
}

/// Every interface whose device states a NUMA node (`-1`: none, kept as IPA does).
fn nics(root: &Path) -> Result<Vec<Value>, NumaError> {
    let dir = under(root, "/sys/class/net");
    let entries = std::fs::read_dir(&dir).map_err(|source| NumaError::NoNics {
        dir: dir.clone(),
        source,
    })?;
    let mut names: Vec<String> = entries
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    let mut out = Vec::new();
    for name in names {
        let file = dir.join(&name).join("device/numa_node");
        if !file.is_file() {
            continue;
        }
        let node: i64 = read_attr(&file)
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| NumaError::BadNicNode(name.clone()))?;
        out.push(json!({"name": name, "numa_node": node}));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_meminfo_line() {
        let text = "Node 1 MemTotal:         523744 kB\nNode 1 MemFree:  1 kB\n";
        assert_eq!(node_mem_total_kb(text), Some(523744));
        assert_eq!(node_mem_total_kb("Node 1 MemFree: 1 kB\n"), None);
    }

    #[test]
    fn siblings_grouped_by_node_and_core() {
        let dir = tempfile::tempdir().unwrap();
        let node = dir.path().join("sys/devices/system/node");
        for (n, cpus) in [(0, [(0, 0), (2, 0)]), (1, [(1, 0), (3, 1)])] {
            let d = node.join(format!("node{n}"));
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(
                d.join("meminfo"),
                format!("Node {n} MemTotal: {} kB\n", 1000 + n),
            )
            .unwrap();
            for (cpu, core) in cpus {
                let t = d.join(format!("cpu{cpu}/topology"));
                std::fs::create_dir_all(&t).unwrap();
                std::fs::write(t.join("core_id"), format!("{core}\n")).unwrap();
            }
        }
        let nic = dir.path().join("sys/class/net/eth0/device");
        std::fs::create_dir_all(&nic).unwrap();
        std::fs::write(nic.join("numa_node"), "1\n").unwrap();
        std::fs::create_dir_all(dir.path().join("sys/class/net/lo")).unwrap();
        let t = topology(dir.path()).unwrap();
        assert_eq!(
            t,
            json!({
                "ram": [{"numa_node": 0, "size_kb": 1000}, {"numa_node": 1, "size_kb": 1001}],
                "cpus": [
                    {"cpu": 0, "numa_node": 0, "thread_siblings": [0, 2]},
                    {"cpu": 0, "numa_node": 1, "thread_siblings": [1]},
                    {"cpu": 1, "numa_node": 1, "thread_siblings": [3]},
                ],
                "nics": [{"name": "eth0", "numa_node": 1}],
            })
        );
        // A missing core id voids the whole topology, as in IPA.
        std::fs::remove_file(node.join("node1/cpu3/topology/core_id")).unwrap();
        assert!(topology(dir.path())
            .unwrap_err()
            .to_string()
            .contains("CPU 3"));
    }
}
