//! The strategies that are the fastest of other strategies' plans: `swap`
//! and `hybrid`.
//!
//! # The rule
//! - `swap`: with TFLMS parameters given, exactly TFLMS; otherwise the
//!   faster of the greedy over swaps alone (`fit.rs`) and the tuned TFLMS
//!   plan (`tflms_grid.rs`); when neither fits, the greedy over swaps the
//!   step waits for (`wait.rs`).
//! - `hybrid`: first the greedy over swaps alone, on an index of the swap
//!   options only; when its plan fits and is as fast as any plan can be
//!   (the summed op times: every copy hidden), it is the answer, and no
//!   recompute option is built. Otherwise that plan is the loop on the swaps
//!   alone the candidates below reuse, and `hybrid` is the fastest plan that
//!   fits among the greedy choosing between
//!   swap and recompute at every step (bytes freed per second of estimated
//!   cost; swap-outs queued on the device-to-host engine, recomputes fed by
//!   swapped-in checkpoints; when it finds none, the same greedy over swaps
//!   the step waits for, `wait.rs`), the same greedy with backward tensors rebuilt
//!   from small inputs among its options too (`rebuild.rs`; graphs up to
//!   `grid_max_nodes`), the recompute plan, the published loop
//!   (`paper.rs`) started from the `swap` plan and from the TFLMS plan, and
//!   last Chen's and the "blocks" plans (`spans.rs`), each dropped
//!   unsimulated when it cannot beat the best so far. Ties keep the earlier
//!   plan. So `hybrid` is never slower than any other strategy.
//!
//! A candidate that cannot be faster than the best so far is not built
//! (`Bounds`): the recompute plan when the best is at least as fast as the
//! forward units' cheapest recompute allows, the published loops with
//! their start (the `swap` and TFLMS plans) when moreover the best is as
//! fast as any plan can be, and Chen's and the "blocks" plans (their cuts
//! included) when the best is as fast as any plan can be. Skipping them
//! changes no result, only the evaluations counted: a spans plan whose
//! clones take less than 10^-9 of the step passes `spans_plan`'s own bound
//! and was simulated, though it could not win.
//!
//! # The model
//! The simulator's step time ranks the plans; every plan has passed the
//! budgets (`Planner::fits`). No plan's step is shorter than the summed op
//! times `C` of the schedule (`ctx.start[N]`): the simulator's compute
//! stream adds the same op times in the same order, each item starting no
//! earlier than the one before ended, and clones and waits only add to its
//! clock (rounding is monotone, so the bound is exact). A plan with a
//! recompute of the forward units (`Recs::Base`: every plan of the
//! recompute loop that fits, and of the published loop but its start) also
//! runs that option's clones: its step is at least `C` plus the cheapest
//! option's clone time, less a margin of 10^-9 for the order of the sums
//! (as `paper.rs`'s `cannot_beat`).
//!
//! The plan of swaps alone at the first bound is the plan the rest would
//! choose wherever the greedy over swaps and recomputes finds no recompute
//! option valid (its choices are then those of the swaps alone, `fit.rs`);
//! where it would find one, no candidate is faster, and a tie keeps the
//! earlier plan: the swaps-alone one. So the plan and its figures are those
//! of the order without this first step, but for a tie with another plan
//! at the first bound (none met on the digest sets, nor in 2,350 requests
//! of a review over every preset, selections, host budgets and profiles).
//! What the report says of the search may differ: the plan is `hybrid`'s,
//! found with the evaluations of this order, where the later candidates
//! reached it too (`hybrid-paper`, started from the `swap` plan) after more
//! simulations; the recompute options counted are those built. When no
//! plan fits, the budget error names the strategy it named before: the
//! loop's smallest peak is noted when a strategy takes its result (`fit`).
//!
//! # Complexity
//! The sum of the strategies run (see their files); plans reached twice are
//! judged once. The bounds: O(R) once. When the swaps alone reach the first
//! bound: their options, index and budget loop only (no recompute option,
//! cut-segment span or rebuilt tensor is placed).

use super::fit::Recs;
use super::planner::{keep_faster, Planned, Planner};
use super::spans::BLOCK_WIDTHS;

