//! The agent's layer rules (`layers/check.rs`, which `build.rs` also runs
//! before every build of the library), one test per rule on the real
//! module tree, and the rules shown to catch what they are for on small
//! fixture trees: an upward import, a cycle, a grouped import and code
//! after a file's first `#[cfg(test)]`.

use std::path::Path;

#[path = "../layers/scan.rs"]
mod scan;

#[path = "../layers/check.rs"]
mod check;

fn tree() -> scan::Tree {
    scan::Tree::read(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"))
}

#[test]
fn every_module_has_a_layer() {
    let missing = check::without_layer(&check::graph(&tree()));
    assert!(
        missing.is_empty(),
        "modules without a layer in layers/check.rs: {missing:?}"
    );
}

#[test]
fn no_module_uses_a_higher_layer() {
    let wrong = check::upward_uses(&check::graph(&tree()));
    assert!(wrong.is_empty(), "layering broken:\n{}", wrong.join("\n"));
}

#[test]
fn no_two_layers_modules_depend_on_each_other() {
    let found = check::top_level_cycles(&check::graph(&tree()));
    assert!(found.is_empty(), "top-level modules in a cycle: {found:?}");
}

#[test]
fn no_import_cycle_among_production_modules() {
    let found = check::file_cycles(&tree());
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

/// A library in a temporary directory: `files` are (path under `src/`,
/// text).
fn fixture(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (path, text) in files {
        let p = dir.path().join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    dir
}

#[test]
fn what_build_rs_refuses_an_upward_import_a_cycle_and_an_unknown_module() {
    // disk (hardware) importing commands (the core), hidden in a grouped
    // import after a test module.
    let upward = fixture(&[
        ("lib.rs", "pub mod commands;\npub mod disk;\n"),
        ("commands.rs", "pub fn run() { crate::disk::probe(); }\n"),
        (
            "disk.rs",
            "#[cfg(test)]\nmod tests {}\nuse crate::{commands::{run}};\npub fn probe() {}\n",
        ),
    ]);
    let v = check::violations(upward.path());
    assert!(
        v.iter().any(|l| l
            == "layering broken: disk (hardware and devices) uses commands (the agent's core)"),
        "{v:?}"
    );
    assert!(
        v.iter()
            .any(|l| l == "top-level modules in a cycle: commands, disk"),
        "{v:?}"
    );

    // Two files of one layer importing each other; a module with no layer.
    let cycle = fixture(&[
        ("lib.rs", "mod disk;\nmod brand_new;\n"),
        ("disk/mod.rs", "mod a;\nmod b;\n"),
        ("disk/a.rs", "use super::b::x;\npub fn y() {}\n"),
        ("disk/b.rs", "pub fn x() { super::a::y() }\n"),
        ("brand_new.rs", "\n"),
    ]);
    let v = check::violations(cycle.path());
    assert!(
        v.iter()
            .any(|l| l.starts_with("modules that import each other: ")
                && l.contains("disk/a.rs")
                && l.contains("disk/b.rs")),
        "{v:?}"
    );
    assert!(
        v.iter()
            .any(|l| l.contains("module brand_new has no layer")),
        "{v:?}"
    );

    // The same imports pointing down are fine, and test-only code is not
    // production code.
    let fine = fixture(&[
        ("lib.rs", "pub mod commands;\npub mod disk;\n"),
        (
            "commands.rs",
            "use crate::disk::probe;\npub fn run() { probe() }\n",
        ),
        (
            "disk.rs",
            "pub fn probe() {}\n#[cfg(test)]\nmod tests { use crate::commands::run; }\n",
        ),
    ]);
    assert_eq!(check::violations(fine.path()), Vec::<String>::new());
}
