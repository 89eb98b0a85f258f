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
//! docs/accuracy.md). Nor does a dead node (`dead.rs`: nothing the step
//! keeps depends on it, so Grappler hands its control edges to its inputs
//! or, reading live ops only, a control edge out of it changes the bits).
//! Nor does an op that Grappler's arithmetic optimizer
//! regroups with a neighbour (`opkind::regrouped_with`): a `Mul` whose one
//! reader is a `Mul`, an `AddV2` in a tree of adds. Its stages
//! `MinimizeBroadcasts` and `AddOpsRewrite` take in no node that drives a
//! control edge, so a trigger there leaves the chain as it was written where
//! the original step has it reordered: measured on a Keras MobileNetV2, the
//! stage tagged 228 nodes of the original's executed graph and 212 of the
//! rewritten one's (the batch-norm gradients' `Mul` chains whose first `Mul`
//! triggered), and on the minimal graph in `tests/test_default_grappler.py`
//! the product came out rounded otherwise. Starting from the ideal position,
//! walk to earlier ops until one qualifies.
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
use crate::opkind::{add_group_root, regrouped_with};
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
            .has(NodeFlags::SOURCE | NodeFlags::DEAD)
            && !is_reader(t)
            && !g.inputs(t).iter().any(|&x| read_by_consumer(x))
            && !g.data_consumers(t).iter().any(|&c| is_reader(c))
            && !regrouped(g, t);
        if qualifies {
            return Some(q);
        }
        if q == 0 || q <= stop {
            return None;
        }
        q -= 1;
    }
}

/// Whether Grappler's arithmetic optimizer groups `t` with a neighbour, so
/// that a control edge out of `t` would change what it computes: `t`'s one
/// data reader continues its chain, or `t` heads an add tree that takes in an
/// input whose one reader is `t`. O(in-degree of `t`).
pub(super) fn regrouped(g: &Graph, t: u32) -> bool {
    let only_reader = |n: u32| match g.data_consumers(n) {
        [c] => Some(*c),
        _ => None,
    };
    let op = g.op_name(t);
    if only_reader(t).is_some_and(|c| regrouped_with(g.op_name(c), op)) {
        return true;
    }
    add_group_root(op)
        && g.inputs(t).iter().any(|&x| {
            let p = g.tensors[x as usize].node;
            only_reader(p) == Some(t) && regrouped_with(op, g.op_name(p))
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::build::{build, BuildOptions, NodeSpec};
    use crate::schedule::schedule;

    fn spec(name: &'static str, op: &'static str, inputs: &[&'static str]) -> NodeSpec<'static> {
        NodeSpec::test(name, op, inputs, &[4])
    }

    /// FIFO order: x var f loss g dead g2 dead2 h write. `dead2` (nothing
    /// needs it, and it reads the dead `dead`) is at the ideal position and
    /// is passed over; `g2` feeds the reader `h`; `dead` reads the live loss
    /// but is dead too (a control edge out of it would keep it, and give the
    /// loss a reader the original step has not): the walk ends at `g`.
    #[test]
    fn no_dead_node_triggers() {
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
        assert_eq!(name(q), "g");
    }

    /// The swap-in for `r` is ideally triggered by `m1`, whose one reader
    /// `m2` is a `Mul` too: Grappler's `MinimizeBroadcasts` regroups the two
    /// unless `m1` drives a control edge. The walk passes over it to an op
    /// that is no link of a chain. The chain's last link (its root) may
    /// trigger: the stage does not ask.
    #[test]
    fn a_link_of_a_mul_chain_never_triggers() {
        let (g, s) = graph_of(&[
            spec("x", "Placeholder", &[]),
            spec("s", "Placeholder", &[]),
            spec("v", "Placeholder", &[]),
            spec("b", "Neg", &["x"]),
            spec("a", "Neg", &["x"]),
            spec("m1", "Mul", &["s", "x"]),
            spec("m2", "Mul", &["m1", "v"]),
            spec("r", "Neg", &["a"]),
        ]);
        let (at, name) = (|n: &str| position(&g, &s, n), |q: u32| pos_name(&g, &s, q));
        let r = s.order[at("r") as usize];
        assert_eq!(name(safe_trigger(&g, &s, at("m1"), 0, &[r]).unwrap()), "b");
        assert_eq!(name(safe_trigger(&g, &s, at("m2"), 0, &[r]).unwrap()), "m2");
    }

    /// An `AddV2` whose input is an `AddV2` read by it alone: the two make a
    /// tree that `AddOpsRewrite` collapses only when neither drives a control
    /// edge (the head included).
    #[test]
    fn no_node_of_an_add_tree_triggers() {
        let (g, s) = graph_of(&[
            spec("x", "Placeholder", &[]),
            spec("y", "Placeholder", &[]),
            spec("b", "Neg", &["y"]),
            spec("a", "Neg", &["x"]),
            spec("s1", "AddV2", &["x", "y"]),
            spec("s2", "AddV2", &["s1", "y"]),
            spec("out", "Neg", &["s2"]),
            spec("r", "Neg", &["a"]),
        ]);
        let (at, name) = (|n: &str| position(&g, &s, n), |q: u32| pos_name(&g, &s, q));
        let r = s.order[at("r") as usize];
        for n in ["s1", "s2"] {
            assert_eq!(
                name(safe_trigger(&g, &s, at(n), 0, &[r]).unwrap()),
                "b",
                "{n}"
            );
        }
        assert_eq!(
            name(safe_trigger(&g, &s, at("out"), 0, &[r]).unwrap()),
            "out"
        );
    }

    /// A graph with no loss and no variable write (so no dead node), and its
    /// schedule.
    fn graph_of(specs: &[NodeSpec<'static>]) -> (Graph, Schedule) {
        let options = BuildOptions {
            persistent_bytes: Some(0),
            ..Default::default()
        };
        let g = build(specs, &options).unwrap();
        let s = schedule(&g).unwrap();
        (g, s)
    }

    fn pos_name(g: &Graph, s: &Schedule, q: u32) -> String {
        g.node_name(s.order[q as usize]).to_string()
    }

    fn position(g: &Graph, s: &Schedule, n: &str) -> u32 {
        (0..s.order.len() as u32)
            .find(|&q| pos_name(g, s, q) == n)
            .unwrap()
    }
}
