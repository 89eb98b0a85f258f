//! The simulator on tiny graphs whose answers are worked out by hand, the
//! empty-plan peak against liveness, and plan validation.

use hybridplan_core::build::{build, BuildOptions, NodeSpec, OutSpec, Shape};
use hybridplan_core::device::{preset, DeviceModel};
use hybridplan_core::dtype::DType;
use hybridplan_core::graph::{Graph, Phase};
use hybridplan_core::plan::{Plan, Recompute, Swap, SwapIn};
use hybridplan_core::simulate::{Detail, EventKind, SimResult, Simulator};
use hybridplan_core::{analyze, analyze_graph, cost, synth, Analysis, PlanError};

const SMALL_CNN: &[u8] = include_bytes!("fixtures/small_cnn.pb");

/// A graph of float32 vectors: (name, op, inputs, bytes of its one output).
fn graph(nodes: &[(&str, &str, &[&str], i64)]) -> Analysis {
    let specs: Vec<NodeSpec<'_>> = nodes
        .iter()
        .map(|&(name, op, inputs, bytes)| NodeSpec {
            name,
            op,
            device: "",
            inputs: inputs.to_vec(),
            outputs: vec![OutSpec {
                dtype: Some(DType::FLOAT),
                shape: Shape(Some(vec![bytes / 4])),
            }],
            calls_function: false,
        })
        .collect();
    let opts = BuildOptions {
        loss: Some(nodes[nodes.len() - 1].0.into()),
        persistent_bytes: Some(0),
        ..Default::default()
    };
    analyze_graph(build(&specs, &opts).unwrap()).unwrap()
}

/// A link of `bw` bytes/s each way, no latency, the given duplex factor.
fn link(bw: f64, duplex: f64) -> DeviceModel {
    DeviceModel {
        h2d_bandwidth: bw,
        d2h_bandwidth: bw,
        link_latency_s: 0.0,
        duplex_factor: duplex,
        ..preset("cpu").unwrap()
    }
}

fn id(a: &Analysis, name: &str) -> u32 {
    a.graph.nodes.iter().position(|n| &*n.name == name).unwrap() as u32
}

fn out(a: &Analysis, name: &str) -> u32 {
    a.graph.outputs(id(a, name)).start
}

/// One full simulation of `plan` (the simulator's one entry point).
fn simulate(
    g: &hybridplan_core::graph::Graph,
    s: &hybridplan_core::schedule::Schedule,
    costs: &[f64],
    dev: &DeviceModel,
    plan: &Plan,
) -> hybridplan_core::Result<SimResult> {
    Simulator::new(g, s, costs, dev)?.run(plan, Detail::FULL)
}

fn run(a: &Analysis, costs: &[f64], dev: &DeviceModel, plan: &Plan) -> SimResult {
    simulate(&a.graph, &a.schedule, costs, dev, plan).unwrap()
}

fn swap(a: &Analysis, t: &str, after: &str, trigger: &str, cons: &[&str]) -> Swap {
    Swap {
        release: hybridplan_core::graph::NONE,
        gate: hybridplan_core::graph::NONE,
        tensor: out(a, t),
        after: id(a, after),
        ins: vec![SwapIn {
            trigger: id(a, trigger),
            consumers: cons.iter().map(|c| id(a, c)).collect(),
            clone_consumers: vec![],
            follows: false,
        }],
    }
}

/// x -> a -> b -> c -> d -> e(d, a): `a` is read early by b and late by e.
fn chain(c_bytes: i64) -> Analysis {
    graph(&[
        ("x", "Placeholder", &[], 4),
        ("a", "Relu", &["x"], 400),
        ("b", "Relu", &["a"], 40),
        ("c", "Relu", &["b"], c_bytes),
        ("d", "Relu", &["c"], 40),
        ("e", "AddV2", &["d", "a"], 400),
    ])
}

const UNIT: [f64; 6] = [0.0, 1.0, 1.0, 1.0, 1.0, 1.0];

fn events(r: &SimResult, kind: EventKind) -> Vec<(f64, f64)> {
    let ev = r.events.iter().filter(|e| e.kind == kind);
    ev.map(|e| (e.start_s, e.end_s)).collect()
}

#[test]
fn a_transfer_hidden_behind_compute_costs_nothing() {
    let a = chain(40);
    let dev = link(400.0, 1.0); // 400 bytes: 1 s each way
    let plan = Plan {
        swaps: vec![swap(&a, "a", "b", "c", &["e"])],
        recomputes: vec![],
    };
    let r = run(&a, &UNIT, &dev, &plan);
    // out [2, 3] after b, in [3, 4] after c, e needs it at 4.
    assert_eq!(events(&r, EventKind::SwapOut), vec![(2.0, 3.0)]);
    assert_eq!(events(&r, EventKind::SwapIn), vec![(3.0, 4.0)]);
    assert_eq!(r.stall_time_s, 0.0);
    assert_eq!(r.step_time_s, 5.0);
    assert_eq!(r.compute_time_s, 5.0);
    assert_eq!((r.bytes_d2h, r.bytes_h2d), (400, 400));
}

