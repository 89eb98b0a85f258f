//! The memory sweep of a finished walk: the device peak and, at
//! [`super::Detail::Full`], the timeline (the rules: `mod.rs`, # Memory).
//!
//! # The rule
//! Each buffer is freed at the end of its last reader; a swapped buffer is
//! held to the end of its swap-out when that is later (`hold_swapped`),
//! and a buffer written in place (`forward.rs`) is freed with the buffer it
//! went into. The compute items' allocations and frees are summed per item
//! (one scatter pass) and swept in stream order, merged with the events the
//! link times (swap-in starts, held frees) sorted by time.
//!
//! # Complexity
//! O(B + I + L log L) for B buffers, I stream items and L link events; the
//! per-item sums in `u64` when no sum can overflow it, else in `i128`.

use super::stream::Sim;
use crate::graph::NONE;

/// A memory event timed by the link (a swap-in's start, a swap-out's end).
#[derive(Debug, Clone, Copy)]
pub(super) struct MemEv {
    time: f64,
    delta: i128,
}

/// Running memory: current bytes, peak, the compressed timeline.
pub(super) struct Meter {
    pub(super) cur: i128,
    pub(super) peak: i128,
    pub(super) peak_time: f64,
    pub(super) timeline: Vec<(f64, u64)>,
    pub(super) last_up: bool,
    /// Whether to record the timeline (the peak is kept either way).
    pub(super) record: bool,
}

impl Meter {
    pub(super) fn apply(&mut self, time: f64, delta: i128) {
        if delta == 0 {
            return;
        }
        self.cur += delta;
        let up = delta > 0;
        if up && self.cur > self.peak {
            self.peak = self.cur;
            self.peak_time = time;
        }
        if !self.record {
            return;
        }
        let v = self.cur.clamp(0, i128::from(u64::MAX)) as u64;
        match self.timeline.last_mut() {
            Some(last) if last.0 == time && up == self.last_up => last.1 = v,
            _ => self.timeline.push((time, v)),
        }
        self.last_up = up;
    }
}

/// A per-item sum of buffer bytes: `u64` when no sum can overflow it (the
/// smaller array is faster to scatter into), else `i128`.
pub(super) trait Sum:
    Copy + Default + std::ops::AddAssign + std::ops::SubAssign + From<u64> + Into<i128>
{
}
impl Sum for u64 {}
impl Sum for i128 {}

/// Applies the link events from `li` on while `before` their time.
#[inline]
fn flush(m: &mut Meter, ev: &[MemEv], li: &mut usize, before: impl Fn(f64) -> bool) {
    while *li < ev.len() && before(ev[*li].time) {
        m.apply(ev[*li].time, ev[*li].delta);
        *li += 1;
    }
}

