//! Release nodes: for each swap, the op that waits for its swap-out.
//!
//! The simulator frees a swapped tensor once its early readers have run
//! and its swap-out has ended. TensorFlow's executor knows nothing of that:
//! with several ready ops it may run the forward pass ahead while the copy
//! waits for a thread (or, with one inter-op thread, depth first, so that
//! every copy waits until the forward pass ends: measured, the swapped step
//! then peaks as high as the original). A control edge from the swap-out to
//! a later op bounds that: the step cannot move past the op before the
//! original's buffer can go.
//!
//! # The rule
//! The release node of a swap is the first op in schedule order that runs
//! after the swap-out may start (after the producer and `after`), whose
//! predicted start (in the simulation of the finished plan) is not before
//! the swap-out's predicted end, and that TensorFlow cannot fuse with an op
//! the copy depends on: it reads no output of the producer, of `after` or
//! of a direct reader of the producer, shares no input with the producer or
//! `after`, is not a source (sources run at the start of the step
//! whatever their position), and lies on the step's main line
//! (below). The executor goes on with whatever else is ready while
//! the release node waits; if little depends on it, the copy is not waited
//! for at all. Measured: with one inter-op thread, a release node on a
//! batch-norm moving average (which only its own variable write reads) let
//! the forward and backward passes run on while the copy waited for the
//! thread, until a swap-in needed it; the device peak came out 20% over the
//! prediction, and varied from Session to Session.
//!
//! # The main line
//! For a tensor made in the forward pass: a forward op (an ancestor of the
//! loss; the backward pass cannot start without it). For any other tensor:
//! an op the readers of its first swap-in wait for. Side branches are off
//! it (moving averages, dead gradient branches, the loss's own output).
//!
//! # The gate
//! Grappler's remapper fuses no op that has a control input or output
//! (contraction + bias + activation, swish, batch norm + activation...), and
//! a fused kernel rounds differently from the ops it replaces: measured, a
//! release edge on the `Sigmoid` of EfficientNet's swish gradient changed
//! the losses in the 6th digit. So the edge goes on the release node only if
//! its op is in no fusion pattern (pooling, concatenation, slicing,
//! softmax); otherwise on a variable read feeding it that nothing before it
//! reads (a forward op reads its weights that way). A candidate with
//! neither is passed over.
//!
//! # Complexity
//! O(S log S) to take the swaps in schedule order, then
//! O(S * (log D + W * d)) for S swaps, D the positions from a swap's
//! producer to the first op starting after its copy (a galloping search),
//! a walk of W ops of in-degree d, and
//! O(V * d) more for each swap of a tensor not made in the forward pass
//! (a reverse walk of at most `MAX_VISIT` = V ops).

use rustc_hash::FxHashSet;
use smallvec::SmallVec;

use super::Plan;
use crate::graph::{Graph, NodeFlags, Phase, NONE};
use crate::schedule::Schedule;
use crate::simulate::SimResult;

/// Most ops walked past the first position in time.
pub(crate) const MAX_WALK: usize = 256;

/// Most ops visited looking for what a swap-in's readers wait for.
pub(crate) const MAX_VISIT: usize = 1 << 16;

