//! The order of the copies one op releases together: swap-ins that share a
//! trigger are listed by need and queued one behind the other.
//!
//! # The rule
//! When a trigger ends, every swap-in it releases is ready at once, and
//! the host-to-device engine serves one copy at a time. The swap-ins are
//! placed on the engine by deadline (`links.rs`: the copy needed first is
//! due first), so that is the order they must run in. TensorFlow gives no
//! order to ops made ready by one op, so the plan states it: the swaps are
//! listed by the need of their first swap-in (the schedule position of its
//! first reader, or of the first clone it feeds), then by tensor, and a
//! swap-in *follows* the swap-in listed before it with the same trigger
//! (a control edge from that copy to its own in the rewrite; the same wait
//! in the simulator) when
//!
//! - that one is needed no later than it (the plan's order is the order of
//!   need), and
//! - that one's swap-out may start no later than the trigger (its producer
//!   and its `after` node are scheduled at or before the trigger), so the
//!   wait adds no path from a reader of this copy back to that swap-out:
//!   the rewritten graph stays acyclic.
//!
//! Swap-ins of a trigger whose order of need the listing cannot follow (a
//! swap's later swap-in among other swaps' first ones) are not queued and
//! keep the engine's first-come first-served order of the plan.
//!
//! # Complexity
//! O(C + S log S) for C clone nodes in the plan's recomputes and S swap-ins.

use rustc_hash::FxHashMap;

use super::{Plan, SwapIn};
use crate::graph::{Graph, NONE};
use crate::schedule::Schedule;

/// Sorts `plan.swaps` by need and sets each swap-in's `follows`.
pub(crate) fn queue_by_need(g: &Graph, s: &Schedule, plan: &mut Plan) {
    // A clone runs right after its recompute's trigger.
    let mut clone_at: FxHashMap<u32, u32> = FxHashMap::default();
    for r in &plan.recomputes {
        for &v in &r.nodes {
            clone_at.insert(v, s.pos[r.trigger as usize] + 1);
        }
    }
    let need = |i: &SwapIn| -> u32 {
        let direct = i.consumers.iter().map(|&c| s.pos[c as usize]);
        let clones = (i.clone_consumers.iter()).map(|c| clone_at.get(c).copied().unwrap_or(NONE));
        direct.chain(clones).min().unwrap_or(NONE)
    };
    plan.swaps
        .sort_by_cached_key(|sw| (sw.ins.first().map_or(NONE, need), sw.tensor));
    // Per trigger: (need, position the swap-out may start) of the swap-in
    // listed last.
    let n_ins = plan.swaps.iter().map(|sw| sw.ins.len()).sum();
    let mut last: FxHashMap<u32, (u32, u32)> =
        FxHashMap::with_capacity_and_hasher(n_ins, Default::default());
    for sw in &mut plan.swaps {
        let producer = g.tensors[sw.tensor as usize].node;
        let out_at = s.pos[producer as usize].max(s.pos[sw.after as usize]);
        for si in &mut sw.ins {
            let n = need(si);
            si.follows = last.get(&si.trigger).is_some_and(|&(prev_need, prev_out)| {
                prev_need <= n && prev_out <= s.pos[si.trigger as usize]
            });
            last.insert(si.trigger, (n, out_at));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::Swap;

    fn swap_in(trigger: u32, consumers: &[u32]) -> SwapIn {
        SwapIn {
            trigger,
            consumers: consumers.to_vec(),
            clone_consumers: vec![],
            follows: false,
        }
    }

    fn swap(tensor: u32, after: u32, ins: Vec<SwapIn>) -> Swap {
        Swap {
            tensor,
            after,
            ins,
            release: NONE,
            gate: NONE,
        }
    }

    /// A chain a0 -> a1 -> ... -> a7 (schedule = node order); tensor k is
    /// node k's output.
    fn chain() -> (Graph, Schedule) {
        use crate::build::{build, BuildOptions, NodeSpec};
        const NAMES: [&str; 8] = ["a0", "a1", "a2", "a3", "a4", "a5", "a6", "a7"];
        let specs: Vec<NodeSpec<'static>> = (0..8)
            .map(|k| match k {
                0 => NodeSpec::test(NAMES[0], "Placeholder", &[], &[256]),
                _ => NodeSpec::test(NAMES[k], "Relu", &NAMES[k - 1..k], &[256]),
            })
            .collect();
        let g = build(&specs, &BuildOptions::default()).unwrap();
        let s = crate::schedule::schedule(&g).unwrap();
        assert_eq!(s.order, (0..8).collect::<Vec<u32>>());
        (g, s)
    }

    #[test]
    fn swap_ins_of_one_trigger_are_listed_by_need_and_queued() {
        let (g, s) = chain();
        let t = |k: u32| g.outputs(k).start;
        // Tensor 0 is needed at a6, tensor 1 at a5: both released by a4.
        let mut plan = Plan {
            swaps: vec![
                swap(t(0), 0, vec![swap_in(4, &[6])]),
                swap(t(1), 1, vec![swap_in(4, &[5])]),
            ],
            recomputes: vec![],
        };
        queue_by_need(&g, &s, &mut plan);
        assert_eq!(plan.swaps[0].tensor, t(1), "needed first, listed first");
        assert!(!plan.swaps[0].ins[0].follows);
        assert!(
            plan.swaps[1].ins[0].follows,
            "queued behind the one needed first"
        );
    }

    #[test]
    fn a_swap_out_that_may_start_after_the_trigger_is_not_waited_for() {
        let (g, s) = chain();
        let t = |k: u32| g.outputs(k).start;
        // The swap-out of the copy needed first waits for a5, after the
        // trigger a4: a wait on that copy would hang on an op after the
        // trigger, so the other copy is not queued behind it.
        let mut plan = Plan {
            swaps: vec![
                swap(t(0), 5, vec![swap_in(4, &[6])]),
                swap(t(1), 1, vec![swap_in(4, &[7])]),
            ],
            recomputes: vec![],
        };
        queue_by_need(&g, &s, &mut plan);
        assert_eq!(plan.swaps[0].tensor, t(0));
        assert!(!plan.swaps[1].ins[0].follows);
    }

    #[test]
    fn other_triggers_are_not_queued() {
        let (g, s) = chain();
        let t = |k: u32| g.outputs(k).start;
        let mut plan = Plan {
            swaps: vec![
                swap(t(0), 0, vec![swap_in(3, &[6])]),
                swap(t(1), 1, vec![swap_in(4, &[5])]),
            ],
            recomputes: vec![],
        };
        queue_by_need(&g, &s, &mut plan);
        assert!(plan.swaps.iter().all(|sw| !sw.ins[0].follows));
    }
}
