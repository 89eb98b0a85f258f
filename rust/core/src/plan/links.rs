//! Placing swap-ins on the host-to-device engine: latest start times that
//! do not overlap, so copies queued behind each other still arrive in time.
//!
//! # The rule
//! Each chosen swap-in wants its copy done when its first late reader
//! starts (`start[first_late]`, if ops ran back to back), or when the
//! recompute clones it feeds run, if earlier. Taking the swap-ins
//! from the latest deadline to the earliest, each copy ends at its deadline
//! or at the start of the copy after it, whichever is earlier, and starts its
//! transfer time before that. The trigger is then the latest op ending by
//! that start (not before the original's last early read, and one TensorFlow
//! cannot fuse with a reader, see `trigger.rs`). Moving a trigger earlier
//! holds the copy longer; the simulator judges the result and the budget
//! loop tightens the target when memory grows past the budget.
//!
//! # Complexity
//! O(S log S) for the sort plus O(log d + W) per swap-in, d the positions
//! between its copy's start and the one before (the starts are searched
//! galloping down from the last answer), W the trigger's walk.

use super::candidates::{gallop_down, SwapCandidate};
use super::options::{Ctx, SwapOpt};
use super::trigger::safe_trigger;

/// Moves the triggers of `swaps` earlier where the engine would queue them.
pub(crate) fn place_swap_ins(ctx: &Ctx<'_>, cands: &[SwapCandidate], swaps: &mut [SwapOpt]) {
    // (deadline, swap, swap-in) for every swap-in, latest deadline first.
    let mut all: Vec<(f64, usize, usize)> = Vec::new();
    for (i, o) in swaps.iter().enumerate() {
        let c = &cands[o.cand];
        for (k, p) in o.ins.iter().enumerate() {
            // The copy is due at its first late reader, or at the clones it
            // feeds (`feed.rs`) if they run earlier.
            let due = o
                .feeds
                .iter()
                .filter(|f| f.k == k)
                .map(|f| f.at + 1)
                .fold(c.late[p.lo].0, u32::min);
            all.push((ctx.start[due as usize], i, k));
        }
    }
    all.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));
    let mut next_start = f64::INFINITY;
    // The starts at or before the last `begin`: the begins never grow (each
    // is at most the one before less a copy's time), so neither does this,
    // and each search gallops down from the last answer, over the
    // positions just before it.
    let mut at_or_before = ctx.start.len();
    for (deadline, i, k) in all {
        let c = &cands[swaps[i].cand];
        let begin = deadline.min(next_start) - ctx.link.h2d(c.bytes);
        if begin.is_nan() || next_start.is_nan() || begin > next_start {
            at_or_before = ctx.start.len(); // a negative copy time: search it all
        }
        next_start = begin;
        // Latest q whose op ends by `begin`: start[q + 1] <= begin.
        at_or_before = gallop_down(&ctx.start, at_or_before, |&x| x <= begin);
        debug_assert_eq!(at_or_before, ctx.start.partition_point(|&x| x <= begin));
        let q = at_or_before as i64 - 2;
        let lowest = match k {
            0 => swaps[i].keep_until + 1,
            _ => c.late[swaps[i].ins[k - 1].hi - 1].0 + 1,
        };
        let cur = swaps[i].ins[k];
        if q >= i64::from(cur.trigger) || q < i64::from(lowest) {
            continue; // already early enough, or cannot move
        }
        let consumers: Vec<u32> = c.late[cur.lo..cur.hi].iter().map(|&(_, n)| n).collect();
        if let Some(t) = safe_trigger(ctx.g, ctx.s, q as u32, lowest, &consumers) {
            swaps[i].ins[k].trigger = t;
        }
    }
}
