//! The strategies and the budget loop: build the options once, choose with
//! the greedy, let the simulator judge, tighten and retry within a bound.
//!
//! # Strategies
//! - `tflms`: TensorFlow Large Model Support's swapping (`tflms.rs`), with
//!   the given parameters or the best of a 12-point parameter grid judged by
//!   the simulator (graphs up to `grid_max_nodes`; TFLMS's defaults beyond).
//! - `swap`: the faster of the peak-driven greedy over swaps (`greedy.rs`,
//!   swap-in triggers from the cost model and the link's queue) and `tflms`;
//!   with TFLMS parameters given, exactly TFLMS. The baseline every other
//!   strategy is compared with.
//! - `recompute`: recomputes of units only (`partition.rs`), same greedy.
//! - `hybrid-paper`: the published heuristic: start from the TFLMS plan; in
//!   decreasing order of the bytes each unit makes the link carry, recompute
//!   the unit instead of swapping its tensors when the simulated step time
//!   drops and the budget holds.
//! - `hybrid`: the fastest plan that fits among the greedy choosing between
//!   swap and recompute at every step (bytes freed per second of estimated
//!   cost; swap-outs queued on the device-to-host engine, recomputes fed by
//!   swapped-in checkpoints), the same greedy with backward tensors rebuilt
//!   from small inputs among its options too (`rebuild.rs`; graphs up to
//!   `grid_max_nodes`), the recompute plan, Chen's plan, the
//!   "blocks" plans (every span of one or two cut segments recomputed from
//!   its checkpoint, `keras.remat` around each block chosen from the
//!   structure), and the published loop started from the `swap` plan and
//!   from the TFLMS plan. So `hybrid` is never slower than any other
//!   strategy.
//!
//! # Complexity
//! Option building O(T + E log E + N), plus O(C log C + C * d) for the
//! rebuilt backward tensors of `hybrid` (`rebuild.rs`, C candidates, d the
//! largest in-degree); each greedy run O((S + R) log^2 N); at most
//! `2 * (max_rounds + RAISED_TARGETS)` greedy runs per budget loop
//! (with the queue check, then without it if that found no plan) and
//! `max_evals` extra simulations, each O(simulate). Chen's and the blocks
//! plans: O(T + N) each to build (the spans partition the forward ops), one
//! simulation each.

use std::str::FromStr;

use rustc_hash::{FxHashMap, FxHashSet};

use super::candidates::{swap_candidates, SwapCandidate};
use super::cuts::{cut_segments, sqrt_spans, Cuts};
use super::greedy::{choose_indexed, queued_out_ends, Chosen, Guide, Index, Pool};
use super::links::place_swap_ins;
use super::options::{
    recompute_options as unit_options, swap_option, Ctx, RecomputeOpt, SpanRule, SwapOpt, Work,
};
use super::partition::partition;
use super::rebuild::small_input_units;
use super::select::Selection;
use super::tflms::{tflms_plan, TflmsParams};
use super::{Plan, Recompute, Swap, SwapIn};
use crate::error::{PlanError, Result};
use crate::graph::NONE;

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

/// The simulator's verdict on a plan.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Verdict {
    pub peak_bytes: u64,
    pub step_time_s: f64,
    /// Most swapped bytes held in host memory at once (`host.rs`).
    pub host_peak_bytes: u64,
}

/// A plan that fits, with its verdict.
#[derive(Debug, Clone)]
pub struct Planned {
    pub plan: Plan,
    pub verdict: Verdict,
    /// The strategy whose plan this is (for `hybrid`, the winner inside it).
    pub strategy: String,
    /// Simulations run.
    pub evaluations: u32,
}

/// Everything the strategies share: options built once, the judge.
pub struct Planner<'a> {
    ctx: &'a Ctx<'a>,
    opts: &'a PlanOptions,
    judge: &'a dyn Fn(&Plan) -> Result<Verdict>,
    cands: Vec<SwapCandidate>,
    swaps: Vec<SwapOpt>,
    swap_tensor: Vec<u32>,
    /// The recompute options: those of forward units first (`base_recs`
    /// of them), then, for `hybrid`, those rebuilding backward tensors
    /// from small inputs (`rebuild.rs`).
    recs: Vec<RecomputeOpt>,
    base_recs: usize,
    evals: std::cell::Cell<u32>,
    /// Every plan judged so far, with its verdict (`judge`).
    judged: std::cell::RefCell<Vec<(Plan, Verdict)>>,
    tflms_memo: std::cell::OnceCell<Option<Planned>>,
    best_fail: std::cell::Cell<(u64, &'static str)>,
    /// Smallest host peak of a plan within the device budget but over the
    /// host budget (`u64::MAX`: none).
    best_host: std::cell::Cell<u64>,
    /// Per node: may it be touched (`None`: all may).
    selected: Option<Vec<bool>>,
    cuts: Cuts,
    /// The greedy's index of every option, for `hybrid` (built on first use).
    shared_index: std::cell::Cell<Option<Index>>,
    /// Whether a greedy round of the current budget loop found a recompute
    /// option valid (`Chosen::recompute_seen`).
    chose_recompute: std::cell::Cell<bool>,
    /// The budget loop on the swaps alone, known without running it: the
    /// loop on swaps and the forward units' recomputes never found a
    /// recompute valid (`fit`). `None`: not known.
    swap_only: std::cell::Cell<Option<Option<Planned>>>,
}

