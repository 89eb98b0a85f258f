//! Dead nodes: none may be the trigger of a swap-in or of recompute clones
//! (`plan/trigger.rs`), for a control edge out of one either times nothing
//! or changes what the step computes.
//!
//! # The rule
//! A node is **dead** when neither the loss nor any variable write depends
//! on it (data or control edges): a gradient with respect to a constant,
//! such as the one of `div_no_nan`'s denominator in a mean loss, or the
//! `Identity` an optimizer puts on each gradient and nothing reads. Every
//! dead node that is not a source is flagged [`NodeFlags::DEAD`]. Two
//! measured reasons, one for each kind of dead node:
//!
//! - **Below another dead node, or reading only sources, it times
//!   nothing.** Grappler's pruning removes the readers of dead nodes and its
//!   dependency optimizer turns them into `NoOp`s whose control edges it
//!   hands to their inputs, up a chain of dead nodes: a clone meant to wait
//!   for one runs as soon as the first live ops above the chain have run.
//!   An MLP's recompute clones triggered by
//!   `gradient_tape/mean_squared_error/div_no_nan/div_no_nan_2` (scheduled
//!   at 61% of the step; two dead ops below the loss) ran right after the
//!   loss, at 29% (docs/accuracy.md, finding 11).
//! - **Reading only live ops, it changes the bits.** The original step
//!   runs without it (pruned); a control edge out of it keeps it, and its
//!   inputs gain a reader they do not have in the original step, which
//!   Grappler's rewrites of single-reader chains see. A Keras ResNet with
//!   SGD and momentum (`tests/test_apply.py`, the waiting swap plan at 60%)
//!   had two swap-ins triggered by `sgd/Identity_11` and `sgd/Identity_18`,
//!   the unread `Identity` on two batch-norm `gamma` gradients (each a `Mul`
//!   whose other reader, through the optimizer's `IdentityN`, is the `Mul`
//!   by the learning rate): those two momenta came out different in the
//!   11th digit, with oneDNN on and off. A control edge out of the `gamma`
//!   gradient's `Mul` itself, to the same op, left every bit as it was.
//!   Walking past the dead node reaches its inputs, which Grappler would
//!   have handed the control edge to, so the trigger ends at the same time.
//!
//! An `Identity` of the loss (or of such an `Identity`) is the loss under
//! another name, not a dead node: a traced step returns its loss through
//! one (a Keras step's output `Identity` on its `div_no_nan` loss), and
//! TensorFlow runs it as the step's output, right after the loss. Flagged
//! dead, it could not trigger, and on a small graph it can be the only op
//! in reach between the loss and its gradient (the synthetic families'
//! `out`: `hybrid-paper` and `swap` then found no plan on several of them,
//! docs/optimality.md).
//!
//! A graph that writes no variable (not a training step) has no dead nodes
//! by this rule: its outputs are unknown. Sources are never flagged (they
//! carry [`NodeFlags::SOURCE`] and never trigger anyway).
//!
//! # Complexity
//! O(N + E): one reverse walk from the loss and the variable writes, one
//! pass over the nodes; O(N) memory.

use crate::graph::{Graph, NodeFlags};
use crate::opkind::IDENTITIES;

/// Sets [`NodeFlags::DEAD`] on the dead nodes that are not sources (see
/// the module documentation); needs `g.loss` and the node flags set.
pub(crate) fn mark(g: &mut Graph) {
    let live = live(g);
    for (v, node) in g.nodes.iter_mut().enumerate() {
        if !live[v] && !node.flags.has(NodeFlags::SOURCE) {
            node.flags = NodeFlags(node.flags.0 | NodeFlags::DEAD);
        }
    }
}

