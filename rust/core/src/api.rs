//! The whole planning pipeline in one call: decode, build, schedule,
//! liveness, cost, plan, simulate; and the report the Python side reads.
//!
//! # Complexity
//! The sum of the phases': O(bytes + E log E + N log N) plus the planner's
//! bounded rounds of simulation.

use rustc_hash::FxHashSet;
use serde::{Deserialize, Serialize};

use crate::build::BuildOptions;
use crate::device::DeviceModel;
use crate::error::{PlanError, Result};
use crate::graph::Graph;
use crate::plan::options::Ctx;
use crate::plan::planner::{PlanOptions, Planned, Planner, Verdict};
use crate::plan::Plan;
use crate::simulate::{simulate_in, simulate_summary_in, Layout, Scratch, SimOptions, SimResult};
use crate::Analysis;

/// Predicted figures of one step.
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
    pub swaps: usize,
    pub swap_ins: usize,
    pub clones: usize,
    /// Most swapped bytes held in host memory at once (`host.rs`).
    #[serde(default)]
    pub host_peak_bytes: u64,
    /// The pinned host memory that needs on a GPU (`host.rs`).
    #[serde(default)]
    pub pinned_bytes: u64,
}

impl Figures {
    pub(crate) fn of(g: &Graph, sim: &SimResult, plan: &Plan) -> Self {
        let host = crate::host::host_memory(g, plan, sim);
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

/// One swap, with names for people.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SwapDecision {
    pub tensor: String,
    pub node: u32,
    pub output: u32,
    pub bytes: u64,
    pub after: u32,
    /// (trigger node, trigger name, consumers, clone consumers) per swap-in.
    pub ins: Vec<(u32, String, Vec<u32>, Vec<u32>)>,
    /// The node that waits for the swap-out (see `plan/release.rs`), and its name.
    pub release: Option<(u32, String)>,
    /// The node that gets the control edge from the swap-out (the release
    /// node or a variable read feeding it), and its name.
    pub gate: Option<(u32, String)>,
    pub reason: String,
}

/// One recompute, with names for people.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecomputeDecision {
    pub nodes: Vec<u32>,
    pub names: Vec<String>,
    pub trigger: u32,
    pub trigger_name: String,
    pub consumers: Vec<u32>,
    pub clone_consumers: Vec<u32>,
    pub reason: String,
    /// Tensors the clones read from outside the recompute, `[producer node,
    /// output]`, each once, in the order the clones first read them (the
    /// rewrite gates them, so that it need not search the graph).
    #[serde(default)]
    pub inputs: Vec<[u32; 2]>,
    /// Every output of the cloned nodes with its data reads in the whole
    /// graph, `[node, output, reads]` (the rewrite keeps each tensor's
    /// readers from dropping below what Grappler's fusion rules look at).
    #[serde(default)]
    pub readers: Vec<[u32; 3]>,
}

/// What a plan request returns.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanReport {
    pub strategy_requested: String,
    pub strategy: String,
    pub device: String,
    pub budget: u64,
    pub persistent_bytes: u64,
    pub num_nodes: usize,
    pub loss: Option<String>,
    pub original: Figures,
    pub planned: Figures,
    pub swaps: Vec<SwapDecision>,
    pub recomputes: Vec<RecomputeDecision>,
    /// Op types the cost model knows only by bytes.
    pub unknown_ops: Vec<String>,
    pub evaluations: u32,
    pub swap_options: usize,
    pub recompute_options: usize,
    /// The host budget planned under (bytes; `u64::MAX`: none).
    #[serde(default = "no_host_budget")]
    pub host_budget: u64,
    /// The planned step's host memory over time (`host.rs`), `(s, bytes)`.
    #[serde(default)]
    pub host_timeline: Vec<(f64, u64)>,
}

fn no_host_budget() -> u64 {
    u64::MAX
}

/// The report and both simulations (for timelines and pictures).
pub struct Outcome {
    pub report: PlanReport,
    pub original: SimResult,
    pub planned: SimResult,
    pub plan: Plan,
}

/// Op times: the cost model's estimates, replaced by a measured profile
/// (`(node id, seconds)`) where one is given.
///
/// # Errors
/// [`PlanError::InvalidArgument`] for a profile entry naming no node or
/// with a time that is negative or not finite (see [`crate::cost::with_profile`]).
pub fn op_times(
    g: &Graph,
    dev: &DeviceModel,
    profile: &[(u32, f64)],
) -> Result<(Vec<f64>, Vec<String>)> {
    let costs = crate::cost::with_profile(&crate::cost::op_costs(g, dev), profile)?;
    Ok((costs.time_s, costs.unknown_ops))
}

