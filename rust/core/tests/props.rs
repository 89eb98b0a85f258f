//! Property tests of build, schedule and liveness on random DAGs, of the
//! synthetic generator on random specs, and of the decoder on random and
//! mutated bytes: never a panic, and the reference route's result
//! (`reference::agree`: the same graph, and so the same analysis, or an
//! error where the reference has one).
//!
//! The random DAGs are drawn in creation order (every edge goes from an
//! earlier node to a later one), then shuffled so the node ids the graph
//! gets are not a topological order and the schedule has to sort. They mix
//! dtypes (handles included), empty and large shapes, ops that alias their
//! input (`Identity`, `Reshape`, `IdentityN`), ops that write their output
//! into an input's buffer (`Relu`, `AddN`, `Mul`, `SelectV2`), variable
//! reads and writes, and control edges.

use std::collections::HashMap;

use hybridplan_core::build::{build, BuildOptions, NodeSpec, OutSpec, Shape};
use hybridplan_core::dtype::DType;
use hybridplan_core::graph::{Graph, NodeFlags, NONE};
use hybridplan_core::liveness::{liveness, Liveness};
use hybridplan_core::opkind;
use hybridplan_core::reference::{agree, reference_graph_from_bytes};
use hybridplan_core::schedule::{schedule, Schedule};
use hybridplan_core::synth::encode::{len_field, shape, varint_field};
use hybridplan_core::synth::{self, SynthKind, SynthSpec};
use hybridplan_core::{analyze, analyze_graph, PlanError};
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::Index;

const SMALL_CNN: &[u8] = include_bytes!("fixtures/small_cnn.pb");

const OPS: &[&str] = &[
    "Relu",
    "MatMul",
    "Identity",
    "Reshape",
    "IdentityN",
    "AddN",
    "Const",
    "ReadVariableOp",
    "AssignVariableOp",
    "NoOp",
    "Squeeze",
    "Mean",
    "Mul",
    "SelectV2",
];
const DTYPES: &[DType] = &[
    DType::FLOAT,
    DType::HALF,
    DType::INT32,
    DType::DOUBLE,
    DType::BOOL,
    DType::RESOURCE,
    DType::INT64,
];

/// One node as drawn: indices are reduced modulo what exists when the DAG
/// is assembled, so shrinking moves towards fewer, earlier inputs.
#[derive(Debug, Clone)]
struct Drawn {
    op: usize,
    outs: Vec<(usize, Vec<i64>)>,
    ins: Vec<(usize, usize)>,
    ctl: Vec<usize>,
    /// Sort key of the shuffle.
    key: u16,
}

fn drawn_node() -> impl Strategy<Value = Drawn> {
    let dim = prop_oneof![8 => 0i64..6, 1 => 100i64..5000];
    let out = (any::<usize>(), vec(dim, 0..4));
    (
        any::<usize>(),
        vec(out, 0..4),
        vec((any::<usize>(), any::<usize>()), 0..5),
        vec(any::<usize>(), 0..3),
        any::<u16>(),
    )
        .prop_map(|(op, outs, ins, ctl, key)| Drawn {
            op,
            outs,
            ins,
            ctl,
            key,
        })
}

/// A DAG with owned names and inputs, in shuffled order.
#[derive(Debug, Clone)]
struct Dag {
    names: Vec<String>,
    ops: Vec<&'static str>,
    outs: Vec<Vec<OutSpec>>,
    inputs: Vec<Vec<String>>,
    /// `order[p]`: the creation index of the node at spec position `p`.
    order: Vec<usize>,
}