impl Sim<'_> {
    /// Bytes freed by each compute item when it ends (one sum: its frees
    /// are consecutive events at one instant, which the timeline merges into
    /// one point), and the link-timed events sorted by time (allocations
    /// first at one instant).
    pub(super) fn memory_events<F: Sum>(&self, freed: &mut Vec<F>) -> Vec<MemEv> {
        let mut link_ev = Vec::new();
        freed.clear();
        freed.resize(self.start.len(), F::default());
        let (bufs, n_orig) = (&self.bufs, self.bufs.n_orig);
        let orig = self.lay.buf_bytes.iter();
        let own = self.root.iter().map(|&r| r == NONE);
        for ((&last, &bytes), own) in bufs.last.iter().zip(orig).zip(own.clone()) {
            if own {
                freed[last as usize] += F::from(bytes);
            }
        }
        for (i, &t) in self.p.in_tensor.iter().enumerate() {
            let bytes = self.g.tensors[t as usize].value_bytes;
            let (d, time) = (i128::from(bytes), self.xf[self.n_swaps + i].start);
            link_ev.push(MemEv { time, delta: d });
            match bufs.last[n_orig + i] {
                NONE => link_ev.push(MemEv { time, delta: -d }),
                last => freed[last as usize] += F::from(bytes),
            }
        }
        let first_clone = n_orig + self.p.in_tensor.len();
        let clones = bufs.last[first_clone..].iter().zip(&bufs.clone_bytes);
        for ((&last, &bytes), own) in clones.zip(own.skip(first_clone)) {
            if own {
                freed[last as usize] += F::from(bytes);
            }
        }
        // A held buffer's free moves from its last reader's end to the end
        // of its swap-out, when that is later.
        for &(b, held) in &bufs.held {
            let (last, d) = (bufs.last[b as usize] as usize, self.bytes_of(b));
            if held > self.end[last] {
                freed[last] -= F::from(d);
                link_ev.push(MemEv {
                    time: held,
                    delta: -i128::from(d),
                });
            }
        }
        // Equal keys are equal events: their order changes nothing.
        link_ev.sort_by(|a, b| a.time.total_cmp(&b.time).then(b.delta.cmp(&a.delta)));
        link_ev
    }

    /// Sweeps the events in order: the peak and, with `record`, the timeline.
    pub(super) fn memory(&mut self, record: bool) -> Meter {
        // Every buffer's bytes together bound any one item's frees.
        let ins = self.p.in_tensor.iter();
        let total = self.lay.buf_total
            + ins
                .map(|&t| u128::from(self.g.tensors[t as usize].value_bytes))
                .sum::<u128>()
            + self
                .bufs
                .clone_bytes
                .iter()
                .map(|&b| u128::from(b))
                .sum::<u128>();
        if total <= u128::from(u64::MAX) {
            let mut freed = std::mem::take(&mut self.freed);
            let m = self.sweep(record, &mut freed);
            self.freed = freed;
            m
        } else {
            let mut freed = std::mem::take(&mut self.freed_wide);
            let m = self.sweep(record, &mut freed);
            self.freed_wide = freed;
            m
        }
    }

    /// [`Sim::memory`] with `freed` as the per-item array.
    pub(super) fn sweep<F: Sum>(&self, record: bool, freed: &mut Vec<F>) -> Meter {
        let persistent = i128::from(self.g.persistent_bytes);
        let mut timeline = Vec::new();
        if record {
            timeline.reserve_exact(2 * self.bufs.len() + 1);
            timeline.push((0.0, self.g.persistent_bytes));
        }
        let mut m = Meter {
            cur: persistent,
            peak: persistent,
            peak_time: 0.0,
            timeline,
            last_up: true,
            record,
        };
        let link_ev = self.memory_events(freed);
        let (mut li, mut q, mut si) = (0usize, 0usize, 0usize);
        let lay = self.lay;
        // Link events at an instant go after the frees of the items that
        // ended then and before the allocations of the items that start then.
        let ev = &link_ev[..];
        for (p, &out) in freed.iter().enumerate() {
            flush(&mut m, ev, &mut li, |t| t <= self.start[p]);
            // The item's allocations in one sum (consecutive events at one
            // instant, merged into one timeline point either way).
            let made = match self.p.item_clone[p] {
                NONE => {
                    let (lo, hi) = (lay.buf_off[q] as usize, lay.buf_off[q + 1] as usize);
                    q += 1;
                    lay.buf_bytes[lo..hi].iter().map(|&b| i128::from(b)).sum()
                }
                c => self.bufs.clone_alloc[c as usize],
            };
            let made = match self.saved.get(si) {
                Some(&(item, bytes)) if item as usize == p => {
                    si += 1;
                    made - i128::from(bytes)
                }
                _ => made,
            };
            // The kernel's scratch (an original's or its clone's) is held
            // from the item's start to its end.
            let ws = i128::from(self.g.workspace_of(self.p.item_node[p]));
            m.apply(self.start[p], made + ws);
            flush(&mut m, ev, &mut li, |t| t < self.end[p]);
            m.apply(self.end[p], -(out.into() + ws));
        }
        flush(&mut m, ev, &mut li, |_| true);
        m
    }

    /// A swapped tensor's buffer is held until its swap-out has ended.
    pub(super) fn hold_swapped(&mut self) {
        let held = &mut self.bufs.held;
        for (k, sw) in self.plan.swaps.iter().enumerate() {
            let b = self.lay.buf[self.lay.slot[sw.tensor as usize] as usize];
            if b != NONE {
                held.push((b, self.xf[k].end));
            }
        }
        // One entry per buffer: the latest swap-out end (aliases share one).
        held.sort_unstable_by_key(|&(b, _)| b);
        held.dedup_by(|later, kept| {
            let same = later.0 == kept.0;
            if same {
                kept.1 = kept.1.max(later.1);
            }
            same
        });
    }

    /// Bytes of buffer `b` (original, swap-in copy or clone output).
    pub(super) fn bytes_of(&self, b: u32) -> u64 {
        let (b, n_orig, n_in) = (b as usize, self.bufs.n_orig, self.p.in_tensor.len());
        if b < n_orig {
            self.lay.buf_bytes[b]
        } else if b < n_orig + n_in {
            self.g.tensors[self.p.in_tensor[b - n_orig] as usize].value_bytes
        } else {
            self.bufs.clone_bytes[b - n_orig - n_in]
        }
    }
}
