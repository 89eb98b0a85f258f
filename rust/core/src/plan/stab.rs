//! Best-first interval stabbing: among options whose position interval
//! covers a point, the best one still valid.
//!
//! # Complexity
//! O(C log N) entries for C intervals over N positions, placed by a
//! counting sort after one sort of the intervals by score (O(C log C + C log
//! N + N)). A query walks one root-to-leaf path, O(log N), plus the entries
//! it discards; an entry is discarded once, so all queries together cost
//! O((Q + C) log N). [`Stab::reset`] restores every entry in O(N).

use super::memtree::tree_size;

/// Intervals `[lo, hi]` over `0..len`, each with a score (higher is better).
/// The canonical segment-tree nodes of each interval hold its id; each
/// node's ids are stored contiguously (CSR), best first.
pub struct Stab {
    len: usize,
    off: Vec<u32>,
    ids: Vec<u32>,
    cursor: Vec<u32>,
}

impl Stab {
    /// `intervals` holds `(id, lo, hi)`: an option may have several
    /// intervals; `score[id]` ranks options (ties: lower id).
    pub fn new(len: usize, intervals: &[(u32, u32, u32)], score: &[f64]) -> Self {
        let len = len.max(1);
        let mut by_score: Vec<usize> = (0..intervals.len()).collect();
        let key = |k: usize| intervals[k].0 as usize;
        by_score.sort_by(|&a, &b| {
            score[key(b)]
                .total_cmp(&score[key(a)])
                .then(key(a).cmp(&key(b)))
        });
        // The canonical nodes of every interval, in score order; then a
        // counting sort by node (stable: ids stay in score order per node).
        let size = tree_size(len);
        let mut pairs: Vec<(u32, u32)> = Vec::new();
        let mut off = vec![0u32; size + 1];
        for k in by_score {
            let (id, lo, hi) = intervals[k];
            if lo <= hi && (lo as usize) < len {
                let hi = (hi as usize).min(len - 1);
                insert(&mut pairs, 1, 0, len - 1, lo as usize, hi, id);
            }
        }
        for &(node, _) in &pairs {
            off[node as usize + 1] += 1;
        }
        for k in 0..size {
            off[k + 1] += off[k];
        }
        let mut cursor = off[..size].to_vec();
        let mut ids = vec![0u32; pairs.len()];
        for (node, id) in pairs {
            let c = &mut cursor[node as usize];
            ids[*c as usize] = id;
            *c += 1;
        }
        cursor.copy_from_slice(&off[..size]);
        Stab {
            len,
            cursor,
            off,
            ids,
        }
    }

    /// Every entry back, as built (for another greedy run on the same
    /// options).
    pub fn reset(&mut self) {
        let n = self.cursor.len();
        self.cursor.copy_from_slice(&self.off[..n]);
    }

    /// The best option covering `p` for which `valid` holds. Options found
    /// invalid are dropped for good, so `valid` must be monotone (once
    /// false, always false).
    pub fn best(
        &mut self,
        p: usize,
        score: &[f64],
        mut valid: impl FnMut(u32) -> bool,
    ) -> Option<u32> {
        if p >= self.len {
            return None;
        }
        let (mut node, mut lo, mut hi) = (1usize, 0usize, self.len - 1);
        let mut best: Option<u32> = None;
        loop {
            let end = self.off[node + 1];
            let cur = &mut self.cursor[node];
            while *cur < end && !valid(self.ids[*cur as usize]) {
                *cur += 1;
            }
            if *cur < end {
                let id = self.ids[*cur as usize];
                let better = best.is_none_or(|b| {
                    score[id as usize] > score[b as usize]
                        || (score[id as usize] == score[b as usize] && id < b)
                });
                if better {
                    best = Some(id);
                }
            }
            if lo == hi {
                return best;
            }
            let mid = (lo + hi) / 2;
            if p <= mid {
                node *= 2;
                hi = mid;
            } else {
                node = 2 * node + 1;
                lo = mid + 1;
            }
        }
    }
}

fn insert(
    out: &mut Vec<(u32, u32)>,
    node: usize,
    nlo: usize,
    nhi: usize,
    lo: usize,
    hi: usize,
    id: u32,
) {
    if hi < nlo || nhi < lo {
        return;
    }
    if lo <= nlo && nhi <= hi {
        out.push((node as u32, id));
        return;
    }
    let mid = (nlo + nhi) / 2;
    insert(out, 2 * node, nlo, mid, lo, hi, id);
    insert(out, 2 * node + 1, mid + 1, nhi, lo, hi, id);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_best_valid_covering_interval() {
        let iv = [(0, 0, 9), (1, 2, 4), (2, 3, 3), (3, 5, 9)];
        let score = [1.0, 5.0, 3.0, 9.0];
        let mut s = Stab::new(10, &iv, &score);
        assert_eq!(s.best(3, &score, |_| true), Some(1));
        assert_eq!(s.best(3, &score, |i| i != 1), Some(2));
        assert_eq!(s.best(6, &score, |_| true), Some(3));
        assert_eq!(s.best(0, &score, |_| true), Some(0));
        assert_eq!(s.best(3, &score, |i| i == 0), Some(0));
    }
}