impl Dag {
    fn new(drawn: &[Drawn]) -> Dag {
        let n = drawn.len();
        let mut dag = Dag {
            names: (0..n).map(|i| format!("n{i}")).collect(),
            ops: Vec::with_capacity(n),
            outs: Vec::with_capacity(n),
            inputs: Vec::with_capacity(n),
            order: (0..n).collect(),
        };
        for (i, d) in drawn.iter().enumerate() {
            dag.ops.push(OPS[d.op % OPS.len()]);
            dag.outs.push(
                d.outs
                    .iter()
                    .map(|(t, dims)| OutSpec {
                        dtype: Some(DTYPES[t % DTYPES.len()]),
                        shape: Shape(Some(dims.clone())),
                    })
                    .collect(),
            );
            let mut inputs = Vec::new();
            let mut first_dtype = None;
            if i > 0 {
                for &(a, k) in &d.ins {
                    let j = a % i;
                    let m = dag.outs[j].len();
                    if m == 0 {
                        continue;
                    }
                    let k = k % m;
                    first_dtype = first_dtype.or(dag.outs[j][k].dtype);
                    inputs.push(if k == 0 && a % 2 == 0 {
                        format!("n{j}")
                    } else {
                        format!("n{j}:{k}")
                    });
                }
                inputs.extend(d.ctl.iter().map(|c| format!("^n{}", c % i)));
            }
            // A variable op reads a handle at input 0 (the builder refuses
            // anything else); drawn without one, it reads as an Identity.
            if opkind::takes_handle(dag.ops[i]) && first_dtype != Some(DType::RESOURCE) {
                dag.ops[i] = "Identity";
            }
            // A node drawn without outputs is a NoOp: the builder refuses an op
            // that computes an output but lists none (`finish::check_outputs_listed`).
            if dag.outs[i].is_empty() {
                dag.ops[i] = "NoOp";
            }
            dag.inputs.push(inputs);
        }
        dag.order.sort_by_key(|&i| (drawn[i].key, i));
        dag
    }

    fn specs(&self) -> Vec<NodeSpec<'_>> {
        self.order
            .iter()
            .map(|&i| NodeSpec {
                name: &self.names[i],
                op: self.ops[i],
                device: "",
                inputs: self.inputs[i].iter().map(String::as_str).collect(),
                outputs: self.outs[i].clone(),
                calls_function: false,
            })
            .collect()
    }
}

fn dag_strategy() -> impl Strategy<Value = (Dag, Option<u64>)> {
    (
        vec(drawn_node(), 1..40),
        prop_oneof![Just(None), (0u64..1 << 40).prop_map(Some)],
    )
        .prop_map(|(d, p)| (Dag::new(&d), p))
}

fn build_dag(dag: &Dag, persistent: Option<u64>) -> Graph {
    let opts = BuildOptions {
        persistent_bytes: persistent,
        ..Default::default()
    };
    build(&dag.specs(), &opts).expect("a random DAG builds")
}

/// The owner of a tensor's buffer, by chasing `alias_of` (bounded).
fn root(g: &Graph, t: u32) -> u32 {
    let mut r = t;
    for _ in 0..=g.num_tensors() {
        let a = g.tensors[r as usize].alias_of;
        if a == NONE {
            return r;
        }
        r = a;
    }
    panic!("alias chain from tensor {t} does not end");
}

/// The documented rule, naively: a first-in, first-out ready queue; sources
/// in id order, then each node's newly ready successors in the order of the
/// last edge to each.
fn reference_order(g: &Graph) -> Vec<u32> {
    let n = g.num_nodes() as u32;
    let mut done = vec![false; n as usize];
    let mut queued = vec![false; n as usize];
    let mut queue: std::collections::VecDeque<u32> = (0..n)
        .filter(|&v| g.predecessors(v).next().is_none())
        .collect();
    for &v in &queue {
        queued[v as usize] = true;
    }
    let mut order = Vec::new();
    while let Some(v) = queue.pop_front() {
        done[v as usize] = true;
        order.push(v);
        let succ: Vec<u32> = g.successors(v).collect();
        for (k, &s) in succ.iter().enumerate() {
            let last_edge = !succ[k + 1..].contains(&s);
            if last_edge && !queued[s as usize] && g.predecessors(s).all(|p| done[p as usize]) {
                queued[s as usize] = true;
                queue.push_back(s);
            }
        }
    }
    order
}

