//! The `tflms` strategy: TFLMS's swapping (`tflms.rs`) with the given
//! parameters, or the fastest of a parameter grid.
//!
//! # The rule
//! With parameters given, exactly TFLMS's plan. Otherwise, on graphs up to
//! `grid_max_nodes`, every point of a 12-point grid (thresholds from a
//! quarter of the schedule down to none, triggers 1, 8 or 32 ops ahead,
//! readers grouped within the same distance) is planned and judged, and the
//! fastest plan that fits wins; beyond `grid_max_nodes`, TFLMS's defaults
//! (threshold N/64, 8 ahead, groups of 8). Swaps of tensors whose producer
//! the selection excludes are dropped.
//!
//! # The model
//! The simulator judges each point; TFLMS itself has no cost model.
//!
//! # Complexity
//! At most 12 TFLMS plans (O(T + E log E) each) and 12 simulations,
//! computed once per planner.

use super::planner::{Planned, Planner};
use super::tflms::{tflms_plan, TflmsParams};

impl Planner<'_> {
    /// TFLMS: with the given parameters, or the best of the parameter grid
    /// (graphs up to `grid_max_nodes`; beyond, TFLMS's own defaults).
    /// Computed once per planner.
    pub(super) fn tflms_tuned(&self) -> Option<Planned> {
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

    fn tflms(&self, p: &TflmsParams) -> Option<Planned> {
        let mut plan = tflms_plan(self.ctx.g, self.ctx.s, self.ctx.l, p);
        if let Some(m) = &self.selected {
            let g = self.ctx.g;
            plan.swaps
                .retain(|s| m[g.tensors[s.tensor as usize].node as usize]);
        }
        let (plan, v) = self.judge(plan).ok()?;
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
}
