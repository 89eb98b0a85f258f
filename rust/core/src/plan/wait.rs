//! The waiting fallback of `swap` and `hybrid`: swaps the step waits for.
//!
//! # The rule
//! Every other swap option frees its original when its copy ends on the
//! compute-only clock, so no plan of theirs makes the step wait for a
//! swap-out; where compute outruns the link, the step reaches its peak
//! before the link can drain enough, and those plans stop far above what
//! swapping can reach. When no plan of hidden copies fits (`swap`: neither
//! its greedy nor the tuned TFLMS plan; `hybrid`: its greedy over swaps and
//! the forward units' recomputes), the same greedy (`greedy.rs`) runs on
//! swaps that wait (`options::waiting_swap_option`: the step does not pass
//! a release node right after the original's last forward reader before
//! the copy has ended), with the forward units' recomputes for `hybrid`.
//!
//! The targets descend from the unplanned peak whatever the budget: each
//! round's target is the lower of the previous round's target and the
//! simulated peak that round reached, less `1 / STEPS` of the unplanned
//! peak; the first plan that fits is taken. The rounds are the same at
//! every budget until one fits, so the smallest peak reached when asked
//! for one byte (`PlanError::Budget`'s `best_peak`) is a budget at which a
//! plan fits: that round's plan or an earlier one. The descent stops when
//! the greedy cannot bring its model under the target (the options are
//! exhausted), when a plan is within the device budget but over the
//! host's (more swaps will not help), or after `STEPS` rounds.
//!
//! # The model
//! A waiting swap's original is gone when its release node starts, so the
//! greedy's position model frees it from there whatever the link; the
//! copy's time not hidden by the compute before the release node is the
//! option's exposed time. The simulator judges: its compute stream holds
//! the release node until the copy ends (`simulate/stream.rs`,
//! `released`), and `release.rs`, placing the finished plan's release
//! nodes, keeps that node or an earlier one the wait already delays.
//!
//! # Complexity
//! O(C (log N + W d)) to place the options (C candidates, a release walk of
//! W = `release::MAX_WALK` ops of in-degree d), the greedy's index build
//! once, then at most `STEPS` greedy runs, each judged by one or two
//! simulations (`Planner::round`).

use super::fit::Recs;
use super::greedy::{Index, Pool};
use super::options::waiting_swap_option;
use super::planner::{swap_options, Planned, Planner};

/// The descent's step is the unplanned peak over this, and its bound on
/// rounds.
const STEPS: u64 = 64;

impl Planner<'_> {
    /// The greedy on waiting swaps (with the forward units' recomputes
    /// for `Recs::Base`), its targets descending from the unplanned peak
    /// (the header's rule); the first plan that fits.
    pub(super) fn fit_waiting(&self, recs: Recs, who: &'static str) -> Option<Planned> {
        let (swaps, tensor_of_swap) = swap_options(
            self.ctx,
            &self.cands,
            self.selected.as_deref(),
            waiting_swap_option,
        );
        let pool = Pool {
            cands: &self.cands,
            swaps: &swaps,
            tensor_of_swap: &tensor_of_swap,
            recomputes: match recs {
                Recs::None => &[],
                Recs::Base | Recs::All => &self.recs()[..self.base_recs()],
            },
        };
        if pool.swaps.is_empty() {
            return None;
        }
        let mut ix = Index::new(self.ctx, &pool, self.opts.lambda);
        self.descend(&pool, &mut ix, who)
    }

    /// The descent of the header's rule on `pool`.
    fn descend(&self, pool: &Pool<'_>, ix: &mut Index, who: &'static str) -> Option<Planned> {
        let top = self.ctx.l.peak_bytes;
        let step = (top / STEPS).max(1);
        let mut target = top.saturating_sub(step);
        for _ in 0..STEPS {
            let (plan, v, chosen) = self.round(pool, ix, target, &[], false)?;
            if self.fits(&v) {
                return Some(self.planned_last(plan, v, who));
            }
            self.note_fail(v.peak_bytes, who);
            if v.peak_bytes <= self.opts.budget || chosen.model_peak > target {
                break; // over the host budget only, or the options are exhausted
            }
            target = target.min(v.peak_bytes).saturating_sub(step);
        }
        None
    }
}
