//! The replay program (`replay.rs`): its ops, copies and times are the
//! simulator's, it survives a JSON round trip, and it refuses what it cannot
//! read.

use hybridplan_core::api::plan_analysis;
use hybridplan_core::build::BuildOptions;
use hybridplan_core::device::{preset, DeviceModel};
use hybridplan_core::plan::planner::{PlanOptions, Strategy};
use hybridplan_core::plan::Plan;
use hybridplan_core::replay::{self, Replay, ReplayRead, VERSION};
use hybridplan_core::simulate::{Detail, EventKind, Simulator};
use hybridplan_core::synth::{graphdef, SynthKind, SynthSpec};
use hybridplan_core::{analyze, Analysis};

fn step(kind: SynthKind) -> Analysis {
    let spec = SynthSpec {
        kind,
        blocks: 3,
        batch: 4,
        size: 16,
        channels: 32,
        ..SynthSpec::default()
    };
    analyze(&graphdef(&spec), &BuildOptions::default()).unwrap()
}

/// A slow link, so that plans mix swaps and clones.
fn device() -> DeviceModel {
    let mut d = preset("v100-nvlink2").unwrap();
    d.h2d_bandwidth = 5e9;
    d.d2h_bandwidth = 5e9;
    d
}

/// The replay of `s`'s plan at the smallest of 60..98% of the activations
/// that it fits, through the report JSON; the report JSON; the plan.
fn replay_of(a: &Analysis, dev: &DeviceModel, s: Strategy) -> (Replay, String, Plan) {
    let act = a.liveness.peak_bytes - a.graph.persistent_bytes;
    let o = [60, 70, 80, 90, 95, 98]
        .into_iter()
        .find_map(|pct| {
            let opts = PlanOptions {
                strategy: s,
                budget: a.graph.persistent_bytes + act * pct / 100,
                min_bytes: 1024,
                ..PlanOptions::default()
            };
            plan_analysis(a, dev, &opts, &[]).ok()
        })
        .unwrap();
    assert!(!o.plan.is_empty(), "{s:?} planned nothing");
    let json = serde_json::to_string(&o.report).unwrap();
    let (plan, strategy, budget) = replay::plan_from_report(&a.graph, &json).unwrap();
    assert_eq!(plan, o.plan, "the report gives back the plan");
    let r = replay::replay(a, dev, &plan, &[], &strategy, budget).unwrap();
    (r, json, plan)
}

#[test]
fn replays_follow_the_simulator_event_for_event() {
    let dev = device();
    for kind in [
        SynthKind::Residual,
        SynthKind::Transformer,
        SynthKind::Mixed,
    ] {
        let a = step(kind);
        for s in [Strategy::Swap, Strategy::Recompute, Strategy::Hybrid] {
            let (r, _, plan) = replay_of(&a, &dev, s);
            let (times, _) = hybridplan_core::api::op_times(&a.graph, &dev, &[]).unwrap();
            let every = Detail::Full {
                max_events: usize::MAX,
            };
            let sim = Simulator::new(&a.graph, &a.schedule, &times, &dev)
                .and_then(|mut s| s.run(&plan, every))
                .unwrap();
            // Same op order and predicted times as the simulator's compute stream.
            let compute: Vec<_> = sim
                .events
                .iter()
                .filter(|e| matches!(e.kind, EventKind::Op | EventKind::Clone))
                .collect();
            assert_eq!(compute.len(), r.ops.len(), "{kind:?} {s:?}");
            for (e, o) in compute.iter().zip(&r.ops) {
                assert_eq!(e.id, o.node);
                assert_eq!(e.kind == EventKind::Clone, o.clone.is_some());
                assert_eq!(e.start_s.to_bits(), o.start_s.to_bits());
                assert_eq!(e.end_s.to_bits(), o.end_s.to_bits());
                assert_eq!(o.time_s.to_bits(), times[o.node as usize].to_bits());
            }
            // The timeline is the simulator's event list, one for one.
            assert_eq!(r.timeline.len(), sim.events.len());
            for (e, t) in sim.events.iter().zip(&r.timeline) {
                let stream = match e.kind {
                    EventKind::Op | EventKind::Clone => "compute",
                    EventKind::SwapOut => "d2h",
                    EventKind::SwapIn => "h2d",
                };
                assert_eq!(
                    (t.stream.as_str(), t.start_s, t.end_s),
                    (stream, e.start_s, e.end_s)
                );
            }
            assert_eq!(r.predicted.step_time_s, sim.step_time_s);
            assert_eq!(r.predicted.peak_bytes, sim.peak_bytes);
            assert_eq!(r.memory, sim.timeline);
            check_swaps(&r, &sim.swap_out_end);
            check_reads(&r);
        }
    }
}

/// Each swap's copies: out after its producer and `after`, each in after
/// its trigger and the swap-out, and read by exactly the ops it lists.
fn check_swaps(r: &Replay, swap_out_end: &[f64]) {
    let op_end = |node: u32| {
        r.ops
            .iter()
            .find(|o| o.node == node && o.clone.is_none())
            .unwrap()
            .end_s
    };
    for (k, s) in r.swaps.iter().enumerate() {
        assert_eq!(s.end_s, swap_out_end[k]);
        assert!(s.start_s >= op_end(s.producer) && s.start_s >= op_end(s.after));
        assert_eq!(s.bytes, r.tensors[s.tensor as usize].bytes);
        for (j, i) in s.ins.iter().enumerate() {
            assert!(i.start_s >= s.end_s && i.start_s >= op_end(i.trigger));
            assert!(i.end_s > i.start_s);
            let readers: Vec<u32> = r
                .ops
                .iter()
                .filter(|o| {
                    o.clone.is_none()
                        && o.inputs.iter().any(|x| {
                            *x == ReplayRead::SwapIn {
                                tensor: s.tensor,
                                swap: k as u32,
                                index: j as u32,
                            }
                        })
                })
                .map(|o| o.node)
                .collect();
            assert_eq!(readers, i.readers, "swap {k} in {j}");
            for o in r.ops.iter().filter(|o| readers.contains(&o.node)) {
                assert!(
                    o.start_s >= i.end_s,
                    "a reader starts before its copy is in"
                );
            }
        }
    }
}