impl<'a> Planner<'a> {
    /// Builds every option once (only those the selection allows).
    ///
    /// # Errors
    /// [`PlanError::InvalidArgument`] for a bad selection (`select.rs`).
    pub fn new(
        ctx: &'a Ctx<'a>,
        opts: &'a PlanOptions,
        judge: &'a dyn Fn(&Plan) -> Result<Verdict>,
    ) -> Result<Self> {
        let selected = opts.selection.mask(ctx.g)?;
        let cands = swap_candidates(ctx.g, ctx.s, ctx.l, opts.min_gap, opts.min_bytes);
        let mut swaps = Vec::new();
        let mut swap_tensor = Vec::new();
        for (i, c) in cands.iter().enumerate() {
            let producer = ctx.g.tensors[c.owner as usize].node as usize;
            if selected.as_ref().is_some_and(|m| !m[producer]) {
                continue;
            }
            let grouped = swap_option(ctx, i, c, false);
            let split = (c.late.len() > 1)
                .then(|| swap_option(ctx, i, c, true))
                .flatten()
                .filter(|s| Some(s) != grouped.as_ref());
            for o in grouped.into_iter().chain(split) {
                swap_tensor.push(c.owner);
                swaps.push(o);
            }
        }
        let cuts = cut_segments(ctx.g, ctx.s, ctx.l, opts.min_bytes);
        let mut recs = recompute_options(ctx, &cands, &cuts);
        let base_recs = recs.len();
        // Only `hybrid` plans with the rebuilt tensors, and only on graphs
        // small enough for its extra candidate plan (`hybrid`).
        if opts.strategy == Strategy::Hybrid && ctx.g.num_nodes() <= opts.grid_max_nodes {
            let first = recs.iter().map(|r| r.unit + 1).max().unwrap_or(0);
            recs.extend(rebuild_options(ctx, &cands, opts.min_bytes, first));
        }
        let mut base_recs = base_recs;
        if let Some(m) = &selected {
            let keep = |r: &RecomputeOpt| r.clones.iter().all(|&v| m[v as usize]);
            base_recs = recs[..base_recs].iter().filter(|r| keep(r)).count();
            recs.retain(keep);
        }
        Ok(Planner {
            ctx,
            opts,
            judge,
            cands,
            swaps,
            swap_tensor,
            recs,
            base_recs,
            evals: 0.into(),
            judged: Default::default(),
            tflms_memo: std::cell::OnceCell::new(),
            best_fail: (u64::MAX, "").into(),
            best_host: u64::MAX.into(),
            selected,
            cuts,
            shared_index: std::cell::Cell::new(None),
            chose_recompute: false.into(),
            swap_only: std::cell::Cell::new(None),
        })
    }

    /// The simulator's verdict on `plan`; a plan judged before (the
    /// strategies of `hybrid` often reach the same one) is not simulated
    /// again. O(plans judged * plan size) to look it up (the plans judged
    /// are the evaluations, a few dozen), plus O(simulate) for a new one.
    fn judge(&self, plan: &Plan) -> Result<Verdict> {
        if let Some((_, v)) = self.judged.borrow().iter().find(|(p, _)| p == plan) {
            return Ok(*v);
        }
        self.evals.set(self.evals.get() + 1);
        let v = (self.judge)(plan)?;
        self.judged.borrow_mut().push((plan.clone(), v));
        Ok(v)
    }

    /// Runs the configured strategy.
    ///
    /// # Errors
    /// [`PlanError::Budget`] with the smallest peak reached when nothing fits.
    pub fn run(&self) -> Result<Planned> {
        let empty = Plan::default();
        let original = self.judge(&empty)?;
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
        result.ok_or_else(|| self.budget_error())
    }

