//! Recomputation fed by swapped-in checkpoints: a recompute whose clones
//! read an input that is swapped out reads it from one of its swap-ins,
//! instead of keeping the original on the device until the clones run.
//!
//! # The rule
//! The clones run right after the recompute's trigger, at position `T`.
//! The swapped tensor's swap-ins each serve a group of late readers; the
//! copy of a group lives from its trigger to its last reader. If `T` falls
//! in a copy's life, the clones read that copy. If it falls before a
//! group's trigger (and after the previous group's last reader), that
//! group's swap-in moves earlier: to the latest op whose end leaves the
//! copy's transfer time before the clones (not before the original may go
//! or the previous group's last read, and one TensorFlow cannot fuse with
//! the group's readers, see `trigger.rs`); the copy is then held from there.
//! Before the original may go, or after the last group, there is no feed.
//!
//! # Complexity
//! O(G + W * d) for a swap of G swap-ins and a trigger walk of W ops.

use super::candidates::SwapCandidate;
use super::options::{Ctx, SwapOpt};
use super::trigger::safe_trigger;

/// Clones of a recompute reading one swap-in of a swap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Feed {
    /// The swap-in (index into [`SwapOpt::ins`]).
    pub k: usize,
    /// The recompute's trigger position (its clones run right after it).
    pub at: u32,
    /// Original nodes whose clones read the swap-in (sorted, unique).
    pub clones: Vec<u32>,
}

/// How a recompute triggered at `at`, cloning `clones`, reads tensor `x`
/// swapped by `o`: the feed and the swap-in's trigger position (moved
/// earlier where needed). `None`: it cannot.
pub(crate) fn plan_feed(
    ctx: &Ctx<'_>,
    c: &SwapCandidate,
    o: &SwapOpt,
    x: u32,
    at: u32,
    clones: &[u32],
) -> Option<(Feed, u32)> {
    if c.tensor != x || at <= o.keep_until {
        return None;
    }
    let g = ctx.g;
    let mut readers: Vec<u32> = clones
        .iter()
        .copied()
        .filter(|&v| g.inputs(v).contains(&x))
        .collect();
    readers.sort_unstable();
    readers.dedup();
    if readers.is_empty() {
        return None;
    }
    for (k, i) in o.ins.iter().enumerate() {
        let last = c.late[i.hi - 1].0;
        if at > last {
            continue;
        }
        let feed = Feed {
            k,
            at,
            clones: readers,
        };
        if i.trigger <= at {
            return Some((feed, i.trigger)); // the copy is there already
        }
        let lowest = match k {
            0 => o.keep_until + 1,
            _ => c.late[o.ins[k - 1].hi - 1].0 + 1,
        };
        let need = ctx.start[at as usize + 1] - ctx.link.h2d(c.bytes);
        // Latest q whose op ends by `need`: start[q + 1] <= need.
        let q = ctx.start.partition_point(|&t| t <= need) as i64 - 2;
        let ideal = q.clamp(i64::from(lowest), i64::from(at)) as u32;
        let consumers: Vec<u32> = c.late[i.lo..i.hi].iter().map(|&(_, n)| n).collect();
        let t = safe_trigger(g, ctx.s, ideal, lowest, &consumers)?;
        return Some((feed, t));
    }
    None
}
