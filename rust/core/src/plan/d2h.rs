//! The device-to-host engine's queue over the swaps chosen so far: when a
//! new swap-out would really end.
//!
//! # The model
//! The engine serves swap-outs one at a time, first come first served; a
//! swap-out is ready when its producer ends, so serving in order of the
//! producer's schedule position is serving in order of readiness. Job `j`
//! at position `p_j` is ready at `r_j` and takes `d_j`. The engine is free
//! for a job at position `q` (after every job at a position `<= q`) at
//! `F(q) = max over jobs j with p_j <= q of (r_j + sum of d_i, p_j <= p_i <= q)`,
//! or minus infinity when there is none. With `P(x)` the total duration of
//! jobs at positions `<= x`, that is `max_{p_j <= q} (r_j - P(p_j - 1)) + P(q)`:
//! a range-max over positions of `r_j - P(p_j - 1)`, which a new job of
//! duration `d` at `p` lowers by `d` on every position after `p`, and a
//! prefix sum.
//!
//! A job added later at an earlier position delays the jobs after it; the
//! queue answers for the jobs as they are now (the greedy asks once, when
//! it chooses a swap, and the simulator judges the finished plan).
//!
//! # Complexity
//! O(N) to build, O(log N) per job added and per query.

use super::memtree::tree_size;

/// Below any real time: a position without a job.
const NO_JOB: f64 = -1e300;

/// The swap-outs chosen so far, by producer position.
pub(crate) struct D2hQueue {
    len: usize,
    /// Range-add / range-max tree of `r_j - P(p_j - 1)` (NO_JOB: none).
    max: Vec<f64>,
    lazy: Vec<f64>,
    /// Fenwick tree of the durations by position.
    dur: Vec<f64>,
}

impl D2hQueue {
    /// An empty queue over `len` schedule positions.
    pub(crate) fn new(len: usize) -> Self {
        let len = len.max(1);
        D2hQueue {
            len,
            max: vec![NO_JOB; tree_size(len)],
            lazy: vec![0.0; tree_size(len)],
            dur: vec![0.0; len + 1],
        }
    }

    /// When a swap-out at position `p`, ready at `ready`, taking `d`, would
    /// end behind the jobs at positions `<= p`.
    pub(crate) fn end_if_added(&self, p: usize, ready: f64, d: f64) -> f64 {
        let p = p.min(self.len - 1);
        let free = self.range_max(p) + self.prefix(p);
        ready.max(free) + d
    }

    /// Adds a swap-out at position `p`, ready at `ready`, taking `d`.
    pub(crate) fn add(&mut self, p: usize, ready: f64, d: f64) {
        let p = p.min(self.len - 1);
        let v = ready - if p == 0 { 0.0 } else { self.prefix(p - 1) };
        self.raise_and_shift(p, v, -d);
        let mut i = p + 1;
        while i <= self.len {
            self.dur[i] += d;
            i += i & i.wrapping_neg();
        }
    }

    /// Total duration of the jobs at positions `<= p`.
    fn prefix(&self, p: usize) -> f64 {
        let mut i = p + 1;
        let mut s = 0.0;
        while i > 0 {
            s += self.dur[i];
            i -= i & i.wrapping_neg();
        }
        s
    }

    /// `raise(p, v)`, then `add_range(p + 1, d)` when `p + 1 < len` (the
    /// two walks, kept in the tests to compare with), in one walk down and
    /// one up: the range add's path is
    /// the start of `p`'s (it ends at the node splitting `p` from `p + 1`)
    /// and changes only right children off `p`'s path, each after the
    /// pending add pushed to it, as the two walks do one after the other;
    /// on the way up, the nodes from that split up take their pending add
    /// (zero, pushed down) as the range add's walk up does. The same
    /// operations on every value, in the same order.
    fn raise_and_shift(&mut self, p: usize, v: f64, d: f64) {
        let from = p + 1;
        let shift = from < self.len;
        let (mut node, mut lo, mut hi) = (1usize, 0usize, self.len - 1);
        // The node where the range add's walk stops (0: none yet).
        let mut split = 0usize;
        while lo < hi {
            let mid = (lo + hi) / 2;
            let z = std::mem::take(&mut self.lazy[node]);
            for c in [2 * node, 2 * node + 1] {
                self.max[c] += z;
                self.lazy[c] += z;
            }
            if shift && split == 0 {
                if from <= mid + 1 {
                    let c = 2 * node + 1;
                    self.max[c] += d;
                    self.lazy[c] += d;
                }
                if from == mid + 1 {
                    split = node;
                }
            }
            if p <= mid {
                node *= 2;
                hi = mid;
            } else {
                node = 2 * node + 1;
                lo = mid + 1;
            }
        }
        self.max[node] = self.max[node].max(v);
        let mut above = false;
        while node > 1 {
            node /= 2;
            above |= node == split;
            let m = self.max[2 * node].max(self.max[2 * node + 1]);
            self.max[node] = if above { m + self.lazy[node] } else { m };
        }
    }

