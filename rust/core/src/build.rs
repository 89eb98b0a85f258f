//! Building the [`Graph`] from flat node specs ([`build`]), and what the
//! GraphDef decoder ([`crate::graph_from_bytes`], crate-private modules
//! `flatdecode` and `direct`, which use this one) shares with it:
//! [`tensor_size`], the steps after the edges ([`finish`]: consumers, flags
//! and aliases, phases, persistent bytes) and the errors, so that the same
//! faults give the same errors on both routes.
//!
//! # Complexity
//! O(N + E + D) time and memory for N nodes, E edges and D shape dimensions;
//! one hash map of node names (FxHash, never iterated, so the result does not
//! depend on hash order); the names of the graph share one buffer.

use rustc_hash::FxHashMap;

use crate::dtype::DType;
use crate::error::{PlanError, Result};
use crate::graph::{Graph, Name, Node, NodeFlags, Tensor, NONE};
mod finish;

pub(crate) use finish::finish;

/// A shape as written in a `TensorShapeProto`: `None` for unknown rank,
/// `-1` for an unknown dimension.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shape(pub Option<Vec<i64>>);

/// One output of a node spec: dtype (`None`: not known) and shape.
#[derive(Debug, Clone, PartialEq)]
pub struct OutSpec {
    pub dtype: Option<DType>,
    pub shape: Shape,
}

/// A node as the builder takes it: the flat-array route into the core.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeSpec<'a> {
    pub name: &'a str,
    pub op: &'a str,
    pub device: &'a str,
    /// Input references in TensorFlow form: `node`, `node:1`, `^node`.
    pub inputs: Vec<&'a str>,
    pub outputs: Vec<OutSpec>,
    /// True when the op calls a function or is control flow.
    pub calls_function: bool,
}

