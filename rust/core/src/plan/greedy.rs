//! Peak-driven greedy selection of swaps and recomputes under a target.
//!
//! # The algorithm
//! Keep the memory timeline over schedule positions in a segment tree.
//! While its maximum exceeds the target: take the position of the maximum,
//! find among the options whose freed interval covers it the one with the
//! most bytes per second of estimated cost (a swap costs its exposed
//! transfer time plus `lambda` times its transfer time, so hidden swaps still
//! prefer fewer link bytes; a recompute costs its clones' time and counts
//! only the bytes it frees net of the inputs it keeps alive), apply its
//! memory effect to the tree, and mark what it frees and what it pins (a
//! recompute's inputs must stay; they can no longer be swapped or freed).
//! Swap-outs queue on the device-to-host engine (`d2h.rs`): a swap is
//! chosen for a peak only if, behind the swap-outs already chosen, its copy
//! ends before that peak, and its original is freed from where it really
//! ends. A swap that the step waits for (`SwapOpt::wait`) is gone from its
//! release node on, wherever its copy ends. A peak no remaining option covers is set aside and the next highest
//! position is lowered (at most 64 positions are set aside). Stops when
//! every position not set aside meets the target.
//!
//! # Complexity
//! O((S + R) log^2 N) for S swap and R recompute options after the
//! O(C log C + C log N + N) index build (once per pool, `Index`; O(N) to
//! restore it for another run): each step is one max query, one stabbing
//! query (the heads of the point's path checked best first: the one taken
//! and, amortised, those dropped, each checked in O(log N) against the
//! engine's queue) and O(k log N) range updates for an option touching k
//! tensors.

use rustc_hash::{FxHashMap, FxHashSet};

use super::candidates::{position_at_from, SwapCandidate};
use super::d2h::D2hQueue;
use super::feed::{plan_feed, Feed};
use super::memtree::MemTree;
use super::options::{Ctx, RecomputeOpt, SwapOpt};
use super::stab::Stab;

/// Subtracted from a position no option can lower, to set it aside.
const SET_ASIDE: i64 = 1 << 62;
/// Positions set aside at most; then the greedy stops (the simulator judges).
const MAX_SET_ASIDE: usize = 64;

/// What the greedy chose.
#[derive(Debug, Clone, Default)]
pub struct Chosen {
    pub swaps: Vec<SwapOpt>,
    pub recomputes: Vec<RecomputeOpt>,
    /// Peak of the position model after the choices (bytes) and where.
    pub model_peak: u64,
    pub model_peak_pos: u32,
    /// Whether a recompute option was ever found valid (the stabbing
    /// query checks entries best first and takes the first valid one, so
    /// such an option was chosen). When none was, the run made exactly the
    /// choices a run on the same index with the swaps alone makes: every
    /// recompute entry it looked at was dropped, as that run drops it.
    pub recompute_seen: bool,
}

/// Options to choose from; `tensor_of_swap[i]` is the buffer of `swaps[i]`.
pub struct Pool<'a> {
    pub cands: &'a [SwapCandidate],
    pub swaps: &'a [SwapOpt],
    pub tensor_of_swap: &'a [u32],
    pub recomputes: &'a [RecomputeOpt],
}

struct State<'f> {
    tree: MemTree,
    taken: Vec<bool>,
    pinned: Vec<bool>,
    extended: FxHashMap<u32, u32>,
    /// The swap-outs chosen so far on the device-to-host engine.
    d2h: D2hQueue,
    /// Per candidate: its swap-out ends no earlier than this (seconds;
    /// empty: no floor). From an earlier round's finished plan.
    out_floor: &'f [f64],
    /// Refuse a swap for a peak its queued copy does not end before.
    queue_check: bool,
    /// Buffer -> index of its chosen swap (kept when the pool has
    /// recompute options: `feed` alone reads it).
    swap_of: FxHashMap<u32, usize>,
    /// Nodes whose clones read a swap-in (`feed.rs`): cloned once.
    fed: FxHashSet<u32>,
}

