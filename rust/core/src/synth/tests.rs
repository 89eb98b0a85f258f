//! Tests of the synthetic generator: every kind analyses with its loss and phases,
//! deterministically, in every float dtype.

use super::writer::f16_bits;
use super::*;
use crate::build::BuildOptions;
use crate::graph::Phase;

fn small(kind: SynthKind, blocks: usize) -> SynthSpec {
    SynthSpec {
        kind,
        blocks,
        batch: 2,
        size: 4,
        channels: 8,
        dtype: DType::FLOAT,
    }
}

const KINDS: [SynthKind; 4] = [
    SynthKind::Residual,
    SynthKind::Transformer,
    SynthKind::Mixed,
    SynthKind::Narrow,
];

#[test]
fn every_kind_analyzes_with_the_loss_and_all_phases() {
    for kind in KINDS {
        for blocks in [0, 1, 3] {
            let spec = small(kind, blocks);
            let bytes = graphdef(&spec);
            let a = crate::analyze(&bytes, &BuildOptions::default()).unwrap();
            let g = &a.graph;
            assert_eq!(
                g.tensor_name(g.loss),
                "sparse_categorical_crossentropy/div_no_nan:0",
                "{kind:?} {blocks}"
            );
            for p in [Phase::Forward, Phase::Backward, Phase::Update] {
                assert!(g.phase.contains(&p), "{kind:?} {blocks}: no {p:?} op");
            }
            assert_eq!(g.num_nodes(), node_count(&spec), "{kind:?} {blocks}");
            assert!(a.liveness.peak_bytes > g.persistent_bytes);
        }
    }
}

#[test]
fn generation_is_deterministic() {
    for kind in KINDS {
        let spec = small(kind, 2);
        assert_eq!(graphdef(&spec), graphdef(&spec));
    }
}

#[test]
fn gradient_and_update_ops_are_in_their_phases() {
    let bytes = graphdef(&small(SynthKind::Mixed, 2));
    let g = crate::analyze(&bytes, &BuildOptions::default())
        .unwrap()
        .graph;
    for (i, n) in g.nodes.iter().enumerate() {
        let op = g.ops[n.op as usize].as_ref();
        if op.ends_with("Grad") || op.starts_with("Conv2DBackprop") {
            assert_eq!(g.phase[i], Phase::Backward, "{}", n.name);
        }
        if op.starts_with("Assign") && n.name.starts_with("sgd/") {
            assert_eq!(g.phase[i], Phase::Update, "{}", n.name);
        }
        if op == "Conv2D" || op == "Softmax" {
            assert_eq!(g.phase[i], Phase::Forward, "{}", n.name);
        }
    }
}

#[test]
fn other_dtypes_and_tiny_sizes_build() {
    for dtype in [DType::HALF, DType::BFLOAT16, DType::DOUBLE, DType::INT32] {
        for kind in KINDS {
            let spec = SynthSpec {
                kind,
                blocks: 2,
                batch: 1,
                size: 1,
                channels: 1,
                dtype,
            };
            let a = crate::analyze(&graphdef(&spec), &BuildOptions::default()).unwrap();
            let want = if dtype == DType::INT32 {
                DType::FLOAT
            } else {
                dtype
            };
            assert_eq!(a.graph.tensors[a.graph.loss as usize].dtype, want);
        }
    }
}

#[test]
fn blocks_for_nodes_lands_near_the_target() {
    for kind in KINDS {
        for target in [1_000usize, 10_000, 100_000] {
            let blocks = blocks_for_nodes(kind, target);
            let n = node_count(&SynthSpec {
                kind,
                blocks,
                ..SynthSpec::default()
            });
            let err = (n as f64 - target as f64).abs() / target as f64;
            assert!(err < 0.35, "{kind:?} {target}: {blocks} blocks, {n} nodes");
        }
    }
}

#[test]
fn f16_bits_of_common_constants() {
    assert_eq!(f16_bits(1.0), 0x3c00);
    assert_eq!(f16_bits(2.0), 0x4000);
    assert_eq!(f16_bits(-0.5), 0xb800);
    assert_eq!(f16_bits(1e9), 0x7c00);
    assert_eq!(f16_bits(0.0), 0);
}
