//! Cut points of the forward pass: where a single activation carries the
//! whole forward computation on, the places Chen et al.'s checkpointing
//! ("Training Deep Nets with Sublinear Memory Cost", 2016) keeps.
//!
//! # The rule
//! Walk the forward ops in schedule order. A boundary between two
//! consecutive forward ops is a *cut* when exactly one activation crosses
//! it: one buffer of at least `min_bytes` made before it (by a forward op
//! that may be recomputed, not a source) and read by a forward op after it,
//! directly or through any alias of it (a `Reshape` read later keeps its
//! owner's buffer alive: the buffer crosses up to the alias's last forward
//! reader). Variables, constants and fed inputs do not count (they stay on
//! the device anyway), nor do buffers below `min_bytes` (the planners leave
//! them alone), nor *plumbing*: buffers whose producer's forward ancestry
//! is sources only (no recomputable op with an activation input on the way)
//! and that feed no checkpoint op, such as the labels' cast and reshape or
//! the loss's shape arithmetic, made at the start and read only by the loss;
//! they would otherwise cross every boundary. Chen's own cuts
//! ([`Made::Activations`]) skip every buffer made from sources only, the
//! ones feeding a checkpoint op too: such a buffer carries no activation
//! on (the forward computation does not pass through it), and the schedule
//! may place its producer anywhere before its reader, since its inputs are
//! ready from the start: a dropout mask drawn at the start of the forward
//! pass and read by the classifier's dropout, or the rescaled input read by
//! the stem's normalisation, would otherwise cross every boundary between
//! and leave a graph with a handful of cuts (EfficientNetB0: 3 segments for
//! its 16 blocks). A span recomputed across such a buffer reads it from
//! outside the span, as it reads a variable. This is structural: no op or
//! node names are consulted beyond `opkind::is_checkpoint`. A cut is kept
//! when the forward ops since the previous kept cut include a checkpoint op
//! (`opkind::is_checkpoint`), so a segment is at least one convolution or
//! matmul with what follows it: a residual block, a transformer layer, a
//! U-Net level's convolutions. The segments are the recomputable forward ops
//! between kept cuts; `boundary[i]` is the buffer (an owner tensor) crossing
//! the cut after segment `i` (`NONE` after the last).
//!
//! Recomputing a span of consecutive segments from the tensor crossing the
//! cut before it frees every activation inside the span except that tensor:
//! what `keras.remat` around a block does, chosen here from the structure.
//!
//! # Complexity
//! O(N + T + E): one pass in schedule order for the source-only ancestry,
//! one in reverse for the checkpoint-feeding ops, one over tensors for each
//! buffer's last forward reader (aliases' readers folded into their owner's),
//! and one for the crossing counts (a difference array; the XOR of the
//! crossing buffers' ids names the one buffer where the count is 1).

use crate::graph::{Graph, NodeFlags, Phase, NONE};
use crate::liveness::Liveness;
use crate::opkind;
use crate::schedule::Schedule;

/// Which buffers made from sources only (no recomputable op with an
/// activation input in their forward ancestry) cross no boundary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Made {
    /// Plumbing only: those that feed no checkpoint op (the cuts of every
    /// strategy's span options).
    Plumbing,
    /// Every one of them: only activations cross (Chen's checkpoints).
    Activations,
}

/// Segments between kept cuts, and the tensor crossing each kept cut.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Cuts {
    pub segments: Vec<Vec<u32>>,
    pub boundary: Vec<u32>,
}

