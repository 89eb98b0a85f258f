//! Planning options with their memory effect and estimated cost: swapping
//! one buffer, or recomputing one unit.
//!
//! # Estimates
//! Times come from the op-time prefix sums of the schedule (`start[p]`).
//! A swap-out starts when its producer ends and takes `latency + bytes /
//! d2h`; the original is kept until its last early reader and until the
//! copy is done. The swap-in trigger is chosen from the cost model: the
//! latest op whose end leaves `latency + bytes / h2d` of compute before the
//! first late reader (not a fixed distance); when no op is early enough the
//! earliest possible trigger is used and the shortfall is the option's
//! exposed time. A recompute costs the clones' op times and keeps its
//! external inputs alive up to the clones. Link contention is not in these
//! estimates; the simulator judges the finished plan.
//!
//! # Complexity
//! O(log N) per swap option (binary searches on `start`), O(size of the unit
//! + its inputs) per recompute option.

use super::candidates::{position_at, SwapCandidate};
use super::trigger::safe_trigger;
use crate::graph::{Graph, NodeFlags};
use crate::liveness::Liveness;
use crate::schedule::Schedule;

/// Link figures the estimates need.
#[derive(Debug, Clone, Copy)]
pub struct Link {
    pub d2h_bytes_per_s: f64,
    pub h2d_bytes_per_s: f64,
    pub latency_s: f64,
}

impl Link {
    pub fn d2h(&self, bytes: u64) -> f64 {
        self.latency_s + bytes as f64 / self.d2h_bytes_per_s
    }
    pub fn h2d(&self, bytes: u64) -> f64 {
        self.latency_s + bytes as f64 / self.h2d_bytes_per_s
    }
}

/// Shared inputs of the option builders.
pub struct Ctx<'a> {
    pub g: &'a Graph,
    pub s: &'a Schedule,
    pub l: &'a Liveness,
    pub op_time: &'a [f64],
    pub start: Vec<f64>,
    pub link: Link,
}

/// A swap of one candidate, placed.
#[derive(Debug, Clone)]
pub struct SwapOpt {
    pub cand: usize,
    /// The original stays until this position.
    pub keep_until: u32,
    /// Position of the swap-in trigger.
    pub trigger: u32,
    pub exposed_s: f64,
    pub transfer_s: f64,
}

/// Places a swap: `None` when it frees nothing.
pub fn swap_option(ctx: &Ctx<'_>, cand: usize, c: &SwapCandidate) -> Option<SwapOpt> {
    let out_start = ctx.start[c.produce as usize + 1];
    let d_out = ctx.link.d2h(c.bytes);
    let out_done = position_at(&ctx.start, out_start + d_out);
    let keep_until = c.last_early.max(out_done.saturating_sub(1));
    let first_late = c.first_late();
    if keep_until + 1 >= first_late {
        return None;
    }
    let d_in = ctx.link.h2d(c.bytes);
    let need = ctx.start[first_late as usize] - d_in;
    // Latest q with start[q + 1] <= need, i.e. q + 1 = (first index > need) - 1.
    let latest = ctx.start.partition_point(|&x| x <= need) as i64 - 2;
    let earliest = i64::from(keep_until) + 1;
    let ideal = latest.max(earliest).min(i64::from(first_late) - 1) as u32;
    if ideal < keep_until + 1 {
        return None;
    }
    let consumers: Vec<u32> = c.late.iter().map(|&(_, n)| n).collect();
    let trigger = safe_trigger(ctx.g, ctx.s, ideal, keep_until + 1, &consumers)?;
    let window = ctx.start[first_late as usize] - ctx.start[trigger as usize + 1];
    let exposed_s = (d_in - window).max(0.0);
    Some(SwapOpt {
        cand,
        keep_until,
        trigger,
        exposed_s,
        transfer_s: d_in + d_out,
    })
}

/// A recompute of one unit, placed.
#[derive(Debug, Clone)]
pub struct RecomputeOpt {
    pub unit: usize,
    /// Nodes to clone, schedule order.
    pub clones: Vec<u32>,
    /// Tensors freed, each with its last early reader position.
    pub saved: Vec<(u32, u32)>,
    /// Late readers, redirected to the clones (node ids, sorted).
    pub consumers: Vec<u32>,
    /// Clones run after the op at this position.
    pub trigger: u32,
    /// Tensors outside the unit the clones read.
    pub inputs: Vec<u32>,
    pub time_s: f64,
    pub bytes: u64,
    /// Bytes of clone outputs nobody reads late (live while the clones run).
    pub transient: u64,
}

/// Most recompute options built per unit (one per clone time).
const TRIGGERS_PER_UNIT: usize = 3;

