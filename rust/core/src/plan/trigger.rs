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
//! O(k log k + K log K + W * d * min(f log k, log K)) for a walk of at most
//! `MAX_WALK` ops of in-degree `d` against `k` consumers with `K` data
//! inputs in all, where `f` is the number of readers of one input of a
//! walked op: each input is checked from the shorter side, its readers
//! (binary search in the sorted consumers) or the consumers' inputs (sorted
//! once, O(K log K), then binary search, only when
//! some input has more than `K` readers; `K` itself is counted, O(k), only
//! when some input has more readers than there are consumers). So one op
//! reading O(N) tensors (a gradient `IdentityN`) among the consumers, or one
//! tensor read O(N) times (a learning rate) read by a walked op, costs O(N)
//! only in a call where both meet, not in every call.

use smallvec::SmallVec;

use crate::graph::{Graph, NodeFlags};
use crate::opkind::{add_group_root, div_folded_to_mul, is_constant, regrouped_with};
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
    // Inline for the few readers a tensor usually has: no allocation.
    let mut readers: SmallVec<[u32; 8]> = SmallVec::from_slice(consumers);
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
    // The consumers' data inputs in all, counted on first need: a reader
    // has at least one, so an input with no more readers than there are
    // consumers is checked from its side without counting.
    let mut total_in: Option<usize> = None;
    // The consumers' inputs, sorted on first need (a few: inline, searched
    // by halving; no hash set to allocate per walk).
    let mut inputs: Option<SmallVec<[u32; 16]>> = None;
    let mut read_by_consumer = |x: u32| {
        let by_x = g.consumers(x);
        if by_x.len() <= readers.len()
            || by_x.len()
                <= *total_in.get_or_insert_with(|| readers.iter().map(|&c| g.inputs(c).len()).sum())
        {
            return by_x.iter().any(|&c| is_reader(c));
        }
        let sorted = inputs.get_or_insert_with(|| {
            let mut v: SmallVec<[u32; 16]> = readers
                .iter()
                .flat_map(|&c| g.inputs(c).iter().copied())
                .collect();
            v.sort_unstable();
            v
        });
        sorted.binary_search(&x).is_ok()
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
/// kept data reader continues its chain, or `t` heads an add tree that
/// takes in an input whose one kept reader is `t`. Ops as the stage sees
/// them ([`seen_op`]). O(in-degree of `t`), plus the dead readers
/// [`kept_reader`] passes over.
pub(super) fn regrouped(g: &Graph, t: u32) -> bool {
    let op = seen_op(g, t);
    if kept_reader(g, t).is_some_and(|c| regrouped_with(seen_op(g, c), op)) {
        return true;
    }
    add_group_root(op)
        && g.inputs(t).iter().any(|&x| {
            let p = g.tensors[x as usize].node;
            kept_reader(g, p) == Some(t) && regrouped_with(op, seen_op(g, p))
        })
}

/// The one data reader of `n` that Grappler keeps, if there is one: dead
/// readers (`dead.rs`) are pruned before the arithmetic optimizer runs.
/// Measured on a Keras MobileNetV3Small (SGD, 0.99 of its activations): a
/// hard-swish gradient `.../activation_1/mul/Mul_1` has a dead reader (the
/// gradient with respect to the constant 6) and a `RealDiv` by 6; in the
/// original step it is a link of a `Mul` chain, and a swap-in triggered by
/// it changed the weights (oneDNN on and off). O(1 + the dead readers met
/// before a second kept one).
pub(super) fn kept_reader(g: &Graph, n: u32) -> Option<u32> {
    only(kept_readers(g, n))
}

/// The data readers of `n` that are not dead, as `Graph::data_consumers`
/// lists them.
fn kept_readers(g: &Graph, n: u32) -> impl Iterator<Item = u32> + '_ {
    g.data_consumers(n)
        .iter()
        .copied()
        .filter(|&c| !g.nodes[c as usize].flags.has(NodeFlags::DEAD))
}

