//! The planning problem as plain data, for exact solvers outside the core
//! (`hybridplan.optimal`), and the judgement of a plan written elsewhere.
//!
//! [`problem`] exports what a mixed-integer formulation over the fixed
//! schedule needs: the ops in schedule order with their times, every tensor
//! with its device bytes, owner, live interval and readers, the swap
//! candidates of the planners' rule ([`crate::plan::candidates`]), which ops
//! may be cloned, and the link figures the simulator uses. [`evaluate`]
//! simulates a plan in the ordinary plan format and returns the same
//! [`PlanReport`] a planned step gets, so an outside plan is judged exactly
//! as the built-in strategies are.
//!
//! # Complexity
//! [`problem`]: O(N + T + E log E) (the candidates' sort). [`evaluate`]: two
//! simulations, O(simulate).

use serde::{Deserialize, Serialize};

use crate::api::op_times;
use crate::device::DeviceModel;
use crate::error::{PlanError, Result};
use crate::graph::{Graph, NodeFlags, Phase, NONE};
use crate::plan::candidates::swap_candidates;
use crate::plan::Plan;
use crate::schema::{Figures, PlanReport, RecomputeDecision, SwapDecision, PLAN_SCHEMA_VERSION};
use crate::simulate::{Detail, SimResult, Simulator};
use crate::Analysis;

/// One op of the exported problem.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProblemNode {
    pub name: String,
    pub op: String,
    /// `forward`, `backward`, `update` or `other`.
    pub phase: String,
    /// Seconds (cost model or profile).
    pub time_s: f64,
    /// A forward op the planners may clone (not stateful, random, a
    /// variable read, control flow or a source).
    pub recomputable: bool,
    /// No inputs at all: TensorFlow runs it at the start of the step.
    pub source: bool,
    /// Data inputs (tensor ids, in slot order; repeats kept).
    pub inputs: Vec<u32>,
    /// Output tensor ids.
    pub outputs: Vec<u32>,
}

/// One tensor of the exported problem.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProblemTensor {
    pub node: u32,
    /// Bytes on the device timeline (0 for aliases and handles).
    pub bytes: u64,
    /// The tensor owning its buffer (itself unless an alias).
    pub owner: u32,
    /// Schedule position of the producer.
    pub produce: u32,
    /// Last schedule position that reads the buffer (aliases included).
    pub last_use: u32,
    /// Data consumers (node ids, sorted, repeats kept).
    pub consumers: Vec<u32>,
}

/// A buffer idle between reads (see [`crate::plan::candidates`]); only
/// candidates that are their own buffer's owner are exported.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProblemCandidate {
    pub tensor: u32,
    /// Last position reading the original (the producer's if none).
    pub last_early: u32,
    /// `(position, node)` of the late readers, ascending.
    pub late: Vec<(u32, u32)>,
}

/// The host link as the simulator models it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProblemLink {
    pub d2h_bytes_per_s: f64,
    pub h2d_bytes_per_s: f64,
    pub latency_s: f64,
    pub duplex_factor: f64,
}

/// The whole problem: a graph on its fixed schedule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Problem {
    pub persistent_bytes: u64,
    /// Peak of the step without a plan.
    pub peak_bytes: u64,
    /// Node id at each schedule position.
    pub order: Vec<u32>,
    pub nodes: Vec<ProblemNode>,
    pub tensors: Vec<ProblemTensor>,
    pub candidates: Vec<ProblemCandidate>,
    pub link: ProblemLink,
}

