//! The walk of one simulation: the compute stream in order, the link's
//! copies stepped as the stream waits for them (the model: `mod.rs`).
//!
//! # The rule
//! Each stream item (an original op at its schedule position, or a clone
//! right after its recompute's trigger) starts when the previous item has
//! ended, its inputs are on the device (a swap-in copy: the copy has
//! ended) and the swap-outs it is the release node of have ended. When it
//! ends it submits the swap-outs of its outputs and the swap-ins it
//! triggers to the link (`link.rs`), a swap-in that `follows` another once
//! that one's copy has ended too; the link is stepped only when the
//! stream waits for a copy, then drained at the end. Every buffer read
//! records its last reader, for the memory sweep (`memory.rs`).
//!
//! # Complexity
//! O((N + C) + E + P log P) for N nodes, C clones, E edges and P plan
//! entries; the link runs at most 4 steps per copy.

use super::layout::Layout;
use super::link::{Link, Xfer};
use super::prep::{Fire, Prep, Src};
use super::{invalid, reuse, reuse_empty, Scratch};
use crate::device::DeviceModel;
use crate::error::Result;
use crate::graph::{Graph, NONE};
use crate::opkind;
use crate::plan::Plan;

/// Buffers on the device timeline: the original tensors' `0..O`
/// (numbered by the [`Layout`]), then swap-in copy `i` as `O + i`, then the
/// clones' outputs in the order their clones run.
pub(super) struct Bufs {
    /// O: buffers of original tensors.
    pub(super) n_orig: usize,
    /// Last stream item that reads each buffer (its allocating item until
    /// read; NONE: a swap-in copy not read).
    pub(super) last: Vec<u32>,
    /// Bytes of each clone buffer (the others': layout and tensors).
    pub(super) clone_bytes: Vec<u64>,
    /// Bytes each clone allocates when it starts, by clone id.
    pub(super) clone_alloc: Vec<i128>,
    /// (buffer, time): held until its swap-out ends (`hold_swapped`).
    pub(super) held: Vec<(u32, f64)>,
}

impl Bufs {
    /// The original and swap-in buffers, not yet read; room for the clones'.
    pub(super) fn new(lay: &Layout<'_>, p: &Prep, sc: &mut Scratch) -> Bufs {
        let n_orig = lay.buf_bytes.len();
        let mut last = reuse(&mut sc.last, n_orig + p.in_tensor.len(), NONE);
        last.reserve(p.clone_buf_len());
        Bufs {
            n_orig,
            last,
            clone_bytes: Vec::new(),
            clone_alloc: vec![0; p.clone_item.len()],
            held: Vec::new(),
        }
    }

    /// A new clone buffer of `bytes`, allocated by clone `c` at `item`.
    pub(super) fn push_clone(&mut self, bytes: u64, c: u32, item: u32) -> u32 {
        self.clone_bytes.push(bytes);
        self.clone_alloc[c as usize] += i128::from(bytes);
        self.last.push(item);
        self.last.len() as u32 - 1
    }

    /// Number of buffers.
    pub(super) fn len(&self) -> usize {
        self.last.len()
    }
}

/// The state of one simulation.
pub(super) struct Sim<'a> {
    pub(super) g: &'a Graph,
    pub(super) lay: &'a Layout<'a>,
    pub(super) plan: &'a Plan,
    pub(super) p: &'a Prep,
    /// Start and end of every stream item (pushed as the walk reaches it).
    pub(super) start: Vec<f64>,
    pub(super) end: Vec<f64>,
    /// Swap-outs `0..S`, then swap-ins.
    pub(super) xf: Vec<Xfer>,
    pub(super) n_swaps: usize,
    pub(super) link: Link,
    pub(super) done: Vec<u32>,
    /// The walk's cursors into the redirected reads and the release
    /// entries (both sorted by stream item).
    redir_at: usize,
    rel_at: usize,
    /// End of each swap-in's trigger (NaN until it has run).
    pub(super) trig_end: Vec<f64>,
    pub(super) bufs: Bufs,
    pub(super) clone_buf: Vec<u32>,
    /// Bytes freed by each stream item when it ends (`memory_events`): in
    /// `u64` when all buffers together fit one, else in `i128`.
    pub(super) freed: Vec<u64>,
    pub(super) freed_wide: Vec<i128>,
    pub(super) stall: f64,
    pub(super) compute: f64,
    pub(super) recompute: f64,
    /// The buffer each buffer was written into in place (NONE: none).
    pub(super) root: Vec<u32>,
    /// (stream item, bytes it did not allocate: its output went in place),
    /// in item order.
    pub(super) saved: Vec<(u32, u64)>,
}