/// The timeline recomputed from the graph alone in O(N * T^2), in-place
/// forwarding decided naively: each tensor's buffer is a tensor id, and a
/// buffer's last use is searched over every tensor in it.
fn reference_timeline(g: &Graph, s: &Schedule) -> Vec<u64> {
    let nt = g.num_tensors() as u32;
    let mut buf: Vec<u32> = (0..nt).map(|t| root(g, t)).collect();
    let last_of = |buf: &[u32], b: u32| -> u32 {
        let mut hi = s.pos[g.tensors[b as usize].node as usize];
        for u in (0..nt).filter(|&u| buf[u as usize] == b) {
            for &c in g.consumers(u) {
                hi = hi.max(s.pos[c as usize]);
            }
        }
        hi
    };
    for (p, &v) in s.order.iter().enumerate() {
        let Some(f) = opkind::forwards(g.op_name(v)) else {
            continue;
        };
        let outs = g.outputs(v);
        let out = outs.start + f.output();
        if out >= outs.end || buf[out as usize] != out || g.tensors[out as usize].bytes == 0 {
            continue;
        }
        let ins = g.inputs(v);
        for slot in f.slots(ins.len()) {
            let t = ins[slot];
            let r = buf[t as usize];
            let (tt, rt, ot) = (
                &g.tensors[t as usize],
                &g.tensors[r as usize],
                &g.tensors[out as usize],
            );
            let ok = !(g.nodes[rt.node as usize].flags.has(NodeFlags::SOURCE)
                || matches!(g.op_name(rt.node), "Const" | "HostConst"))
                && last_of(&buf, r) == p as u32
                && rt.bytes == ot.bytes
                && tt.dtype == ot.dtype
                && tt.value_bytes == ot.value_bytes
                && ins.iter().filter(|&&x| buf[x as usize] == r).count() == 1;
            if ok {
                for b in buf.iter_mut().filter(|b| **b == out) {
                    *b = r;
                }
                break;
            }
        }
    }
    let mut interval = Vec::new();
    for t in 0..nt {
        let tt = &g.tensors[t as usize];
        if tt.bytes == 0 || buf[t as usize] != t {
            continue;
        }
        interval.push((s.pos[tt.node as usize], last_of(&buf, t), tt.bytes));
    }
    (0..g.num_nodes() as u32)
        .map(|p| {
            let live: u128 = interval
                .iter()
                .filter(|&&(lo, hi, _)| lo <= p && p <= hi)
                .map(|&(_, _, b)| u128::from(b))
                .sum();
            (live + u128::from(g.persistent_bytes)).min(u128::from(u64::MAX)) as u64
        })
        .collect()
}

fn check_edges_match_specs(g: &Graph, dag: &Dag) {
    let pos_of: HashMap<&str, u32> = g
        .nodes
        .iter()
        .enumerate()
        .map(|(i, n)| (&*n.name, i as u32))
        .collect();
    for (p, &i) in dag.order.iter().enumerate() {
        let (mut data, mut ctl) = (Vec::new(), Vec::new());
        for inp in &dag.inputs[i] {
            if let Some(c) = inp.strip_prefix('^') {
                ctl.push(pos_of[c]);
            } else {
                let (name, k) = inp.split_once(':').unwrap_or((inp, "0"));
                data.push(g.out_off[pos_of[name] as usize] + k.parse::<u32>().unwrap());
            }
        }
        assert_eq!(
            g.inputs(p as u32),
            &data[..],
            "data inputs of {}",
            dag.names[i]
        );
        assert_eq!(g.control_inputs(p as u32), &ctl[..]);
    }
}

fn check_liveness(g: &Graph, s: &Schedule, l: &Liveness) {
    for t in 0..g.num_tensors() as u32 {
        let o = l.owner[t as usize];
        assert_eq!(o, root(g, t), "owner of tensor {t}");
        let p = s.pos[g.tensors[t as usize].node as usize];
        assert_eq!(l.produce[t as usize], p);
        assert!(l.last_use[t as usize] >= p);
        for &c in g.consumers(t) {
            let at = s.pos[c as usize];
            for u in [t, o] {
                let (lo, hi) = (l.produce[u as usize], l.last_use[u as usize]);
                assert!(
                    lo <= at && at <= hi,
                    "use of tensor {t} at {at} outside [{lo}, {hi}] of tensor {u}"
                );
            }
        }
    }
}