#[test]
fn a_transfer_not_hidden_shows_as_stall_of_the_exact_amount() {
    let a = chain(40);
    let plan = Plan {
        swaps: vec![swap(&a, "a", "b", "d", &["e"])],
        recomputes: vec![],
    };
    // Swap-in [4, 5] after d: e waits 1 s.
    let r = run(&a, &UNIT, &link(400.0, 1.0), &plan);
    assert_eq!(r.stall_time_s, 1.0);
    assert_eq!(r.step_time_s, 6.0);
    // A slower link: out [2, 4.5], so the in waits for it: [4.5, 7]; e
    // waits from 4 to 7.
    let r = run(&a, &UNIT, &link(160.0, 1.0), &plan);
    assert_eq!(events(&r, EventKind::SwapIn), vec![(4.5, 7.0)]);
    assert_eq!(r.stall_time_s, 3.0);
    assert_eq!(r.step_time_s, 8.0);
    // Latency adds to every copy.
    let dev = DeviceModel {
        link_latency_s: 0.25,
        ..link(400.0, 1.0)
    };
    let r = run(&a, &UNIT, &dev, &plan);
    assert_eq!(events(&r, EventKind::SwapIn), vec![(4.0, 5.25)]);
    assert_eq!(r.stall_time_s, 1.25);
}

#[test]
fn a_release_node_waits_for_the_swap_out() {
    let a = chain(40);
    let dev = link(400.0, 1.0); // 400 bytes: 1 s each way
                                // out [2, 3] after b; c would start at 2, so a release at c waits 1 s
                                // (then the swap-in [4, 5] after c is still in time for e at 5).
    let mut sw = swap(&a, "a", "b", "c", &["e"]);
    sw.release = id(&a, "c");
    let plan = Plan {
        swaps: vec![sw.clone()],
        recomputes: vec![],
    };
    let r = run(&a, &UNIT, &dev, &plan);
    assert_eq!(events(&r, EventKind::SwapOut), vec![(2.0, 3.0)]);
    assert_eq!(r.swap_out_end, vec![3.0]);
    assert_eq!(r.op_start[id(&a, "c") as usize], 3.0);
    assert_eq!(r.stall_time_s, 1.0);
    // A release at d (start 3 without the wait) costs nothing.
    sw.release = id(&a, "d");
    let plan = Plan {
        swaps: vec![sw.clone()],
        recomputes: vec![],
    };
    let r = run(&a, &UNIT, &dev, &plan);
    assert_eq!(r.stall_time_s, 0.0);
    assert_eq!(r.step_time_s, 5.0);
    // A release that runs before the swap-out may start is an invalid plan.
    sw.release = id(&a, "a");
    let plan = Plan {
        swaps: vec![sw],
        recomputes: vec![],
    };
    let e = simulate(&a.graph, &a.schedule, &UNIT, &dev, &plan).unwrap_err();
    assert!(e.to_string().contains("release node 'a'"), "{e}");
}

/// x -> a -> b -> c -> d -> e -> f(e, a) -> h(f, c).
fn two_swaps() -> (Analysis, Plan) {
    let a = graph(&[
        ("x", "Placeholder", &[], 4),
        ("a", "Relu", &["x"], 400),
        ("b", "Relu", &["a"], 40),
        ("c", "Relu", &["b"], 400),
        ("d", "Relu", &["c"], 40),
        ("e", "Relu", &["d"], 40),
        ("f", "AddV2", &["e", "a"], 400),
        ("h", "AddV2", &["f", "c"], 400),
    ]);
    let plan = Plan {
        swaps: vec![
            swap(&a, "a", "b", "c", &["f"]),
            swap(&a, "c", "c", "e", &["h"]),
        ],
        recomputes: vec![],
    };
    (a, plan)
}

#[test]
fn both_directions_at_once_are_slower_than_one() {
    let (a, plan) = two_swaps();
    let costs = [0.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0];
    // Full duplex: a's swap-in and c's swap-out both run [3, 4].
    let r = run(&a, &costs, &link(400.0, 1.0), &plan);
    assert_eq!(events(&r, EventKind::SwapIn)[0], (3.0, 4.0));
    assert_eq!(events(&r, EventKind::SwapOut)[1], (3.0, 4.0));
    // Half duplex: each keeps half its bandwidth while both move: [3, 5].
    let r = run(&a, &costs, &link(400.0, 0.5), &plan);
    assert_eq!(events(&r, EventKind::SwapIn)[0], (3.0, 5.0));
    assert_eq!(events(&r, EventKind::SwapOut)[1], (3.0, 5.0));
    assert_eq!(r.stall_time_s, 0.0);
    // c's swap-in waits for its swap-out: [5, 6]; h at 7 does not stall.
    assert_eq!(events(&r, EventKind::SwapIn)[1], (5.0, 6.0));
}

fn bytes_at(r: &SimResult, t: f64) -> u64 {
    r.timeline
        .iter()
        .take_while(|p| p.0 <= t)
        .last()
        .map_or(0, |p| p.1)
}

#[test]
fn memory_returns_only_after_the_swap_out_finishes() {
    let a = chain(40);
    // Out after a: [1, 3.5] at 160 B/s; the last original reader b ends at 2.
    let plan = Plan {
        swaps: vec![swap(&a, "a", "a", "d", &["e"])],
        recomputes: vec![],
    };
    let r = run(&a, &UNIT, &link(160.0, 1.0), &plan);
    assert_eq!(events(&r, EventKind::SwapOut), vec![(1.0, 3.5)]);
    // During c ([2, 3]): a (400) and b (40) held; c is written into b's
    // buffer (its last reader, same size: in place).
    assert_eq!(bytes_at(&r, 2.5), 440);
    // After the copy ends at 3.5: a is returned (d, also in b's buffer, runs).
    assert_eq!(bytes_at(&r, 3.6), 40);
    assert!(r.timeline.contains(&(3.5, 40)));
    // A fast link returns it when b ends.
    let r = run(&a, &UNIT, &link(4000.0, 1.0), &plan);
    assert_eq!(bytes_at(&r, 2.5), 40);
}