/// Plans an analysed graph.
///
/// # Errors
/// [`PlanError::InvalidArgument`] for a bad budget or device,
/// [`PlanError::Budget`] when no plan fits.
pub fn plan_analysis(
    a: &Analysis,
    dev: &DeviceModel,
    opts: &PlanOptions,
    profile: &[(u32, f64)],
) -> Result<Outcome> {
    dev.validate()?;
    if opts.budget == 0 {
        return Err(PlanError::InvalidArgument(
            "the budget must be a positive number of bytes".into(),
        ));
    }
    check_supported(&a.graph)?;
    let (times, unknown_ops) = op_times(&a.graph, dev, profile)?;
    if !a.graph.phase.contains(&crate::graph::Phase::Backward)
        && a.liveness.peak_bytes > opts.budget
    {
        // Nothing to plan: say so rather than search for swaps that cannot exist.
        return Err(PlanError::NoBackward {
            peak: a.liveness.peak_bytes,
            budget: opts.budget,
        });
    }
    let ctx = Ctx::new(a, &times, dev);
    // One layout of the graph and one set of working arrays serve every
    // simulation below.
    let lay = Layout::new(&a.graph, &a.schedule, &times, dev)?;
    let scratch = std::cell::RefCell::new(Scratch::default());
    let full = |p: &Plan| {
        simulate_in(
            &lay,
            dev,
            p,
            &SimOptions::default(),
            &mut scratch.borrow_mut(),
        )
    };
    let original = full(&Plan::default())?;
    let judge = |p: &Plan| -> Result<Verdict> {
        if p.swaps.is_empty() && p.recomputes.is_empty() {
            // The planner judges the empty plan first: already simulated.
            return Ok(Verdict {
                peak_bytes: original.peak_bytes,
                step_time_s: original.step_time_s,
                host_peak_bytes: 0,
            });
        }
        let r = simulate_summary_in(&lay, dev, p, &mut scratch.borrow_mut())?;
        Ok(Verdict {
            peak_bytes: r.peak_bytes,
            step_time_s: r.step_time_s,
            host_peak_bytes: r.host_peak_bytes,
        })
    };
    let planner = Planner::new(&ctx, opts, &judge)?;
    let planned: Planned = planner.run()?;
    let mut plan = planned.plan;
    let chosen = full(&plan)?;
    let sim = if plan.swaps.is_empty() {
        chosen // no release nodes to set: the same plan
    } else {
        crate::plan::release::set_releases(&a.graph, &a.schedule, &mut plan, &chosen);
        full(&plan)?
    };
    if sim.peak_bytes > opts.budget {
        return Err(PlanError::Budget {
            budget: opts.budget,
            best_peak: sim.peak_bytes,
            strategy: planned.strategy,
            persistent_bytes: a.graph.persistent_bytes,
        });
    }
    let host = crate::host::host_memory(&a.graph, &plan, &sim);
    if host.peak_bytes > opts.host_budget {
        // The release nodes moved the copies: the host peak is judged again.
        return Err(PlanError::HostBudget {
            host_budget: opts.host_budget,
            best_host_peak: host.peak_bytes,
            budget: opts.budget,
        });
    }
    let (so, ro) = planner.num_options();
    let report = PlanReport {
        strategy_requested: opts.strategy.name().into(),
        strategy: planned.strategy.clone(),
        device: dev.name.clone(),
        budget: opts.budget,
        persistent_bytes: a.graph.persistent_bytes,
        num_nodes: a.graph.num_nodes(),
        loss: (a.graph.loss != crate::graph::NONE).then(|| a.graph.tensor_name(a.graph.loss)),
        original: Figures::of(&a.graph, &original, &Plan::default()),
        planned: Figures::of(&a.graph, &sim, &plan),
        swaps: swap_decisions(&a.graph, &plan),
        recomputes: recompute_decisions(&a.graph, &plan, &times),
        unknown_ops,
        evaluations: planned.evaluations,
        swap_options: so,
        recompute_options: ro,
        host_budget: opts.host_budget,
        host_timeline: host.timeline,
    };
    Ok(Outcome {
        report,
        original,
        planned: sim,
        plan,
    })
}