/// How the greedy treats the device-to-host queue.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Guide<'f> {
    /// Per candidate: its swap-out ends no earlier than this (seconds, or
    /// empty): the budget loop passes the ends the engine's queue gave the
    /// previous round's plan.
    pub out_floor: &'f [f64],
    /// Refuse a swap for a peak its queued copy does not end before. Off,
    /// a swap is still applied from where its queued copy ends (the
    /// position model may then overrate it; the simulator judges).
    pub queue_check: bool,
}

/// Chooses options until the position-model peak is at most `target`.
pub fn choose(ctx: &Ctx<'_>, pool: &Pool<'_>, target: u64, lambda: f64) -> Chosen {
    let guide = Guide {
        queue_check: true,
        ..Guide::default()
    };
    choose_with(ctx, pool, target, lambda, guide)
}

/// The options of a pool ranked for the greedy: built once, reused by
/// every greedy run on the pool or on its swaps or recomputes alone
/// (`choose_indexed`).
pub(crate) struct Index {
    score: Vec<f64>,
    stab: Stab,
    /// Swap options of the indexed pool (its ids `0..ns`; recomputes after).
    ns: usize,
}

impl Index {
    /// Every option's freed intervals in a stabbing index, with its score.
    ///
    /// # Complexity
    /// As [`Stab::new`] for the options' intervals.
    pub(crate) fn new(ctx: &Ctx<'_>, pool: &Pool<'_>, lambda: f64) -> Self {
        let (intervals, score) = index(ctx, pool, lambda);
        let stab = Stab::new(ctx.s.order.len(), &intervals, &score);
        let ns = pool.swaps.len();
        Index { score, stab, ns }
    }
}

/// The id in `pool` of entry `id` of an index with `ns` swaps, when `pool`
/// holds it: `pool` has the indexed pool's swaps, a prefix of its
/// recomputes, or both.
fn pool_id(ns: usize, pool: &Pool<'_>, id: u32) -> Option<usize> {
    let id = id as usize;
    match id.checked_sub(ns) {
        None => (!pool.swaps.is_empty()).then_some(id),
        Some(r) => (r < pool.recomputes.len()).then_some(pool.swaps.len() + r),
    }
}

/// [`choose`], guided by `guide`.
pub(crate) fn choose_with(
    ctx: &Ctx<'_>,
    pool: &Pool<'_>,
    target: u64,
    lambda: f64,
    guide: Guide<'_>,
) -> Chosen {
    let mut ix = Index::new(ctx, pool, lambda);
    choose_indexed(ctx, pool, &mut ix, target, guide)
}

