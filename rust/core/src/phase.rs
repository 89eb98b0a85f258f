//! Which ops are forward, backward, update or other, decided from the graph's
//! structure and the loss tensor (never from name prefixes).
//!
//! # The rule
//! - **Loss.** Given by the caller (`node:i` or a node name), or inferred:
//!   the candidates are the floating-point tensors of at most one element
//!   that feed a graph output (a node nothing depends on). Outputs that run
//!   after the variable writes (a traced TF2 step returns its loss through
//!   an `Identity` with a control edge from the updates) are preferred over
//!   other sinks (dead gradient branches end in sinks too). Among the
//!   preferred candidates, the one with the most ancestors wins; ties go to
//!   the lowest node id. At most the first 64 candidates are scored.
//! - **Forward**: the loss's producer and all its ancestors (data and
//!   control edges), sources excluded.
//! - **Update**: ops that write a variable (take a resource handle and return
//!   nothing), and, transitively, non-forward ops whose every successor is an
//!   update op and which read no forward tensor directly (optimizer
//!   arithmetic, slot reads).
//! - **Backward**: the remaining descendants of forward ops. Side updates off
//!   the loss path (batch-norm moving averages) count as backward up to their
//!   variable write.
//! - **Other**: sources (placeholders, constants, variable handles) and ops
//!   unrelated to the loss.
//!
//! # Complexity
//! O(N + E) for the phases; loss inference adds O(min(C, 64) * (N + E)) for
//! C candidates.

use rustc_hash::FxHashMap;

use crate::error::{PlanError, Result};
use crate::graph::{Graph, NodeFlags, Phase, NONE};

const MAX_LOSS_CANDIDATES: usize = 64;

/// Sets `g.loss` and `g.phase`.
///
/// # Errors
/// [`PlanError::InvalidArgument`] if a given loss names nothing in the graph;
/// [`PlanError::InvalidGraph`] if no loss can be inferred.
pub fn classify(g: &mut Graph, loss: Option<&str>, index: &FxHashMap<&str, u32>) -> Result<()> {
    g.loss = match loss {
        Some(name) => resolve_loss(g, name, index)?,
        None => infer_loss(g).unwrap_or(NONE),
    };
    let n = g.num_nodes();
    g.phase = vec![Phase::Other; n];
    if g.loss == NONE {
        return Ok(());
    }
    let forward = ancestors(g, g.tensors[g.loss as usize].node);
    for (v, &is_fwd) in forward.iter().enumerate() {
        if is_fwd && !g.nodes[v].flags.has(NodeFlags::SOURCE) {
            g.phase[v] = Phase::Forward;
        }
    }
    mark_update(g);
    mark_backward(g);
    Ok(())
}

fn resolve_loss(g: &Graph, name: &str, index: &FxHashMap<&str, u32>) -> Result<u32> {
    let (node, k) = match name.rsplit_once(':') {
        Some((n, k)) => (n, k.parse::<u32>().ok()),
        None => (name, Some(0)),
    };
    let missing = || {
        PlanError::InvalidArgument(format!(
            "loss '{name}' is not a tensor of the graph: pass 'node:index' of the loss (e.g. the input of the step's output Identity)"
        ))
    };
    let &n = index.get(node).ok_or_else(missing)?;
    let k = k.ok_or_else(missing)?;
    let outs = g.outputs(n);
    if k >= outs.end - outs.start {
        return Err(missing());
    }
    Ok(outs.start + k)
}

