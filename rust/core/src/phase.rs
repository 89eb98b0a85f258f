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
//! C candidates (none when one candidate is left: the ancestors of the loss
//! are walked once). The walks read compact copies of what they need at
//! random (the producer of each tensor, the flags of each node: 5 bytes
//! where the records take 72), O(N + T) memory.

use crate::error::{PlanError, Result};
use crate::graph::{Graph, NodeFlags, Phase, NONE};

const MAX_LOSS_CANDIDATES: usize = 64;

/// Sets `g.loss` and `g.phase`; `lookup(g, name)` gives the id of the
/// node named `name`.
///
/// # Errors
/// [`PlanError::InvalidArgument`] if a given loss names nothing in the graph;
/// [`PlanError::InvalidGraph`] if no loss can be inferred.
pub(crate) fn classify(
    g: &mut Graph,
    loss: Option<&str>,
    lookup: impl Fn(&Graph, &str) -> Option<u32>,
) -> Result<()> {
    let w = Walk::new(g);
    let (loss, forward) = match loss {
        Some(name) => (resolve_loss(g, name, lookup)?, None),
        None => match infer(&w) {
            Some((t, a)) => (t, a),
            None => (NONE, None),
        },
    };
    let mut phase = vec![Phase::Other; g.num_nodes()];
    if loss != NONE {
        let forward = forward.unwrap_or_else(|| w.ancestors(g.tensors[loss as usize].node));
        for (v, &is_fwd) in forward.iter().enumerate() {
            if is_fwd && w.flags[v] & NodeFlags::SOURCE == 0 {
                phase[v] = Phase::Forward;
            }
        }
        mark_update(&w, &mut phase);
        mark_backward(&w, &mut phase);
    }
    g.loss = loss;
    g.phase = phase;
    Ok(())
}

fn resolve_loss(
    g: &Graph,
    name: &str,
    lookup: impl Fn(&Graph, &str) -> Option<u32>,
) -> Result<u32> {
    let (node, k) = match name.rsplit_once(':') {
        Some((n, k)) => (n, k.parse::<u32>().ok()),
        None => (name, Some(0)),
    };
    let missing = || {
        PlanError::InvalidArgument(format!(
            "loss '{name}' is not a tensor of the graph: pass 'node:index' of the loss (e.g. the input of the step's output Identity)"
        ))
    };
    let n = lookup(g, node).ok_or_else(missing)?;
    let k = k.ok_or_else(missing)?;
    let outs = g.outputs(n);
    if k >= outs.end - outs.start {
        return Err(missing());
    }
    Ok(outs.start + k)
}

/// The inferred loss tensor (`None` when no candidate exists), with the
/// ancestors of the loss's producer where they were computed to choose
/// among candidates.
fn infer(w: &Walk<'_>) -> Option<(u32, Option<Vec<bool>>)> {
    let g = w.g;
    let is_sink = |v: u32| w.successor_count(v) == 0;
    let after_update = w.descendants_of_writes();
    let mut candidates = Vec::new();
    'tensors: for t in 0..g.num_tensors() as u32 {
        let tt = &g.tensors[t as usize];
        if !tt.dtype.is_float()
            || g.elements(t) > 1
            || w.flags[tt.node as usize] & NodeFlags::SOURCE != 0
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
    if let [t] = candidates[..] {
        return Some((t, None));
    }
    let mut best: Option<(usize, u32, Vec<bool>)> = None;
    for t in candidates {
        let a = w.ancestors(g.tensors[t as usize].node);
        let count = a.iter().filter(|&&x| x).count();
        if best.as_ref().is_none_or(|(c, _, _)| count > *c) {
            best = Some((count, t, a));
        }
    }
    best.map(|(_, t, a)| (t, Some(a)))
}

/// The graph with compact copies of what its traversals read at random:
/// the producer of every tensor and the flags of every node.
struct Walk<'g> {
    g: &'g Graph,
    producer: Vec<u32>,
    flags: Vec<u8>,
}

