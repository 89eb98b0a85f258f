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
//! docs/accuracy.md). Nor does an untimed node (`untimed.rs`: every
//! ancestor a source, or dead, so that Grappler hands its control edges to
//! its inputs). Starting from the ideal position, walk to earlier ops
//! until one qualifies.
//!
//! # Complexity
//! O(k log k + W * d * min(f log k, K)) for a walk of at most `MAX_WALK`
//! ops of in-degree `d` against `k` consumers with `K` data inputs in all,
//! where `f` is the number of readers of one input of a walked op: each
//! input is checked from the shorter side, its readers (binary search in the
//! sorted consumers) or the consumers' inputs (hashed once, O(K), only when
//! some input has more than `K` readers). So one op reading O(N) tensors (a
//! gradient `IdentityN`) among the consumers, or one tensor read O(N) times
//! (a learning rate) read by a walked op, costs O(N) only in a call where
//! both meet, not in every call.

use rustc_hash::FxHashSet;

use crate::graph::{Graph, NodeFlags};
use crate::schedule::Schedule;

/// Most positions walked back from the ideal trigger.
pub(crate) const MAX_WALK: u32 = 256;

/// The latest position in `lowest..=ideal` whose op may trigger for
/// `consumers`, or `None`.
pub(crate) fn safe_trigger(
    g: &Graph,
    s: &Schedule,
    ideal: u32,
    lowest: u32,
    consumers: &[u32],
) -> Option<u32> {
    let mut readers: Vec<u32> = consumers.to_vec();
    readers.sort_unstable();
    readers.dedup();
    safe_trigger_sorted(g, s, ideal, lowest, &readers)
}

/// [`safe_trigger`] for consumers already sorted, without duplicates.
pub(crate) fn safe_trigger_sorted(
    g: &Graph,
    s: &Schedule,
    ideal: u32,
    lowest: u32,
    readers: &[u32],
) -> Option<u32> {
    debug_assert!(readers.windows(2).all(|w| w[0] < w[1]));
    let is_reader = |n: u32| readers.binary_search(&n).is_ok();
    let total_in: usize = readers.iter().map(|&c| g.inputs(c).len()).sum();
    // The consumers' inputs, hashed on first need.
    let mut inputs: Option<FxHashSet<u32>> = None;
    let mut read_by_consumer = |x: u32| {
        let by_x = g.consumers(x);
        if by_x.len() <= total_in {
            return by_x.iter().any(|&c| is_reader(c));
        }
        inputs
            .get_or_insert_with(|| {
                let set = readers.iter().flat_map(|&c| g.inputs(c).iter().copied());
                set.collect()
            })
            .contains(&x)
    };
    let stop = lowest.max(ideal.saturating_sub(MAX_WALK));
    let mut q = ideal;
    loop {
        let t = s.order[q as usize];
        let qualifies = !g.nodes[t as usize]
            .flags
            .has(NodeFlags::SOURCE | NodeFlags::UNTIMED)
            && !is_reader(t)
            && !g.inputs(t).iter().any(|&x| read_by_consumer(x))
            && !g.data_consumers(t).iter().any(|&c| is_reader(c));
        if qualifies {
            return Some(q);
        }
        if q == 0 || q <= stop {
            return None;
        }
        q -= 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::build::{build, BuildOptions, NodeSpec, OutSpec};
    use crate::dtype::DType;
    use crate::graphdef::Shape;
    use crate::schedule::schedule;

    fn spec(name: &'static str, op: &'static str, inputs: &[&'static str]) -> NodeSpec<'static> {
        let outputs = match op {
            "AssignSubVariableOp" => vec![],
            _ => vec![OutSpec {
                dtype: Some(if op == "VarHandleOp" {
                    DType::RESOURCE
                } else {
                    DType::FLOAT
                }),
                shape: Shape(Some(vec![4])),
            }],
        };
        NodeSpec {
            name,
            op,
            device: "",
            inputs: inputs.to_vec(),
            outputs,
            calls_function: false,
        }
    }

    /// FIFO order: x var f loss g dead g2 dead2 h write. `dead2` (nothing
    /// needs it, and it reads the dead `dead`) is at the ideal position and
    /// is passed over; `g2` feeds the reader `h`; `dead` reads the live loss
    /// and times like any op.
    #[test]
    fn a_dead_node_below_a_dead_one_never_triggers() {
        let g = build(
            &[
                spec("x", "Placeholder", &[]),
                spec("var", "VarHandleOp", &[]),
                spec("f", "Relu", &["x"]),
                spec("loss", "Sum", &["f"]),
                spec("g", "Neg", &["loss"]),
                spec("dead", "Neg", &["loss"]),
                spec("g2", "Neg", &["g"]),
                spec("dead2", "Neg", &["dead"]),
                spec("h", "Mul", &["g2", "f"]),
                spec("write", "AssignSubVariableOp", &["var", "h"]),
            ],
            &BuildOptions {
                loss: Some("loss:0".into()),
                persistent_bytes: Some(0),
                ..Default::default()
            },
        )
        .unwrap();
        let s = schedule(&g).unwrap();
        let name = |q: u32| g.node_name(s.order[q as usize]).to_string();
        let at = |n: &str| (0..10).find(|&q| name(q) == n).unwrap();
        let h = s.order[at("h") as usize];
        assert_eq!(at("dead2"), at("g2") + 1, "the order the test assumes");
        let q = safe_trigger(&g, &s, at("dead2"), 0, &[h]).unwrap();
        assert_eq!(name(q), "dead");
    }
}
