//! Prints one line per (graph, strategy): a digest of the plan report (every
//! decision, the planned figures) without the evaluation count, the
//! evaluation count, the planned peak and step time, and the planning time.
//! For checking that a speed change leaves every plan as it was.
//!
//!     cargo run --release -p hybridplan-core --example plan_digest -- [mixed:1e4 ..]
//!
//! `DIGEST_REPEAT=k` plans each k times (the times printed are the least):
//! the wall time of the call, and the CPU time of the planning thread
//! (Linux: `/proc/thread-self/schedstat`; robust to other processes'
//! load). Freeing a repeat's result is not in its time: with `k > 1` the
//! least wall time it took is printed after them (`freed`).
//! A graph `mixed:1e6:hybrid` plans that strategy only, `mixed:1e6:hybrid:0.9`
//! under 0.9 of the activation peak (default 0.5); the kinds are
//! those of `SynthKind::name` (`narrow:1e5`, `transformer:1e4`, ...). With no arguments: mixed 10^4, 10^5, 10^6 and dag 10^4, 10^5, each with
//! the strategies tflms, swap, recompute, chen, hybrid-paper and hybrid under
//! the persistent bytes plus half the activation peak (as `benches/plan.rs`).
//!
//! The digest hashes a canonical text of the report (`canonical` below: each
//! field written by name, floats by their bits), not its JSON, so that a
//! change of the report's serialised shape (the plan schema) leaves it as it
//! was while every decision and figure is the same.

use std::fmt::Write as _;
use std::hash::{Hash, Hasher};
use std::time::Instant;

use hybridplan_core::analyze;
use hybridplan_core::api::plan_analysis;
use hybridplan_core::build::BuildOptions;
use hybridplan_core::device::preset;
use hybridplan_core::plan::planner::{PlanOptions, Strategy};
use hybridplan_core::schema::{Figures, PlanReport};
use hybridplan_core::synth::{self, SynthKind, SynthSpec};

const STRATEGIES: [Strategy; 6] = Strategy::ALL;

fn parse(arg: &str) -> Option<(SynthKind, usize, Option<&str>, f64)> {
    let mut parts = arg.split(':');
    let (kind, size) = (parts.next()?, parts.next()?);
    let only = parts.next().filter(|o| !o.is_empty());
    let fraction = match parts.next() {
        Some(f) => f.parse::<f64>().ok().filter(|f| *f > 0.0 && *f <= 1.0)?,
        None => 0.5,
    };
    let kind = SynthKind::from_name(kind)?;
    let n = size.parse::<f64>().ok()? as usize;
    Some((kind, n, only, fraction))
}

/// CPU time of this thread in nanoseconds (the first field of
/// `/proc/thread-self/schedstat`), `None` where there is none.
fn thread_cpu_ns() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    s.split_whitespace().next()?.parse().ok()
}

/// FNV-1a: stable across runs and builds (unlike `DefaultHasher`'s keys).
struct Fnv(u64);

impl Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3);
        }
    }
}

/// The figures as `name=value` fields, floats by their bits.
fn figures(out: &mut String, f: &Figures) {
    let _ = write!(
        out,
        "peak={} step={:x} compute={:x} recompute={:x} stall={:x} d2h={} h2d={} swaps={} swap_ins={} clones={} host_peak={} pinned={}",
        f.peak_bytes,
        f.step_time_s.to_bits(),
        f.compute_time_s.to_bits(),
        f.recompute_time_s.to_bits(),
        f.stall_time_s.to_bits(),
        f.bytes_d2h,
        f.bytes_h2d,
        f.swaps,
        f.swap_ins,
        f.clones,
        f.host_peak_bytes,
        f.pinned_bytes
    );
}

