//! The reference route from `GraphDef` bytes to a [`Graph`], kept as the
//! test oracle of the decoder ([`crate::graph_from_bytes`]): the records of
//! [`crate::graphdef::decode`], turned into node specs
//! ([`specs_from_raw`]), built by [`build::build`]. Compiled for tests and
//! with the `testing` feature only.
//!
//! # Complexity
//! O(bytes + N + E + D), with a record and a few allocations per node.

use rustc_hash::FxHashMap;

use crate::build::{self, build, parse_input, InputRef, NodeSpec, OutSpec, Shape, MAX_OUTPUTS};
use crate::dtype::DType;
use crate::error::{PlanError, Result};
use crate::graph::Graph;
use crate::graphdef::{Attr, RawGraph, RawNode};
use crate::opkind;

/// Runs the decoder ([`crate::graph_from_bytes`]) and the reference route
/// on `bytes`. They agree when both give the same graph, or both fail with
/// the same error, but for malformed bytes, which both report as
/// [`PlanError::Decode`] in their own words (the decoder gives the offset
/// in the whole input, the node and the attribute). Returns the graph (if
/// any) where they agree, else how they differ.
///
/// # Errors
/// A description of the difference.
pub fn agree(
    bytes: &[u8],
    opts: &build::BuildOptions,
) -> std::result::Result<Option<Graph>, String> {
    let got = crate::graph_from_bytes(bytes, opts);
    let reference = reference_graph_from_bytes(bytes, opts);
    match (got, reference) {
        (Ok(g), Ok(r)) if g == r => Ok(Some(g)),
        (Ok(_), Ok(_)) => Err("both accept, with different graphs".into()),
        (Err(PlanError::Decode(_)), Err(PlanError::Decode(_))) => Ok(None),
        (Err(e), Err(r)) if e == r => Ok(None),
        (got, reference) => Err(format!(
            "the decoder gives {:?}, the reference {:?}",
            got.map(|_| "a graph"),
            reference.map(|_| "a graph")
        )),
    }
}

/// The reference route: [`crate::graphdef::decode`], [`specs_from_raw`],
/// [`build::build`].
///
/// # Errors
/// Those of the three.
///
/// # Complexity
/// O(bytes + N + E + D), with a record and a few allocations per node.
pub fn reference_graph_from_bytes(bytes: &[u8], opts: &build::BuildOptions) -> Result<Graph> {
    let raw = crate::graphdef::decode(bytes)?;
    let specs = specs_from_raw(&raw)?;
    build(&specs, opts)
}

/// Turns decoded `NodeDef`s into node specs: output count and shapes from
/// `_output_shapes` (or `shape` / a `Const` value), dtypes from attributes.
///
/// # Complexity
/// O(N + inputs).
pub fn specs_from_raw<'a>(raw: &RawGraph<'a>) -> Result<Vec<NodeSpec<'a>>> {
    // The name index is needed only for nodes without `_output_shapes` or
    // without a readable dtype; a graph exported with add_shapes=True has
    // neither, and skips a hash map of every name and a parse of every input.
    let mut index = None;
    let all_shaped = raw.nodes.iter().all(|n| {
        matches!(
            n.attr("_output_shapes"),
            Some(Attr::Shapes(_) | Attr::Shape(_))
        )
    });
    let referenced = if all_shaped {
        Vec::new()
    } else {
        max_referenced_outputs(raw, index.get_or_insert_with(|| raw_index(raw)))?
    };
    let functions: rustc_hash::FxHashSet<&str> = raw.functions.iter().copied().collect();
    let mut specs = Vec::with_capacity(raw.nodes.len());
    for (i, n) in raw.nodes.iter().enumerate() {
        let shaped = matches!(
            n.attr("_output_shapes"),
            Some(Attr::Shapes(_) | Attr::Shape(_))
        );
        let shapes: Vec<Shape> = match n.attr("_output_shapes") {
            Some(Attr::Shapes(s)) => s.clone(),
            Some(Attr::Shape(s)) => vec![s.clone()],
            _ => fallback_shapes(n, referenced.get(i).copied().unwrap_or(0)),
        };
        let count = shapes.len();
        if opkind::passes_each_input_through(n.op.as_bytes()) {
            check_pass_through(n, shaped.then_some(count))?;
        }
        let outputs = shapes
            .into_iter()
            .enumerate()
            .map(|(k, shape)| OutSpec {
                dtype: output_dtype(n, k, count),
                shape,
            })
            .collect();
        let calls_function =
            n.calls_function() || opkind::is_control_flow(n.op) || functions.contains(n.op);
        specs.push(NodeSpec {
            name: n.name,
            op: n.op,
            device: n.device,
            inputs: n.inputs.clone(),
            outputs,
            calls_function,
        });
    }
    if specs
        .iter()
        .any(|s| s.outputs.iter().any(|o| o.dtype.is_none()))
    {
        inherit_dtypes(&mut specs, index.get_or_insert_with(|| raw_index(raw)))?;
    }
    Ok(specs)
}

