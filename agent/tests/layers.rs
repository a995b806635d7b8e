//! The agent's layers point one way. Each top-level module of `agent/src`
//! belongs to a layer; production code (the module tree from `lib.rs`
//! without `#[cfg(test)]` items, read by `layers/scan.rs`: grouped imports
//! expanded, comments and literals ignored) may use its own layer and the
//! ones below, never one above; no two top-level modules depend on each
//! other, and no production module reaches itself through the modules it
//! uses.
//!
//! A split into one crate per layer would make an upward import a build
//! error; until then this check is what enforces the layers (it also sees
//! cycles inside a layer, which crates would not).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

#[path = "layers/scan.rs"]
mod scan;

/// Layers, lowest first.
const LAYERS: &[(&str, &[&str])] = &[
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
fn layer(module: &str) -> Option<usize> {
    LAYERS.iter().position(|(_, ms)| ms.contains(&module))
}

fn tree() -> scan::Tree {
    scan::Tree::read(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"))
}

/// Top-level module → the top-level modules it uses.
fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (m, used) in tree().uses {
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

#[test]
fn every_module_has_a_layer() {
    let missing: Vec<_> = graph().into_keys().filter(|m| layer(m).is_none()).collect();
    assert!(
        missing.is_empty(),
        "modules without a layer in tests/layers.rs: {missing:?}"
    );
}

#[test]
fn no_module_uses_a_higher_layer() {
    let mut wrong = Vec::new();
    for (m, used) in graph() {
        let Some(own) = layer(&m) else { continue };
        for u in used {
            if let Some(theirs) = layer(&u).filter(|&l| l > own) {
                wrong.push(format!(
                    "{m} ({}) uses {u} ({})",
                    LAYERS[own].0, LAYERS[theirs].0
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "layering broken:\n{}", wrong.join("\n"));
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

#[test]
fn no_two_layers_modules_depend_on_each_other() {
    let found = cycles(&graph());
    assert!(found.is_empty(), "top-level modules in a cycle: {found:?}");
}

/// No production module reaches itself through the modules it uses. A
/// module's use of its own ancestors (`super::Error`) is not counted: a
/// parent is its children's namespace, and its items (shared types,
/// re-exports) are theirs by Rust's visibility rules; a cycle needs a
/// module to depend on a sibling or a module elsewhere that depends back.
#[test]
fn no_import_cycle_among_production_modules() {
    let t = tree();
    let edges: BTreeMap<scan::ModPath, BTreeSet<scan::ModPath>> = t
        .uses
        .iter()
        .map(|(m, used)| {
            let kept = used.iter().filter(|u| !m.starts_with(u)).cloned().collect();
            (m.clone(), kept)
        })
        .collect();
    let found: Vec<String> = cycles(&edges)
        .iter()
        .map(|c| {
            c.iter()
                .map(|m| t.files[m].display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        })
        .collect();
    assert!(
        found.is_empty(),
        "modules that import each other, directly or through others:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_module_tree_is_read_whole() {
    // Blind spots of a line scanner: a grouped import, and production code
    // after a file's first `#[cfg(test)]` (the Conductor trait).
    let t = tree();
    let m = |p: &str| p.split("::").map(String::from).collect::<Vec<_>>();
    assert!(t.files.contains_key(&m("conductor")));
    assert!(t.files.contains_key(&m("commands::steps")));
    assert!(!t
        .files
        .keys()
        .any(|k| k.last().is_some_and(|l| l == "tests")));
    assert!(t.uses[&m("api")].contains(&m("commands::registry")));
}
