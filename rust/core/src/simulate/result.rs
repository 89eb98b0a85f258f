//! What a finished simulation reports, at the [`Detail`] asked for.
//!
//! # Complexity
//! O(B + I + L log L) for the memory sweep (`memory.rs`), O(S log S) for
//! the host peak (`host.rs`), O(M log M) for M kept events at `Full`.

use super::stream::Sim;
use super::{Detail, EventKind, SimEvent, SimResult};
use crate::graph::NONE;

impl Sim<'_> {
    /// When the last compute item or copy finished.
    fn step_time(&self) -> f64 {
        let last_end = self.end.last().copied().unwrap_or(0.0);
        self.xf.iter().map(|x| x.end).fold(last_end, f64::max)
    }

    /// The result at `detail`: the in-place forwarding and the memory sweep
    /// (with the timeline at `Full`), then the figures.
    pub(super) fn result(&mut self, detail: Detail) -> SimResult {
        self.hold_swapped();
        self.forward_in_place();
        let full = matches!(detail, Detail::Full { .. });
        let times = full || detail == Detail::Times;
        let m = self.memory(full);
        let step = self.step_time();
        let sum =
            |r: std::ops::Range<usize>| -> u64 { self.xf[r].iter().map(|x| x.bytes as u64).sum() };
        let (events, events_truncated) = match detail {
            Detail::Full { max_events } => self.events(max_events),
            Detail::Summary | Detail::Times => (Vec::new(), self.xf.len() + self.start.len() > 0),
        };
        let copies = |from: usize, to: usize, f: fn(&super::link::Xfer) -> f64| -> Vec<f64> {
            if times {
                self.xf[from..to].iter().map(f).collect()
            } else {
                Vec::new()
            }
        };
        let op_start = if times {
            let start = &self.start;
            self.p
                .node_item
                .iter()
                .map(|&i| start[i as usize])
                .collect()
        } else {
            Vec::new()
        };
        SimResult {
            step_time_s: step,
            compute_time_s: self.compute,
            recompute_time_s: self.recompute,
            stall_time_s: self.stall,
            bytes_d2h: sum(0..self.n_swaps),
            bytes_h2d: sum(self.n_swaps..self.xf.len()),
            peak_bytes: m.peak.clamp(0, i128::from(u64::MAX)) as u64,
            host_peak_bytes: self.host_peak(),
            peak_time_s: m.peak_time,
            timeline: m.timeline,
            events,
            events_truncated,
            swap_out_end: copies(0, self.n_swaps, |x| x.end),
            swap_out_start: copies(0, self.n_swaps, |x| x.start),
            swap_in_end: copies(self.n_swaps, self.xf.len(), |x| x.end),
            op_start,
        }
    }

    /// The host peak of the swaps (`host.rs`).
    fn host_peak(&self) -> u64 {
        let (outs, ins) = self.xf.split_at(self.n_swaps);
        let step = self.step_time();
        let bufs: Vec<crate::host::HostBuffer> = (0..self.n_swaps)
            .map(|k| {
                let (lo, hi) = (self.p.in_base[k] as usize, self.p.in_base[k + 1] as usize);
                let to_s = crate::host::last_end(ins[lo..hi].iter().map(|x| x.end), step);
                crate::host::HostBuffer {
                    bytes: outs[k].bytes as u64,
                    from_s: outs[k].start,
                    to_s,
                }
            })
            .collect();
        crate::host::host_peak(&bufs)
    }

    /// Copies first, then compute items, at most `max`; sorted by start.
    fn events(&self, max: usize) -> (Vec<SimEvent>, bool) {
        let p = self.p;
        let copies = self.xf.iter().enumerate().map(|(x, c)| {
            let (kind, id) = match x.checked_sub(self.n_swaps) {
                None => (EventKind::SwapOut, self.plan.swaps[x].tensor),
                Some(i) => (EventKind::SwapIn, p.in_tensor[i]),
            };
            SimEvent {
                kind,
                id,
                start_s: c.start,
                end_s: c.end,
            }
        });
        let items = (0..self.start.len()).map(|i| SimEvent {
            kind: match p.item_clone[i] {
                NONE => EventKind::Op,
                _ => EventKind::Clone,
            },
            id: p.item_node[i],
            start_s: self.start[i],
            end_s: self.end[i],
        });
        let total = self.xf.len() + self.start.len();
        let mut ev: Vec<SimEvent> = copies.chain(items).take(max).collect();
        ev.sort_by(|a, b| a.start_s.total_cmp(&b.start_s));
        (ev, total > max)
    }
}