/// [`choose_with`] on a prebuilt index of `pool`, or of a pool with the
/// same swaps and recomputes of which `pool` may leave out either kind, or
/// the recomputes after a prefix (their entries are then never valid: the
/// choices are the same as on an index of `pool` alone, as every entry
/// keeps its tree nodes and its order, ties going to the lower id). The
/// entries are restored first, so one index serves any number of runs.
pub(crate) fn choose_indexed(
    ctx: &Ctx<'_>,
    pool: &Pool<'_>,
    ix: &mut Index,
    target: u64,
    guide: Guide<'_>,
) -> Chosen {
    debug_assert!(pool.swaps.is_empty() || pool.swaps.len() == ix.ns);
    debug_assert!(pool.recomputes.len() <= ix.score.len() - ix.ns);
    ix.stab.reset();
    let (stab, score, ix_ns) = (&mut ix.stab, &ix.score, ix.ns);
    let n_options = pool.swaps.len() + pool.recomputes.len();
    let n = ctx.s.order.len();
    let init: Vec<i64> = ctx
        .l
        .timeline
        .iter()
        .map(|&b| b.min(i64::MAX as u64) as i64)
        .collect();
    let mut st = State {
        tree: MemTree::new(&init),
        taken: vec![false; ctx.g.num_tensors()],
        pinned: vec![false; ctx.g.num_tensors()],
        extended: FxHashMap::default(),
        // Only swaps queue on the engine: a pool of recomputes alone never
        // reads it, so it spans one position.
        d2h: D2hQueue::new(if pool.swaps.is_empty() { 1 } else { n }),
        out_floor: guide.out_floor,
        queue_check: guide.queue_check,
        swap_of: FxHashMap::default(),
        fed: FxHashSet::default(),
    };
    let ns = pool.swaps.len();
    let mut chosen = Chosen::default();
    // Positions no option can lower are set aside (their bytes kept in
    // `stuck`) so the others still get lowered: the position model is only
    // a guide and the simulator may find the plan fits after all.
    let mut stuck: Vec<(usize, i64)> = Vec::new();
    let mut recompute_seen = false;
    for _ in 0..n_options + n {
        let (p, peak) = st.tree.argmax();
        if peak <= target as i64 {
            break;
        }
        // The queued end of the last swap checked, when the check worked it
        // out: the one taken is the last checked (`Stab::best`).
        let mut ended: Option<f64> = None;
        let valid = |id: u32| match pool_id(ix_ns, pool, id) {
            Some(id) => {
                let ok = valid(ctx, pool, &st, &chosen.swaps, (id, p), &mut ended);
                recompute_seen |= ok && id >= ns;
                ok
            }
            None => false,
        };
        let best = stab.best(p, score, valid);
        let Some(id) = best.and_then(|id| pool_id(ix_ns, pool, id)) else {
            if stuck.len() == MAX_SET_ASIDE {
                break;
            }
            st.tree.add(p, p, -SET_ASIDE);
            stuck.push((p, peak));
            continue;
        };
        if id < ns {
            let mut o = pool.swaps[id].clone();
            o.keep_until = queued_keep_until(ctx, &st, &o, &pool.cands[o.cand], ended);
            apply_swap(
                ctx,
                &mut st,
                &o,
                pool.tensor_of_swap[id],
                &pool.cands[o.cand],
            );
            // Read only to feed a recompute's clones from a swap-in.
            if !pool.recomputes.is_empty() {
                st.swap_of
                    .insert(pool.tensor_of_swap[id], chosen.swaps.len());
            }
            chosen.swaps.push(o);
        } else {
            let r = &pool.recomputes[id - ns];
            apply_recompute(ctx, pool, &mut st, &mut chosen.swaps, r);
            chosen.recomputes.push(pool.recomputes[id - ns].clone());
        }
    }
    for &(p, _) in &stuck {
        st.tree.add(p, p, SET_ASIDE);
    }
    let (pos, peak) = st.tree.argmax();
    chosen.model_peak = peak.max(0) as u64;
    chosen.model_peak_pos = pos as u32;
    chosen.recompute_seen = recompute_seen;
    chosen
}

/// Every option's freed intervals `(id, lo, hi)` and its score.
fn index(ctx: &Ctx<'_>, pool: &Pool<'_>, lambda: f64) -> (Vec<(u32, u32, u32)>, Vec<f64>) {
    let mut iv = Vec::with_capacity(pool.swaps.len() + pool.recomputes.len());
    let mut score = Vec::with_capacity(iv.capacity());
    for (o, &t) in pool.swaps.iter().zip(pool.tensor_of_swap) {
        let id = score.len() as u32;
        let late = &pool.cands[o.cand].late;
        let mut lo = o.keep_until + 1;
        for i in &o.ins {
            iv.push((id, lo, i.trigger));
            lo = late[i.hi - 1].0 + 1;
        }
        let cost = o.exposed_s + lambda * o.transfer_s;
        // The candidate's bytes are its buffer's (read with `late`, not
        // from the graph's tensor table at random).
        let bytes = pool.cands[o.cand].bytes;
        debug_assert_eq!(bytes, ctx.g.tensors[t as usize].bytes);
        score.push(bytes as f64 / (cost + 1e-12));
    }
    for r in pool.recomputes {
        let lo = r.saved().map(|(_, le)| le).max().unwrap_or(r.trigger) + 1;
        // Net bytes: the inputs it keeps alive count against what it frees;
        // an option freeing nothing net is never chosen.
        let net = r.bytes.saturating_sub(r.extended);
        if net > 0 {
            iv.push((score.len() as u32, lo, r.trigger));
        }
        // Equal rates (a segment of k units frees k times the bytes in k
        // times the time) go to the smaller option: it leaves the others free.
        let small = 1.0 - 1e-6 * r.clones().len().min(1000) as f64;
        score.push(small * net as f64 / (r.time_s + 1e-12));
    }
    (iv, score)
}

