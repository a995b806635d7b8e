//! The set of guest clusters that carry data, kept as coalesced runs so its
//! size follows the image's fragmentation, not its virtual size. What is not
//! in the set reads as zeros.

use std::collections::BTreeMap;

/// Disjoint, coalesced runs `[start, end)` of guest cluster indices.
#[derive(Debug, Default)]
pub(crate) struct ClusterRuns {
    /// Closed runs: start → end.
    runs: BTreeMap<u64, u64>,
    /// The run being extended, not yet in `runs`: clusters mostly arrive in
    /// ascending order, so most inserts only bump its end.
    open: Option<(u64, u64)>,
}

impl ClusterRuns {
    /// Adds guest cluster `index`, which must not be in the set yet.
    pub(super) fn insert(&mut self, index: u64) {
        match &mut self.open {
            Some((_, end)) if *end == index => *end += 1,
            _ => {
                self.close();
                self.open = Some((index, index + 1));
            }
        }
    }

    /// Moves the open run into the map, merging it with touching neighbours.
    fn close(&mut self) {
        let Some((mut start, mut end)) = self.open.take() else {
            return;
        };
        if let Some((&prev_start, &prev_end)) = self.runs.range(..start).next_back() {
            debug_assert!(prev_end <= start, "guest cluster mapped twice");
            if prev_end == start {
                self.runs.remove(&prev_start);
                start = prev_start;
            }
        }
        if let Some(next_end) = self.runs.remove(&end) {
            end = next_end;
        }
        self.runs.insert(start, end);
    }

    /// The runs in ascending order.
    pub(super) fn into_runs(mut self) -> impl Iterator<Item = (u64, u64)> {
        self.close();
        self.runs.into_iter()
    }
}

#[cfg(test)]
mod tests {
    //! Coalescing of cluster runs.

    use super::ClusterRuns;

    #[test]
    fn coalesces_in_any_order() {
        let mut runs = ClusterRuns::default();
        for i in [5, 6, 7, 1, 2, 9, 8, 3, 20] {
            runs.insert(i);
        }
        let got: Vec<_> = runs.into_runs().collect();
        assert_eq!(got, vec![(1, 4), (5, 10), (20, 21)]);
    }
}
