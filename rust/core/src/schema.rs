//! The plan schema: the one shape a plan has outside the planner. The
//! planner's report, the rewrite's input (Python `hybridplan.rewriting`),
//! the distributed rewrite, the CLI, the HTML/Markdown reports, the replay
//! and every saved plan (`Plan.save`, `hybridplan plan --json`) read and
//! write exactly these structs, serialised by serde as JSON objects with the
//! field names below. The Python stub (`python/hybridplan/_core.pyi`) types
//! the same objects as `TypedDict`s of the same names and fields.
//!
//! Rule: every field is named (no tuples); node ids are positions in the
//! analysed graph (the GraphDef's `node` list after the planner's inlining),
//! bytes are bytes, times are seconds. [`PLAN_SCHEMA_VERSION`] is written
//! into every report; a report of another version (older saved plans carry
//! none) is refused with [`PlanError::PlanVersion`], which says to re-plan:
//! no reader keeps branches for older shapes.
//!
//! Version history (the shapes, not the planners): 1, unversioned: swap-ins
//! as `[trigger, name, consumers, clone_consumers]` arrays, `release`/`gate`
//! as `[node, name]`, recompute `inputs`/`readers` as arrays, the host
//! timeline as `[s, bytes]` pairs; 2: every field named, as here.
//!
//! # Complexity
//! Building the decisions: O(plan size + inputs of the cloned nodes).
//! Reading a report: O(its size).

use rustc_hash::FxHashSet;
use serde::{Deserialize, Serialize};

use crate::error::{PlanError, Result};
use crate::graph::{Graph, NONE};
use crate::plan::Plan;
use crate::simulate::SimResult;

/// The version of the plan schema this core writes and reads.
pub const PLAN_SCHEMA_VERSION: u32 = 2;

/// Predicted figures of one step (bytes, seconds).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Figures {
    pub peak_bytes: u64,
    pub step_time_s: f64,
    pub compute_time_s: f64,
    pub recompute_time_s: f64,
    /// Time the compute stream waited for transfers.
    pub stall_time_s: f64,
    pub bytes_d2h: u64,
    pub bytes_h2d: u64,
    /// Swapped tensors.
    pub swaps: usize,
    /// Swap-ins (a tensor may come back more than once).
    pub swap_ins: usize,
    /// Cloned nodes.
    pub clones: usize,
    /// Most swapped bytes held in host memory at once (`host.rs`).
    pub host_peak_bytes: u64,
    /// The pinned host memory that needs on a GPU (`host.rs`).
    pub pinned_bytes: u64,
}

impl Figures {
    pub(crate) fn of(g: &Graph, sim: &SimResult, plan: &Plan) -> Self {
        Figures::with_host(sim, plan, &crate::host::host_memory(g, plan, sim))
    }

    /// [`Figures::of`] with the host memory already known.
    pub(crate) fn with_host(sim: &SimResult, plan: &Plan, host: &crate::host::HostMemory) -> Self {
        Figures {
            host_peak_bytes: host.peak_bytes,
            pinned_bytes: host.pinned_bytes,
            peak_bytes: sim.peak_bytes,
            step_time_s: sim.step_time_s,
            compute_time_s: sim.compute_time_s,
            recompute_time_s: sim.recompute_time_s,
            stall_time_s: sim.stall_time_s,
            bytes_d2h: sim.bytes_d2h,
            bytes_h2d: sim.bytes_h2d,
            swaps: plan.swaps.len(),
            swap_ins: plan.swaps.iter().map(|s| s.ins.len()).sum(),
            clones: plan.recomputes.iter().map(|r| r.nodes.len()).sum(),
        }
    }
}

/// A node, by id and name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeRef {
    pub node: u32,
    pub name: String,
}

/// One output of a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TensorRef {
    pub node: u32,
    pub output: u32,
}

/// One output of a node and how many data inputs read it in the whole graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReadCount {
    pub node: u32,
    pub output: u32,
    pub reads: u32,
}

/// One swap-in of a swapped tensor.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SwapInDecision {
    /// The node after which the copy back starts (a control edge).
    pub trigger: u32,
    pub trigger_name: String,
    /// Nodes whose reads of the tensor are rewired to this swap-in.
    pub consumers: Vec<u32>,
    /// Nodes whose recompute clones read this swap-in.
    pub clone_consumers: Vec<u32>,
    /// The copy starts after the copy of the swap-in listed before it with
    /// the same trigger has ended (`plan/queue.rs`); absent: false.
    #[serde(default)]
    pub follows: bool,
}