/// The inferred loss tensor, or `None` when no candidate exists.
pub fn infer_loss(g: &Graph) -> Option<u32> {
    let is_sink = |v: u32| g.successors(v).next().is_none();
    let after_update = descendants_of_writes(g);
    let mut candidates = Vec::new();
    'tensors: for t in 0..g.num_tensors() as u32 {
        let tt = &g.tensors[t as usize];
        if !tt.dtype.is_float()
            || g.elements(t) > 1
            || g.nodes[tt.node as usize].flags.has(NodeFlags::SOURCE)
        {
            continue;
        }
        for &c in g.consumers(t) {
            if is_sink(c) {
                candidates.push(t);
                if candidates.len() == MAX_LOSS_CANDIDATES {
                    break 'tensors;
                }
                continue 'tensors;
            }
        }
    }
    let feeds_late_output = |t: u32| {
        g.consumers(t)
            .iter()
            .any(|&c| is_sink(c) && after_update[c as usize])
    };
    if candidates.iter().any(|&t| feeds_late_output(t)) {
        candidates.retain(|&t| feeds_late_output(t));
    }
    let mut best: Option<(usize, u32)> = None;
    for t in candidates {
        let count = ancestors(g, g.tensors[t as usize].node)
            .iter()
            .filter(|&&a| a)
            .count();
        if best.is_none_or(|(c, _)| count > c) {
            best = Some((count, t));
        }
    }
    best.map(|(_, t)| t)
}

/// Marks every node that runs after some variable write. O(N + E).
fn descendants_of_writes(g: &Graph) -> Vec<bool> {
    let mut seen = vec![false; g.num_nodes()];
    let mut stack: Vec<u32> = (0..g.num_nodes() as u32)
        .filter(|&v| g.nodes[v as usize].flags.has(NodeFlags::WRITES_VARIABLE))
        .collect();
    for &v in &stack {
        seen[v as usize] = true;
    }
    while let Some(u) = stack.pop() {
        for s in g.successors(u) {
            if !seen[s as usize] {
                seen[s as usize] = true;
                stack.push(s);
            }
        }
    }
    seen
}

/// Marks `v` and all its ancestors. O(N + E), iterative.
pub fn ancestors(g: &Graph, v: u32) -> Vec<bool> {
    let mut seen = vec![false; g.num_nodes()];
    let mut stack = vec![v];
    seen[v as usize] = true;
    while let Some(u) = stack.pop() {
        for p in g.predecessors(u) {
            if !seen[p as usize] {
                seen[p as usize] = true;
                stack.push(p);
            }
        }
    }
    seen
}

fn mark_update(g: &mut Graph) {
    let n = g.num_nodes();
    let mut pending: Vec<u32> = (0..n as u32)
        .map(|v| g.successors(v).count() as u32)
        .collect();
    let mut stack: Vec<u32> = (0..n as u32)
        .filter(|&v| g.nodes[v as usize].flags.has(NodeFlags::WRITES_VARIABLE))
        .collect();
    for &v in &stack {
        g.phase[v as usize] = Phase::Update;
    }
    // The phases are taken out of the graph so its edges can be walked
    // without copying them.
    let mut phase = std::mem::take(&mut g.phase);
    while let Some(u) = stack.pop() {
        for p in g.predecessors(u) {
            let pi = p as usize;
            pending[pi] = pending[pi].saturating_sub(1);
            if pending[pi] == 0 && phase[pi] == Phase::Other && can_be_update(g, &phase, p) {
                phase[pi] = Phase::Update;
                stack.push(p);
            }
        }
    }
    g.phase = phase;
}

fn can_be_update(g: &Graph, phase: &[Phase], v: u32) -> bool {
    let f = g.nodes[v as usize].flags;
    !f.has(NodeFlags::SOURCE)
        && g.inputs(v)
            .iter()
            .all(|&t| phase[g.tensors[t as usize].node as usize] != Phase::Forward)
}

fn mark_backward(g: &mut Graph) {
    let mut stack: Vec<u32> = (0..g.num_nodes() as u32)
        .filter(|&v| g.phase[v as usize] == Phase::Forward)
        .collect();
    let mut seen = vec![false; g.num_nodes()];
    let mut phase = std::mem::take(&mut g.phase);
    while let Some(u) = stack.pop() {
        for s in g.successors(u) {
            let si = s as usize;
            if !seen[si] {
                seen[si] = true;
                if phase[si] == Phase::Other && !g.nodes[si].flags.has(NodeFlags::SOURCE) {
                    phase[si] = Phase::Backward;
                }
                stack.push(s);
            }
        }
    }
    g.phase = phase;
}