proptest! {
    #[test]
    fn build_keeps_every_edge_of_the_specs((dag, p) in dag_strategy()) {
        let g = build_dag(&dag, p);
        check_edges_match_specs(&g, &dag);
    }

    #[test]
    fn schedule_runs_every_node_once_after_its_predecessors((dag, p) in dag_strategy()) {
        let g = build_dag(&dag, p);
        let s = schedule(&g).unwrap();
        let n = g.num_nodes();
        prop_assert_eq!(s.order.len(), n);
        let mut seen = vec![false; n];
        for (at, &v) in s.order.iter().enumerate() {
            prop_assert!(!seen[v as usize], "node {} scheduled twice", v);
            seen[v as usize] = true;
            prop_assert_eq!(s.pos[v as usize] as usize, at);
        }
        for v in 0..n as u32 {
            for u in g.predecessors(v) {
                let (pu, pv) = (s.pos[u as usize], s.pos[v as usize]);
                prop_assert!(pu < pv, "{} runs before its input {}", v, u);
            }
        }
        prop_assert_eq!(&s.order, &reference_order(&g));
    }

    #[test]
    fn the_same_input_gives_the_same_schedule_and_liveness((dag, p) in dag_strategy()) {
        let (g1, g2) = (build_dag(&dag, p), build_dag(&dag, p));
        let (s1, s2) = (schedule(&g1).unwrap(), schedule(&g2).unwrap());
        prop_assert_eq!(&s1, &s2);
        prop_assert_eq!(liveness(&g1, &s1), liveness(&g2, &s2));
    }

    #[test]
    fn every_use_lies_inside_the_live_interval((dag, p) in dag_strategy()) {
        let g = build_dag(&dag, p);
        let s = schedule(&g).unwrap();
        check_liveness(&g, &s, &liveness(&g, &s));
    }

    #[test]
    fn timeline_is_persistent_plus_live_bytes((dag, p) in dag_strategy()) {
        let g = build_dag(&dag, p);
        let s = schedule(&g).unwrap();
        let l = liveness(&g, &s);
        prop_assert_eq!(&l.timeline, &reference_timeline(&g, &s));
        let max = *l.timeline.iter().max().unwrap();
        prop_assert_eq!(l.peak_bytes, max);
        prop_assert_eq!(l.timeline.iter().position(|&b| b == max), Some(l.peak_pos as usize));
    }

    #[test]
    fn a_cycle_is_reported_with_its_nodes(
        (dag, p) in dag_strategy(),
        pick in any::<Index>(),
        walk in vec(any::<Index>(), 0..6),
    ) {
        let mut dag = dag;
        // Close a cycle: an ancestor `u` of `v` (or `v` itself) waits for `v`.
        let v = pick.index(dag.names.len());
        let mut u = v;
        for w in &walk {
            let preds: Vec<usize> = dag.inputs[u]
                .iter()
                .map(|s| {
                    let s = s.trim_start_matches('^');
                    s.split(':').next().unwrap()[1..].parse::<usize>().unwrap()
                })
                .collect();
            if preds.is_empty() {
                break;
            }
            u = preds[w.index(preds.len())];
        }
        dag.inputs[u].push(format!("^n{v}"));
        let g = build_dag(&dag, p);
        let nodes = match analyze_graph(g.clone()) {
            Err(PlanError::Cycle { nodes }) => nodes,
            other => return Err(TestCaseError::fail(format!("expected a cycle, got {other:?}"))),
        };
        let id: HashMap<&str, u32> =
            g.nodes.iter().enumerate().map(|(i, n)| (&*n.name, i as u32)).collect();
        let ids: Vec<u32> = nodes.iter().map(|n| id[n.as_str()]).collect();
        let mut distinct = ids.clone();
        distinct.sort_unstable();
        distinct.dedup();
        prop_assert_eq!(distinct.len(), ids.len(), "{:?} repeats a node", nodes);
        for k in 0..ids.len() {
            let (a, b) = (ids[k], ids[(k + 1) % ids.len()]);
            prop_assert!(g.predecessors(b).any(|x| x == a), "{:?}: no edge {} -> {}", nodes, a, b);
        }
    }
}

