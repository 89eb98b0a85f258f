//! Swap candidates: for every buffer, where its readers leave a gap long
//! enough to send it to the host and bring it back.
//!
//! # The rule
//! The points of a buffer are its producer's position and the positions of
//! every reader (readers of its aliases included). The widest gap between
//! consecutive points splits them into early readers (before the gap: they
//! read the original) and late readers (after it: they read a swap-in). A
//! buffer is a candidate when the gap spans at least `min_gap` positions,
//! it has `min_bytes` or more, and every late reader reads one and the same
//! tensor made before the gap: the owner, or one alias of it (then the alias
//! is the tensor swapped). Reads of aliases made after the gap (an `IdentityN`
//! that runs late, whose outputs the optimizer reads) follow the swapped-in
//! copy through the alias op, which is a late reader itself. A U-Net skip connection, read by the encoder and
//! again by the decoder's concat, is a candidate inside the forward pass.
//! Outputs of sources (fed inputs, constants) are never candidates: the feed
//! or the constant holds its buffer for the whole step, so a copy frees
//! nothing (measured: see docs/accuracy.md). Handle-typed tensors (a
//! `variant` that holds tensors, [`crate::body`]) are never candidates.
//! Nor is the output of a link of a `Mul` chain or an add tree whose one
//! kept data reader continues the chain (`opkind::regrouped_with`, with
//! dead readers pruned and divisions by constants seen as `Mul`s, as in
//! `trigger::kept_reader` and `trigger::seen_op`): Grappler's
//! arithmetic optimizer regroups the two in the original (the product in
//! another order, which rounds otherwise), and a swap-in between them,
//! not of the chain's op, would end the chain there
//! (tests/test_default_grappler.py).
//!
//! # Complexity
//! O(T + E log E): each tensor's readers are sorted once.

use crate::graph::{Graph, NodeFlags};
use crate::liveness::Liveness;
use crate::opkind;
use crate::schedule::Schedule;

use smallvec::SmallVec;

use super::trigger::{kept_reader, seen_op};

/// One buffer that could be swapped.
#[derive(Debug, Clone, PartialEq)]
pub struct SwapCandidate {
    /// The tensor the late readers read (what is swapped).
    pub tensor: u32,
    /// The buffer's owner (`tensor` itself unless that is an alias).
    pub owner: u32,
    pub bytes: u64,
    pub produce: u32,
    /// Last position reading the original (the producer's if none).
    pub last_early: u32,
    /// Positions of the late readers, ascending, with their node ids
    /// (inline up to two: hundreds of thousands of candidates at 10^6
    /// nodes, most read late once or twice).
    pub late: SmallVec<[(u32, u32); 2]>,
}

impl SwapCandidate {
    pub fn first_late(&self) -> u32 {
        self.late[0].0
    }
}

/// Finds the swap candidates.
pub fn swap_candidates(
    g: &Graph,
    s: &Schedule,
    l: &Liveness,
    min_gap: u32,
    min_bytes: u64,
) -> Vec<SwapCandidate> {
    let readers = readers_by_owner(g, s, l, min_bytes);
    let mut out = Vec::new();
    for t in 0..g.num_tensors() as u32 {
        let tt = &g.tensors[t as usize];
        if l.owner[t as usize] != t
            || tt.bytes < min_bytes.max(1)
            || g.nodes[tt.node as usize].flags.has(NodeFlags::SOURCE)
            || tt.dtype.is_handle()
        {
            // A fed input or constant: its feed holds the buffer anyway. A
            // handle (a `variant` holding tensors: crate::body): TensorFlow's
            // `DeepCopy` has no `variant` kernel, so no swap op could copy it.
            continue;
        }
        if let Some(c) = split_at_gap(
            t,
            tt.bytes,
            l.produce[t as usize],
            &dedup(readers.of(t)),
            min_gap,
        ) {
            let p = g.tensors[c.tensor as usize].node;
            let producer = g.op_name(p);
            if kept_reader(g, p)
                .is_some_and(|r| opkind::regrouped_with(seen_op(g, r), seen_op(g, p)))
            {
                continue; // a link of a chain Grappler regroups
            }
            if c.late
                .iter()
                .any(|&(_, r)| opkind::pairs_with_producer(g.op_name(r), producer))
            {
                continue; // a gradient that must read its forward op's own output
            }
            // The copy can start once the tensor read late exists.
            out.push(SwapCandidate {
                produce: l.produce[c.tensor as usize],
                ..c
            });
        }
    }
    out
}

/// Readers of every owner: (position, reader node, tensor read, position
/// the tensor read is made), sorted, in CSR form (`off[o]..off[o + 1]`).
/// Only owners of at least `min_bytes` get their readers listed.
struct Readers {
    off: Vec<u32>,
    list: Vec<(u32, u32, u32, u32)>,
}