/// May option `id` lower position `p` now? A swap must be free to take
/// and, with the swap-outs chosen so far queued on the engine ahead of it,
/// still have its original gone by `p` when `p` is in its first interval.
/// A recompute's saved tensors must be free to take, and each input either
/// unswapped or fed from its swap-in (`feed.rs`). `ended`: the swap's
/// queued end when the check worked it out (`queued_end`), else `None`.
fn valid(
    ctx: &Ctx<'_>,
    pool: &Pool<'_>,
    st: &State,
    swaps: &[SwapOpt],
    (id, p): (usize, usize),
    ended: &mut Option<f64>,
) -> bool {
    let ns = pool.swaps.len();
    *ended = None;
    if id < ns {
        let t = pool.tensor_of_swap[id] as usize;
        if st.taken[t] || st.pinned[t] {
            return false;
        }
        let o = &pool.swaps[id];
        if p > o.trigger() as usize {
            return true; // a later interval: the copy has long ended
        }
        return !st.queue_check || queue_allows(ctx, st, o, &pool.cands[o.cand], p, ended);
    }
    let r = &pool.recomputes[id - ns];
    r.saved()
        .all(|(t, _)| !st.taken[t as usize] && !st.pinned[t as usize])
        && r.inputs().iter().all(|&x| {
            !st.taken[ctx.l.owner[x as usize] as usize]
                || feed(ctx, pool, st, swaps, r, x).is_some()
        })
}

/// The feed of input `x` of `r` from its chosen swap: (swap index, feed,
/// swap-in trigger). `None` when `x` is not swapped (a recompute took it)
/// or cannot be fed, or a clone reading it already reads a swap-in.
fn feed(
    ctx: &Ctx<'_>,
    pool: &Pool<'_>,
    st: &State,
    swaps: &[SwapOpt],
    r: &RecomputeOpt,
    x: u32,
) -> Option<(usize, Feed, u32)> {
    let &si = st.swap_of.get(&ctx.l.owner[x as usize])?;
    let o = &swaps[si];
    let (f, t) = plan_feed(ctx, &pool.cands[o.cand], o, x, r.trigger, r.clones())?;
    if f.clones.iter().any(|v| st.fed.contains(v)) {
        return None;
    }
    Some((si, f, t))
}

/// Where the original of swap `o` may go with the chosen swap-outs queued
/// ahead of it on the engine: after its last early read and the position
/// at whose start its copy has ended. `end`: [`queued_end`] when already
/// worked out on this state.
fn queued_keep_until(
    ctx: &Ctx<'_>,
    st: &State,
    o: &SwapOpt,
    c: &SwapCandidate,
    end: Option<f64>,
) -> u32 {
    if o.wait.is_some() {
        return o.keep_until; // the step waits for the copy at its release node
    }
    debug_assert!(end.is_none_or(|e| e.to_bits() == queued_end(ctx, st, o, c).to_bits()));
    let end = end.unwrap_or_else(|| queued_end(ctx, st, o, c));
    let done = position_at_from(&ctx.start, c.produce as usize + 1, end);
    o.keep_until.max(c.last_early).max(done.saturating_sub(1))
}

/// When the copy of swap `o` ends behind the swap-outs chosen so far on
/// the engine, and no earlier than its floor.
fn queued_end(ctx: &Ctx<'_>, st: &State, o: &SwapOpt, c: &SwapCandidate) -> f64 {
    let ready = ctx.start[c.produce as usize + 1];
    let end = st
        .d2h
        .end_if_added(c.produce as usize, ready, ctx.link.d2h(c.bytes));
    match st.out_floor.get(o.cand) {
        Some(&f) => end.max(f),
        None => end,
    }
}