/// Exports the planning problem of an analysed graph.
///
/// `min_bytes` is the planners' threshold: smaller buffers are no candidates.
///
/// # Errors
/// [`PlanError::InvalidArgument`] for an invalid device or profile.
///
/// # Complexity
/// O(N + T + E log E).
pub fn problem(
    a: &Analysis,
    dev: &DeviceModel,
    min_bytes: u64,
    profile: &[(u32, f64)],
) -> Result<Problem> {
    dev.validate()?;
    let g = &a.graph;
    let (times, _) = op_times(g, dev, profile)?;
    let nodes = (0..g.num_nodes() as u32)
        .map(|v| node_of(g, v, times[v as usize]))
        .collect();
    let l = &a.liveness;
    let tensors = (0..g.num_tensors())
        .map(|t| ProblemTensor {
            node: g.tensors[t].node,
            bytes: g.tensors[t].bytes,
            owner: l.owner[t],
            produce: l.produce[t],
            last_use: l.last_use[l.owner[t] as usize],
            consumers: g.consumers(t as u32).to_vec(),
        })
        .collect();
    let candidates = swap_candidates(g, &a.schedule, l, 2, min_bytes)
        .into_iter()
        .filter(|c| c.tensor == c.owner)
        .map(|c| ProblemCandidate {
            tensor: c.tensor,
            last_early: c.last_early,
            late: c.late.to_vec(),
        })
        .collect();
    Ok(Problem {
        persistent_bytes: g.persistent_bytes,
        peak_bytes: l.peak_bytes,
        order: a.schedule.order.clone(),
        nodes,
        tensors,
        candidates,
        link: ProblemLink {
            d2h_bytes_per_s: dev.d2h_bandwidth,
            h2d_bytes_per_s: dev.h2d_bandwidth,
            latency_s: dev.link_latency_s,
            duplex_factor: dev.duplex_factor,
        },
    })
}

fn node_of(g: &Graph, v: u32, time_s: f64) -> ProblemNode {
    let n = &g.nodes[v as usize];
    let source = n.flags.has(NodeFlags::SOURCE);
    ProblemNode {
        name: String::from(&n.name),
        op: g.op_name(v).to_string(),
        phase: g.phase[v as usize].name().to_string(),
        time_s,
        recomputable: g.phase[v as usize] == Phase::Forward
            && !n.flags.has(NodeFlags::NO_RECOMPUTE)
            && !n.flags.has(NodeFlags::CALLS_FUNCTION)
            && !source,
        source,
        inputs: g.inputs(v).to_vec(),
        outputs: g.outputs(v).collect(),
    }
}

/// A plan judged by the simulator, with the report and both simulations.
pub struct Evaluated {
    pub report: PlanReport,
    pub original: SimResult,
    pub planned: SimResult,
}

/// Simulates `plan` (written by any planner) and reports it as a plan of
/// strategy `strategy` under `budget`. The report's peak may exceed the
/// budget: the caller decides what that means.
///
/// # Errors
/// [`PlanError::InvalidArgument`] for an invalid device, profile or plan
/// (see [`crate::simulate::Simulator::run`]).
///
/// # Complexity
/// Two simulations.
pub fn evaluate(
    a: &Analysis,
    dev: &DeviceModel,
    plan: &Plan,
    profile: &[(u32, f64)],
    budget: u64,
    strategy: &str,
) -> Result<Evaluated> {
    dev.validate()?;
    let g = &a.graph;
    let (times, unknown_ops) = op_times(g, dev, profile)?;
    let mut sim = Simulator::new(g, &a.schedule, &times, dev)?;
    let original = sim.run(&Plan::default(), Detail::FULL)?;
    let planned = sim.run(plan, Detail::FULL)?;
    let (swaps, recomputes) = decisions(g, plan, &times);
    let report = PlanReport {
        schema_version: PLAN_SCHEMA_VERSION,
        strategy_requested: strategy.into(),
        strategy: strategy.into(),
        device: dev.name.clone(),
        budget,
        persistent_bytes: g.persistent_bytes,
        num_nodes: g.num_nodes(),
        loss: (g.loss != NONE).then(|| g.tensor_name(g.loss)),
        workspace: None,
        original: Figures::of(g, &original, &Plan::default()),
        planned: Figures::of(g, &planned, plan),
        swaps,
        recomputes,
        unknown_ops,
        evaluations: 2,
        swap_options: 0,
        recompute_options: 0,
        host_budget: u64::MAX,
        host_timeline: crate::host::host_memory(g, plan, &planned).timeline.into(),
        optimal: None,
        hosted_accumulators: Vec::new(),
    };
    Ok(Evaluated {
        report,
        original,
        planned,
    })
}

