//! The docs' relative links resolve: every `[text](target)` in the README
//! and the pages it leads to that is not an absolute URL names a file or
//! directory that exists, and a `#anchor` names a heading of the target
//! page (GitHub's slugs). Links inside code spans and fenced blocks are
//! not links and are skipped.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The repository's root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("agent/ has a parent")
        .to_path_buf()
}

/// The pages checked: the README, the agent's docs and every README next
/// to what it describes.
fn pages() -> Vec<PathBuf> {
    let root = root();
    let mut pages: Vec<PathBuf> = [
        "README.md",
        "agent/ARCHITECTURE.md",
        "agent/PROTOCOL.md",
        "agent/fuzz/README.md",
        "hardware-tests/README.md",
        "image-builder/README.md",
        "ci/ironic/README.md",
        "ci/redfish/README.md",
    ]
    .iter()
    .map(|p| root.join(p))
    .collect();
    let docs = root.join("agent/docs");
    let mut more: Vec<PathBuf> = std::fs::read_dir(&docs)
        .expect("agent/docs")
        .map(|e| e.expect("agent/docs entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    more.sort();
    pages.extend(more);
    pages
}

/// The page's text without fenced code blocks and inline code spans, line
/// by line (numbered from 1).
fn prose(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut fenced = false;
    for (i, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        // Drop `code spans`: the text between the 1st and 2nd backtick,
        // the 3rd and 4th, ...; an unclosed backtick leaves the rest as is.
        let parts: Vec<&str> = line.split('`').collect();
        let unclosed = parts.len() % 2 == 0;
        let kept: String = parts
            .iter()
            .enumerate()
            .filter(|(j, _)| j % 2 == 0 || (unclosed && *j == parts.len() - 1))
            .map(|(_, p)| *p)
            .collect();
        out.push((i + 1, kept));
    }
    out
}

/// The `(target)` of every `[text](target)` on a line.
fn link_targets(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = line;
    while let Some(at) = rest.find("](") {
        let after = &rest[at + 2..];
        match after.find(')') {
            Some(end) => {
                out.push(after[..end].trim().to_string());
                rest = &after[end + 1..];
            }
            None => break,
        }
    }
    out
}

/// GitHub's anchor for a heading: lower case, letters, digits, `-` and
/// `_` kept, spaces to `-`, everything else dropped.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors of a page's headings (a repeated heading gets `-1`, `-2`).
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced || !line.starts_with('#') {
            continue;
        }
        let heading = line.trim_start_matches('#');
        if !heading.starts_with(' ') {
            continue;
        }
        let base = slug(heading);
        let mut s = base.clone();
        let mut n = 0;
        while !seen.insert(s.clone()) {
            n += 1;
            s = format!("{base}-{n}");
        }
    }
    seen
}

fn is_absolute_url(target: &str) -> bool {
    target.contains("://") || target.starts_with("mailto:")
}

#[test]
fn relative_links_and_their_anchors_resolve() {
    let root = root();
    let mut broken = Vec::new();
    let mut checked = 0;
    for page in pages() {
        let text =
            std::fs::read_to_string(&page).unwrap_or_else(|e| panic!("{}: {e}", page.display()));
        let shown = page.strip_prefix(&root).unwrap_or(&page).display();
        for (n, line) in prose(&text) {
            for target in link_targets(&line) {
                if is_absolute_url(&target) {
                    continue;
                }
                checked += 1;
                let (path, anchor) = match target.split_once('#') {
                    Some((p, a)) => (p, Some(a)),
                    None => (target.as_str(), None),
                };
                let file = if path.is_empty() {
                    page.clone()
                } else {
                    page.parent().expect("a page has a directory").join(path)
                };
                if !file.exists() {
                    broken.push(format!("{shown}:{n}: {target}: no such file"));
                    continue;
                }
                let Some(anchor) = anchor else { continue };
                let Ok(target_text) = std::fs::read_to_string(&file) else {
                    broken.push(format!("{shown}:{n}: {target}: an anchor into a non-page"));
                    continue;
                };
                if !anchors(&target_text).contains(anchor) {
                    broken.push(format!("{shown}:{n}: {target}: no heading #{anchor}"));
                }
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
    assert!(checked >= 40, "only {checked} relative links found");
}

#[test]
fn the_readme_is_a_door() {
    let readme = std::fs::read_to_string(root().join("README.md")).expect("README.md");
    let lines = readme.lines().count();
    assert!(
        lines <= 300,
        "README.md has {lines} lines; move detail next to what it describes"
    );
    for section in [
        "## The two commands",
        "## Using it with Ironic",
        "## Using it with Metal3",
        "## Using it with OpenShift",
        "## Headline figures",
    ] {
        assert!(
            readme.contains(&format!("\n{section}\n")),
            "README.md lacks {section:?}"
        );
    }
    for command in ["ci/demo", "ci/test"] {
        assert!(
            root().join(command).is_file(),
            "README's {command} is missing"
        );
    }
}

#[test]
fn slugs_are_githubs() {
    assert_eq!(slug(" How `ci/test` runs them"), "how-citest-runs-them");
    assert_eq!(
        slug(" 6.3 Ignition and CoreOS (Metal3, OpenShift)"),
        "63-ignition-and-coreos-metal3-openshift"
    );
    assert_eq!(slug(" The demo (`ci/demo`)"), "the-demo-cidemo");
    let a = anchors("# A\n## B\n```\n# not a heading\n```\n## B\n");
    assert_eq!(a, BTreeSet::from(["a".into(), "b".into(), "b-1".into()]));
    assert_eq!(
        link_targets("see [x](a.md#b) and [y](c/), not [z]"),
        ["a.md#b", "c/"]
    );
    assert_eq!(
        prose("a `[z](no.md)` [y](c/)\n```\n[w](x)\n```\n")
            .into_iter()
            .map(|(_, l)| l)
            .collect::<Vec<_>>(),
        ["a  [y](c/)"]
    );
}
