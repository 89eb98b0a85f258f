//! A segment tree over schedule positions: add a value to a range, read the
//! maximum and where it is. The planners' memory model.
//!
//! The tree is the perfect binary tree over `N.next_power_of_two()` leaves,
//! built bottom-up in one pass; the leaves past the last position hold
//! `i64::MIN`, below every real value, and no range add reaches them, so
//! the maximum and the first position reaching it are those of the
//! positions alone. A node holds the maximum of its subtree plus the adds
//! pending on it (`lazy`, never pushed down): a range add changes its
//! canonical nodes, found bottom-up from the range's two ends, and then
//! the ancestors of those two ends, level by level, without recursion.
//!
//! # Complexity
//! O(N) to build, O(log N) per range add and per max query, O(N) memory.

/// Nodes of a tree over `len` leaves split at midpoints, numbered from 1
/// (children `2k`, `2k + 1`): its depth is at most `ceil(log2 len)`, so
/// every index is below `2 * len.next_power_of_two()` (at most `4 * len`).
pub(crate) fn tree_size(len: usize) -> usize {
    2 * len.max(1).next_power_of_two()
}

/// Range-add / range-max over `len` positions of signed byte counts.
#[derive(Debug, Clone)]
pub(crate) struct MemTree {
    len: usize,
    /// Leaves of the tree: `len.next_power_of_two()`.
    leaves: usize,
    max: Vec<i64>,
    lazy: Vec<i64>,
}

impl MemTree {
    /// Builds the tree over initial values.
    pub(crate) fn new(values: &[i64]) -> Self {
        let len = values.len().max(1);
        let leaves = len.next_power_of_two();
        let mut max = vec![i64::MIN; tree_size(len)];
        if values.is_empty() {
            max[leaves] = i64::MIN / 4;
        }
        max[leaves..leaves + values.len()].copy_from_slice(values);
        for k in (1..leaves).rev() {
            max[k] = max[2 * k].max(max[2 * k + 1]);
        }
        MemTree {
            len,
            leaves,
            max,
            lazy: vec![0; tree_size(len)],
        }
    }

    /// Adds `delta` to every position in `lo..=hi` (clamped; empty if lo > hi).
    pub(crate) fn add(&mut self, lo: usize, hi: usize, delta: i64) {
        let hi = hi.min(self.len - 1);
        if lo > hi || delta == 0 {
            return;
        }
        let (first, last) = (lo + self.leaves, hi + self.leaves);
        let (mut l, mut r) = (first, last + 1);
        while l < r {
            if l & 1 == 1 {
                self.max[l] += delta;
                self.lazy[l] += delta;
                l += 1;
            }
            if r & 1 == 1 {
                r -= 1;
                self.max[r] += delta;
                self.lazy[r] += delta;
            }
            l /= 2;
            r /= 2;
        }
        // Every node above a changed one is an ancestor of `first` or of
        // `last`: recomputed from its children, bottom-up, level by level
        // (both leaves are at the bottom level), the common ancestors once.
        let (mut a, mut b) = (first / 2, last / 2);
        while a != b {
            self.fix(a);
            self.fix(b);
            a /= 2;
            b /= 2;
        }
        while a > 0 {
            self.fix(a);
            a /= 2;
        }
    }

    /// Node `k`'s maximum from its children's and its pending add.
    #[inline]
    fn fix(&mut self, k: usize) {
        self.max[k] = self.max[2 * k].max(self.max[2 * k + 1]) + self.lazy[k];
    }

    /// The maximum over all positions and the first position reaching it.
    pub(crate) fn argmax(&self) -> (usize, i64) {
        let (mut node, mut lo, mut hi) = (1usize, 0usize, self.leaves - 1);
        let best = self.max[1];
        let mut acc = 0i64;
        while lo < hi {
            acc += self.lazy[node];
            let mid = (lo + hi) / 2;
            if self.max[2 * node] + acc == best {
                node *= 2;
                hi = mid;
            } else {
                node = 2 * node + 1;
                lo = mid + 1;
            }
        }
        (lo, best)
    }

    /// The maximum over `lo..=hi` (the tests' check of `argmax`).
    #[cfg(test)]
    pub(crate) fn range_max(&self, lo: usize, hi: usize) -> i64 {
        let hi = hi.min(self.len - 1);
        if lo > hi {
            return i64::MIN / 4;
        }
        self.max_rec(1, 0, self.leaves - 1, lo, hi)
    }

    #[cfg(test)]
    fn max_rec(&self, node: usize, nlo: usize, nhi: usize, lo: usize, hi: usize) -> i64 {
        if hi < nlo || nhi < lo {
            return i64::MIN / 4;
        }
        if lo <= nlo && nhi <= hi {
            return self.max[node];
        }
        let mid = (nlo + nhi) / 2;
        let m = self.max_rec(2 * node, nlo, mid, lo, hi).max(self.max_rec(
            2 * node + 1,
            mid + 1,
            nhi,
            lo,
            hi,
        ));
        m + self.lazy[node]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_a_naive_array() {
        let mut naive: Vec<i64> = (0..37).map(|i| (i * 7919 % 23) as i64).collect();
        let mut t = MemTree::new(&naive);
        let mut seed = 12345u64;
        for _ in 0..500 {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let a = (seed >> 33) as usize % 37;
            let b = (seed >> 17) as usize % 37;
            let (lo, hi) = (a.min(b), a.max(b));
            let d = ((seed >> 5) % 41) as i64 - 20;
            t.add(lo, hi, d);
            for x in &mut naive[lo..=hi] {
                *x += d;
            }
            let m = *naive.iter().max().unwrap();
            let p = naive.iter().position(|&x| x == m).unwrap();
            assert_eq!(t.argmax(), (p, m));
            assert_eq!(t.range_max(lo, hi), *naive[lo..=hi].iter().max().unwrap());
        }
    }
}
