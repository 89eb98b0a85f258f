//! Times `graph_from_bytes` (the GraphDef decoder and build) on a synthetic
//! mixed step of about NODES nodes: the best of REPS calls.
//!
//!     cargo run --release -p hybridplan-core --example decode_time -- 1e5 11
use hybridplan_core::build::BuildOptions;
use hybridplan_core::synth::{self, SynthKind, SynthSpec};
use std::time::Instant;
fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse::<f64>().unwrap() as usize)
        .collect();
    let kind = SynthKind::Mixed;
    let spec = SynthSpec {
        kind,
        blocks: synth::blocks_for_nodes(kind, args[0]),
        ..SynthSpec::default()
    };
    let bytes = synth::graphdef(&spec);
    let opts = BuildOptions::default();
    let mut best = f64::INFINITY;
    for _ in 0..args[1] {
        let t = Instant::now();
        let g = hybridplan_core::graph_from_bytes(&bytes, &opts).unwrap();
        best = best.min(t.elapsed().as_secs_f64());
        std::hint::black_box(g);
    }
    println!(
        "{} bytes, best of {}: {:.3} ms",
        bytes.len(),
        args[1],
        best * 1e3
    );
}
