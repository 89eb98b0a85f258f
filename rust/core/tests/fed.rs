//! Recomputes fed by swapped-in checkpoints (`plan/feed.rs`) on synthetic
//! training graphs over slow links: `hybrid` chooses them, every such plan
//! fits its budget in the simulator, each listed clone consumer is cloned by
//! a recompute of the plan, and its swap-in's trigger runs no later than
//! that recompute's trigger.

use hybridplan_core::api::plan_analysis;
use hybridplan_core::build::BuildOptions;
use hybridplan_core::device::preset;
use hybridplan_core::plan::planner::{PlanOptions, Strategy};
use hybridplan_core::synth::{graphdef, SynthKind, SynthSpec};
use hybridplan_core::{analyze, PlanError};

#[test]
fn hybrid_feeds_clones_from_swap_ins_and_the_plans_are_valid() {
    let mut fed_plans = 0;
    for kind in [SynthKind::Dag, SynthKind::Residual, SynthKind::Mixed] {
        for blocks in [2, 4] {
            let spec = SynthSpec {
                kind,
                blocks,
                batch: 4,
                size: 16,
                channels: 32,
                ..SynthSpec::default()
            };
            let a = analyze(&graphdef(&spec), &BuildOptions::default()).unwrap();
            let act = a.liveness.peak_bytes - a.graph.persistent_bytes;
            for gbps in [0.5, 5.0] {
                let mut dev = preset("v100-nvlink2").unwrap();
                dev.h2d_bandwidth = gbps * 1e9;
                dev.d2h_bandwidth = gbps * 1e9;
                for fraction in [0.5, 0.6, 0.7, 0.8, 0.9] {
                    let budget = a.graph.persistent_bytes + (act as f64 * fraction) as u64;
                    let opts = PlanOptions {
                        strategy: Strategy::Hybrid,
                        budget,
                        min_bytes: 1024,
                        ..PlanOptions::default()
                    };
                    let o = match plan_analysis(&a, &dev, &opts, &[]) {
                        Ok(o) => o,
                        Err(PlanError::Budget { .. }) => continue,
                        Err(e) => panic!("{kind:?}: {e}"),
                    };
                    assert!(o.planned.peak_bytes <= budget);
                    let pos = |v: u32| a.schedule.pos[v as usize];
                    let mut fed = false;
                    for sw in &o.plan.swaps {
                        for i in sw.ins.iter().filter(|i| !i.clone_consumers.is_empty()) {
                            fed = true;
                            for &c in &i.clone_consumers {
                                let r = o.plan.recomputes.iter().find(|r| r.nodes.contains(&c));
                                let r = r.expect("a clone consumer is cloned");
                                assert!(pos(i.trigger) <= pos(r.trigger));
                            }
                        }
                    }
                    fed_plans += usize::from(fed);
                }
            }
        }
    }
    assert!(fed_plans > 0, "no plan fed a recompute from a swap-in");
}
