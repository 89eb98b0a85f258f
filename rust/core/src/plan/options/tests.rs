//! Unit tests of `options.rs`, kept apart so the algorithm file stays short.

use super::*;
use crate::build::{build, BuildOptions, NodeSpec};

/// `m1 = s * F` of two variable reads, read only by `m2 = m1 * x`: its
/// clone would take the trigger's edge itself and leave the chain. `k`
/// reads the fed `x` (gated), `n` heads no chain: neither is such a link.
#[test]
fn a_clone_of_variable_reads_in_a_mul_chain_is_a_triggered_link() {
    let spec = |name, op, inputs: &[&'static str]| NodeSpec::test(name, op, inputs, &[4]);
    let g = build(
        &[
            spec("x", "Placeholder", &[]),
            spec("hs", "VarHandleOp", &[]),
            spec("hF", "VarHandleOp", &[]),
            spec("s", "ReadVariableOp", &["hs"]),
            spec("F", "ReadVariableOp", &["hF"]),
            spec("m1", "Mul", &["s", "F"]),
            spec("m2", "Mul", &["m1", "x"]),
            spec("k", "Mul", &["x", "F"]),
            spec("k2", "Mul", &["k", "s"]),
            spec("n", "Mul", &["s", "F"]),
            spec("out", "AddN", &["m2", "k2", "n"]),
        ],
        &BuildOptions {
            persistent_bytes: Some(0),
            ..Default::default()
        },
    )
    .unwrap();
    let node = |n: &str| {
        (0..g.num_nodes() as u32)
            .find(|&v| g.node_name(v) == n)
            .unwrap()
    };
    assert!(triggered_link(&g, node("m1")));
    assert!(!triggered_link(&g, node("k")));
    assert!(!triggered_link(&g, node("n")));
}
