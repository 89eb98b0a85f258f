//! The planner: the strategies' shared state and the dispatch to each.
//!
//! # The rule
//! [`Planner::new`] builds every option once (swaps from `candidates.rs`
//! and `options.rs`, recomputes from `recomputes.rs`); [`Planner::run`]
//! judges the empty plan (a graph that fits needs none), then runs the
//! configured [`Strategy`], each in its own file:
//! - `tflms` (`tflms_grid.rs`): TensorFlow Large Model Support's swapping
//!   (`tflms.rs`), with the given parameters or the best of a 12-point
//!   parameter grid judged by the simulator (graphs up to `grid_max_nodes`;
//!   TFLMS's defaults beyond).
//! - `swap` (`portfolio.rs`): the faster of the peak-driven greedy over
//!   swaps (`fit.rs` around `greedy.rs`) and `tflms`; when neither fits,
//!   the greedy over swaps the step waits for (`wait.rs`); with TFLMS
//!   parameters given, exactly TFLMS. The baseline every other strategy is
//!   compared with.
//! - `recompute` (`fit.rs`): recomputes of units only (`partition.rs`),
//!   same greedy.
//! - `chen` (`spans.rs`): Chen et al.'s sqrt(n) checkpointing over the
//!   forward pass's cuts (`cuts.rs`), budget-blind.
//! - `hybrid-paper` (`paper.rs`): the published heuristic, started from the
//!   TFLMS plan.
//! - `hybrid` (`portfolio.rs`): the fastest plan that fits among the
//!   greedy choosing between swap and recompute at every step, the same
//!   with rebuilt backward tensors (`rebuild.rs`), the recompute plan,
//!   Chen's and the "blocks" plans (`spans.rs`), and the published loop
//!   started from the `swap` and the TFLMS plans. So `hybrid` is never
//!   slower than any other strategy.
//!
//! When `swap` or `hybrid` finds nothing, the same strategy is run as if
//! asked for one byte, and the fastest plan it judged that fits is taken
//! (`replayed`): the smallest peak a strategy reports for one byte is then
//! a budget at which it finds a plan. Fastest, not least peak: `hybrid`'s
//! one-byte run judges every plan `swap`'s does, so `hybrid` stays no
//! slower than `swap` there too.
//!
//! # The model
//! Every strategy proposes whole plans; the judge (the simulator, given by
//! the caller) decides: a plan fits when its simulated device peak is
//! within `budget` and its host peak within `host_budget`. A plan judged
//! once is not simulated again.
//!
//! # Complexity
//! Option building O(T + E log E + N), plus O(C log C + C * d) for the
//! rebuilt backward tensors of `hybrid` (`rebuild.rs`, C candidates, d the
//! largest in-degree). Each strategy's cost is in its file's header; all
//! are bounded by `max_rounds`, `max_evals` and `grid_max_nodes`.

use std::str::FromStr;
use std::sync::Arc;

use super::candidates::{swap_candidates, SwapCandidate};
use super::cuts::{cut_segments, Cuts, Made};
use super::fit::Recs;
use super::greedy::{Chosen, Index};
use super::options::{swap_option, Ctx, RecomputeOpt, SwapOpt};
use super::queue::queue_by_need;
use super::recomputes::{rebuild_options, recompute_options};
use super::select::Selection;
use super::tflms::TflmsParams;
use super::{Plan, Recompute, Swap, SwapIn};
use crate::error::{PlanError, Result};
use crate::graph::NONE;
use crate::simulate::SimResult;

/// A planning strategy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strategy {
    /// TFLMS's swapping (tuned parameters, or the given ones).
    Tflms,
    Swap,
    Recompute,
    /// Chen et al.'s sqrt(n) checkpointing over the forward pass's cuts
    /// (`cuts.rs`): a reference point, budget-blind.
    Chen,
    HybridPaper,
    Hybrid,
}