#[test]
fn a_swap_lowers_the_peak_by_the_swapped_bytes_in_a_chain() {
    let a = chain(4000);
    let none = run(&a, &UNIT, &link(1e9, 1.0), &Plan::default());
    assert_eq!(none.peak_bytes, 400 + 40 + 4000);
    // Out right after a (done long before b ends), in after d.
    let plan = Plan {
        swaps: vec![swap(&a, "a", "a", "d", &["e"])],
        recomputes: vec![],
    };
    let r = run(&a, &UNIT, &link(1e9, 1.0), &plan);
    assert_eq!(r.peak_bytes, none.peak_bytes - 400);
}

#[test]
fn a_recompute_lowers_the_peak_and_adds_the_clones_time() {
    let a = chain(4000);
    let costs = [0.0, 0.75, 1.0, 1.0, 1.0, 1.0];
    let none = run(&a, &costs, &link(1e9, 1.0), &Plan::default());
    let plan = Plan {
        swaps: vec![],
        recomputes: vec![Recompute {
            nodes: vec![id(&a, "a")],
            trigger: id(&a, "d"),
            consumers: vec![id(&a, "e")],
            clone_consumers: vec![],
        }],
    };
    let r = run(&a, &costs, &link(1e9, 1.0), &plan);
    assert_eq!(r.recompute_time_s, 0.75);
    assert_eq!(r.compute_time_s, none.compute_time_s);
    assert_eq!(r.step_time_s, none.step_time_s + 0.75);
    assert_eq!(r.stall_time_s, 0.0);
    // x (4 bytes) now lives until the clone; a (400) is gone during c.
    assert_eq!(r.peak_bytes, none.peak_bytes - 400 + 4);
    let clones = events(&r, EventKind::Clone);
    assert_eq!(clones, vec![(3.75, 4.5)]);
    assert_eq!((r.bytes_d2h, r.bytes_h2d), (0, 0));
}

#[test]
fn a_clone_reads_a_swap_in_and_waits_for_it() {
    // x -> a -> b -> c -> d -> e(d, b): b is recomputed from a swapped-in a.
    let a = graph(&[
        ("x", "Placeholder", &[], 4),
        ("a", "Relu", &["x"], 400),
        ("b", "Relu", &["a"], 40),
        ("c", "Relu", &["b"], 40),
        ("d", "Relu", &["c"], 40),
        ("e", "AddV2", &["d", "b"], 40),
    ]);
    let mut sw = swap(&a, "a", "b", "b", &[]);
    sw.ins[0].clone_consumers = vec![id(&a, "b")];
    let plan = Plan {
        swaps: vec![sw],
        recomputes: vec![Recompute {
            nodes: vec![id(&a, "b")],
            trigger: id(&a, "c"),
            consumers: vec![id(&a, "e")],
            clone_consumers: vec![],
        }],
    };
    let r = run(&a, &UNIT, &link(400.0, 1.0), &plan);
    // out [2, 3], in [3, 4]; the clone after c (ends 3) waits until 4.
    assert_eq!(events(&r, EventKind::SwapIn), vec![(3.0, 4.0)]);
    assert_eq!(events(&r, EventKind::Clone), vec![(4.0, 5.0)]);
    assert_eq!(r.stall_time_s, 1.0);
    assert_eq!(r.step_time_s, 7.0);
}

fn check_empty_plan_peak(a: &Analysis) {
    let dev = preset("v100-nvlink2").unwrap();
    let costs = cost::op_costs(&a.graph, &dev);
    let r = run(a, &costs.time_s, &dev, &Plan::default());
    assert_eq!(r.peak_bytes, a.liveness.peak_bytes);
    assert_eq!(r.stall_time_s, 0.0);
    let total: f64 = costs.time_s.iter().sum();
    assert!((r.step_time_s - total).abs() <= 1e-9 * total.max(1.0));
    assert_eq!(
        r.timeline.last().map(|p| p.1),
        Some(a.graph.persistent_bytes)
    );
    // Zero-time ops too: the peak is per op, not per instant.
    let zero = vec![0.0; a.graph.num_nodes()];
    let r = run(a, &zero, &dev, &Plan::default());
    assert_eq!(r.peak_bytes, a.liveness.peak_bytes);
}

#[test]
fn empty_plan_peak_equals_liveness() {
    check_empty_plan_peak(&analyze(SMALL_CNN, &BuildOptions::default()).unwrap());
    for kind in [
        synth::SynthKind::Residual,
        synth::SynthKind::Transformer,
        synth::SynthKind::Mixed,
    ] {
        let spec = synth::SynthSpec {
            kind,
            blocks: 3,
            ..Default::default()
        };
        check_empty_plan_peak(&analyze(&synth::graphdef(&spec), &BuildOptions::default()).unwrap());
    }
    // Aliases (Identity, Reshape) extend their owner's life.
    check_empty_plan_peak(&graph(&[
        ("x", "Placeholder", &[], 8),
        ("a", "Relu", &["x"], 400),
        ("i", "Identity", &["a"], 400),
        ("b", "Relu", &["x"], 40),
        ("r", "Reshape", &["i", "b"], 400),
        ("c", "Relu", &["b"], 4000),
        ("e", "AddV2", &["c", "r"], 40),
    ]));
}

