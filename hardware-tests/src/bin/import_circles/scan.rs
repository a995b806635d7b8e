//! Reads a crate target's production module tree and what each module
//! uses, for the cycle check of `circles.rs`: the tree is followed from
//! the target's root file (`lib.rs`, `main.rs`, a test's file) through
//! `mod x;` declarations that are not `#[cfg(test)]`; in each file comments, string and character literals
//! and every `#[cfg(test)]` item are removed; then every `use` tree
//! (grouped ones expanded) and every path starting with `crate::`,
//! `super::`, `self::` or a child module's name is resolved to the deepest
//! module it names.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A module's path below the crate (`["commands", "steps"]`).
pub(crate) type ModPath = Vec<String>;

/// The production modules and the modules each one uses.
#[derive(Debug, Default)]
pub(crate) struct Tree {
    /// Module → its file.
    pub files: BTreeMap<ModPath, PathBuf>,
    /// Module → the modules it uses (not itself).
    pub uses: BTreeMap<ModPath, BTreeSet<ModPath>>,
}

impl Tree {
    /// The tree of the target whose root file is `root`.
    pub(crate) fn read(root: &Path) -> Tree {
        let mut codes = BTreeMap::new();
        let mut files = BTreeMap::new();
        let dir = root.parent().unwrap_or(Path::new("."));
        walk(root, dir, Vec::new(), &mut files, &mut codes);
        let modules: BTreeSet<ModPath> = files.keys().cloned().collect();
        let mut uses = BTreeMap::new();
        for (m, code) in &codes {
            let mut used = BTreeSet::new();
            for path in paths(code) {
                if let Some(target) = resolve(m, &path, &modules) {
                    if &target != m {
                        used.insert(target);
                    }
                }
            }
            uses.insert(m.clone(), used);
        }
        Tree { files, uses }
    }
}

fn walk(
    file: &Path,
    dir: &Path,
    module: ModPath,
    files: &mut BTreeMap<ModPath, PathBuf>,
    codes: &mut BTreeMap<ModPath, String>,
) {
    // A file that cannot be read is rustc's to report.
    let Ok(text) = std::fs::read_to_string(file) else {
        return;
    };
    let code = without_test_items(&strip(&text));
    for child in declared_modules(&code) {
        let (f, d) = if dir.join(format!("{child}.rs")).is_file() {
            (dir.join(format!("{child}.rs")), dir.join(&child))
        } else {
            (dir.join(&child).join("mod.rs"), dir.join(&child))
        };
        let mut m = module.clone();
        m.push(child);
        walk(&f, &d, m, files, codes);
    }
    files.insert(module.clone(), file.to_path_buf());
    codes.insert(module, code);
}

/// The text with comments removed and literals emptied (`""`, `' '`).
pub(crate) fn strip(text: &str) -> String {
    let c: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < c.len() {
        let next = c.get(i + 1).copied();
        match c[i] {
            '/' if next == Some('/') => {
                while i < c.len() && c[i] != '\n' {
                    i += 1;
                }
            }
            '/' if next == Some('*') => {
                let mut depth = 0;
                while i < c.len() {
                    if c[i] == '/' && c.get(i + 1) == Some(&'*') {
                        depth += 1;
                        i += 2;
                    } else if c[i] == '*' && c.get(i + 1) == Some(&'/') {
                        depth -= 1;
                        i += 2;
                        if depth == 0 {
                            break;
                        }
                    } else {
                        i += 1;
                    }
                }
                out.push(' ');
            }
            'r' | 'b' if is_raw_string(&c, i) => {
                // r"…", r#"…"#, br#"…"#
                let mut j = i + 1;
                if c[i] == 'b' {
                    j += 1;
                }
                let mut hashes = 0;
                while c.get(j) == Some(&'#') {
                    hashes += 1;
                    j += 1;
                }
                j += 1; // the opening quote
                loop {
                    if j >= c.len() {
                        break;
                    }
                    if c[j] == '"' && (1..=hashes).all(|h| c.get(j + h) == Some(&'#')) {
                        j += 1 + hashes;
                        break;
                    }
                    j += 1;
                }
                out.push_str("\"\"");
                i = j;
            }
            '"' => {
                i += 1;
                while i < c.len() && c[i] != '"' {
                    if c[i] == '\\' {
                        i += 1;
                    }
                    i += 1;
                }
                i += 1;
                out.push_str("\"\"");
            }
            '\'' => {
                // A character literal ('x', '\n', '\u{..}') or a lifetime.
                if next == Some('\\') {
                    let mut j = i + 2;
                    while j < c.len() && c[j] != '\'' {
                        j += 1;
                    }
                    i = j + 1;
                    out.push_str("' '");
                } else if c.get(i + 2) == Some(&'\'') {
                    i += 3;
                    out.push_str("' '");
                } else {
                    out.push('\'');
                    i += 1;
                }
            }
            ch => {
                out.push(ch);
                i += 1;
            }
        }
    }
    out
}