impl Strategy {
    /// Every strategy, in the order the reports and benchmarks list them.
    pub const ALL: [Strategy; 6] = [
        Strategy::Tflms,
        Strategy::Swap,
        Strategy::Recompute,
        Strategy::Chen,
        Strategy::HybridPaper,
        Strategy::Hybrid,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Strategy::Tflms => "tflms",
            Strategy::Swap => "swap",
            Strategy::Recompute => "recompute",
            Strategy::Chen => "chen",
            Strategy::HybridPaper => "hybrid-paper",
            Strategy::Hybrid => "hybrid",
        }
    }

    /// The strategy's rule in one line (what `hybridplan.STRATEGIES` and
    /// the CLI show).
    pub fn rule(self) -> &'static str {
        match self {
            Strategy::Tflms => "TensorFlow Large Model Support's swapping (its parameters tuned with the simulator, or given)",
            Strategy::Swap => "the better of TFLMS and hybridplan's own swap planner",
            Strategy::Recompute => "recomputation only",
            Strategy::Chen => "Chen et al.'s sqrt(n) checkpointing over the forward pass's cut points, a budget-blind reference",
            Strategy::HybridPaper => "the published hybrid of swapping and recomputation, from the TFLMS plan",
            Strategy::Hybrid => "the fastest plan that fits",
        }
    }

    /// Does the strategy swap, so that TFLMS parameters set its swap plan?
    pub fn swaps(self) -> bool {
        matches!(
            self,
            Strategy::Tflms | Strategy::Swap | Strategy::HybridPaper | Strategy::Hybrid
        )
    }
}

impl FromStr for Strategy {
    type Err = PlanError;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "tflms" => Ok(Strategy::Tflms),
            "swap" => Ok(Strategy::Swap),
            "recompute" => Ok(Strategy::Recompute),
            "chen" => Ok(Strategy::Chen),
            "hybrid-paper" => Ok(Strategy::HybridPaper),
            "hybrid" => Ok(Strategy::Hybrid),
            _ => Err(PlanError::InvalidArgument(format!(
                "unknown strategy '{s}': use one of tflms, swap, recompute, chen, hybrid-paper, hybrid"
            ))),
        }
    }
}

/// Planner settings.
#[derive(Debug, Clone)]
pub struct PlanOptions {
    pub strategy: Strategy,
    /// Device memory budget in bytes (persistent bytes included).
    pub budget: u64,
    /// Buffers smaller than this are never swapped or freed.
    pub min_bytes: u64,
    /// Smallest gap (schedule positions) between reads worth a swap.
    pub min_gap: u32,
    /// Weight of link time in a hidden swap's cost.
    pub lambda: f64,
    /// Bound on greedy rounds of the budget loop.
    pub max_rounds: u32,
    /// Bound on extra simulations of the hybrid-paper loop (lowered on big
    /// graphs: about 4 * 10^6 simulated nodes in all).
    pub max_evals: u32,
    /// TFLMS parameters for `swap`: given, the plan is exactly TFLMS's;
    /// `None`, the swap plan is the better of the greedy and a small grid of
    /// TFLMS parameters, judged by the simulator.
    pub tflms: Option<TflmsParams>,
    /// Graphs with more nodes than this skip the TFLMS grid (each point is
    /// one simulation) and `hybrid`'s plan with rebuilt backward tensors
    /// (one more budget loop).
    pub grid_max_nodes: usize,
    /// Which ops the planners may touch (`select.rs`); empty: all.
    pub selection: Selection,
    /// Host memory budget in bytes for the swapped tensors (`host.rs`): a
    /// plan whose host peak exceeds it does not fit, like one over `budget`.
    pub host_budget: u64,
}

impl Default for PlanOptions {
    fn default() -> Self {
        PlanOptions {
            strategy: Strategy::Hybrid,
            budget: u64::MAX,
            min_bytes: 1 << 16,
            min_gap: 2,
            lambda: 0.1,
            max_rounds: 8,
            max_evals: 32,
            tflms: None,
            grid_max_nodes: 200_000,
            selection: Selection::default(),
            host_budget: u64::MAX,
        }
    }
}

