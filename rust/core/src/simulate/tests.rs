//! Unit tests of the simulator's internals.

use super::layout::Layout;
use super::memory::Meter;
use super::prep::Prep;
use super::stream::Sim;
use super::{Detail, Scratch, Simulator};
use crate::device::DeviceModel;
use crate::plan::Plan;

/// A small mixed step, the v100 preset, its op costs and a TFLMS swap plan.
fn swap_case() -> (crate::Analysis, DeviceModel, Vec<f64>, Plan) {
    use crate::plan::tflms::{tflms_plan, TflmsParams};
    use crate::synth::{graphdef, SynthKind, SynthSpec};
    let spec = SynthSpec {
        kind: SynthKind::Mixed,
        blocks: 4,
        ..SynthSpec::default()
    };
    let a = crate::analyze(&graphdef(&spec), &Default::default()).unwrap();
    let dev = crate::device::preset("v100-nvlink2").unwrap();
    let (costs, _) = crate::api::op_times(&a.graph, &dev, &[]).unwrap();
    let params = TflmsParams {
        threshold: 8,
        ahead: 4,
        groupby: 4,
        min_bytes: 1,
    };
    let plan = tflms_plan(&a.graph, &a.schedule, &a.liveness, &params);
    (a, dev, costs, plan)
}

#[test]
fn summary_matches_the_full_simulation() {
    let (a, dev, costs, swapped) = swap_case();
    assert!(!swapped.swaps.is_empty());
    // One simulator (one scratch) through every simulation, the larger plan
    // between two smaller ones: its leftovers never change a result.
    let mut kept = Simulator::new(&a.graph, &a.schedule, &costs, &dev).unwrap();
    for plan in [Plan::default(), swapped, Plan::default()] {
        let fresh = || Simulator::new(&a.graph, &a.schedule, &costs, &dev).unwrap();
        let full = fresh().run(&plan, Detail::FULL).unwrap();
        let sum = fresh().run(&plan, Detail::Summary).unwrap();
        assert_eq!(sum, full.to_summary());
        assert_eq!(sum.peak_bytes, full.peak_bytes);
        assert_eq!(sum.step_time_s.to_bits(), full.step_time_s.to_bits());
        assert!(sum.timeline.is_empty() && sum.events.is_empty() && sum.op_start.is_empty());
        let host = crate::host::host_memory(&a.graph, &plan, &full);
        assert_eq!(full.host_peak_bytes, host.peak_bytes);
        assert_eq!(kept.run(&plan, Detail::FULL).unwrap(), full);
        assert_eq!(kept.run(&plan, Detail::Summary).unwrap(), sum);
        // `Times`: the summary's figures and the full run's per-op and
        // per-copy times, no timeline, no events.
        let times = kept.run(&plan, Detail::Times).unwrap();
        assert_eq!(times.to_summary(), sum);
        assert!(times.timeline.is_empty() && times.events.is_empty());
        assert_eq!(times.events_truncated, sum.events_truncated);
        assert_eq!(
            (
                &times.op_start,
                &times.swap_out_end,
                &times.swap_out_start,
                &times.swap_in_end
            ),
            (
                &full.op_start,
                &full.swap_out_end,
                &full.swap_out_start,
                &full.swap_in_end
            )
        );
        assert!(plan.swaps.is_empty() || !times.swap_out_end.is_empty());
    }
}

#[test]
fn narrow_and_wide_frees_sweep_alike() {
    let (a, dev, costs, plan) = swap_case();
    let lay = Layout::new(&a.graph, &a.schedule, &costs, &dev).unwrap();
    let mut sc = Scratch::default();
    let prep = Prep::new(lay.g, lay.s, &plan, &mut sc).unwrap();
    let mut sim = Sim::new(&lay, &plan, &prep, &dev, &mut sc);
    sim.run().unwrap();
    sim.hold_swapped();
    sim.forward_in_place();
    let narrow = sim.sweep(true, &mut Vec::<u64>::new());
    let wide = sim.sweep(true, &mut Vec::<i128>::new());
    assert_eq!((narrow.peak, narrow.peak_time), (wide.peak, wide.peak_time));
    assert_eq!(narrow.timeline, wide.timeline);
}

#[test]
fn meter_keeps_spikes_and_merges_runs() {
    let mut m = Meter {
        cur: 10,
        peak: 10,
        peak_time: 0.0,
        timeline: vec![(0.0, 10)],
        last_up: true,
        record: true,
    };
    m.apply(1.0, 5);
    m.apply(1.0, 5); // same instant, same direction: one point
    m.apply(1.0, -20); // a zero-length spike stays visible
    m.apply(2.0, 0); // no change, no point
    assert_eq!(m.timeline, vec![(0.0, 10), (1.0, 20), (1.0, 0)]);
    assert_eq!((m.peak, m.peak_time), (20, 1.0));
}