/// Swaps every 20th and recomputes every 20th (+10) forward tensor read in
/// the backward pass, as a planner might.
fn generated_plan(a: &Analysis) -> Plan {
    let (g, s) = (&a.graph, &a.schedule);
    let mut plan = Plan::default();
    let mut k = 0usize;
    for t in 0..g.num_tensors() as u32 {
        let p = g.tensors[t as usize].node;
        if g.phase[p as usize] != Phase::Forward || g.tensors[t as usize].value_bytes == 0 {
            continue;
        }
        let Some((after, trigger, late)) = late_reads(g, s, t) else {
            continue;
        };
        k = (k + 1) % 20;
        let no_rc = g.nodes[p as usize]
            .flags
            .has(hybridplan_core::graph::NodeFlags::NO_RECOMPUTE);
        if k == 0 {
            plan.swaps.push(Swap {
                release: hybridplan_core::graph::NONE,
                gate: hybridplan_core::graph::NONE,
                tensor: t,
                after,
                ins: vec![SwapIn {
                    trigger,
                    consumers: late,
                    clone_consumers: vec![],
                    follows: false,
                }],
            });
        } else if k == 10 && !no_rc && g.outputs(p).len() == 1 {
            plan.recomputes.push(Recompute {
                nodes: vec![p],
                trigger,
                consumers: late,
                clone_consumers: vec![],
            });
        }
    }
    plan
}

/// (after, trigger, backward consumers) when every forward reader of `t`
/// runs before its first backward reader.
fn late_reads(
    g: &Graph,
    s: &hybridplan_core::schedule::Schedule,
    t: u32,
) -> Option<(u32, u32, Vec<u32>)> {
    let pos = |v: u32| s.pos[v as usize];
    let mut after = g.tensors[t as usize].node;
    let mut first_late = u32::MAX;
    let mut late = Vec::new();
    for &c in g.consumers(t) {
        if g.phase[c as usize] == Phase::Backward {
            first_late = first_late.min(pos(c));
            late.push(c);
        } else if pos(c) > pos(after) {
            after = c;
        }
    }
    late.dedup();
    if late.is_empty() || pos(after) + 1 >= first_late {
        return None;
    }
    Some((after, s.order[first_late as usize - 1], late))
}

#[test]
fn a_generated_plan_on_synthetic_graphs_is_valid_deterministic_and_smaller() {
    let dev = preset("a100-pcie4").unwrap();
    for kind in [synth::SynthKind::Residual, synth::SynthKind::Transformer] {
        let spec = synth::SynthSpec {
            kind,
            blocks: 4,
            ..Default::default()
        };
        let a = analyze(&synth::graphdef(&spec), &BuildOptions::default()).unwrap();
        let plan = generated_plan(&a);
        assert!(!plan.swaps.is_empty() && !plan.recomputes.is_empty());
        let costs = cost::op_costs(&a.graph, &dev).time_s;
        let r = run(&a, &costs, &dev, &plan);
        assert_eq!(r, run(&a, &costs, &dev, &plan));
        let none = run(&a, &costs, &dev, &Plan::default());
        assert!(r.recompute_time_s > 0.0 && r.bytes_h2d > 0);
        assert!(r.step_time_s >= none.step_time_s);
        let few = Detail::Full { max_events: 10 };
        let mut sim = Simulator::new(&a.graph, &a.schedule, &costs, &dev).unwrap();
        let r = sim.run(&plan, few).unwrap();
        assert!(r.events.len() == 10 && r.events_truncated);
    }
}

fn rejects(a: &Analysis, plan: &Plan, needle: &str) {
    let e = simulate(&a.graph, &a.schedule, &UNIT, &link(400.0, 1.0), plan).unwrap_err();
    assert!(matches!(e, PlanError::InvalidArgument(_)), "{e}");
    assert!(e.to_string().contains(needle), "{e} lacks {needle}");
}

