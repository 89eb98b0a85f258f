//! Control flow as one op of the schedule: the memory of a function-running
//! node (`If`, `While`) whose body lives in the GraphDef's library.
//!
//! # The rule
//! The core does not read function bodies; the caller does (Python:
//! `hybridplan.controlflow`, from the GraphDef's library) and states, per
//! node, a [`BodyMemory`]:
//!
//! - `scratch_bytes`: the bytes the body holds while the node runs, on top
//!   of the node's inputs and outputs (for an `If`, the largest branch's
//!   peak; for a `While`, one iteration's). It becomes the node's kernel
//!   scratch ([`crate::workspace`]), so liveness, the simulator and the
//!   planner see it as they see a convolution's workspace.
//! - `held`: for outputs of a handle type (`variant`: an `Optional` of a
//!   `tf.cond` intermediate, a `TensorList` accumulator of a loop) the
//!   tensors they hold, each entry `count` values of one dtype and shape,
//!   for one `branch` (the `If` branch that returns them; 0 for a loop).
//!   The output's bytes become the largest, over branches, of the sum of
//!   `count * elements * dtype size` of its entries (the dtype facts of
//!   [`crate::dtype`]): held from the node until its last reader, as every
//!   tensor is.
//!
//! A loop accumulator the planner may keep on the host is stated apart
//! ([`crate::hosting`]): the bodies are stated with every list on the device,
//! and the planner takes a hosted list's bytes off the device when it
//! decides to host it.
//!
//! A node given a [`BodyMemory`] is flagged [`NodeFlags::BODY_KNOWN`]: the
//! planner then plans around it ([`crate::api::check_supported`]); it is
//! never cloned (control flow is `NO_RECOMPUTE`) and its handle outputs are
//! never swapped (TensorFlow's `DeepCopy` has no `variant` kernel: the
//! swap op could not copy them; [`crate::plan::candidates`]).
//!
//! # Complexity
//! O(B + H) after the name lookups, for B bodies and H held outputs.

use crate::dtype::DType;
use crate::error::{PlanError, Result};
use crate::graph::{Graph, NodeFlags};

/// The tensors one handle output of a control-flow node holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Held {
    /// The node's output index.
    pub output: u32,
    /// The branch that returns these tensors (an `If`'s `then` 0, `else` 1).
    pub branch: u32,
    /// `DataType` enum value of the held tensors.
    pub dtype: i64,
    /// Shape of one held tensor (every dimension known).
    pub dims: Vec<i64>,
    /// How many such tensors (a loop's trip count; 1 for an `Optional`).
    pub count: u64,
}

/// The memory of one function-running node's body, stated by the caller.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BodyMemory {
    /// The node's name.
    pub node: String,
    /// Bytes the body holds while the node runs (see the module doc).
    pub scratch_bytes: u64,
    /// Handle outputs and what they hold.
    pub held: Vec<Held>,
}

/// Applies `bodies` to `g`: sizes the held outputs and flags the nodes.
/// Returns the scratch as workspace overrides `(node id, bytes)`.
///
/// # Errors
/// [`PlanError::InvalidArgument`] when a body names a node not in the graph,
/// an output it lacks or one that is not a handle, a dtype TensorFlow does not
/// know, a dimension that is not known, or a size past 2^63 bytes.
pub(crate) fn apply(
    g: &mut Graph,
    bodies: &[BodyMemory],
    lookup: &impl Fn(&Graph, &str) -> Option<u32>,
) -> Result<Vec<(u32, u64)>> {
    let mut scratch = Vec::with_capacity(bodies.len());
    for b in bodies {
        let bad = |what: String| {
            PlanError::InvalidArgument(format!(
                "the body memory of node '{}' {what}: state it from the same graph you plan",
                b.node
            ))
        };
        let v = lookup(g, &b.node).ok_or_else(|| bad("names a node not in the graph".into()))?;
        // (output, branch) -> bytes, summed over the entries of a branch.
        let mut sums: std::collections::BTreeMap<(u32, u32), u64> = Default::default();
        for h in &b.held {
            let bytes = held_bytes(h).ok_or_else(|| {
                bad(format!(
                    "holds {} x {:?} of dtype {} on output {}, whose size is unknown or past 2^63 bytes",
                    h.count, h.dims, h.dtype, h.output
                ))
            })?;
            let sum = sums.entry((h.output, h.branch)).or_default();
            *sum = sum.saturating_add(bytes).min(1 << 63);
        }
        for (&(output, _), &bytes) in &sums {
            let t = g
                .outputs(v)
                .nth(output as usize)
                .ok_or_else(|| bad(format!("names output {output}, which it lacks")))?;
            if !g.tensors[t as usize].dtype.is_handle() {
                return Err(bad(format!(
                    "gives held bytes to output {output}, not a handle"
                )));
            }
            let tt = &mut g.tensors[t as usize];
            tt.bytes = tt.bytes.max(bytes);
            tt.value_bytes = tt.bytes;
        }
        g.nodes[v as usize].flags.0 |= NodeFlags::BODY_KNOWN;
        scratch.push((v, b.scratch_bytes));
    }
    Ok(scratch)
}

