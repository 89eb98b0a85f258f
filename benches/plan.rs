//! Benchmarks of planning: the partition and option-building phases alone
//! and the plan of every strategy, on synthetic train steps (`mixed`, the
//! random layered `dag`, the `narrow` residual stack whose plans swap 6% of
//! the nodes, and `transformer`, `hybrid` only) and on real traced
//! `GraphDef`s. Each benched plan prints its size (swaps, recomputes,
//! simulations) to stderr next to criterion's time.
//!
//!     cargo bench -p hybridplan-core --bench plan [-- FILTER]
//!
//! Groups, each with the graph's node count as its throughput (criterion
//! reports nodes per second):
//! - `plan_mixed_1e3` .. `plan_mixed_1e5`, `plan_dag_1e3` .. `plan_dag_1e5`,
//!   `plan_narrow_*` and `plan_transformer_*` (`hybrid` only) likewise,
//!   and `_1e6` of each only with `HYBRIDPLAN_BENCH_1E6=1` (each 10^6
//!   iteration takes seconds): `partition` (recompute units), `options`
//!   (`Planner::new`: swap candidates, placed swaps, cut segments, recompute
//!   options), then one bench per strategy (`tflms`, `swap`, `recompute`,
//!   `chen`, `hybrid-paper`, `hybrid`; `dag_1e6`, `narrow_1e6`: `hybrid`
//!   only):
//!   `api::plan_analysis` on the analysed
//!   graph (op times, options, the strategy, the release nodes and the final
//!   simulations), and `hybrid_total`: `api::plan_bytes` from the serialized
//!   bytes (decode and analysis included);
//! - `real_<file stem>` for `rust/core/tests/fixtures/small_cnn.pb` and every
//!   `*.pb` in the directory named by `HYBRIDPLAN_BENCH_GRAPHS` (none when
//!   unset): `analyze_total`, `options` and `hybrid`.
//!
//! Device `v100-nvlink2`. Budget of the synthetic graphs: the persistent
//! bytes plus half the activation peak (`persistent + (peak - persistent) /
//! 2`); of the real graphs: the persistent bytes plus the first of 0.5, 0.6,
//! .., 0.9 of the activation peak that `hybrid` plans. When a strategy finds
//! no plan within the budget, the bench still times the attempt (planning
//! time to the `BudgetError`) and the facts line says so.
//!
//! With `HYBRIDPLAN_BENCH_FACTS=FILE`, one JSON line per benched plan is
//! appended to FILE (group, bench, nodes, budget, outcome, chosen strategy,
//! planned peak and step time, simulations, options), for
//! `experiments/run_all.py`'s report.

use std::hint::black_box;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use criterion::{
    criterion_group, criterion_main, BenchmarkGroup, Criterion, SamplingMode, Throughput,
};
use hybridplan_core::api::{op_times, plan_analysis, plan_bytes};
use hybridplan_core::build::BuildOptions;
use hybridplan_core::device::{preset, DeviceModel};
use hybridplan_core::plan::options::Ctx;
use hybridplan_core::plan::partition::partition;
use hybridplan_core::plan::planner::{PlanOptions, Planner, Strategy};
use hybridplan_core::plan::Plan;
use hybridplan_core::simulate::{Detail, Simulator};
use hybridplan_core::synth::{self, SynthKind, SynthSpec};
use hybridplan_core::{analyze, Analysis};

use criterion::measurement::WallTime;

const DEVICE: &str = "v100-nvlink2";

const STRATEGIES: [Strategy; 6] = Strategy::ALL;

/// The synthetic sizes: 10^3..10^5, and 10^6 when `HYBRIDPLAN_BENCH_1E6=1`.
fn sizes() -> Vec<(&'static str, usize)> {
    let mut v = vec![("1e3", 1_000), ("1e4", 10_000), ("1e5", 100_000)];
    if std::env::var("HYBRIDPLAN_BENCH_1E6").is_ok_and(|s| s == "1") {
        v.push(("1e6", 1_000_000));
    }
    v
}

/// Persistent bytes plus half the activation peak.
fn budget_of(a: &Analysis) -> u64 {
    let persistent = a.graph.persistent_bytes;
    persistent + a.liveness.peak_bytes.saturating_sub(persistent) / 2
}

/// Budget of a real graph: persistent bytes plus the first of 0.5, 0.6, ..,
/// 0.9 of the activation peak that `hybrid` plans (0.5 when none does).
fn real_budget(a: &Analysis, dev: &DeviceModel) -> u64 {
    let persistent = a.graph.persistent_bytes;
    let activations = a.liveness.peak_bytes.saturating_sub(persistent);
    (5..10)
        .map(|tenths| persistent + activations * tenths / 10)
        .find(|&b| plan_analysis(a, dev, &options(Strategy::Hybrid, b), &[]).is_ok())
        .unwrap_or_else(|| budget_of(a))
}

