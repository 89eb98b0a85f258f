//! Writes a synthetic train-step `GraphDef` and prints what the core makes
//! of it, with the time of each phase.
//!
//!     cargo run --release --example synth -- [residual|transformer|mixed] [nodes] [out.pb]
//!
//! `nodes` is a target count (default 10000); the `.pb` is written only when
//! a path is given (load it with `tf.compat.v1.GraphDef.FromString`).

use std::time::Instant;

use hybridplan_core::build::{build, BuildOptions};
use hybridplan_core::reference::specs_from_raw;
use hybridplan_core::synth::{self, SynthKind, SynthSpec};
use hybridplan_core::{graphdef, liveness, schedule};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let name = args.first().map_or("mixed", String::as_str);
    let kind = SynthKind::from_name(name).ok_or_else(|| {
        format!("unknown kind '{name}': residual, transformer, mixed, dag or narrow")
    })?;
    let target: usize = match args.get(1) {
        Some(n) => n.parse()?,
        None => 10_000,
    };
    let spec = SynthSpec {
        kind,
        blocks: synth::blocks_for_nodes(kind, target),
        ..SynthSpec::default()
    };
    let t = Instant::now();
    let bytes = synth::graphdef(&spec);
    let gen = t.elapsed();
    if let Some(path) = args.get(2) {
        std::fs::write(path, &bytes)?;
    }
    let t0 = Instant::now();
    let raw = graphdef::decode(&bytes)?;
    let t1 = Instant::now();
    let specs = specs_from_raw(&raw)?;
    let t2 = Instant::now();
    let g = build(&specs, &BuildOptions::default())?;
    let t3 = Instant::now();
    let s = schedule::schedule(&g)?;
    let t4 = Instant::now();
    let l = liveness::liveness(&g, &s);
    let t5 = Instant::now();
    let ms = |a: Instant, b: Instant| (b - a).as_secs_f64() * 1e3;
    println!(
        "{kind:?}: {} blocks, {} nodes, {} tensors, {:.1} MB; loss {}",
        spec.blocks,
        g.num_nodes(),
        g.num_tensors(),
        bytes.len() as f64 / 1e6,
        g.tensor_name(g.loss)
    );
    println!(
        "peak {:.1} MiB at position {}, persistent {:.1} MiB",
        l.peak_bytes as f64 / 1048576.0,
        l.peak_pos,
        g.persistent_bytes as f64 / 1048576.0
    );
    println!(
        "ms: generate {:.1} | decode {:.1} specs {:.1} build {:.1} schedule {:.1} liveness {:.1} | analyze {:.1}",
        gen.as_secs_f64() * 1e3,
        ms(t0, t1),
        ms(t1, t2),
        ms(t2, t3),
        ms(t3, t4),
        ms(t4, t5),
        ms(t0, t5)
    );
    Ok(())
}
