//! The agent's layer rules, checked on its production module tree
//! (`scan.rs`): every top-level module of `src/` has a layer in
//! [`LAYERS`]; none uses a module of a higher layer; no two top-level
//! modules depend on each other; no production module reaches itself
//! through the modules it uses. `build.rs` runs [`violations`] before the
//! library compiles, so a broken rule fails `cargo build`;
//! `tests/layers.rs` runs the same rules one by one, on the tree and on
//! small fixture trees.
//!
//! Why not one crate per layer: the rules hold for 60 modules in six
//! layers, and crates would turn every `pub(crate)` item used across a
//! layer into public API of its crate, while still not seeing cycles
//! inside a layer or inside a crate, which this check does.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use crate::scan;

/// Layers, lowest first.
pub const LAYERS: &[(&str, &[&str])] = &[
    (
        "foundations",
        &[
            "bootphases",
            "config",
            "discovery",
            "errfmt",
            "metrics",
            "net",
            "node",
            "rtc",
            "timesync",
            "tls",
            "tool",
        ],
    ),
    (
        "hardware and devices",
        &[
            "burnin",
            "collectors",
            "disk",
            "hints",
            "hostroot",
            "inventory",
            "lldp",
            "lockdown",
            "logs",
            "netconf",
            "pstore",
            "rescue",
        ],
    ),
    (
        "disk contents",
        &[
            "configdrive",
            "container_steps",
            "exec_steps",
            "grub",
            "ignition",
            "image",
            "inject",
            "nicfw",
            "partimage",
            "raid",
            "selection",
            "uefi",
            "vmedia",
        ],
    ),
    ("the conductor's client", &["conductor"]),
    (
        "the agent's core",
        &["command", "commands", "power", "state"],
    ),
    (
        "serving, driving and the process",
        &[
            "agent",
            "api",
            "cli",
            "init",
            "inspect",
            "server",
            "startup",
            "testconductor",
        ],
    ),
];

/// The layer index of `module`.
pub fn layer(module: &str) -> Option<usize> {
    LAYERS.iter().position(|(_, ms)| ms.contains(&module))
}

/// Top-level module → the top-level modules it uses.
pub type Graph = BTreeMap<String, BTreeSet<String>>;

/// The top-level [`Graph`] of `tree`.
pub fn graph(tree: &scan::Tree) -> Graph {
    let mut g = Graph::new();
    for (m, used) in &tree.uses {
        let Some(top) = m.first() else { continue };
        let entry = g.entry(top.clone()).or_default();
        for u in used {
            if let Some(theirs) = u.first().filter(|t| *t != top) {
                entry.insert(theirs.clone());
            }
        }
    }
    g
}

/// Top-level modules without a layer.
pub fn without_layer(g: &Graph) -> Vec<String> {
    g.keys().filter(|m| layer(m).is_none()).cloned().collect()
}

/// Uses of a higher layer, one line each.
pub fn upward_uses(g: &Graph) -> Vec<String> {
    let mut wrong = Vec::new();
    for (m, used) in g {
        let Some(own) = layer(m) else { continue };
        for u in used {
            if let Some(theirs) = layer(u).filter(|&l| l > own) {
                wrong.push(format!(
                    "{m} ({}) uses {u} ({})",
                    LAYERS[own].0, LAYERS[theirs].0
                ));
            }
        }
    }
    wrong
}

/// Top-level modules in a cycle.
pub fn top_level_cycles(g: &Graph) -> Vec<Vec<String>> {
    cycles(g)
}

/// Production files that import each other, directly or through others,
/// one cycle per line. A module's use of its own ancestors
/// (`super::Error`) is not counted: a parent is its children's namespace,
/// and its items (shared types, re-exports) are theirs by Rust's
/// visibility rules; a cycle needs a module to depend on a sibling or a
/// module elsewhere that depends back.
pub fn file_cycles(tree: &scan::Tree) -> Vec<String> {
    let edges: BTreeMap<scan::ModPath, BTreeSet<scan::ModPath>> = tree
        .uses
        .iter()
        .map(|(m, used)| {
            let kept = used.iter().filter(|u| !m.starts_with(u)).cloned().collect();
            (m.clone(), kept)
        })
        .collect();
    cycles(&edges)
        .iter()
        .map(|c| {
            c.iter()
                .map(|m| tree.files[m].display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        })
        .collect()
}

/// Every broken rule in the library whose sources are in `src`, one
/// message each; empty when the layers hold.
pub fn violations(src: &Path) -> Vec<String> {
    let tree = scan::Tree::read(src);
    let g = graph(&tree);
    let mut out = Vec::new();
    for m in without_layer(&g) {
        out.push(format!(
            "module {m} has no layer in agent/layers/check.rs's LAYERS"
        ));
    }
    for w in upward_uses(&g) {
        out.push(format!("layering broken: {w}"));
    }
    for c in top_level_cycles(&g) {
        out.push(format!("top-level modules in a cycle: {}", c.join(", ")));
    }
    for c in file_cycles(&tree) {
        out.push(format!("modules that import each other: {c}"));
    }
    out
}

/// The strongly connected components of more than one module (Tarjan).
fn cycles<T: Ord + Clone>(g: &BTreeMap<T, BTreeSet<T>>) -> Vec<Vec<T>> {
    struct S<'a, T> {
        g: &'a BTreeMap<T, BTreeSet<T>>,
        index: BTreeMap<T, usize>,
        low: BTreeMap<T, usize>,
        stack: Vec<T>,
        on: BTreeSet<T>,
        out: Vec<Vec<T>>,
    }
    fn visit<T: Ord + Clone>(s: &mut S<'_, T>, v: &T) {
        let i = s.index.len();
        s.index.insert(v.clone(), i);
        s.low.insert(v.clone(), i);
        s.stack.push(v.clone());
        s.on.insert(v.clone());
        for w in s.g.get(v).into_iter().flatten() {
            if !s.index.contains_key(w) {
                visit(s, w);
                let l = s.low[v].min(s.low[w]);
                s.low.insert(v.clone(), l);
            } else if s.on.contains(w) {
                let l = s.low[v].min(s.index[w]);
                s.low.insert(v.clone(), l);
            }
        }
        if s.low[v] == s.index[v] {
            let mut comp = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on.remove(&w);
                let done = &w == v;
                comp.push(w);
                if done {
                    break;
                }
            }
            if comp.len() > 1 {
                comp.sort();
                s.out.push(comp);
            }
        }
    }
    let mut s = S {
        g,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in g.keys() {
        if !s.index.contains_key(v) {
            visit(&mut s, v);
        }
    }
    s.out
}