impl NodeSpec<'static> {
    /// A node for the core's unit tests: one float output of `shape` (a
    /// resource handle for `VarHandleOp`, no output for the `Assign*` ops).
    #[cfg(test)]
    pub(crate) fn test(
        name: &'static str,
        op: &'static str,
        inputs: &[&'static str],
        shape: &[i64],
    ) -> Self {
        use crate::dtype::DType;
        let dtype = if op == "VarHandleOp" {
            DType::RESOURCE
        } else {
            DType::FLOAT
        };
        let outputs = if op.starts_with("Assign") {
            vec![]
        } else {
            vec![OutSpec {
                dtype: Some(dtype),
                shape: Shape(Some(shape.to_vec())),
            }]
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
}

/// Options of the graph build.
#[derive(Debug, Clone, Default)]
pub struct BuildOptions {
    /// Tensor (`node:i`) or node name of the loss; inferred when `None`.
    pub loss: Option<String>,
    /// Persistent bytes (variables, optimizer slots); read from the graph
    /// when `None`.
    pub persistent_bytes: Option<u64>,
    /// Every output in a buffer of its own: no in-place forwarding
    /// ([`crate::inplace`]). The exact formulation's memory model
    /// (`python/hybridplan/optimal.py`), which is never below the default's.
    pub separate_buffers: bool,
    /// The kernels' scratch: which backend runs the step
    /// ([`crate::workspace`]).
    pub workspace: crate::workspace::WorkspaceRule,
    /// Measured scratch bytes by node name (a profile's), replacing the
    /// rule's for those nodes.
    pub workspace_profile: Vec<(String, u64)>,
    /// The memory of control-flow nodes' bodies, stated by the caller from
    /// the GraphDef's library ([`crate::body`]).
    pub bodies: Vec<crate::body::BodyMemory>,
    /// The loop accumulators that can be kept on the host, stated by the
    /// caller from the loops' bodies ([`crate::hosting`]).
    pub hosting: Vec<crate::hosting::AccumulatorStatement>,
}

/// The error of an op that passes each data input through as the output
/// of the same index typed by `T` (`opkind::passes_each_input_through`)
/// unless `T` lists one type per data input and `_output_shapes`, if given
/// (`shaped`: its count), one shape per data input; `None` if it does.
/// `listed`: `None` for no `T`, `Some(None)` for a `T` that is not a list
/// of types, else the number of types listed. TensorFlow refuses such a
/// node, and the rewrite, which counts the outputs from `T`, could not
/// redirect a reader of an output `T` lacks. O(1).
pub(crate) fn pass_through_fault(
    name: &str,
    op: &str,
    data: usize,
    listed: Option<Option<usize>>,
    shaped: Option<usize>,
) -> Option<PlanError> {
    let what = match listed {
        Some(Some(k)) if k == data => match shaped {
            Some(c) if c != data => format!("_output_shapes lists {c} shapes"),
            _ => return None,
        },
        Some(Some(k)) => format!("its attribute T lists {k} types"),
        None => "it has no attribute T".into(),
        Some(None) => "its attribute T is not a list of types".into(),
    };
    Some(PlanError::InvalidGraph(format!(
        "node '{name}' (op {op}) has {data} data inputs but {what}: it passes input i \
         through as output i of type T[i], so T must list {data} types (and \
         _output_shapes {data} shapes); TensorFlow refuses this NodeDef too"
    )))
}

/// Output indices at or above this are rejected as malformed where a node
/// lacks `_output_shapes` (no TensorFlow op has that many outputs; the
/// bound keeps untrusted input from asking for billions of tensors).
pub(crate) const MAX_OUTPUTS: u32 = 1 << 16;

/// The error of a graph without nodes.
pub(crate) fn no_nodes() -> PlanError {
    PlanError::InvalidGraph(
        "the graph has no nodes: export the traced step with as_graph_def(add_shapes=True)".into(),
    )
}

/// The error of a graph of 2^32 tensors or more.
pub(crate) fn too_many_tensors() -> PlanError {
    PlanError::InvalidGraph("more than 2^32 tensors".into())
}

/// A parsed input reference.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum InputRef<'a> {
    Data(&'a str, u32),
    Control(&'a str),
}

/// Parses `node`, `node:1` and `^node`.
pub(crate) fn parse_input(s: &str) -> Result<InputRef<'_>> {
    if let Some(rest) = s.strip_prefix('^') {
        return Ok(InputRef::Control(rest));
    }
    match s.rsplit_once(':') {
        Some((name, idx)) => idx
            .parse::<u32>()
            .map(|k| InputRef::Data(name, k))
            .map_err(|_| {
                PlanError::InvalidGraph(format!(
                    "input reference '{s}' is not of the form node, node:index or ^node"
                ))
            }),
        None => Ok(InputRef::Data(s, 0)),
    }
}

/// Builds the graph from node specs.
///
/// # Errors
/// [`PlanError::InvalidGraph`] for no nodes, duplicate names, inputs naming
/// a missing node or output, negative dimensions, sizes past 2^64 bytes,
/// tensors totalling 2^63 bytes or more, a variable op whose handle input is
/// not a resource;
/// [`PlanError::UnknownShape`] for a tensor whose dtype or shape is not
/// known (handles excepted). Cycles are found by the schedule.
///
/// # Complexity
/// O(N + E + D).
pub fn build(specs: &[NodeSpec<'_>], opts: &BuildOptions) -> Result<Graph> {
    if specs.is_empty() {
        return Err(no_nodes());
    }
    if specs.len() >= NONE as usize / 2 {
        return Err(PlanError::InvalidGraph("more than 2^31 nodes".into()));
    }
    let mut g = Graph::default();
    let index = name_index(specs)?;
    add_nodes_and_tensors(&mut g, specs)?;
    add_edges(&mut g, specs, &index)?;
    finish(&mut g, opts, |_, name| index.get(name).copied())?;
    Ok(g)
}

fn name_index<'a>(specs: &[NodeSpec<'a>]) -> Result<FxHashMap<&'a str, u32>> {
    let mut index: FxHashMap<&str, u32> = FxHashMap::default();
    index.reserve(specs.len());
    for (i, s) in specs.iter().enumerate() {
        if s.name.is_empty() {
            return Err(PlanError::InvalidGraph(format!(
                "node {i} (op {}) has an empty name",
                s.op
            )));
        }
        if index.insert(s.name, i as u32).is_some() {
            return Err(PlanError::InvalidGraph(format!(
                "two nodes are named '{}': node names must be unique",
                s.name
            )));
        }
    }
    Ok(index)
}