    fn planned(&self, plan: Plan, verdict: Verdict, strategy: &str) -> Planned {
        Planned {
            plan,
            verdict,
            strategy: strategy.into(),
            evaluations: self.evals.get(),
        }
    }

    fn budget_error(&self) -> PlanError {
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
    fn fits(&self, v: &Verdict) -> bool {
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
    fn note_fail(&self, peak: u64, who: &'static str) {
        if peak <= self.opts.budget {
            return;
        }
        if peak < self.best_fail.get().0 {
            self.best_fail.set((peak, who));
        }
    }

    fn hybrid(&self) -> Option<Planned> {
        let mut best: Option<Planned> = None;
        keep_faster(&mut best, self.fit(true, Recs::Base, "hybrid"));
        // The same greedy with the rebuilt backward tensors too: a
        // candidate of its own, so that `hybrid` keeps every plan it had
        // without them (the greedy takes these cheap options first at a
        // peak, and may then need the others all the same).
        if self.recs.len() > self.base_recs {
            keep_faster(&mut best, self.fit(true, Recs::All, "hybrid"));
        }
        keep_faster(&mut best, self.fit(false, Recs::Base, "recompute"));
        keep_faster(&mut best, self.swap().and_then(|p| self.paper(p)));
        if self.opts.tflms.is_none() && self.ctx.g.num_nodes() <= self.opts.grid_max_nodes {
            keep_faster(&mut best, self.tflms_tuned().and_then(|p| self.paper(p)));
        }
        // Recompute-only plans of whole spans last: one that cannot beat
        // the best so far is not simulated (`spans_plan`).
        let beat =
            |b: &Option<Planned>| b.as_ref().map_or(f64::INFINITY, |p| p.verdict.step_time_s);
        let sqrt = sqrt_spans(self.cuts.segments.len());
        let chen = self.spans_plan(&sqrt, "chen", beat(&best));
        keep_faster(&mut best, chen);
        for width in BLOCK_WIDTHS {
            let blocks = self.blocks(width, beat(&best));
            keep_faster(&mut best, blocks);
        }
        best.map(|mut p| {
            p.evaluations = self.evals.get();
            p
        })
    }

    /// Chen's sqrt(n) checkpointing: the forward pass's cut segments in
    /// groups of about sqrt(M), each group recomputed from the tensor
    /// crossing the cut before it (its option freeing the most bytes);
    /// the tensors at the groups' cuts are kept. Judged against the budget,
    /// never tuned to it.
    fn chen(&self) -> Option<Planned> {
        self.spans_plan(&sqrt_spans(self.cuts.segments.len()), "chen", f64::INFINITY)
    }

    /// `keras.remat` around every block, chosen from the structure: spans
    /// of `width` consecutive cut segments, each recomputed from the tensor
    /// crossing the cut before it (its option freeing the most bytes).
    /// `None` when these are Chen's spans (already judged), or the plan
    /// does not fit or cannot be faster than `beat` seconds.
    fn blocks(&self, width: usize, beat: f64) -> Option<Planned> {
        let m = self.cuts.segments.len();
        let spans = block_spans(m, width);
        if m < 2 || spans == sqrt_spans(m) {
            return None;
        }
        self.spans_plan(&spans, "blocks", beat)
    }

    /// One recompute per span, at its option freeing the most memory over
    /// time (`freed_area`; ties: the earliest trigger), judged by the
    /// simulator against the budget. The most bytes alone would favour a
    /// clone time early in the forward pass, where every tensor of the span
    /// is idle but nothing is freed for long (a label buffer read by the
    /// loss sets such a time). Not simulated when it cannot be faster than
    /// `beat` seconds: the compute stream runs every op and every clone in
    /// turn, so no plan's step is shorter than their summed op times; the
    /// spans are built in order and the sum checked after each, so a plan
    /// that cannot win is dropped after the spans that decide it.
    fn spans_plan(
        &self,
        spans: &[(usize, usize)],
        who: &'static str,
        beat: f64,
    ) -> Option<Planned> {
        let ctx = self.ctx;
        let gap_of = gap_index(ctx, &self.cands);
        let mut work = Work::new(ctx.g.num_nodes());
        let m = &self.selected;
        let compute = ctx.start[ctx.s.order.len()];
        let mut clones = 0.0;
        let mut chosen = Chosen::default();
        for &(a, b) in spans {
            let span = Span {
                a,
                b,
                backward_only: true,
            };
            span_options(ctx, a, &self.cuts, span, &self.cands, &gap_of, &mut work);
            let options = work.take();
            let best = (options.into_iter())
                .filter(|r| {
                    m.as_ref()
                        .is_none_or(|m| r.clones.iter().all(|&v| m[v as usize]))
                })
                .max_by_key(|r| (freed_area(ctx, r), std::cmp::Reverse(r.trigger)));
            let Some(r) = best else { continue };
            clones += r.time_s.max(0.0);
            chosen.recomputes.push(r);
            // The clone times only add up: once the sum so far cannot beat
            // `beat`, neither can the whole plan (the spans left unbuilt).
            if (compute + clones) * (1.0 - 1e-9) >= beat {
                return None;
            }
        }
        if chosen.recomputes.is_empty() {
            return None;
        }
        let plan = self.to_plan(&chosen);
        let v = self.judge(&plan).ok()?;
        if !self.fits(&v) {
            self.note_fail(v.peak_bytes, who);
            return None;
        }
        Some(self.planned(plan, v, who))
    }

    /// TFLMS: with the given parameters, or the best of the parameter grid
    /// (graphs up to `grid_max_nodes`; beyond, TFLMS's own defaults).
    /// Computed once per planner.
    fn tflms_tuned(&self) -> Option<Planned> {
        self.tflms_memo
            .get_or_init(|| {
                if let Some(p) = self.opts.tflms {
                    return self.tflms(&p);
                }
                let grid = if self.ctx.g.num_nodes() <= self.opts.grid_max_nodes {
                    self.tflms_grid()
                } else {
                    let n = self.ctx.s.order.len() as u32;
                    vec![TflmsParams {
                        threshold: n / 64,
                        ahead: 8,
                        groupby: 8,
                        min_bytes: self.opts.min_bytes,
                    }]
                };
                let mut best: Option<Planned> = None;
                for p in grid {
                    if let Some(t) = self.tflms(&p) {
                        if best
                            .as_ref()
                            .is_none_or(|b| t.verdict.step_time_s < b.verdict.step_time_s)
                        {
                            best = Some(t);
                        }
                    }
                }
                best.map(|mut p| {
                    p.strategy = "tflms".into();
                    p
                })
            })
            .clone()
    }

    /// The swap plan: TFLMS when parameters are given; otherwise the faster
    /// of the greedy swap and the tuned TFLMS.
    fn swap(&self) -> Option<Planned> {
        if self.opts.tflms.is_some() {
            return self.tflms_tuned().map(|p| self.renamed(p, "swap"));
        }
        let mut best = self.fit(true, Recs::None, "swap");
        if let Some(t) = self.tflms_tuned() {
            if best
                .as_ref()
                .is_none_or(|b| t.verdict.step_time_s < b.verdict.step_time_s)
            {
                best = Some(t);
            }
        }
        best.map(|p| self.renamed(p, "swap"))
    }

    fn renamed(&self, mut p: Planned, who: &str) -> Planned {
        p.strategy = who.into();
        p.evaluations = self.evals.get();
        p
    }

    fn tflms(&self, p: &TflmsParams) -> Option<Planned> {
        let mut plan = tflms_plan(self.ctx.g, self.ctx.s, self.ctx.l, p);
        if let Some(m) = &self.selected {
            let g = self.ctx.g;
            plan.swaps
                .retain(|s| m[g.tensors[s.tensor as usize].node as usize]);
        }
        let v = self.judge(&plan).ok()?;
        if !self.fits(&v) {
            self.note_fail(v.peak_bytes, "tflms");
            return None;
        }
        Some(self.planned(plan, v, "tflms"))
    }

    /// Thresholds from a quarter of the schedule down to none, triggers 1 to
    /// 32 ops ahead, readers grouped within the same distance.
    fn tflms_grid(&self) -> Vec<TflmsParams> {
        let n = self.ctx.s.order.len() as u32;
        let mut out = Vec::new();
        for threshold in [n / 4, n / 16, n / 64, 0] {
            for ahead in [1, 8, 32] {
                out.push(TflmsParams {
                    threshold,
                    ahead,
                    groupby: ahead,
                    min_bytes: self.opts.min_bytes,
                });
            }
        }
        out
    }

    /// The budget loop around the greedy: swaps checked against the
    /// device-to-host queue first; if that finds no plan, without the check
    /// (the position model is pessimistic where stalls slow the step).
    ///
    /// When no round of the loop on swaps and recomputes (`Recs::Base`)
    /// found a recompute option valid, the loop on the swaps alone is its
    /// copy: on the shared index, every recompute entry it looked at was
    /// dropped as invalid, as the swaps-alone run drops it, so both runs
    /// look at the same swap entries in the same states and make the same
    /// choices, round after round (the targets and queue floors follow from
    /// the choices). Its result is then reused, not recomputed: the
    /// greedy's cost grows with the decisions it makes.
    fn fit(&self, swap: bool, recs: Recs, who: &'static str) -> Option<Planned> {
        if swap && recs == Recs::None {
            if let Some(known) = self.swap_only.take() {
                let known = known.map(|mut p| {
                    p.strategy = who.into();
                    p
                });
                debug_assert_eq!(
                    known.as_ref().map(|p| &p.plan),
                    self.run_fit(swap, recs, who).as_ref().map(|p| &p.plan),
                    "the swaps-alone loop differs from its copy"
                );
                return known;
            }
        }
        let out = self.run_fit(swap, recs, who);
        if self.opts.strategy == Strategy::Hybrid
            && swap
            && recs == Recs::Base
            && !self.chose_recompute.get()
        {
            self.swap_only.set(Some(out.clone()));
        }
        out
    }

    fn run_fit(&self, swap: bool, recs: Recs, who: &'static str) -> Option<Planned> {
        self.chose_recompute.set(false);
        let pool = Pool {
            cands: &self.cands,
            swaps: if swap { &self.swaps } else { &[] },
            tensor_of_swap: if swap { &self.swap_tensor } else { &[] },
            recomputes: match recs {
                Recs::None => &[],
                Recs::Base => &self.recs[..self.base_recs],
                Recs::All => &self.recs,
            },
        };
        // One index serves every greedy run of both loops; `hybrid`, which
        // fits with swaps, recomputes and both, shares one of all options.
        let mut ix = match self.opts.strategy {
            Strategy::Hybrid => self.shared_index.take().unwrap_or_else(|| {
                let all = Pool {
                    swaps: &self.swaps,
                    tensor_of_swap: &self.swap_tensor,
                    recomputes: &self.recs,
                    ..pool
                };
                Index::new(self.ctx, &all, self.opts.lambda)
            }),
            _ => Index::new(self.ctx, &pool, self.opts.lambda),
        };
        let mut out = self.fit_with(&pool, &mut ix, who, true);
        if out.is_none() && swap {
            out = self.fit_with(&pool, &mut ix, who, false);
        }
        if self.opts.strategy == Strategy::Hybrid {
            self.shared_index.set(Some(ix));
        }
        out
    }

    /// Greedy rounds at a falling target: each round lowers it by the
    /// simulated overshoot (at least 1% of the budget), at most
    /// `max_rounds` rounds. The greedy's model and the simulator differ, so
    /// the simulated peak is not monotone in the target; when the falling
    /// targets find nothing, up to `RAISED_TARGETS` rounds at targets above
    /// the budget (1%, 2%, ... of it) are tried, and a plan whose simulated
    /// peak fits is accepted like any other.
    fn fit_with(
        &self,
        pool: &Pool<'_>,
        ix: &mut Index,
        who: &'static str,
        queue_check: bool,
    ) -> Option<Planned> {
        let budget = self.opts.budget;
        let mut target = budget;
        // Each round's swap-outs end no earlier than the engine's queue
        // made them end in the rounds before (a swap chosen later at an
        // earlier position delays the ones after it).
        let mut floor: Vec<f64> = Vec::new();
        for _ in 0..self.opts.max_rounds.max(1) {
            let (plan, v, chosen) = self.round(pool, ix, target, &floor, queue_check)?;
            if self.fits(&v) {
                return Some(self.planned(plan, v, who));
            }
            if v.peak_bytes <= budget {
                break; // within the device budget, over the host's: more swaps will not help
            }
            self.note_fail(v.peak_bytes, who);
            let ends = queued_out_ends(self.ctx, &self.cands, &chosen.swaps);
            if floor.is_empty() {
                floor = ends;
            } else {
                floor.iter_mut().zip(ends).for_each(|(f, e)| *f = f.max(e));
            }
            if chosen.model_peak > target {
                break; // the options are exhausted at the peak
            }
            let over = v.peak_bytes - budget;
            target = target.saturating_sub(over.max(budget / 100).max(1));
        }
        for k in 1..=RAISED_TARGETS {
            let step = (budget / 100).max(1);
            let raised = budget.saturating_add(step.saturating_mul(k));
            let (plan, v, _) = self.round(pool, ix, raised, &floor, queue_check)?;
            if self.fits(&v) {
                return Some(self.planned(plan, v, who));
            }
            self.note_fail(v.peak_bytes, who);
        }
        None
    }

    /// One greedy run at `target`, its plan and the simulator's verdict.
    /// Swap-ins are placed so queued copies still arrive in time; if that
    /// holds too much memory, the triggers from the options are used.
    fn round(
        &self,
        pool: &Pool<'_>,
        ix: &mut Index,
        target: u64,
        floor: &[f64],
        queue_check: bool,
    ) -> Option<(Plan, Verdict, Chosen)> {
        let guide = Guide {
            out_floor: floor,
            queue_check,
        };
        let chosen = choose_indexed(self.ctx, pool, ix, target, guide);
        if chosen.recompute_seen {
            self.chose_recompute.set(true);
        }
        let mut placed = chosen.clone();
        place_swap_ins(self.ctx, &self.cands, &mut placed.swaps);
        let mut plan = self.to_plan(&placed);
        let mut v = self.judge(&plan).ok()?;
        if v.peak_bytes > self.opts.budget && placed.swaps != chosen.swaps {
            plan = self.to_plan(&chosen);
            v = self.judge(&plan).ok()?;
        }
        Some((plan, v, chosen))
    }

    /// The published hybrid: replace the swaps of a unit by its recompute,
    /// largest link bytes first, when the simulator says it is faster.
    /// Units are tried one at a time (the paper) up to `max_evals`
    /// simulations; beyond that, in equal chunks so the whole list is seen
    /// within the bound. A trial whose summed op and clone times cannot beat
    /// the current step is dropped unsimulated (`cannot_beat`).
    fn paper(&self, start: Planned) -> Option<Planned> {
        let owner = |t: u32| self.ctx.l.owner[t as usize];
        let order = self.units_by_link_bytes(&start.plan);
        // At most `max_evals` simulations, fewer on big graphs so that the
        // loop costs about as much as simulating 4 * 10^6 nodes.
        let by_size = 4_000_000 / self.ctx.g.num_nodes().max(1);
        let evals = (self.opts.max_evals as usize).min(by_size).max(2);
        let chunk = order.len().div_ceil(evals).max(1);
        let mut cur = start;
        let mut freed: FxHashSet<u32> = FxHashSet::default();
        let mut pinned: FxHashSet<u32> = FxHashSet::default();
        for group in order.chunks(chunk) {
            let mut trial = cur.plan.clone();
            let (mut f, mut p) = (freed.clone(), pinned.clone());
            let mut swapped: FxHashSet<u32> = trial.swaps.iter().map(|s| owner(s.tensor)).collect();
            let mut unswap: FxHashSet<u32> = FxHashSet::default();
            for &r in group {
                let rec = &self.recs[r];
                let usable = rec
                    .inputs
                    .iter()
                    .all(|&x| !swapped.contains(&owner(x)) && !f.contains(&owner(x)))
                    && rec
                        .saved
                        .iter()
                        .all(|&(t, _)| !f.contains(&t) && !p.contains(&t));
                if !usable {
                    continue;
                }
                if rec.saved.iter().any(|(t, _)| swapped.contains(t)) {
                    // Their swaps leave the trial after the group (one pass
                    // over the swaps, not one per recompute).
                    for &(t, _) in &rec.saved {
                        swapped.remove(&t);
                        unswap.insert(t);
                    }
                }
                trial.recomputes.push(self.recompute_of(rec));
                f.extend(rec.saved.iter().map(|&(t, _)| t));
                p.extend(rec.inputs.iter().map(|&x| owner(x)));
            }
            if !unswap.is_empty() {
                trial.swaps.retain(|s| !unswap.contains(&owner(s.tensor)));
            }
            if trial.recomputes.len() == cur.plan.recomputes.len() {
                continue;
            }
            if self.cannot_beat(&trial, cur.verdict.step_time_s) {
                continue;
            }
            trial
                .recomputes
                .sort_by_key(|r| (r.trigger, r.nodes.first().copied().unwrap_or(NONE)));
            let Ok(v) = self.judge(&trial) else { continue };
            if self.fits(&v) && v.step_time_s < cur.verdict.step_time_s {
                cur = self.planned(trial, v, "hybrid-paper");
                (freed, pinned) = (f, p);
            }
        }
        cur.strategy = "hybrid-paper".into();
        cur.evaluations = self.evals.get();
        Some(cur)
    }

    /// Whether `plan` surely takes at least `beat` seconds, so that the
    /// simulator need not judge it: the compute stream runs every op and
    /// every clone in turn, so no step is shorter than their summed op
    /// times (with a margin of 10^-9 for the order of the sums). O(clones).
    fn cannot_beat(&self, plan: &Plan, beat: f64) -> bool {
        let ctx = self.ctx;
        let compute = ctx.start[ctx.s.order.len()];
        let clones: f64 = (plan.recomputes.iter())
            .flat_map(|r| r.nodes.iter())
            .map(|&v| ctx.op_time[v as usize])
            .sum();
        (compute + clones) * (1.0 - 1e-9) >= beat
    }

    fn recompute_of(&self, r: &RecomputeOpt) -> Recompute {
        Recompute {
            nodes: r.clones.clone(),
            trigger: self.ctx.s.order[r.trigger as usize],
            consumers: r.consumers.clone(),
            clone_consumers: vec![],
        }
    }

    /// Recompute options of units with swapped tensors, most swapped bytes first.
    fn units_by_link_bytes(&self, plan: &Plan) -> Vec<usize> {
        let swapped: FxHashMap<u32, u64> = plan
            .swaps
            .iter()
            .map(|s| {
                let o = self.ctx.l.owner[s.tensor as usize];
                (o, self.ctx.g.tensors[o as usize].bytes)
            })
            .collect();
        let mut scored: Vec<(u64, usize)> = Vec::new();
        for (i, r) in self.recs[..self.base_recs].iter().enumerate() {
            let bytes: u64 = r.saved.iter().filter_map(|(t, _)| swapped.get(t)).sum();
            if bytes > 0 {
                scored.push((bytes, i));
            }
        }
        scored.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        scored.into_iter().map(|(_, i)| i).collect()
    }

    /// Turns choices into the plan format, sorted for determinism.
    pub fn to_plan(&self, c: &Chosen) -> Plan {
        let order = &self.ctx.s.order;
        let mut swaps: Vec<Swap> = c
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
                        }
                    })
                    .collect();
                Swap {
                    release: NONE,
                    gate: NONE,
                    tensor: cand.tensor,
                    after: self.ctx.g.tensors[cand.tensor as usize].node,
                    ins,
                }
            })
            .collect();
        swaps.sort_by_key(|s| s.tensor);
        let mut recomputes: Vec<Recompute> =
            c.recomputes.iter().map(|r| self.recompute_of(r)).collect();
        recomputes.sort_by_key(|r| (r.trigger, r.nodes.first().copied().unwrap_or(NONE)));
        Plan { swaps, recomputes }
    }

    /// The swap options and their buffers (for tools and tests).
    pub fn swap_options_for_debug(&self) -> (Vec<SwapOpt>, Vec<u32>) {
        (self.swaps.clone(), self.swap_tensor.clone())
    }

    /// The recompute options (for tools and tests).
    pub fn recompute_options_for_debug(&self) -> Vec<RecomputeOpt> {
        self.recs.clone()
    }

    pub fn num_options(&self) -> (usize, usize) {
        (self.swaps.len(), self.recs.len())
    }
}

