//! Backward tensors rebuilt from small inputs: recompute units outside the
//! forward pass.
//!
//! # The rule
//! A large tensor made in the backward pass and read again much later in
//! it (a swap candidate) is sometimes a broadcast: a per-channel gradient
//! tiled to the activation's shape and scaled (the gradient of a mean, of
//! a batch normalisation's moments), held from its producer to a sum of
//! gradient contributions far down the schedule. Swapping it costs a round
//! trip on the link with little compute to hide it; rebuilding it just
//! before its late reader costs a few elementwise ops and keeps only its
//! small inputs alive. For each such candidate, walk back from its
//! producer: an input below `min_bytes` (its buffer's bytes) is read by the
//! clones; a larger input is rebuilt too, so its producer joins the unit.
//! The unit is kept when every op in it is a backward op that may be
//! recomputed and it holds at most [`MAX_OPS`] ops; otherwise the tensor
//! depends on large data and is no cheaper to rebuild than to keep. Which
//! tensors the unit frees and when its clones run are placed like any other
//! unit's (`options.rs`); the greedy and the simulator judge the cost.
//!
//! # Complexity
//! O(C log C + C * MAX_OPS * d) for C candidates and d the largest
//! in-degree met: the candidates are sorted by producer, and each walk
//! visits at most `MAX_OPS + 1` ops and reads their inputs.

use rustc_hash::FxHashSet;

use super::candidates::SwapCandidate;
use super::options::Ctx;
use crate::graph::{NodeFlags, Phase};

/// Most ops in one rebuilt unit.
pub(crate) const MAX_OPS: usize = 4;

/// The units (node lists in schedule order) rebuilding backward candidates
/// from inputs below `min_bytes`, in schedule order of their last ops.
/// Candidates are taken latest producer first, and one whose producer is
/// already in a unit gets none: that unit's options free its tensor too
/// (`options.rs` frees every candidate among a unit's outputs).
pub(crate) fn small_input_units(
    ctx: &Ctx<'_>,
    cands: &[SwapCandidate],
    min_bytes: u64,
) -> Vec<Vec<u32>> {
    let g = ctx.g;
    let mut roots: Vec<(u32, u32)> = (cands.iter())
        .filter(|c| c.tensor == c.owner)
        .map(|c| (c.produce, ctx.producer[c.tensor as usize]))
        .filter(|&(_, p)| g.phase[p as usize] == Phase::Backward)
        .collect();
    roots.sort_unstable_by(|a, b| b.cmp(a));
    roots.dedup();
    let mut covered: FxHashSet<u32> = FxHashSet::default();
    let mut out = Vec::new();
    let mut nodes: Vec<u32> = Vec::with_capacity(MAX_OPS + 1);
    for (_, p) in roots {
        if covered.contains(&p) || !walk(ctx, p, min_bytes, &mut nodes) {
            continue;
        }
        covered.extend(nodes.iter().copied());
        nodes.sort_by_key(|&v| ctx.s.pos[v as usize]);
        out.push(nodes.clone());
    }
    out.reverse(); // schedule order of their last ops
    out
}

/// Collects into `nodes` the ops rebuilding `root`'s outputs from inputs
/// below `min_bytes`; false when one is not a recomputable backward op or
/// there are more than [`MAX_OPS`].
fn walk(ctx: &Ctx<'_>, root: u32, min_bytes: u64, nodes: &mut Vec<u32>) -> bool {
    let (g, l) = (ctx.g, ctx.l);
    nodes.clear();
    nodes.push(root);
    let mut next = 0;
    while next < nodes.len() {
        let v = nodes[next] as usize;
        next += 1;
        if g.phase[v] != Phase::Backward || g.nodes[v].flags.has(NodeFlags::NO_RECOMPUTE) {
            return false;
        }
        for &t in g.inputs(v as u32) {
            if g.tensors[l.owner[t as usize] as usize].bytes < min_bytes {
                continue;
            }
            let p = ctx.producer[t as usize];
            if !nodes.contains(&p) {
                if nodes.len() == MAX_OPS {
                    return false;
                }
                nodes.push(p);
            }
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::candidates::swap_candidates;
    use crate::synth::{graphdef, SynthKind, SynthSpec};

    #[test]
    fn units_are_short_backward_chains_fed_by_small_tensors() {
        let spec = SynthSpec {
            kind: SynthKind::Mixed,
            blocks: 4,
            batch: 4,
            size: 16,
            channels: 32,
            ..SynthSpec::default()
        };
        let a = crate::analyze(&graphdef(&spec), &Default::default()).unwrap();
        let times = vec![1e-6; a.graph.num_nodes()];
        let dev = crate::device::preset("v100-nvlink2").unwrap();
        let ctx = Ctx::new(&a, &times, &dev);
        let min_bytes = 1024;
        let cands = swap_candidates(&a.graph, &a.schedule, &a.liveness, 2, min_bytes);
        let units = small_input_units(&ctx, &cands, min_bytes);
        assert!(!units.is_empty());
        let g = &a.graph;
        let mut seen = FxHashSet::default();
        let mut last = 0;
        for u in &units {
            assert!(!u.is_empty() && u.len() <= MAX_OPS);
            let pos: Vec<u32> = u.iter().map(|&v| a.schedule.pos[v as usize]).collect();
            assert!(pos.windows(2).all(|w| w[0] < w[1]), "schedule order");
            assert!(pos[pos.len() - 1] >= last, "units in schedule order");
            last = pos[pos.len() - 1];
            for &v in u {
                assert!(seen.insert(v), "a node in two units");
                assert_eq!(g.phase[v as usize], Phase::Backward);
                assert!(!g.nodes[v as usize].flags.has(NodeFlags::NO_RECOMPUTE));
                for &t in g.inputs(v) {
                    let outside = !u.contains(&g.tensors[t as usize].node);
                    let owner = a.liveness.owner[t as usize];
                    assert!(!outside || g.tensors[owner as usize].bytes < min_bytes);
                }
            }
            let root = *u.last().unwrap();
            assert!(cands
                .iter()
                .any(|c| g.tensors[c.tensor as usize].node == root));
        }
    }
}