impl<'g> Walk<'g> {
    fn new(g: &'g Graph) -> Walk<'g> {
        let mut producer = Vec::with_capacity(g.num_tensors());
        for n in 0..g.num_nodes() as u32 {
            producer.extend(g.outputs(n).map(|_| n));
        }
        Walk {
            g,
            producer,
            flags: g.nodes.iter().map(|n| n.flags.0).collect(),
        }
    }

    /// The data and control consumers of `v`: the nodes of
    /// [`Graph::successors`].
    #[inline]
    fn successor_lists(&self, v: u32) -> (&'g [u32], &'g [u32]) {
        (self.g.data_consumers(v), self.g.control_outputs(v))
    }

    #[inline]
    fn successor_count(&self, v: u32) -> usize {
        let (data, control) = self.successor_lists(v);
        data.len() + control.len()
    }

    /// Calls `f` on every successor of `v`, once per edge.
    #[inline]
    fn each_successor(&self, v: u32, mut f: impl FnMut(u32)) {
        // Two loops, not a `chain`: the compiler calls `Chain::fold` out of
        // line in `mark_backward`, once per node.
        let (data, control) = self.successor_lists(v);
        for &s in data {
            f(s);
        }
        for &s in control {
            f(s);
        }
    }

    /// Calls `f` on every predecessor of `v`, once per edge.
    #[inline]
    fn each_predecessor(&self, v: u32, mut f: impl FnMut(u32)) {
        for &t in self.g.inputs(v) {
            f(self.producer[t as usize]);
        }
        self.g.control_inputs(v).iter().for_each(|&p| f(p));
    }

    /// Marks `v` and all its ancestors. O(N + E), iterative.
    fn ancestors(&self, v: u32) -> Vec<bool> {
        let mut seen = vec![false; self.g.num_nodes()];
        let mut stack = vec![v];
        seen[v as usize] = true;
        while let Some(u) = stack.pop() {
            self.each_predecessor(u, |p| {
                if !seen[p as usize] {
                    seen[p as usize] = true;
                    stack.push(p);
                }
            });
        }
        seen
    }

    /// The nodes that write a variable.
    fn writes(&self) -> Vec<u32> {
        (0..self.flags.len() as u32)
            .filter(|&v| self.flags[v as usize] & NodeFlags::WRITES_VARIABLE != 0)
            .collect()
    }

    /// Marks every node that runs after some variable write. O(N + E).
    fn descendants_of_writes(&self) -> Vec<bool> {
        let mut seen = vec![false; self.g.num_nodes()];
        let mut stack = self.writes();
        for &v in &stack {
            seen[v as usize] = true;
        }
        while let Some(u) = stack.pop() {
            self.each_successor(u, |s| {
                if !seen[s as usize] {
                    seen[s as usize] = true;
                    stack.push(s);
                }
            });
        }
        seen
    }
}

fn mark_update(w: &Walk<'_>, phase: &mut [Phase]) {
    let n = w.g.num_nodes();
    let mut pending: Vec<u32> = (0..n as u32).map(|v| w.successor_count(v) as u32).collect();
    let mut stack = w.writes();
    for &v in &stack {
        phase[v as usize] = Phase::Update;
    }
    while let Some(u) = stack.pop() {
        w.each_predecessor(u, |p| {
            let pi = p as usize;
            pending[pi] = pending[pi].saturating_sub(1);
            if pending[pi] == 0 && phase[pi] == Phase::Other && can_be_update(w, phase, p) {
                phase[pi] = Phase::Update;
                stack.push(p);
            }
        });
    }
}

fn can_be_update(w: &Walk<'_>, phase: &[Phase], v: u32) -> bool {
    w.flags[v as usize] & NodeFlags::SOURCE == 0
        && w.g
            .inputs(v)
            .iter()
            .all(|&t| phase[w.producer[t as usize] as usize] != Phase::Forward)
}

fn mark_backward(w: &Walk<'_>, phase: &mut [Phase]) {
    let mut stack: Vec<u32> = (0..phase.len() as u32)
        .filter(|&v| phase[v as usize] == Phase::Forward)
        .collect();
    let mut seen = vec![false; phase.len()];
    while let Some(u) = stack.pop() {
        w.each_successor(u, |s| {
            let si = s as usize;
            if !seen[si] {
                seen[si] = true;
                if phase[si] == Phase::Other && w.flags[si] & NodeFlags::SOURCE == 0 {
                    phase[si] = Phase::Backward;
                }
                stack.push(s);
            }
        });
    }
}
