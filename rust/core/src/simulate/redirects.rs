//! The reads of original ops that a plan serves from a swap-in copy or a
//! recompute clone, sorted for the walk.
//!
//! # The rule
//! A read is keyed by (stream item of the reader, tensor). The plan lists
//! reads as it goes (`Prep`); a read listed twice from two different
//! sources is an error, reported for the first such listing in the plan's
//! order, against the source listed first for that read. Checked once the
//! listing stops (after the whole plan, or at the first other error):
//! the error a map checked at every listing would give, as that check
//! stops at the first conflict and every listing before an error is seen.
//!
//! The walk reads the items in order, so it finds each item's reads with a
//! cursor (`span_from`); other readers search (`get`).
//!
//! # Complexity
//! O(P log P) to sort P listed reads, O(P) to check and merge them; the
//! walk's lookups O(P + R log d) in all for R redirected reads of items
//! with d redirected inputs; `get` O(log P).

use super::prep::Src;
use crate::error::{PlanError, Result};
use crate::graph::Graph;

/// One read as listed: (item, tensor, order listed, source).
type Listed = (u32, u32, u32, Src);

/// The redirected reads, sorted by (item, tensor), one source each.
#[derive(Debug, Default)]
pub(super) struct Redirects {
    listed: Vec<Listed>,
    keys: Vec<(u32, u32)>,
    srcs: Vec<Src>,
}

impl Redirects {
    /// Room for `n` listings.
    pub(super) fn reserve(&mut self, n: usize) {
        self.listed.reserve(n);
    }

    /// Lists that stream `item` reads `t` from `src`.
    pub(super) fn list(&mut self, item: u32, t: u32, src: Src) {
        let seq = self.listed.len() as u32;
        self.listed.push((item, t, seq, src));
    }

    /// Sorts the listed reads and merges each read's listings; the first
    /// read listed from two sources is an error (`item_node`: the node of
    /// each item, for the message).
    pub(super) fn settle(&mut self, g: &Graph, item_node: &[u32]) -> Result<()> {
        let mut listed = std::mem::take(&mut self.listed);
        listed.sort_unstable_by_key(|&(item, t, seq, _)| (item, t, seq));
        self.keys.reserve(listed.len());
        self.srcs.reserve(listed.len());
        // (order listed, item, tensor, first source, the other source)
        let mut conflict: Option<(u32, u32, u32, Src, Src)> = None;
        for &(item, t, seq, src) in &listed {
            if self.keys.last() == Some(&(item, t)) {
                let first = self.srcs[self.srcs.len() - 1];
                if src != first && conflict.is_none_or(|c| seq < c.0) {
                    conflict = Some((seq, item, t, first, src));
                }
                continue;
            }
            self.keys.push((item, t));
            self.srcs.push(src);
        }
        let Some((_, item, t, old, src)) = conflict else {
            return Ok(());
        };
        Err(PlanError::InvalidArgument(format!(
            "node '{}' reads tensor '{}' from two places in the plan ({} and {}): list it as a consumer of one only",
            g.nodes[item_node[item as usize] as usize].name,
            g.tensor_name(t),
            old.describe(),
            src.describe()
        )))
    }

    /// The reads of `item`, as a range of entries: the cursor `from` is at
    /// or before its first entry (the walk passes the end of the previous
    /// item's range).
    pub(super) fn span_from(&self, from: usize, item: u32) -> (usize, usize) {
        let mut lo = from;
        while lo < self.keys.len() && self.keys[lo].0 < item {
            lo += 1;
        }
        let mut hi = lo;
        while hi < self.keys.len() && self.keys[hi].0 == item {
            hi += 1;
        }
        (lo, hi)
    }

    /// The source of the read of `t` among the entries `lo..hi` of one item.
    pub(super) fn get_in(&self, (lo, hi): (usize, usize), t: u32) -> Option<Src> {
        let keys = &self.keys[lo..hi];
        let k = keys.binary_search_by_key(&t, |&(_, tt)| tt).ok()?;
        Some(self.srcs[lo + k])
    }

    /// The source of `item`'s read of `t`, if redirected.
    pub(super) fn get(&self, item: u32, t: u32) -> Option<Src> {
        let k = self.keys.binary_search(&(item, t)).ok()?;
        Some(self.srcs[k])
    }
}