impl Planner<'_> {
    /// `hybrid`: the fastest of the plans in the header's order (ties: the
    /// earlier), its evaluations those of every plan judged.
    pub(super) fn hybrid(&self) -> Option<Planned> {
        // The swaps alone first: a plan of them as fast as any plan can be
        // (every copy hidden) cannot be beaten, and then no recompute option
        // is built. Otherwise it is the loop on the swaps alone that the
        // candidates below reuse, and they run as they would without it.
        let swaps_first = self.fit_swaps_first();
        if let Some(p) = swaps_first.filter(|p| p.verdict.step_time_s <= self.first_bound()) {
            return Some(Planned {
                evaluations: self.evals.get(),
                strategy: "hybrid".into(),
                ..p
            });
        }
        let mut best: Option<Planned> = None;
        keep_faster(&mut best, self.fit(true, Recs::Base, "hybrid"));
        if best.is_none() {
            // No plan of hidden copies: swaps the step waits for (`wait.rs`).
            keep_faster(&mut best, self.fit_waiting(Recs::Base, "hybrid"));
        }
        // The same greedy with the rebuilt backward tensors too: a
        // candidate of its own, so that `hybrid` keeps every plan it had
        // without them (the greedy takes these cheap options first at a
        // peak, and may then need the others all the same).
        if self.recs().len() > self.base_recs() {
            keep_faster(&mut best, self.fit(true, Recs::All, "hybrid"));
        }
        // What the candidates below can reach at best (the model above):
        // one that cannot be faster than `best` is not built. In debug
        // builds it is built all the same and must not win.
        let bounds = self.bounds();
        let skip_recompute = bounds.beaten(&best, bounds.recompute);
        let skip_loops = skip_recompute && bounds.beaten(&best, bounds.any);
        let recompute = |best: &mut Option<Planned>| {
            keep_faster(best, self.fit(false, Recs::Base, "recompute"));
        };
        let loops = |best: &mut Option<Planned>| {
            keep_faster(best, self.swap().and_then(|p| self.paper(p)));
            if self.opts.tflms.is_none() && self.ctx.g.num_nodes() <= self.opts.grid_max_nodes {
                keep_faster(best, self.tflms_tuned().and_then(|p| self.paper(p)));
            }
        };
        self.unless_beaten(&mut best, skip_recompute, recompute);
        self.unless_beaten(&mut best, skip_loops, loops);
        // Recompute-only plans of whole spans last: one that cannot beat
        // the best so far is not simulated (`spans_plan`), and none is
        // built when the best is as fast as any plan can be.
        let beat =
            |b: &Option<Planned>| b.as_ref().map_or(f64::INFINITY, |p| p.verdict.step_time_s);
        let spans = |best: &mut Option<Planned>| {
            let chen = self.chen_within(beat(best));
            keep_faster(best, chen);
            for width in BLOCK_WIDTHS {
                let blocks = self.blocks(width, beat(best));
                keep_faster(best, blocks);
            }
        };
        let skip_spans = bounds.beaten(&best, bounds.any);
        self.unless_beaten(&mut best, skip_spans, spans);
        best.map(|mut p| {
            p.evaluations = self.evals.get();
            p
        })
    }

    /// The lower bounds on the step of `hybrid`'s candidates (the model in
    /// the header). O(R) for R recompute options.
    fn bounds(&self) -> Bounds {
        let compute = self.first_bound();
        let cheapest = (self.recs()[..self.base_recs()].iter())
            .map(|r| r.time_s)
            .fold(f64::INFINITY, f64::min);
        Bounds {
            any: compute,
            recompute: (compute + cheapest) * (1.0 - 1e-9),
        }
    }

    /// The step no plan is faster than: the schedule's summed op times.
    fn first_bound(&self) -> f64 {
        self.ctx.start[self.ctx.s.order.len()]
    }

    /// Runs `candidates` on `best` unless `skip` (their bound says none can
    /// win). In debug builds a skipped run is made on a copy and must leave
    /// the plan and its strategy as they are; its simulations are then
    /// forgotten (not counted, not reused), so the report is the same as a
    /// release build's.
    fn unless_beaten(
        &self,
        best: &mut Option<Planned>,
        skip: bool,
        candidates: impl Fn(&mut Option<Planned>),
    ) {
        if !skip {
            candidates(best);
        } else if cfg!(debug_assertions) {
            let (evals, judged) = (self.evals.get(), self.judged.borrow().len());
            // The answer on the last plan judged before, as a release build has it.
            let answer = self.last_answer.take();
            let mut copy = best.clone();
            candidates(&mut copy);
            self.evals.set(evals);
            self.judged.borrow_mut().truncate(judged);
            self.last_answer.replace(answer);
            debug_assert_eq!(
                copy.as_ref().map(|p| (&p.plan, &p.strategy)),
                best.as_ref().map(|p| (&p.plan, &p.strategy)),
                "a candidate skipped by its bound would have won"
            );
        }
    }

    /// The swap plan: TFLMS when parameters are given; otherwise the faster
    /// of the greedy swap and the tuned TFLMS.
    pub(super) fn swap(&self) -> Option<Planned> {
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
        if best.is_none() {
            // No plan of hidden copies: swaps the step waits for (`wait.rs`).
            best = self.fit_waiting(Recs::None, "swap");
        }
        best.map(|p| self.renamed(p, "swap"))
    }
}

/// Lower bounds on the simulated step of a plan (seconds): `any` of every
/// plan, `recompute` of one with a recompute of the forward units
/// (infinite when there are none).
struct Bounds {
    any: f64,
    recompute: f64,
}

impl Bounds {
    /// Whether no candidate whose step is at least `bound` can be faster
    /// than `best` (`keep_faster` keeps only a strictly faster plan).
    fn beaten(&self, best: &Option<Planned>, bound: f64) -> bool {
        best.as_ref()
            .is_some_and(|b| b.verdict.step_time_s <= bound)
    }
}