/// One swapped tensor.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SwapDecision {
    /// The tensor's name (`node:output`, `:0` left out).
    pub tensor: String,
    /// Producer node and output.
    pub node: u32,
    pub output: u32,
    pub bytes: u64,
    /// The node after which the swap-out starts.
    pub after: u32,
    pub ins: Vec<SwapInDecision>,
    /// The node that waits for the swap-out (see `plan/release.rs`).
    pub release: Option<NodeRef>,
    /// The node that gets the control edge from the swap-out (the release
    /// node or a variable read feeding it): what the rewrite writes.
    pub gate: Option<NodeRef>,
    pub reason: String,
}

/// One recomputed sub-graph.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecomputeDecision {
    /// The cloned nodes, in schedule order, and their names.
    pub nodes: Vec<u32>,
    pub names: Vec<String>,
    /// The node after which the clones run (a control edge).
    pub trigger: u32,
    pub trigger_name: String,
    /// Nodes whose reads of the cloned nodes' outputs are rewired to the clones.
    pub consumers: Vec<u32>,
    /// Nodes whose later clones read these clones.
    pub clone_consumers: Vec<u32>,
    pub reason: String,
    /// Tensors the clones read from outside the recompute, each once, in the
    /// order the clones first read them (the rewrite gates them, so that it
    /// need not search the graph).
    pub inputs: Vec<TensorRef>,
    /// Every output of the cloned nodes with its data reads in the whole
    /// graph (the rewrite keeps each tensor's readers from dropping below
    /// what Grappler's fusion rules look at).
    pub readers: Vec<ReadCount>,
}

/// Swapped bytes held in host memory over time (`host.rs`): at `time_s[i]`
/// the holding becomes `bytes[i]`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HostTimeline {
    pub time_s: Vec<f64>,
    pub bytes: Vec<u64>,
}

impl From<Vec<(f64, u64)>> for HostTimeline {
    fn from(points: Vec<(f64, u64)>) -> Self {
        let (time_s, bytes) = points.into_iter().unzip();
        HostTimeline { time_s, bytes }
    }
}

/// What the exact solver (`hybridplan.optimal`) says of its plan; written by
/// the Python side, which runs the solver.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OptimalFigures {
    /// `optimal`, `time limit` or `fits`.
    pub status: String,
    /// The formulation's objective (s); none when the step fits as it is.
    pub objective_s: Option<f64>,
    pub mip_gap: f64,
    pub solve_time_s: f64,
    /// The formulation's size (absent when the step fits as it is).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variables: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub binaries: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub constraints: Option<u64>,
    /// The formulation's memory model (always true: one buffer per output).
    pub separate_buffers: bool,
}

/// A plan: what a plan request returns and what a saved plan holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanReport {
    /// [`PLAN_SCHEMA_VERSION`] when written.
    pub schema_version: u32,
    pub strategy_requested: String,
    /// The strategy whose plan this is (`hybrid` names the one it chose;
    /// `none` when the exact solver left the step as it is).
    pub strategy: String,
    pub device: String,
    /// Device bytes planned under, persistent bytes included.
    pub budget: u64,
    pub persistent_bytes: u64,
    pub num_nodes: usize,
    /// The loss tensor's name, if the graph has one.
    pub loss: Option<String>,
    /// The kernels' scratch rule planned with (`workspace.rs`), as given.
    pub workspace: Option<String>,
    pub original: Figures,
    pub planned: Figures,
    pub swaps: Vec<SwapDecision>,
    pub recomputes: Vec<RecomputeDecision>,
    /// Op types the cost model knows only by bytes.
    pub unknown_ops: Vec<String>,
    /// Plans the simulator judged.
    pub evaluations: u32,
    /// Swap options the planner built.
    pub swap_options: usize,
    /// Recompute options the planner built: none for a strategy that needs
    /// none (`swap`, `tflms`), nor for `hybrid` when its plan of swaps alone
    /// is as fast as any plan can be (`plan/portfolio.rs`).
    pub recompute_options: usize,
    /// The host budget planned under (bytes; `u64::MAX`: none).
    pub host_budget: u64,
    /// The planned step's host memory over time.
    pub host_timeline: HostTimeline,
    /// The exact solver's figures, for its plans only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub optimal: Option<OptimalFigures>,
    /// Loop accumulators the plan keeps on the host (the loops' bodies copy
    /// each element out as it is pushed and back as it is popped): the plan
    /// was made with their memory stated so, and the rewrite writes the
    /// copies (`python/hybridplan/accumulators.py`). Absent when none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hosted_accumulators: Vec<HostedAccumulator>,
}

