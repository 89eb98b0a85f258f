use super::*;
use crate::build::BuildOptions;

#[test]
fn ranked_keeps_the_rank_among_siblings() {
    // No sibling starts with the producer: the first pad.
    assert_eq!(ranked("a", &[""], &["b"], "t"), "a-t");
    // "a:1" sorts after "a"; the stand-in for "a" must sort before it: "a-t" < "a:1".
    assert_eq!(ranked("a", &[""], &["a:1"], "t"), "a-t");
    // "a-x" sorts after "a", as "a-t" does (Python's `_ranked` calls this rule).
    assert_eq!(ranked("a", &[""], &["a-x"], "t"), "a-t");
    // A stand-in for "a:1" must sort after "a-" as "a:1" does: no "-" pad does, "9" does.
    assert_eq!(ranked("a", &[":1"], &["a-"], "t"), "a9t");
}

#[test]
fn input_keys_follow_python() {
    assert_eq!(tensor_key("a"), "a");
    assert_eq!(tensor_key("a:0"), "a");
    assert_eq!(tensor_key("a:007"), "a:7");
    assert_eq!(tensor_key("a:x"), "a:x");
    assert_eq!(tensor_key("a:"), "a:");
    assert_eq!(decimal(0), "0");
    assert_eq!(decimal(1_234_567), "1234567");
}

/// `has_key` answers as comparing `tensor_key`'s key, on every pair of
/// inputs and keys that differ in the name, the index, its zeros or its
/// separator.
#[test]
fn has_key_is_comparing_the_tensor_key() {
    let texts = [
        "a", "a:0", "a:00", "a:1", "a:01", "a:10", "a:x", "a:", "ab", "ab:1", "a:1:2", "a:b:1",
        ":1", "", "b:1", "a1",
    ];
    let keys = [
        "a", "a:1", "a:10", "a:x", "a:", "ab", "ab:1", "a:b:1", "a1", "", ":1", "a:01",
    ];
    for t in texts {
        for k in keys {
            assert_eq!(has_key(t, k), tensor_key(t) == k, "{t:?} {k:?}");
        }
    }
}

/// A `NodeDef` of `name`, `op`, `inputs` and a `T` (or `dtype`) attribute.
fn node(name: &str, op: &str, inputs: &[&str], attr: &str, dtype: u64) -> Vec<u8> {
    let mut n = Vec::new();
    put_bytes(&mut n, 1, name.as_bytes());
    put_bytes(&mut n, 2, op.as_bytes());
    for i in inputs {
        put_bytes(&mut n, 3, i.as_bytes());
    }
    let mut v = Vec::new();
    put_varint_field(&mut v, 6, dtype);
    put_attr(&mut n, attr, &v);
    n
}

/// x (Placeholder) -> r (Relu) -> s (AddN of r and x) -> g (ReluGrad of s and r).
fn graph() -> Vec<u8> {
    let mut g = Vec::new();
    for n in [
        node("x", "Placeholder", &[], "dtype", 1),
        node("r", "Relu", &["x"], "T", 1),
        node("s", "AddN", &["r", "x"], "T", 1),
        node("g", "ReluGrad", &["s", "r:0"], "T", 1),
        node("h", "Placeholder", &[], "dtype", 20),
    ] {
        put_bytes(&mut g, 1, &n);
    }
    g
}

fn sigs() -> Sigs {
    let one = |attr: &str| OutArg {
        type_attr: attr.into(),
        ..OutArg::default()
    };
    let mut s = Sigs::default();
    for (op, attr, commutative) in [
        ("Placeholder", "dtype", false),
        ("Relu", "T", false),
        ("AddN", "T", true),
        ("ReluGrad", "T", false),
    ] {
        let sig = OpSig {
            commutative,
            outputs: vec![one(attr)],
            defaults: FxHashMap::default(),
        };
        s.insert(op.into(), sig);
    }
    s
}