#[test]
fn invalid_plans_are_rejected() {
    let a = chain(40);
    let ok = swap(&a, "a", "b", "c", &["e"]);
    let with = |f: &dyn Fn(&mut Swap)| {
        let mut s = ok.clone();
        f(&mut s);
        Plan {
            swaps: vec![s],
            recomputes: vec![],
        }
    };
    rejects(&a, &with(&|s| s.tensor = 99), "out of range");
    rejects(&a, &with(&|s| s.ins[0].trigger = 99), "out of range");
    rejects(
        &a,
        &with(&|s| s.ins[0].consumers = vec![id(&a, "d")]),
        "does not read",
    );
    rejects(
        &a,
        &with(&|s| s.ins[0].trigger = id(&a, "e")),
        "trigger does not run before",
    );
    rejects(
        &a,
        &with(&|s| s.after = id(&a, "e")),
        "swap-out cannot start",
    );
    rejects(&a, &with(&|s| s.ins[0].consumers.clear()), "no consumers");
    let twice = Plan {
        swaps: vec![ok.clone(), ok.clone()],
        recomputes: vec![],
    };
    rejects(&a, &twice, "swapped twice (swaps 0 and 1)");
    let rc = |nodes: &[&str], trigger: &str, cons: &[&str]| Recompute {
        nodes: nodes.iter().map(|n| id(&a, n)).collect(),
        trigger: id(&a, trigger),
        consumers: cons.iter().map(|n| id(&a, n)).collect(),
        clone_consumers: vec![],
    };
    let plan = |r: Recompute| Plan {
        swaps: vec![],
        recomputes: vec![r],
    };
    rejects(&a, &plan(rc(&["x"], "d", &["a"])), "must not be cloned");
    rejects(
        &a,
        &plan(rc(&["b"], "x", &["c"])),
        "made after the clone runs",
    );
    rejects(&a, &plan(rc(&["b"], "d", &["e"])), "reads no output");
    rejects(&a, &plan(rc(&["c", "b"], "d", &["e"])), "schedule order");
    // e reads a from a swap-in and from a clone at once.
    let both = Plan {
        swaps: vec![ok.clone()],
        recomputes: vec![rc(&["a"], "d", &["e"])],
    };
    rejects(&a, &both, "two places");
    let e = simulate(&a.graph, &a.schedule, &UNIT, &link(400.0, 1.0), &both).unwrap_err();
    assert_eq!(
        e.to_string(),
        "invalid argument: node 'e' reads tensor 'a:0' from two places in the plan (swap-in #0 and recompute clone #0): list it as a consumer of one only"
    );
    // The first error in the plan's order wins: a read from two places
    // before another error, the other error before a read from two places.
    let conflict_first = Plan {
        swaps: vec![ok.clone()],
        recomputes: vec![rc(&["a"], "d", &["e"]), rc(&["b"], "d", &["e"])],
    };
    rejects(&a, &conflict_first, "two places");
    let conflict_last = Plan {
        swaps: vec![ok.clone(), {
            let mut b = swap(&a, "b", "b", "c", &["c"]);
            b.ins[0].trigger = 99;
            b
        }],
        recomputes: vec![rc(&["a"], "d", &["e"])],
    };
    rejects(&a, &conflict_last, "out of range");
    // A clone consumer that no clone reads.
    let mut s = ok.clone();
    s.ins[0].clone_consumers = vec![id(&a, "b")];
    let unused = Plan {
        swaps: vec![s],
        recomputes: vec![],
    };
    rejects(&a, &unused, "clone consumer");
    // Costs that do not fit the graph.
    let e = simulate(
        &a.graph,
        &a.schedule,
        &[1.0],
        &link(1.0, 1.0),
        &Plan::default(),
    );
    assert!(e.unwrap_err().to_string().contains("op costs"));
}

mod props {
    use super::*;
    use proptest::collection::vec;
    use proptest::prelude::*;

    /// Branches, an alias and late reads: x a b i c d e f h k.
    fn branchy() -> Analysis {
        graph(&[
            ("x", "Placeholder", &[], 4),
            ("a", "Relu", &["x"], 400),
            ("b", "Relu", &["a"], 80),
            ("i", "Identity", &["b"], 80),
            ("c", "AddV2", &["a", "i"], 400),
            ("d", "Relu", &["c"], 40),
            ("e", "AddV2", &["d", "b"], 40),
            ("f", "AddV2", &["e", "a"], 400),
            ("h", "AddV2", &["f", "c"], 400),
            ("k", "AddV2", &["h", "i"], 4),
        ])
    }

    fn set(mut v: Vec<u32>) -> Vec<u32> {
        v.sort_unstable();
        v.dedup();
        v
    }

    type SwapArgs = (u32, u32, u32, Vec<u32>, Vec<u32>);
    type RcArgs = (Vec<u32>, u32, Vec<u32>, Vec<u32>);

    fn plan_of(swaps: Vec<SwapArgs>, rcs: Vec<RcArgs>) -> Plan {
        let swaps = swaps
            .into_iter()
            .map(|(tensor, after, trigger, c, cc)| Swap {
                release: hybridplan_core::graph::NONE,
                gate: hybridplan_core::graph::NONE,
                tensor,
                after,
                ins: vec![SwapIn {
                    trigger,
                    consumers: set(c),
                    clone_consumers: set(cc),
                    follows: false,
                }],
            });
        let recomputes = rcs.into_iter().map(|(nodes, trigger, c, cc)| Recompute {
            nodes: set(nodes),
            trigger,
            consumers: set(c),
            clone_consumers: set(cc),
        });
        Plan {
            swaps: swaps.collect(),
            recomputes: recomputes.collect(),
        }
    }

    fn check_invariants(a: &Analysis, plan: &Plan, r: &SimResult) -> Result<(), TestCaseError> {
        prop_assert_eq!(r.timeline.last().map(|p| p.1), Some(0));
        prop_assert!(r.timeline.windows(2).all(|w| w[0].0 <= w[1].0));
        prop_assert!(r.timeline.iter().all(|p| p.1 <= r.peak_bytes));
        prop_assert!(r.stall_time_s >= 0.0);
        let busy = r.compute_time_s + r.recompute_time_s + r.stall_time_s;
        prop_assert!(r.step_time_s >= busy - 1e-9);
        let vb = |t: u32| a.graph.tensors[t as usize].value_bytes;
        let out: u64 = plan.swaps.iter().map(|s| vb(s.tensor)).sum();
        prop_assert_eq!(r.bytes_d2h, out);
        Ok(())
    }

