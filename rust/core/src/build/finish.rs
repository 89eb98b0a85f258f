//! The steps after the edges, shared by [`super::build`] and the GraphDef
//! decoder: consumers, flags and aliases, phases and the loss, dead
//! nodes, persistent bytes, kernel scratch, and the check that every peak
//! can be counted.
//!
//! # Complexity
//! O(N + T + E), plus loss inference (see [`crate::phase`]).

use crate::dtype::DType;
use crate::error::{PlanError, Result};
use crate::graph::{big_vec_of, Graph, NodeFlags};
use crate::opkind;

use super::BuildOptions;

/// The steps both routes share once nodes, tensors and edges are in place:
/// consumers, flags and aliases, phases and the loss, dead nodes,
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
    check_outputs_listed(g)?;
    add_consumers(g);
    let variables = set_flags_and_aliases(g)?;
    crate::phase::classify(g, opts.loss.as_deref(), &lookup)?;
    crate::dead::mark(g);
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
    g.hostable = crate::hosting::resolve(g, &opts.hosting, &lookup)?;
    check_total_bytes(g)?;
    Ok(())
}

/// Refuses a node without outputs whose op computes one
/// ([`crate::cost::makes_an_output`]): a node's outputs are those its
/// `_output_shapes` lists, or those its readers read where it lists none,
/// so an unread node whose shapes were left out (or an empty list) would
/// count no bytes for what its kernel allocates.
///
/// # Complexity
/// O(N).
fn check_outputs_listed(g: &Graph) -> Result<()> {
    for (v, n) in g.nodes.iter().enumerate() {
        if g.out_off[v] == g.out_off[v + 1] && crate::cost::makes_an_output(&g.ops[n.op as usize]) {
            return Err(PlanError::UnknownShape {
                tensor: format!("{}:0", &*n.name),
                what: format!(
                    "no shape: op {} computes an output, but the node's _output_shapes lists none and nothing reads it",
                    g.ops[n.op as usize]
                ),
            });
        }
    }
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

/// Consumers of every tensor and control consumers of every node, by
/// counting sort: counts, running sums (the end of each run), then a fill
/// from the back that leaves every run's start in its offset. O(N + T + E).
fn add_consumers(g: &mut Graph) {
    let (off, node) = invert(g.tensors.len(), &g.in_off, &g.in_tensor);
    g.cons_off = off;
    g.cons_node = node;
    let (off, node) = invert(g.nodes.len(), &g.ctl_off, &g.ctl_src);
    g.ctl_dst_off = off;
    g.ctl_dst = node;
}

/// Inverts the CSR lists `targets[offsets[n]..offsets[n + 1]]` of every
/// node n over `len` targets: for every target, the nodes that list it (in
/// node order, then slot order).
fn invert(len: usize, offsets: &[u32], targets: &[u32]) -> (Vec<u32>, Vec<u32>) {
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
    for n in (0..offsets.len().saturating_sub(1)).rev() {
        let (lo, hi) = (offsets[n] as usize, offsets[n + 1] as usize);
        for k in (lo..hi).rev() {
            let t = targets[k] as usize;
            off[t] -= 1;
            let at = off[t] as usize;
            node[at] = n as u32;
        }
    }
    (off, node)
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
