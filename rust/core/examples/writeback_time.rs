//! Times the write-back of a plan's swaps into the GraphDef's bytes
//! (`writeback::write`, what `_core.write_swaps` runs between locating the
//! nodes and handing the bytes to Python) on synthetic steps planned by
//! `hybrid`: the least of REPEAT calls, and a digest of everything written
//! (FNV-1a of the bytes, the names and the counts), to compare two builds.
//!
//!     cargo run --release -p hybridplan-core --example writeback_time -- narrow:1e6 mixed:1e6
//!
//! Each argument is `KIND:NODES[:FRACTION]` (the budget: persistent bytes
//! plus FRACTION of the activation peak, 0.5 when left out); `REPEAT` in the
//! environment (default 3). The op signatures are those of a stand-in
//! table (every op: eight outputs of its `T`; `AddV2`, `AddN`, `Add` and
//! `Mul` commutative), enough for the synthetic steps' ops; the Python
//! writer's own signatures and its byte-for-byte check are in
//! `tests/test_rewrite_identity.py`.
use std::time::Instant;

use hybridplan_core::analyze;
use hybridplan_core::api::plan_analysis;
use hybridplan_core::build::BuildOptions;
use hybridplan_core::device::preset;
use hybridplan_core::plan::planner::{PlanOptions, Strategy};
use hybridplan_core::synth::{self, SynthKind, SynthSpec};
use hybridplan_core::writeback::{self as wb, NodeIndex, OpSig, OutArg, Swap, Target};

fn fnv(h: &mut u64, bytes: &[u8]) {
    for &b in bytes {
        *h ^= u64::from(b);
        *h = h.wrapping_mul(0x100000001b3);
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let repeat: usize = std::env::var("REPEAT").map_or(Ok(3), |r| r.parse())?;
    let dev = preset("v100-nvlink2")?;
    for arg in std::env::args().skip(1) {
        let mut parts = arg.split(':');
        let bad = || format!("bad graph '{arg}': KIND:NODES[:FRACTION]");
        let kind = SynthKind::from_name(parts.next().ok_or_else(bad)?).ok_or_else(bad)?;
        let nodes = parts.next().ok_or_else(bad)?.parse::<f64>()? as usize;
        let fraction = parts.next().map_or(Ok(0.5), str::parse::<f64>)?;
        let spec = SynthSpec {
            kind,
            blocks: synth::blocks_for_nodes(kind, nodes),
            ..SynthSpec::default()
        };
        let bytes = synth::graphdef(&spec);
        let a = analyze(&bytes, &BuildOptions::default())?;
        let persistent = a.graph.persistent_bytes;
        let active = a.liveness.peak_bytes.saturating_sub(persistent);
        let opts = PlanOptions {
            strategy: Strategy::Hybrid,
            budget: persistent + (active as f64 * fraction) as u64,
            ..PlanOptions::default()
        };
        let out = plan_analysis(&a, &dev, &opts, &[])?;
        let swaps: Vec<Swap> = out.report.swaps.iter().map(Into::into).collect();
        let index = NodeIndex::new(&bytes)?;
        let mut sigs = wb::Sigs::default();
        for op in wb::ops_needed(&index, &swaps)? {
            let out = OutArg {
                type_list_attr: String::new(),
                fixed: 0,
                type_attr: "T".into(),
                number_attr: String::new(),
            };
            let sig = OpSig {
                commutative: matches!(op.as_str(), "AddV2" | "AddN" | "Add" | "Mul"),
                outputs: vec![out; 8],
                defaults: [(
                    "T".to_string(),
                    wb::AttrDefault {
                        type_: 1,
                        ..Default::default()
                    },
                )]
                .into_iter()
                .collect(),
            };
            sigs.insert(op, sig);
        }
        let target = Target {
            swap_out_op: "_CopyFromGpuToHost".into(),
            swap_in_op: "_CopyFromHostToGpu".into(),
            device: "/device:GPU:0".into(),
            host: "/device:CPU:0".into(),
            pin_consumers: true,
            prefix: "hybridplan".into(),
        };
        let mut best = f64::INFINITY;
        let mut digest = 0xcbf29ce484222325u64;
        for _ in 0..repeat.max(1) {
            let t = Instant::now();
            let w = wb::write(&index, &swaps, &sigs, &target)?;
            best = best.min(t.elapsed().as_secs_f64());
            digest = 0xcbf29ce484222325;
            fnv(&mut digest, &w.graph.to_vec());
            for s in w.swap_out.iter().chain(&w.swap_in) {
                fnv(&mut digest, s.as_bytes());
            }
            for (node, inputs) in &w.changed {
                fnv(&mut digest, &node.to_le_bytes());
                for t in inputs {
                    fnv(&mut digest, t.as_bytes());
                }
            }
            for (t, n) in w.lost.iter().chain(&w.gained) {
                fnv(&mut digest, t.as_bytes());
                fnv(&mut digest, &n.to_le_bytes());
            }
            for (c, t, s, what) in &w.redirects {
                fnv(&mut digest, &c.to_le_bytes());
                for x in [t, s, what] {
                    fnv(&mut digest, x.as_bytes());
                }
            }
            fnv(&mut digest, &w.rewired.to_le_bytes());
        }
        println!(
            "{arg}: {} swaps, write {:.1} ms (least of {repeat}), digest {digest:016x}",
            swaps.len(),
            best * 1e3
        );
    }
    Ok(())
}
