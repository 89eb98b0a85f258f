//! The decoder gives the reference route's result (graph or error, see
//! `reference::agree`) on real, synthetic, random and mutated `GraphDef`s.
//!
//! Over the ~600-line mark on purpose: a test module, one property per
//! decoder feature, kept beside the decoder it checks.

use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::Index;

use crate::build::BuildOptions;
use crate::dtype::DType;
use crate::error::PlanError;
use crate::graph_from_bytes;
use crate::reference::{agree, reference_graph_from_bytes};
use crate::synth::{self, SynthKind, SynthSpec};
use crate::wire::{Writer, LEN};

const SMALL_CNN: &[u8] = include_bytes!("../../tests/fixtures/small_cnn.pb");

/// Both routes agree; returns whether they accept the graph.
fn same(bytes: &[u8], opts: &BuildOptions) -> bool {
    match agree(bytes, opts) {
        Ok(g) => g.is_some(),
        Err(e) => panic!("{e}"),
    }
}

#[test]
fn real_graph_is_built_directly_and_identically() {
    let opts = BuildOptions::default();
    assert!(same(SMALL_CNN, &opts));
    assert!(graph_from_bytes(SMALL_CNN, &opts).is_ok());
    let loss = BuildOptions {
        loss: Some("sparse_categorical_crossentropy/div_no_nan:0".into()),
        persistent_bytes: Some(12345),
        ..Default::default()
    };
    assert!(same(SMALL_CNN, &loss));
    let wrong = BuildOptions {
        loss: Some("no_such_node:0".into()),
        persistent_bytes: None,
        ..Default::default()
    };
    assert!(!same(SMALL_CNN, &wrong));
    assert!(graph_from_bytes(SMALL_CNN, &wrong).is_err());
}

#[test]
fn synthetic_graphs_are_built_directly_and_identically() {
    for kind in [
        SynthKind::Residual,
        SynthKind::Transformer,
        SynthKind::Mixed,
    ] {
        for blocks in [0, 1, 3] {
            let spec = SynthSpec {
                kind,
                blocks,
                size: 4,
                channels: 8,
                ..SynthSpec::default()
            };
            let bytes = synth::graphdef(&spec);
            assert!(same(&bytes, &BuildOptions::default()), "{kind:?} {blocks}");
            assert!(graph_from_bytes(&bytes, &BuildOptions::default()).is_ok());
        }
    }
}

#[test]
fn a_graph_of_many_name_groups_is_built_directly_and_identically() {
    let kind = SynthKind::Mixed;
    let spec = SynthSpec {
        kind,
        blocks: synth::blocks_for_nodes(kind, 30_000),
        size: 4,
        channels: 8,
        ..SynthSpec::default()
    };
    let bytes = synth::graphdef(&spec);
    let loss = BuildOptions {
        loss: Some("sparse_categorical_crossentropy/div_no_nan:0".into()),
        persistent_bytes: None,
        ..Default::default()
    };
    for opts in [BuildOptions::default(), loss] {
        assert!(same(&bytes, &opts));
        assert!(graph_from_bytes(&bytes, &opts).is_ok());
    }
}

#[test]
fn a_graph_without_output_shapes_is_built_directly_and_identically() {
    // Count from references, fallback shapes, inherited dtypes, a later input.
    let mut g = Writer::default();
    let node = |g: &mut Writer, name: &str, op: &str, ins: &[&str], attrs: &[(&str, Vec<u8>)]| {
        g.message(1, |n| {
            n.bytes_field(1, name.as_bytes());
            n.bytes_field(2, op.as_bytes());
            for i in ins {
                n.bytes_field(3, i.as_bytes());
            }
            for (k, v) in attrs {
                n.message(5, |e| {
                    e.bytes_field(1, k.as_bytes());
                    e.bytes_field(2, v);
                });
            }
        })
    };
    let ty = |t: u64| {
        let mut w = Writer::default();
        w.varint_field(6, t);
        w.buf
    };
    let shape = |dims: &[u64]| {
        let mut w = Writer::default();
        w.message(7, |s| {
            for &d in dims {
                s.message(2, |x| x.varint_field(1, d));
            }
        });
        w.buf
    };
    node(
        &mut g,
        "x",
        "Placeholder",
        &[],
        &[("dtype", ty(1)), ("shape", shape(&[2, 3]))],
    );
    node(
        &mut g,
        "s",
        "Split",
        &["x", "^late"],
        &[("T", ty(1)), ("shape", shape(&[2, 1]))],
    );
    node(&mut g, "a", "Relu", &["s:1"], &[("shape", shape(&[2, 1]))]);
    node(
        &mut g,
        "b",
        "AddN",
        &["a", "s:0", "s:2"],
        &[("shape", shape(&[2, 1]))],
    );
    node(&mut g, "late", "NoOp", &[], &[]);
    let bytes = g.buf;
    assert!(same(&bytes, &BuildOptions::default()));
    let got = graph_from_bytes(&bytes, &BuildOptions::default()).unwrap();
    assert_eq!(got.outputs(1).len(), 3, "Split has the 3 outputs read");
    assert_eq!(
        got.tensors[got.outputs(3).start as usize].dtype,
        DType::FLOAT
    );
}