fn options(strategy: Strategy, budget: u64) -> PlanOptions {
    PlanOptions {
        strategy,
        budget,
        ..PlanOptions::default()
    }
}

/// Sampling for a graph of `nodes` nodes: criterion's defaults below 10^5,
/// ten flat samples and short warm-up and measurement times above (one
/// 10^6-node plan takes seconds; criterion then runs ten iterations).
fn configure(group: &mut BenchmarkGroup<'_, WallTime>, nodes: u64) {
    group.throughput(Throughput::Elements(nodes));
    if nodes >= 50_000 {
        group
            .sampling_mode(SamplingMode::Flat)
            .sample_size(10)
            .warm_up_time(Duration::from_millis(500))
            .measurement_time(Duration::from_secs(3));
    } else if nodes >= 5_000 {
        group
            .sample_size(20)
            .warm_up_time(Duration::from_millis(500))
            .measurement_time(Duration::from_secs(2));
    } else {
        group
            .warm_up_time(Duration::from_millis(300))
            .measurement_time(Duration::from_secs(1));
    }
}

/// Appends one JSON line to `$HYBRIDPLAN_BENCH_FACTS` (if set).
fn record(fact: serde_json::Value) {
    let Ok(path) = std::env::var("HYBRIDPLAN_BENCH_FACTS") else {
        return;
    };
    let line = format!("{fact}\n");
    let written = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .and_then(|mut f| f.write_all(line.as_bytes()));
    if let Err(e) = written {
        eprintln!("cannot append to {path}: {e}");
    }
}

/// Plans once (outside the timing) and records what came out.
fn record_plan(group: &str, bench: &str, a: &Analysis, dev: &DeviceModel, opts: &PlanOptions) {
    let base = serde_json::json!({
        "group": group,
        "bench": bench,
        "nodes": a.graph.num_nodes(),
        "budget": opts.budget,
        "peak": a.liveness.peak_bytes,
        "persistent": a.graph.persistent_bytes,
    });
    let mut fact = base.as_object().cloned().unwrap_or_default();
    match plan_analysis(a, dev, opts, &[]) {
        Ok(o) => {
            let r = &o.report;
            fact.insert("ok".into(), true.into());
            fact.insert("strategy".into(), r.strategy.clone().into());
            fact.insert("planned_peak".into(), r.planned.peak_bytes.into());
            fact.insert("original_step_s".into(), r.original.step_time_s.into());
            fact.insert("planned_step_s".into(), r.planned.step_time_s.into());
            fact.insert("swaps".into(), r.swaps.len().into());
            fact.insert("recomputes".into(), r.recomputes.len().into());
            fact.insert("evaluations".into(), r.evaluations.into());
            fact.insert("swap_options".into(), r.swap_options.into());
            fact.insert("recompute_options".into(), r.recompute_options.into());
            // The plan's size next to the time criterion prints.
            eprintln!(
                "{group}/{bench}: plan of {} swaps, {} recomputes ({} nodes, {} simulations)",
                r.swaps.len(),
                r.recomputes.len(),
                a.graph.num_nodes(),
                r.evaluations
            );
        }
        Err(e) => {
            fact.insert("ok".into(), false.into());
            fact.insert("error".into(), e.to_string().into());
        }
    }
    record(serde_json::Value::Object(fact));
}

/// Times `Planner::new` (every option, for `strategy`) on an analysed graph.
fn bench_options(
    group: &mut BenchmarkGroup<'_, WallTime>,
    a: &Analysis,
    dev: &DeviceModel,
    opts: &PlanOptions,
) {
    let (times, _) = op_times(&a.graph, dev, &[]).expect("op times");
    let sim = std::cell::RefCell::new(Simulator::new(&a.graph, &a.schedule, &times, dev).unwrap());
    let judge = |p: &Plan| sim.borrow_mut().run(p, Detail::Summary);
    group.bench_function("options", |b| {
        b.iter(|| {
            let ctx = Ctx::new(a, &times, dev);
            let planner = Planner::new(&ctx, black_box(opts), &judge).expect("options");
            planner.num_options()
        })
    });
}