/// One loop accumulator kept on the host: output `output` of loop `node`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostedAccumulator {
    /// The forward loop's node name.
    pub node: String,
    /// Its output that is the accumulator (a `TensorList`).
    pub output: u32,
}

impl PlanReport {
    /// Reads a report's JSON (a plan made by this core, or saved from one).
    ///
    /// # Errors
    /// [`PlanError::PlanVersion`] for a report of another schema version (or
    /// none: plans saved before the schema was versioned),
    /// [`PlanError::InvalidArgument`] for text that is not a plan report.
    ///
    /// # Complexity
    /// O(text).
    pub fn from_json(text: &str) -> Result<PlanReport> {
        let hint =
            "pass a plan made by hybridplan.plan, saved with Plan.save or `hybridplan plan --json`";
        let value: serde_json::Value = serde_json::from_str(text).map_err(|e| {
            PlanError::InvalidArgument(format!("not a plan: not valid JSON ({e}); {hint}"))
        })?;
        let Some(fields) = value.as_object() else {
            return Err(PlanError::InvalidArgument(format!(
                "not a plan: it needs a JSON object at the top level; {hint}"
            )));
        };
        let found = fields.get("schema_version").map(|v| v.to_string());
        if found.as_deref() != Some(PLAN_SCHEMA_VERSION.to_string().as_str()) {
            return Err(PlanError::PlanVersion {
                found,
                expected: PLAN_SCHEMA_VERSION,
            });
        }
        serde_json::from_value(value).map_err(|e| {
            PlanError::InvalidArgument(format!(
                "not a complete hybridplan plan (missing or malformed: {e}); {hint}"
            ))
        })
    }

    /// The plan the decisions describe, checked against `g`.
    ///
    /// # Errors
    /// [`PlanError::InvalidArgument`] for a node or output `g` lacks.
    ///
    /// # Complexity
    /// O(plan size).
    pub(crate) fn plan(&self, g: &Graph) -> Result<Plan> {
        use crate::plan::{Recompute, Swap, SwapIn};
        let node = |v: u32| -> Result<u32> {
            match (v as usize) < g.num_nodes() {
                true => Ok(v),
                false => Err(PlanError::InvalidArgument(format!(
                    "the plan names node {v}, but the graph has {} nodes: was it made for another graph?",
                    g.num_nodes()
                ))),
            }
        };
        let mut swaps = Vec::with_capacity(self.swaps.len());
        for s in &self.swaps {
            let outs = g.outputs(node(s.node)?);
            let tensor = outs.start + s.output;
            if tensor >= outs.end {
                return Err(PlanError::InvalidArgument(format!(
                    "the plan swaps output {} of node {}, which has {} outputs: was it made for another graph?",
                    s.output,
                    s.node,
                    outs.len()
                )));
            }
            swaps.push(Swap {
                tensor,
                after: s.after,
                ins: s
                    .ins
                    .iter()
                    .map(|i| SwapIn {
                        trigger: i.trigger,
                        consumers: i.consumers.clone(),
                        clone_consumers: i.clone_consumers.clone(),
                        follows: i.follows,
                    })
                    .collect(),
                release: s.release.as_ref().map_or(NONE, |r| r.node),
                gate: s.gate.as_ref().map_or(NONE, |r| r.node),
            });
        }
        let recomputes = self
            .recomputes
            .iter()
            .map(|c| Recompute {
                nodes: c.nodes.clone(),
                trigger: c.trigger,
                consumers: c.consumers.clone(),
                clone_consumers: c.clone_consumers.clone(),
            })
            .collect();
        Ok(Plan { swaps, recomputes })
    }
}

