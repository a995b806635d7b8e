//! The agent's layers point one way. Each top-level module of `agent/src`
//! belongs to a layer; production code (`crate::…` paths outside comments,
//! outside `tests.rs` files and `tests/` folders, and before a file's first
//! `#[cfg(test)]`) may use its own layer and the ones below, never one
//! above. No two modules depend on each other except the one documented
//! pair: `state` owns the command history that `commands` keeps, and every
//! command handler receives the `state`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

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
    ("the agent's core", &["commands", "power", "state"]),
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

/// The one mutual dependency allowed (see the module docs).
const ALLOWED_CYCLE: [&str; 2] = ["commands", "state"];

/// The layer index of `module`.
fn layer(module: &str) -> Option<usize> {
    LAYERS.iter().position(|(_, ms)| ms.contains(&module))
}

/// `crate::x` module names used by production code in `path` (a file or a
/// directory, recursively).
fn uses(path: &Path, out: &mut BTreeSet<String>) {
    if path.is_dir() {
        for e in std::fs::read_dir(path).expect("read_dir") {
            let p = e.expect("entry").path();
            if p.file_name().is_some_and(|n| n == "tests") {
                continue;
            }
            uses(&p, out);
        }
        return;
    }
    if path.extension().is_none_or(|e| e != "rs")
        || path.file_name().is_some_and(|n| n == "tests.rs")
    {
        return;
    }
    let text = std::fs::read_to_string(path).expect("read source");
    for line in text.lines() {
        let code = line.trim_start();
        if code.starts_with("#[cfg(test)]") {
            break;
        }
        if code.starts_with("//") {
            continue;
        }
        let mut rest = code;
        while let Some(i) = rest.find("crate::") {
            rest = &rest[i + "crate::".len()..];
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if name.chars().next().is_some_and(|c| c.is_ascii_lowercase()) {
                out.insert(name);
            }
        }
    }
}

/// Module → the modules it uses.
fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut g = BTreeMap::new();
    for e in std::fs::read_dir(&src).expect("read src") {
        let p = e.expect("entry").path();
        let name = p.file_stem().expect("name").to_string_lossy().into_owned();
        if name == "lib" || name == "main" {
            continue;
        }
        let mut used = BTreeSet::new();
        uses(&p, &mut used);
        used.remove(&name);
        g.insert(name, used);
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

#[test]
fn no_cycles_but_the_documented_one() {
    let g = graph();
    let mut cycles = Vec::new();
    for (a, used) in &g {
        for b in used {
            // b reaches a again?
            let mut seen = BTreeSet::new();
            let mut stack = vec![b.clone()];
            while let Some(x) = stack.pop() {
                if !seen.insert(x.clone()) {
                    continue;
                }
                stack.extend(g.get(&x).into_iter().flatten().cloned());
            }
            let pair = [a.as_str(), b.as_str()];
            let allowed = ALLOWED_CYCLE.contains(&pair[0]) && ALLOWED_CYCLE.contains(&pair[1]);
            if seen.contains(a) && !allowed {
                cycles.push(format!("{a} -> {b} -> … -> {a}"));
            }
        }
    }
    assert!(
        cycles.is_empty(),
        "dependency cycles:\n{}",
        cycles.join("\n")
    );
}