/// Per node: does the loss or a variable write depend on it (itself
/// included)? Every node when the graph writes no variable.
fn live(g: &Graph) -> Vec<bool> {
    let n = g.num_nodes();
    let mut stack: Vec<u32> = (0..n as u32)
        .filter(|&v| g.nodes[v as usize].flags.has(NodeFlags::WRITES_VARIABLE))
        .collect();
    if stack.is_empty() {
        return vec![true; n];
    }
    // Marked live when pushed, so that each node is pushed once: the stack
    // never grows past N.
    let mut live = vec![false; n];
    stack.retain(|&v| !std::mem::replace(&mut live[v as usize], true));
    if let Some(t) = g.tensors.get(g.loss as usize) {
        // The loss and the loss under other names: an `Identity` chain out
        // of it, walked from `first` on.
        let first = stack.len();
        if !std::mem::replace(&mut live[t.node as usize], true) {
            stack.push(t.node);
        }
        let mut i = first;
        while i < stack.len() {
            for &c in g.data_consumers(stack[i]) {
                if IDENTITIES.contains(&g.op_name(c))
                    && !std::mem::replace(&mut live[c as usize], true)
                {
                    stack.push(c);
                }
            }
            i += 1;
        }
    }
    stack.reserve(n);
    while let Some(v) = stack.pop() {
        // Two loops, not `predecessors`: the chained iterator is called
        // out of line, once per node.
        for &t in g.inputs(v) {
            let p = g.tensors[t as usize].node;
            if !std::mem::replace(&mut live[p as usize], true) {
                stack.push(p);
            }
        }
        for &p in g.control_inputs(v) {
            if !std::mem::replace(&mut live[p as usize], true) {
                stack.push(p);
            }
        }
    }
    live
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::build::{build, BuildOptions, NodeSpec};

    fn spec(name: &'static str, op: &'static str, inputs: &[&'static str]) -> NodeSpec<'static> {
        NodeSpec::test(name, op, inputs, &[])
    }

    fn dead(g: &Graph) -> Vec<&str> {
        (0..g.num_nodes() as u32)
            .filter(|&v| g.nodes[v as usize].flags.has(NodeFlags::DEAD))
            .map(|v| g.node_name(v))
            .collect()
    }

    /// x -> f -> loss; loss -> grad -> write(var); c -> cneg -> grad;
    /// loss -> dead -> dead2 (a gradient branch nothing needs);
    /// c -> cdead (dead, ready at the start). Every one of the three.
    #[test]
    fn flags_the_nodes_neither_the_loss_nor_a_write_needs() {
        let g = build(
            &[
                spec("x", "Placeholder", &[]),
                spec("var", "VarHandleOp", &[]),
                spec("c", "Const", &[]),
                spec("cneg", "Neg", &["c"]),
                spec("f", "Relu", &["x"]),
                spec("loss", "Sum", &["f"]),
                spec("dead", "Neg", &["loss"]),
                spec("dead2", "Neg", &["dead"]),
                spec("cdead", "Neg", &["c"]),
                spec("grad", "Mul", &["loss", "cneg"]),
                spec("write", "AssignSubVariableOp", &["var", "grad"]),
            ],
            &BuildOptions {
                loss: Some("loss:0".into()),
                persistent_bytes: Some(0),
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(dead(&g), vec!["dead", "dead2", "cdead"]);
    }

    /// `out = Identity(loss)` and `out2 = Identity(out)` are the loss under
    /// other names (what a traced step returns), not dead; `neg` reading
    /// `out`, and `other = Identity(f)`, are.
    #[test]
    fn an_identity_of_the_loss_is_the_loss() {
        let g = build(
            &[
                spec("x", "Placeholder", &[]),
                spec("var", "VarHandleOp", &[]),
                spec("f", "Relu", &["x"]),
                spec("loss", "Sum", &["f"]),
                spec("out", "Identity", &["loss"]),
                spec("out2", "Identity", &["out"]),
                spec("neg", "Neg", &["out"]),
                spec("other", "Identity", &["f"]),
                spec("grad", "Mul", &["loss", "f"]),
                spec("write", "AssignSubVariableOp", &["var", "grad"]),
            ],
            &BuildOptions {
                loss: Some("loss:0".into()),
                persistent_bytes: Some(0),
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(dead(&g), vec!["neg", "other"]);
    }

    /// A node that only a control edge ties to a write is live.
    #[test]
    fn a_control_edge_to_a_write_keeps_a_node_live() {
        let g = build(
            &[
                spec("x", "Placeholder", &[]),
                spec("var", "VarHandleOp", &[]),
                spec("f", "Relu", &["x"]),
                spec("loss", "Sum", &["f"]),
                spec("side", "Neg", &["loss"]),
                spec("grad", "Mul", &["loss", "loss"]),
                spec("write", "AssignSubVariableOp", &["var", "grad", "^side"]),
            ],
            &BuildOptions {
                loss: Some("loss:0".into()),
                persistent_bytes: Some(0),
                ..Default::default()
            },
        )
        .unwrap();
        assert!(dead(&g).is_empty(), "{:?}", dead(&g));
    }

    #[test]
    fn nothing_is_dead_without_variable_writes() {
        let g = build(
            &[
                spec("x", "Placeholder", &[]),
                spec("f", "Relu", &["x"]),
                spec("loss", "Sum", &["f"]),
                spec("other", "Neg", &["f"]),
            ],
            &BuildOptions {
                loss: Some("loss:0".into()),
                persistent_bytes: Some(0),
                ..Default::default()
            },
        )
        .unwrap();
        assert!(dead(&g).is_empty(), "{:?}", dead(&g));
    }
}