/// Parses a plan from its JSON form (the serde form of [`Plan`]).
///
/// # Errors
/// [`PlanError::InvalidArgument`] naming what did not parse.
pub fn plan_from_json(text: &str) -> Result<Plan> {
    serde_json::from_str(text)
        .map_err(|e| PlanError::InvalidArgument(format!("the plan is not valid plan JSON: {e}")))
}

/// The decisions of a plan written outside the core, for people: the
/// planners' wording, with the reason saying who chose them.
fn decisions(g: &Graph, plan: &Plan, times: &[f64]) -> (Vec<SwapDecision>, Vec<RecomputeDecision>) {
    let mut sw = crate::schema::swap_decisions(g, plan);
    for d in &mut sw {
        d.reason = format!("{} bytes; chosen by the caller's plan", d.bytes);
    }
    let mut rc = crate::schema::recompute_decisions(g, plan, times);
    for d in &mut rc {
        d.reason = format!("{}; chosen by the caller's plan", d.reason);
    }
    (sw, rc)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::build::BuildOptions;
    use crate::device::preset;
    use crate::plan::{Swap, SwapIn};
    use crate::synth::{residual_graphdef, SynthSpec};

    fn analysis() -> Analysis {
        let spec = SynthSpec {
            blocks: 1,
            ..SynthSpec::default()
        };
        crate::analyze(&residual_graphdef(&spec), &BuildOptions::default()).unwrap()
    }

    #[test]
    fn problem_mirrors_the_analysis() {
        let a = analysis();
        let p = problem(&a, &preset("v100-nvlink2").unwrap(), 1 << 16, &[]).unwrap();
        assert_eq!(p.order, a.schedule.order);
        assert_eq!(p.peak_bytes, a.liveness.peak_bytes);
        assert!(!p.candidates.is_empty());
        for c in &p.candidates {
            let t = &p.tensors[c.tensor as usize];
            assert_eq!(t.owner, c.tensor);
            assert!(t.produce <= c.last_early && c.last_early < c.late[0].0);
            assert_eq!(c.late.last().unwrap().0, t.last_use);
        }
        let clonable = p.nodes.iter().filter(|n| n.recomputable).count();
        assert!(
            clonable > 0
                && p.nodes
                    .iter()
                    .all(|n| !n.recomputable || n.phase == "forward")
        );
    }

    #[test]
    fn evaluate_judges_a_plan_like_the_simulator() {
        let a = analysis();
        let dev = preset("v100-nvlink2").unwrap();
        let p = problem(&a, &dev, 1 << 16, &[]).unwrap();
        let c = &p.candidates[0];
        let consumers: Vec<u32> = c.late.iter().map(|&(_, n)| n).collect();
        let plan = Plan {
            swaps: vec![Swap {
                release: crate::graph::NONE,
                gate: crate::graph::NONE,
                tensor: c.tensor,
                after: p.tensors[c.tensor as usize].node,
                ins: vec![SwapIn {
                    trigger: p.order[c.late[0].0 as usize - 1],
                    consumers,
                    clone_consumers: vec![],
                    follows: false,
                }],
            }],
            recomputes: vec![],
        };
        let json = serde_json::to_string(&plan).unwrap();
        let e = evaluate(&a, &dev, &plan_from_json(&json).unwrap(), &[], 1, "x").unwrap();
        assert_eq!(e.report.planned.swaps, 1);
        assert_eq!(
            e.report.planned.bytes_d2h,
            p.tensors[c.tensor as usize].bytes
        );
        assert_eq!(e.report.original.peak_bytes, a.liveness.peak_bytes);
        assert!(plan_from_json("{\"swaps\": 3}").is_err());
    }
}