/// Recompute options: every unit, and segments of 2, 4 and 8 consecutive
/// units (in schedule order of their heads) recomputed together from the
/// segment's inputs, Chen et al.'s checkpointing at several granularities.
/// A segment frees the tensors its units hand each other, which a single
/// unit must keep for its successor's clone.
///
/// # Complexity
/// O(N + E) for the units, O(sum of segment sizes) = O(4 N) for the segments.
fn recompute_options(ctx: &Ctx<'_>, cands: &[SwapCandidate], cuts: &Cuts) -> Vec<RecomputeOpt> {
    let units = partition(ctx.g, ctx.s);
    let gap_of = gap_index(ctx, cands);
    let mut work = Work::new(ctx.g.num_nodes());
    for (u, nodes) in units.units.iter().enumerate() {
        unit_options(ctx, u, nodes, SpanRule::ANY, cands, &gap_of, &mut work);
    }
    let n = units.units.len();
    for width in SEGMENT_WIDTHS {
        for start in (0..n).step_by(width / 2) {
            let end = (start + width).min(n);
            if end - start < 2 {
                continue;
            }
            let mut nodes: Vec<u32> = units.units[start..end].iter().flatten().copied().collect();
            nodes.sort_by_key(|&v| ctx.s.pos[v as usize]);
            unit_options(
                ctx,
                n + start,
                &nodes,
                SpanRule::ANY,
                cands,
                &gap_of,
                &mut work,
            );
        }
    }
    let m = cuts.segments.len();
    for (k, width) in SPAN_WIDTHS.into_iter().enumerate() {
        for a in (0..m).step_by(width) {
            let b = (a + width).min(m);
            let id = 2 * n + k * m + a;
            let span = Span {
                a,
                b,
                backward_only: false,
            };
            span_options(ctx, id, cuts, span, cands, &gap_of, &mut work);
        }
    }
    work.take()
}

