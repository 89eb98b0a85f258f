//! The recompute options the planner offers the greedy: units, segments of
//! units, spans of cut segments, and backward tensors rebuilt from small
//! inputs.
//!
//! # The rule
//! - every unit (`partition.rs`);
//! - segments of 2, 4 and 8 consecutive units (in schedule order of their
//!   heads, at half-width strides) recomputed together from the segment's
//!   inputs: Chen et al.'s checkpointing at several granularities. A
//!   segment frees the tensors its units hand each other, which a single
//!   unit must keep for its successor's clone;
//! - spans of 1, 2 and 4 cut segments (`cuts.rs`) recomputed from the
//!   tensor crossing the cut before them; the buffer crossing the cut after
//!   them is kept (a checkpoint for the next span), so spans combine;
//! - for `hybrid` only, the backward tensors rebuilt from small inputs
//!   (`rebuild.rs`).
//!
//! Each becomes options through `options::recompute_options` (the trigger,
//! the freed buffers, the cost). A span whose nodes and freed candidates
//! equal a unit's or a segment's (on graphs of small blocks a cut segment
//! is one unit) would give the same options again: they are placed once
//! (`tried.rs`).
//!
//! # Complexity
//! O(N + E) for the units, O(sum of segment sizes) = O(4 N) for the
//! segments, O(3 N) for the spans; the rebuilt tensors as
//! [`small_input_units`] plus O(MAX_OPS * C) to place them.

use super::candidates::SwapCandidate;
use super::cuts::Cuts;
use super::options::{recompute_options as unit_options, Ctx, RecomputeOpt, SpanRule, Work};
use super::partition::partition;
use super::rebuild::small_input_units;
use super::tried::Reuse;
use crate::graph::NONE;

/// Segment widths (units), each placed at half-width strides.
const SEGMENT_WIDTHS: [usize; 3] = [2, 4, 8];

/// Widths (cut segments, `cuts.rs`) of the spans recomputed from the
/// tensor crossing the cut before them, placed at their own width.
const SPAN_WIDTHS: [usize; 3] = [1, 2, 4];

/// Recompute options: every unit, and segments of 2, 4 and 8 consecutive
/// units (in schedule order of their heads) recomputed together from the
/// segment's inputs, Chen et al.'s checkpointing at several granularities.
/// A segment frees the tensors its units hand each other, which a single
/// unit must keep for its successor's clone.
///
/// # Complexity
/// O(N + E) for the units, O(sum of segment sizes) = O(4 N) for the segments.
pub(super) fn recompute_options(
    ctx: &Ctx<'_>,
    cands: &[SwapCandidate],
    cuts: &Cuts,
) -> Vec<RecomputeOpt> {
    options_of(ctx, cands, cuts, true)
}