fn is_raw_string(c: &[char], i: usize) -> bool {
    if i > 0 && (c[i - 1].is_alphanumeric() || c[i - 1] == '_') {
        return false;
    }
    let mut j = i + 1;
    if c[i] == 'b' {
        if c.get(j) != Some(&'r') {
            return false;
        }
        j += 1;
    }
    while c.get(j) == Some(&'#') {
        j += 1;
    }
    c.get(j) == Some(&'"')
}

/// `code` without the items under `#[cfg(test)]` (a `mod x;`, a `use`, a
/// block item such as `mod tests { … }`).
pub(crate) fn without_test_items(code: &str) -> String {
    let c: Vec<char> = code.chars().collect();
    let mut out = String::new();
    let mut i = 0;
    while i < c.len() {
        if let Some(end) = cfg_test_attr(&c, i) {
            i = item_end(&c, skip_attrs(&c, end));
            continue;
        }
        out.push(c[i]);
        i += 1;
    }
    out
}

/// The end of a `#[cfg(test)]` attribute starting at `i`, if one does.
fn cfg_test_attr(c: &[char], i: usize) -> Option<usize> {
    if c[i] != '#' {
        return None;
    }
    let end = matching(c, skip_ws(c, i + 1), '[', ']')?;
    let inner: String = c[i + 1..end]
        .iter()
        .filter(|ch| !ch.is_whitespace())
        .collect();
    (inner == "[cfg(test)]").then_some(end)
}

fn skip_ws(c: &[char], mut i: usize) -> usize {
    while i < c.len() && c[i].is_whitespace() {
        i += 1;
    }
    i
}

/// The index just past the bracket that closes the one at `i`.
fn matching(c: &[char], i: usize, open: char, close: char) -> Option<usize> {
    if c.get(i) != Some(&open) {
        return None;
    }
    let mut depth = 0;
    for (j, &ch) in c.iter().enumerate().skip(i) {
        if ch == open {
            depth += 1;
        } else if ch == close {
            depth -= 1;
            if depth == 0 {
                return Some(j + 1);
            }
        }
    }
    None
}

fn skip_attrs(c: &[char], mut i: usize) -> usize {
    loop {
        let j = skip_ws(c, i);
        if c.get(j) == Some(&'#') {
            if let Some(end) = matching(c, skip_ws(c, j + 1), '[', ']') {
                i = end;
                continue;
            }
        }
        return j;
    }
}

/// The end of the item starting at `i`: its `;` or its block's `}`,
/// whichever comes first outside brackets.
fn item_end(c: &[char], i: usize) -> usize {
    let mut depth = 0i32;
    let mut j = i;
    while j < c.len() {
        match c[j] {
            '(' | '[' => depth += 1,
            ')' | ']' => depth -= 1,
            ';' if depth == 0 => return j + 1,
            '{' if depth == 0 => return matching(c, j, '{', '}').unwrap_or(c.len()),
            _ => {}
        }
        j += 1;
    }
    c.len()
}

/// Tokens: identifiers, `::`, and single punctuation characters.
fn tokens(code: &str) -> Vec<String> {
    let c: Vec<char> = code.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < c.len() {
        let ch = c[i];
        if ch.is_alphabetic() || ch == '_' {
            let start = i;
            while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_') {
                i += 1;
            }
            out.push(c[start..i].iter().collect());
        } else if ch == ':' && c.get(i + 1) == Some(&':') {
            out.push("::".into());
            i += 2;
        } else if ch.is_whitespace() {
            i += 1;
        } else {
            out.push(ch.to_string());
            i += 1;
        }
    }
    out
}

/// The modules `mod x;` declares (inline `mod x { … }` stays part of the
/// file).
fn declared_modules(code: &str) -> Vec<String> {
    let t = tokens(code);
    let mut out = Vec::new();
    for w in t.windows(3) {
        if w[0] == "mod" && w[2] == ";" {
            out.push(w[1].clone());
        }
    }
    out
}