    /// A plan built from the graph: consumers are real readers after the
    /// trigger, so most of these plans are valid.
    fn structured(a: &Analysis, picks: &[(u32, u32, u32, u8, bool)]) -> Plan {
        let (g, s) = (&a.graph, &a.schedule);
        let mut plan = Plan::default();
        let n = g.num_nodes() as u32;
        for &(t, after, trig, mask, recompute) in picks {
            let p = g.tensors[t as usize].node;
            let trigger = s.order[(s.pos[p as usize] + 1 + trig % 3).min(n - 1) as usize];
            let after = s.order[(s.pos[p as usize] + after % 3).min(n - 1) as usize];
            let late = |v: &u32| s.pos[*v as usize] > s.pos[trigger as usize];
            let cons: Vec<u32> = (g.consumers(t).iter().enumerate())
                .filter(|(k, v)| (mask | 0x55) & (1 << (k % 8)) != 0 && late(v))
                .map(|(_, v)| *v)
                .collect();
            if cons.is_empty() || plan.swaps.iter().any(|s| s.tensor == t) {
                continue;
            }
            if recompute {
                plan.recomputes.push(Recompute {
                    nodes: vec![p],
                    trigger,
                    consumers: set(cons),
                    clone_consumers: vec![],
                });
            } else {
                plan.swaps.push(Swap {
                    release: hybridplan_core::graph::NONE,
                    gate: hybridplan_core::graph::NONE,
                    tensor: t,
                    after,
                    ins: vec![SwapIn {
                        trigger,
                        consumers: set(cons),
                        clone_consumers: vec![],
                        follows: false,
                    }],
                });
            }
        }
        plan
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]
        #[test]
        fn any_plan_is_simulated_or_rejected_never_a_panic(
            swaps in vec((0u32..11, 0u32..11, 0u32..11, vec(0u32..11, 0..4), vec(0u32..11, 0..2)), 0..3),
            rcs in vec((vec(1u32..10, 1..3), 0u32..11, vec(0u32..11, 0..4), vec(0u32..11, 0..2)), 0..3),
            bw in 10.0f64..1000.0,
            duplex in 0.1f64..1.0,
        ) {
            let a = branchy();
            let plan = plan_of(swaps, rcs);
            let costs = [0.0, 1.0, 0.5, 0.0, 1.0, 1.0, 0.25, 1.0, 1.0, 1.0];
            match simulate(&a.graph, &a.schedule, &costs, &link(bw, duplex), &plan) {
                Err(e) => prop_assert!(matches!(e, PlanError::InvalidArgument(_))),
                Ok(r) => check_invariants(&a, &plan, &r)?,
            }
        }

        #[test]
        fn structured_plans_keep_the_invariants(
            picks in vec((1u32..10, 0u32..3, 0u32..10, any::<u8>(), any::<bool>()), 1..4),
            bw in 10.0f64..1000.0,
            duplex in 0.1f64..1.0,
        ) {
            let a = branchy();
            let plan = structured(&a, &picks);
            let costs = [0.0, 1.0, 0.5, 0.0, 1.0, 1.0, 0.25, 1.0, 1.0, 1.0];
            match simulate(&a.graph, &a.schedule, &costs, &link(bw, duplex), &plan) {
                Err(e) => prop_assert!(matches!(e, PlanError::InvalidArgument(_))),
                Ok(r) => check_invariants(&a, &plan, &r)?,
            }
        }
    }
}

// ---------------------------------------------------------------- in place

/// x -> a (MatMul, 400) -> b (`op` of `ins`, 400) -> c (MatMul, 40), plus
/// `extra` nodes.
fn in_place(
    op: &str,
    ins: &'static [&'static str],
    extra: &[(&'static str, &'static str, &'static [&'static str], i64)],
) -> Analysis {
    let mut nodes: Vec<(&str, &str, &[&str], i64)> = vec![
        ("x", "Placeholder", &[], 400),
        ("a", "MatMul", &["x"], 400),
        ("b", op, ins, 400),
        ("c", "MatMul", &["b"], 40),
    ];
    nodes.extend_from_slice(extra);
    graph(&nodes)
}

fn peaks(a: &Analysis, plan: &Plan, dev: &DeviceModel) -> (u64, u64) {
    let costs = vec![1.0; a.graph.num_nodes()];
    (a.liveness.peak_bytes, run(a, &costs, dev, plan).peak_bytes)
}

#[test]
fn an_elementwise_last_reader_writes_into_its_input() {
    let fast = link(1e9, 1.0);
    // b = Relu(a), a's last reader: b lives in a's buffer. While a runs:
    // x and a (800); while b runs: a's buffer only (400).
    let a = in_place("Relu", &["a"], &[]);
    assert_eq!(peaks(&a, &Plan::default(), &fast), (800, 800));
    let t = &a.liveness.timeline;
    assert_eq!(t[a.schedule.pos[id(&a, "b") as usize] as usize], 400);
    // A source's buffer (the fed x) is never written into: Relu(x) allocates.
    let s = graph(&[("x", "Placeholder", &[], 400), ("b", "Relu", &["x"], 400)]);
    assert_eq!(s.liveness.peak_bytes, 800);
    // Mul(a, a) reads the buffer twice: it allocates.
    let m = in_place("Mul", &["a", "a"], &[]);
    assert_eq!(
        m.liveness.timeline[m.schedule.pos[id(&m, "b") as usize] as usize],
        800
    );
    // Another reader of a after b: b allocates (a and b live together).
    let r = in_place("Relu", &["a"], &[("d", "AddV2", &["c", "a"], 40)]);
    let pb = r.schedule.pos[id(&r, "b") as usize] as usize;
    assert_eq!(r.liveness.timeline[pb], 800);
    assert_eq!(peaks(&r, &Plan::default(), &fast).1, r.liveness.peak_bytes);
}