fn node_ref(g: &Graph, v: u32) -> Option<NodeRef> {
    (v != NONE).then(|| NodeRef {
        node: v,
        name: String::from(&g.nodes[v as usize].name),
    })
}

/// A swap's reason: `"{bytes} bytes idle between reads; swapped out after
/// its producer, back in after '{trigger}'"`, built without the formatting
/// machinery (one per swap).
fn swap_reason(bytes: u64, trigger: &str) -> String {
    const MID: &str = " bytes idle between reads; swapped out after its producer, back in after '";
    let mut s = String::with_capacity(20 + MID.len() + trigger.len() + 1);
    crate::graph::push_decimal(&mut s, bytes);
    s.push_str(MID);
    s.push_str(trigger);
    s.push('\'');
    s
}

/// The swaps of `plan` with names for people.
pub(crate) fn swap_decisions(g: &Graph, plan: &Plan) -> Vec<SwapDecision> {
    plan.swaps
        .iter()
        .map(|s| {
            let t = &g.tensors[s.tensor as usize];
            SwapDecision {
                tensor: g.tensor_name(s.tensor),
                node: t.node,
                output: t.index,
                bytes: t.bytes,
                after: s.after,
                ins: s
                    .ins
                    .iter()
                    .map(|i| SwapInDecision {
                        trigger: i.trigger,
                        trigger_name: String::from(&g.nodes[i.trigger as usize].name),
                        consumers: i.consumers.clone(),
                        clone_consumers: i.clone_consumers.clone(),
                        follows: i.follows,
                    })
                    .collect(),
                release: node_ref(g, s.release),
                gate: node_ref(g, s.gate),
                reason: swap_reason(
                    t.bytes,
                    s.ins
                        .first()
                        .map(|i| g.nodes[i.trigger as usize].name.as_ref())
                        .unwrap_or(""),
                ),
            }
        })
        .collect()
}

/// The recomputes of `plan` with names for people, what the clones read
/// from outside and the reads of every cloned output (`times`: op seconds).
pub(crate) fn recompute_decisions(g: &Graph, plan: &Plan, times: &[f64]) -> Vec<RecomputeDecision> {
    plan.recomputes
        .iter()
        .map(|r| {
            let t: f64 = r.nodes.iter().map(|&v| times[v as usize]).sum();
            RecomputeDecision {
                nodes: r.nodes.clone(),
                names: r
                    .nodes
                    .iter()
                    .map(|&v| String::from(&g.nodes[v as usize].name))
                    .collect(),
                trigger: r.trigger,
                trigger_name: String::from(&g.nodes[r.trigger as usize].name),
                consumers: r.consumers.clone(),
                clone_consumers: r.clone_consumers.clone(),
                reason: format!(
                    "{} op(s) re-run in {:.3e} s instead of keeping their outputs",
                    r.nodes.len(),
                    t
                ),
                inputs: outside_inputs(g, &r.nodes),
                readers: r
                    .nodes
                    .iter()
                    .flat_map(|&v| {
                        g.outputs(v).map(move |t| ReadCount {
                            node: v,
                            output: t - g.out_off[v as usize],
                            reads: g.consumers(t).len() as u32,
                        })
                    })
                    .collect(),
            }
        })
        .collect()
}

/// The tensors `nodes` read from producers outside `nodes`, each once, in
/// first-read order. O(inputs of `nodes` * log).
fn outside_inputs(g: &Graph, nodes: &[u32]) -> Vec<TensorRef> {
    let inside: FxHashSet<u32> = nodes.iter().copied().collect();
    let mut seen = FxHashSet::default();
    let mut out = Vec::new();
    for &v in nodes {
        for &t in g.inputs(v) {
            let p = g.tensors[t as usize].node;
            if !inside.contains(&p) && seen.insert(t) {
                out.push(TensorRef {
                    node: p,
                    output: t - g.out_off[p as usize],
                });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::swap_reason;

    #[test]
    fn a_swaps_reason_reads_as_its_template() {
        for (bytes, trigger) in [
            (0, ""),
            (7, "a"),
            (1 << 40, "block/conv 1"),
            (u64::MAX, "ü'x"),
        ] {
            assert_eq!(
                swap_reason(bytes, trigger),
                format!(
                    "{bytes} bytes idle between reads; swapped out after its producer, back in after '{trigger}'"
                )
            );
        }
    }
}
