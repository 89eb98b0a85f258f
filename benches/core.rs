//! Benchmarks of the core's analysis phases on synthetic train steps: the
//! `Mixed` residual/transformer steps of about 10^3, 10^4, 10^5 and 10^6
//! nodes, and the random layered DAGs (`SynthKind::Dag`, the topology
//! stress) of 10^3..10^5 nodes (10^6 too with `HYBRIDPLAN_BENCH_1E6=1`).
//!
//!     cargo bench -p hybridplan-core --bench core [-- FILTER]
//!
//! One group per kind and size (`mixed_1e4/graph_from_bytes`,
//! `dag_1e4/schedule`, ...), each with the node count as its throughput, so
//! criterion reports nodes per second:
//! - `graph_from_bytes`: bytes to the built graph (phases and loss
//!   inference included) by the decoder, as `analyze` does it;
//! - `decode`, `build`: the reference route (the decoder's test oracle,
//!   `testing` feature), for comparison:
//!   `graphdef::decode` of the bytes, then `specs_from_raw` + `build`;
//! - `schedule`, `liveness`: on the built graph;
//! - `analyze_total`: bytes to liveness, as `hybridplan_core::analyze` does
//!   (the result dropped inside the timing).
//!
//! Target: `analyze_total` at 10^6 nodes under 0.5 s on one core, and the
//! time per node at 10^6 at most 1.5x the time per node at 10^4.
//! The planning phases and strategies are in `plan.rs`.

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, SamplingMode, Throughput};
use hybridplan_core::build::{build, BuildOptions};
use hybridplan_core::reference::specs_from_raw;
use hybridplan_core::synth::{self, SynthKind, SynthSpec};
use hybridplan_core::{analyze, graph_from_bytes, graphdef, liveness, schedule};

fn bench_size(c: &mut Criterion, kind: SynthKind, tag: &str, label: &str, target: usize) {
    let spec = SynthSpec {
        kind,
        blocks: synth::blocks_for_nodes(kind, target),
        ..SynthSpec::default()
    };
    let bytes = synth::graphdef(&spec);
    let opts = BuildOptions::default();
    let raw = graphdef::decode(&bytes).expect("synthetic graphs decode");
    let graph = graph_from_bytes(&bytes, &opts).unwrap();
    let sched = schedule::schedule(&graph).unwrap();
    let nodes = graph.num_nodes() as u64;

    let mut group = c.benchmark_group(format!("{tag}_{label}"));
    group.throughput(Throughput::Elements(nodes));
    if target >= 100_000 {
        group
            .sampling_mode(SamplingMode::Flat)
            .sample_size(10)
            .warm_up_time(Duration::from_secs(1));
    }
    if target >= 1_000_000 {
        group.measurement_time(Duration::from_secs(8));
    }
    group.bench_function("graph_from_bytes", |b| {
        b.iter(|| graph_from_bytes(black_box(&bytes), &opts).unwrap())
    });
    group.bench_function("decode", |b| {
        b.iter(|| graphdef::decode(black_box(&bytes)).unwrap())
    });
    group.bench_function("build", |b| {
        b.iter(|| build(&specs_from_raw(black_box(&raw)).unwrap(), &opts).unwrap())
    });
    group.bench_function("schedule", |b| {
        b.iter(|| schedule::schedule(black_box(&graph)).unwrap())
    });
    group.bench_function("liveness", |b| {
        b.iter(|| liveness::liveness(black_box(&graph), black_box(&sched)))
    });
    group.bench_function("analyze_total", |b| {
        b.iter(|| analyze(black_box(&bytes), &opts).unwrap())
    });
    group.finish();
}

fn benches(c: &mut Criterion) {
    let sizes = [
        ("1e3", 1_000),
        ("1e4", 10_000),
        ("1e5", 100_000),
        ("1e6", 1_000_000),
    ];
    for (label, target) in sizes {
        bench_size(c, SynthKind::Mixed, "mixed", label, target);
    }
    let dag_1e6 = std::env::var("HYBRIDPLAN_BENCH_1E6").is_ok_and(|s| s == "1");
    for (label, target) in sizes {
        if target < 1_000_000 || dag_1e6 {
            bench_size(c, SynthKind::Dag, "dag", label, target);
        }
    }
}

criterion_group!(core, benches);
criterion_main!(core);
