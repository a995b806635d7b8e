//! The rule shown catching what it is for on small fixture crates: a
//! circle between sibling files, one hidden in a grouped import after a
//! test module, and test-only code left out; then the workspace itself.

use std::path::Path;

use super::{circles, scan};

/// A crate in a temporary directory: `files` are (path, text); the root
/// is `lib.rs`.
fn fixture(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (path, text) in files {
        let p = dir.path().join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    dir
}

fn circles_of(dir: &Path) -> Vec<String> {
    circles::file_cycles(&scan::Tree::read(&dir.join("lib.rs")))
}

#[test]
fn two_sibling_files_importing_each_other_are_a_circle() {
    let d = fixture(&[
        ("lib.rs", "mod disk;\n"),
        ("disk/mod.rs", "mod a;\nmod b;\n"),
        ("disk/a.rs", "use super::b::x;\npub fn y() {}\n"),
        ("disk/b.rs", "pub fn x() { super::a::y() }\n"),
    ]);
    let c = circles_of(d.path());
    assert_eq!(c.len(), 1, "{c:?}");
    assert!(
        c[0].contains("disk/a.rs") && c[0].contains("disk/b.rs"),
        "{c:?}"
    );
}

#[test]
fn a_grouped_import_after_a_test_module_is_read() {
    let d = fixture(&[
        ("lib.rs", "pub mod commands;\npub mod disk;\n"),
        ("commands.rs", "pub fn run() { crate::disk::probe(); }\n"),
        (
            "disk.rs",
            "#[cfg(test)]\nmod tests {}\nuse crate::{commands::{run}};\npub fn probe() {}\n",
        ),
    ]);
    let c = circles_of(d.path());
    assert!(
        c.len() == 1 && c[0].contains("commands.rs") && c[0].contains("disk.rs"),
        "{c:?}"
    );
}

#[test]
fn imports_one_way_and_test_only_code_are_no_circle() {
    let d = fixture(&[
        ("lib.rs", "pub mod commands;\npub mod disk;\nmod parent;\n"),
        (
            "commands.rs",
            "use crate::disk::probe;\npub fn run() { probe() }\n",
        ),
        (
            "disk.rs",
            "pub fn probe() {}\n#[cfg(test)]\nmod tests { use crate::commands::run; }\n",
        ),
        // A child using its parent's items is not a circle.
        (
            "parent/mod.rs",
            "mod child;\npub struct Error;\npub fn f() { child::g() }\n",
        ),
        (
            "parent/child.rs",
            "pub fn g() -> super::Error { super::Error }\n",
        ),
    ]);
    assert_eq!(circles_of(d.path()), Vec::<String>::new());
}

#[test]
fn the_agent_library_is_read_whole() {
    // Blind spots of a line scanner: grouped imports, test modules.
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let t = scan::Tree::read(&repo.join("agent/crates/core/src/lib.rs"));
    let m = |p: &str| p.split("::").map(String::from).collect::<Vec<_>>();
    assert!(t.files.contains_key(&m("commands::steps")));
    assert!(!t
        .files
        .keys()
        .any(|k| k.last().is_some_and(|l| l == "tests")));
    // `use super::dispatch::params::{ExecuteStep, GetSteps, ParamsError};`
    // resolves to the module it names, below the one it starts from.
    let steps = &t.uses[&m("commands::steps")];
    assert!(
        steps.contains(&m("commands::dispatch::params")),
        "{steps:?}"
    );
    assert!(steps.contains(&m("commands::managers")), "{steps:?}");
}
