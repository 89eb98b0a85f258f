//! Prints one line per (graph, strategy): a digest of the plan report (every
//! decision, the planned figures) without the evaluation count, the
//! evaluation count, the planned peak and step time, and the planning time.
//! For checking that a speed change leaves every plan as it was.
//!
//!     cargo run --release -p hybridplan-core --example plan_digest -- [mixed:1e4 ..]
//!
//! `DIGEST_REPEAT=k` plans each k times (the times printed are the least):
//! the wall time of the call, and the CPU time of the planning thread
//! (`CLOCK_THREAD_CPUTIME_ID`; robust to other processes' load, not to the
//! host's). Freeing a repeat's result is not in its time: with `k > 1` the
//! least wall time it took is printed after them (`freed`). With
//! `DIGEST_INTERLEAVE=1`, every graph is analysed first and the repeats
//! go round the requests (each planned once per round), so that a ratio
//! of two requests' times sees the same machine.
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
use std::rc::Rc;
use std::time::Instant;

use hybridplan_core::api::{plan_analysis, Outcome};
use hybridplan_core::build::BuildOptions;
use hybridplan_core::device::preset;
use hybridplan_core::device::DeviceModel;
use hybridplan_core::plan::planner::{PlanOptions, Strategy};
use hybridplan_core::schema::{Figures, PlanReport};
use hybridplan_core::synth::{self, SynthKind, SynthSpec};
use hybridplan_core::{analyze, Analysis};

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

/// CPU time of this thread in nanoseconds (`CLOCK_THREAD_CPUTIME_ID`:
/// exact, where `/proc/thread-self/schedstat` moves by scheduler ticks),
/// `None` where there is none.
fn thread_cpu_ns() -> Option<u64> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the call.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    (rc == 0).then(|| ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
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

/// One request: a graph's analysis, a strategy and its options, and the
/// least times of its repeats so far.
struct Job<'a> {
    arg: &'a str,
    analysis: Rc<Analysis>,
    strategy: Strategy,
    opts: PlanOptions,
    ms: f64,
    cpu_ms: f64,
    freed_ms: f64,
    out: Option<hybridplan_core::Result<Outcome>>,
}

impl Job<'_> {
    /// Plans once. The previous repeat's result is freed after the call's
    /// time is taken, and timed on its own.
    fn repeat(&mut self, dev: &DeviceModel) {
        let (t, c) = (Instant::now(), thread_cpu_ns());
        let o = plan_analysis(&self.analysis, dev, &self.opts, &[]);
        self.ms = self.ms.min(t.elapsed().as_secs_f64() * 1e3);
        if let (Some(c0), Some(c1)) = (c, thread_cpu_ns()) {
            self.cpu_ms = self.cpu_ms.min((c1 - c0) as f64 / 1e6);
        }
        let d = Instant::now();
        if self.out.replace(o).is_some() {
            self.freed_ms = self.freed_ms.min(d.elapsed().as_secs_f64() * 1e3);
        }
    }

    /// The request's line.
    fn print(&self) {
        let (arg, name) = (self.arg, self.strategy.name());
        let (ms, cpu_ms, freed) = (self.ms, self.cpu_ms, freed(self.freed_ms));
        match &self.out {
            Some(Ok(o)) => {
                let r = &o.report;
                let evals = r.evaluations;
                let mut h = Fnv(0xcbf2_9ce4_8422_2325);
                canonical(r).hash(&mut h);
                format!("{:?}", o.plan).hash(&mut h);
                println!(
                    "{arg} {name:<12} {:016x} evals {evals} peak {} step {:.9} swaps {} recomputes {} ({ms:.0} ms, cpu {cpu_ms:.0} ms{freed})",
                    h.finish(),
                    r.planned.peak_bytes,
                    r.planned.step_time_s,
                    r.swaps.len(),
                    r.recomputes.len(),
                );
            }
            Some(Err(e)) => {
                println!("{arg} {name:<12} error: {e} ({ms:.0} ms, cpu {cpu_ms:.0} ms{freed})")
            }
            None => println!("{arg} {name:<12} not run"),
        }
    }
}

/// The requests of `arg` on its graph (analysed once per kind and size
/// in `cache`).
fn jobs<'a>(
    arg: &'a str,
    cache: &mut Vec<((SynthKind, usize), Rc<Analysis>)>,
) -> Result<Vec<Job<'a>>, Box<dyn std::error::Error>> {
    let (kind, target, only, fraction) = parse(arg).ok_or_else(|| format!("bad graph '{arg}'"))?;
    let a = match cache.iter().find(|(k, _)| *k == (kind, target)) {
        Some((_, a)) => a.clone(),
        None => {
            let spec = SynthSpec {
                kind,
                blocks: synth::blocks_for_nodes(kind, target),
                ..SynthSpec::default()
            };
            let a = Rc::new(analyze(&synth::graphdef(&spec), &BuildOptions::default())?);
            cache.push(((kind, target), a.clone()));
            a
        }
    };
    let persistent = a.graph.persistent_bytes;
    let active = a.liveness.peak_bytes.saturating_sub(persistent);
    let budget = persistent + (active as f64 * fraction) as u64;
    Ok(STRATEGIES
        .into_iter()
        .filter(|s| only.is_none_or(|o| o == s.name()))
        .map(|strategy| Job {
            arg,
            analysis: a.clone(),
            strategy,
            opts: PlanOptions {
                strategy,
                budget,
                ..PlanOptions::default()
            },
            ms: f64::INFINITY,
            cpu_ms: f64::INFINITY,
            freed_ms: f64::INFINITY,
            out: None,
        })
        .collect())
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
    if repeat == 0 {
        return Err("DIGEST_REPEAT must be at least 1".into());
    }
    let interleave = std::env::var("DIGEST_INTERLEAVE").is_ok_and(|v| !v.is_empty() && v != "0");
    if interleave {
        // Every graph analysed first; then round after round, each request
        // planned once per round, so that the machine's drift reaches
        // every request alike.
        let mut cache = Vec::new();
        let mut all = Vec::new();
        for arg in &graphs {
            all.extend(jobs(arg, &mut cache)?);
        }
        for _ in 0..repeat {
            for j in &mut all {
                j.repeat(&dev);
            }
        }
        all.iter().for_each(Job::print);
        return Ok(());
    }
    for arg in graphs {
        // One graph held at a time.
        for mut j in jobs(arg, &mut Vec::new())? {
            for _ in 0..repeat {
                j.repeat(&dev);
            }
            j.print();
        }
    }
    Ok(())
}