/// Whether cloning `v` (`is_clone`: the unit's clones; `is_consumer`: the
/// late readers rewired to them) would regroup a chain the original step
/// leaves alone, or leave alone one it regroups, where `v` is a division by
/// a constant (a `Mul` to Grappler, [`seen_op`]). In the rewrite the clones
/// of `v`'s kept readers and the late readers among them read the clone;
/// the original keeps the rest, the originals of the cloned readers
/// included. `v` with two or more kept readers links no chain in the
/// original step; if either side of the split keeps one reader that
/// continues `v`'s chain ([`regrouped_with`]), that side is regrouped in the
/// rewrite. And an input of the clone whose one kept reader is `v`, with
/// which `v` is regrouped, gains a second reader and leaves the group.
/// Measured on a Keras MobileNetV3Small (SGD, 0.99 of its activations,
/// `chen`): the clone of a hard-sigmoid's `truediv` (a `RealDiv` by 6, read
/// by the forward `Mul` and by its gradient `Mul`) served the gradient
/// alone, was regrouped with it, and the weights changed: the constant
/// joins the chain as a factor of fewer elements, which `MinimizeBroadcasts`
/// moves to the front, so the product is formed in another order.
///
/// Other chains are not checked (an open gap, docs/accuracy.md): refusing
/// every split of a `Mul` or an add refused most recompute plans of the
/// synthetic residual, transformer and mixed graphs, and the stage keeps a
/// chain's order where its small factors already come first, as in a batch
/// norm's `x * (rsqrt * gamma)`; telling the two apart needs the stage's
/// shape rules, not modelled here. O(the kept readers of `v` and of its
/// inputs' producers, times the cost of the two tests).
pub(super) fn clone_splits_chain(
    g: &Graph,
    v: u32,
    is_clone: impl Fn(u32) -> bool,
    is_consumer: impl Fn(u32) -> bool,
) -> bool {
    let op = seen_op(g, v);
    if op == g.op_name(v) {
        return false;
    }
    let continues = |c: u32| regrouped_with(seen_op(g, c), op);
    let reads_clone = |c: u32| is_clone(c) || is_consumer(c);
    if kept_readers(g, v).nth(1).is_some() {
        let clone_side = only(kept_readers(g, v).filter(|&c| reads_clone(c)));
        let left_side = only(kept_readers(g, v).filter(|&c| !is_consumer(c)));
        if clone_side.is_some_and(continues) || left_side.is_some_and(continues) {
            return true;
        }
    }
    g.inputs(v).iter().any(|&x| {
        let p = g.tensors[x as usize].node;
        !is_clone(p) && kept_reader(g, p) == Some(v) && regrouped_with(op, seen_op(g, p))
    })
}

/// The one item of `it`, if it has exactly one. O(1).
fn only(mut it: impl Iterator<Item = u32>) -> Option<u32> {
    match (it.next(), it.next()) {
        (Some(c), None) => Some(c),
        _ => None,
    }
}