/// Every path in `code`: `use` trees expanded, then every `a::b::c`.
fn paths(code: &str) -> Vec<Vec<String>> {
    let t = tokens(code);
    let mut out = Vec::new();
    let mut i = 0;
    while i < t.len() {
        if t[i] == "use" {
            let end = t[i..]
                .iter()
                .position(|x| x == ";")
                .map_or(t.len(), |p| i + p);
            expand(&t[i + 1..end], Vec::new(), &mut out);
            i = end;
            continue;
        }
        if is_ident(&t[i]) && t.get(i + 1).is_some_and(|x| x == "::") {
            let mut p = vec![t[i].clone()];
            let mut j = i + 1;
            while t.get(j).is_some_and(|x| x == "::") && t.get(j + 1).is_some_and(|x| is_ident(x)) {
                p.push(t[j + 1].clone());
                j += 2;
            }
            out.push(p);
            i = j;
            continue;
        }
        i += 1;
    }
    out
}

fn is_ident(s: &str) -> bool {
    s.chars()
        .next()
        .is_some_and(|c| c.is_alphabetic() || c == '_')
}

/// Expands the use tree `t` below `prefix` into paths.
fn expand(t: &[String], prefix: Vec<String>, out: &mut Vec<Vec<String>>) {
    let mut p = prefix;
    let mut i = 0;
    // `pub use`, `pub(crate) use` arrive without the `use`; a leading `::`
    // names an external crate.
    while i < t.len() {
        match t[i].as_str() {
            "::" => i += 1,
            "{" => {
                let mut depth = 0;
                let mut start = i + 1;
                for j in i..t.len() {
                    match t[j].as_str() {
                        "{" => depth += 1,
                        "}" => {
                            depth -= 1;
                            if depth == 0 {
                                expand(&t[start..j], p.clone(), out);
                                break;
                            }
                        }
                        "," if depth == 1 => {
                            expand(&t[start..j], p.clone(), out);
                            start = j + 1;
                        }
                        _ => {}
                    }
                }
                return;
            }
            "as" | "*" => break,
            s if is_ident(s) => {
                p.push(s.to_string());
                i += 1;
            }
            _ => break,
        }
    }
    if !p.is_empty() {
        out.push(p);
    }
}

/// The deepest module of the crate that `path`, written in module `m`,
/// names, if it names one.
fn resolve(m: &ModPath, path: &[String], modules: &BTreeSet<ModPath>) -> Option<ModPath> {
    let (mut base, rest): (ModPath, &[String]) = match path.first()?.as_str() {
        "crate" => (Vec::new(), &path[1..]),
        "self" => (m.clone(), &path[1..]),
        "super" => {
            let mut b = m.clone();
            let mut k = 0;
            while path.get(k).is_some_and(|s| s == "super") {
                b.pop()?;
                k += 1;
            }
            (b, &path[k..])
        }
        first => {
            let mut child = m.clone();
            child.push(first.to_string());
            if !modules.contains(&child) {
                return None;
            }
            (m.clone(), path)
        }
    };
    for seg in rest {
        let mut next = base.clone();
        next.push(seg.clone());
        if !modules.contains(&next) {
            break;
        }
        base = next;
    }
    Some(base)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grouped_uses_and_test_items() {
        let code = without_test_items(&strip(
            "use crate::{a::b, c::{d, e as f}};\n// crate::x\n#[cfg(test)]\nmod t { use crate::y; }\nfn g() { crate::z::h(\"crate::s\"); }\n#[cfg(test)]\nmod u;\npub mod v;",
        ));
        let p = paths(&code);
        let names: Vec<String> = p.iter().map(|p| p.join("::")).collect();
        assert!(names.contains(&"crate::a::b".to_string()), "{names:?}");
        assert!(names.contains(&"crate::c::d".to_string()), "{names:?}");
        assert!(names.contains(&"crate::c::e".to_string()), "{names:?}");
        assert!(names.contains(&"crate::z::h".to_string()), "{names:?}");
        assert!(
            !names
                .iter()
                .any(|n| n.contains('x') || n.contains('y') || n.contains('s')),
            "{names:?}"
        );
        assert_eq!(declared_modules(&code), vec!["v".to_string()]);
    }
}