/// A plan that fits, with its verdict.
#[derive(Debug, Clone)]
pub struct Planned {
    /// Shared with the planner's list of judged plans (and with the
    /// strategies that keep a result for later), not copied: a copy of a
    /// plan makes an allocation per swap-in (tens of thousands at 10^6
    /// nodes).
    pub plan: Arc<Plan>,
    /// The simulator's verdict on the plan, at [`Detail::Summary`](crate::simulate::Detail::Summary)
    /// (what the judge returned).
    pub verdict: SimResult,
    /// The strategy whose plan this is (for `hybrid`, the winner inside it).
    pub strategy: String,
    /// Simulations run.
    pub evaluations: u32,
    /// The stamp of the judge's whole answer on `plan` when the planner
    /// made this right after judging `plan` afresh
    /// ([`Planner::run_with_times`]).
    pub(crate) judged_as: Option<u64>,
}

/// Everything the strategies share: options built once, the judge.
pub struct Planner<'a> {
    pub(super) ctx: &'a Ctx<'a>,
    pub(super) opts: &'a PlanOptions,
    pub(super) judge: &'a dyn Fn(&Plan) -> Result<SimResult>,
    pub(super) cands: Vec<SwapCandidate>,
    pub(super) swaps: Vec<SwapOpt>,
    pub(super) swap_tensor: Vec<u32>,
    /// The recompute options ([`Planner::recs`], built on first use) and
    /// how many of them are of forward units.
    pub(super) recs_built: std::cell::OnceCell<(Vec<RecomputeOpt>, usize)>,
    pub(super) evals: std::cell::Cell<u32>,
    /// Every plan judged so far, with its verdict (`judge`).
    pub(super) judged: std::cell::RefCell<Vec<(Arc<Plan>, SimResult)>>,
    /// The judge's whole answer on the last plan of `judged`, with its
    /// stamp: with the per-op and per-copy times when it gave them
    /// ([`Planner::times_of`]).
    pub(super) last_answer: std::cell::RefCell<Option<(u64, SimResult)>>,
    /// Answers the judge gave: the stamp of the next is one more. Never
    /// wound back, so that no two answers share a stamp.
    pub(super) answers: std::cell::Cell<u64>,
    /// The stamp of the answer on the plan of the last `judge` call, when
    /// that call simulated it (`None`: it was judged before).
    pub(super) last_judge: std::cell::Cell<Option<u64>>,
    pub(super) tflms_memo: std::cell::OnceCell<Option<Planned>>,
    pub(super) best_fail: std::cell::Cell<(u64, &'static str)>,
    /// Smallest host peak of a plan within the device budget but over the
    /// host budget (`u64::MAX`: none).
    pub(super) best_host: std::cell::Cell<u64>,
    /// Per node: may it be touched (`None`: all may).
    pub(super) selected: Option<Vec<bool>>,
    /// The cut segments (`cuts.rs`), built on first use ([`Planner::cuts`]).
    pub(super) cuts: std::cell::OnceCell<Cuts>,
    /// Chen's cuts, where only activations cross (`cuts.rs`, built on
    /// first use).
    pub(super) chen_cuts: std::cell::OnceCell<Cuts>,
    /// The greedy's index of every option, for `hybrid` (built on first use).
    pub(super) shared_index: std::cell::Cell<Option<Index>>,
    /// Whether a greedy round of the current budget loop found a recompute
    /// option valid (`Chosen::recompute_seen`).
    pub(super) chose_recompute: std::cell::Cell<bool>,
    /// The budget loop on the swaps alone, known without running it: the
    /// loop on swaps and the forward units' recomputes never found a
    /// recompute valid (`fit`). `None`: not known.
    pub(super) swap_only: std::cell::Cell<Option<Option<Planned>>>,
    /// The smallest peak over the budget of the loop in `swap_only` when it
    /// ran ahead of its turn (`fit_swaps_first`) and has not been noted yet
    /// (`u64::MAX`: none).
    pub(super) swap_only_fail: std::cell::Cell<u64>,
}

