//! The simulator on a ~1,000,000-node synthetic training step with a plan
//! that swaps or recomputes 10% of its tensors.
//!
//! Run: `cargo bench -p hybridplan-core --bench simulate`.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use hybridplan_core::build::BuildOptions;
use hybridplan_core::device::DeviceModel;
use hybridplan_core::graph::{Graph, NodeFlags, Phase};
use hybridplan_core::plan::{Plan, Recompute, Swap, SwapIn};
use hybridplan_core::schedule::Schedule;
use hybridplan_core::simulate::{Detail, SimResult, Simulator};
use hybridplan_core::synth::{blocks_for_nodes, graphdef, SynthKind, SynthSpec};
use hybridplan_core::{analyze, cost, device, Analysis};

/// One whole simulation: the layout of the graph, then the plan.
fn simulate(
    g: &Graph,
    s: &Schedule,
    costs: &[f64],
    dev: &DeviceModel,
    plan: &Plan,
) -> hybridplan_core::Result<SimResult> {
    Simulator::new(g, s, costs, dev)?.run(plan, Detail::FULL)
}

/// (after, trigger, backward consumers) of a forward tensor whose every
/// other reader runs before its first backward reader.
fn late_reads(g: &Graph, s: &Schedule, t: u32) -> Option<(u32, u32, Vec<u32>)> {
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

/// A forward op that may be cloned and makes one output.
fn clonable(g: &Graph, v: u32) -> bool {
    g.phase[v as usize] == Phase::Forward
        && !g.nodes[v as usize].flags.has(NodeFlags::NO_RECOMPUTE)
        && g.outputs(v).len() == 1
}

/// Alternately swaps forward tensors read in the backward pass and
/// recomputes them (with the op before, when that one is clonable too),
/// until `target` distinct tensors are touched.
fn plan_touching(a: &Analysis, target: usize) -> Plan {
    let (g, s) = (&a.graph, &a.schedule);
    let mut plan = Plan::default();
    let mut touched = vec![false; g.num_tensors()];
    let mut count = 0usize;
    for t in 0..g.num_tensors() as u32 {
        let p = g.tensors[t as usize].node;
        if count >= target || touched[t as usize] || g.phase[p as usize] != Phase::Forward {
            continue;
        }
        let Some((after, trigger, late)) = late_reads(g, s, t) else {
            continue;
        };
        if g.tensors[t as usize].value_bytes == 0 {
            continue;
        }
        if clonable(g, p) && plan.recomputes.len() < plan.swaps.len() {
            let mut nodes = vec![p];
            if let Some(&i) = g.inputs(p).first() {
                let q = g.tensors[i as usize].node;
                if clonable(g, q) && !touched[i as usize] {
                    nodes.insert(0, q);
                }
            }
            for &v in &nodes {
                touched[g.outputs(v).start as usize] = true;
                count += 1;
            }
            let consumers = late;
            let clone_consumers = vec![];
            plan.recomputes.push(Recompute {
                nodes,
                trigger,
                consumers,
                clone_consumers,
            });
        } else {
            touched[t as usize] = true;
            count += 1;
            let ins = vec![SwapIn {
                trigger,
                consumers: late,
                clone_consumers: vec![],
                follows: false,
            }];
            plan.swaps.push(Swap {
                release: hybridplan_core::graph::NONE,
                gate: hybridplan_core::graph::NONE,
                tensor: t,
                after,
                ins,
            });
        }
    }
    plan
}

fn bench(c: &mut Criterion) {
    let kind = SynthKind::Mixed;
    let spec = SynthSpec {
        kind,
        blocks: blocks_for_nodes(kind, 1_000_000),
        batch: 2,
        size: 8,
        channels: 16,
        ..SynthSpec::default()
    };
    let a = analyze(&graphdef(&spec), &BuildOptions::default()).unwrap();
    let dev = device::preset("a100-pcie4").unwrap();
    let costs = cost::op_costs(&a.graph, &dev).time_s;
    let plan = plan_touching(&a, a.graph.num_tensors() / 10);
    let clones: usize = plan.recomputes.iter().map(|r| r.nodes.len()).sum();
    let r = simulate(&a.graph, &a.schedule, &costs, &dev, &plan).unwrap();
    eprintln!(
        "{} nodes, {} tensors; plan: {} swaps + {} recomputes ({} clones) = {:.1}% of tensors; peak {} -> {} bytes, step {:.4} s, stall {:.4} s",
        a.graph.num_nodes(),
        a.graph.num_tensors(),
        plan.swaps.len(),
        plan.recomputes.len(),
        clones,
        100.0 * (plan.swaps.len() + clones) as f64 / a.graph.num_tensors() as f64,
        a.liveness.peak_bytes,
        r.peak_bytes,
        r.step_time_s,
        r.stall_time_s
    );
    let mut group = c.benchmark_group("simulate");
    group.sample_size(10);
    group.bench_function("1M nodes, 10% of tensors planned", |b| {
        b.iter(|| simulate(&a.graph, &a.schedule, &costs, &dev, black_box(&plan)).unwrap())
    });
    group.bench_function("1M nodes, empty plan", |b| {
        b.iter(|| {
            simulate(
                &a.graph,
                &a.schedule,
                &costs,
                &dev,
                black_box(&Plan::default()),
            )
            .unwrap()
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
