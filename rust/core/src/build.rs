//! Building the [`Graph`] from decoded `NodeDef`s or from flat node specs.
//!
//! Two routes give the same graph: the reference route ([`specs_from_raw`]
//! of [`crate::graphdef::decode`]'s records, then [`build`], also the entry
//! of flat specs) and the direct route from bytes that
//! [`graph_from_bytes`] takes (crate-private module `direct`), which shares
//! `tensor_size` and the steps after the edges (consumers, flags and
//! aliases, phases, persistent bytes) with [`build`], and defers to the
//! reference route on any error.
//!
//! # Complexity
//! O(N + E + D) time and memory for N nodes, E edges and D shape dimensions;
//! one hash map of node names (FxHash, never iterated, so the result does not
//! depend on hash order); the names of the graph share one buffer.

use rustc_hash::FxHashMap;

use crate::dtype::DType;
use crate::error::{PlanError, Result};
use crate::graph::{big_vec_of, Graph, Name, Node, NodeFlags, Tensor, NONE};
use crate::graphdef::{Attr, RawGraph, RawNode, Shape};
use crate::opkind;

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

/// Refuses an op that passes each data input through as the output of the
/// same index typed by `T` (`opkind::passes_each_input_through`) unless `T`
/// lists one type per data input and `_output_shapes`, if given (`shaped`:
/// its count), one shape per data input. TensorFlow refuses such a node, and
/// the rewrite, which counts the outputs from `T`, could not redirect a
/// reader of an output `T` lacks. O(inputs).
fn check_pass_through(n: &RawNode<'_>, shaped: Option<usize>) -> Result<()> {
    let data = n.inputs.iter().filter(|s| !s.starts_with('^')).count();
    let listed = match n.attr("T") {
        Some(Attr::Types(ts)) => Some(ts.len()),
        Some(Attr::Shapes(s)) if s.is_empty() => Some(0), // an empty list
        _ => None,
    };
    let what = match (listed, n.attr("T")) {
        (Some(k), _) if k == data => match shaped {
            Some(c) if c != data => format!("_output_shapes lists {c} shapes"),
            _ => return Ok(()),
        },
        (Some(k), _) => format!("its attribute T lists {k} types"),
        (None, None) => "it has no attribute T".into(),
        (None, Some(_)) => "its attribute T is not a list of types".into(),
    };
    Err(PlanError::InvalidGraph(format!(
        "node '{}' (op {}) has {data} data inputs but {what}: it passes input i \
         through as output i of type T[i], so T must list {data} types (and \
         _output_shapes {data} shapes); TensorFlow refuses this NodeDef too",
        n.name, n.op
    )))
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

/// Output indices at or above this are rejected as malformed (no TensorFlow
/// op has that many outputs; the bound keeps untrusted input from asking for
/// billions of tensors).
pub(crate) const MAX_OUTPUTS: u32 = 1 << 16;

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
        return Err(PlanError::InvalidGraph(
            "the graph has no nodes: export the traced step with as_graph_def(add_shapes=True)"
                .into(),
        ));
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

/// The steps both routes share once nodes, tensors and edges are in place:
/// consumers, flags and aliases, phases and the loss, untimed nodes,
/// persistent bytes.
/// `lookup(g, name)` gives the id of the node named `name`.
///
/// # Errors
/// Those of [`crate::phase::classify`].
///
/// # Complexity
/// O(N + E), plus loss inference (see [`crate::phase`]).
pub(crate) fn finish(
    g: &mut Graph,
    opts: &BuildOptions,
    lookup: impl Fn(&Graph, &str) -> Option<u32>,
) -> Result<()> {
    add_consumers(g);
    let variables = set_flags_and_aliases(g)?;
    crate::phase::classify(g, opts.loss.as_deref(), &lookup)?;
    crate::untimed::mark(g);
    g.persistent_bytes = match opts.persistent_bytes {
        Some(b) => b,
        None => persistent_bytes(g, &variables),
    };
    g.separate_buffers = opts.separate_buffers;
    crate::body::type_lists(g);
    let mut overrides = crate::body::apply(g, &opts.bodies, &lookup)?;
    for (name, bytes) in &opts.workspace_profile {
        let v = lookup(g, name).ok_or_else(|| {
            PlanError::InvalidArgument(format!(
                "the workspace profile names node '{name}', which is not in the graph: profile the same graph you plan"
            ))
        })?;
        overrides.push((v, *bytes));
    }
    g.workspace = crate::workspace::table(g, opts.workspace, &overrides);
    check_total_bytes(g)?;
    Ok(())
}

/// Refuses a graph whose tensors, persistent bytes and largest per-op
/// scratch together pass 2^63 bytes. Each size fits 64 bits (checked as it
/// is read), but a peak is a sum of them, and a plan's peak at most twice
/// the graph's tensors plus the variables and one op's scratch (a clone or
/// swap-in holds a second copy of one original): below 2^63 no peak of
/// any plan can pass 2^64, so no timeline saturates and a budget of
/// `u64::MAX` never "fits" an impossible step.
///
/// # Complexity
/// O(T).
fn check_total_bytes(g: &Graph) -> Result<()> {
    let tensors: u128 = g.tensors.iter().map(|t| u128::from(t.value_bytes)).sum();
    let scratch = u128::from(g.workspace.iter().copied().max().unwrap_or(0));
    let total = tensors + u128::from(g.persistent_bytes) + scratch;
    if total >= 1u128 << 63 {
        return Err(PlanError::InvalidGraph(format!(
            "the step's tensors ({tensors} bytes), variables ({} bytes) and largest kernel \
             scratch ({scratch} bytes) total {total} bytes, past the 2^63 bytes a peak can be \
             counted in: check the shapes in the GraphDef (a dimension read wrongly?) and the \
             workspace profile, or trace with a smaller batch",
            g.persistent_bytes
        )));
    }
    Ok(())
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
            return Err(PlanError::InvalidGraph("more than 2^32 tensors".into()));
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

/// Consumers of every tensor and control consumers of every node, by
/// counting sort: counts, running sums (the end of each run), then a fill
/// from the back that leaves every run's start in its offset. O(N + T + E).
fn add_consumers(g: &mut Graph) {
    let (off, node, slot) = invert(g.tensors.len(), &g.in_off, &g.in_tensor, true);
    g.cons_off = off;
    g.cons_node = node;
    g.cons_slot = slot;
    let (off, node, _) = invert(g.nodes.len(), &g.ctl_off, &g.ctl_src, false);
    g.ctl_dst_off = off;
    g.ctl_dst = node;
}

/// Inverts the CSR lists `targets[offsets[n]..offsets[n + 1]]` of every
/// node n over `len` targets: for every target, the nodes that list it (in
/// node order, then slot order) and, if `slots`, the slot of each.
fn invert(
    len: usize,
    offsets: &[u32],
    targets: &[u32],
    slots: bool,
) -> (Vec<u32>, Vec<u32>, Vec<u32>) {
    let mut off = big_vec_of(len + 1, 0u32);
    for &t in targets {
        off[t as usize] += 1;
    }
    let mut sum = 0;
    for o in &mut off[..len] {
        sum += *o;
        *o = sum;
    }
    off[len] = sum;
    let mut node = big_vec_of(targets.len(), 0u32);
    let mut slot = if slots {
        big_vec_of(targets.len(), 0u32)
    } else {
        Vec::new()
    };
    for n in (0..offsets.len().saturating_sub(1)).rev() {
        let (lo, hi) = (offsets[n] as usize, offsets[n + 1] as usize);
        for k in (lo..hi).rev() {
            let t = targets[k] as usize;
            off[t] -= 1;
            let at = off[t] as usize;
            node[at] = n as u32;
            if slots {
                slot[at] = (k - lo) as u32;
            }
        }
    }
    (off, node, slot)
}

/// Variable, write, no-recompute flags and buffer aliases, from op kinds and
/// the dtypes of inputs. Returns the variables, in node order.
fn set_flags_and_aliases(g: &mut Graph) -> Result<Vec<u32>> {
    // Facts of each distinct op type, decided once: (never recompute, is a
    // variable read, aliased input slot, input 0 must be a handle).
    let facts: Vec<(bool, bool, Option<usize>, bool)> = g
        .ops
        .iter()
        .map(|op| {
            let read = opkind::reads_variable(op, true);
            let handle = opkind::takes_handle(op);
            (
                opkind::never_recompute(op),
                read,
                opkind::aliased_input(op),
                handle,
            )
        })
        .collect();
    // The dtypes, compact: the inputs of a node are read at random.
    let dtypes: Vec<DType> = g.tensors.iter().map(|t| t.dtype).collect();
    let mut variables = Vec::new();
    for n in 0..g.nodes.len() {
        let (never, is_read, alias, handle) = facts[g.nodes[n].op as usize];
        if handle {
            check_handle_input(g, n as u32, &dtypes)?;
        }
        let outs = g.outputs(n as u32);
        let reads_handle = g
            .inputs(n as u32)
            .iter()
            .any(|&t| dtypes[t as usize] == DType::RESOURCE);
        let mut f = g.nodes[n].flags.0;
        let out_resource = outs.clone().any(|t| dtypes[t as usize] == DType::RESOURCE);
        if f & NodeFlags::SOURCE != 0 && out_resource {
            f |= NodeFlags::VARIABLE;
            variables.push(n as u32);
        }
        if reads_handle && outs.is_empty() {
            f |= NodeFlags::WRITES_VARIABLE;
        }
        if reads_handle || outs.is_empty() || never {
            f |= NodeFlags::NO_RECOMPUTE;
        }
        g.nodes[n].flags = NodeFlags(f);
        if reads_handle && is_read {
            for t in outs {
                g.tensors[t as usize].bytes = 0;
            }
        } else if let Some(k) = alias {
            let (lo, hi) = (g.in_off[n] as usize, g.in_off[n + 1] as usize);
            for t in outs {
                let slot = if k == usize::MAX {
                    (t - g.out_off[n]) as usize
                } else {
                    k
                };
                if lo + slot < hi {
                    let src = g.in_tensor[lo + slot];
                    if dtypes[src as usize].size() == dtypes[t as usize].size() {
                        g.tensors[t as usize].alias_of = src;
                        g.tensors[t as usize].bytes = 0;
                    }
                }
            }
        }
    }
    Ok(variables)
}

/// Refuses a resource-variable op whose input 0 is not a `DT_RESOURCE`
/// tensor: planned as data, its reads could be cloned past the variable's
/// update and its writes would not order the step.
fn check_handle_input(g: &Graph, n: u32, dtypes: &[DType]) -> Result<()> {
    let op = &g.ops[g.nodes[n as usize].op as usize];
    match g.inputs(n).first() {
        Some(&t) if dtypes[t as usize] == DType::RESOURCE => Ok(()),
        Some(&t) => Err(PlanError::InvalidGraph(format!(
            "node '{}' (op {op}) takes a variable handle at input 0, but '{}' is {}, not \
             resource: the GraphDef was edited or corrupted; export the step again from \
             TensorFlow (tf.function ... get_concrete_function().graph.as_graph_def())",
            g.node_name(n),
            g.tensor_name(t),
            dtypes[t as usize].name(),
        ))),
        None => Err(PlanError::InvalidGraph(format!(
            "node '{}' (op {op}) takes a variable handle at input 0 but has no data input: \
             the GraphDef was edited or corrupted; export the step again from TensorFlow",
            g.node_name(n),
        ))),
    }
}

/// Persistent bytes read from the graph: for every variable handle (the
/// nodes `variables`, those flagged [`NodeFlags::VARIABLE`]), the largest
/// value read from it (the output of a node that takes the handle and
/// returns one non-handle tensor).
///
/// # Complexity
/// O(V + E) for V variables.
fn persistent_bytes(g: &Graph, variables: &[u32]) -> u64 {
    let mut total = 0u64;
    for &n in variables {
        let mut best = 0u64;
        for h in g.outputs(n) {
            for &c in g.consumers(h) {
                let outs = g.outputs(c);
                if outs.len() == 1 {
                    let t = &g.tensors[outs.start as usize];
                    if !t.dtype.is_handle() {
                        best = best.max(t.value_bytes);
                    }
                }
            }
        }
        total = total.saturating_add(best);
    }
    total
}

/// Decodes and builds in one call: the graph of
/// `build(&specs_from_raw(&graphdef::decode(bytes)?)?, opts)`, by the direct
/// route (no record per node, one name map, inputs parsed once).
///
/// # Errors
/// Those of [`crate::graphdef::decode`], [`specs_from_raw`] and [`build`],
/// the same as the reference route gives: on any error the direct route
/// defers to it.
///
/// # Complexity
/// O(bytes + N + T + E + D) expected time and O(N + T + E + D) memory
/// besides the input, in a few dozen vectors whatever N; on an error, that
/// of [`reference_graph_from_bytes`] on top.
///
/// ```
/// use hybridplan_core::build::{graph_from_bytes, reference_graph_from_bytes, BuildOptions};
/// use hybridplan_core::synth::{residual_graphdef, SynthSpec};
/// let bytes = residual_graphdef(&SynthSpec { blocks: 1, ..Default::default() });
/// let opts = BuildOptions::default();
/// assert_eq!(graph_from_bytes(&bytes, &opts), reference_graph_from_bytes(&bytes, &opts));
/// ```
pub fn graph_from_bytes(bytes: &[u8], opts: &BuildOptions) -> Result<Graph> {
    match crate::direct::graph_from_bytes(bytes, opts) {
        Some(result) => result,
        None => reference_graph_from_bytes(bytes, opts),
    }
}

/// The reference route: [`crate::graphdef::decode`], [`specs_from_raw`],
/// [`build`].
///
/// # Errors
/// Those of the three.
///
/// # Complexity
/// O(bytes + N + E + D), with a record and a few allocations per node.
pub fn reference_graph_from_bytes(bytes: &[u8], opts: &BuildOptions) -> Result<Graph> {
    let raw = crate::graphdef::decode(bytes)?;
    let specs = specs_from_raw(&raw)?;
    build(&specs, opts)
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
}
