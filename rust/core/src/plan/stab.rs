//! Best-first interval stabbing: among options whose position interval
//! covers a point, the best one still valid.
//!
//! # Complexity
//! O(C log N) entries for C intervals over N positions, sorted once
//! (O(C log N log C)). A query walks one root-to-leaf path, O(log N), plus
//! the entries it discards; an entry is discarded once, so all queries
//! together cost O((Q + C) log N).

/// Intervals `[lo, hi]` over `0..len`, each with a score (higher is better).
pub struct Stab {
    len: usize,
    lists: Vec<Vec<u32>>,
    cursor: Vec<u32>,
}

impl Stab {
    /// `intervals[i] = (lo, hi)`; `score[i]` ranks options (ties: lower id).
    pub fn new(len: usize, intervals: &[(u32, u32)], score: &[f64]) -> Self {
        let len = len.max(1);
        let mut s = Stab {
            len,
            lists: vec![Vec::new(); 4 * len],
            cursor: vec![0; 4 * len],
        };
        for (i, &(lo, hi)) in intervals.iter().enumerate() {
            if lo <= hi && (lo as usize) < len {
                s.insert(
                    1,
                    0,
                    len - 1,
                    lo as usize,
                    (hi as usize).min(len - 1),
                    i as u32,
                );
            }
        }
        for l in &mut s.lists {
            l.sort_by(|&a, &b| {
                score[b as usize]
                    .total_cmp(&score[a as usize])
                    .then(a.cmp(&b))
            });
        }
        s
    }

    fn insert(&mut self, node: usize, nlo: usize, nhi: usize, lo: usize, hi: usize, id: u32) {
        if hi < nlo || nhi < lo {
            return;
        }
        if lo <= nlo && nhi <= hi {
            self.lists[node].push(id);
            return;
        }
        let mid = (nlo + nhi) / 2;
        self.insert(2 * node, nlo, mid, lo, hi, id);
        self.insert(2 * node + 1, mid + 1, nhi, lo, hi, id);
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
            let list = &self.lists[node];
            let cur = &mut self.cursor[node];
            while (*cur as usize) < list.len() && !valid(list[*cur as usize]) {
                *cur += 1;
            }
            if let Some(&id) = list.get(*cur as usize) {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_best_valid_covering_interval() {
        let iv = [(0, 9), (2, 4), (3, 3), (5, 9)];
        let score = [1.0, 5.0, 3.0, 9.0];
        let mut s = Stab::new(10, &iv, &score);
        assert_eq!(s.best(3, &score, |_| true), Some(1));
        assert_eq!(s.best(3, &score, |i| i != 1), Some(2));
        assert_eq!(s.best(6, &score, |_| true), Some(3));
        assert_eq!(s.best(0, &score, |_| true), Some(0));
        assert_eq!(s.best(3, &score, |i| i == 0), Some(0));
    }
}
