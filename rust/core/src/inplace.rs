//! In-place buffer forwarding: which ops write their output into an input's
//! buffer instead of a new one.
//!
//! # The rule
//! TensorFlow's element-wise kernels (and a few others) ask for their output
//! with `forward_input_or_allocate_output`: the output takes over the buffer
//! of the first listed input that has the output's dtype and element count
//! and that no one else holds (its reference count is one). An input is
//! held by every consumer that has not run yet (each input slot keeps a
//! reference), by an alias that is still read, by a copy to the host that
//! has not finished, and for good by a fed input, a constant or a
//! variable. So an op forwards input `x` when:
//! - its op type forwards ([`crate::opkind::forwards`]: the slots it tries,
//!   in order, and the output written in place);
//! - `x` has the output's dtype and byte size;
//! - the op is the last reader of `x`'s buffer (the owner, its aliases and
//!   anything already forwarded into it) and reads it in one slot only;
//! - the plan swaps nothing out of the buffer (the copy holds it until it
//!   has run, and when that is depends on the copy engine's queue: the
//!   simulator does not bet the budget on it);
//! - the buffer is not a source's (`Const`, `Placeholder`: held by the
//!   kernel or the caller's feed) and has bytes (a variable read has none).
//!
//! The output then allocates nothing; the buffer lives on until the
//! output's last reader. Measured on TensorFlow 2.21 (docs/accuracy.md,
//! finding 2): the ops below allocate nothing when these conditions hold,
//! and the chain `Mul -> AddV2 -> Relu` of a batch normalisation is one
//! buffer. [`crate::liveness`] applies the rule in schedule order and the
//! simulator per plan (a swap-out of the buffer, or a recompute clone
//! reading the input later, keeps the output in a buffer of its own), so
//! the two agree on the empty plan.
//!
//! # Complexity
//! [`table`] is O(ops). A decision tries the
//! op's candidate inputs in order and counts the reads of the first one whose
//! buffer ends at the op: O(k) for an op of k inputs, O(E) over a graph;
//! O(k^2) only for an op that reads one buffer in several slots and whose
//! first candidates fail for that reason. The simulator's layout finds the
//! buffers read once by sorting each op's inputs, O(k log k).

use crate::graph::{Graph, NodeFlags};
use crate::opkind::forwards;
pub(crate) use crate::opkind::Forward;

/// [`crate::opkind::forwards`] of every op type of `g`, by op id, packed in a byte (0: none;
/// all none for a graph built with
/// [`crate::build::BuildOptions::separate_buffers`]): decided once per
/// graph, read per node.
pub(crate) fn table(g: &Graph) -> Vec<u8> {
    g.ops
        .iter()
        .map(|op| match g.separate_buffers {
            true => 0,
            false => forwards(op).map_or(0, Forward::code),
        })
        .collect()
}

/// The forwarding of node `v` from a [`table`], with the output tensor it
/// writes in place: `None` if the op never forwards or lacks that output.
pub(crate) fn of_node(g: &Graph, table: &[u8], v: u32) -> Option<(Forward, u32)> {
    let f = Forward::from_code(table[g.nodes[v as usize].op as usize])?;
    let outs = g.outputs(v);
    let out = outs.start + f.output();
    (out < outs.end).then_some((f, out))
}

/// Is the buffer made by node `v` held for the whole step by someone else
/// (a source op's: the caller's feed; a constant's: its kernel), so that
/// nothing is ever written into it?
pub(crate) fn pinned(g: &Graph, v: u32) -> bool {
    g.nodes[v as usize].flags.has(NodeFlags::SOURCE) || crate::opkind::is_constant(g.op_name(v))
}

/// Can the output `out` of node `v` take over the buffer of its input in
/// `slot` as far as the two tensors go (same dtype, same size, a buffer of
/// bytes)? The buffer's holders are the caller's to check.
pub(crate) fn fits(g: &Graph, v: u32, slot: usize, out: u32) -> bool {
    let t = g.inputs(v)[slot];
    let (a, b) = (&g.tensors[t as usize], &g.tensors[out as usize]);
    a.dtype == b.dtype && a.value_bytes == b.value_bytes && b.bytes > 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules() {
        assert_eq!(forwards("Relu"), Some(Forward::First));
        assert_eq!(forwards("ReluGrad"), Some(Forward::Either));
        assert_eq!(forwards("Conv2D"), None);
        assert_eq!(forwards("Cast"), None);
        assert_eq!(Forward::Branches.slots(3), 1..3);
        assert_eq!(Forward::Either.slots(1), 0..1);
        assert_eq!(Forward::Any.slots(4), 0..4);
        assert_eq!(Forward::BackpropIntoLogits.output(), 1);
        for f in [
            Forward::First,
            Forward::Either,
            Forward::Any,
            Forward::Branches,
            Forward::BackpropIntoLogits,
        ] {
            assert_eq!(Forward::from_code(f.code()), Some(f));
        }
        assert_eq!(Forward::from_code(0), None);
    }
}