/// Recompute options of the backward tensors rebuilt from small inputs
/// (`rebuild.rs`), their units numbered from `first`.
///
/// # Complexity
/// As [`small_input_units`], plus O(sum of unit sizes) = O(MAX_OPS * C)
/// to place them.
fn rebuild_options(
    ctx: &Ctx<'_>,
    cands: &[SwapCandidate],
    min_bytes: u64,
    first: usize,
) -> Vec<RecomputeOpt> {
    let gap_of = gap_index(ctx, cands);
    let mut work = Work::new(ctx.g.num_nodes());
    for (k, nodes) in small_input_units(ctx, cands, min_bytes).iter().enumerate() {
        unit_options(
            ctx,
            first + k,
            nodes,
            SpanRule::ANY,
            cands,
            &gap_of,
            &mut work,
        );
    }
    work.take()
}

/// Per tensor: the index into `cands` of the candidate whose late readers
/// read it (an owner, or the alias of one the late readers read), `NONE`
/// for the others. A recompute frees an alias candidate's buffer only when
/// it clones the owner's producer and the alias op (`options.rs`).
///
/// # Complexity
/// O(T + C).
fn gap_index(ctx: &Ctx<'_>, cands: &[SwapCandidate]) -> Vec<u32> {
    let mut gap_of = vec![NONE; ctx.g.num_tensors()];
    for (i, c) in cands.iter().enumerate() {
        gap_of[c.tensor as usize] = i as u32;
    }
    gap_of
}