fn intern(table: &mut Vec<Box<str>>, map: &mut FxHashMap<String, u32>, s: &str) -> u32 {
    if let Some(&i) = map.get(s) {
        return i;
    }
    table.push(s.into());
    map.insert(s.to_owned(), table.len() as u32 - 1);
    table.len() as u32 - 1
}

fn add_nodes_and_tensors(g: &mut Graph, specs: &[NodeSpec<'_>]) -> Result<()> {
    let mut op_map = FxHashMap::default();
    let mut dev_map = FxHashMap::default();
    intern(&mut g.devices, &mut dev_map, "");
    g.nodes.reserve(specs.len());
    g.out_off.reserve(specs.len() + 1);
    g.out_off.push(0);
    let mut buf = String::with_capacity(specs.iter().map(|s| s.name.len()).sum());
    let ends: Vec<usize> = specs
        .iter()
        .map(|s| {
            buf.push_str(s.name);
            buf.len()
        })
        .collect();
    let mut names = Name::split(std::sync::Arc::new(buf), ends);
    for (i, s) in specs.iter().enumerate() {
        let op = intern(&mut g.ops, &mut op_map, s.op);
        let device = intern(&mut g.devices, &mut dev_map, s.device);
        let mut flags = 0u8;
        if s.calls_function {
            flags |= NodeFlags::CALLS_FUNCTION | NodeFlags::NO_RECOMPUTE;
        }
        if s.inputs.is_empty() {
            flags |= NodeFlags::SOURCE;
        }
        g.nodes.push(Node {
            name: names.next().unwrap_or_else(|| Name::new(s.name)),
            op,
            device,
            flags: NodeFlags(flags),
        });
        for (k, o) in s.outputs.iter().enumerate() {
            let t = make_tensor(g, s, i as u32, k as u32, o)?;
            g.tensors.push(t);
        }
        if g.tensors.len() >= NONE as usize {
            return Err(too_many_tensors());
        }
        g.out_off.push(g.tensors.len() as u32);
    }
    Ok(())
}

fn make_tensor(
    g: &mut Graph,
    s: &NodeSpec<'_>,
    node: u32,
    index: u32,
    o: &OutSpec,
) -> Result<Tensor> {
    let shape_off = g.dims.len() as u32;
    let (dtype, rank, value_bytes) =
        tensor_size(s.name, s.op, index, o.dtype, o.shape.0.as_deref())?;
    if let Some(d) = &o.shape.0 {
        g.dims.extend_from_slice(d);
    }
    Ok(Tensor {
        node,
        index,
        dtype,
        bytes: value_bytes,
        value_bytes,
        alias_of: NONE,
        shape_off,
        rank,
    })
}

/// The dtype, rank and bytes of output `index` of node `name` (op `op`),
/// from its dtype (`None`: unknown) and dimensions (`None`: unknown rank,
/// allowed for handles only, then of rank 0).
///
/// # Errors
/// [`PlanError::InvalidGraph`] for no dtype, a rank above 255, a negative
/// dimension or a size past 2^64 bytes; [`PlanError::UnknownShape`] for an
/// unknown rank or dimension of a tensor that is not a handle.
///
/// # Complexity
/// O(rank).
pub(crate) fn tensor_size(
    name: &str,
    op: &str,
    index: u32,
    dtype: Option<DType>,
    dims: Option<&[i64]>,
) -> Result<(DType, u8, u64)> {
    let tname = || format!("{name}:{index}");
    let dtype = match dtype {
        Some(d) => d,
        None => {
            return Err(PlanError::InvalidGraph(format!(
                "the dtype of tensor '{}' cannot be told from op {op}'s attributes or inputs",
                tname(),
            )))
        }
    };
    let dims: &[i64] = match dims {
        Some(d) => d,
        None if dtype.is_handle() => &[],
        None => {
            return Err(PlanError::UnknownShape {
                tensor: tname(),
                what: "an unknown rank".into(),
            })
        }
    };
    if dims.len() > 255 {
        return Err(PlanError::InvalidGraph(format!(
            "tensor '{}' has rank {} (> 255)",
            tname(),
            dims.len()
        )));
    }
    let mut elements: u64 = 1;
    // Integer vectors of unknown length are shape arithmetic (the outputs of
    // BroadcastGradientArgs, dynamic Shape ops): they hold dimension indices,
    // so each unknown dimension is costed as 8 elements.
    let shape_vector = dims.len() <= 1 && matches!(dtype.0, 3 | 9);
    for &d in dims {
        if d < -1 {
            return Err(PlanError::InvalidGraph(format!(
                "tensor '{}' has a negative dimension {d}",
                tname()
            )));
        }
        if d == -1 && shape_vector {
            elements *= 8;
            continue;
        }
        if d == -1 && !dtype.is_handle() {
            return Err(PlanError::UnknownShape {
                tensor: tname(),
                what: format!("a partially unknown shape {:?}", dims),
            });
        }
        elements = elements
            .checked_mul(d.max(0) as u64)
            .ok_or_else(|| overflow(&tname()))?;
    }
    let value_bytes = elements
        .checked_mul(dtype.size())
        .ok_or_else(|| overflow(&tname()))?;
    Ok((dtype, dims.len() as u8, value_bytes))
}

fn overflow(t: &str) -> PlanError {
    PlanError::InvalidGraph(format!(
        "tensor '{t}' has a byte size that overflows 64 bits"
    ))
}

fn add_edges(g: &mut Graph, specs: &[NodeSpec<'_>], index: &FxHashMap<&str, u32>) -> Result<()> {
    g.in_off.reserve(specs.len() + 1);
    g.ctl_off.reserve(specs.len() + 1);
    g.in_off.push(0);
    g.ctl_off.push(0);
    for s in specs {
        for inp in &s.inputs {
            match parse_input(inp)? {
                InputRef::Data(name, k) => {
                    let src = lookup(index, name, s.name)?;
                    let (lo, hi) = (g.out_off[src as usize], g.out_off[src as usize + 1]);
                    if k >= hi - lo {
                        return Err(PlanError::InvalidGraph(format!(
                            "node '{}' reads output {k} of '{name}', which has {} output(s)",
                            s.name,
                            hi - lo
                        )));
                    }
                    g.in_tensor.push(lo + k);
                }
                InputRef::Control(name) => g.ctl_src.push(lookup(index, name, s.name)?),
            }
        }
        g.in_off.push(g.in_tensor.len() as u32);
        g.ctl_off.push(g.ctl_src.len() as u32);
    }
    Ok(())
}

fn lookup(index: &FxHashMap<&str, u32>, name: &str, user: &str) -> Result<u32> {
    index.get(name).copied().ok_or_else(|| {
        PlanError::InvalidGraph(format!(
            "node '{user}' has an input from '{name}', which is not in the graph"
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_input_form() {
        assert_eq!(parse_input("a").unwrap(), InputRef::Data("a", 0));
        assert_eq!(parse_input("a/b:3").unwrap(), InputRef::Data("a/b", 3));
        assert_eq!(parse_input("^a").unwrap(), InputRef::Control("a"));
        assert!(parse_input("a:x").is_err());
    }

    /// An unread node that lists no output: refused when its op computes one
    /// (its bytes would be missed), built when it computes none.
    #[test]
    fn an_unread_compute_node_without_outputs_is_refused() {
        let specs = |op: &'static str| {
            let mut m = NodeSpec::test("m", op, &["x", "x"], &[1024, 1024]);
            m.outputs.clear();
            vec![NodeSpec::test("x", "Placeholder", &[], &[1024, 1024]), m]
        };
        let e = build(&specs("MatMul"), &BuildOptions::default()).unwrap_err();
        assert!(
            matches!(&e, PlanError::UnknownShape { tensor, .. } if tensor == "m:0"),
            "{e}"
        );
        assert!(build(&specs("NoOp"), &BuildOptions::default()).is_ok());
    }
}
