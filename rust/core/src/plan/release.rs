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
//! `after`, and is not a source (sources run at the start of the step
//! whatever their position). Walking at most `MAX_WALK` ops from the first
//! position in time; none found: no release node. The wait then costs
//! nothing in the simulation that chose it, and the plan's predicted figures
//! are unchanged (tested).
//!
//! # Complexity
//! O(S * (log N + W * d)) for S swaps, a walk of W ops of in-degree d.

use rustc_hash::FxHashSet;

use super::Plan;
use crate::graph::{Graph, NodeFlags, NONE};
use crate::schedule::Schedule;
use crate::simulate::SimResult;

/// Most ops walked past the first position in time.
pub const MAX_WALK: usize = 256;

/// Sets `release` of every swap of `plan` from `sim`, its simulation.
pub fn set_releases(g: &Graph, s: &Schedule, plan: &mut Plan, sim: &SimResult) {
    let n = s.order.len();
    for (k, sw) in plan.swaps.iter_mut().enumerate() {
        sw.release = NONE;
        let Some(&end) = sim.swap_out_end.get(k) else {
            continue;
        };
        let x = g.tensors[sw.tensor as usize].node;
        let lo = s.pos[x as usize].max(s.pos[sw.after as usize]) as usize + 1;
        if lo >= n {
            continue;
        }
        // Starts along the schedule are non-decreasing: the compute stream
        // runs it in order.
        let first = lo + s.order[lo..].partition_point(|&v| sim.op_start[v as usize] < end);
        let forbidden = forbidden_inputs(g, x, sw.after);
        sw.release = s.order[first..n.min(first + MAX_WALK)]
            .iter()
            .copied()
            .find(|&r| {
                !g.nodes[r as usize].flags.has(NodeFlags::SOURCE)
                    && !g.inputs(r).iter().any(|t| forbidden.contains(t))
            })
            .unwrap_or(NONE);
    }
}

/// Tensors a release node must not read: the producer's and `after`'s
/// outputs and inputs, and the outputs of the producer's direct readers.
fn forbidden_inputs(g: &Graph, x: u32, after: u32) -> FxHashSet<u32> {
    let mut f: FxHashSet<u32> = FxHashSet::default();
    for v in [x, after] {
        f.extend(g.inputs(v).iter().copied());
        f.extend(g.outputs(v));
    }
    for o in g.outputs(x) {
        for &c in g.consumers(o) {
            f.extend(g.outputs(c));
        }
    }
    f
}