/// Which recompute options a greedy pool holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Recs {
    None,
    /// Those of forward units (`Planner::base_recs`).
    Base,
    /// Those and the rebuilt backward tensors (`rebuild.rs`).
    All,
}

/// Keeps the faster of `best` and `p` (ties: `best`).
fn keep_faster(best: &mut Option<Planned>, p: Option<Planned>) {
    if let Some(p) = p {
        if best
            .as_ref()
            .is_none_or(|b| p.verdict.step_time_s < b.verdict.step_time_s)
        {
            *best = Some(p);
        }
    }
}

/// Byte-positions a recompute frees: each saved buffer's bytes times the
/// positions from its last early read to the clone time.
fn freed_area(ctx: &Ctx<'_>, r: &RecomputeOpt) -> u128 {
    r.saved
        .iter()
        .map(|&(t, last_early)| {
            let span = r.trigger.saturating_sub(last_early);
            u128::from(ctx.g.tensors[t as usize].bytes) * u128::from(span)
        })
        .sum()
}

/// Rounds of the budget loop at targets above the budget (`fit_with`).
const RAISED_TARGETS: u64 = 2;

/// Segment widths (units), each placed at half-width strides.
const SEGMENT_WIDTHS: [usize; 3] = [2, 4, 8];

/// Widths (cut segments, `cuts.rs`) of the spans recomputed from the
/// tensor crossing the cut before them, placed at their own width.
const SPAN_WIDTHS: [usize; 3] = [1, 2, 4];

