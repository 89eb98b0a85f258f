//! Choosing a trigger op TensorFlow cannot merge with the ops it serves.
//!
//! A swap-in or a recompute clone gets a control edge from its trigger, and
//! its consumers read its output. If TensorFlow fuses the trigger with one of
//! those consumers into a single op (oneDNN fuses `Conv2DBackpropFilter`
//! with the `BiasAddGrad` of the same gradient; Grappler's remapper fuses a
//! `Conv2D` with the `BiasAdd` reading it), the fused op both precedes and
//! follows the copy: a cycle, and the step cannot run. So a trigger must not
//! share a data input with a consumer and no consumer may read its outputs.
//! A source (a constant, a placeholder) never triggers: it has no inputs,
//! so TensorFlow runs it at the start of the step whatever its position in
//! our schedule, and the copy would start at once (measured: see
//! docs/accuracy.md). Starting from the ideal position, walk to earlier ops
//! until one qualifies.
//!
//! # Complexity
//! O(W * (d + k)) for a walk of at most `MAX_WALK` ops of in-degree `d`
//! against `k` consumer inputs (hashed once, O(k)).

use rustc_hash::FxHashSet;

use crate::graph::{Graph, NodeFlags};
use crate::schedule::Schedule;

/// Most positions walked back from the ideal trigger.
pub const MAX_WALK: u32 = 256;

/// The latest position in `lowest..=ideal` whose op may trigger for
/// `consumers`, or `None`.
pub fn safe_trigger(
    g: &Graph,
    s: &Schedule,
    ideal: u32,
    lowest: u32,
    consumers: &[u32],
) -> Option<u32> {
    let mut inputs: FxHashSet<u32> = FxHashSet::default();
    let mut readers: FxHashSet<u32> = FxHashSet::default();
    for &c in consumers {
        inputs.extend(g.inputs(c).iter().copied());
        readers.insert(c);
    }
    let stop = lowest.max(ideal.saturating_sub(MAX_WALK));
    let mut q = ideal;
    loop {
        let t = s.order[q as usize];
        let shares = g.inputs(t).iter().any(|x| inputs.contains(x));
        let feeds = g
            .outputs(t)
            .any(|o| g.consumers(o).iter().any(|c| readers.contains(c)));
        let source = g.nodes[t as usize].flags.has(NodeFlags::SOURCE);
        if !shares && !feeds && !source && !readers.contains(&t) {
            return Some(q);
        }
        if q == 0 || q <= stop {
            return None;
        }
        q -= 1;
    }
}