impl<'a> Planner<'a> {
    /// Builds the swap options (only those the selection allows); the
    /// recompute options are built on first use ([`Planner::recs`]).
    /// `judge` simulates a plan; [`Detail::Summary`](crate::simulate::Detail::Summary)
    /// is all the planner reads (a richer answer is cut to it), and each
    /// result is kept (cloned) for the plans judged again. The whole answer
    /// on the last plan judged is kept too ([`Planner::times_of`]).
    ///
    /// # Errors
    /// [`PlanError::InvalidArgument`] for a bad selection (`select.rs`).
    pub fn new(
        ctx: &'a Ctx<'a>,
        opts: &'a PlanOptions,
        judge: &'a dyn Fn(&Plan) -> Result<SimResult>,
    ) -> Result<Self> {
        let selected = opts.selection.mask(ctx.g)?;
        let cands = swap_candidates(ctx.g, ctx.s, ctx.l, opts.min_gap, opts.min_bytes);
        let (swaps, swap_tensor) = swap_options(ctx, &cands, selected.as_deref(), swap_option);
        Ok(Planner {
            ctx,
            opts,
            judge,
            cands,
            swaps,
            swap_tensor,
            recs_built: std::cell::OnceCell::new(),
            evals: 0.into(),
            judged: Default::default(),
            last_answer: Default::default(),
            answers: 0.into(),
            last_judge: None.into(),
            tflms_memo: std::cell::OnceCell::new(),
            best_fail: (u64::MAX, "").into(),
            best_host: u64::MAX.into(),
            selected,
            cuts: std::cell::OnceCell::new(),
            chen_cuts: std::cell::OnceCell::new(),
            shared_index: std::cell::Cell::new(None),
            chose_recompute: false.into(),
            swap_only: std::cell::Cell::new(None),
            swap_only_fail: u64::MAX.into(),
        })
    }

    /// The simulator's verdict on `plan`; a plan judged before (the
    /// strategies of `hybrid` often reach the same one) is not simulated
    /// again. O(plans judged * plan size) to look it up (the plans judged
    /// are the evaluations, a few dozen), plus O(simulate) for a new one.
    /// The plan is kept, not copied: the one returned is shared with the
    /// list (the one judged before, when it was).
    pub(super) fn judge(&self, plan: Plan) -> Result<(Arc<Plan>, SimResult)> {
        self.last_judge.set(None);
        if let Some((p, v)) = self.judged.borrow().iter().find(|(p, _)| **p == plan) {
            return Ok((Arc::clone(p), v.clone()));
        }
        self.evals.set(self.evals.get() + 1);
        let answer = (self.judge)(&plan)?;
        let v = answer.to_summary();
        let plan = Arc::new(plan);
        self.judged
            .borrow_mut()
            .push((Arc::clone(&plan), v.clone()));
        let stamp = self.answers.get() + 1;
        self.answers.set(stamp);
        self.last_judge.set(Some(stamp));
        *self.last_answer.borrow_mut() = Some((stamp, answer));
        Ok((plan, v))
    }

    /// The per-op and per-copy times the judge gave for `plan`
    /// ([`Detail::Times`](crate::simulate::Detail::Times) or more), when
    /// `plan` is the last plan this planner judged: release placement reads
    /// them (`api.rs`) instead of simulating the chosen plan again. `None`
    /// otherwise (a plan judged earlier, a judge that gave a summary). Once
    /// only: the answer is handed over. O(plan size) to compare the plans;
    /// [`Planner::run_with_times`] hands the chosen plan's over without.
    pub fn times_of(&self, plan: &Plan) -> Option<SimResult> {
        let last = self.judged.borrow().last().map(|(p, _)| **p == *plan);
        if last != Some(true) {
            return None;
        }
        self.take_times()
    }

    /// [`Planner::run`], with [`Planner::times_of`] the returned plan. O(1)
    /// for that when the budget loop returned the plan right after judging
    /// it: the plan then carries the stamp of the last answer
    /// (`Planned::judged_as`) and nothing has changed it since (it has not
    /// left the planner; debug builds compare it in full); else O(plan size).
    ///
    /// # Errors
    /// As [`Planner::run`].
    pub fn run_with_times(&self) -> Result<(Planned, Option<SimResult>)> {
        let planned = self.run()?;
        let stamp = self.last_answer.borrow().as_ref().map(|(stamp, _)| *stamp);
        let times = if stamp.is_some() && planned.judged_as == stamp {
            debug_assert!(
                self.judged.borrow().last().map(|(p, _)| p) == Some(&planned.plan),
                "the chosen plan is not the last one judged"
            );
            self.take_times()
        } else {
            self.times_of(&planned.plan)
        };
        Ok((planned, times))
    }