/// Types the list output of every `TensorList` op
/// ([`crate::opkind::list_output`]) as a `variant` of 0 bytes: its attributes
/// name only the elements' dtype, which the decoders would give it. The bytes
/// of a list a loop fills are stated by [`apply`].
pub(crate) fn type_lists(g: &mut Graph) {
    // Decided once per distinct op type; most graphs have no list op.
    let list: Vec<Option<usize>> = g
        .ops
        .iter()
        .map(|op| crate::opkind::list_output(op))
        .collect();
    if list.iter().all(Option::is_none) {
        return;
    }
    for v in 0..g.nodes.len() as u32 {
        let Some(k) = list[g.nodes[v as usize].op as usize] else {
            continue;
        };
        if let Some(t) = g.outputs(v).nth(k) {
            let tt = &mut g.tensors[t as usize];
            tt.dtype = DType::VARIANT;
            tt.bytes = 0;
            tt.value_bytes = 0;
        }
    }
}

/// `count * elements * dtype size`, or `None` for an unknown dtype or
/// dimension, or a product past 2^63.
pub(crate) fn held_bytes(h: &Held) -> Option<u64> {
    let dtype = DType::from_proto(h.dtype)?;
    if dtype.is_handle() {
        return None;
    }
    let mut n = u128::from(h.count) * u128::from(dtype.size());
    for &d in &h.dims {
        n = n.checked_mul(u128::try_from(d).ok()?)?;
    }
    (n < 1u128 << 63).then_some(n as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::build::{build, BuildOptions, NodeSpec, OutSpec};
    use crate::graphdef::Shape;

    /// x -> cond (If: a float output and a variant one) -> y, which reads both.
    fn graph(bodies: Vec<BodyMemory>) -> Result<Graph> {
        let out = |dtype, dims: Vec<i64>| OutSpec {
            dtype: Some(dtype),
            shape: Shape(Some(dims)),
        };
        let node = |name, op, inputs, outputs, calls_function| NodeSpec {
            name,
            op,
            device: "",
            inputs,
            outputs,
            calls_function,
        };
        let specs = [
            node(
                "x",
                "Placeholder",
                vec![],
                vec![out(DType::FLOAT, vec![100])],
                false,
            ),
            node(
                "cond",
                "If",
                vec!["x"],
                vec![out(DType::FLOAT, vec![100]), out(DType::VARIANT, vec![])],
                true,
            ),
            node(
                "y",
                "AddV2",
                vec!["cond", "cond:1"],
                vec![out(DType::FLOAT, vec![100])],
                false,
            ),
        ];
        build(
            &specs,
            &BuildOptions {
                bodies,
                ..Default::default()
            },
        )
    }

    fn held(output: u32, branch: u32, dims: Vec<i64>, count: u64) -> Held {
        Held {
            output,
            branch,
            dtype: 1,
            dims,
            count,
        }
    }

    #[test]
    fn a_stated_body_sizes_its_handles_and_scratch() {
        let body = BodyMemory {
            node: "cond".into(),
            scratch_bytes: 1000,
            held: vec![
                held(1, 0, vec![10], 3),
                held(1, 0, vec![5], 1),
                held(1, 1, vec![20], 1),
            ],
        };
        let g = graph(vec![body]).unwrap();
        let v = 1;
        assert!(g.nodes[v as usize].flags.has(NodeFlags::BODY_KNOWN));
        let t = g.outputs(v).nth(1).unwrap() as usize;
        // then: 3 x 10 + 5 floats = 140 bytes; else: 20 floats = 80 bytes.
        assert_eq!((g.tensors[t].bytes, g.tensors[t].value_bytes), (140, 140));
        assert_eq!(g.workspace_of(v), 1000);
    }

    #[test]
    fn an_unstated_if_holds_nothing_and_bad_statements_are_typed_errors() {
        let g = graph(vec![]).unwrap();
        assert!(!g.nodes[1].flags.has(NodeFlags::BODY_KNOWN));
        let t = g.outputs(1).nth(1).unwrap() as usize;
        assert_eq!(g.tensors[t].bytes, 0);
        let bad = |b: BodyMemory| matches!(graph(vec![b]), Err(PlanError::InvalidArgument(_)));
        let body = |node: &str, held: Vec<Held>| BodyMemory {
            node: node.into(),
            scratch_bytes: 0,
            held,
        };
        assert!(bad(body("nowhere", vec![])));
        assert!(bad(body("cond", vec![held(0, 0, vec![10], 1)]))); // not a handle
        assert!(bad(body("cond", vec![held(2, 0, vec![10], 1)]))); // no such output
        assert!(bad(body("cond", vec![held(1, 0, vec![-1], 1)]))); // unknown dimension
    }

    #[test]
    fn held_bytes_are_count_times_elements_times_size() {
        let h = Held {
            output: 1,
            branch: 0,
            dtype: 1,
            dims: vec![8, 32],
            count: 64,
        };
        assert_eq!(held_bytes(&h), Some(64 * 8 * 32 * 4));
        assert_eq!(
            held_bytes(&Held {
                dims: vec![-1, 32],
                ..h.clone()
            }),
            None
        );
        assert_eq!(
            held_bytes(&Held {
                dtype: 21,
                ..h.clone()
            }),
            None
        );
        assert_eq!(
            held_bytes(&Held {
                dims: vec![1 << 40, 1 << 40],
                ..h
            }),
            None
        );
    }

    /// A `TensorList` op's list output is typed `variant` whatever its
    /// attributes give (its element dtype), 0 bytes until a body states it.
    #[test]
    fn list_outputs_are_variant_and_take_stated_bytes() {
        let out = |dtype, dims: Vec<i64>| OutSpec {
            dtype: Some(dtype),
            shape: Shape(Some(dims)),
        };
        let specs = |bodies| {
            let nodes = [
                NodeSpec {
                    name: "x",
                    op: "Placeholder",
                    device: "",
                    inputs: vec![],
                    outputs: vec![out(DType::FLOAT, vec![64, 8])],
                    calls_function: false,
                },
                NodeSpec {
                    name: "list",
                    op: "TensorListFromTensor",
                    device: "",
                    inputs: vec!["x"],
                    outputs: vec![out(DType::FLOAT, vec![])],
                    calls_function: false,
                },
                NodeSpec {
                    name: "y",
                    op: "TensorListLength",
                    device: "",
                    inputs: vec!["list"],
                    outputs: vec![out(DType::INT32, vec![])],
                    calls_function: false,
                },
            ];
            build(
                &nodes,
                &BuildOptions {
                    bodies,
                    ..Default::default()
                },
            )
            .unwrap()
        };
        let g = specs(vec![]);
        let t = g.outputs(1).next().unwrap() as usize;
        assert_eq!(
            (g.tensors[t].dtype, g.tensors[t].bytes),
            (DType::VARIANT, 0)
        );
        let g = specs(vec![BodyMemory {
            node: "list".into(),
            scratch_bytes: 0,
            held: vec![held(0, 0, vec![64, 8], 1)],
        }]);
        assert_eq!(g.tensors[t].bytes, 64 * 8 * 4);
    }
}