impl Readers {
    fn of(&self, o: u32) -> &[(u32, u32, u32, u32)] {
        &self.list[self.off[o as usize] as usize..self.off[o as usize + 1] as usize]
    }
}

fn readers_by_owner(g: &Graph, s: &Schedule, l: &Liveness, min_bytes: u64) -> Readers {
    let nt = g.num_tensors();
    let wanted = |o: u32| g.tensors[o as usize].bytes >= min_bytes.max(1);
    let mut off = vec![0u32; nt + 1];
    for t in 0..nt as u32 {
        let o = l.owner[t as usize];
        if wanted(o) {
            off[o as usize + 1] += g.consumers(t).len() as u32;
        }
    }
    let mut sum = 0u32; // the counts' running sum (`off[0]` is 0)
    for o in off.iter_mut() {
        sum += *o;
        *o = sum;
    }
    let mut fill = off.clone();
    let mut list = vec![(0, 0, 0, 0); off[nt] as usize];
    for t in 0..nt as u32 {
        let o = l.owner[t as usize];
        if !wanted(o) {
            continue;
        }
        for &c in g.consumers(t) {
            list[fill[o as usize] as usize] = (s.pos[c as usize], c, t, l.produce[t as usize]);
            fill[o as usize] += 1;
        }
    }
    for o in 0..nt {
        list[off[o] as usize..off[o + 1] as usize].sort_unstable();
    }
    Readers { off, list }
}

fn split_at_gap(
    t: u32,
    bytes: u64,
    produce: u32,
    readers: &[(u32, u32, u32, u32)],
    min_gap: u32,
) -> Option<SwapCandidate> {
    let mut prev = produce;
    let mut best: Option<(u32, usize)> = None;
    for (i, &(p, _, _, _)) in readers.iter().enumerate() {
        let gap = p.saturating_sub(prev);
        if gap >= min_gap.max(2) && best.is_none_or(|(b, _)| gap > b) {
            best = Some((gap, i));
        }
        prev = p;
    }
    let (_, split) = best?;
    let last_early = if split == 0 {
        produce
    } else {
        readers[split - 1].0
    };
    // Late reads of tensors made before the gap must all be of one tensor.
    let mut direct = readers[split..].iter().filter(|r| r.3 <= last_early);
    let read = direct.next()?.2;
    if direct.any(|r| r.2 != read) {
        return None;
    }
    let mut late: SmallVec<[(u32, u32); 2]> = readers[split..]
        .iter()
        .filter(|r| r.2 == read)
        .map(|&(p, n, _, _)| (p, n))
        .collect();
    late.dedup_by_key(|x| x.1);
    Some(SwapCandidate {
        tensor: read,
        owner: t,
        bytes,
        produce,
        last_early,
        late,
    })
}

fn dedup(r: &[(u32, u32, u32, u32)]) -> std::borrow::Cow<'_, [(u32, u32, u32, u32)]> {
    if r.windows(2).all(|w| w[0] != w[1]) {
        std::borrow::Cow::Borrowed(r)
    } else {
        let mut v = r.to_vec();
        v.dedup();
        std::borrow::Cow::Owned(v)
    }
}

/// Start time of every position and the step's end: `start[p]` is when the
/// op at position `p` starts if ops run back to back; `start[N]` the end.
pub(crate) fn start_times(s: &Schedule, op_time: &[f64]) -> Vec<f64> {
    let mut out = Vec::with_capacity(s.order.len() + 1);
    let mut acc = 0.0;
    out.push(0.0);
    for &v in &s.order {
        acc += op_time[v as usize].max(0.0);
        out.push(acc);
    }
    out
}

/// The first position whose start time is at or after `t` (the last
/// position if none), searched from position `from` on when the start
/// before it is below `t` (then every earlier one is: the starts are
/// non-decreasing); otherwise over all positions. A copy mostly ends a few
/// ops after its producer: O(log d) reads near `from` for an answer d
/// positions on ([`gallop`]), not O(log N) spread over the array.
pub(crate) fn position_at_from(start: &[f64], from: usize, t: f64) -> u32 {
    let below = |x: &f64| *x < t;
    let at = match from.checked_sub(1).and_then(|p| start.get(p)) {
        Some(x) if below(x) => gallop(start, from, below),
        _ => start.partition_point(below),
    };
    at.min(start.len() - 1) as u32
}

/// `xs.partition_point(before)` for a `before` true on a prefix of `xs`
/// that fails at every index from `to` on (`to <= xs.len()`): steps of 1,
/// 2, 4, ... down from `to` until one lands where `before` holds, then a
/// binary search within the last step. O(log d) for an answer d indices
/// below `to`.
pub(crate) fn gallop_down<T>(xs: &[T], to: usize, before: impl Fn(&T) -> bool) -> usize {
    let (mut hi, mut step) = (to, 1);
    loop {
        let lo = hi.saturating_sub(step);
        if lo == 0 {
            return xs[..hi].partition_point(before);
        }
        if before(&xs[lo]) {
            return lo + 1 + xs[lo + 1..hi].partition_point(before);
        }
        (hi, step) = (lo, 2 * step);
    }
}