/// Every read names a tensor the op reads, and a clone's output is read
/// only after that clone ran.
fn check_reads(r: &Replay) {
    for (i, o) in r.ops.iter().enumerate() {
        for x in &o.inputs {
            if let ReplayRead::Clone {
                recompute, index, ..
            } = *x
            {
                let at = r
                    .ops
                    .iter()
                    .position(|p| p.clone == Some([recompute, index]))
                    .unwrap();
                assert!(at < i);
                assert_eq!(
                    r.clones[recompute as usize].nodes[index as usize],
                    r.ops[at].node
                );
            }
        }
    }
    let clones = r.ops.iter().filter(|o| o.clone.is_some()).count();
    assert_eq!(
        clones,
        r.clones.iter().map(|c| c.nodes.len()).sum::<usize>()
    );
}

#[test]
fn plans_with_copies_and_clones_are_covered() {
    // The test above is only as good as the plans it sees.
    let dev = device();
    let a = step(SynthKind::Mixed);
    let (swap, _, _) = replay_of(&a, &dev, Strategy::Swap);
    let (rc, _, _) = replay_of(&a, &dev, Strategy::Recompute);
    assert!(!swap.swaps.is_empty() && swap.swaps.iter().all(|s| !s.ins.is_empty()));
    assert!(!rc.clones.is_empty());
    assert!(swap.ops.iter().any(|o| o.kernel.as_deref() == Some("conv")));
    assert!(swap.ops.iter().any(|o| o.kernel.is_none()));
    assert!(swap.ops.iter().any(|o| o.inplace.is_some()));
}

#[test]
fn json_round_trips_and_other_versions_are_refused() {
    let dev = device();
    let a = step(SynthKind::Mixed);
    let (r, report, _) = replay_of(&a, &dev, Strategy::Hybrid);
    let text = serde_json::to_string(&r).unwrap();
    let back = replay::from_json(&text).unwrap();
    assert_eq!(back, r);
    assert_eq!(back.version, VERSION);
    // The one-call form gives the same replay.
    let bytes = graphdef(&SynthSpec {
        kind: SynthKind::Mixed,
        blocks: 3,
        batch: 4,
        size: 16,
        channels: 32,
        ..SynthSpec::default()
    });
    let same = replay::replay_json(&bytes, &BuildOptions::default(), &dev, &report, &[]).unwrap();
    assert_eq!(same, text);
    let v2 = text.replacen(&format!("\"version\":{VERSION}"), "\"version\":99", 1);
    let e = replay::from_json(&v2).unwrap_err().to_string();
    assert!(e.contains("version 99"), "{e}");
    assert!(replay::from_json("{}").is_err());
    assert!(replay::from_json("[1]").is_err());
}

#[test]
fn a_report_for_another_graph_is_refused() {
    use hybridplan_core::schema::{
        Figures, HostTimeline, PlanReport, SwapDecision, PLAN_SCHEMA_VERSION,
    };
    let a = step(SynthKind::Residual);
    let report = PlanReport {
        schema_version: PLAN_SCHEMA_VERSION,
        strategy_requested: "swap".into(),
        strategy: "swap".into(),
        device: "cpu".into(),
        budget: 1,
        persistent_bytes: 0,
        num_nodes: 1,
        loss: None,
        workspace: None,
        original: Figures::default(),
        planned: Figures::default(),
        swaps: vec![SwapDecision {
            tensor: "x:0".into(),
            node: 999_999,
            output: 0,
            bytes: 4,
            after: 0,
            ins: vec![],
            release: None,
            gate: None,
            reason: String::new(),
        }],
        recomputes: vec![],
        unknown_ops: vec![],
        evaluations: 0,
        swap_options: 0,
        recompute_options: 0,
        host_budget: u64::MAX,
        host_timeline: HostTimeline::default(),
        optimal: None,
        hosted_accumulators: vec![],
    };
    let bad = serde_json::to_string(&report).unwrap();
    let e = replay::plan_from_report(&a.graph, &bad)
        .unwrap_err()
        .to_string();
    assert!(e.contains("another graph"), "{e}");
    // A plan that keeps loop accumulators on the host is CPU emulation's only.
    let mut hosted = report.clone();
    hosted.swaps.clear();
    hosted.hosted_accumulators = vec![hybridplan_core::schema::HostedAccumulator {
        node: "while".into(),
        output: 3,
    }];
    let e = replay::plan_from_report(&a.graph, &serde_json::to_string(&hosted).unwrap())
        .unwrap_err()
        .to_string();
    assert!(e.contains("GPU device model"), "{e}");
    let e = replay::plan_from_report(&a.graph, "{\"schema_version\": 2, \"swaps\": 3}")
        .unwrap_err()
        .to_string();
    assert!(e.contains("not a complete hybridplan plan"), "{e}");
    // A plan saved before the schema had a version: re-plan.
    let e = replay::plan_from_report(&a.graph, "{\"swaps\": []}").unwrap_err();
    assert!(
        matches!(
            e,
            hybridplan_core::PlanError::PlanVersion { found: None, .. }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("re-plan"), "{e}");
}