fn synth_spec() -> impl Strategy<Value = SynthSpec> {
    let kind = prop_oneof![
        Just(SynthKind::Residual),
        Just(SynthKind::Transformer),
        Just(SynthKind::Mixed),
        Just(SynthKind::Dag)
    ];
    let dtype = prop_oneof![
        Just(DType::FLOAT),
        Just(DType::HALF),
        Just(DType::BFLOAT16),
        Just(DType::DOUBLE)
    ];
    (kind, 0usize..4, 1i64..4, 1i64..6, 1i64..12, dtype).prop_map(
        |(kind, blocks, batch, size, channels, dtype)| SynthSpec {
            kind,
            blocks,
            batch,
            size,
            channels,
            dtype,
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn synth_graphs_analyze_with_their_loss(spec in synth_spec()) {
        let bytes = synth::graphdef(&spec);
        let a = analyze(&bytes, &BuildOptions::default()).unwrap();
        let g = &a.graph;
        prop_assert_eq!(g.tensor_name(g.loss), "sparse_categorical_crossentropy/div_no_nan:0");
        prop_assert_eq!(g.num_nodes(), synth::node_count(&spec));
        prop_assert_eq!(a.liveness.peak_bytes, *a.liveness.timeline.iter().max().unwrap());
        check_liveness(g, &a.schedule, &a.liveness);
    }
}

// ---------------------------------------------------------------------------
// Untrusted bytes: Ok or Err, never a panic, and the reference's verdict.

/// The decoder agrees with the reference route on `bytes`, and where both
/// accept, the analyses (schedule, liveness) are the same.
fn decoders_agree(bytes: &[u8]) -> Result<(), TestCaseError> {
    let opts = BuildOptions::default();
    let built = agree(bytes, &opts).map_err(TestCaseError::fail)?;
    if built.is_some() {
        let a = analyze(bytes, &opts);
        let r = reference_graph_from_bytes(bytes, &opts).and_then(analyze_graph);
        match (a, r) {
            (Ok(a), Ok(r)) => {
                prop_assert_eq!(&a.schedule, &r.schedule);
                prop_assert_eq!(&a.liveness, &r.liveness);
            }
            (a, r) => prop_assert_eq!(a.err(), r.err()),
        }
    }
    Ok(())
}

/// A random `NodeDef`: mostly well formed (unique names, inputs naming
/// existing nodes, float dtype, known shapes), with some of every defect
/// (duplicate names, cycles, missing outputs, bad dtypes and dimensions).
#[derive(Debug, Clone)]
struct FuzzNode {
    /// Another node's name, rarely (a duplicate).
    dup: Option<usize>,
    op: usize,
    /// (source node, output index, control edge).
    inputs: Vec<(usize, u8, bool)>,
    dtype: Option<u8>,
    shapes: Option<Vec<Option<Vec<i64>>>>,
}

fn fuzz_node() -> impl Strategy<Value = FuzzNode> {
    // Defects are rare per node, so that most graphs get past the decoder
    // and the builder while every kind of defect still shows up.
    let dim = prop_oneof![500 => 0i64..6, 1 => -2i64..0, 1 => any::<i64>()];
    let shape = prop_oneof![1 => Just(None), 300 => vec(dim, 0..4).prop_map(Some)];
    let dtype = prop_oneof![1 => Just(None), 200 => Just(Some(1u8)), 2 => (0u8..24).prop_map(Some)];
    let shapes = prop_oneof![
        1 => Just(None),
        1 => Just(Some(Vec::new())),
        60 => vec(shape, 1..3).prop_map(Some)
    ];
    let dup = prop_oneof![200 => Just(None), 1 => any::<usize>().prop_map(Some)];
    let index = prop_oneof![30 => Just(0u8), 1 => 0u8..4];
    let input = (any::<usize>(), index, any::<bool>());
    (dup, any::<usize>(), vec(input, 0..4), dtype, shapes).prop_map(
        |(dup, op, inputs, dtype, shapes)| FuzzNode {
            dup,
            op,
            inputs,
            dtype,
            shapes,
        },
    )
}

fn graphdef_bytes(nodes: &[FuzzNode]) -> Vec<u8> {
    let mut g = Vec::new();
    for (i, n) in nodes.iter().enumerate() {
        let mut b = Vec::new();
        let name = n.dup.map_or(i, |d| d % nodes.len());
        len_field(&mut b, 1, format!("n{name}").as_bytes());
        len_field(&mut b, 2, OPS[n.op % OPS.len()].as_bytes());
        for &(src, k, ctl) in &n.inputs {
            // Mostly an earlier node; sometimes a later one (maybe a cycle).
            let src = match i {
                _ if src % 64 == 0 => src % nodes.len(),
                0 => continue,
                _ => src % i,
            };
            let s = match (ctl, k) {
                (true, _) => format!("^n{src}"),
                (false, 0) => format!("n{src}"),
                (false, k) => format!("n{src}:{k}"),
            };
            len_field(&mut b, 3, s.as_bytes());
        }
        if let Some(d) = n.dtype {
            let mut v = Vec::new();
            varint_field(&mut v, 6, u64::from(d));
            let mut e = Vec::new();
            len_field(&mut e, 1, if n.op % 2 == 0 { b"T" } else { b"dtype" });
            len_field(&mut e, 2, &v);
            len_field(&mut b, 5, &e);
        }
        if let Some(shapes) = &n.shapes {
            let mut list = Vec::new();
            for s in shapes {
                len_field(&mut list, 7, &shape(s.as_deref()));
            }
            let mut v = Vec::new();
            len_field(&mut v, 1, &list);
            let mut e = Vec::new();
            len_field(&mut e, 1, b"_output_shapes");
            len_field(&mut e, 2, &v);
            len_field(&mut b, 5, &e);
        }
        len_field(&mut g, 1, &b);
    }
    g
}

/// A single-bit flip or any other non-zero mask.
fn xor_mask() -> impl Strategy<Value = u8> {
    prop_oneof![(0u8..8).prop_map(|b| 1 << b), 1u8..=255]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn random_bytes_get_the_references_verdict(bytes in vec(any::<u8>(), 0..2048)) {
        decoders_agree(&bytes)?;
    }

    #[test]
    fn random_graphdefs_get_the_references_verdict(nodes in vec(fuzz_node(), 1..24)) {
        decoders_agree(&graphdef_bytes(&nodes))?;
    }

    #[test]
    fn mutated_real_graphdef_gets_the_references_verdict(
        flips in vec((any::<Index>(), xor_mask()), 1..12),
        cut in proptest::option::of(any::<Index>()),
    ) {
        let mut bytes = SMALL_CNN.to_vec();
        for (at, x) in flips {
            let i = at.index(bytes.len());
            bytes[i] ^= x;
        }
        if let Some(c) = cut {
            bytes.truncate(c.index(bytes.len()));
        }
        decoders_agree(&bytes)?;
    }
}

/// An input naming output 4294967295 (or 4294967294 of a node without
/// `_output_shapes`) once overflowed or asked for 2^32 shapes; it must be a
/// plain error.
#[test]
fn a_huge_output_index_is_an_error_not_a_panic() {
    let mut a = Vec::new();
    len_field(&mut a, 1, b"a");
    len_field(&mut a, 2, b"NoOp");
    let mut b = Vec::new();
    len_field(&mut b, 1, b"b");
    len_field(&mut b, 2, b"Identity");
    len_field(&mut b, 3, b"a:4294967295");
    let mut g = Vec::new();
    len_field(&mut g, 1, &a);
    len_field(&mut g, 1, &b);
    assert!(analyze(&g, &BuildOptions::default()).is_err());
    let mut b2 = Vec::new();
    len_field(&mut b2, 1, b"b");
    len_field(&mut b2, 2, b"Identity");
    len_field(&mut b2, 3, b"a:4294967294");
    let mut g2 = Vec::new();
    len_field(&mut g2, 1, &a);
    len_field(&mut g2, 1, &b2);
    assert!(analyze(&g2, &BuildOptions::default()).is_err());
}

/// `alias_of` is the direct input (as `graph.rs` documents); liveness
/// resolves chains to the owning tensor.
#[test]
fn alias_chains_resolve_to_the_root_owner() {
    let f = || OutSpec {
        dtype: Some(DType::FLOAT),
        shape: Shape(Some(vec![4])),
    };
    let node = |name, op, inputs| NodeSpec {
        name,
        op,
        device: "",
        inputs,
        outputs: vec![f()],
        calls_function: false,
    };
    let specs = [
        node("a", "Relu", vec![]),
        node("b", "Identity", vec!["a"]),
        node("c", "Identity", vec!["b"]),
    ];
    let g = build(&specs, &BuildOptions::default()).unwrap();
    assert_eq!(g.tensors[2].alias_of, 1, "c:0 aliases its input b:0");
    let s = hybridplan_core::schedule::schedule(&g).unwrap();
    let l = hybridplan_core::liveness::liveness(&g, &s);
    assert_eq!(l.owner[2], 0, "c:0's buffer is a:0's");
}
