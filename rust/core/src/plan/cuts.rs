//! Cut points of the forward pass: where a single activation carries the
//! whole forward computation on, the places Chen et al.'s checkpointing
//! ("Training Deep Nets with Sublinear Memory Cost", 2016) keeps.
//!
//! # The rule
//! Walk the forward ops in schedule order. A boundary between two
//! consecutive forward ops is a *cut* when exactly one activation crosses
//! it: one tensor of at least `min_bytes` made before it (by a forward op
//! that may be recomputed, not a source) and read by a forward op after it.
//! Variables, constants and fed inputs do not count (they stay on the device
//! anyway), nor do buffers below `min_bytes` (the planners leave them alone:
//! the labels' cast and the loss's shape arithmetic, made early and read at
//! the end, would otherwise cross every boundary). A cut is kept
//! when the forward ops since the previous kept cut include a checkpoint op
//! (`opkind::is_checkpoint`), so a segment is at least one convolution or
//! matmul with what follows it: a residual block, a transformer layer, a
//! U-Net level's convolutions. The segments are the recomputable forward ops
//! between kept cuts; `boundary[i]` is the tensor crossing the cut after
//! segment `i` (`NONE` after the last).
//!
//! Recomputing a span of consecutive segments from the tensor crossing the
//! cut before it frees every activation inside the span except that tensor:
//! what `keras.remat` around a block does, chosen here from the structure.
//!
//! # Complexity
//! O(N + E): one pass for the crossing counts (a difference array; the XOR
//! of the crossing tensors' ids names the one tensor where the count is 1).

use crate::graph::{Graph, NodeFlags, Phase, NONE};
use crate::opkind;
use crate::schedule::Schedule;

/// Segments between kept cuts, and the tensor crossing each kept cut.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Cuts {
    pub segments: Vec<Vec<u32>>,
    pub boundary: Vec<u32>,
}

/// Finds the forward pass's cuts and segments.
pub fn cut_segments(g: &Graph, s: &Schedule, min_bytes: u64) -> Cuts {
    let fwd: Vec<u32> = s
        .order
        .iter()
        .copied()
        .filter(|&v| g.phase[v as usize] == Phase::Forward)
        .collect();
    let m = fwd.len();
    let mut fpos = vec![NONE; g.num_nodes()];
    for (i, &v) in fwd.iter().enumerate() {
        fpos[v as usize] = i as u32;
    }
    // count[b], xor[b]: activations crossing boundary b (after fwd[b]).
    let mut dcount = vec![0i64; m + 1];
    let mut dxor = vec![0u32; m + 1];
    for t in 0..g.num_tensors() as u32 {
        let tt = &g.tensors[t as usize];
        let p = tt.node as usize;
        if tt.alias_of != NONE
            || tt.bytes < min_bytes.max(1)
            || fpos[p] == NONE
            || g.nodes[p].flags.has(NodeFlags::SOURCE)
            || g.nodes[p].flags.has(NodeFlags::NO_RECOMPUTE)
        {
            continue;
        }
        let last = g
            .consumers(t)
            .iter()
            .map(|&c| fpos[c as usize])
            .filter(|&f| f != NONE)
            .max();
        if let Some(last) = last.filter(|&l| l > fpos[p]) {
            let (a, b) = (fpos[p] as usize, last as usize);
            dcount[a] += 1;
            dcount[b] -= 1;
            dxor[a] ^= t;
            dxor[b] ^= t;
        }
    }
    let mut cuts = Cuts::default();
    let (mut count, mut xor) = (0i64, 0u32);
    let mut seg: Vec<u32> = Vec::new();
    let mut has_checkpoint = false;
    for (b, &v) in fwd.iter().enumerate() {
        if !g.nodes[v as usize].flags.has(NodeFlags::NO_RECOMPUTE) {
            seg.push(v);
            has_checkpoint |= opkind::is_checkpoint(g.op_name(v));
        }
        count += dcount[b];
        xor ^= dxor[b];
        if count == 1 && has_checkpoint && b + 1 < m {
            cuts.segments.push(std::mem::take(&mut seg));
            cuts.boundary.push(xor);
            has_checkpoint = false;
        }
    }
    if !seg.is_empty() {
        cuts.segments.push(seg);
        cuts.boundary.push(NONE);
    }
    cuts
}

/// Chen's spacing: segments grouped `ceil(sqrt(M))` at a time, so about
/// sqrt(M) checkpoints are kept and each recompute spans about sqrt(M)
/// segments. Returns the spans as (first segment, one past the last).
pub fn sqrt_spans(num_segments: usize) -> Vec<(usize, usize)> {
    if num_segments == 0 {
        return Vec::new();
    }
    let w = (num_segments as f64).sqrt().ceil() as usize;
    (0..num_segments)
        .step_by(w)
        .map(|a| (a, (a + w).min(num_segments)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::synth::{graphdef, SynthKind, SynthSpec};

    #[test]
    fn residual_blocks_are_cut_between_blocks() {
        for kind in [SynthKind::Residual, SynthKind::Transformer] {
            let spec = SynthSpec {
                kind,
                blocks: 6,
                batch: 2,
                size: 8,
                channels: 8,
                ..SynthSpec::default()
            };
            let a = crate::analyze(&graphdef(&spec), &Default::default()).unwrap();
            let c = cut_segments(&a.graph, &a.schedule, 1024);
            // At least one cut per block (the shortcut and the branch meet
            // at the block's end), none inside a residual branch.
            assert!(
                c.segments.len() >= 6,
                "{kind:?}: {} segments",
                c.segments.len()
            );
            assert_eq!(c.segments.len(), c.boundary.len());
            assert_eq!(*c.boundary.last().unwrap(), NONE);
            // Every crossing tensor is made inside the segment before its cut.
            for (seg, &t) in c.segments.iter().zip(&c.boundary).rev().skip(1) {
                let p = a.graph.tensors[t as usize].node;
                assert!(seg.contains(&p), "{kind:?}");
            }
            let n: usize = c.segments.iter().map(Vec::len).sum();
            let fwd = (0..a.graph.num_nodes())
                .filter(|&v| {
                    a.graph.phase[v] == Phase::Forward
                        && !a.graph.nodes[v].flags.has(NodeFlags::NO_RECOMPUTE)
                })
                .count();
            assert_eq!(n, fwd, "every recomputable forward op is in one segment");
        }
    }

    #[test]
    fn sqrt_spans_cover_every_segment_once() {
        assert_eq!(sqrt_spans(0), vec![]);
        assert_eq!(sqrt_spans(1), vec![(0, 1)]);
        assert_eq!(sqrt_spans(9), vec![(0, 3), (3, 6), (6, 9)]);
        assert_eq!(sqrt_spans(10), vec![(0, 4), (4, 8), (8, 10)]);
    }
}
