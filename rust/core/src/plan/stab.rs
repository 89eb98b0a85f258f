//! Best-first interval stabbing: among options whose position interval
//! covers a point, the best one still valid.
//!
//! The tree is the perfect binary tree over `N.next_power_of_two()` leaves
//! (node `k` has children `2k`, `2k + 1`; leaf `p` is node `L + p`): an
//! interval's canonical nodes come bottom-up from its two ends, a query
//! walks from its leaf to the root, without recursion. Which node holds an
//! entry never changes an answer: every interval covering `p` sits on `p`'s
//! path exactly once, and the answer is the best of them by score (then id).
//!
//! # Complexity
//! O(C log N) entries for C intervals over N positions, placed by counting
//! (one pass counts each node's entries, a second writes them in score
//! order) after one sort of the intervals by score (O(C log C + C log N +
//! N); by radix, O(C), for 2^16 intervals and more). A query walks one leaf-to-root path, O(log N), and checks the
//! path's head entries best first: one check, the one answered, plus the
//! entries it discards, each O(log N) to find among the heads; an entry is
//! discarded once, so all queries together cost O((Q + C) log N) time and
//! Q + C validity checks (a check may cost more than the walk: the
//! greedy's asks the engine's queue). [`Stab::reset`] restores every
//! entry in O(N).

use super::memtree::tree_size;

/// Intervals `[lo, hi]` over `0..len`, each with a score (higher is better).
/// The canonical segment-tree nodes of each interval hold its id; each
/// node's ids are stored contiguously (CSR), best first.
pub(crate) struct Stab {
    len: usize,
    /// Leaves of the tree: `len.next_power_of_two()`.
    leaves: usize,
    off: Vec<u32>,
    ids: Vec<u32>,
    cursor: Vec<u32>,
}

impl Stab {
    /// `intervals` holds `(id, lo, hi)`: an option may have several
    /// intervals; `score[id]` ranks options (ties: lower id).
    pub(crate) fn new(len: usize, intervals: &[(u32, u32, u32)], score: &[f64]) -> Self {
        let len = len.max(1);
        let leaves = len.next_power_of_two();
        // Clamped to the positions, best first (ties: lower id; one
        // option's intervals are interchangeable). The score rides along
        // as an integer key that orders as the score's `total_cmp`,
        // reversed: the sort compares integers, without looking it up.
        let mut spans: Vec<(u64, u32, u32, u32)> = intervals
            .iter()
            .filter(|&&(_, lo, hi)| lo <= hi && (lo as usize) < len)
            .map(|&(id, lo, hi)| {
                (
                    !order_key(score[id as usize]),
                    id,
                    lo,
                    hi.min(len as u32 - 1),
                )
            })
            .collect();
        sort_by_key_and_id(&mut spans);
        let size = tree_size(len);
        let mut off = vec![0u32; size + 1];
        for &(_, _, lo, hi) in &spans {
            canonical(leaves, lo as usize, hi as usize, |node| off[node + 1] += 1);
        }
        // Each node's first entry: the counts' running sum (`off[0]` is 0).
        let mut sum = 0u32;
        for o in off.iter_mut() {
            sum += *o;
            *o = sum;
        }
        let mut cursor = off[..size].to_vec();
        let mut ids = vec![0u32; off[size] as usize];
        for &(_, id, lo, hi) in &spans {
            canonical(leaves, lo as usize, hi as usize, |node| {
                ids[cursor[node] as usize] = id;
                cursor[node] += 1;
            });
        }
        cursor.copy_from_slice(&off[..size]);
        Stab {
            len,
            leaves,
            cursor,
            off,
            ids,
        }
    }

    /// Every entry back, as built (for another greedy run on the same
    /// options).
    pub(crate) fn reset(&mut self) {
        let n = self.cursor.len();
        self.cursor.copy_from_slice(&self.off[..n]);
    }

