//! Mutation fuzzing of the whole path from bytes to plan: decode, build,
//! schedule, liveness, plan, simulate must return `Ok` or a typed error for
//! any input, never panic. Seeds: the real TensorFlow fixture and the files
//! in `tests/corpus/` (small synthetic graphs written on first run).
//!
//! `cargo test --release --test fuzz -- --ignored` runs 10^6 executions (the
//! figures in docs/reliability.md); the plain test runs 20,000.

use hybridplan_core::api::plan_analysis;
use hybridplan_core::build::BuildOptions;
use hybridplan_core::device::preset;
use hybridplan_core::plan::planner::{PlanOptions, Strategy};
use hybridplan_core::synth::{graphdef, SynthKind, SynthSpec};
use hybridplan_core::{analyze, PlanError};

const FIXTURE: &[u8] = include_bytes!("fixtures/small_cnn.pb");

/// xorshift64*: deterministic, no dependency.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

fn corpus() -> Vec<Vec<u8>> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus");
    let mut out = vec![FIXTURE.to_vec()];
    for (k, kind) in [
        SynthKind::Residual,
        SynthKind::Transformer,
        SynthKind::Mixed,
        SynthKind::Dag,
    ]
    .into_iter()
    .enumerate()
    {
        let path = dir.join(format!("synth_{k}.pb"));
        if !path.exists() {
            let spec = SynthSpec {
                kind,
                blocks: 1,
                batch: 2,
                size: 4,
                channels: 8,
                ..SynthSpec::default()
            };
            let _ = std::fs::write(&path, graphdef(&spec));
        }
        if let Ok(b) = std::fs::read(&path) {
            out.push(b);
        }
    }
    out
}

fn mutate(rng: &mut Rng, seed: &[u8]) -> Vec<u8> {
    let mut b = seed.to_vec();
    for _ in 0..1 + rng.below(4) {
        let n = b.len().max(1);
        match rng.below(7) {
            0 => {
                let i = rng.below(n);
                if i < b.len() {
                    b[i] ^= 1 << rng.below(8);
                }
            }
            1 => b.truncate(rng.below(n)),
            2 => {
                let i = rng.below(n);
                b.insert(i.min(b.len()), rng.next() as u8);
            }
            3 => {
                let (i, len) = (rng.below(n), 1 + rng.below(64));
                let chunk: Vec<u8> = b.iter().skip(i).take(len).copied().collect();
                let j = rng.below(n).min(b.len());
                b.splice(j..j, chunk);
            }
            4 => {
                let i = rng.below(n);
                if i < b.len() {
                    b[i] = [0x00, 0x7f, 0x80, 0xff][rng.below(4)];
                }
            }
            5 => {
                let (i, len) = (rng.below(n), rng.below(32));
                let end = (i + len).min(b.len());
                if i < end {
                    b.drain(i..end);
                }
            }
            _ => b = (0..rng.below(256)).map(|_| rng.next() as u8).collect(),
        }
    }
    b
}

fn run(execs: u64) -> (u64, u64, u64) {
    let seeds = corpus();
    let dev = preset("a100-pcie4").unwrap();
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let (mut accepted, mut planned) = (0u64, 0u64);
    for i in 0..execs {
        let pick = rng.below(seeds.len());
        let input = mutate(&mut rng, &seeds[pick]);
        let Ok(a) = analyze(&input, &BuildOptions::default()) else {
            continue;
        };
        accepted += 1;
        if i % 16 != 0 {
            continue;
        }
        let peak = a.liveness.peak_bytes;
        let budget = (peak as f64 * (0.2 + 0.8 * (rng.below(1000) as f64 / 1000.0))) as u64;
        let strategy = [Strategy::Swap, Strategy::Recompute, Strategy::Hybrid][rng.below(3)];
        let opts = PlanOptions {
            strategy,
            budget: budget.max(1),
            min_bytes: 1,
            ..PlanOptions::default()
        };
        match plan_analysis(&a, &dev, &opts, &[]) {
            Ok(o) => {
                assert!(
                    o.planned.peak_bytes <= budget.max(1),
                    "a returned plan exceeds its budget"
                );
                planned += 1;
            }
            Err(PlanError::Budget { best_peak, .. }) => assert!(best_peak > budget.max(1)),
            Err(_) => {}
        }
    }
    (execs, accepted, planned)
}

#[test]
fn twenty_thousand_mutations_never_panic() {
    let (n, accepted, _) = run(20_000);
    assert_eq!(n, 20_000);
    assert!(
        accepted > 100,
        "the mutator should keep some inputs valid ({accepted})"
    );
}

#[test]
#[ignore = "10^6 executions: run with --release -- --ignored"]
fn a_million_mutations_never_panic() {
    let t = std::time::Instant::now();
    let (n, accepted, planned) = run(1_000_000);
    println!(
        "fuzz: {n} executions, {accepted} accepted, {planned} planned, in {:?}",
        t.elapsed()
    );
}