/// `p > queued_keep_until(ctx, st, o, c)` for a position `p < N`, without
/// the binary search for the copy's end position: `p` is past the position
/// where the copy ends exactly when `p` starts at or after that end (the
/// starts are non-decreasing). The cheap bounds are checked first; the
/// end, when worked out, goes to `ended`.
fn queue_allows(
    ctx: &Ctx<'_>,
    st: &State,
    o: &SwapOpt,
    c: &SwapCandidate,
    p: usize,
    ended: &mut Option<f64>,
) -> bool {
    if p <= o.keep_until as usize || p <= c.last_early as usize {
        return false;
    }
    if o.wait.is_some() {
        return true; // gone when its release node starts, wherever the copy ends
    }
    let end = queued_end(ctx, st, o, c);
    *ended = Some(end);
    let allows = ctx.start[p] >= end;
    debug_assert_eq!(allows, p > queued_keep_until(ctx, st, o, c, None) as usize);
    allows
}

fn apply_swap(ctx: &Ctx<'_>, st: &mut State, o: &SwapOpt, t: u32, c: &SwapCandidate) {
    debug_assert_eq!(c.bytes, ctx.g.tensors[t as usize].bytes);
    let b = c.bytes as i64;
    let mut free_from = o.keep_until as usize + 1;
    for i in &o.ins {
        st.tree.add(free_from, i.trigger as usize, -b);
        free_from = c.late[i.hi - 1].0 as usize + 1;
    }
    st.taken[t as usize] = true;
    let ready = ctx.start[c.produce as usize + 1];
    st.d2h.add(c.produce as usize, ready, ctx.link.d2h(c.bytes));
}

/// When each chosen swap's copy ends with all of them queued on the
/// engine in producer order (seconds, by candidate; 0 for the others):
/// a swap chosen later at an earlier position delays the ones after it,
/// which the greedy did not see when it chose them.
///
/// # Complexity
/// O(S log S + C).
pub(crate) fn queued_out_ends(
    ctx: &Ctx<'_>,
    cands: &[SwapCandidate],
    swaps: &[SwapOpt],
) -> Vec<f64> {
    let mut order: Vec<usize> = (0..swaps.len()).collect();
    order.sort_by_key(|&i| (cands[swaps[i].cand].produce, swaps[i].cand));
    let mut out = vec![0.0; cands.len()];
    let mut free = f64::NEG_INFINITY;
    for i in order {
        let c = &cands[swaps[i].cand];
        free = free.max(ctx.start[c.produce as usize + 1]) + ctx.link.d2h(c.bytes);
        out[swaps[i].cand] = free;
    }
    out
}

fn apply_recompute(
    ctx: &Ctx<'_>,
    pool: &Pool<'_>,
    st: &mut State,
    swaps: &mut [SwapOpt],
    r: &RecomputeOpt,
) {
    let trig = r.trigger as usize;
    for (t, last_early) in r.saved() {
        let b = ctx.g.tensors[t as usize].bytes as i64;
        st.tree.add(last_early as usize + 1, trig, -b);
        st.taken[t as usize] = true;
    }
    for &x in r.inputs() {
        let o = ctx.l.owner[x as usize];
        if st.taken[o as usize] {
            // Swapped: the clones read a swap-in, moved earlier if needed.
            let Some((si, f, t)) = feed(ctx, pool, st, swaps, r, x) else {
                continue; // not reached: `valid` checked it
            };
            let old = swaps[si].ins[f.k].trigger;
            if t < old {
                let b = ctx.g.tensors[o as usize].bytes as i64;
                st.tree.add(t as usize + 1, old as usize, b);
                swaps[si].ins[f.k].trigger = t;
            }
            st.fed.extend(f.clones.iter().copied());
            swaps[si].feeds.push(f);
            continue;
        }
        let end = *st.extended.get(&o).unwrap_or(&ctx.l.last_use[o as usize]);
        if (end as usize) < trig {
            st.tree.add(
                end as usize + 1,
                trig,
                ctx.g.tensors[o as usize].bytes as i64,
            );
            st.extended.insert(o, r.trigger);
        }
        st.pinned[o as usize] = true;
    }
    st.tree.add(trig + 1, trig + 1, r.transient as i64);
}
