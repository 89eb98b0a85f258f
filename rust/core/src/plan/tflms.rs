//! The data-swapping method of TensorFlow Large Model Support (TFLMS, Le et
//! al. 2018), with its parameters, as the baseline every other strategy is
//! measured against.
//!
//! # The rule
//! Every tensor made by a forward op, of at least `min_bytes`, that a
//! non-forward op reads more than `threshold` schedule positions after the
//! producer is swapped out after its producer. Its late readers, in schedule
//! order, are grouped: a reader within `groupby` positions of its group's
//! first reader shares that group's swap-in. Each swap-in is triggered by
//! the op `ahead` positions before the group's first reader (moved earlier
//! if TensorFlow could fuse that op with a reader, see `trigger.rs`, and
//! never before the last early read). Readers through an alias (`Reshape`
//! of the tensor) keep the original, so such tensors are left alone, and so
//! are tensors a late reader must read straight from their producer (a
//! pooling gradient and its forward op's workspace, `opkind.rs`): TFLMS did
//! not know that rule, and swapping them changes the gradient.
//!
//! # Complexity
//! O(T + E log E) plus O(W) per swap-in for the trigger walk.

use super::trigger::safe_trigger;
use super::{Plan, Swap, SwapIn};
use crate::graph::{Graph, NodeFlags, Phase};
use crate::liveness::Liveness;
use crate::schedule::Schedule;

/// TFLMS's parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TflmsParams {
    /// Smallest producer-to-reader distance (positions) that is swapped.
    pub threshold: u32,
    /// Distance (positions) from the trigger to the first reader it serves.
    pub ahead: u32,
    /// Readers within this distance of a group's first share its swap-in.
    pub groupby: u32,
    pub min_bytes: u64,
}

/// The TFLMS swap plan for the given parameters.
pub fn tflms_plan(g: &Graph, s: &Schedule, l: &Liveness, p: &TflmsParams) -> Plan {
    let mut swaps = Vec::new();
    for t in 0..g.num_tensors() as u32 {
        let tt = &g.tensors[t as usize];
        if l.owner[t as usize] != t
            || tt.bytes < p.min_bytes.max(1)
            || g.phase[tt.node as usize] != Phase::Forward
            || g.nodes[tt.node as usize].flags.has(NodeFlags::SOURCE)
        {
            continue;
        }
        if let Some(sw) = swap_of(g, s, l, t, p) {
            swaps.push(sw);
        }
    }
    Plan {
        swaps,
        recomputes: Vec::new(),
    }
}

fn swap_of(g: &Graph, s: &Schedule, l: &Liveness, t: u32, p: &TflmsParams) -> Option<Swap> {
    let produce = l.produce[t as usize];
    if l.last_use[t as usize] > last_direct_read(g, s, t).unwrap_or(produce) {
        return None; // an alias is read later than the tensor: cannot free it
    }
    let mut late: Vec<(u32, u32)> = Vec::new();
    let mut last_early = produce;
    let mut readers: Vec<(u32, u32)> = g
        .consumers(t)
        .iter()
        .map(|&c| (s.pos[c as usize], c))
        .collect();
    readers.sort_unstable();
    readers.dedup();
    for (pos, c) in readers {
        if g.phase[c as usize] != Phase::Forward && pos - produce > p.threshold {
            late.push((pos, c));
        } else if late.is_empty() {
            last_early = pos;
        } else {
            return None; // an early read after a late one: not a forward/backward split
        }
    }
    let producer = g.op_name(g.tensors[t as usize].node);
    if late
        .iter()
        .any(|&(_, r)| crate::opkind::pairs_with_producer(g.op_name(r), producer))
    {
        return None; // a gradient must read its forward op's own output (opkind.rs)
    }
    let ins = groups(g, s, &late, last_early, p);
    (!ins.is_empty()).then(|| Swap {
        release: crate::graph::NONE,
        gate: crate::graph::NONE,
        tensor: t,
        after: g.tensors[t as usize].node,
        ins,
    })
}

fn last_direct_read(g: &Graph, s: &Schedule, t: u32) -> Option<u32> {
    g.consumers(t).iter().map(|&c| s.pos[c as usize]).max()
}

fn groups(
    g: &Graph,
    s: &Schedule,
    late: &[(u32, u32)],
    last_early: u32,
    p: &TflmsParams,
) -> Vec<SwapIn> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < late.len() {
        let first = late[i].0;
        let mut j = i;
        while j < late.len() && late[j].0 - first <= p.groupby {
            j += 1;
        }
        let mut consumers: Vec<u32> = late[i..j].iter().map(|&(_, c)| c).collect();
        consumers.sort_unstable();
        consumers.dedup();
        let ideal = first.saturating_sub(p.ahead.max(1)).max(last_early + 1);
        if ideal < first {
            if let Some(q) = safe_trigger(g, s, ideal, last_early + 1, &consumers) {
                out.push(SwapIn {
                    trigger: s.order[q as usize],
                    consumers,
                    clone_consumers: vec![],
                    follows: false,
                });
            }
        }
        i = j;
    }
    out
}
