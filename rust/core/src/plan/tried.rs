//! Recompute options already placed, not placed twice.
//!
//! # The rule
//! What `options::recompute_options` places at one clone time is a function
//! of the unit's nodes (in their order), the clone time and the candidates
//! idle across it, alone: the trigger walk, the clone set and the costs read
//! nothing else of the call (its `unit` is only a label). So a call whose
//! node list equals a recorded call's, trying the same clone time with the
//! same idle candidates, would place the same option again (or none again):
//! it is skipped. The recompute options record the calls of units and
//! segments of units and look up those of the spans of cut segments
//! (`recomputes.rs`): on a graph of small blocks a cut segment is one unit
//! and a span of 2 or 4 of them a segment of units, so nearly every span's
//! options are the same as a unit's or a segment's (28% of all options on
//! the narrow residual step of 10^6 nodes of docs/scale.md, 32% at 10^5). A span's candidates may
//! differ from the unit's (it keeps the buffer crossing its last cut), so a
//! clone time whose idle set differs is placed as usual.
//!
//! What leaving the copies out changes: the greedy never chose a copy (it
//! ranks equal options by id, and a copy is valid exactly when the option
//! before it is), so no greedy plan changes. The published loop
//! (`paper.rs`) walks the forward units' options in groups sized by their
//! number, and no longer retries a copy of an option it rejected: on
//! another graph it may group, and so choose, otherwise. On the digest sets
//! (docs/scale.md) no plan changed; the reported option count did.
//!
//! # Complexity
//! Recording a call: O(its nodes + its idle sets), copied into flat lists.
//! Looking one up: a hash lookup on (first node, last node, length) and a
//! comparison of the lists, O(length); per clone time, O(times recorded *
//! set size), at most three times per call.

use std::ops::Range;

use rustc_hash::FxHashMap;

/// What [`Tried`] does with the calls it sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reuse {
    /// Nothing (the default).
    Off,
    /// Record each call's clone times.
    Record,
    /// Look each call up among those recorded.
    Find,
}

/// The calls recorded and their clone times (module header).
pub(crate) struct Tried {
    mode: Reuse,
    /// (first node, last node, length) -> the first call recorded with them.
    by_ends: FxHashMap<(u32, u32, u32), u32>,
    /// Per call: its nodes (a range of `ints`) and its clone times (a range
    /// of `times`).
    calls: Vec<(Range<usize>, Range<usize>)>,
    /// Per clone time tried: the time and the idle candidates (a range of
    /// `ints`).
    times: Vec<(u32, Range<usize>)>,
    ints: Vec<u32>,
    /// The call in progress, when recorded or found.
    current: Option<usize>,
}

impl Tried {
    pub(crate) fn new() -> Self {
        Tried {
            mode: Reuse::Off,
            by_ends: FxHashMap::default(),
            calls: Vec::new(),
            times: Vec::new(),
            ints: Vec::new(),
            current: None,
        }
    }

    pub(crate) fn set_mode(&mut self, mode: Reuse) {
        self.mode = mode;
    }

    /// A call on `nodes` begins: recorded, or looked up.
    pub(crate) fn begin(&mut self, nodes: &[u32]) {
        self.current = None;
        let (Some(&first), Some(&last)) = (nodes.first(), nodes.last()) else {
            return;
        };
        let key = (first, last, nodes.len() as u32);
        match self.mode {
            Reuse::Off => {}
            Reuse::Find => {
                self.current = self
                    .by_ends
                    .get(&key)
                    .map(|&c| c as usize)
                    .filter(|&c| self.ints[self.calls[c].0.clone()] == *nodes);
            }
            Reuse::Record => {
                let id = self.calls.len();
                let at = self.ints.len();
                self.ints.extend_from_slice(nodes);
                let t = self.times.len();
                self.calls.push((at..self.ints.len(), t..t));
                self.by_ends.entry(key).or_insert(id as u32);
                self.current = Some(id);
            }
        }
    }

    /// Whether the call found tried clone time `ideal` with the idle
    /// candidates `set` (then this call places nothing there).
    pub(crate) fn found(&self, ideal: u32, set: &[u32]) -> bool {
        let Some(c) = self.current.filter(|_| self.mode == Reuse::Find) else {
            return false;
        };
        let times = self.calls[c].1.clone();
        self.times[times]
            .iter()
            .any(|(t, s)| *t == ideal && self.ints[s.clone()] == *set)
    }

    /// Records clone time `ideal` of the call in progress.
    pub(crate) fn record(&mut self, ideal: u32, set: &[u32]) {
        let Some(c) = self.current.filter(|_| self.mode == Reuse::Record) else {
            return;
        };
        let at = self.ints.len();
        self.ints.extend_from_slice(set);
        self.times.push((ideal, at..self.ints.len()));
        self.calls[c].1.end = self.times.len();
    }
}