impl<'a> Sim<'a> {
    pub(super) fn new(
        lay: &'a Layout<'a>,
        plan: &'a Plan,
        p: &'a Prep,
        dev: &DeviceModel,
        sc: &mut Scratch,
    ) -> Sim<'a> {
        let g = lay.g;
        let n_swaps = plan.swaps.len();
        let n_ins = p.in_tensor.len();
        let vb = |t: u32| g.tensors[t as usize].value_bytes;
        let xf: Vec<Xfer> = (plan.swaps.iter().map(|s| vb(s.tensor)))
            .chain(p.in_tensor.iter().map(|&t| vb(t)))
            .map(|b| Xfer {
                bytes: b as f64,
                ..Xfer::default()
            })
            .collect();
        let bufs = Bufs::new(lay, p, sc);
        let items = p.item_node.len();
        let link = Link::new(
            dev.d2h_bandwidth,
            dev.h2d_bandwidth,
            dev.link_latency_s,
            dev.duplex_factor,
        );
        Sim {
            g,
            lay,
            plan,
            p,
            start: reuse_empty(&mut sc.start, items),
            end: reuse_empty(&mut sc.end, items),
            xf,
            n_swaps,
            link,
            done: Vec::new(),
            redir_at: 0,
            rel_at: 0,
            trig_end: vec![f64::NAN; n_ins],
            bufs,
            clone_buf: vec![NONE; p.clone_buf_len()],
            freed: std::mem::take(&mut sc.freed),
            freed_wide: std::mem::take(&mut sc.freed_wide),
            stall: 0.0,
            compute: 0.0,
            recompute: 0.0,
            root: std::mem::take(&mut sc.root),
            saved: std::mem::take(&mut sc.saved),
        }
    }

    /// Gives the working arrays back to `sc`.
    pub(super) fn recycle(self, sc: &mut Scratch) {
        sc.start = self.start;
        sc.end = self.end;
        sc.last = self.bufs.last;
        sc.freed = self.freed;
        sc.freed_wide = self.freed_wide;
        sc.root = self.root;
        sc.saved = self.saved;
    }

    /// Walks the compute stream, then lets the link finish.
    pub(super) fn run(&mut self) -> Result<()> {
        let (mut prev, mut f) = (0.0f64, 0usize);
        // Position of the next original op (they run in schedule order).
        let mut q = 0usize;
        for item in 0..self.p.item_node.len() {
            let original = self.p.item_clone[item] == NONE;
            let st = if original {
                self.read_original(item as u32, q, prev)?
            } else {
                self.read_clone(item as u32, prev)?
            };
            let st = self.released(item as u32, st)?;
            self.stall += st - prev;
            let d = if original {
                self.alloc_original(item as u32, q);
                q += 1;
                self.lay.cost[q - 1]
            } else {
                self.alloc_clone(item as u32);
                self.lay.costs[self.p.item_node[item] as usize]
            };
            if original {
                self.compute += d;
            } else {
                self.recompute += d;
            }
            self.start.push(st);
            prev = st + d;
            self.end.push(prev);
            while f < self.p.fires.len() && self.p.fires[f].0 as usize == item {
                self.fire(self.p.fires[f].1, prev);
                f += 1;
            }
        }
        self.drain()
    }

    /// Marks every input of original `item` (at position `q`) read;
    /// returns when they are all on the device.
    pub(super) fn read_original(&mut self, item: u32, q: usize, prev: f64) -> Result<f64> {
        let lay = self.lay;
        let (lo, hi) = (lay.in_off[q] as usize, lay.in_off[q + 1] as usize);
        let mut st = prev;
        if self.p.redirected[item as usize] {
            let v = self.p.item_node[item as usize];
            let span = self.p.redirect.span_from(self.redir_at, item);
            self.redir_at = span.1;
            for &t in self.g.inputs(v) {
                let src = self.p.redirect.get_in(span, t);
                st = st.max(self.read(src.unwrap_or(Src::Orig(t)), item)?);
            }
        } else {
            for &b in &lay.in_buf[lo..hi] {
                if b != NONE {
                    self.bufs.last[b as usize] = item;
                }
            }
        }
        Ok(st)
    }

    /// Marks every input of clone `item` read; returns when they are all
    /// on the device.
    pub(super) fn read_clone(&mut self, item: u32, prev: f64) -> Result<f64> {
        let p = self.p;
        let c = p.item_clone[item as usize];
        let (lo, hi) = (p.clone_in_off[c as usize], p.clone_in_off[c as usize + 1]);
        let mut st = prev;
        for &src in &p.clone_in[lo as usize..hi as usize] {
            st = st.max(self.read(src, item)?);
        }
        Ok(st)
    }

    /// When `item` may start, given `st`: after the swap-outs it waits for.
    pub(super) fn released(&mut self, item: u32, st: f64) -> Result<f64> {
        let p = self.p;
        let mut st = st;
        while let Some(&(at, k)) = p.release.get(self.rel_at) {
            if at > item {
                break;
            }
            debug_assert_eq!(at, item, "the walk passed a release entry");
            st = st.max(self.wait(k as usize)?);
            self.rel_at += 1;
        }
        Ok(st)
    }

    pub(super) fn buf_of(&self, src: Src) -> u32 {
        match src {
            Src::Orig(t) => self.lay.buf[self.lay.slot[t as usize] as usize],
            Src::In(i) => self.bufs.n_orig as u32 + i,
            Src::Clone(c, k) => self.clone_buf[(self.p.cout_off[c as usize] + k) as usize],
        }
    }

    /// Marks `src` read by `item`; returns when it is on the device.
    pub(super) fn read(&mut self, src: Src, item: u32) -> Result<f64> {
        let b = self.buf_of(src);
        if b != NONE {
            self.bufs.last[b as usize] = item;
        }
        match src {
            Src::In(i) => self.wait(self.n_swaps + i as usize),
            _ => Ok(0.0),
        }
    }

    /// Buffers of the outputs of original `item` at position `q`: new
    /// ones, or the aliased input's.
    pub(super) fn alloc_original(&mut self, item: u32, q: usize) {
        let lay = self.lay;
        let (lo, hi) = (lay.buf_off[q] as usize, lay.buf_off[q + 1] as usize);
        self.bufs.last[lo..hi].fill(item);
    }

    /// Buffers of the outputs of clone `item`: new ones, or the aliased
    /// input's.
    pub(super) fn alloc_clone(&mut self, item: u32) {
        let (g, p) = (self.g, self.p);
        let v = p.item_node[item as usize];
        let c = p.item_clone[item as usize];
        for (k, t) in g.outputs(v).enumerate() {
            let tt = &g.tensors[t as usize];
            let b = if tt.alias_of != NONE {
                self.clone_alias_buf(c, v, k)
            } else if tt.bytes > 0 {
                self.bufs.push_clone(tt.bytes, c, item)
            } else {
                NONE
            };
            self.clone_buf[(p.cout_off[c as usize] + k as u32) as usize] = b;
        }
    }

    /// The buffer a clone's aliasing output `k` shares: its input's.
    pub(super) fn clone_alias_buf(&self, c: u32, v: u32, k: usize) -> u32 {
        let slot = match opkind::aliased_input(self.g.op_name(v)) {
            Some(usize::MAX) => k,
            Some(s) => s,
            None => return NONE,
        };
        let lo = self.p.clone_in_off[c as usize] as usize + slot;
        if lo < self.p.clone_in_off[c as usize + 1] as usize {
            self.buf_of(self.p.clone_in[lo])
        } else {
            NONE
        }
    }

    /// Handles what a compute item sets off when it ends at `t`.
    pub(super) fn fire(&mut self, ev: Fire, t: f64) {
        match ev {
            Fire::Out(k) => self.link.submit(0, k, t),
            Fire::Trigger(i) => {
                self.trig_end[i as usize] = t;
                self.submit_in(i);
            }
        }
    }

    /// Queues swap-in `i` once its trigger has run, its swap-out has ended
    /// and the copy it follows (if any) has ended: ready at the last of them.
    fn submit_in(&mut self, i: u32) {
        let te = self.trig_end[i as usize];
        let out = &self.xf[self.swap_of_in(i)];
        if te.is_nan() || !out.done {
            return;
        }
        let mut ready = te.max(out.end);
        let pred = self.p.in_pred[i as usize];
        if pred != NONE {
            let x = &self.xf[self.n_swaps + pred as usize];
            if !x.done {
                return;
            }
            ready = ready.max(x.end);
        }
        self.link
            .submit(1, (self.n_swaps + i as usize) as u32, ready);
    }

    pub(super) fn swap_of_in(&self, i: u32) -> usize {
        self.p.in_swap[i as usize] as usize
    }

    /// One link step; starts the swap-ins whose swap-out just ended.
    pub(super) fn step(&mut self) -> bool {
        let mut done = std::mem::take(&mut self.done);
        let progressed = self.link.step(&mut self.xf, &mut done);
        for &x in &done {
            let k = x as usize;
            if k >= self.n_swaps {
                let succ = self.p.in_succ[k - self.n_swaps];
                if succ != NONE {
                    self.submit_in(succ);
                }
                continue;
            }
            for i in self.p.in_base[k]..self.p.in_base[k + 1] {
                self.submit_in(i);
            }
        }
        done.clear();
        self.done = done;
        progressed
    }

    /// Steps the link until copy `x` has ended; returns its end.
    pub(super) fn wait(&mut self, x: usize) -> Result<f64> {
        while !self.xf[x].done {
            if !self.step() {
                return Err(invalid(format!(
                    "copy {x} of the plan can never run (internal: a swap-in waits on a swap-out that never starts)"
                )));
            }
        }
        Ok(self.xf[x].end)
    }

    /// Runs the link until every copy has ended (at most 4 steps a copy).
    pub(super) fn drain(&mut self) -> Result<()> {
        for _ in 0..4 * self.xf.len() + 4 {
            if !self.step() {
                break;
            }
        }
        match self.xf.iter().position(|x| !x.done) {
            None => Ok(()),
            Some(x) => Err(invalid(format!(
                "copy {x} of the plan never ran (internal)"
            ))),
        }
    }
}
