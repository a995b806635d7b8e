//! A multipath target's status line (`dmsetup status`, the kernel's
//! `multipath_status` with `STATUSTYPE_INFO`) read as its path groups and
//! each path's state: what [`super::watch`] acts on. Parsing never panics;
//! a line that does not follow the layout gives `None`.
//!
//! Layout: `<#feature args> <args…> <#handler args> <args…> <#groups>
//! <group to use next>`, then per group `<A|E|D> <#selector args> <args…>
//! <#paths> <#selector args per path>` and per path `<major:minor> <A|F>
//! <fail count> <selector args…>`.

/// One path as the kernel sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathState {
    /// `major:minor`.
    pub devno: (u64, u64),
    /// `A`: usable; `F`: failed (an I/O error or a `fail_path` message).
    pub active: bool,
    /// How often the kernel failed it.
    pub failures: u64,
}

/// One priority group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupState {
    /// `A` (the group I/O goes to), `E` (enabled), `D` (bypassed).
    pub state: char,
    /// Its paths.
    pub paths: Vec<PathState>,
}

/// A multipath device's groups, in table order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    /// The groups.
    pub groups: Vec<GroupState>,
}

impl Status {
    /// Every path, in table order.
    pub fn paths(&self) -> impl Iterator<Item = &PathState> {
        self.groups.iter().flat_map(|g| g.paths.iter())
    }

    /// How many paths are usable.
    pub fn active(&self) -> usize {
        self.paths().filter(|p| p.active).count()
    }
}

/// Parses a multipath target's status line.
pub fn parse(line: &str) -> Option<Status> {
    let mut w = line.split_whitespace();
    let count = |w: &mut std::str::SplitWhitespace<'_>| -> Option<usize> {
        let n: usize = w.next()?.parse().ok()?;
        // No field count in a line of a few hundred bytes is larger.
        (n <= 4096).then_some(n)
    };
    let skip = |w: &mut std::str::SplitWhitespace<'_>, n: usize| -> Option<()> {
        for _ in 0..n {
            w.next()?;
        }
        Some(())
    };
    let features = count(&mut w)?;
    skip(&mut w, features)?;
    let handler = count(&mut w)?;
    skip(&mut w, handler)?;
    let groups = count(&mut w)?;
    w.next()?; // the group to use next
    let mut out = Vec::with_capacity(groups);
    for _ in 0..groups {
        let state = w.next()?.chars().next()?;
        let selector = count(&mut w)?;
        skip(&mut w, selector)?;
        let paths = count(&mut w)?;
        let per_path = count(&mut w)?;
        let mut group = GroupState {
            state,
            paths: Vec::with_capacity(paths),
        };
        for _ in 0..paths {
            let devno = super::devno(w.next()?)?;
            let active = match w.next()? {
                "A" => true,
                "F" => false,
                _ => return None,
            };
            let failures = w.next()?.parse().ok()?;
            skip(&mut w, per_path)?;
            group.paths.push(PathState {
                devno,
                active,
                failures,
            });
        }
        out.push(group);
    }
    Some(Status { groups: out })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_robin_over_two_paths_one_failed() {
        let s = parse("2 0 0 0 1 1 A 0 2 0 8:16 A 0 8:32 F 3 ").unwrap();
        assert_eq!(s.groups.len(), 1);
        assert_eq!(s.groups[0].state, 'A');
        assert_eq!(
            s.groups[0].paths,
            [
                PathState {
                    devno: (8, 16),
                    active: true,
                    failures: 0
                },
                PathState {
                    devno: (8, 32),
                    active: false,
                    failures: 3
                },
            ]
        );
        assert_eq!(s.active(), 1);
    }

    #[test]
    fn groups_handlers_and_selector_arguments_are_skipped_by_their_counts() {
        // Two groups under an ALUA handler; service-time's per-path
        // arguments (in-flight size, relative throughput).
        let s = parse("2 1 0 1 alua 2 2 E 0 1 2 8:0 A 0 0 1 A 0 1 2 8:16 F 1 0 1").unwrap();
        assert_eq!(s.groups.len(), 2);
        assert_eq!((s.groups[0].state, s.groups[1].state), ('E', 'A'));
        assert_eq!(s.groups[1].paths[0].devno, (8, 16));
        assert!(!s.groups[1].paths[0].active);
        assert_eq!(s.active(), 1);
        // No groups at all (every path removed).
        assert_eq!(parse("2 0 0 0 0 0").unwrap().active(), 0);
    }

    #[test]
    fn what_does_not_follow_the_layout_is_none() {
        for bad in [
            "",
            "2 0",
            "2 0 0 0 1 1 A 0 2 0 8:16 A 0",
            "2 0 0 0 1 1 A 0 1 0 8:16 X 0",
            "2 0 0 0 1 1 A 0 1 0 816 A 0",
            "99999999999999999999 0",
            "2 0 0 0 5000 1",
        ] {
            assert_eq!(parse(bad), None, "{bad:?}");
        }
    }
}