    /// The best option covering `p` for which `valid` holds. Options found
    /// invalid are dropped for good, so `valid` must be monotone (once
    /// false, always false). Each node on `p`'s path holds its entries best
    /// first, so the answer is the best of the nodes' first valid entries:
    /// the heads are checked best first (score, then id) and the first one
    /// valid is the answer, an invalid one giving way to the next entry of
    /// its node. `valid` is called only on the heads so checked: once for
    /// the answer, once for each entry dropped.
    pub(crate) fn best(
        &mut self,
        p: usize,
        score: &[f64],
        mut valid: impl FnMut(u32) -> bool,
    ) -> Option<u32> {
        if p >= self.len {
            return None;
        }
        // The path's nodes with entries left (a perfect tree of at most
        // 2^63 leaves: at most 64 levels).
        let mut heads = [0usize; 64];
        let mut k = 0;
        let mut node = self.leaves + p;
        while node > 0 {
            if self.cursor[node] < self.off[node + 1] {
                heads[k] = node;
                k += 1;
            }
            node /= 2;
        }
        let better = |a: u32, b: u32| {
            score[a as usize] > score[b as usize]
                || (score[a as usize] == score[b as usize] && a < b)
        };
        loop {
            let mut top: Option<(usize, u32)> = None;
            for (i, &n) in heads[..k].iter().enumerate() {
                let id = self.ids[self.cursor[n] as usize];
                if top.is_none_or(|(_, b)| better(id, b)) {
                    top = Some((i, id));
                }
            }
            let (i, id) = top?;
            if valid(id) {
                return Some(id);
            }
            let n = heads[i];
            self.cursor[n] += 1;
            if self.cursor[n] == self.off[n + 1] {
                k -= 1;
                heads[i] = heads[k];
            }
        }
    }
}

/// Elements at and above which [`sort_by_key_and_id`] sorts by radix.
const RADIX_MIN: usize = 1 << 16;

/// Sorts `v` by `(key, id)`, its first two fields, ascending (elements
/// equal in both are one option's intervals: their order does not
/// matter). Large inputs by least significant digit first, 16 bits at a
/// time, the id's digits then the key's, skipping a digit every element
/// shares: O(n) per pass, at most six passes; small ones by comparison.
fn sort_by_key_and_id(v: &mut Vec<(u64, u32, u32, u32)>) {
    let n = v.len();
    if n < RADIX_MIN {
        v.sort_unstable_by_key(|&(key, id, _, _)| (key, id));
        return;
    }
    let digit = |e: &(u64, u32, u32, u32), d: usize| -> usize {
        if d < 2 {
            (e.1 >> (16 * d)) as usize & 0xffff
        } else {
            (e.0 >> (16 * (d - 2))) as usize & 0xffff
        }
    };
    let mut out = vec![(0u64, 0u32, 0u32, 0u32); n];
    let mut start = vec![0usize; 1 << 16];
    for d in 0..6 {
        start.fill(0);
        for e in v.iter() {
            start[digit(e, d)] += 1;
        }
        if start.contains(&n) {
            continue; // every element has this digit: the order stands
        }
        let mut sum = 0;
        for c in start.iter_mut() {
            let k = *c;
            *c = sum;
            sum += k;
        }
        for e in v.iter() {
            let b = &mut start[digit(e, d)];
            out[*b] = *e;
            *b += 1;
        }
        std::mem::swap(v, &mut out);
    }
}

/// An integer in the order of `f64::total_cmp`: `order_key(a) <
/// order_key(b)` exactly when `a.total_cmp(&b)` is `Less`.
fn order_key(x: f64) -> u64 {
    let b = x.to_bits();
    // Negative numbers: every bit flipped (larger magnitudes first);
    // positive ones: the sign bit set (above every negative).
    if b >> 63 == 1 {
        !b
    } else {
        b | 1 << 63
    }
}

