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
//! A peak no remaining option covers is set aside and the next highest
//! position is lowered (at most 64 positions are set aside). Stops when
//! every position not set aside meets the target.
//!
//! # Complexity
//! O((S + R) log N) for S swap and R recompute options after the O(C log N
//! log C) index build: each step is one max query, one stabbing query
//! (amortised O(log N)) and O(k log N) range updates for an option touching
//! k tensors.

use rustc_hash::FxHashMap;

use super::candidates::SwapCandidate;
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
}

/// Options to choose from; `tensor_of_swap[i]` is the buffer of `swaps[i]`.
pub struct Pool<'a> {
    pub cands: &'a [SwapCandidate],
    pub swaps: &'a [SwapOpt],
    pub tensor_of_swap: &'a [u32],
    pub recomputes: &'a [RecomputeOpt],
}

struct State {
    tree: MemTree,
    taken: Vec<bool>,
    pinned: Vec<bool>,
    extended: FxHashMap<u32, u32>,
}

/// Chooses options until the position-model peak is at most `target`.
pub fn choose(ctx: &Ctx<'_>, pool: &Pool<'_>, target: u64, lambda: f64) -> Chosen {
    let (intervals, score) = index(ctx, pool, lambda);
    let n_options = score.len();
    let n = ctx.s.order.len();
    let mut stab = Stab::new(n, &intervals, &score);
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
    };
    let ns = pool.swaps.len();
    let mut chosen = Chosen::default();
    // Positions no option can lower are set aside (their bytes kept in
    // `stuck`) so the others still get lowered: the position model is only
    // a guide and the simulator may find the plan fits after all.
    let mut stuck: Vec<(usize, i64)> = Vec::new();
    for _ in 0..n_options + n {
        let (p, peak) = st.tree.argmax();
        if peak <= target as i64 {
            break;
        }
        let valid = |id: u32| valid(ctx, pool, &st, id as usize);
        let Some(id) = stab.best(p, &score, valid) else {
            if stuck.len() == MAX_SET_ASIDE {
                break;
            }
            st.tree.add(p, p, -SET_ASIDE);
            stuck.push((p, peak));
            continue;
        };
        let id = id as usize;
        if id < ns {
            let o = &pool.swaps[id];
            apply_swap(
                ctx,
                &mut st,
                o,
                pool.tensor_of_swap[id],
                &pool.cands[o.cand],
            );
            chosen.swaps.push(pool.swaps[id].clone());
        } else {
            apply_recompute(ctx, &mut st, &pool.recomputes[id - ns]);
            chosen.recomputes.push(pool.recomputes[id - ns].clone());
        }
    }
    for &(p, _) in &stuck {
        st.tree.add(p, p, SET_ASIDE);
    }
    let (pos, peak) = st.tree.argmax();
    chosen.model_peak = peak.max(0) as u64;
    chosen.model_peak_pos = pos as u32;
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
        score.push(ctx.g.tensors[t as usize].bytes as f64 / (cost + 1e-12));
    }
    for r in pool.recomputes {
        let lo = r.saved.iter().map(|&(_, le)| le).max().unwrap_or(r.trigger) + 1;
        // Net bytes: the inputs it keeps alive count against what it frees;
        // an option freeing nothing net is never chosen.
        let net = r.bytes.saturating_sub(r.extended);
        if net > 0 {
            iv.push((score.len() as u32, lo, r.trigger));
        }
        // Equal rates (a segment of k units frees k times the bytes in k
        // times the time) go to the smaller option: it leaves the others free.
        let small = 1.0 - 1e-6 * r.clones.len().min(1000) as f64;
        score.push(small * net as f64 / (r.time_s + 1e-12));
    }
    (iv, score)
}

fn valid(ctx: &Ctx<'_>, pool: &Pool<'_>, st: &State, id: usize) -> bool {
    let ns = pool.swaps.len();
    if id < ns {
        let t = pool.tensor_of_swap[id] as usize;
        return !st.taken[t] && !st.pinned[t];
    }
    let r = &pool.recomputes[id - ns];
    r.saved
        .iter()
        .all(|&(t, _)| !st.taken[t as usize] && !st.pinned[t as usize])
        && r.inputs
            .iter()
            .all(|&x| !st.taken[ctx.l.owner[x as usize] as usize])
}

fn apply_swap(ctx: &Ctx<'_>, st: &mut State, o: &SwapOpt, t: u32, c: &SwapCandidate) {
    let b = ctx.g.tensors[t as usize].bytes as i64;
    let mut free_from = o.keep_until as usize + 1;
    for i in &o.ins {
        st.tree.add(free_from, i.trigger as usize, -b);
        free_from = c.late[i.hi - 1].0 as usize + 1;
    }
    st.taken[t as usize] = true;
}

fn apply_recompute(ctx: &Ctx<'_>, st: &mut State, r: &RecomputeOpt) {
    let trig = r.trigger as usize;
    for &(t, last_early) in &r.saved {
        let b = ctx.g.tensors[t as usize].bytes as i64;
        st.tree.add(last_early as usize + 1, trig, -b);
        st.taken[t as usize] = true;
    }
    for &x in &r.inputs {
        let o = ctx.l.owner[x as usize];
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
