//! Whole-plan recomputes of spans of the forward pass: Chen's sqrt(n)
//! checkpointing (`chen`) and `keras.remat` around every block (`hybrid`'s
//! "blocks" plans).
//!
//! # The rule
//! The forward pass's cut segments (`cuts.rs`) are grouped into spans:
//! about sqrt(M) segments per span for Chen, over the cuts only
//! activations cross (`Made::Activations`: a dropout mask or a rescaled
//! input, made from sources only, crosses none), 1 or 2 (`BLOCK_WIDTHS`)
//! for the blocks, over every strategy's cuts. Each span is recomputed from the tensor crossing the cut
//! before it, at its option freeing the most memory over time
//! (`freed_area`; ties: the earliest trigger); the tensors at the spans'
//! cuts are kept. The options free only what the backward pass reads, as
//! `keras.remat` does. The plan is judged against the budget, never tuned
//! to it.
//!
//! # The model
//! The compute stream runs every op and every clone in turn, so no plan's
//! step is shorter than their summed op times: a plan that cannot beat the
//! best so far is dropped before it is simulated, as soon as the spans
//! built so far decide it.
//!
//! # Complexity
//! O(T + N) to build a plan (the spans partition the forward ops), one
//! simulation; O(N + T + E) once for Chen's cuts.

use super::cuts::{cut_segments, sqrt_spans, Cuts, Made};
use super::greedy::Chosen;
use super::options::{Ctx, RecomputeOpt, Work};
use super::planner::{Planned, Planner};
use super::recomputes::{gap_index, span_options, Span};

/// Widths (cut segments) of `hybrid`'s whole-plan "blocks" candidates:
/// every block recomputed from its checkpoint, alone or in pairs.
pub(super) const BLOCK_WIDTHS: [usize; 2] = [1, 2];

/// Spans of `width` consecutive segments out of `m`, from the first.
fn block_spans(m: usize, width: usize) -> Vec<(usize, usize)> {
    (0..m)
        .step_by(width.max(1))
        .map(|a| (a, (a + width).min(m)))
        .collect()
}

/// Byte-positions a recompute frees: each saved buffer's bytes times the
/// positions from its last early read to the clone time.
fn freed_area(ctx: &Ctx<'_>, r: &RecomputeOpt) -> u128 {
    r.saved()
        .map(|(t, last_early)| {
            let span = r.trigger.saturating_sub(last_early);
            u128::from(ctx.g.tensors[t as usize].bytes) * u128::from(span)
        })
        .sum()
}

impl Planner<'_> {
    /// Chen's sqrt(n) checkpointing: the forward pass's cut segments in
    /// groups of about sqrt(M), each group recomputed from the tensor
    /// crossing the cut before it (its option freeing the most bytes);
    /// the tensors at the groups' cuts are kept. Judged against the budget,
    /// never tuned to it.
    pub(super) fn chen(&self) -> Option<Planned> {
        self.chen_within(f64::INFINITY)
    }

    /// Chen's plan, `None` when it does not fit or cannot be faster than
    /// `beat` seconds (`spans_plan`).
    pub(super) fn chen_within(&self, beat: f64) -> Option<Planned> {
        let cuts = self.chen_cuts();
        self.spans_plan(cuts, &sqrt_spans(cuts.segments.len()), "chen", beat)
    }

    /// The cuts Chen's checkpoints sit at: only activations cross them.
    fn chen_cuts(&self) -> &Cuts {
        let (ctx, min_bytes) = (self.ctx, self.opts.min_bytes);
        (self.chen_cuts)
            .get_or_init(|| cut_segments(ctx.g, ctx.s, ctx.l, min_bytes, Made::Activations))
    }

    /// `keras.remat` around every block, chosen from the structure: spans
    /// of `width` consecutive cut segments, each recomputed from the tensor
    /// crossing the cut before it (its option freeing the most bytes).
    /// `None` when these are Chen's spans over Chen's cuts (already
    /// judged), or the plan does not fit or cannot be faster than `beat`
    /// seconds.
    pub(super) fn blocks(&self, width: usize, beat: f64) -> Option<Planned> {
        let m = self.cuts().segments.len();
        let spans = block_spans(m, width);
        if m < 2 || (spans == sqrt_spans(m) && self.chen_cuts() == self.cuts()) {
            return None;
        }
        self.spans_plan(self.cuts(), &spans, "blocks", beat)
    }

    /// One recompute per span of `cuts`' segments, at its option freeing the most memory over
    /// time (`freed_area`; ties: the earliest trigger), judged by the
    /// simulator against the budget. The most bytes alone would favour a
    /// clone time early in the forward pass, where every tensor of the span
    /// is idle but nothing is freed for long (a label buffer read by the
    /// loss sets such a time). Not simulated when it cannot be faster than
    /// `beat` seconds: the compute stream runs every op and every clone in
    /// turn, so no plan's step is shorter than their summed op times; the
    /// spans are built in order and the sum checked after each, so a plan
    /// that cannot win is dropped after the spans that decide it.
    pub(super) fn spans_plan(
        &self,
        cuts: &Cuts,
        spans: &[(usize, usize)],
        who: &'static str,
        beat: f64,
    ) -> Option<Planned> {
        let ctx = self.ctx;
        let gap_of = gap_index(ctx, &self.cands);
        let mut work = Work::new(ctx.g);
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
            span_options(ctx, a, cuts, span, &self.cands, &gap_of, &mut work);
            let options = work.take();
            let best = (options.into_iter())
                .filter(|r| {
                    m.as_ref()
                        .is_none_or(|m| r.clones().iter().all(|&v| m[v as usize]))
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
        let (plan, v) = self.judge(self.to_plan(&chosen)).ok()?;
        if !self.fits(&v) {
            self.note_fail(v.peak_bytes, who);
            return None;
        }
        Some(self.planned(plan, v, who))
    }
}