// ---------------------------------------------------------------------------
// Random GraphDefs with every attribute form the decoders read.

const OPS: &[&str] = &[
    "Relu",
    "Identity",
    "IdentityN",
    "Const",
    "Placeholder",
    "VarHandleOp",
    "ReadVariableOp",
    "AssignVariableOp",
    "Range",
    "If",
    "my_fn",
    "NoOp",
    "Shape",
];
const KEYS: &[&str] = &[
    "_output_shapes",
    "T",
    "dtype",
    "Tout",
    "output_types",
    "out_type",
    "Tidx",
    "Tparams",
    "shape",
    "value",
    "f",
    "strides",
    "_class",
    "not_read",
];

/// One field of an `AttrValue`.
#[derive(Debug, Clone)]
enum Field {
    Type(u8),
    Types(Vec<u8>),
    Shapes(Vec<Option<Vec<i64>>>),
    Shape(Option<Vec<i64>>),
    Tensor(Option<Option<Vec<i64>>>),
    Func,
    Funcs,
    Int,
    Ints(bool),
    Str,
    EmptyList,
    Unknown,
}

#[derive(Debug, Clone)]
struct RandNode {
    name: usize,
    op: usize,
    device: bool,
    inputs: Vec<(usize, u8, u8)>,
    attrs: Vec<(usize, Vec<Field>)>,
}

fn dims() -> impl Strategy<Value = Option<Vec<i64>>> {
    let dim = prop_oneof![40 => 0i64..5, 1 => Just(-1i64), 1 => Just(-5i64)];
    prop_oneof![1 => Just(None), 12 => vec(dim, 0..3).prop_map(Some)]
}

fn field() -> impl Strategy<Value = Field> {
    let dtype = prop_oneof![8 => Just(1u8), 1 => Just(3u8), 1 => Just(20u8), 1 => 0u8..40];
    prop_oneof![
        4 => dtype.clone().prop_map(Field::Type),
        2 => vec(dtype, 0..4).prop_map(Field::Types),
        6 => vec(dims(), 0..4).prop_map(Field::Shapes),
        2 => dims().prop_map(Field::Shape),
        2 => proptest::option::of(dims()).prop_map(Field::Tensor),
        1 => Just(Field::Func),
        1 => Just(Field::Funcs),
        1 => Just(Field::Int),
        1 => any::<bool>().prop_map(Field::Ints),
        1 => Just(Field::Str),
        1 => Just(Field::EmptyList),
        1 => Just(Field::Unknown),
    ]
}

/// A node of any form (mostly invalid graphs).
fn wild_node() -> impl Strategy<Value = RandNode> {
    let field_list = prop_oneof![12 => vec(field(), 1..2), 1 => vec(field(), 0..4)];
    let attr = (0..KEYS.len(), field_list);
    let input = (any::<usize>(), 0u8..12, 0u8..24);
    (
        prop_oneof![60 => Just(usize::MAX), 1 => any::<usize>()],
        0..OPS.len(),
        any::<bool>(),
        vec(input, 0..4),
        vec(attr, 0..5),
    )
        .prop_map(|(name, op, device, inputs, attrs)| RandNode {
            name,
            op,
            device,
            inputs,
            attrs,
        })
}