/// Finds the forward pass's cuts and segments.
/// `skip` says which buffers made from sources only cross no boundary.
pub(crate) fn cut_segments(
    g: &Graph,
    s: &Schedule,
    l: &Liveness,
    min_bytes: u64,
    skip: Made,
) -> Cuts {
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
    let plumbing = plumbing(g, s, &fwd, skip);
    // Last forward reader of every buffer, over the owner and its aliases.
    let mut last = vec![NONE; g.num_tensors()];
    for t in 0..g.num_tensors() {
        let o = l.owner[t] as usize;
        for &c in g.consumers(t as u32) {
            let f = fpos[c as usize];
            if f != NONE && (last[o] == NONE || f > last[o]) {
                last[o] = f;
            }
        }
    }
    // count[b], xor[b]: activations crossing boundary b (after fwd[b]).
    let mut dcount = vec![0i64; m + 1];
    let mut dxor = vec![0u32; m + 1];
    for t in 0..g.num_tensors() as u32 {
        let tt = &g.tensors[t as usize];
        let p = tt.node as usize;
        if l.owner[t as usize] != t
            || tt.bytes < min_bytes.max(1)
            || fpos[p] == NONE
            || g.nodes[p].flags.has(NodeFlags::SOURCE)
            || g.nodes[p].flags.has(NodeFlags::NO_RECOMPUTE)
            || plumbing[p]
        {
            continue;
        }
        let last = last[t as usize];
        if last != NONE && last > fpos[p] {
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
    let is_checkpoint = checkpoint_ops(g);
    for (b, &v) in fwd.iter().enumerate() {
        let node = &g.nodes[v as usize];
        if !node.flags.has(NodeFlags::NO_RECOMPUTE) {
            seg.push(v);
            has_checkpoint |= is_checkpoint[node.op as usize];
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

/// Per node: is it plumbing (every input, transitively, made from sources
/// by non-checkpoint ops, and, under [`Made::Plumbing`], no forward path
/// from it reaches a checkpoint op)? Sources themselves count as
/// source-only; a node without inputs that is not a source does not.
fn plumbing(g: &Graph, s: &Schedule, fwd: &[u32], skip: Made) -> Vec<bool> {
    let n = g.num_nodes();
    let is_checkpoint = checkpoint_ops(g);
    let is_checkpoint = |v: u32| is_checkpoint[g.nodes[v as usize].op as usize];
    let mut src_only = vec![false; n];
    for &v in &s.order {
        let vi = v as usize;
        let ins = g.inputs(v);
        src_only[vi] = g.nodes[vi].flags.has(NodeFlags::SOURCE)
            || (!ins.is_empty()
                && !is_checkpoint(v)
                && ins
                    .iter()
                    .all(|&t| src_only[g.tensors[t as usize].node as usize]));
    }
    let mut feeds = vec![false; n];
    if skip == Made::Activations {
        return src_only;
    }
    for &v in fwd.iter().rev() {
        feeds[v as usize] = is_checkpoint(v)
            || g.outputs(v).any(|t| {
                g.consumers(t)
                    .iter()
                    .any(|&c| g.phase[c as usize] == Phase::Forward && feeds[c as usize])
            });
    }
    (0..n).map(|v| src_only[v] && !feeds[v]).collect()
}

/// Per op type of `g` (`g.ops`): is it a checkpoint op
/// (`opkind::is_checkpoint`)? Matched once per type, not once per node.
fn checkpoint_ops(g: &Graph) -> Vec<bool> {
    g.ops.iter().map(|op| opkind::is_checkpoint(op)).collect()
}

/// Chen's spacing: segments grouped `ceil(sqrt(M))` at a time, so about
/// sqrt(M) checkpoints are kept and each recompute spans about sqrt(M)
/// segments. Returns the spans as (first segment, one past the last).
pub(crate) fn sqrt_spans(num_segments: usize) -> Vec<(usize, usize)> {
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
            let c = cut_segments(&a.graph, &a.schedule, &a.liveness, 1024, Made::Plumbing);
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

    /// A buffer read forward through an alias (`context/Reshape` of the
    /// attention context, read by the output projection) crosses every
    /// boundary up to the alias's reader: no cut falls between the alias op
    /// and its reader, and every cut's boundary is the only buffer crossing.
    #[test]
    fn a_buffer_read_through_an_alias_crosses_the_boundary() {
        let spec = SynthSpec {
            kind: SynthKind::Transformer,
            blocks: 3,
            batch: 2,
            size: 32,
            channels: 32,
            ..SynthSpec::default()
        };
        let a = crate::analyze(&graphdef(&spec), &Default::default()).unwrap();
        let (g, l) = (&a.graph, &a.liveness);
        let c = cut_segments(g, &a.schedule, l, 1024, Made::Plumbing);
        let fwd_pos =
            |v: u32| (g.phase[v as usize] == Phase::Forward).then(|| a.schedule.pos[v as usize]);
        let mut aliases_read_forward = 0;
        for (seg, &b) in c.segments.iter().zip(&c.boundary) {
            let Some(&end) = seg.last() else { continue };
            let cut = a.schedule.pos[end as usize];
            for t in 0..g.num_tensors() as u32 {
                let o = l.owner[t as usize];
                if o == t || g.tensors[o as usize].bytes < 1024 {
                    continue;
                }
                let made = a.schedule.pos[g.tensors[t as usize].node as usize];
                let read_after = g
                    .consumers(t)
                    .iter()
                    .filter_map(|&r| fwd_pos(r))
                    .any(|p| p > cut);
                if made <= cut && read_after {
                    assert_eq!(
                        o,
                        b,
                        "{} crosses the cut after {}",
                        g.tensor_name(t),
                        g.nodes[end as usize].name
                    );
                }
                if read_after {
                    aliases_read_forward += 1;
                }
            }
        }
        assert!(
            aliases_read_forward > 0,
            "the graph reads aliases in the forward pass"
        );
        assert!(
            !c.segments.iter().any(|s| s
                .last()
                .is_some_and(|&v| g.nodes[v as usize].name.ends_with("context/Reshape"))),
            "a cut between the context's Reshape and the output projection"
        );
        assert!(c.segments.len() >= 3);
    }

    /// A mask made from sources only (a dropout mask of a seed), scheduled
    /// after the first of four matrix products and read before the last,
    /// feeds a matrix product: it crosses every boundary up to its reader,
    /// so every strategy's cuts (`Made::Plumbing`) have none after the
    /// second and third products, Chen's (`Made::Activations`) one after
    /// each product.
    #[test]
    fn a_mask_made_from_sources_crosses_no_boundary_of_chen() {
        use crate::build::{build, BuildOptions, NodeSpec};
        let spec = |name, op, inputs: &[&'static str]| NodeSpec::test(name, op, inputs, &[4, 4]);
        let g = build(
            &[
                spec("x", "Placeholder", &[]),
                spec("w", "Placeholder", &[]),
                spec("seed", "Placeholder", &[]),
                spec("mask", "Neg", &["seed"]),
                spec("h1", "MatMul", &["x", "w"]),
                spec("r1", "Relu", &["h1"]),
                spec("h2", "MatMul", &["r1", "w"]),
                spec("r2", "Relu", &["h2"]),
                spec("h3", "MatMul", &["r2", "w"]),
                spec("r3", "Relu", &["h3"]),
                spec("d", "Mul", &["r3", "mask"]),
                spec("h4", "MatMul", &["d", "w"]),
                spec("loss", "Sum", &["h4"]),
            ],
            &BuildOptions {
                loss: Some("loss:0".into()),
                persistent_bytes: Some(0),
                ..Default::default()
            },
        )
        .unwrap();
        let a = crate::analyze_graph(g).unwrap();
        let (g, s) = (&a.graph, &a.schedule);
        let pos = |n: &str| {
            s.pos[(0..g.num_nodes())
                .find(|&v| g.node_name(v as u32) == n)
                .unwrap()]
        };
        assert!(
            pos("h1") < pos("mask") && pos("mask") < pos("r1"),
            "the order the test assumes"
        );
        let names = |c: &Cuts| -> Vec<String> {
            let kept = &c.boundary[..c.boundary.len() - 1];
            kept.iter().map(|&t| g.tensor_name(t).to_string()).collect()
        };
        let every = cut_segments(g, s, &a.liveness, 1, Made::Plumbing);
        assert_eq!(names(&every), ["h1:0", "d:0", "h4:0"]);
        let chen = cut_segments(g, s, &a.liveness, 1, Made::Activations);
        assert_eq!(names(&chen), ["h1:0", "h2:0", "h3:0", "h4:0"]);
        let n = |c: &Cuts| c.segments.iter().map(Vec::len).sum::<usize>();
        assert_eq!(
            n(&every),
            n(&chen),
            "every recomputable forward op in one segment"
        );
    }

    #[test]
    fn sqrt_spans_cover_every_segment_once() {
        assert_eq!(sqrt_spans(0), vec![]);
        assert_eq!(sqrt_spans(1), vec![(0, 1)]);
        assert_eq!(sqrt_spans(9), vec![(0, 3), (3, 6), (6, 9)]);
        assert_eq!(sqrt_spans(10), vec![(0, 4), (4, 8), (8, 10)]);
    }
}