/// Sets `release` and `gate` of every swap of `plan` from `sim`, its
/// simulation.
pub(crate) fn set_releases(g: &Graph, s: &Schedule, plan: &mut Plan, sim: &SimResult) {
    let n = s.order.len();
    if plan.swaps.is_empty() {
        return;
    }
    // In schedule order of where each copy may start: each swap's answer
    // is its own, and the walks then read the schedule and the op starts
    // in one sweep rather than at random (the plan lists swaps in the
    // greedy's order).
    let mut by_lo: Vec<(u32, u32)> = plan
        .swaps
        .iter()
        .enumerate()
        .map(|(k, sw)| {
            let x = g.tensors[sw.tensor as usize].node;
            (s.pos[x as usize].max(s.pos[sw.after as usize]), k as u32)
        })
        .collect();
    by_lo.sort_unstable();
    // The answer of `first_not_before(lo, end)` is max(lo, P(end)), P(end)
    // the first position starting at or after `end` in the whole schedule
    // (starts are non-decreasing along it), and P grows with `end`. So the
    // last answer `prev` = max(lo', P(end')) with lo' <= lo bounds this
    // one from below when `end' <= end`: the search starts there. Copies
    // queued on one engine end in the order they start, so consecutive
    // searches mostly start at or next to their answer.
    let (mut prev_end, mut prev) = (f64::NEG_INFINITY, 0usize);
    for (at, k) in by_lo {
        let k = k as usize;
        let sw = &mut plan.swaps[k];
        (sw.release, sw.gate) = (NONE, NONE);
        let Some(&end) = sim.swap_out_end.get(k) else {
            continue;
        };
        let x = g.tensors[sw.tensor as usize].node;
        let lo = at as usize + 1;
        if lo >= n {
            continue;
        }
        let from = if end >= prev_end { lo.max(prev) } else { lo };
        let first = first_not_before(&s.order, &sim.op_start, from, end);
        debug_assert_eq!(first, first_not_before(&s.order, &sim.op_start, lo, end));
        (prev_end, prev) = (end, first);
        let forward = g.phase.get(x as usize) == Some(&Phase::Forward);
        let waited = match sw.ins.first() {
            Some(i) if !forward => waited_for(g, s, &i.consumers, first),
            _ => FxHashSet::default(),
        };
        let on_line = |r: u32| {
            if forward {
                g.phase[r as usize] == Phase::Forward
            } else {
                waited.contains(&r)
            }
        };
        let found = first_release(g, s, (x, sw.after), first, on_line);
        (sw.release, sw.gate) = found.unwrap_or((NONE, NONE));
    }
}

/// Whether a release node of `plan` would wait in `sim`, a simulation of
/// `plan` without release nodes at [`Detail::Times`](crate::simulate::Detail::Times)
/// or more: one that starts there before its swap-out's end (or whose
/// times `sim` lacks). [`set_releases`] picks none such. O(S).
pub(crate) fn waits(plan: &Plan, sim: &SimResult) -> bool {
    plan.swaps.iter().enumerate().any(|(k, sw)| {
        sw.release != NONE
            && match (
                sim.op_start.get(sw.release as usize),
                sim.swap_out_end.get(k),
            ) {
                (Some(start), Some(end)) => start < end,
                _ => true,
            }
    })
}

/// The first position from `lo` on whose op starts at or after `end`
/// (`order.len()`: none). Starts along the schedule are non-decreasing (the
/// compute stream runs it in order), so this is a binary search, galloping
/// from `lo`: a swap-out mostly ends a few ops after its producer, so the
/// search costs O(log d) for an answer d positions on, not O(log N) random
/// reads of `op_start`.
fn first_not_before(order: &[u32], op_start: &[f64], lo: usize, end: f64) -> usize {
    super::candidates::gallop(order, lo, |v| op_start[*v as usize] < end)
}

/// The release node and gate for a swap of a forward tensor made by `x`
/// that waits for its copy from schedule position `from` on (`wait.rs`):
/// the first op there that [`set_releases`] would take for a copy ending
/// just before it, so that the release it sets on the finished plan is
/// this node or an earlier one whose start the wait already delays.
/// `None`: none within `MAX_WALK` ops, or `x` is not a forward op.
/// O(W * d) for a walk of W ops of in-degree d.
pub(crate) fn forward_release(g: &Graph, s: &Schedule, x: u32, from: usize) -> Option<(u32, u32)> {
    if g.phase.get(x as usize) != Some(&Phase::Forward) {
        return None;
    }
    let lo = from.max(s.pos[x as usize] as usize + 1);
    first_release(g, s, (x, x), lo, |r| g.phase[r as usize] == Phase::Forward)
}

/// The first op from position `first` (at most `MAX_WALK` of them) on the
/// main line (`on_line`), not a source, reading nothing the copy of `x`'s
/// output (started after `after`) may fuse with, and gateable: with its gate.
fn first_release(
    g: &Graph,
    s: &Schedule,
    (x, after): (u32, u32),
    first: usize,
    on_line: impl Fn(u32) -> bool,
) -> Option<(u32, u32)> {
    let n = s.order.len();
    let forbidden = forbidden_inputs(g, x, after);
    s.order[first.min(n)..n.min(first + MAX_WALK)]
        .iter()
        .copied()
        .filter(|&r| {
            on_line(r)
                && !g.nodes[r as usize].flags.has(NodeFlags::SOURCE)
                && !g
                    .inputs(r)
                    .iter()
                    .any(|t| forbidden.binary_search(t).is_ok())
        })
        .find_map(|r| gate_of(g, s, r).map(|gate| (r, gate)))
}