/// `xs.partition_point(before)` for a `before` true on a prefix of `xs`
/// that holds at every index below `from` (`from <= xs.len()`): steps of
/// 1, 2, 4, ... from `from` until one lands where `before` fails, then a
/// binary search within the last step. O(log d) for an answer d indices
/// past `from`.
pub(crate) fn gallop<T>(xs: &[T], from: usize, before: impl Fn(&T) -> bool) -> usize {
    let n = xs.len();
    let (mut lo, mut step) = (from, 1);
    loop {
        let to = (lo + step).min(n);
        if to == n || !before(&xs[to - 1]) {
            return lo + xs[lo..to].partition_point(before);
        }
        (lo, step) = (to, 2 * step);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::build::{build, BuildOptions, NodeSpec, OutSpec, Shape};
    use crate::dtype::DType;

    /// Galloping down from every bound at or above the answer finds the
    /// partition point, for every threshold.
    #[test]
    fn gallop_down_is_the_partition_point() {
        let xs = [0.0, 0.0, 1.0, 1.0, 1.0, 2.5, 4.0, 4.0, 7.0, 9.0];
        for k in -2..=20 {
            let t = k as f64 / 2.0;
            let want = xs.partition_point(|&x| x <= t);
            for to in want..=xs.len() {
                assert_eq!(gallop_down(&xs, to, |&x| x <= t), want, "{to} {t}");
            }
        }
    }

    /// The galloping search from a position answers as the search over
    /// all positions, from every position (those whose start before is not
    /// below the time fall back), for times before, on, between and after
    /// starts with runs of equal values.
    #[test]
    fn position_at_from_is_the_search_over_all_positions() {
        let start = [0.0, 0.0, 1.0, 1.0, 1.0, 2.5, 4.0, 4.0, 7.0, 9.0];
        let all = |t: f64| start.partition_point(|&x| x < t).min(start.len() - 1) as u32;
        for k in -2..=20 {
            let t = k as f64 / 2.0;
            for from in 0..=start.len() {
                assert_eq!(position_at_from(&start, from, t), all(t), "{from} {t}");
            }
        }
    }

    /// `m1 = s * x` read only by `m2 = m1 * c7` after a long gap: Grappler
    /// regroups the chain, so `m1` is no candidate; `a`, read across the
    /// same gap by a `Neg`, is.
    #[test]
    fn a_link_of_a_mul_chain_is_no_candidate() {
        let spec = |name: String, op: &'static str, inputs: &[&str]| {
            (
                name,
                op,
                inputs.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
            )
        };
        let mut specs = vec![
            spec("x".into(), "Placeholder", &[]),
            spec("s".into(), "Placeholder", &[]),
            spec("m1".into(), "Mul", &["s", "x"]),
            spec("a".into(), "Neg", &["x"]),
            spec("c0".into(), "Neg", &["x", "^m1"]),
        ];
        for i in 1..8 {
            specs.push(spec(format!("c{i}"), "Neg", &[&format!("c{}", i - 1)]));
        }
        specs.push(spec("m2".into(), "Mul", &["m1", "c7"]));
        specs.push(spec("r".into(), "Neg", &["a"]));
        specs.push(spec("out".into(), "AddN", &["m2", "r"]));
        let nodes: Vec<NodeSpec<'_>> = specs
            .iter()
            .map(|(name, op, inputs)| NodeSpec {
                name,
                op,
                device: "",
                inputs: inputs.iter().map(String::as_str).collect(),
                outputs: vec![OutSpec {
                    dtype: Some(DType::FLOAT),
                    shape: Shape(Some(vec![64])),
                }],
                calls_function: false,
            })
            .collect();
        let options = BuildOptions {
            persistent_bytes: Some(0),
            ..Default::default()
        };
        let a = crate::analyze_graph(build(&nodes, &options).unwrap()).unwrap();
        let (g, s) = (&a.graph, &a.schedule);
        let pos = |n: &str| {
            let v = (0..g.num_nodes() as u32)
                .find(|&v| g.node_name(v) == n)
                .unwrap();
            s.pos[v as usize]
        };
        assert!(
            pos("m1") < pos("c0") && pos("c7") < pos("m2"),
            "the order the test assumes"
        );
        let swapped: Vec<String> = swap_candidates(g, s, &a.liveness, 2, 1)
            .iter()
            .map(|c| g.tensor_name(c.tensor).to_string())
            .collect();
        assert!(swapped.contains(&"a:0".to_string()), "{swapped:?}");
        assert!(!swapped.contains(&"m1:0".to_string()), "{swapped:?}");
    }
}
