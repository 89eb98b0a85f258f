//! The two copy engines of the host link, as a discrete-event fluid model.
//!
//! Each engine serves its ready copies first-come first-served, copies
//! ready at the same instant in the order of their numbers (the plan's
//! order). A copy spends `latency` with the engine busy and the wire idle,
//! then moves its bytes at the engine's bandwidth, times `duplex` while the
//! other engine is also moving bytes. Rates change only at the instants a
//! data phase starts or ends, so each copy causes at most four steps.
//!
//! The engines advance lazily: the caller submits copies with a ready time
//! no earlier than the link's clock and steps the link when it needs a
//! copy's end. What the engines do does not depend on when they are
//! stepped: a copy is submitted before the clock passes its ready time,
//! ties go by number, not by when a copy was submitted (the walk submits a
//! swap-in when it has seen both its trigger and its swap-out end, which
//! depends on when it stepped the link), and an engine free at the end of
//! a step starts its next copy at the start of the next step, so copies
//! submitted in between at that instant take their turn too (a step ran
//! at a release node's wait and an op of no time there submitting a copy
//! at the same instant reordered copies otherwise). Release placement
//! relies on this (`api.rs`).
//!
//! # Complexity
//! O(log Q) per step for Q queued copies.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;

use crate::graph::NONE;

/// One copy: bytes, and when it ran.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Xfer {
    pub(super) bytes: f64,
    pub(super) start: f64,
    pub(super) end: f64,
    pub(super) done: bool,
}

/// A time with a total order (for the ready queues).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Time(f64);

impl Eq for Time {}

impl PartialOrd for Time {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}

impl Ord for Time {
    fn cmp(&self, o: &Self) -> Ordering {
        self.0.total_cmp(&o.0)
    }
}

#[derive(Debug, Clone, Copy)]
struct Engine {
    /// The copy in progress, or NONE.
    cur: u32,
    /// In the data phase (else in the latency phase).
    data: bool,
    lat_end: f64,
    /// Bytes left at `since`, moving at `rate` from then on.
    remaining: f64,
    since: f64,
    rate: f64,
    /// When the copy ends at the current rate.
    end: f64,
}

const IDLE: Engine = Engine {
    cur: NONE,
    data: false,
    lat_end: 0.0,
    remaining: 0.0,
    since: 0.0,
    rate: 0.0,
    end: 0.0,
};

/// Engine 0 is device-to-host, engine 1 host-to-device.
pub(super) struct Link {
    now: f64,
    bw: [f64; 2],
    latency: f64,
    duplex: f64,
    eng: [Engine; 2],
    queue: [BinaryHeap<Reverse<(Time, u32)>>; 2],
}

impl Link {
    pub(super) fn new(d2h: f64, h2d: f64, latency: f64, duplex: f64) -> Link {
        Link {
            now: 0.0,
            bw: [d2h, h2d],
            latency,
            duplex,
            eng: [IDLE; 2],
            queue: [BinaryHeap::new(), BinaryHeap::new()],
        }
    }

    /// Queues copy `x` on engine `e`, ready at `ready` (clamped to the clock).
    pub(super) fn submit(&mut self, e: usize, x: u32, ready: f64) {
        let ready = ready.max(self.now);
        self.queue[e].push(Reverse((Time(ready), x)));
    }

    /// Starts the ready copies of free engines, then runs the engines to
    /// their next event; pushes the copies that ended onto `done`. False
    /// when nothing is running or queued.
    pub(super) fn step(&mut self, xf: &mut [Xfer], done: &mut Vec<u32>) -> bool {
        self.start_ready(xf);
        let Some(t) = self.next_time() else {
            return false;
        };
        self.advance(t);
        for en in &mut self.eng {
            if en.cur == NONE {
                continue;
            }
            if !en.data && en.lat_end <= t {
                en.data = true;
                en.since = t;
                en.remaining = xf[en.cur as usize].bytes;
                en.rate = 0.0;
            } else if en.data && en.end <= t {
                let x = &mut xf[en.cur as usize];
                x.end = t;
                x.done = true;
                done.push(en.cur);
                *en = IDLE;
            }
        }
        // The copies to start now are started by the next step: the walk
        // may submit copies ready at this instant before it (an op of no
        // time that ends now), and they take their turn by number.
        self.set_rates();
        true
    }

