//! The strategies that are the fastest of other strategies' plans: `swap`
//! and `hybrid`.
//!
//! # The rule
//! - `swap`: with TFLMS parameters given, exactly TFLMS; otherwise the
//!   faster of the greedy over swaps alone (`fit.rs`) and the tuned TFLMS
//!   plan (`tflms_grid.rs`).
//! - `hybrid`: the fastest plan that fits among the greedy choosing between
//!   swap and recompute at every step (bytes freed per second of estimated
//!   cost; swap-outs queued on the device-to-host engine, recomputes fed by
//!   swapped-in checkpoints), the same greedy with backward tensors rebuilt
//!   from small inputs among its options too (`rebuild.rs`; graphs up to
//!   `grid_max_nodes`), the recompute plan, the published loop
//!   (`paper.rs`) started from the `swap` plan and from the TFLMS plan, and
//!   last Chen's and the "blocks" plans (`spans.rs`), each dropped
//!   unsimulated when it cannot beat the best so far. Ties keep the earlier
//!   plan. So `hybrid` is never slower than any other strategy.
//!
//! # The model
//! The simulator's step time ranks the plans; every plan has passed the
//! budgets (`Planner::fits`).
//!
//! # Complexity
//! The sum of the strategies run (see their files); plans reached twice are
//! judged once.

use super::fit::Recs;
use super::planner::{keep_faster, Planned, Planner};
use super::spans::BLOCK_WIDTHS;

impl Planner<'_> {
    /// `hybrid`: the fastest of the plans in the header's order (ties: the
    /// earlier), its evaluations those of every plan judged.
    pub(super) fn hybrid(&self) -> Option<Planned> {
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
        let chen = self.chen_within(beat(&best));
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
        best.map(|p| self.renamed(p, "swap"))
    }
}
