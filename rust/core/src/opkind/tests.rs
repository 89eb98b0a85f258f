//! Unit tests of `opkind.rs`, kept apart so the algorithm file stays short.

use super::*;

#[test]
fn random_is_never_recomputed_but_stateless_random_is() {
    assert!(never_recompute("RandomUniform"));
    assert!(never_recompute("RandomStandardNormal"));
    assert!(never_recompute("CollectiveReduceV2"));
    assert!(!never_recompute("StatelessRandomUniformV2"));
    assert!(!never_recompute("Relu"));
    assert!(!never_recompute("Conv2D"));
}

#[test]
fn aliases() {
    assert_eq!(aliased_input("Reshape"), Some(0));
    assert_eq!(aliased_input("IdentityN"), Some(usize::MAX));
    assert_eq!(aliased_input("Relu"), None);
}

#[test]
fn the_sets_python_matches_agree_with_the_predicates() {
    for op in CONDITIONALS {
        assert!(
            runs_as_one_op(op) && is_control_flow(op) && !is_loop(op),
            "{op}"
        );
    }
    for op in ONE_OP_LOOPS {
        assert!(
            runs_as_one_op(op) && is_control_flow(op) && is_loop(op),
            "{op}"
        );
    }
    let lists = LIST_ADDS_ELEMENT.iter().map(|(op, _)| *op);
    for op in lists.chain(LIST_TAKES_ELEMENT).chain(LIST_HOLDS_INPUT) {
        assert_eq!(list_output(op), Some(0), "{op}: its output 0 is the list");
    }
    for op in IDENTITIES {
        assert_eq!(aliased_input(op), Some(0), "{op}");
    }
    for op in CONSTANTS.iter().chain(&FEEDS).chain(&TRANSFERS) {
        assert!(never_recompute(op), "{op}");
    }
    assert!(ARGUMENTS.iter().all(|op| FEEDS.contains(op)));
    assert!(VARIABLE_READS.iter().all(|op| takes_handle(op)));
    assert!(!runs_as_one_op("Case") && !runs_as_one_op("_While"));
}

#[test]
fn kernel_classes() {
    assert_eq!(
        kernel_class("Conv2DBackpropFilter"),
        Some("conv_backprop_filter")
    );
    assert_eq!(kernel_class("FusedBatchNormV3"), Some("batch_norm"));
    assert_eq!(kernel_class("ConcatV2"), None);
}

#[test]
fn all_reduces_are_collectives_and_gathers_are_not_all_reduces() {
    assert!(ALL_REDUCES.iter().all(|op| is_collective(op)));
    for op in [
        "CollectiveGatherV2",
        "CollectiveBcastSendV2",
        "CollectiveAllToAllV2",
    ] {
        assert!(is_collective(op) && !ALL_REDUCES.contains(&op), "{op}");
    }
}