/// `n`'s op as Grappler's arithmetic optimizer sees it: a floating-point
/// division by a constant is a `Mul` by then
/// ([`crate::opkind::div_folded_to_mul`]). O(1).
pub(super) fn seen_op(g: &Graph, n: u32) -> &str {
    let op = g.op_name(n);
    let by_constant = || {
        g.inputs(n).get(1).is_some_and(|&x| {
            let d = &g.tensors[x as usize];
            d.dtype.is_float() && is_constant(g.op_name(d.node))
        })
    };
    if div_folded_to_mul(op) && by_constant() {
        "Mul"
    } else {
        op
    }
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

    /// `m1` has two readers in the GraphDef: `dead` (nothing the step keeps
    /// needs it; Grappler prunes it) and `d`, a division by the constant `c`,
    /// which constant folding turns into a `Mul`. So `m1` is a link of a
    /// `Mul` chain as the arithmetic optimizer sees it, and never triggers;
    /// `q`, the same division by a fed value, is no `Mul`, and `m2` may
    /// trigger.
    #[test]
    fn a_mul_read_by_a_division_by_a_constant_and_a_dead_op_never_triggers() {
        let g = build(
            &[
                spec("x", "Placeholder", &[]),
                spec("s", "Placeholder", &[]),
                spec("c", "Const", &[]),
                spec("z", "Placeholder", &[]),
                spec("var", "VarHandleOp", &[]),
                spec("b", "Neg", &["c"]),
                spec("m1", "Mul", &["s", "x"]),
                spec("dead", "Neg", &["m1"]),
                spec("d", "RealDiv", &["m1", "c"]),
                spec("m2", "Mul", &["s", "d"]),
                spec("dead2", "Neg", &["m2"]),
                spec("q", "RealDiv", &["m2", "s"]),
                spec("r", "Neg", &["z"]),
                spec("loss", "AddN", &["q", "r", "b"]),
                spec("write", "AssignSubVariableOp", &["var", "loss"]),
            ],
            &BuildOptions {
                loss: Some("loss:0".into()),
                persistent_bytes: Some(0),
                ..Default::default()
            },
        )
        .unwrap();
        let s = schedule(&g).unwrap();
        let (at, name) = (|n: &str| position(&g, &s, n), |q: u32| pos_name(&g, &s, q));
        let node = |n: &str| s.order[at(n) as usize];
        assert!(regrouped(&g, node("m1")) && regrouped(&g, node("d")));
        assert!(!regrouped(&g, node("m2")) && !regrouped(&g, node("q")));
        let r = node("r");
        let from_m1 = safe_trigger(&g, &s, at("m1"), 0, &[r]).map(name);
        assert_ne!(from_m1.as_deref(), Some("m1"));
        assert_eq!(name(safe_trigger(&g, &s, at("m2"), 0, &[r]).unwrap()), "m2");
    }

    /// `d = h / 6` is read by the forward `f = x * d` and by the gradient
    /// `b = y * d`. A clone of `d` serving `b` alone forms a `Mul` chain the
    /// original does not have (and leaves `f` one with the original), so it
    /// is refused; a clone serving both readers, or nothing, is not. `q`,
    /// the same split of a division by a fed value, is no `Mul` to Grappler.
    #[test]
    fn a_clone_of_a_division_by_a_constant_that_splits_its_readers_is_refused() {
        let (g, s) = graph_of(&[
            spec("x", "Placeholder", &[]),
            spec("y", "Placeholder", &[]),
            spec("six", "Const", &[]),
            spec("h", "Relu", &["x"]),
            spec("d", "RealDiv", &["h", "six"]),
            spec("f", "Mul", &["x", "d"]),
            spec("b", "Mul", &["y", "d"]),
            spec("q", "RealDiv", &["h", "y"]),
            spec("f2", "Mul", &["x", "q"]),
            spec("b2", "Mul", &["y", "q"]),
        ]);
        let node = |n: &str| s.order[position(&g, &s, n) as usize];
        let (d, q, f, b, f2, b2) = (
            node("d"),
            node("q"),
            node("f"),
            node("b"),
            node("f2"),
            node("b2"),
        );
        let one = |v: u32, r: u32| clone_splits_chain(&g, v, |c| c == v, |c| c == r);
        assert!(one(d, b) && one(d, f));
        assert!(!clone_splits_chain(&g, d, |c| c == d, |c| c == f || c == b));
        assert!(!clone_splits_chain(&g, d, |c| c == d, |_| false));
        assert!(!one(q, b2) && !one(q, f2));
    }

    /// A graph with no loss and no variable write (so no dead node), and its
    /// schedule.
    /// An op reading a tensor with more readers than the late readers have
    /// inputs is checked against those inputs (sorted once per walk): `u`
    /// reads `y`, which the late reader `r` does not read, and triggers;
    /// `t`, `n3` and `n2` read `x`, which `r` reads, and the walk down from
    /// `t` finds none below them (`n1` feeds `r`, the placeholders are
    /// sources). `x` and `y` have more readers (5 and 4) than `r` has
    /// inputs (2).
    #[test]
    fn a_widely_read_input_is_checked_against_the_readers_inputs() {
        let (g, s) = graph_of(&[
            spec("x", "Placeholder", &[]),
            spec("y", "Placeholder", &[]),
            spec("n1", "Neg", &["x"]),
            spec("n2", "Neg", &["x"]),
            spec("n3", "Neg", &["x"]),
            spec("m1", "Neg", &["y"]),
            spec("m2", "Neg", &["y"]),
            spec("m3", "Neg", &["y"]),
            spec("u", "Neg", &["y"]),
            spec("t", "Neg", &["x"]),
            spec("r", "AddV2", &["x", "n1"]),
        ]);
        let (at, name) = (|n: &str| position(&g, &s, n), |q: u32| pos_name(&g, &s, q));
        let order: Vec<String> = (0..11).map(name).collect();
        let want = ["x", "y", "n1", "n2", "n3", "t", "m1", "m2", "m3", "u", "r"];
        assert_eq!(order, want, "the order the test assumes");
        let r = s.order[at("r") as usize];
        assert_eq!(g.inputs(r).len(), 2);
        assert_eq!(name(safe_trigger(&g, &s, at("u"), 0, &[r]).unwrap()), "u");
        assert_eq!(safe_trigger(&g, &s, at("t"), 0, &[r]), None);
    }

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