/// A node of a valid graph, mostly: known shapes and dtypes given in the
/// ways TensorFlow gives them, or left to inheritance and fallbacks.
fn sane_node() -> impl Strategy<Value = RandNode> {
    let known = || vec(0i64..5, 0..3).prop_map(Some);
    let key = |k: &str| KEYS.iter().position(|x| *x == k).unwrap();
    let (shapes, t, tout, dtype, shape, value) = (
        key("_output_shapes"),
        key("T"),
        key("Tout"),
        key("dtype"),
        key("shape"),
        key("value"),
    );
    let outputs = prop_oneof![
        8 => vec(known(), 1..4).prop_map(move |s| vec![(shapes, vec![Field::Shapes(s)])]),
        1 => known().prop_map(move |s| vec![(shape, vec![Field::Shape(s)])]),
        1 => proptest::option::of(known())
            .prop_map(move |s| vec![(value, vec![Field::Tensor(s)])]),
    ];
    let types = prop_oneof![
        12 => Just(vec![(t, vec![Field::Type(1)])]),
        2 => Just(vec![(dtype, vec![Field::Type(3)])]),
        2 => vec(prop_oneof![Just(1u8), Just(20u8)], 1..4)
            .prop_map(move |ts| vec![(tout, vec![Field::Types(ts)])]),
        1 => Just(vec![]),
    ];
    let form = prop_oneof![2 => Just(0u8), 1 => 8u8..10, 12 => 10u8..24];
    let input = (any::<usize>(), 0u8..12, form);
    let op = prop_oneof![4 => Just(0), 1 => 0..OPS.len()];
    (op, any::<bool>(), vec(input, 0..4), outputs, types).prop_map(
        |(op, device, inputs, mut attrs, mut types)| {
            // A type list as long as the list of output shapes.
            if let (Some((_, f)), Some((_, g))) = (attrs.first(), types.first_mut()) {
                if let (Field::Shapes(s), Field::Types(ts)) = (&f[0], &mut g[0]) {
                    ts.resize(s.len(), 1);
                }
            }
            attrs.extend(types);
            RandNode {
                name: usize::MAX,
                op,
                device,
                inputs,
                attrs,
            }
        },
    )
}

fn rand_node() -> impl Strategy<Value = RandNode> {
    prop_oneof![30 => sane_node(), 1 => wild_node()]
}

fn put_shape(w: &mut Writer, field: u32, dims: &Option<Vec<i64>>) {
    w.message(field, |s| match dims {
        None => s.varint_field(3, 1),
        Some(d) => {
            for &x in d {
                s.message(2, |m| m.varint_field(1, x as u64));
            }
        }
    });
}

fn put_field(v: &mut Writer, f: &Field) {
    match f {
        Field::Type(t) => v.varint_field(6, u64::from(*t)),
        Field::Types(ts) => v.message(1, |l| {
            for &t in ts {
                l.varint_field(6, u64::from(t));
            }
        }),
        Field::Shapes(ss) => v.message(1, |l| {
            for s in ss {
                put_shape(l, 7, s);
            }
        }),
        Field::Shape(s) => put_shape(v, 7, s),
        Field::Tensor(s) => v.message(8, |t| {
            t.varint_field(1, 1);
            if let Some(s) = s {
                put_shape(t, 2, s);
            }
            t.bytes_field(4, &[0; 8]);
        }),
        Field::Func => v.message(10, |f| f.bytes_field(1, b"my_fn")),
        Field::Funcs => v.message(1, |l| l.message(9, |f| f.bytes_field(1, b"my_fn"))),
        Field::Int => v.varint_field(3, 7),
        Field::Ints(packed) => v.message(1, |l| {
            if *packed {
                l.bytes_field(3, &[1, 2, 3]);
            } else {
                l.varint_field(3, 1);
            }
        }),
        Field::Str => v.bytes_field(2, b"SAME"),
        Field::EmptyList => v.message(1, |_| {}),
        Field::Unknown => v.varint_field(9, 1),
    }
}

fn input_ref(i: usize, n: usize, (src, k, form): (usize, u8, u8)) -> String {
    let src = if src % 32 == 0 || i == 0 {
        src % n
    } else {
        src % i
    };
    match form {
        0..=3 => format!("^n{src}"),
        4 => format!("n{src}:+1"),
        5 => format!("n{src}:x"),
        6 => format!("n{src}:70000"),
        7 => format!("missing{src}"),
        8..=9 => format!("n{src}:{}", k % 3),
        _ => format!("n{src}"),
    }
}

fn graphdef(nodes: &[RandNode], library: bool) -> Vec<u8> {
    let mut g = Writer::default();
    for (i, n) in nodes.iter().enumerate() {
        g.message(1, |b| {
            let name = if n.name == usize::MAX {
                i
            } else {
                n.name % nodes.len()
            };
            b.bytes_field(1, format!("n{name}").as_bytes());
            b.bytes_field(2, OPS[n.op].as_bytes());
            for &inp in &n.inputs {
                b.bytes_field(3, input_ref(i, nodes.len(), inp).as_bytes());
            }
            if n.device {
                b.bytes_field(4, b"/device:GPU:0");
            }
            for (k, fields) in &n.attrs {
                b.message(5, |e| {
                    e.bytes_field(1, KEYS[*k].as_bytes());
                    e.message(2, |v| {
                        for f in fields {
                            put_field(v, f);
                        }
                    });
                });
            }
        });
    }
    if library {
        g.message(2, |l| {
            l.message(1, |f| f.message(1, |s| s.bytes_field(1, b"my_fn")));
        });
    }
    g.key(4, LEN);
    g.varint(0);
    g.buf
}