/// Every field of the report but the evaluation count, one decision a line,
/// in an order and form independent of how the report is serialised. With
/// `DIGEST_NO_OPTION_COUNTS` set, the recompute options' count is left out
/// too (the count of options built, which a strategy that needs none
/// leaves at 0), so that two builds' plans compare alone.
fn canonical(r: &PlanReport) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "strategy={}/{} device={} budget={} persistent={} nodes={} loss={:?} unknown={:?} options={}/{} host_budget={}",
        r.strategy_requested,
        r.strategy,
        r.device,
        r.budget,
        r.persistent_bytes,
        r.num_nodes,
        r.loss,
        r.unknown_ops,
        r.swap_options,
        if std::env::var_os("DIGEST_NO_OPTION_COUNTS").is_some() {
            "-".to_string()
        } else {
            r.recompute_options.to_string()
        },
        r.host_budget
    );
    s.push_str("original ");
    figures(&mut s, &r.original);
    s.push_str("\nplanned ");
    figures(&mut s, &r.planned);
    s.push('\n');
    for w in &r.swaps {
        let _ = write!(
            s,
            "swap {} {}:{} bytes={} after={} reason={:?}",
            w.tensor, w.node, w.output, w.bytes, w.after, w.reason
        );
        for i in &w.ins {
            let _ = write!(
                s,
                " in({} {} {:?} {:?})",
                i.trigger, i.trigger_name, i.consumers, i.clone_consumers
            );
        }
        for (what, at) in [("release", &w.release), ("gate", &w.gate)] {
            if let Some(at) = at {
                let _ = write!(s, " {what}={} {}", at.node, at.name);
            }
        }
        s.push('\n');
    }
    for c in &r.recomputes {
        let _ = writeln!(
            s,
            "recompute {:?} {:?} trigger={} {} consumers={:?} clones={:?} inputs={:?} readers={:?} reason={:?}",
            c.nodes,
            c.names,
            c.trigger,
            c.trigger_name,
            c.consumers,
            c.clone_consumers,
            c.inputs.iter().map(|t| [t.node, t.output]).collect::<Vec<_>>(),
            c.readers
                .iter()
                .map(|t| [t.node, t.output, t.reads])
                .collect::<Vec<_>>(),
            c.reason
        );
    }
    let tl = &r.host_timeline;
    for (t, b) in tl.time_s.iter().zip(&tl.bytes) {
        let _ = write!(s, "{:x}:{b} ", t.to_bits());
    }
    s
}

/// `, freed N ms`: the least time a repeat took to free the previous
/// repeat's result (its report, plan and simulations), when one was freed.
fn freed(ms: f64) -> String {
    if ms.is_finite() {
        format!(", freed {ms:.0} ms")
    } else {
        String::new()
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let default = ["mixed:1e4", "mixed:1e5", "mixed:1e6", "dag:1e4", "dag:1e5"];
    let graphs: Vec<&str> = if args.is_empty() {
        default.to_vec()
    } else {
        args.iter().map(String::as_str).collect()
    };
    let dev = preset("v100-nvlink2")?;
    let repeat: usize = match std::env::var("DIGEST_REPEAT") {
        Ok(r) => r.parse()?,
        Err(_) => 1,
    };
    for arg in graphs {
        let (kind, target, only, fraction) =
            parse(arg).ok_or_else(|| format!("bad graph '{arg}'"))?;
        let spec = SynthSpec {
            kind,
            blocks: synth::blocks_for_nodes(kind, target),
            ..SynthSpec::default()
        };
        let a = analyze(&synth::graphdef(&spec), &BuildOptions::default())?;
        let persistent = a.graph.persistent_bytes;
        let active = a.liveness.peak_bytes.saturating_sub(persistent);
        let budget = persistent + (active as f64 * fraction) as u64;
        for s in STRATEGIES {
            if only.is_some_and(|o| o != s.name()) {
                continue;
            }
            let opts = PlanOptions {
                strategy: s,
                budget,
                ..PlanOptions::default()
            };
            let mut ms = f64::INFINITY;
            let mut cpu_ms = f64::INFINITY;
            let mut drop_ms = f64::INFINITY;
            let mut out = None;
            for _ in 0..repeat {
                let (t, c) = (Instant::now(), thread_cpu_ns());
                let o = plan_analysis(&a, &dev, &opts, &[]);
                ms = ms.min(t.elapsed().as_secs_f64() * 1e3);
                if let (Some(c0), Some(c1)) = (c, thread_cpu_ns()) {
                    cpu_ms = cpu_ms.min((c1 - c0) as f64 / 1e6);
                }
                // The previous repeat's result is freed here, outside the
                // call's time, and timed on its own.
                let d = Instant::now();
                if out.replace(o).is_some() {
                    drop_ms = drop_ms.min(d.elapsed().as_secs_f64() * 1e3);
                }
            }
            let out = out.ok_or("no run")?;
            match out {
                Ok(o) => {
                    let r = &o.report;
                    let evals = r.evaluations;
                    let mut h = Fnv(0xcbf2_9ce4_8422_2325);
                    canonical(r).hash(&mut h);
                    format!("{:?}", o.plan).hash(&mut h);
                    println!(
                        "{arg} {:<12} {:016x} evals {evals} peak {} step {:.9} swaps {} recomputes {} ({ms:.0} ms, cpu {cpu_ms:.0} ms{})",
                        s.name(),
                        h.finish(),
                        r.planned.peak_bytes,
                        r.planned.step_time_s,
                        r.swaps.len(),
                        r.recomputes.len(),
                        freed(drop_ms)
                    );
                }
                Err(e) => println!(
                    "{arg} {:<12} error: {e} ({ms:.0} ms, cpu {cpu_ms:.0} ms{})",
                    s.name(),
                    freed(drop_ms)
                ),
            }
        }
    }
    Ok(())
}
