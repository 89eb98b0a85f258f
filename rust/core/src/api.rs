//! The whole planning pipeline in one call, as named phases (one function
//! each, in this order in [`plan_analysis`]): validate the request, op
//! times, check there is something to plan, the judge (one simulation
//! layout), the planner's search, release placement and the re-simulation,
//! the final budget checks, the report (the plan schema, `schema.rs`).
//! [`plan_bytes`] decodes and analyses first.
//!
//! # Complexity
//! The sum of the phases': O(bytes + E log E + N log N) plus the planner's
//! bounded rounds of simulation.

use std::cell::RefCell;

use crate::build::BuildOptions;
use crate::device::DeviceModel;
use crate::error::{PlanError, Result};
use crate::graph::{Graph, NONE};
use crate::plan::options::Ctx;
use crate::plan::planner::{PlanOptions, Planned, Planner};
use crate::plan::Plan;
use crate::schema::{recompute_decisions, swap_decisions, PLAN_SCHEMA_VERSION};
use crate::schema::{Figures, PlanReport};
use crate::simulate::{Detail, SimResult, Simulator};
use crate::Analysis;

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

/// Plans an analysed graph: the phases below, in order, with every loop
/// accumulator on the device; when that does not fit and the device model
/// may host them, with as few of the largest hosted as fit
/// ([`crate::hosting`]).
///
/// # Errors
/// [`PlanError::InvalidArgument`] for a bad budget or device,
/// [`PlanError::Budget`] when no plan fits, [`PlanError::HostBudget`] when
/// plans fit the device but not the host budget.
pub fn plan_analysis(
    a: &Analysis,
    dev: &DeviceModel,
    opts: &PlanOptions,
    profile: &[(u32, f64)],
) -> Result<Outcome> {
    let first = plan_with(a, dev, opts, profile, &[]);
    let lists = &a.graph.hostable;
    if lists.is_empty() || !crate::hosting::may_host(dev) {
        return first;
    }
    let hosted = |n: usize| plan_hosted(a, dev, opts, profile, &lists[..n]);
    crate::hosting::fewest(lists.len(), first, hosted).map(|(_, o)| o)
}

/// Plans `a` with `lists` hosted: the phases on the hosted graph
/// ([`crate::hosting::hosted_analysis`]), the original figures of `a`.
fn plan_hosted(
    a: &Analysis,
    dev: &DeviceModel,
    opts: &PlanOptions,
    profile: &[(u32, f64)],
    lists: &[crate::hosting::Hostable],
) -> Result<Outcome> {
    let h = crate::hosting::hosted_analysis(a, lists)?;
    let mut o = plan_with(&h, dev, opts, profile, lists)?;
    let costs = costs(a, dev, profile, &[])?;
    let original = Simulator::new(&a.graph, &a.schedule, &costs.times, dev)?
        .run(&Plan::default(), Detail::FULL)?;
    o.report.original = Figures::of(&a.graph, &original, &Plan::default());
    o.original = original;
    Ok(o)
}

/// The phases, in order, on `a` with `hosted` lists kept on the host (their
/// bytes already off `a`'s device memory).
fn plan_with(
    a: &Analysis,
    dev: &DeviceModel,
    opts: &PlanOptions,
    profile: &[(u32, f64)],
    hosted: &[crate::hosting::Hostable],
) -> Result<Outcome> {
    validate(a, dev, opts)?;
    let costs = costs(a, dev, profile, hosted)?;
    check_reducible(a, opts)?;
    let sims = Sims::new(a, &costs.times, dev)?;
    let mut searched = search(a, dev, &search_options(opts, hosted), &costs.times, &sims)
        .map_err(|e| with_hosted_bytes(e, opts, hosted))?;
    let sim = place_releases(a, &sims, &mut searched)?;
    let judged = check_fits(a, opts, &searched, sim, &costs.times, hosted)?;
    let report = report(a, dev, opts, &costs, &sims, &searched, &judged, hosted);
    Ok(Outcome {
        report,
        original: sims.original,
        planned: judged.sim,
        plan: searched.plan,
    })
}

