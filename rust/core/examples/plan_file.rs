//! Plans a GraphDef file and prints what the planner and the simulator see.
//!
//! cargo run --release --example plan_file -- GRAPH.pb BUDGET_BYTES [STRATEGY] [DEVICE]

use hybridplan_core::api::op_times;
use hybridplan_core::build::BuildOptions;
use hybridplan_core::device::preset;
use hybridplan_core::plan::greedy::{choose, Pool};
use hybridplan_core::plan::options::Ctx;
use hybridplan_core::plan::planner::{PlanOptions, Planner};
use hybridplan_core::plan::Plan;
use hybridplan_core::simulate::{Detail, Simulator};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let bytes = std::fs::read(&args[1]).expect("read graph");
    let budget: u64 = args[2].parse().expect("budget bytes");
    let strategy = args.get(3).map(String::as_str).unwrap_or("hybrid");
    let dev = preset(args.get(4).map(String::as_str).unwrap_or("v100-nvlink2")).unwrap();
    let t0 = std::time::Instant::now();
    let a = hybridplan_core::analyze(&bytes, &BuildOptions::default()).unwrap();
    let (times, _) = op_times(&a.graph, &dev, &[]).unwrap();
    let ctx = Ctx::new(&a, &times, &dev);
    let sim = std::cell::RefCell::new(Simulator::new(&a.graph, &a.schedule, &times, &dev).unwrap());
    let judge = |p: &Plan| sim.borrow_mut().run(p, Detail::Summary);
    let opts = PlanOptions {
        strategy: strategy.parse().unwrap(),
        budget,
        ..Default::default()
    };
    let tn = std::time::Instant::now();
    let planner = Planner::new(&ctx, &opts, &judge).expect("selection");
    println!("options built in {:?}", tn.elapsed());
    println!(
        "analyze {:?}, liveness peak {} at pos {}",
        t0.elapsed(),
        a.liveness.peak_bytes,
        a.liveness.peak_pos
    );
    println!("options {:?}", planner.num_options());
    let cands = hybridplan_core::plan::candidates::swap_candidates(
        &a.graph,
        &a.schedule,
        &a.liveness,
        2,
        1 << 16,
    );
    let pk = a.liveness.peak_pos;
    let cover: Vec<_> = cands
        .iter()
        .filter(|c| c.last_early < pk && c.first_late() > pk)
        .map(|c| {
            (
                a.graph.tensor_name(c.tensor),
                c.bytes,
                c.last_early,
                c.first_late(),
            )
        })
        .collect();
    println!(
        "{} candidates, {} idle across the peak: {:?}",
        cands.len(),
        cover.len(),
        &cover[..cover.len().min(4)]
    );
    let big: Vec<_> = (0..a.graph.num_tensors() as u32)
        .filter(|&t| a.graph.tensors[t as usize].bytes >= 8_000_000)
        .map(|t| {
            (
                a.graph.tensor_name(t),
                a.liveness.produce[t as usize],
                a.liveness.last_use[t as usize],
                a.graph
                    .consumers(t)
                    .iter()
                    .map(|&c| {
                        (
                            a.schedule.pos[c as usize],
                            a.graph.nodes[c as usize].name.to_string(),
                        )
                    })
                    .collect::<Vec<_>>(),
            )
        })
        .take(3)
        .collect();
    println!("{big:?}");
    let recs = planner.recompute_options_for_debug();
    for r in recs.iter().take(5) {
        println!("rec unit {} clones {} saved {:?} trigger {} inputs {} time {:.2e} bytes {} transient {}", r.unit, r.clones().len(), r.saved().collect::<Vec<_>>(), r.trigger, r.inputs().len(), r.time_s, r.bytes, r.transient);
    }
    let (sw, st) = planner.swap_options_for_debug();
    let live = a.liveness.live_at_peak(&a.graph, 25);
    for t in live {
        let c = cands.iter().find(|c| c.owner == t);
        let has_opt = c
            .map(|c| sw.iter().any(|o| cands[o.cand].owner == c.owner))
            .unwrap_or(false);
        let readers: Vec<_> = a
            .graph
            .consumers(t)
            .iter()
            .map(|&r| (a.schedule.pos[r as usize], a.graph.op_name(r).to_string()))
            .collect();
        println!(
            "live {} {} bytes={} produce={} cand={:?} opt={} readers={:?}",
            a.graph.tensor_name(t),
            a.graph.op_name(a.graph.tensors[t as usize].node),
            a.graph.tensors[t as usize].bytes,
            a.liveness.produce[t as usize],
            c.map(|c| (c.last_early, c.first_late(), c.late.len())),
            has_opt,
            &readers[..readers.len().min(6)]
        );
    }
    let spool = Pool {
        cands: &cands,
        swaps: &sw,
        tensor_of_swap: &st,
        recomputes: &[],
    };
    let sc = choose(&ctx, &spool, budget, 0.1);
    let splan = planner.to_plan(&sc);
    println!(
        "model peak at position {}: {} {}",
        sc.model_peak_pos,
        a.graph.nodes[a.schedule.order[sc.model_peak_pos as usize] as usize].name,
        a.graph
            .op_name(a.schedule.order[sc.model_peak_pos as usize])
    );
    for t in a.liveness.live_at(&a.graph, sc.model_peak_pos, 12) {
        let chosen = sc.swaps.iter().any(|o| cands[o.cand].owner == t);
        let opts: Vec<_> = sw
            .iter()
            .filter(|o| cands[o.cand].owner == t)
            .map(|o| {
                (
                    o.keep_until,
                    o.ins
                        .iter()
                        .map(|i| {
                            (
                                i.trigger,
                                cands[o.cand].late[i.lo].0,
                                cands[o.cand].late[i.hi - 1].0,
                            )
                        })
                        .collect::<Vec<_>>(),
                )
            })
            .collect();
        println!(
            "  at peak: {} {} chosen={} opts={:?}",
            a.graph.tensor_name(t),
            a.graph.tensors[t as usize].bytes,
            chosen,
            opts
        );
    }
    let ssim = sim.borrow_mut().run(&splan, Detail::FULL).unwrap();
    println!(
        "swap-only greedy: chosen {} model peak {} sim peak {} at t={:.4} step {:.4}",
        sc.swaps.len(),
        sc.model_peak,
        ssim.peak_bytes,
        ssim.peak_time_s,
        ssim.step_time_s
    );
    let pool = Pool {
        cands: &cands,
        swaps: &[],
        tensor_of_swap: &[],
        recomputes: &recs,
    };
    let c = choose(&ctx, &pool, budget, 0.1);
    for r in &c.recomputes {
        println!(
            "chosen unit {} saved {:?} trigger {} inputs {:?}",
            r.unit,
            r.saved().collect::<Vec<_>>(),
            r.trigger,
            r.inputs()
                .iter()
                .map(|&x| (
                    x,
                    a.liveness.last_use[a.liveness.owner[x as usize] as usize],
                    a.graph.tensors[x as usize].bytes
                ))
                .collect::<Vec<_>>()
        );
    }
    let covering: Vec<_> = recs
        .iter()
        .filter(|r| {
            r.saved().map(|s| s.1).max().unwrap() < a.liveness.peak_pos
                && r.trigger >= a.liveness.peak_pos
        })
        .map(|r| (r.unit, r.bytes))
        .collect();
    println!("options covering the original peak: {covering:?}");
    let plan = planner.to_plan(&c);
    let sim = sim.borrow_mut().run(&plan, Detail::FULL).unwrap();
    println!(
        "recompute-only greedy: chosen {} model peak {} sim peak {} at t={:.4}",
        c.recomputes.len(),
        c.model_peak,
        sim.peak_bytes,
        sim.peak_time_s
    );
    let t1 = std::time::Instant::now();
    match planner.run() {
        Ok(p) => println!(
            "{}: peak {} step {:.4} s evals {} in {:?}",
            p.strategy,
            p.verdict.peak_bytes,
            p.verdict.step_time_s,
            p.evaluations,
            t1.elapsed()
        ),
        Err(e) => println!("error: {e}"),
    }
}
