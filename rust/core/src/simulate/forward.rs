//! In-place forwarding over a finished walk ([`crate::inplace`]): which
//! ops write their output into an input's buffer, given the plan.
//!
//! # The rule
//! In stream order, an item that is the last reader of a candidate input's
//! buffer (after earlier forwarding) and reads it once writes its output
//! there, unless a swap-out copies that buffer. The original ops come from
//! the layout's static sites, the clones are checked in full.
//!
//! # Complexity
//! O(S + C log C + E_C) time for S sites and C clones with E_C inputs,
//! O(B) memory for B buffers.

use smallvec::SmallVec;

use super::prep::Src;
use super::stream::Sim;
use crate::graph::NONE;

impl Sim<'_> {
    /// The buffer that input `slot` of stream `item` reads (`q`: its
    /// position if it is an original op).
    pub(super) fn input_buf(&self, item: usize, q: usize, slot: usize) -> u32 {
        let p = self.p;
        let v = p.item_node[item];
        match p.item_clone[item] {
            NONE if p.redirected[item] => {
                let t = self.g.inputs(v)[slot];
                self.buf_of(p.redirect.get(item as u32, t).unwrap_or(Src::Orig(t)))
            }
            NONE => self.lay.in_buf[self.lay.in_off[q] as usize + slot],
            c => self.buf_of(p.clone_in[p.clone_in_off[c as usize] as usize + slot]),
        }
    }

    /// In-place forwarding ([`crate::inplace`]) over the finished walk, in
    /// stream order: an item that is the last reader of a candidate input's
    /// buffer (after earlier forwarding) and reads it once writes its output
    /// there, unless a swap-out copies that buffer (whenever it ends: the
    /// copy holds a reference until it has run, and on the device the
    /// copy engine's queue, on CPU emulation the thread pool, can run it
    /// later than modelled). Swap holds of a buffer written in place move to
    /// the buffer it went into. The original ops come from the layout's
    /// static sites (`layout.rs`), the clones are checked in full.
    /// O(S + C log C + E_C) time for S sites and C clones with E_C inputs,
    /// O(B) memory for B buffers.
    pub(super) fn forward_in_place(&mut self) {
        let (lay, p) = (self.lay, self.p);
        let mut root = std::mem::take(&mut self.root);
        root.clear();
        root.resize(self.bufs.len(), NONE);
        self.saved.clear();
        let mut held = std::mem::take(&mut self.bufs.held);
        // Per buffer: does a swap-out copy it (`hold_swapped`)? Flags, not a
        // sorted list: buffers join it as outputs are written in place, and
        // a sorted insert per join cost O(swaps) each.
        let mut swapped = vec![false; self.bufs.len()];
        for h in held.iter() {
            swapped[h.0 as usize] = true;
        }
        let mut clones: Vec<u32> = p.clone_item.clone();
        clones.sort_unstable();
        // Original ops run in position order, clones in between: the op at
        // position q is stream item q + (clones before it).
        let (mut si, mut ci) = (0usize, 0usize);
        loop {
            let site_item = (lay.sites.get(si)).map(|&(q, _)| q + ci as u32);
            let (item, site) = match (site_item, clones.get(ci).copied()) {
                (None, None) => break,
                (Some(a), Some(b)) if b <= a => {
                    ci += 1;
                    (b, None)
                }
                (Some(a), _) => {
                    si += 1;
                    (a, Some(si - 1))
                }
                (None, Some(b)) => {
                    ci += 1;
                    (b, None)
                }
            };
            debug_assert!(site.is_none() || p.item_clone[item as usize] == NONE);
            let done = match site {
                Some(i) => self.forward_site(item as usize, i, &mut root, &swapped),
                None => self.forward_clone(item as usize, &mut root, &swapped),
            };
            // A swapped output written into r: r is copied out from now on.
            if let Some((u, r)) = done {
                if swapped[u as usize] {
                    swapped[r as usize] = true;
                }
            }
        }
        // Holds of buffers written in place apply to where they went.
        for h in held.iter_mut() {
            if root[h.0 as usize] != NONE {
                h.0 = root[h.0 as usize];
            }
        }
        held.sort_unstable_by(|a, b| a.0.cmp(&b.0).then(a.1.total_cmp(&b.1)));
        held.dedup_by(|later, kept| {
            let same = later.0 == kept.0;
            if same {
                kept.1 = kept.1.max(later.1);
            }
            same
        });
        self.bufs.held = held;
        self.root = root;
    }

    /// Writes output buffer `u` of `item` into input buffer `b` if `item`
    /// is the last reader of `b`'s root and the plan copies none of it out.
    pub(super) fn try_forward(
        &mut self,
        item: usize,
        u: u32,
        b: u32,
        root: &mut [u32],
        swapped: &[bool],
    ) -> Option<u32> {
        let r = if root[b as usize] == NONE {
            b
        } else {
            root[b as usize]
        };
        if self.bufs.last[r as usize] != item as u32 || swapped[r as usize] {
            return None;
        }
        root[u as usize] = r;
        self.bufs.last[r as usize] = self.bufs.last[u as usize];
        self.saved.push((item as u32, self.bytes_of(u)));
        Some(r)
    }

    /// [`Self::forward_in_place`] for the original op of layout site `i`.
    pub(super) fn forward_site(
        &mut self,
        item: usize,
        i: usize,
        root: &mut [u32],
        swapped: &[bool],
    ) -> Option<(u32, u32)> {
        let lay = self.lay;
        let (q, u) = lay.sites[i];
        let cands = &lay.site_in[lay.site_off[i] as usize..lay.site_off[i + 1] as usize];
        if !self.p.redirected[item] {
            for &(_, b) in cands {
                if let Some(r) = self.try_forward(item, u, b, root, swapped) {
                    return Some((u, r));
                }
            }
            return None;
        }
        // Redirected inputs read a swap-in copy or a clone instead: each
        // input's buffer found once (a redirected one by a search).
        let n_in = (lay.in_off[q as usize + 1] - lay.in_off[q as usize]) as usize;
        let bufs: SmallVec<[u32; 8]> = (0..n_in)
            .map(|j| self.input_buf(item, q as usize, j))
            .collect();
        for &(k, _) in cands {
            let b = bufs[k as usize];
            let once = bufs.iter().filter(|&&x| x == b).count() == 1;
            if b != NONE && once && self.bytes_of(b) == self.bytes_of(u) {
                if let Some(r) = self.try_forward(item, u, b, root, swapped) {
                    return Some((u, r));
                }
            }
        }
        None
    }

    /// [`Self::forward_in_place`] for a clone: every check, on its inputs.
    pub(super) fn forward_clone(
        &mut self,
        item: usize,
        root: &mut [u32],
        swapped: &[bool],
    ) -> Option<(u32, u32)> {
        let (g, lay, p) = (self.g, self.lay, self.p);
        let v = p.item_node[item];
        let c = p.item_clone[item];
        let (f, out) = crate::inplace::of_node(g, &lay.fwd, v)?;
        let k = (out - g.out_off[v as usize]) as usize;
        let u = self.clone_buf[p.cout_off[c as usize] as usize + k];
        if u == NONE {
            return None;
        }
        let n_in = g.inputs(v).len();
        let find = |root: &[u32], b: u32| {
            if root[b as usize] == NONE {
                b
            } else {
                root[b as usize]
            }
        };
        for slot in f.slots(n_in) {
            let b = self.input_buf(item, 0, slot);
            if b == NONE
                || (b as usize) < self.bufs.n_orig && lay.buf_source[b as usize]
                || self.bytes_of(b) != self.bytes_of(u)
                || !crate::inplace::fits(g, v, slot, out)
            {
                continue;
            }
            let r = find(root, b);
            let once = (0..n_in)
                .filter(|&j| {
                    let x = self.input_buf(item, 0, j);
                    x != NONE && find(root, x) == r
                })
                .count()
                == 1;
            if once {
                if let Some(r) = self.try_forward(item, u, b, root, swapped) {
                    return Some((u, r));
                }
            }
        }
        None
    }
}
