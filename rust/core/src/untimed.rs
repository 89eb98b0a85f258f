//! Nodes whose place in the schedule says nothing about when TensorFlow runs
//! them: a control edge from one of them times nothing, so none may be the
//! trigger of a swap-in or of recompute clones (`plan/trigger.rs`). Today
//! these are dead nodes more than one op below the live ones.
//!
//! # The rule
//! A node is **dead** when neither the loss nor any variable write depends
//! on it (data or control edges): a gradient with respect to a constant,
//! such as the one of `div_no_nan`'s denominator in a mean loss. Grappler's
//! pruning removes its readers and its dependency optimizer turns it into a
//! `NoOp` whose control edges it hands to the node's inputs, and so on up
//! a chain of dead nodes: a clone meant to wait for one runs as soon as the
//! first live ops above the chain have run. Measured: an MLP's recompute
//! clones triggered by `gradient_tape/mean_squared_error/div_no_nan/div_no_nan_2`
//! (scheduled at 61% of the step; two dead ops below the loss) ran right
//! after the loss, at 29% (docs/accuracy.md, finding 11).
//!
//! A dead node is **untimed** when one of its inputs is itself dead (not a
//! source), or all its inputs are sources (it is ready at the start). A dead
//! node reading only live ops and sources (the `Identity` an optimizer puts
//! on each gradient) stays a possible trigger: its control edges go to
//! those live ops, which end when it becomes ready, as for any other node.
//! A graph that writes no variable (not a training step) has no dead nodes
//! by this rule: its outputs are unknown. Sources are never flagged (they
//! carry [`NodeFlags::SOURCE`] and never trigger anyway).
//!
//! # Complexity
//! O(N + E): one reverse walk from the loss and the variable writes, one
//! pass over the edges; O(N) memory.

use crate::graph::{Graph, NodeFlags};

/// Sets [`NodeFlags::UNTIMED`] on the untimed dead nodes (see the module
/// documentation); needs `g.loss` and the node flags set.
pub(crate) fn mark(g: &mut Graph) {
    let live = live(g);
    let source = |p: u32| g.nodes[p as usize].flags.has(NodeFlags::SOURCE);
    let untimed: Vec<u32> = (0..g.num_nodes() as u32)
        .filter(|&v| {
            !live[v as usize]
                && !source(v)
                && (g.predecessors(v).all(source)
                    || g.predecessors(v).any(|p| !source(p) && !live[p as usize]))
        })
        .collect();
    for v in untimed {
        let f = g.nodes[v as usize].flags;
        g.nodes[v as usize].flags = NodeFlags(f.0 | NodeFlags::UNTIMED);
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
    if let Some(t) = g.tensors.get(g.loss as usize) {
        stack.push(t.node);
    }
    // Marked live when pushed, so that each node is pushed once: the stack
    // never grows past N.
    let mut live = vec![false; n];
    stack.retain(|&v| !std::mem::replace(&mut live[v as usize], true));
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

    fn untimed(g: &Graph) -> Vec<&str> {
        (0..g.num_nodes() as u32)
            .filter(|&v| g.nodes[v as usize].flags.has(NodeFlags::UNTIMED))
            .map(|v| g.node_name(v))
            .collect()
    }

    /// x -> f -> loss; loss -> grad -> write(var); c -> cneg -> grad;
    /// loss -> dead -> dead2 (a gradient branch nothing needs: `dead` reads
    /// the live loss, so it times like any op, `dead2` does not);
    /// c -> cdead (dead, ready at the start).
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
        assert_eq!(untimed(&g), vec!["dead2", "cdead"]);
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
        assert!(untimed(&g).is_empty(), "{:?}", untimed(&g));
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
        assert!(untimed(&g).is_empty(), "{:?}", untimed(&g));
    }
}
