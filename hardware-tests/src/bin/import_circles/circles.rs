//! The import-circle rule: no production module of a target reaches
//! itself through the modules it uses ([`file_cycles`], over the tree
//! `scan.rs` reads).

use std::collections::{BTreeMap, BTreeSet};

use crate::scan;

/// Production files that import each other, directly or through others,
/// one cycle per line. A module's use of its own ancestors
/// (`super::Error`) is not counted: a parent is its children's namespace,
/// and its items (shared types, re-exports) are theirs by Rust's
/// visibility rules; a cycle needs a module to depend on a sibling or a
/// module elsewhere that depends back.
pub(crate) fn file_cycles(tree: &scan::Tree) -> Vec<String> {
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