/// Calls `f` on each canonical node of `lo..=hi` in the perfect tree over
/// `leaves` leaves (at most two per level). The nodes are found first,
/// without a branch on the ends' bits (a node is written at the next slot
/// and counted when the end's bit says so; which bits are set is as good
/// as random, so branches on them would be mispredicted half the time),
/// then handed to `f`: the nodes and their order are those of the loop
/// that tests each bit.
#[inline]
fn canonical(leaves: usize, lo: usize, hi: usize, mut f: impl FnMut(usize)) {
    // At most two nodes per level of a tree of at most 2^63 leaves.
    let mut nodes = [0usize; 128];
    let mut n = 0;
    let (mut l, mut r) = (lo + leaves, hi + leaves + 1);
    while l < r {
        let odd = l & 1;
        nodes[n] = l;
        n += odd;
        l += odd;
        let odd = r & 1;
        r -= odd;
        nodes[n] = r;
        n += odd;
        l /= 2;
        r /= 2;
    }
    for &node in &nodes[..n] {
        f(node);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The canonical nodes are those of the loop that branches on each
    /// end's bit, in its order, for every range of trees of 1-64 leaves.
    #[test]
    fn canonical_nodes_are_the_branching_loops() {
        for leaves in (0..=6).map(|k| 1usize << k) {
            for lo in 0..leaves {
                for hi in lo..leaves {
                    let mut want = Vec::new();
                    let (mut l, mut r) = (lo + leaves, hi + leaves + 1);
                    while l < r {
                        if l & 1 == 1 {
                            want.push(l);
                            l += 1;
                        }
                        if r & 1 == 1 {
                            r -= 1;
                            want.push(r);
                        }
                        l /= 2;
                        r /= 2;
                    }
                    let mut got = Vec::new();
                    canonical(leaves, lo, hi, |node| got.push(node));
                    assert_eq!(got, want, "{leaves} {lo} {hi}");
                }
            }
        }
    }

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

    #[test]
    fn the_radix_sort_orders_by_key_and_id() {
        let mut seed = 5u64;
        let mut next = || {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            seed
        };
        let mut v: Vec<(u64, u32, u32, u32)> = (0..RADIX_MIN as u32 + 999)
            .map(|i| {
                let r = next();
                // Few distinct keys and ids (ties on both), wide ones too.
                let key = if r % 3 == 0 { r >> 60 } else { r };
                (key, (r >> 20) as u32 % 5000, i, 0)
            })
            .collect();
        let mut want = v.clone();
        want.sort_by_key(|&(key, id, _, _)| (key, id));
        sort_by_key_and_id(&mut v);
        let keys = |v: &[(u64, u32, u32, u32)]| v.iter().map(|e| (e.0, e.1)).collect::<Vec<_>>();
        assert_eq!(keys(&v), keys(&want));
    }

    #[test]
    fn order_key_orders_as_total_cmp() {
        let xs = [
            f64::NEG_INFINITY,
            -1e300,
            -1.0,
            -f64::MIN_POSITIVE,
            -0.0,
            0.0,
            f64::MIN_POSITIVE,
            1.0,
            3.5e12,
            f64::INFINITY,
            f64::NAN,
        ];
        for a in xs {
            for b in xs {
                assert_eq!(order_key(a).cmp(&order_key(b)), a.total_cmp(&b), "{a} {b}");
            }
        }
    }

    #[test]
    fn matches_a_naive_scan() {
        let mut seed = 99u64;
        let mut next = |m: u64| {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 33) % m
        };
        for len in [1usize, 5, 37, 64] {
            let n = 60;
            let score: Vec<f64> = (0..n).map(|_| next(7) as f64).collect(); // ties
            let mut iv = Vec::new();
            for id in 0..n as u32 {
                for _ in 0..=next(2) {
                    let (a, b) = (next(len as u64 + 3) as u32, next(len as u64 + 3) as u32);
                    iv.push((id, a.min(b), a.max(b)));
                }
            }
            let mut s = Stab::new(len, &iv, &score);
            let mut gone = vec![false; n];
            for _ in 0..200 {
                gone[next(n as u64) as usize] = true; // invalid for good
                let p = next(len as u64 + 1) as usize;
                let naive = iv
                    .iter()
                    .filter(|&&(id, lo, hi)| {
                        !gone[id as usize] && (lo as usize) <= p && p <= hi as usize && p < len
                    })
                    .map(|&(id, _, _)| id)
                    .min_by(|&a, &b| {
                        score[b as usize]
                            .total_cmp(&score[a as usize])
                            .then(a.cmp(&b))
                    });
                assert_eq!(s.best(p, &score, |id| !gone[id as usize]), naive);
            }
        }
    }
}