/// Times one strategy's whole `plan_analysis` (the `Err` of a budget that
/// cannot be met is timed too).
fn bench_strategy(
    group: &mut BenchmarkGroup<'_, WallTime>,
    group_name: &str,
    name: &str,
    a: &Analysis,
    dev: &DeviceModel,
    opts: &PlanOptions,
) {
    // Criterion calls the closure only when the bench passes the filter.
    let mut recorded = false;
    group.bench_function(name, |b| {
        if !recorded {
            record_plan(group_name, name, a, dev, opts);
            recorded = true;
        }
        b.iter(|| plan_analysis(black_box(a), dev, opts, &[]).is_ok())
    });
}

fn group<'c>(c: &'c mut Criterion, name: &str, nodes: u64) -> BenchmarkGroup<'c, WallTime> {
    let mut group = c.benchmark_group(name);
    configure(&mut group, nodes);
    group
}

/// Every phase and strategy on one synthetic size.
fn bench_synthetic(c: &mut Criterion, dev: &DeviceModel, kind: SynthKind, tag: &str) {
    for (label, target) in sizes() {
        // The DAG and the narrow residual stack at 10^6, and the transformer
        // stack at every size, plan `hybrid` only (each strategy costs
        // seconds at 10^6).
        let hybrid_only = kind == SynthKind::Transformer
            || (matches!(kind, SynthKind::Dag | SynthKind::Narrow) && target >= 1_000_000);
        let strategies: &[Strategy] = if hybrid_only {
            &[Strategy::Hybrid]
        } else {
            &STRATEGIES
        };
        let spec = SynthSpec {
            kind,
            blocks: synth::blocks_for_nodes(kind, target),
            ..SynthSpec::default()
        };
        let bytes = synth::graphdef(&spec);
        let build = BuildOptions::default();
        let a = analyze(&bytes, &build).expect("synthetic graphs analyse");
        let budget = budget_of(&a);
        let name = format!("plan_{tag}_{label}");
        let mut g = group(c, &name, a.graph.num_nodes() as u64);
        g.bench_function("partition", |b| {
            b.iter(|| {
                partition(black_box(&a.graph), black_box(&a.schedule))
                    .units
                    .len()
            })
        });
        bench_options(&mut g, &a, dev, &options(Strategy::Hybrid, budget));
        for s in STRATEGIES {
            if strategies.contains(&s) {
                bench_strategy(&mut g, &name, s.name(), &a, dev, &options(s, budget));
            }
        }
        let opts = options(Strategy::Hybrid, budget);
        g.bench_function("hybrid_total", |b| {
            b.iter(|| plan_bytes(black_box(&bytes), &build, dev, &opts, &[]).is_ok())
        });
        g.finish();
    }
}

/// The graphs of `real_*` groups: the fixture, then `$HYBRIDPLAN_BENCH_GRAPHS/*.pb`
/// sorted by name.
fn real_graphs() -> Vec<PathBuf> {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/small_cnn.pb");
    let mut extra: Vec<PathBuf> = std::env::var_os("HYBRIDPLAN_BENCH_GRAPHS")
        .and_then(|d| std::fs::read_dir(d).ok())
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "pb"))
        .collect();
    extra.sort();
    std::iter::once(fixture).chain(extra).collect()
}

/// Analysis, options and the `hybrid` plan of each real graph.
fn bench_real(c: &mut Criterion, dev: &DeviceModel) {
    let build = BuildOptions::default();
    for path in real_graphs() {
        let stem = path.file_stem().unwrap_or_default().to_string_lossy();
        let Ok(bytes) = std::fs::read(&path) else {
            eprintln!("skipping {}: cannot read it", path.display());
            continue;
        };
        let a = match analyze(&bytes, &build) {
            Ok(a) => a,
            Err(e) => {
                eprintln!("skipping {}: {e}", path.display());
                continue;
            }
        };
        let opts = options(Strategy::Hybrid, real_budget(&a, dev));
        let name = format!("real_{stem}");
        let mut g = group(c, &name, a.graph.num_nodes() as u64);
        g.bench_function("analyze_total", |b| {
            b.iter(|| analyze(black_box(&bytes), &build).is_ok())
        });
        bench_options(&mut g, &a, dev, &opts);
        bench_strategy(&mut g, &name, "hybrid", &a, dev, &opts);
        g.finish();
    }
}

fn benches(c: &mut Criterion) {
    let dev = preset(DEVICE).expect("device preset");
    bench_synthetic(c, &dev, SynthKind::Mixed, "mixed");
    bench_synthetic(c, &dev, SynthKind::Dag, "dag");
    bench_synthetic(c, &dev, SynthKind::Narrow, "narrow");
    bench_synthetic(c, &dev, SynthKind::Transformer, "transformer");
    bench_real(c, &dev);
}

criterion_group!(plan, benches);
criterion_main!(plan);