/// Where the control edge for release node `r` goes: `r` itself if its op is
/// one Grappler never fuses, else a variable read that feeds `r` and is read
/// by nothing scheduled before `r` (so waiting there holds up nothing
/// earlier, and no cycle can form: everything downstream of the read is at
/// or after `r`, everything upstream of the copy before it). None: `r`
/// cannot be gated. O(in-degree of r + out-degree of the reads).
fn gate_of(g: &Graph, s: &Schedule, r: u32) -> Option<u32> {
    if crate::opkind::never_fused(g.op_name(r)) {
        return Some(r);
    }
    let at = s.pos[r as usize];
    g.inputs(r)
        .iter()
        .map(|&t| g.tensors[t as usize].node)
        .find(|&p| {
            crate::opkind::is_variable_read(g.op_name(p))
                && g.control_outputs(p)
                    .iter()
                    .all(|&c| s.pos[c as usize] >= at)
                && g.outputs(p)
                    .all(|o| g.consumers(o).iter().all(|&c| s.pos[c as usize] >= at))
        })
}

/// The ops with a position in `lo..` that `sinks` wait for (data and
/// control edges), at most `MAX_VISIT` of them visited. The schedule is a
/// topological order, so no ancestor of an op before `lo` is at or after
/// `lo`: the walk stops there and misses nothing. O(MAX_VISIT * d).
fn waited_for(g: &Graph, s: &Schedule, sinks: &[u32], lo: usize) -> FxHashSet<u32> {
    let mut seen: FxHashSet<u32> = FxHashSet::default();
    let mut stack: Vec<u32> = Vec::new();
    for &c in sinks {
        if s.pos[c as usize] as usize >= lo && seen.insert(c) {
            stack.push(c);
        }
    }
    while let Some(u) = stack.pop() {
        let data = g.inputs(u).iter().map(|&t| g.tensors[t as usize].node);
        for p in data.chain(g.control_inputs(u).iter().copied()) {
            if s.pos[p as usize] as usize >= lo && seen.len() < MAX_VISIT && seen.insert(p) {
                stack.push(p);
            }
        }
    }
    seen
}

/// Tensors a release node must not read: the producer's and `after`'s
/// outputs and inputs, and the outputs of the producer's direct readers.
/// Sorted, without duplicates: O(F log F) for F of them, then O(log F)
/// per input checked (no hash set built per swap; up to 32 held inline,
/// more spill to the heap).
fn forbidden_inputs(g: &Graph, x: u32, after: u32) -> SmallVec<[u32; 32]> {
    let mut f: SmallVec<[u32; 32]> = SmallVec::new();
    for v in [x, after] {
        f.extend(g.inputs(v).iter().copied());
        f.extend(g.outputs(v));
    }
    for o in g.outputs(x) {
        for &c in g.consumers(o) {
            f.extend(g.outputs(c));
        }
    }
    f.sort_unstable();
    f.dedup();
    f
}

#[cfg(test)]
mod tests {
    use super::first_not_before;

    /// The galloping search answers as a binary search over the whole
    /// rest of the schedule, for every start and every end time: starts
    /// with runs of equal times (ops of no time), ends before the first,
    /// between, on and after the last start.
    #[test]
    fn galloping_search_is_the_binary_search() {
        let mut seed = 7u64;
        for n in [1usize, 2, 3, 5, 17, 64, 100] {
            // A schedule in a scrambled node order (7 is prime to every n);
            // starts non-decreasing along it.
            let order: Vec<u32> = (0..n as u32).map(|p| (p * 7 + 3) % n as u32).collect();
            let order = if n % 7 == 0 {
                (0..n as u32).collect()
            } else {
                order
            };
            let mut op_start = vec![0.0; n];
            let mut t = 0.0;
            for &v in &order {
                seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                t += ((seed >> 33) % 3) as f64; // 0, 1 or 2: runs of equal starts
                op_start[v as usize] = t;
            }
            for lo in 0..n {
                for k in -1..=(2 * t as i64 + 2) {
                    let end = k as f64 / 2.0;
                    let want = lo + order[lo..].partition_point(|&v| op_start[v as usize] < end);
                    assert_eq!(
                        first_not_before(&order, &op_start, lo, end),
                        want,
                        "{n} {lo} {end}"
                    );
                }
            }
        }
    }
}