    fn start_ready(&mut self, xf: &mut [Xfer]) {
        for e in 0..2 {
            if self.eng[e].cur != NONE {
                continue;
            }
            let Some(&Reverse((Time(r), x))) = self.queue[e].peek() else {
                continue;
            };
            if r <= self.now {
                self.queue[e].pop();
                xf[x as usize].start = self.now;
                self.eng[e] = Engine {
                    cur: x,
                    lat_end: self.now + self.latency,
                    ..IDLE
                };
            }
        }
    }

    fn next_time(&self) -> Option<f64> {
        let mut best: Option<f64> = None;
        for e in 0..2 {
            let en = &self.eng[e];
            let t = if en.cur != NONE {
                if en.data {
                    en.end
                } else {
                    en.lat_end
                }
            } else if let Some(Reverse((Time(r), _))) = self.queue[e].peek() {
                *r
            } else {
                continue;
            };
            best = Some(best.map_or(t, |b| b.min(t)));
        }
        best
    }

    /// Moves the clock to `t`, taking the bytes moved since off each copy.
    fn advance(&mut self, t: f64) {
        for en in &mut self.eng {
            if en.cur != NONE && en.data && en.rate > 0.0 {
                en.remaining = (en.remaining - en.rate * (t - en.since)).max(0.0);
                en.since = t;
            }
        }
        self.now = t;
    }

    /// Sets each data phase's rate from whether the other engine moves data;
    /// recomputes the end only where the rate changed.
    fn set_rates(&mut self) {
        let moving = [
            self.eng[0].cur != NONE && self.eng[0].data,
            self.eng[1].cur != NONE && self.eng[1].data,
        ];
        for e in 0..2 {
            if !moving[e] {
                continue;
            }
            let factor = if moving[1 - e] { self.duplex } else { 1.0 };
            let rate = self.bw[e] * factor;
            let en = &mut self.eng[e];
            if rate != en.rate {
                en.rate = rate;
                en.end = en.since + en.remaining / rate;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(link: &mut Link, xf: &mut [Xfer]) {
        let mut done = Vec::new();
        for _ in 0..100 {
            if !link.step(xf, &mut done) {
                break;
            }
        }
    }

    #[test]
    fn one_copy_takes_latency_plus_bytes_over_bandwidth() {
        let mut link = Link::new(4.0, 2.0, 0.5, 0.5);
        let mut xf = vec![Xfer {
            bytes: 8.0,
            ..Xfer::default()
        }];
        link.submit(0, 0, 1.0);
        run(&mut link, &mut xf);
        assert_eq!((xf[0].start, xf[0].end), (1.0, 3.5));
    }

    #[test]
    fn overlap_slows_both_directions_by_the_duplex_factor() {
        let mut link = Link::new(4.0, 4.0, 0.0, 0.5);
        let mut xf = vec![
            Xfer {
                bytes: 8.0,
                ..Xfer::default()
            };
            2
        ];
        link.submit(0, 0, 0.0);
        link.submit(1, 1, 0.0);
        run(&mut link, &mut xf);
        // Both at 2 B/s: 4 s instead of 2 s.
        assert_eq!((xf[0].end, xf[1].end), (4.0, 4.0));
        // Partial overlap: the second starts at 1 s (4 bytes left on the
        // first); both at 2 B/s until the first ends at 3 s, the second then
        // has 4 bytes left at full speed: ends at 4 s.
        let mut link = Link::new(4.0, 4.0, 0.0, 0.5);
        let mut xf = vec![
            Xfer {
                bytes: 8.0,
                ..Xfer::default()
            };
            2
        ];
        link.submit(0, 0, 0.0);
        link.submit(1, 1, 1.0);
        run(&mut link, &mut xf);
        assert_eq!((xf[0].end, xf[1].end), (3.0, 4.0));
    }

    #[test]
    fn one_engine_serves_in_ready_order() {
        let mut link = Link::new(1.0, 1.0, 0.0, 1.0);
        let mut xf = vec![
            Xfer {
                bytes: 2.0,
                ..Xfer::default()
            };
            2
        ];
        link.submit(0, 1, 0.5);
        link.submit(0, 0, 0.0);
        run(&mut link, &mut xf);
        assert_eq!((xf[0].start, xf[0].end), (0.0, 2.0));
        assert_eq!((xf[1].start, xf[1].end), (2.0, 4.0));
    }
}
