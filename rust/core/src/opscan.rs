//! Whether a serialized `GraphDef` has a node of some op types, without
//! decoding the graph.
//!
//! The rule: read the keys of the `GraphDef`'s fields, and in each `node`
//! (field 1) the keys of the `NodeDef`'s fields; compare the `op` (field 2)
//! with the op types asked for; skip everything else by its length (names,
//! inputs, attributes, the library). Only the graph's own nodes are looked at,
//! not the bodies of library functions.
//!
//! The model: a quick test before a slow path. Python inlines function calls
//! and reads the bodies of control-flow ops only when the graph has such a
//! node; both parse the whole graph with protobuf (about a second at 10^6
//! nodes), and this test spares that parse, and a search of the serialization
//! for each op name, when there is none. Bytes this walk cannot read are
//! answered `true`: the caller then takes its slow path, which reports them
//! as it always did.
//!
//! # Complexity
//! O(number of fields of the `GraphDef` and of its `NodeDef`s): one key and
//! one length per field, no copy, no allocation.

use crate::wire::{Scan, Scanned, LEN};

/// Whether some node of the serialized `GraphDef` `bytes` has one of the op
/// types `ops` (`true` also when the bytes are not a readable `GraphDef`).
///
/// # Example
/// ```
/// # #[cfg(feature = "testing")] {
/// use hybridplan_core::{opscan::has_node_op, synth};
/// let bytes = synth::residual_graphdef(&synth::SynthSpec::default());
/// assert!(has_node_op(&bytes, &["Conv2D"]));
/// assert!(!has_node_op(&bytes, &["While", "StatelessWhile"]));
/// # }
/// ```
#[must_use]
pub fn has_node_op(bytes: &[u8], ops: &[&str]) -> bool {
    has_node_ops(bytes, &[ops])[0]
}

/// For each group of op types, whether some node of the serialized
/// `GraphDef` `bytes` has one of them, in one walk that stops once every
/// group is found (every answer `true` when the bytes are not a readable
/// `GraphDef`).
#[must_use]
pub fn has_node_ops(bytes: &[u8], groups: &[&[&str]]) -> Vec<bool> {
    let mut found = vec![false; groups.len()];
    if scan(bytes, groups, &mut found).is_err() {
        found.fill(true);
    }
    found
}

fn scan(bytes: &[u8], groups: &[&[&str]], found: &mut [bool]) -> Scanned<()> {
    let mut left = groups.len();
    let mut g = Scan::new(bytes);
    while left > 0 && !g.at_end() {
        let (field, wire) = g.key()?;
        if field == 1 && wire == LEN {
            let Some(op) = node_op(g.bytes()?)? else {
                continue;
            };
            for (ops, f) in groups.iter().zip(found.iter_mut()) {
                if !*f && ops.iter().any(|o| o.as_bytes() == op) {
                    *f = true;
                    left -= 1;
                }
            }
        } else {
            g.skip(wire)?;
        }
    }
    Ok(())
}

/// The `op` of a serialized `NodeDef` (the last one, as protobuf reads a
/// repeated scalar), or `None` when it has none.
fn node_op(node: &[u8]) -> Scanned<Option<&[u8]>> {
    let mut n = Scan::new(node);
    let mut op = None;
    while !n.at_end() {
        let (field, wire) = n.key()?;
        if field == 2 && wire == LEN {
            op = Some(n.bytes()?);
        } else {
            n.skip(wire)?;
        }
    }
    Ok(op)
}

#[cfg(test)]
mod tests {
    use super::{has_node_op, has_node_ops};
    use crate::wire::Writer;

    fn node(name: &str, op: &str) -> Vec<u8> {
        let mut w = Writer::default();
        w.bytes_field(1, name.as_bytes());
        w.bytes_field(2, op.as_bytes());
        w.bytes_field(3, b"x:0");
        w.buf
    }

    fn graph(nodes: &[Vec<u8>]) -> Vec<u8> {
        let mut w = Writer::default();
        w.varint_field(4, 7); // a field that is not a node: skipped
        for n in nodes {
            w.bytes_field(1, n);
        }
        w.buf
    }

    #[test]
    fn finds_only_the_ops_of_the_graph_s_nodes() {
        let g = graph(&[node("While", "Relu"), node("b", "If")]);
        assert!(has_node_op(&g, &["If", "While"]));
        assert!(!has_node_op(&g, &["While", "StatelessIf"])); // a name is not an op
        assert!(!has_node_op(&graph(&[]), &["If"]));
        assert!(!has_node_op(&g, &[]));
    }

    #[test]
    fn answers_each_group_in_one_walk() {
        let g = graph(&[node("a", "Relu"), node("b", "If"), node("c", "Relu")]);
        let groups: [&[&str]; 4] = [&["While"], &["If", "While"], &[], &["Relu"]];
        assert_eq!(has_node_ops(&g, &groups), [false, true, false, true]);
        for (i, ops) in groups.iter().enumerate() {
            assert_eq!(has_node_op(&g, ops), has_node_ops(&g, &groups)[i]);
        }
        assert_eq!(has_node_ops(&g, &[]), Vec::<bool>::new());
        // Unreadable after a group was found: every group true.
        assert_eq!(has_node_ops(&g[..g.len() - 1], &groups), [true; 4]);
    }

    #[test]
    fn unreadable_bytes_are_answered_true() {
        let g = graph(&[node("a", "Relu")]);
        assert!(has_node_op(&g[..g.len() - 1], &["If"]));
        assert!(has_node_op(&[0x0a, 0x7f], &["If"]));
        assert!(has_node_op(&[0x0b], &["If"])); // wire type 3
    }
}