    /// The last answer, handed over, when it has per-op times.
    fn take_times(&self) -> Option<SimResult> {
        let (_, answer) = self.last_answer.borrow_mut().take()?;
        (!answer.op_start.is_empty()).then_some(answer)
    }

    /// Runs the configured strategy.
    ///
    /// # Errors
    /// [`PlanError::Budget`] with the smallest peak reached when nothing fits.
    pub fn run(&self) -> Result<Planned> {
        let (empty, original) = self.judge(Plan::default())?;
        if self.fits(&original) {
            return Ok(self.planned(empty, original, "none"));
        }
        let result = match self.opts.strategy {
            Strategy::Swap => self.swap(),
            Strategy::Recompute => self.fit(false, Recs::Base, "recompute"),
            Strategy::Chen => self.chen(),
            Strategy::HybridPaper => self.tflms_tuned().and_then(|p| self.paper(p)),
            Strategy::Tflms => self.tflms_tuned(),
            Strategy::Hybrid => self.hybrid(),
        };
        result
            .or_else(|| self.replayed())
            .ok_or_else(|| self.budget_error())
    }

    /// When `swap` or `hybrid` finds nothing: the strategy run again as if
    /// asked for one byte (a planner of its own on the same judge), and the
    /// fastest plan it judged that fits (ties: the smaller peak, then the
    /// one judged first). A strategy's rounds depend on the budget; the
    /// one-byte run's are those that gave the smallest peak it reports, so
    /// that peak is a budget at which a plan is found. When its least peak
    /// (within the host budget) is over the budget, that peak counts as a
    /// failure here too. O(the one-byte run).
    fn replayed(&self) -> Option<Planned> {
        let who = self.opts.strategy.name();
        if !matches!(self.opts.strategy, Strategy::Swap | Strategy::Hybrid) || self.opts.budget <= 1
        {
            return None;
        }
        let opts = PlanOptions {
            budget: 1,
            ..self.opts.clone()
        };
        let one = Planner::new(self.ctx, &opts, self.judge).ok()?;
        let _ = one.run();
        self.evals.set(self.evals.get() + one.evals.get());
        let judged = one.judged.into_inner();
        let host_ok = |(p, v): &(Arc<Plan>, SimResult)| {
            !p.is_empty() && v.host_peak_bytes <= self.opts.host_budget
        };
        let least = (judged.iter().filter(|e| host_ok(e)))
            .map(|(_, v)| v.peak_bytes)
            .min()?;
        if least > self.opts.budget {
            self.note_fail(least, who);
            return None;
        }
        let (plan, v) = (judged.into_iter())
            .filter(|e| host_ok(e) && e.1.peak_bytes <= self.opts.budget)
            .min_by(|(_, a), (_, b)| {
                (a.step_time_s.total_cmp(&b.step_time_s)).then(a.peak_bytes.cmp(&b.peak_bytes))
            })?;
        Some(self.planned(plan, v, who))
    }

    pub(super) fn planned(&self, plan: Arc<Plan>, verdict: SimResult, strategy: &str) -> Planned {
        Planned {
            plan,
            verdict,
            strategy: strategy.into(),
            evaluations: self.evals.get(),
            judged_as: None,
        }
    }

    /// [`Planner::planned`] for `plan` the plan of the last `judge` call:
    /// stamped with the answer on it when that call simulated it
    /// ([`Planner::times_of`]).
    pub(super) fn planned_last(
        &self,
        plan: Arc<Plan>,
        verdict: SimResult,
        strategy: &str,
    ) -> Planned {
        Planned {
            judged_as: self.last_judge.get(),
            ..self.planned(plan, verdict, strategy)
        }
    }