/// [`recompute_options`], with the spans' options placed once (`once`) or
/// as often as a span gives them (to test `tried.rs`).
fn options_of(
    ctx: &Ctx<'_>,
    cands: &[SwapCandidate],
    cuts: &Cuts,
    once: bool,
) -> Vec<RecomputeOpt> {
    let units = partition(ctx.g, ctx.s);
    let gap_of = gap_index(ctx, cands);
    let mut work = Work::new(ctx.g);
    let reuse = |r| if once { r } else { Reuse::Off };
    work.reusing(reuse(Reuse::Record));
    for (u, nodes) in units.units.iter().enumerate() {
        unit_options(ctx, u, nodes, SpanRule::ANY, cands, &gap_of, &mut work);
    }
    let n = units.units.len();
    // A segment's nodes in schedule order: its units' positions sorted
    // (plain integers, each unique), then read off the schedule.
    let (mut at, mut nodes) = (Vec::new(), Vec::new());
    for width in SEGMENT_WIDTHS {
        for start in (0..n).step_by(width / 2) {
            let end = (start + width).min(n);
            if end - start < 2 {
                continue;
            }
            at.clear();
            at.extend(
                units.units[start..end]
                    .iter()
                    .flatten()
                    .map(|&v| ctx.s.pos[v as usize]),
            );
            at.sort_unstable();
            nodes.clear();
            nodes.extend(at.iter().map(|&p| ctx.s.order[p as usize]));
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
    work.reusing(reuse(Reuse::Find));
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
pub(super) fn rebuild_options(
    ctx: &Ctx<'_>,
    cands: &[SwapCandidate],
    min_bytes: u64,
    first: usize,
) -> Vec<RecomputeOpt> {
    let gap_of = gap_index(ctx, cands);
    let mut work = Work::new(ctx.g);
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
pub(super) fn gap_index(ctx: &Ctx<'_>, cands: &[SwapCandidate]) -> Vec<u32> {
    let mut gap_of = vec![NONE; ctx.g.num_tensors()];
    for (i, c) in cands.iter().enumerate() {
        gap_of[c.tensor as usize] = i as u32;
    }
    gap_of
}

/// A span of cut segments `a..b`, and whether its recompute frees only
/// buffers read late by the backward pass ([`SpanRule`]).
#[derive(Debug, Clone, Copy)]
pub(super) struct Span {
    pub(super) a: usize,
    pub(super) b: usize,
    pub(super) backward_only: bool,
}

/// Recompute options of a span of cut segments: its recomputable ops
/// cloned from the tensor crossing the cut before it. The buffer crossing
/// the cut after it is kept (a checkpoint for the next span), so spans
/// combine. The greedy's pool gets every option (a U-Net's encoder span
/// may be recomputed for the decoder's forward reads of its skip
/// connections); the whole-plan spans of `spans_plan` free only what the
/// backward pass reads, as `keras.remat` does. The options are appended to
/// `work`'s.
pub(super) fn span_options(
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::cuts::{cut_segments, Made};
    use crate::synth::{graphdef, SynthKind, SynthSpec};

    /// An option's content but its `unit` (f64s by their bits).
    type Key = (
        Vec<u32>,
        Vec<(u32, u32)>,
        Vec<u32>,
        u32,
        Vec<u32>,
        u64,
        u64,
        u64,
        u64,
    );

    fn key(r: &RecomputeOpt) -> Key {
        (
            r.clones().to_vec(),
            r.saved().collect(),
            r.consumers().to_vec(),
            r.trigger,
            r.inputs().to_vec(),
            r.time_s.to_bits(),
            r.bytes,
            r.transient,
            r.extended,
        )
    }

    /// Placed once, the options are those placed as often as the spans
    /// give them, in the same order, less options equal but for their
    /// unit to one placed before. On the narrow residual step (a cut
    /// segment per unit) some are left out; on the others none need be.
    #[test]
    fn spans_place_an_option_once() {
        for (kind, dropped) in [
            (SynthKind::Narrow, true),
            (SynthKind::Mixed, false),
            (SynthKind::Transformer, false),
        ] {
            let spec = SynthSpec {
                kind,
                blocks: 8,
                ..SynthSpec::default()
            };
            let a = crate::analyze(&graphdef(&spec), &Default::default()).unwrap();
            let dev = crate::device::preset("v100-nvlink2").unwrap();
            let (times, _) = crate::api::op_times(&a.graph, &dev, &[]).unwrap();
            let ctx = Ctx::new(&a, &times, &dev);
            let cands = crate::plan::candidates::swap_candidates(ctx.g, ctx.s, ctx.l, 1, 1 << 16);
            let cuts = cut_segments(ctx.g, ctx.s, ctx.l, 1 << 16, Made::Plumbing);
            let all = options_of(&ctx, &cands, &cuts, false);
            let once = options_of(&ctx, &cands, &cuts, true);
            let mut seen = std::collections::HashSet::new();
            let mut kept = once.iter().peekable();
            for r in &all {
                let same = kept
                    .peek()
                    .is_some_and(|k| k.unit == r.unit && key(k) == key(r));
                if same {
                    kept.next();
                } else {
                    assert!(seen.contains(&key(r)), "{kind:?}: unit {} left out", r.unit);
                }
                seen.insert(key(r));
            }
            assert!(
                kept.next().is_none(),
                "{kind:?}: an option not placed before"
            );
            assert_eq!(once.len() < all.len(), dropped, "{kind:?}");
            assert!(!once.is_empty(), "{kind:?}");
        }
    }
}