/// Control flow and function calls in the forward or backward pass hide
/// their bodies' memory from the planner: such a graph is refused, naming the
/// first such node, unless the op runs as one op of the schedule
/// ([`crate::opkind::runs_as_one_op`]) and its body's memory was stated
/// ([`crate::body`]). In the update phase or off the loss path they are
/// planned around (never cloned, their outputs treated as ordinary tensors).
///
/// # Errors
/// [`PlanError::Unsupported`].
pub fn check_supported(g: &Graph) -> Result<()> {
    use crate::graph::{NodeFlags, Phase};
    for (v, n) in g.nodes.iter().enumerate() {
        if n.flags.has(NodeFlags::CALLS_FUNCTION)
            && matches!(g.phase[v], Phase::Forward | Phase::Backward)
        {
            let op = g.op_name(v as u32);
            if n.flags.has(NodeFlags::BODY_KNOWN) && crate::opkind::runs_as_one_op(op) {
                continue;
            }
            let reason = if crate::opkind::is_function_call(op) {
                format!(
                    "a function call in the {} pass that was not inlined: its body's memory is not visible to the planner. Calls are inlined from the GraphDef's library except those marked _noinline, compiled by XLA (jit_compile=True), recursive, or whose function the library lacks (docs/control-flow.md); drop that mark, or export the graph with its library",
                    g.phase[v].name()
                )
            } else if crate::opkind::is_loop(op) {
                format!(
                    "a loop in the {} pass whose memory could not be stated: its trip count must be a constant (tf.while_loop: maximum_iterations=a constant; a Keras RNN layer: a static sequence length), its body in the GraphDef's library with every shape known and no call, loop or Case inside, and it must be planned through hybridplan (Python), which reads the body (docs/control-flow.md); else unroll it (a Keras RNN layer: unroll=True)",
                    g.phase[v].name()
                )
            } else if crate::opkind::runs_as_one_op(op) {
                format!(
                    "control flow in the {} pass whose body's memory was not stated: plan it through hybridplan (Python), which reads the body from the GraphDef's library; export the graph with its library (docs/control-flow.md)",
                    g.phase[v].name()
                )
            } else {
                format!(
                    "control flow in the {} pass: its body's memory is not visible to the planner (docs/control-flow.md); use Python control flow on static values, or unroll the loop",
                    g.phase[v].name()
                )
            };
            return Err(PlanError::Unsupported {
                node: n.name.to_string(),
                op: op.to_string(),
                reason,
            });
        }
    }
    Ok(())
}

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
                    .map(|i| {
                        let name = g.nodes[i.trigger as usize].name.to_string();
                        (i.trigger, name, i.consumers.clone(), i.clone_consumers.clone())
                    })
                    .collect(),
                release: (s.release != crate::graph::NONE)
                    .then(|| (s.release, g.nodes[s.release as usize].name.to_string())),
                gate: (s.gate != crate::graph::NONE)
                    .then(|| (s.gate, g.nodes[s.gate as usize].name.to_string())),
                reason: format!(
                    "{} bytes idle between reads; swapped out after its producer, back in after '{}'",
                    t.bytes,
                    s.ins.first().map(|i| g.nodes[i.trigger as usize].name.as_ref()).unwrap_or("")
                ),
            }
        })
        .collect()
}

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
                    .map(|&v| g.nodes[v as usize].name.to_string())
                    .collect(),
                trigger: r.trigger,
                trigger_name: g.nodes[r.trigger as usize].name.to_string(),
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
                        g.outputs(v).map(move |t| {
                            [v, t - g.out_off[v as usize], g.consumers(t).len() as u32]
                        })
                    })
                    .collect(),
            }
        })
        .collect()
}

/// The tensors `nodes` read from producers outside `nodes`: `[producer,
/// output]`, each once, in first-read order. O(inputs of `nodes` * log).
fn outside_inputs(g: &Graph, nodes: &[u32]) -> Vec<[u32; 2]> {
    let inside: FxHashSet<u32> = nodes.iter().copied().collect();
    let mut seen = FxHashSet::default();
    let mut out = Vec::new();
    for &v in nodes {
        for &t in g.inputs(v) {
            let p = g.tensors[t as usize].node;
            if !inside.contains(&p) && seen.insert(t) {
                out.push([p, t - g.out_off[p as usize]]);
            }
        }
    }
    out
}

/// Decodes, analyses and plans serialized `GraphDef` bytes.
///
/// # Errors
/// Any [`PlanError`] of the phases.
pub fn plan_bytes(
    bytes: &[u8],
    build: &BuildOptions,
    dev: &DeviceModel,
    opts: &PlanOptions,
    profile: &[(u32, f64)],
) -> Result<(Analysis, Outcome)> {
    let a = crate::analyze(bytes, build)?;
    let o = plan_analysis(&a, dev, opts, profile)?;
    Ok((a, o))
}