    pub(super) fn renamed(&self, mut p: Planned, who: &str) -> Planned {
        p.strategy = who.into();
        p.evaluations = self.evals.get();
        p
    }

    pub(super) fn budget_error(&self) -> PlanError {
        if self.best_host.get() != u64::MAX {
            return PlanError::HostBudget {
                host_budget: self.opts.host_budget,
                best_host_peak: self.best_host.get(),
                budget: self.opts.budget,
            };
        }
        let (mut best, mut who) = self.best_fail.get();
        if best == u64::MAX {
            best = self.ctx.l.peak_bytes;
            who = "none";
        }
        PlanError::Budget {
            budget: self.opts.budget,
            best_peak: best,
            strategy: who.into(),
            persistent_bytes: self.ctx.g.persistent_bytes,
        }
    }

    /// Does a plan with verdict `v` fit both budgets? A plan within the
    /// device budget but over the host budget is remembered for the error
    /// (`HostBudget`: the smallest host peak among such plans).
    pub(super) fn fits(&self, v: &SimResult) -> bool {
        if v.peak_bytes > self.opts.budget {
            return false;
        }
        if v.host_peak_bytes > self.opts.host_budget {
            if v.host_peak_bytes < self.best_host.get() {
                self.best_host.set(v.host_peak_bytes);
            }
            return false;
        }
        true
    }

    /// Remembers the smallest device peak over the budget (a plan within it
    /// that failed failed on the host budget: see `fits`).
    pub(super) fn note_fail(&self, peak: u64, who: &'static str) {
        if peak <= self.opts.budget {
            return;
        }
        if peak < self.best_fail.get().0 {
            self.best_fail.set((peak, who));
        }
    }

    pub(super) fn recompute_of(&self, r: &RecomputeOpt) -> Recompute {
        Recompute {
            nodes: r.clones().to_vec(),
            trigger: self.ctx.s.order[r.trigger as usize],
            consumers: r.consumers().to_vec(),
            clone_consumers: vec![],
        }
    }

    /// Turns choices into the plan format, sorted for determinism; the
    /// swaps listed by need, with the copies one op releases queued
    /// (`queue.rs`).
    pub fn to_plan(&self, c: &Chosen) -> Plan {
        let order = &self.ctx.s.order;
        let swaps: Vec<Swap> = c
            .swaps
            .iter()
            .map(|o| {
                let cand = &self.cands[o.cand];
                let ins = o
                    .ins
                    .iter()
                    .enumerate()
                    .map(|(k, p)| {
                        let mut consumers: Vec<u32> =
                            cand.late[p.lo..p.hi].iter().map(|&(_, n)| n).collect();
                        consumers.sort_unstable();
                        consumers.dedup();
                        let mut clone_consumers: Vec<u32> = (o.feeds.iter())
                            .filter(|f| f.k == k)
                            .flat_map(|f| f.clones.iter().copied())
                            .collect();
                        clone_consumers.sort_unstable();
                        clone_consumers.dedup();
                        SwapIn {
                            trigger: order[p.trigger as usize],
                            consumers,
                            clone_consumers,
                            follows: false,
                        }
                    })
                    .collect();
                let (release, gate) = o
                    .wait
                    .map_or((NONE, NONE), |(at, gate)| (order[at as usize], gate));
                Swap {
                    release,
                    gate,
                    tensor: cand.tensor,
                    after: self.ctx.g.tensors[cand.tensor as usize].node,
                    ins,
                }
            })
            .collect();
        let mut recomputes: Vec<Recompute> =
            c.recomputes.iter().map(|r| self.recompute_of(r)).collect();
        recomputes.sort_by_key(|r| (r.trigger, r.nodes.first().copied().unwrap_or(NONE)));
        let mut plan = Plan { swaps, recomputes };
        queue_by_need(self.ctx.g, self.ctx.s, &mut plan);
        plan
    }

    /// The swap options and their buffers (for tools and tests).
    pub fn swap_options_for_debug(&self) -> (Vec<SwapOpt>, Vec<u32>) {
        (self.swaps.clone(), self.swap_tensor.clone())
    }