/// The planner's options with `hosted` lists: their bytes off the host
/// budget its swaps may take.
fn search_options(opts: &PlanOptions, hosted: &[crate::hosting::Hostable]) -> PlanOptions {
    let mut o = opts.clone();
    o.host_budget = o
        .host_budget
        .saturating_sub(crate::hosting::total_bytes(hosted));
    o
}

/// A host-budget error of the planner's search, whose host budget was
/// lowered by the `hosted` lists' bytes: in the caller's terms.
fn with_hosted_bytes(
    e: PlanError,
    opts: &PlanOptions,
    hosted: &[crate::hosting::Hostable],
) -> PlanError {
    match e {
        PlanError::HostBudget {
            best_host_peak,
            budget,
            ..
        } => PlanError::HostBudget {
            host_budget: opts.host_budget,
            best_host_peak: best_host_peak.saturating_add(crate::hosting::total_bytes(hosted)),
            budget,
        },
        e => e,
    }
}

/// Op times and the op types the cost model knows only by bytes.
struct Costs {
    times: Vec<f64>,
    unknown_ops: Vec<String>,
}

/// The planner's answer.
struct Searched {
    plan: Plan,
    strategy: String,
    evaluations: u32,
    /// Swap and recompute options built (`Planner::num_options`).
    options: (usize, usize),
    /// The plan's simulation from its verdict (in full or at
    /// [`Detail::Times`]), when the planner kept it
    /// ([`Planner::run_with_times`]).
    times: Option<SimResult>,
}

/// The final plan's simulation and host memory.
struct Judged {
    sim: SimResult,
    host: crate::host::HostMemory,
}

/// Phase 1, the request: a valid device, a positive budget, a graph the
/// planner can plan ([`check_supported`]).
fn validate(a: &Analysis, dev: &DeviceModel, opts: &PlanOptions) -> Result<()> {
    dev.validate()?;
    if opts.budget == 0 {
        return Err(PlanError::InvalidArgument(
            "the budget must be a positive number of bytes".into(),
        ));
    }
    check_supported(&a.graph)
}

/// Phase 2, op times: the cost model's, or the measured profile's, with
/// the copies of the `hosted` lists in their loops' times.
fn costs(
    a: &Analysis,
    dev: &DeviceModel,
    profile: &[(u32, f64)],
    hosted: &[crate::hosting::Hostable],
) -> Result<Costs> {
    let (mut times, unknown_ops) = op_times(&a.graph, dev, profile)?;
    crate::hosting::add_copy_times(&mut times, hosted, dev);
    Ok(Costs { times, unknown_ops })
}

/// Phase 3: a graph without a backward pass that does
/// not fit has nothing to plan; say so rather than search for swaps that
/// cannot exist.
fn check_reducible(a: &Analysis, opts: &PlanOptions) -> Result<()> {
    if !a.graph.phase.contains(&crate::graph::Phase::Backward)
        && a.liveness.peak_bytes > opts.budget
    {
        return Err(PlanError::NoBackward {
            peak: a.liveness.peak_bytes,
            budget: opts.budget,
        });
    }
    Ok(())
}

/// Phase 4, the judge: one layout of the graph and one set of working
/// arrays serve every simulation of the request; the empty plan's full
/// simulation is made once and answers the planner's first question.
struct Sims<'a> {
    sim: RefCell<Simulator<'a>>,
    original: SimResult,
    /// No plan with swaps judged yet ([`Sims::verdict`]).
    first_swaps: std::cell::Cell<bool>,
}

impl<'a> Sims<'a> {
    fn new(a: &'a Analysis, times: &'a [f64], dev: &'a DeviceModel) -> Result<Self> {
        let mut sim = Simulator::new(&a.graph, &a.schedule, times, dev)?;
        let original = sim.run(&Plan::default(), Detail::FULL)?;
        Ok(Sims {
            sim: RefCell::new(sim),
            original,
            first_swaps: std::cell::Cell::new(true),
        })
    }