fn opts_of(loss: u8) -> BuildOptions {
    BuildOptions {
        loss: match loss {
            0 => Some("n1:0".into()),
            1 => Some("n2".into()),
            _ => None,
        },
        persistent_bytes: (loss == 3).then_some(99),
        ..Default::default()
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn random_graphdefs_give_the_reference_result(
        nodes in vec(rand_node(), 1..16),
        library in any::<bool>(),
        loss in 0u8..6,
    ) {
        same(&graphdef(&nodes, library), &opts_of(loss));
    }

    #[test]
    fn mutated_graphdefs_give_the_reference_result(
        nodes in vec(rand_node(), 1..10),
        flips in vec((any::<Index>(), any::<u8>()), 1..6),
        cut in proptest::option::of(any::<Index>()),
    ) {
        let mut bytes = graphdef(&nodes, true);
        for (at, x) in flips {
            let i = at.index(bytes.len());
            bytes[i] ^= x;
        }
        if let Some(c) = cut {
            bytes.truncate(c.index(bytes.len()));
        }
        same(&bytes, &BuildOptions::default());
    }

    #[test]
    fn mutated_real_graphdef_gives_the_reference_result(
        flips in vec((any::<Index>(), 1u8..=255), 1..8),
    ) {
        let mut bytes = SMALL_CNN.to_vec();
        for (at, x) in flips {
            let i = at.index(bytes.len());
            bytes[i] ^= x;
        }
        same(&bytes, &BuildOptions::default());
    }
}

/// Most random graphs of the sane kind are valid, and the decoder builds
/// every one the reference route builds, identically.
#[test]
fn valid_random_graphs_are_built_as_the_reference_builds_them() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::deterministic();
    let nodes = vec(sane_node(), 1..16);
    let mut valid = 0;
    for _ in 0..500 {
        let bytes = graphdef(&nodes.new_tree(&mut runner).unwrap().current(), false);
        let opts = BuildOptions::default();
        let reference = reference_graph_from_bytes(&bytes, &opts);
        valid += usize::from(reference.is_ok());
        match (graph_from_bytes(&bytes, &opts), reference) {
            (Ok(g), Ok(r)) => assert_eq!(g, r),
            (Err(e), Err(r)) => assert_eq!(e, r),
            (g, r) => panic!("{g:?} against {r:?}"),
        }
    }
    assert!(valid >= 150, "only {valid} of 500 random graphs are valid");
}

/// The byte parser of input references agrees with `build::parse_input`.
fn check_parse(s: &str) {
    use crate::build::{parse_input as reference, InputRef};
    let expected = reference(s).ok().map(|r| match r {
        InputRef::Data(n, k) => (n.as_bytes(), Some(k)),
        InputRef::Control(n) => (n.as_bytes(), None),
    });
    // Taken whole, an input with a `:` does not parse (`Builder::input`).
    let got = super::parse_input(s.as_bytes())
        .filter(|&(name, _)| !(name.len() == s.len() && name.contains(&b':')));
    assert_eq!(got, expected, "{s:?}");
}

#[test]
fn input_references_parse_as_the_reference_parses_them() {
    for s in [
        "a",
        "a:0",
        "a:12",
        "a/b:3",
        "^a",
        "^a:1",
        "a:",
        ":",
        "",
        "^",
        "a:+1",
        "a:+",
        "a:-1",
        "a:x",
        "a:1:2",
        "a:b",
        "a::1",
        "a:007",
        "a:4294967295",
        "a:4294967296",
        "+1",
        "a:1a",
    ] {
        check_parse(s);
    }
}

proptest! {
    #[test]
    fn random_input_references_parse_as_the_reference_parses_them(
        s in "[a^:+0-9/-]{0,12}",
    ) {
        check_parse(&s);
    }
}