/// Refuses an op that passes each data input through unless `T` lists one
/// type per data input ([`build::pass_through_fault`]). O(inputs).
fn check_pass_through(n: &RawNode<'_>, shaped: Option<usize>) -> Result<()> {
    let data = n.inputs.iter().filter(|s| !s.starts_with('^')).count();
    let listed = n.attr("T").map(|t| match t {
        Attr::Types(ts) => Some(ts.len()),
        Attr::Shapes(s) if s.is_empty() => Some(0), // an empty list
        _ => None,
    });
    match build::pass_through_fault(n.name, n.op, data, listed, shaped) {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

fn raw_index<'a>(raw: &RawGraph<'a>) -> FxHashMap<&'a str, usize> {
    let mut index: FxHashMap<&str, usize> = FxHashMap::default();
    index.reserve(raw.nodes.len());
    for (i, n) in raw.nodes.iter().enumerate() {
        index.insert(n.name, i);
    }
    index
}

/// Outputs whose dtype no attribute gives take the dtype of the node's
/// first data input (one pass in node order, which is topological for
/// traced graphs). O(N).
fn inherit_dtypes(specs: &mut [NodeSpec<'_>], index: &FxHashMap<&str, usize>) -> Result<()> {
    for i in 0..specs.len() {
        if specs[i].outputs.iter().all(|o| o.dtype.is_some()) {
            continue;
        }
        let mut from = None;
        for inp in &specs[i].inputs {
            if let InputRef::Data(name, k) = parse_input(inp)? {
                from = index
                    .get(name)
                    .and_then(|&j| specs[j].outputs.get(k as usize))
                    .and_then(|o| o.dtype);
                break;
            }
        }
        for o in &mut specs[i].outputs {
            if o.dtype.is_none() {
                o.dtype = from;
            }
        }
    }
    Ok(())
}

/// For every node, 1 + the largest output index any input references (0 if none).
fn max_referenced_outputs(raw: &RawGraph<'_>, index: &FxHashMap<&str, usize>) -> Result<Vec<u32>> {
    let mut out = vec![0u32; raw.nodes.len()];
    for n in &raw.nodes {
        for inp in &n.inputs {
            if let InputRef::Data(name, k) = parse_input(inp)? {
                if k >= MAX_OUTPUTS {
                    return Err(PlanError::InvalidGraph(format!(
                        "node '{}' reads output {k} of '{name}': no op has that many outputs",
                        n.name
                    )));
                }
                if let Some(&j) = index.get(name) {
                    out[j] = out[j].max(k + 1);
                }
            }
        }
    }
    Ok(out)
}

fn fallback_shapes(n: &RawNode<'_>, referenced: u32) -> Vec<Shape> {
    let one = match (n.attr("shape"), n.attr("value")) {
        (Some(Attr::Shape(s)), _) => s.clone(),
        (_, Some(Attr::TensorShape(s))) => s.clone(),
        _ => Shape(None),
    };
    let count = if n.attr("shape").is_some() || n.attr("value").is_some() {
        referenced.max(1)
    } else {
        referenced
    };
    vec![one; count as usize]
}

/// The dtype of output `k` of `count`, read from the node's attributes.
///
/// Rule, first match wins: a type list (`Tout`, `output_types`, `out_types`,
/// `component_types`, `T`) with one entry per output; `VarHandleOp` gives a
/// resource; a single type in `out_type`, `output_type`, `DstT`, `dtype`,
/// `Tidx` (for `Range`), `T`. `None` if nothing applies.
fn output_dtype(n: &RawNode<'_>, k: usize, count: usize) -> Option<DType> {
    for key in ["Tout", "output_types", "out_types", "component_types", "T"] {
        if let Some(Attr::Types(ts)) = n.attr(key) {
            if ts.len() == count {
                return DType::from_proto(ts[k]);
            }
        }
    }
    if n.op == "VarHandleOp" {
        return Some(DType::RESOURCE);
    }
    let keys: &[&str] = if n.op == "Range" {
        &["Tidx"]
    } else {
        &["out_type", "output_type", "DstT", "dtype", "T", "Tparams"]
    };
    keys.iter().find_map(|k| n.attr_type(k))
}