/// Places the recompute of `unit` at up to three clone times, each freeing
/// the unit's tensors idle across it (`gap_of[t]`: index into `cands`). The
/// greedy takes at most one of them (they free the same tensors).
pub fn recompute_options(
    ctx: &Ctx<'_>,
    unit: usize,
    nodes: &[u32],
    cands: &[SwapCandidate],
    gap_of: &[u32],
    in_unit: &mut [bool],
) -> Vec<RecomputeOpt> {
    let g = ctx.g;
    let saved: Vec<&SwapCandidate> = nodes
        .iter()
        .flat_map(|&v| g.outputs(v))
        .filter_map(|t| cands.get(gap_of[t as usize] as usize))
        .collect();
    for &v in nodes {
        in_unit[v as usize] = true;
    }
    let mut out = Vec::new();
    for (ideal, set) in triggers(&saved) {
        let lowest = set.iter().map(|d| d.last_early).max().unwrap_or(0) + 1;
        let consumers: Vec<u32> = set
            .iter()
            .flat_map(|d| d.late.iter().map(|&(_, n)| n))
            .collect();
        let Some(trigger) = safe_trigger(g, ctx.s, ideal, lowest, &consumers) else {
            continue;
        };
        let clones = clone_set(g, nodes, &set, in_unit);
        out.extend(finish_recompute(ctx, unit, clones, &set, trigger, in_unit));
    }
    for &v in nodes {
        in_unit[v as usize] = false;
    }
    out
}

/// Clone times worth trying, most bytes freed first: each tensor's first
/// late read, with the tensors idle across it (last early read before,
/// first late read after). O(k^2) for k tensors of a unit.
fn triggers<'c>(cands: &[&'c SwapCandidate]) -> Vec<(u32, Vec<&'c SwapCandidate>)> {
    let idle = |d: &SwapCandidate, t: u32| d.last_early < t && d.first_late() > t;
    let mut scored: Vec<(u64, u32)> = Vec::new();
    for c in cands {
        let t = c.first_late() - 1;
        let bytes: u64 = cands.iter().filter(|d| idle(d, t)).map(|d| d.bytes).sum();
        if bytes > 0 {
            scored.push((bytes, t));
        }
    }
    scored.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    scored.dedup_by_key(|x| x.1);
    scored.truncate(TRIGGERS_PER_UNIT);
    scored
        .into_iter()
        .map(|(_, t)| (t, cands.iter().copied().filter(|d| idle(d, t)).collect()))
        .collect()
}

/// Nodes of the unit that the saved tensors depend on, in schedule order.
fn clone_set(g: &Graph, nodes: &[u32], saved: &[&SwapCandidate], in_unit: &[bool]) -> Vec<u32> {
    let mut need: Vec<u32> = saved
        .iter()
        .map(|c| g.tensors[c.tensor as usize].node)
        .collect();
    let mut mark = rustc_hash::FxHashSet::default();
    while let Some(v) = need.pop() {
        if mark.insert(v) {
            for p in g.predecessors(v) {
                if in_unit[p as usize] {
                    need.push(p);
                }
            }
        }
    }
    nodes.iter().copied().filter(|v| mark.contains(v)).collect()
}

fn finish_recompute(
    ctx: &Ctx<'_>,
    unit: usize,
    clones: Vec<u32>,
    saved: &[&SwapCandidate],
    trigger: u32,
    in_unit: &[bool],
) -> Option<RecomputeOpt> {
    let g = ctx.g;
    let mut inputs = Vec::new();
    for &v in &clones {
        if g.nodes[v as usize].flags.has(NodeFlags::NO_RECOMPUTE) {
            return None;
        }
        for &t in g.inputs(v) {
            if !in_unit[g.tensors[t as usize].node as usize] {
                inputs.push(t);
            }
        }
    }
    inputs.sort_unstable();
    inputs.dedup();
    let mut consumers: Vec<u32> = saved
        .iter()
        .flat_map(|c| c.late.iter().map(|&(_, n)| n))
        .collect();
    consumers.sort_unstable();
    consumers.dedup();
    let saved_t: Vec<u32> = saved.iter().map(|c| c.tensor).collect();
    let transient = clones
        .iter()
        .flat_map(|&v| g.outputs(v))
        .filter(|t| !saved_t.contains(t))
        .map(|t| g.tensors[t as usize].bytes)
        .sum();
    Some(RecomputeOpt {
        unit,
        time_s: clones.iter().map(|&v| ctx.op_time[v as usize]).sum(),
        clones,
        saved: saved.iter().map(|c| (c.tensor, c.last_early)).collect(),
        bytes: saved.iter().map(|c| c.bytes).sum(),
        consumers,
        trigger,
        inputs,
        transient,
    })
}