    /// The maximum over positions `0..=q`: down the path to `q` (the nodes
    /// right of it left out), then back up adding each node's pending add,
    /// the same operations in the same order as a recursive walk. No
    /// recursion and no stack: a node's parent is `node / 2`, and the walk
    /// went right there when `node` is odd. O(log N).
    fn range_max(&self, q: usize) -> f64 {
        let (mut node, mut lo, mut hi) = (1usize, 0usize, self.len - 1);
        while q < hi {
            let mid = (lo + hi) / 2;
            if q > mid {
                node = 2 * node + 1;
                lo = mid + 1;
            } else {
                node *= 2;
                hi = mid;
            }
        }
        let mut m = self.max[node];
        while node > 1 {
            let right = node & 1 == 1;
            node /= 2;
            if right {
                m = self.max[2 * node].max(m);
            }
            m += self.lazy[node];
        }
        m
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The two walks `add` made one after the other: the reference the
    /// one walk of `raise_and_shift` is compared with.
    impl D2hQueue {
        /// Leaf `p` becomes at least `v`: down the path to it, each node's
        /// pending add pushed to its children (so the leaf holds its true
        /// value), then back up, each node the maximum of its children.
        fn raise(&mut self, p: usize, v: f64) {
            let (mut node, mut lo, mut hi) = (1usize, 0usize, self.len - 1);
            while lo < hi {
                let mid = (lo + hi) / 2;
                let z = std::mem::take(&mut self.lazy[node]);
                for c in [2 * node, 2 * node + 1] {
                    self.max[c] += z;
                    self.lazy[c] += z;
                }
                if p <= mid {
                    node *= 2;
                    hi = mid;
                } else {
                    node = 2 * node + 1;
                    lo = mid + 1;
                }
            }
            self.max[node] = self.max[node].max(v);
            while node > 1 {
                node /= 2;
                self.max[node] = self.max[2 * node].max(self.max[2 * node + 1]);
            }
        }

        /// Adds `d` to every position `>= from` (`0 < from < len`): down the
        /// path of the nodes the range covers in part, each right child
        /// covered whole taking the add, then back up, each node of the path
        /// the maximum of its children plus its pending add.
        fn add_range(&mut self, from: usize, d: f64) {
            debug_assert!(0 < from && from < self.len);
            let (mut node, mut lo, mut hi) = (1usize, 0usize, self.len - 1);
            loop {
                let mid = (lo + hi) / 2;
                if from <= mid + 1 {
                    let c = 2 * node + 1;
                    self.max[c] += d;
                    self.lazy[c] += d;
                }
                if from <= mid {
                    node *= 2;
                    hi = mid;
                } else if from == mid + 1 {
                    break;
                } else {
                    node = 2 * node + 1;
                    lo = mid + 1;
                }
            }
            loop {
                self.max[node] = self.max[2 * node].max(self.max[2 * node + 1]) + self.lazy[node];
                if node == 1 {
                    break;
                }
                node /= 2;
            }
        }
    }

    /// First come first served by position, the slow way.
    fn naive(jobs: &[(usize, f64, f64)], p: usize, ready: f64, d: f64) -> f64 {
        let mut js: Vec<_> = jobs.iter().copied().filter(|j| j.0 <= p).collect();
        js.sort_by_key(|j| j.0); // stable: insertion order within a position
        let mut free = f64::NEG_INFINITY;
        for (_, r, dd) in js {
            free = free.max(r) + dd;
        }
        ready.max(free) + d
    }

    /// The one walk of `add` leaves every value of the tree as the two
    /// walks apart (`raise`, then `add_range`) do, bit for bit, over
    /// random jobs on trees of every shape up to 70 positions.
    #[test]
    fn one_walk_is_the_two_apart() {
        let mut seed = 11u64;
        for len in 1..=70 {
            let (mut one, mut two) = (D2hQueue::new(len), D2hQueue::new(len));
            for _ in 0..60 {
                seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let p = (seed >> 33) as usize % len;
                let v = ((seed >> 11) % 1000) as f64 / 7.0 - 40.0;
                let d = ((seed >> 21) % 97) as f64 / 3.0;
                one.raise_and_shift(p, v, -d);
                two.raise(p, v);
                if p + 1 < len {
                    two.add_range(p + 1, -d);
                }
                let bits = |q: &D2hQueue| -> Vec<u64> {
                    q.max.iter().chain(&q.lazy).map(|x| x.to_bits()).collect()
                };
                assert_eq!(bits(&one), bits(&two), "len {len} p {p}");
            }
        }
    }

    #[test]
    fn matches_a_naive_queue() {
        let mut q = D2hQueue::new(40);
        let mut jobs = Vec::new();
        let mut seed = 7u64;
        for _ in 0..200 {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let p = (seed >> 33) as usize % 40;
            let r = p as f64 * 1.5; // ready times grow with the position
            let d = ((seed >> 7) % 9) as f64 + 0.5;
            let want = naive(&jobs, p, r, d);
            let got = q.end_if_added(p, r, d);
            assert!((want - got).abs() < 1e-9, "{want} vs {got}");
            q.add(p, r, d);
            jobs.push((p, r, d));
        }
    }
}
