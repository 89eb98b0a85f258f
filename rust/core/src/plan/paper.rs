//! The `hybrid-paper` strategy: the published hybrid of swapping and
//! recomputation, as a loop over a swap plan.
//!
//! # The rule
//! Start from a swap plan (the tuned TFLMS plan for `hybrid-paper`; `hybrid`
//! also starts it from the `swap` plan). In decreasing order of the bytes
//! each forward unit makes the link carry, replace the swaps of the unit's
//! tensors by the unit's recompute when the simulated step time drops and
//! the budget holds. A recompute is skipped when one of its inputs is
//! swapped or freed by an earlier recompute, or when a tensor it frees is
//! already freed or read by an earlier recompute.
//!
//! # The model
//! The simulator decides each replacement. Units are tried one at a time
//! (the paper) up to `max_evals` simulations, fewer on big graphs (about
//! 4 * 10^6 simulated nodes in all); beyond that, in equal chunks so the
//! whole list is seen within the bound. A trial whose summed op and clone
//! times cannot beat the current step is dropped unsimulated.
//!
//! # Complexity
//! O(R log R) to order the units, O(plan size) per trial, at most
//! `max_evals` simulations.

use rustc_hash::{FxHashMap, FxHashSet};

use super::planner::{Planned, Planner};
use super::Plan;
use crate::graph::NONE;

impl Planner<'_> {
    /// The published hybrid: replace the swaps of a unit by its recompute,
    /// largest link bytes first, when the simulator says it is faster.
    /// Units are tried one at a time (the paper) up to `max_evals`
    /// simulations; beyond that, in equal chunks so the whole list is seen
    /// within the bound. A trial whose summed op and clone times cannot beat
    /// the current step is dropped unsimulated (`cannot_beat`).
    pub(super) fn paper(&self, start: Planned) -> Option<Planned> {
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
            let mut trial = Plan::clone(&cur.plan);
            let (mut f, mut p) = (freed.clone(), pinned.clone());
            let mut swapped: FxHashSet<u32> = trial.swaps.iter().map(|s| owner(s.tensor)).collect();
            let mut unswap: FxHashSet<u32> = FxHashSet::default();
            for &r in group {
                let rec = &self.recs()[r];
                let usable = rec
                    .inputs()
                    .iter()
                    .all(|&x| !swapped.contains(&owner(x)) && !f.contains(&owner(x)))
                    && rec.saved().all(|(t, _)| !f.contains(&t) && !p.contains(&t));
                if !usable {
                    continue;
                }
                if rec.saved().any(|(t, _)| swapped.contains(&t)) {
                    // Their swaps leave the trial after the group (one pass
                    // over the swaps, not one per recompute).
                    for (t, _) in rec.saved() {
                        swapped.remove(&t);
                        unswap.insert(t);
                    }
                }
                trial.recomputes.push(self.recompute_of(rec));
                f.extend(rec.saved().map(|(t, _)| t));
                p.extend(rec.inputs().iter().map(|&x| owner(x)));
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
            let Ok((trial, v)) = self.judge(trial) else {
                continue;
            };
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
        for (i, r) in self.recs()[..self.base_recs()].iter().enumerate() {
            let bytes: u64 = r.saved().filter_map(|(t, _)| swapped.get(&t)).sum();
            if bytes > 0 {
                scored.push((bytes, i));
            }
        }
        scored.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        scored.into_iter().map(|(_, i)| i).collect()
    }
}