fn target() -> Target {
    Target {
        swap_out_op: "Identity".into(),
        swap_in_op: "Identity".into(),
        device: "/device:GPU:0".into(),
        host: "/device:CPU:0".into(),
        pin_consumers: true,
        prefix: "hp".into(),
    }
}

fn swap_of(node: i64, consumers: &[i64], gate: Option<i64>) -> Swap {
    Swap {
        node: Ix::Int(node),
        output: 0,
        after: None,
        gate: gate.map(Ix::Int),
        ins: vec![SwapIn {
            trigger: Ix::Int(2),
            follows: false,
            consumers: consumers.iter().map(|&c| Ix::Int(c)).collect(),
            clone_consumers: vec![],
        }],
    }
}

#[test]
fn a_swap_is_written_and_the_graph_decodes() {
    let bytes = graph();
    let index = NodeIndex::new(&bytes).unwrap();
    let w = write(&index, &[swap_of(1, &[3], Some(2))], &sigs(), &target()).unwrap();
    assert_eq!(w.swap_out, ["hp/swap_out/0/r"]);
    assert_eq!(w.swap_in, ["r-hp/swap_in/0_0"]);
    assert_eq!(w.rewired, 1);
    assert_eq!(w.nodes, 5);
    // g's input "r:0" (key "r") was rewired; the gate s got the swap-out as a control.
    let changed: Vec<u32> = w.changed.iter().map(|(i, _)| *i).collect();
    assert_eq!(changed, [2, 3]);
    let out = w.graph.to_vec();
    assert_eq!(out.len(), w.graph.len());
    let index = NodeIndex::new(&out).unwrap();
    assert_eq!(index.len(), 7);
    let g = index.node(3).unwrap();
    assert_eq!(g.inputs(), ["s", "r-hp/swap_in/0_0"]);
    assert_eq!(g.device, "/device:GPU:0"); // pinned: it had none
    assert_eq!(
        index.node(2).unwrap().inputs(),
        ["r", "x", "^hp/swap_out/0/r"]
    );
    let swap_in = index.node(6).unwrap();
    assert_eq!(swap_in.inputs(), ["hp/swap_out/0/r", "^s"]);
    assert_eq!(swap_in.attr("T"), Some(&[6 << 3, 1][..]));
    assert_eq!(swap_in.attr(DO_NOT_REMOVE), Some(&[5 << 3, 1][..]));
    // The core's own decoder reads the result as a graph.
    crate::graph_from_bytes(&out, &BuildOptions::default())
        .map(|_| ())
        .unwrap_or_else(|e| {
            // Shapes are not given here: only an unknown-shape error is expected.
            assert!(matches!(e, PlanError::UnknownShape { .. }), "{e}");
        });
}

#[test]
fn bad_plans_get_the_python_writers_errors() {
    let bytes = graph();
    let index = NodeIndex::new(&bytes).unwrap();
    let err = |swaps: Vec<Swap>| write(&index, &swaps, &sigs(), &target()).unwrap_err();
    let msg = |swaps: Vec<Swap>| err(swaps).to_string();
    assert!(msg(vec![swap_of(9, &[3], None)]).contains("swaps[0].node = 9 is not a node index"));
    let mut bad = swap_of(1, &[3], None);
    bad.node = Ix::Bad("'r'".into());
    assert!(msg(vec![bad]).contains("swaps[0].node must be a node index, got 'r'"));
    let mut bad = swap_of(1, &[3], None);
    bad.output = 3;
    assert!(msg(vec![bad]).contains("has 1 output(s), no output 3"));
    // x is read by s, not by g... s reads x: g does not.
    let e = msg(vec![swap_of(0, &[3], None)]);
    assert!(
        e.contains("swaps[0].ins[0]: consumer 'g' (index 3) reads none of ['x']"),
        "{e}"
    );
    let mut bad = swap_of(1, &[3], None);
    bad.ins[0].follows = true;
    assert!(msg(vec![bad]).contains("follows no swap-in"));
    assert!(matches!(
        err(vec![swap_of(4, &[], None)]),
        PlanError::Unsupported { .. }
    ));
    assert!(msg(vec![swap_of(4, &[], None)]).contains("resource/variant handle"));
    let mut unknown = sigs();
    unknown.remove("Relu");
    let e = write(&index, &[swap_of(1, &[3], None)], &unknown, &target()).unwrap_err();
    assert!(e.to_string().contains("unknown to this TensorFlow"), "{e}");
    let mut bad = swap_of(1, &[3], None);
    bad.ins[0].consumers = vec![Ix::Out("99999999999999999999".into())];
    assert!(msg(vec![bad]).contains("= 99999999999999999999 is not a node index"));
}