    /// The full simulation of `p` (events and timeline).
    fn full(&self, p: &Plan) -> Result<SimResult> {
        self.sim.borrow_mut().run(p, Detail::FULL)
    }

    /// What the planner asks of a plan: its peak, step time and host peak
    /// (the same figures, bit for bit, at every detail). The first plan
    /// with swaps is simulated in full: every strategy's budget loop judges
    /// its plan at the smallest step-time bound first, and that plan is the
    /// answer when it fits (`hybrid` on swaps alone, `swap`). Later plans
    /// are simulated at [`Detail::Times`] (the timeline and events of each
    /// cost 10% more over the 212 plans `hybrid` judges at 0.25 x peak on
    /// `mixed:1e5`). The planner keeps the answer on the last plan it
    /// judged ([`Planner::run_with_times`]), which release placement reads when
    /// that plan is chosen.
    fn verdict(&self, p: &Plan) -> Result<SimResult> {
        if p.swaps.is_empty() && p.recomputes.is_empty() {
            // The planner judges the empty plan first: already simulated.
            return Ok(self.original.to_summary());
        }
        let detail = if p.swaps.is_empty() {
            Detail::Summary
        } else if self.first_swaps.replace(false) {
            Detail::FULL
        } else {
            Detail::Times
        };
        self.sim.borrow_mut().run(p, detail)
    }
}

/// Phase 5, the search: the strategy's planner (`plan/planner.rs`), every
/// candidate plan judged by [`Sims::verdict`].
fn search(
    a: &Analysis,
    dev: &DeviceModel,
    opts: &PlanOptions,
    times: &[f64],
    sims: &Sims<'_>,
) -> Result<Searched> {
    let ctx = Ctx::new(a, times, dev);
    let judge = |p: &Plan| sims.verdict(p);
    let planner = Planner::new(&ctx, opts, &judge)?;
    let (planned, times): (Planned, _) = planner.run_with_times()?;
    let options = planner.num_options();
    // The planner's list of judged plans shares the plan: once it is gone,
    // the plan is taken as it is (copied only if something still held it).
    drop(planner);
    Ok(Searched {
        times,
        plan: std::sync::Arc::unwrap_or_clone(planned.plan),
        strategy: planned.strategy,
        evaluations: planned.evaluations,
        options,
    })
}

/// Phase 6, release placement: each swap gets the node that waits for its
/// copy (`plan/release.rs`), placed on the chosen plan's simulated times
/// (its verdict when the planner kept it, else simulated in full here).
///
/// When the plan came without release nodes (the planner sets none) and
/// no release node placed starts before its copy's end in that simulation
/// (`set_releases` picks none such), the simulation with them is the one
/// without, bit for bit: by induction over the stream, each item starts
/// when it did (a release node's wait ends by then), and the copy engines
/// serve the same copies in the same order however early the waits step
/// them (`simulate/link.rs`). That simulation is then the answer when it
/// is a full one (its events list every copy; a verdict at
/// [`Detail::Times`] has none); otherwise the plan is simulated again.
/// The debug build checks the first case against a simulation.
fn place_releases(a: &Analysis, sims: &Sims<'_>, searched: &mut Searched) -> Result<SimResult> {
    let plan = &mut searched.plan;
    if plan.swaps.is_empty() {
        return sims.full(plan); // no release nodes to set: the same plan
    }
    let chosen = match searched.times.take() {
        Some(t) => t,
        None => sims.full(plan)?,
    };
    let bare = plan.swaps.iter().all(|sw| sw.release == NONE);
    crate::plan::release::set_releases(&a.graph, &a.schedule, plan, &chosen);
    let full = !chosen.events.is_empty();
    if full && bare && !crate::plan::release::waits(plan, &chosen) {
        debug_assert_eq!(
            sims.full(plan).ok().as_ref(),
            Some(&chosen),
            "release nodes that wait for nothing changed the simulation"
        );
        return Ok(chosen);
    }
    sims.full(plan)
}