/// Cases the random tests once found.
#[test]
fn odd_graphs_give_the_reference_result() {
    let opts = BuildOptions::default();
    let node = |fields: &[(u32, &[u8])]| {
        let mut g = Writer::default();
        g.message(1, |n| {
            for (f, b) in fields {
                n.bytes_field(*f, b);
            }
        });
        g.buf
    };
    // An op field read twice, the first not UTF-8.
    assert!(graph_from_bytes(&node(&[(1, b"a"), (2, b"\xff"), (2, b"NoOp")]), &opts).is_err());
    same(&node(&[(1, b"a"), (2, b"\xff"), (2, b"NoOp")]), &opts);
    same(&node(&[(1, b"\xff"), (1, b"a"), (2, b"NoOp")]), &opts);
    same(
        &node(&[(1, b"a"), (4, b"\xff"), (4, b""), (2, b"NoOp")]),
        &opts,
    );
    // Names with a `:`, read by inputs in every form.
    for (name, input) in [
        (&b"a:b"[..], &b"a:b"[..]),
        (b"a:1", b"a:1"),
        (b"a:1", b"^a:1"),
        (b"a:+1", b"a:+1"),
        (b"a", b"a:+0"),
        (b"a", b"a:"),
        // No name with a `:`, an input with one taken whole: the first pass
        // does not look for it, the exact pass gives the reference's error.
        (b"a", b"a:b"),
        (b"a", b"c:d:e"),
        (b"a", b"a:\xff"),
        (b"a", b"^a:b"),
    ] {
        let mut g = node(&[(1, name), (2, b"NoOp")]);
        g.extend(node(&[(1, b"b"), (2, b"NoOp"), (3, input)]));
        same(&g, &opts);
    }
    // Output 2^32 - 1 is a data input, not a control one.
    let mut g = node(&[(1, b"a"), (2, b"NoOp")]);
    g.extend(node(&[(1, b"b"), (2, b"Identity"), (3, b"a:4294967295")]));
    assert!(graph_from_bytes(&g, &opts).is_err());
    same(&g, &opts);
}

/// An `IdentityN` whose `T` does not list one type per data input (or whose
/// `_output_shapes` does not list one shape per data input) is refused by
/// both routes, naming the node: the rewrite counts its outputs from `T`,
/// and a plan naming an output it lacks would not apply (issue 24).
#[test]
fn an_identity_n_must_list_one_type_per_data_input() {
    let op = |name: &str| OPS.iter().position(|&o| o == name).unwrap();
    let key = |name: &str| KEYS.iter().position(|&k| k == name).unwrap();
    let shapes = |n: usize| {
        (
            key("_output_shapes"),
            vec![Field::Shapes(vec![Some(vec![4]); n])],
        )
    };
    let x = RandNode {
        name: usize::MAX,
        op: op("Placeholder"),
        device: false,
        inputs: vec![],
        attrs: vec![(key("dtype"), vec![Field::Type(1)]), shapes(1)],
    };
    // Two data inputs (n0, n0:0) and a control input, which T does not type.
    let idn = |t: Option<Field>, outs: usize| RandNode {
        name: usize::MAX,
        op: op("IdentityN"),
        device: false,
        inputs: vec![(0, 0, 10), (0, 0, 8), (0, 0, 0)],
        attrs: t
            .map(|t| (key("T"), vec![t]))
            .into_iter()
            .chain([shapes(outs)])
            .collect(),
    };
    let opts = BuildOptions::default();
    let cases = [
        (Some(Field::Types(vec![1, 1])), 2, None),
        (
            Some(Field::Type(1)),
            2,
            Some("its attribute T is not a list of types"),
        ),
        (None, 2, Some("it has no attribute T")),
        (
            Some(Field::Types(vec![1])),
            2,
            Some("its attribute T lists 1 types"),
        ),
        (
            Some(Field::Types(vec![1, 1, 1])),
            3,
            Some("its attribute T lists 3 types"),
        ),
        (
            Some(Field::Types(vec![1, 1])),
            3,
            Some("_output_shapes lists 3 shapes"),
        ),
    ];
    for (t, outs, fault) in cases {
        let bytes = graphdef(&[x.clone(), idn(t, outs)], false);
        let accepted = same(&bytes, &opts);
        let got = graph_from_bytes(&bytes, &opts);
        match fault {
            None => {
                assert!(accepted, "a valid IdentityN is accepted");
                assert!(got.is_ok(), "{got:?}");
            }
            Some(what) => {
                let e = got.unwrap_err();
                assert!(matches!(e, PlanError::InvalidGraph(_)), "{e}");
                let msg = e.to_string();
                assert!(
                    msg.contains("node 'n1' (op IdentityN) has 2 data inputs but"),
                    "{msg}"
                );
                assert!(msg.contains(what), "{msg}");
            }
        }
    }
}