#[test]
fn malformed_bytes_are_decode_errors() {
    let mut bytes = graph();
    bytes.truncate(bytes.len() - 3);
    assert!(matches!(NodeIndex::new(&bytes), Err(PlanError::Decode(_))));
    // A node whose payload is not a NodeDef.
    let mut g = Vec::new();
    put_bytes(&mut g, 1, &[0x0a, 0x05, b'a']);
    let index = NodeIndex::new(&g).unwrap();
    let e = write(&index, &[swap_of(0, &[], None)], &sigs(), &target()).unwrap_err();
    assert!(matches!(e, PlanError::Decode(_)), "{e}");
}

#[test]
fn a_node_field_with_a_long_length_varint_is_replaced_whole() {
    // The same graph, but node "g"'s length written in one more byte than needed
    // (protobuf readers accept it): the splice must start at its key.
    let mut bytes = Vec::new();
    for n in [
        node("x", "Placeholder", &[], "dtype", 1),
        node("r", "Relu", &["x"], "T", 1),
        node("s", "AddN", &["r", "x"], "T", 1),
    ] {
        put_bytes(&mut bytes, 1, &n);
    }
    let g = node("g", "ReluGrad", &["s", "r:0"], "T", 1);
    assert!(g.len() < 0x80);
    bytes.extend_from_slice(&[1 << 3 | 2, 0x80 | g.len() as u8, 0x00]);
    bytes.extend_from_slice(&g);
    let index = NodeIndex::new(&bytes).unwrap();
    assert_eq!(index.len(), 4);
    let w = write(&index, &[swap_of(1, &[3], None)], &sigs(), &target()).unwrap();
    let out = w.graph.to_vec();
    let index = NodeIndex::new(&out).unwrap();
    assert_eq!(index.len(), 6);
    assert_eq!(index.node(3).unwrap().inputs(), ["s", "r-hp/swap_in/0_0"]);
}

#[test]
fn a_count_of_outputs_past_the_limit_is_an_error_not_an_allocation() {
    let mut bytes = Vec::new();
    let mut n = node("u", "Unpack", &[], "T", 1);
    let mut v = Vec::new();
    put_varint_field(&mut v, 3, 1 << 40);
    put_attr(&mut n, "num", &v);
    put_bytes(&mut bytes, 1, &n);
    let mut sigs = sigs();
    let out = OutArg {
        type_attr: "T".into(),
        number_attr: "num".into(),
        ..OutArg::default()
    };
    let sig = OpSig {
        commutative: false,
        outputs: vec![out],
        defaults: FxHashMap::default(),
    };
    sigs.insert("Unpack".into(), sig);
    let index = NodeIndex::new(&bytes).unwrap();
    let e = write(&index, &[swap_of(0, &[], None)], &sigs, &target()).unwrap_err();
    assert!(e.to_string().contains("gives 1099511627776 outputs"), "{e}");
}

#[test]
fn names_are_quoted_as_python_quotes_them() {
    assert_eq!(py_str("a"), "'a'");
    assert_eq!(py_str("a'b"), "\"a'b\"");
    assert_eq!(py_str("a'\"b"), "'a\\'\"b'");
    assert_eq!(py_list("x:1"), "['x:1']");
}