/// Phase 7, the final judgement: the re-simulated plan within the device
/// budget and, since the release nodes moved the copies, the host budget,
/// which the `hosted` lists' bytes count against too.
fn check_fits(
    a: &Analysis,
    opts: &PlanOptions,
    searched: &Searched,
    sim: SimResult,
    times: &[f64],
    hosted: &[crate::hosting::Hostable],
) -> Result<Judged> {
    if sim.peak_bytes > opts.budget {
        return Err(PlanError::Budget {
            budget: opts.budget,
            best_peak: sim.peak_bytes,
            strategy: searched.strategy.clone(),
            persistent_bytes: a.graph.persistent_bytes,
        });
    }
    let mut bufs = crate::host::host_buffers(&a.graph, &searched.plan, &sim);
    bufs.extend(crate::hosting::buffers(hosted, &sim, times));
    let host = crate::host::host_timeline(&bufs);
    if host.peak_bytes > opts.host_budget {
        return Err(PlanError::HostBudget {
            host_budget: opts.host_budget,
            best_host_peak: host.peak_bytes,
            budget: opts.budget,
        });
    }
    Ok(Judged { sim, host })
}

/// Phase 8, the report: the plan schema (`schema.rs`), names for people;
/// the `hosted` lists' copies in the planned figures.
#[allow(clippy::too_many_arguments)]
fn report(
    a: &Analysis,
    dev: &DeviceModel,
    opts: &PlanOptions,
    costs: &Costs,
    sims: &Sims<'_>,
    searched: &Searched,
    judged: &Judged,
    hosted: &[crate::hosting::Hostable],
) -> PlanReport {
    let g = &a.graph;
    let plan = &searched.plan;
    // The host memory of the swaps and the hosted lists' copies together
    // (`check_fits`).
    let mut planned = Figures::with_host(&judged.sim, plan, &judged.host);
    let copied = crate::hosting::total_bytes(hosted);
    planned.bytes_d2h = planned.bytes_d2h.saturating_add(copied);
    planned.bytes_h2d = planned.bytes_h2d.saturating_add(copied);
    PlanReport {
        schema_version: PLAN_SCHEMA_VERSION,
        strategy_requested: opts.strategy.name().into(),
        strategy: searched.strategy.clone(),
        device: dev.name.clone(),
        budget: opts.budget,
        persistent_bytes: g.persistent_bytes,
        num_nodes: g.num_nodes(),
        loss: (g.loss != crate::graph::NONE).then(|| g.tensor_name(g.loss)),
        workspace: None,
        original: Figures::of(g, &sims.original, &Plan::default()),
        planned,
        swaps: swap_decisions(g, plan),
        recomputes: recompute_decisions(g, plan, &costs.times),
        unknown_ops: costs.unknown_ops.clone(),
        evaluations: searched.evaluations,
        swap_options: searched.options.0,
        recompute_options: searched.options.1,
        host_budget: opts.host_budget,
        host_timeline: judged.host.timeline.clone().into(),
        optimal: None,
        hosted_accumulators: crate::hosting::records(g, hosted),
    }
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
pub(crate) fn check_supported(g: &Graph) -> Result<()> {
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
                    "a loop in the {} pass whose memory could not be stated: its trip count must be a constant (tf.while_loop: maximum_iterations=a constant; a Keras RNN layer: a static sequence length), its body in the GraphDef's library with every shape known, no call, loop or Case inside and its lists filled by the list ops docs/control-flow.md names, and it must be planned through hybridplan (Python), which reads the body (docs/control-flow.md); else unroll it (a Keras RNN layer: unroll=True)",
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
                node: String::from(&n.name),
                op: op.to_string(),
                reason,
            });
        }
    }
    Ok(())
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
