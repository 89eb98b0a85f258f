//! Decode and analyse a real GraphDef written by TensorFlow 2.21
//! (see fixtures/make_fixtures.py).

use hybridplan_core::build::BuildOptions;
use hybridplan_core::graph::{NodeFlags, Phase};
use hybridplan_core::{analyze, PlanError};

const SMALL_CNN: &[u8] = include_bytes!("fixtures/small_cnn.pb");

#[test]
fn small_cnn_decodes_with_shapes_phases_and_loss() {
    let a = analyze(SMALL_CNN, &BuildOptions::default()).unwrap();
    let g = &a.graph;
    assert_eq!(g.num_nodes(), 221);
    assert_eq!(
        g.tensor_name(g.loss),
        "sparse_categorical_crossentropy/div_no_nan:0"
    );
    let conv = g
        .nodes
        .iter()
        .position(|n| g.ops[n.op as usize].as_ref() == "Conv2D")
        .unwrap();
    let t = g.outputs(conv as u32).start;
    assert_eq!(g.shape(t), &[2, 14, 14, 4]);
    assert_eq!(g.tensors[t as usize].bytes, 2 * 14 * 14 * 4 * 4);
    assert_eq!(g.phase[conv], Phase::Forward);
    let count = |p: Phase| g.phase.iter().filter(|&&q| q == p).count();
    assert!(count(Phase::Forward) > 20);
    assert!(count(Phase::Backward) > 20);
    assert!(count(Phase::Update) > 20);
    // Every gradient op of the conv is backward, every variable write update.
    for (i, n) in g.nodes.iter().enumerate() {
        let op = g.ops[n.op as usize].as_ref();
        if op.starts_with("Conv2DBackprop") || op == "ReluGrad" {
            assert_eq!(g.phase[i], Phase::Backward, "{}", n.name);
        }
        if op == "AssignAddVariableOp" || op == "AssignVariableOp" {
            assert_eq!(g.phase[i], Phase::Update, "{}", n.name);
            assert!(n.flags.has(NodeFlags::NO_RECOMPUTE));
        }
        if op == "ReadVariableOp" {
            assert!(n.flags.has(NodeFlags::NO_RECOMPUTE));
        }
    }
    // Weights: conv 3*3*3*4+4, bn 4*4, dense 784*10+10; momentum slots for the
    // 6 trainables; sgd lr and iteration scalars. At least weights + slots.
    let weights = (3 * 3 * 3 * 4 + 4 + 4 * 4 + 784 * 10 + 10) * 4;
    assert!(
        a.graph.persistent_bytes >= weights as u64,
        "{}",
        a.graph.persistent_bytes
    );
    assert_eq!(
        a.liveness.peak_bytes,
        *a.liveness.timeline.iter().max().unwrap()
    );
}

#[test]
fn loss_by_name_and_bad_loss_name() {
    let opts = BuildOptions {
        loss: Some("sparse_categorical_crossentropy/Sum".into()),
        ..Default::default()
    };
    let a = analyze(SMALL_CNN, &opts).unwrap();
    assert_eq!(
        a.graph.tensor_name(a.graph.loss),
        "sparse_categorical_crossentropy/Sum:0"
    );
    let opts = BuildOptions {
        loss: Some("nope:0".into()),
        ..Default::default()
    };
    assert!(matches!(
        analyze(SMALL_CNN, &opts),
        Err(PlanError::InvalidArgument(_))
    ));
}

#[test]
fn truncated_real_graph_is_a_decode_error() {
    for cut in [1, 100, SMALL_CNN.len() / 2, SMALL_CNN.len() - 1] {
        let r = analyze(&SMALL_CNN[..cut], &BuildOptions::default());
        assert!(r.is_err(), "cut at {cut}");
    }
}