    /// The recompute options (for tools and tests).
    pub fn recompute_options_for_debug(&self) -> Vec<RecomputeOpt> {
        self.recs().to_vec()
    }

    /// The swap and recompute options built (the recompute options are
    /// built only when a strategy needs them: none when `hybrid`'s plan of
    /// swaps alone is as fast as any plan can be).
    pub fn num_options(&self) -> (usize, usize) {
        let recs = self.recs_built.get().map_or(0, |(r, _)| r.len());
        (self.swaps.len(), recs)
    }

    /// The recompute options, built on first use: those of forward units
    /// first ([`Planner::base_recs`] of them), then, for `hybrid`, those
    /// rebuilding backward tensors from small inputs (`rebuild.rs`); only
    /// those the selection allows.
    pub(super) fn recs(&self) -> &[RecomputeOpt] {
        &self.built_recs().0
    }

    /// How many of [`Planner::recs`] are of forward units.
    pub(super) fn base_recs(&self) -> usize {
        self.built_recs().1
    }

    /// The cut segments where only plumbing crosses (`cuts.rs`), built on
    /// first use: the spans' recompute options and plans need them.
    pub(super) fn cuts(&self) -> &Cuts {
        let (ctx, opts) = (self.ctx, self.opts);
        self.cuts
            .get_or_init(|| cut_segments(ctx.g, ctx.s, ctx.l, opts.min_bytes, Made::Plumbing))
    }

    fn built_recs(&self) -> &(Vec<RecomputeOpt>, usize) {
        self.recs_built.get_or_init(|| {
            let (ctx, opts) = (self.ctx, self.opts);
            let mut recs = recompute_options(ctx, &self.cands, self.cuts());
            let mut base_recs = recs.len();
            // Only `hybrid` plans with the rebuilt tensors, and only on graphs
            // small enough for its extra candidate plan (`hybrid`).
            if opts.strategy == Strategy::Hybrid && ctx.g.num_nodes() <= opts.grid_max_nodes {
                let first = recs.iter().map(|r| r.unit + 1).max().unwrap_or(0);
                recs.extend(rebuild_options(ctx, &self.cands, opts.min_bytes, first));
            }
            if let Some(m) = &self.selected {
                let keep = |r: &RecomputeOpt| r.clones().iter().all(|&v| m[v as usize]);
                base_recs = recs[..base_recs].iter().filter(|r| keep(r)).count();
                recs.retain(keep);
            }
            (recs, base_recs)
        })
    }
}

/// The swap options `place` makes of the candidates whose producer is
/// selected (`None`: all are), grouped and, for a candidate read late more
/// than once, split at every gap too when that differs; with each option's
/// buffer. O(C) calls of `place`.
pub(super) fn swap_options(
    ctx: &Ctx<'_>,
    cands: &[SwapCandidate],
    selected: Option<&[bool]>,
    place: fn(&Ctx<'_>, usize, &SwapCandidate, bool) -> Option<SwapOpt>,
) -> (Vec<SwapOpt>, Vec<u32>) {
    let mut swaps = Vec::new();
    let mut swap_tensor = Vec::new();
    for (i, c) in cands.iter().enumerate() {
        let producer = ctx.g.tensors[c.owner as usize].node as usize;
        if selected.is_some_and(|m| !m[producer]) {
            continue;
        }
        let grouped = place(ctx, i, c, false);
        let split = (c.late.len() > 1)
            .then(|| place(ctx, i, c, true))
            .flatten()
            .filter(|s| Some(s) != grouped.as_ref());
        for o in grouped.into_iter().chain(split) {
            swap_tensor.push(c.owner);
            swaps.push(o);
        }
    }
    (swaps, swap_tensor)
}

/// Keeps the faster of `best` and `p` (ties: `best`).
pub(super) fn keep_faster(best: &mut Option<Planned>, p: Option<Planned>) {
    if let Some(p) = p {
        if best
            .as_ref()
            .is_none_or(|b| p.verdict.step_time_s < b.verdict.step_time_s)
        {
            *best = Some(p);
        }
    }
}
