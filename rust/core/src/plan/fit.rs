//! The budget loop around the greedy (`greedy.rs`): the `swap` greedy, the
//! `recompute` strategy and `hybrid`'s greedy runs.
//!
//! # The rule
//! Greedy rounds at a falling target: each round chooses options until the
//! greedy's model peak is under the target, the simulator judges the plan,
//! and the target falls by the simulated overshoot (at least 1% of the
//! budget), at most `max_rounds` rounds. Swaps are checked against the
//! device-to-host queue first (`d2h.rs`); if that finds no plan, the loop
//! runs again without the check. When the falling targets find nothing, up
//! to `RAISED_TARGETS` rounds at targets above the budget (1%, 2%, ... of
//! it) are tried: the greedy's model and the simulator differ, so the
//! simulated peak is not monotone in the target.
//!
//! # The model
//! The greedy's estimates (`options.rs`) choose; the simulator judges. A
//! swap-in placed by the link's queue (`links.rs`) that holds more memory
//! than the options' own trigger falls back to that trigger.
//!
//! # Complexity
//! Each greedy run O((S + R) log^2 N) for S swap and R recompute options;
//! at most `2 * (max_rounds + RAISED_TARGETS)` greedy runs per loop (with
//! the queue check, then without it if that found no plan), each judged by
//! one or two simulations (`round`). One index (`greedy::Index`) serves
//! every run.

use super::greedy::{choose_indexed, queued_out_ends, Chosen, Guide, Index, Pool};
use super::links::place_swap_ins;
use super::planner::{Planned, Planner, Strategy};
use super::Plan;
use crate::simulate::SimResult;
use std::sync::Arc;

/// Which recompute options a greedy pool holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Recs {
    None,
    /// Those of forward units (`Planner::base_recs`).
    Base,
    /// Those and the rebuilt backward tensors (`rebuild.rs`).
    All,
}

/// Rounds of the budget loop at targets above the budget (`fit_with`).
const RAISED_TARGETS: u64 = 2;

impl Planner<'_> {
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
    pub(super) fn fit(&self, swap: bool, recs: Recs, who: &'static str) -> Option<Planned> {
        if swap && recs == Recs::None {
            if let Some(known) = self.swap_only.take() {
                // Its smallest peak over the budget, noted now as the loop
                // itself would have noted it (`fit_swaps_first`).
                self.note_fail(self.swap_only_fail.replace(u64::MAX), who);
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
            // This loop noted its own peaks, as the loop it stands for would have.
            self.swap_only_fail.set(u64::MAX);
        }
        out
    }

    /// `hybrid`'s first candidate: the budget loop on the swaps alone, on an
    /// index of the swap options only (the same choices as on an index of
    /// every option, `greedy::choose_indexed`), before any recompute option
    /// is built. Its result is the loop on the swaps alone for the rest of
    /// the request (`fit`). The smallest peak over the budget it reached is
    /// noted only when a strategy takes that result (`fit`), under that
    /// strategy's name, as if it had run the loop then: a budget error names
    /// the strategy it named before this loop ran first.
    pub(super) fn fit_swaps_first(&self) -> Option<Planned> {
        self.chose_recompute.set(false);
        let pool = Pool {
            cands: &self.cands,
            swaps: &self.swaps,
            tensor_of_swap: &self.swap_tensor,
            recomputes: &[],
        };
        let mut ix = Index::new(self.ctx, &pool, self.opts.lambda);
        let noted = self.best_fail.get();
        self.best_fail.set((u64::MAX, ""));
        let out = self.fit_queued(&pool, &mut ix, "hybrid", true);
        self.swap_only_fail.set(self.best_fail.get().0);
        self.best_fail.set(noted);
        self.swap_only.set(Some(out.clone()));
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
                Recs::Base => &self.recs()[..self.base_recs()],
                Recs::All => self.recs(),
            },
        };
        // One index serves every greedy run of both loops; `hybrid`, which
        // fits with swaps, recomputes and both, shares one of all options.
        let mut ix = match self.opts.strategy {
            Strategy::Hybrid => self.shared_index.take().unwrap_or_else(|| {
                let all = Pool {
                    swaps: &self.swaps,
                    tensor_of_swap: &self.swap_tensor,
                    recomputes: self.recs(),
                    ..pool
                };
                Index::new(self.ctx, &all, self.opts.lambda)
            }),
            _ => Index::new(self.ctx, &pool, self.opts.lambda),
        };
        let out = self.fit_queued(&pool, &mut ix, who, swap);
        if self.opts.strategy == Strategy::Hybrid {
            self.shared_index.set(Some(ix));
        }
        out
    }

    /// [`Planner::fit_with`] with swaps checked against the device-to-host
    /// queue; if that finds no plan and the pool swaps, without the check.
    fn fit_queued(
        &self,
        pool: &Pool<'_>,
        ix: &mut Index,
        who: &'static str,
        swap: bool,
    ) -> Option<Planned> {
        let out = self.fit_with(pool, ix, who, true);
        if out.is_none() && swap {
            return self.fit_with(pool, ix, who, false);
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
                return Some(self.planned_last(plan, v, who));
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
                return Some(self.planned_last(plan, v, who));
            }
            self.note_fail(v.peak_bytes, who);
        }
        None
    }

    /// One greedy run at `target`, its plan and the simulator's verdict.
    /// Swap-ins are placed so queued copies still arrive in time; if that
    /// holds too much memory, the triggers from the options are used. The
    /// plan returned is the one the last `judge` call judged
    /// ([`Planner::planned_last`]), and the choices returned carry its
    /// triggers.
    pub(super) fn round(
        &self,
        pool: &Pool<'_>,
        ix: &mut Index,
        target: u64,
        floor: &[f64],
        queue_check: bool,
    ) -> Option<(Arc<Plan>, SimResult, Chosen)> {
        let guide = Guide {
            out_floor: floor,
            queue_check,
        };
        let mut chosen = choose_indexed(self.ctx, pool, ix, target, guide);
        if chosen.recompute_seen {
            self.chose_recompute.set(true);
        }
        // Placing moves swap-in triggers only: the options' own are kept
        // to fall back on, rather than a copy of every choice.
        let own: Vec<u32> = (chosen.swaps.iter())
            .flat_map(|o| o.ins.iter().map(|i| i.trigger))
            .collect();
        place_swap_ins(self.ctx, &self.cands, &mut chosen.swaps);
        let (mut plan, mut v) = self.judge(self.to_plan(&chosen)).ok()?;
        let ins = || chosen.swaps.iter().flat_map(|o| o.ins.iter());
        if v.peak_bytes > self.opts.budget && ins().zip(&own).any(|(i, &t)| i.trigger != t) {
            let ins = chosen.swaps.iter_mut().flat_map(|o| o.ins.iter_mut());
            ins.zip(&own).for_each(|(i, &t)| i.trigger = t);
            (plan, v) = self.judge(self.to_plan(&chosen)).ok()?;
        }
        Some((plan, v, chosen))
    }
}