#[test]
fn a_swap_out_or_a_later_clone_keeps_the_output_apart() {
    // a is read by b (Relu) and late by e; a is swapped for e. Under the
    // plan b is the last device reader of a's buffer, but the swap-out
    // copies that buffer: b gets a buffer of its own however fast the
    // copy, and a is returned after b (or after the copy, if later).
    // (w runs between a and b, so a fast copy ends before b starts.)
    let a = in_place(
        "Relu",
        &["a"],
        &[
            ("d", "MatMul", &["c"], 40),
            ("e", "AddV2", &["d", "a"], 400),
            ("w", "MatMul", &["x"], 4),
        ],
    );
    assert!(a.schedule.pos[id(&a, "w") as usize] < a.schedule.pos[id(&a, "b") as usize]);
    let plan = Plan {
        swaps: vec![swap(&a, "a", "a", "d", &["e"])],
        recomputes: vec![],
    };
    let costs = vec![1.0; a.graph.num_nodes()];
    let during_b = |r: &SimResult| bytes_at(r, r.op_start[id(&a, "b") as usize] + 0.5);
    for bw in [1e9, 100.0] {
        let r = run(&a, &costs, &link(bw, 1.0), &plan);
        assert_eq!(during_b(&r), 800, "{bw}");
    }
    // Without the swap, a's other reader e keeps b apart too; with e gone
    // (the graph in_place builds), b is a's last reader and writes into it.
    let r = run(&a, &costs, &link(1e9, 1.0), &Plan::default());
    assert_eq!(during_b(&r), 800);
    let plain = in_place("Relu", &["a"], &[]);
    let costs_plain = vec![1.0; plain.graph.num_nodes()];
    let r = run(&plain, &costs_plain, &link(1e9, 1.0), &Plan::default());
    assert_eq!(
        bytes_at(&r, r.op_start[id(&plain, "b") as usize] + 0.5),
        400
    );
    // b is also read late, by e; a clone of b after d serves it and reads
    // a: the original b is not a's last reader (it allocates), the clone is
    // (it writes into a's buffer).
    let a = in_place(
        "Relu",
        &["a"],
        &[
            ("d", "MatMul", &["c"], 40),
            ("e", "AddV2", &["d", "b"], 400),
        ],
    );
    let plan = Plan {
        swaps: vec![],
        recomputes: vec![Recompute {
            nodes: vec![id(&a, "b")],
            trigger: id(&a, "d"),
            consumers: vec![id(&a, "e")],
            clone_consumers: vec![],
        }],
    };
    let costs = vec![1.0; a.graph.num_nodes()];
    let during_b = |r: &SimResult| bytes_at(r, r.op_start[id(&a, "b") as usize] + 0.5);
    let r = run(&a, &costs, &link(1e9, 1.0), &plan);
    assert_eq!(during_b(&r), 800);
    let clone = r
        .events
        .iter()
        .find(|e| e.kind == EventKind::Clone)
        .unwrap();
    // While the clone runs: a (its input, kept) and d's 40; no new 400.
    assert_eq!(bytes_at(&r, clone.start_s + 0.5), 440);
}

/// x -> a -> b -> c -> d -> e -> f(e, c) -> h(f, a): `a` (800 bytes) is
/// needed after `c` (400 bytes), and `e` releases both copies back.
fn two_copies_one_trigger(queued: bool) -> (Analysis, Plan) {
    let a = graph(&[
        ("x", "Placeholder", &[], 4),
        ("a", "Relu", &["x"], 800),
        ("b", "Relu", &["a"], 40),
        ("c", "Relu", &["b"], 400),
        ("d", "Relu", &["c"], 40),
        ("e", "Relu", &["d"], 40),
        ("f", "AddV2", &["e", "c"], 40),
        ("h", "AddV2", &["f", "a"], 40),
    ]);
    let sa = swap(&a, "a", "b", "e", &["h"]);
    let mut sc = swap(&a, "c", "d", "e", &["f"]);
    let swaps = match queued {
        // Listed by tensor: `a` first, served first.
        false => vec![sa, sc],
        // Listed by need, `a`'s copy queued behind `c`'s.
        true => {
            let mut sa = sa;
            sa.ins[0].follows = true;
            sc.ins[0].follows = false;
            vec![sc, sa]
        }
    };
    let plan = Plan {
        swaps,
        recomputes: vec![],
    };
    (a, plan)
}