/// Widths (cut segments) of `hybrid`'s whole-plan "blocks" candidates:
/// every block recomputed from its checkpoint, alone or in pairs.
const BLOCK_WIDTHS: [usize; 2] = [1, 2];

/// Spans of `width` consecutive segments out of `m`, from the first.
fn block_spans(m: usize, width: usize) -> Vec<(usize, usize)> {
    (0..m)
        .step_by(width.max(1))
        .map(|a| (a, (a + width).min(m)))
        .collect()
}

/// A span of cut segments `a..b`, and whether its recompute frees only
/// buffers read late by the backward pass ([`SpanRule`]).
#[derive(Debug, Clone, Copy)]
struct Span {
    a: usize,
    b: usize,
    backward_only: bool,
}

/// Recompute options of a span of cut segments: its recomputable ops
/// cloned from the tensor crossing the cut before it. The buffer crossing
/// the cut after it is kept (a checkpoint for the next span), so spans
/// combine. The greedy's pool gets every option (a U-Net's encoder span
/// may be recomputed for the decoder's forward reads of its skip
/// connections); the whole-plan spans of `spans_plan` free only what the
/// backward pass reads, as `keras.remat` does. The options are appended to
/// `work`'s.
fn span_options(
    ctx: &Ctx<'_>,
    id: usize,
    cuts: &Cuts,
    span: Span,
    cands: &[SwapCandidate],
    gap_of: &[u32],
    work: &mut Work,
) {
    let rule = SpanRule {
        kept: cuts.boundary[span.b - 1],
        backward_only: span.backward_only,
    };
    let nodes: Vec<u32> = cuts.segments[span.a..span.b]
        .iter()
        .flatten()
        .copied()
        .collect();
    unit_options(ctx, id, &nodes, rule, cands, gap_of, work)
}