#[test]
fn copies_one_op_releases_run_in_plan_order_and_a_follower_waits() {
    let dev = link(400.0, 1.0); // 400 bytes a second each way
                                // Ops of 1 s from a at 0; outs a [2, 4] after b, c [4, 5] after d; e
                                // ends at 5 and releases both.
    let (a, plan) = two_copies_one_trigger(false);
    let r = run(&a, &UNIT_8, &dev, &plan);
    // a's copy first [5, 7], c's [7, 8]: f waits 3 s for c.
    assert_eq!(events(&r, EventKind::SwapIn), vec![(5.0, 7.0), (7.0, 8.0)]);
    assert_eq!(r.stall_time_s, 3.0);
    assert_eq!(r.step_time_s, 10.0);
    // Needed first, copied first: c [5, 6], then a [6, 8]; f waits 1 s,
    // h (at 7) 1 s.
    let (a, plan) = two_copies_one_trigger(true);
    let r = run(&a, &UNIT_8, &dev, &plan);
    assert_eq!(events(&r, EventKind::SwapIn), vec![(5.0, 6.0), (6.0, 8.0)]);
    assert_eq!(r.stall_time_s, 2.0);
    assert_eq!(r.step_time_s, 9.0);
}

#[test]
fn a_follower_waits_for_the_copy_before_it_even_when_its_own_is_ready() {
    // 200 bytes a second: outs a [2, 6] after b, c [6, 8] (behind a) after
    // d; e ends at 5. Listed by need (c, then a):
    let dev = link(200.0, 1.0);
    let (a, mut plan) = two_copies_one_trigger(true);
    // Not queued, a's copy is ready first (6) and goes first: [6, 10], then
    // c's [10, 12].
    plan.swaps[1].ins[0].follows = false;
    let r = run(&a, &UNIT_8, &dev, &plan);
    let mut ins = events(&r, EventKind::SwapIn);
    ins.sort_by(|x, y| x.0.total_cmp(&y.0));
    assert_eq!(ins, vec![(6.0, 10.0), (10.0, 12.0)]);
    // Queued, it waits for c's: c [8, 10], then a [10, 14].
    plan.swaps[1].ins[0].follows = true;
    let r = run(&a, &UNIT_8, &dev, &plan);
    let mut ins = events(&r, EventKind::SwapIn);
    ins.sort_by(|x, y| x.0.total_cmp(&y.0));
    assert_eq!(ins, vec![(8.0, 10.0), (10.0, 14.0)]);
}

#[test]
fn a_swap_in_that_follows_nothing_or_a_late_swap_out_is_an_invalid_plan() {
    let dev = link(400.0, 1.0);
    // Listed first, it follows nothing.
    let (a, mut plan) = two_copies_one_trigger(true);
    plan.swaps[0].ins[0].follows = true;
    let e = simulate(&a.graph, &a.schedule, &UNIT_8, &dev, &plan).unwrap_err();
    assert!(e.to_string().contains("follows no swap-in"), "{e}");
    // Both released by d, but c's swap-out waits for e, after d: a wait
    // for c's copy would hang on an op after the trigger.
    let (a, mut plan) = two_copies_one_trigger(true);
    plan.swaps[0].after = id(&a, "e");
    for sw in &mut plan.swaps {
        sw.ins[0].trigger = id(&a, "d");
    }
    // Valid without the queue.
    plan.swaps[1].ins[0].follows = false;
    simulate(&a.graph, &a.schedule, &UNIT_8, &dev, &plan).unwrap();
    plan.swaps[1].ins[0].follows = true;
    let e = simulate(&a.graph, &a.schedule, &UNIT_8, &dev, &plan).unwrap_err();
    assert!(
        e.to_string().contains("cannot start before the trigger"),
        "{e}"
    );
}

const UNIT_8: [f64; 8] = [0.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0];

/// A release node that waits for nothing changes nothing, even one of no
/// time starting exactly when its swap-out ends and submitting a copy at
/// that instant (what release placement relies on to keep the chosen plan's
/// simulation, `api.rs`). Copy `p0` (2 s) ends at 3 s, when `r` (no time)
/// starts and `r`'s copy becomes ready; `q`'s copy is ready at 3 s too.
/// With an engine that started its next copy at the end of the step the
/// release node's wait ran, `q`'s went first there and `r`'s (the lower
/// number) first without the release node (an adversarial review's case).
#[test]
fn a_release_node_at_its_copys_end_changes_nothing() {
    let a = graph(&[
        ("x", "Placeholder", &[], 4),
        ("p0", "Relu", &["x"], 800),
        ("p1", "Relu", &["p0"], 4),
        ("q", "Relu", &["p1"], 800),
        ("r", "Softmax", &["q"], 800),
        ("s", "Relu", &["r"], 4),
        ("t", "Relu", &["s"], 4),
        ("e", "AddN", &["t", "p0", "q", "r"], 4),
    ]);
    let mut costs = vec![0.0; a.graph.num_nodes()];
    for (n, c) in [
        ("p0", 1.0),
        ("p1", 1.0),
        ("q", 1.0),
        ("s", 10.0),
        ("t", 10.0),
        ("e", 1.0),
    ] {
        costs[id(&a, n) as usize] = c;
    }
    let dev = link(400.0, 1.0);
    let mut plan = Plan {
        swaps: ["r", "p0", "q"]
            .map(|t| swap(&a, t, t, "t", &["e"]))
            .to_vec(),
        recomputes: vec![],
    };
    let bare = run(&a, &costs, &dev, &plan);
    assert_eq!(bare.swap_out_end, [3.0 + 2.0, 3.0, 3.0 + 4.0]);
    let r = id(&a, "r");
    assert_eq!(bare.op_start[r as usize], bare.swap_out_end[1]);
    plan.swaps[1].release = r;
    assert_eq!(run(&a, &costs, &dev, &plan), bare);
}
