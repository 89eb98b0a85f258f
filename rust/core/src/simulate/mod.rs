//! The simulator: a plan's step time, stall, link traffic and memory
//! timeline on a device model.
//!
//! # The model
//! Three serial resources:
//! - the **compute stream** runs the ops in schedule order; the clones of a
//!   [`crate::plan::Recompute`] run right after its trigger (recomputes with the same
//!   trigger in plan order), each costing its original's time. An item
//!   starts when the previous one has finished and every input is on the
//!   device (a swapped-in input: its copy has finished; a clone's output:
//!   the clone has run, which the stream order already gives);
//! - the **device-to-host engine** runs swap-outs: one is ready when its
//!   producer and `after` have finished; a swap's `release` node does not
//!   start before its swap-out has ended (the stream waits: stall);
//! - the **host-to-device engine** runs swap-ins: one is ready when its
//!   trigger and its swap-out have finished.
//!
//! Each engine serves ready copies first-come first-served (ties: in plan
//! order, swap-outs by swap, swap-ins by swap and then its list). A copy takes `link_latency_s` (the engine is busy, the
//! wire idle), then moves its bytes at the direction's bandwidth, multiplied
//! by `duplex_factor` while the other direction is also moving bytes (a
//! fluid model: the rate changes at the instants the other copy starts or
//! stops moving data).
//!
//! # Memory
//! Persistent bytes are always in use. A buffer (a tensor with
//! `Tensor::bytes > 0`; an alias shares its owner's) is taken when its
//! producer starts and returned when its last device reader has finished;
//! readers redirected to a swap-in copy or a clone do not count, and a
//! swapped tensor is also held until its swap-out has finished. A swap-in
//! copy takes the tensor's bytes when the copy starts and returns them when
//! its last reader (clones included) has finished. A clone's output is taken
//! when the clone starts and returned after its last reader. An op that
//! writes its output in place ([`crate::inplace`]) allocates nothing when it
//! is the last reader of its input's buffer (clones and swap-in copies
//! count as readers and buffers alike) and the plan swaps nothing out of
//! that buffer; the buffer then lives until the output's last reader. An
//! op's kernel scratch (`Graph::workspace`, [`crate::workspace`]), a clone's
//! as its original's, is taken when it starts and returned when it ends. At equal times,
//! the events of compute item `p` order as: link events up to `p`'s start,
//! `p`'s allocations, link events up to its end, its frees; link events at
//! one instant come after the frees of items that ended then and before the
//! allocations of items that start then. With an empty plan the peak equals
//! [`crate::liveness::liveness`]'s.
//!
//! # Detail
//! One entry point, [`Simulator::run`], with a [`Detail`]: `Summary` gives
//! the figures a planner's judge needs (peak, step time, stall, traffic,
//! host peak) without building the timeline, the events and the per-op
//! and per-copy times; `Times` adds those times; `Full` gives everything.
//! The figures are the same, bit for bit, at every detail.
//!
//! # Complexity
//! O((N + C) + E + P log P + M) time and O(N + T + E + C + P) memory for
//! N nodes, T tensors, C clones, E edges, P swap and recompute entries of
//! the plan and M kept events (none at `Summary`). The graph's layout in
//! schedule order (`layout.rs`, O(N + T + E)) is built once per
//! [`Simulator`] and serves all its simulations, and their O(N + T + C)
//! working arrays are kept from one to the next (no fresh memory to page in
//! per simulation). Deterministic: hash maps serve keyed lookups (and one
//! minimum for an error message), never an iteration order.
//!
//! # Files
//! `layout.rs` (the graph in schedule order), `prep.rs` (the plan as a
//! stream of items), `redirects.rs` (the reads it serves from copies and
//! clones), `stream.rs` (the walk of the compute stream and the
//! link), `link.rs` (the two copy engines), `memory.rs` (the memory sweep),
//! `forward.rs` (in-place forwarding), `result.rs` (what a run reports),
//! `reads.rs` (the stream's reads, for replay).

mod forward;
mod layout;
mod link;
mod memory;
mod prep;
mod reads;
mod redirects;
mod result;
mod stream;
#[cfg(test)]
mod tests;

pub(crate) use reads::{stream_items, Read, StreamItem};

use serde::{Deserialize, Serialize};

use crate::device::DeviceModel;
use crate::error::{PlanError, Result};
use crate::graph::Graph;
use crate::plan::Plan;
use crate::schedule::Schedule;
use layout::Layout;
use prep::Prep;
use stream::Sim;

/// What one event of the per-stream event list is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum EventKind {
    /// An op of the original graph (compute stream); `id` is the node.
    Op,
    /// A recompute clone (compute stream); `id` is the original node.
    Clone,
    /// A device-to-host copy; `id` is the tensor.
    SwapOut,
    /// A host-to-device copy; `id` is the tensor.
    SwapIn,
}

/// One interval of one stream, for plotting.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SimEvent {
    pub kind: EventKind,
    pub id: u32,
    pub start_s: f64,
    pub end_s: f64,
}

/// How much of a simulation [`Simulator::run`] reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Detail {
    /// The figures alone: every scalar field of [`SimResult`];
    /// `timeline`, `events`, `swap_out_end`, `swap_out_start`, `swap_in_end`
    /// and `op_start` are left empty (`events_truncated` is true when the
    /// step had any event). What a planner's strategies read.
    Summary,
    /// The figures of `Summary` (`events_truncated` as there), with the
    /// per-copy times (`swap_out_end`, `swap_out_start`, `swap_in_end`) and
    /// `op_start`: what release placement reads (`plan/release.rs`). No
    /// timeline, no events.
    Times,
    /// Every field, with at most `max_events` events in
    /// [`SimResult::events`] (transfers first, then compute items in stream
    /// order).
    Full { max_events: usize },
}

impl Detail {
    /// Every field, with up to 100,000 events.
    pub const FULL: Detail = Detail::Full {
        max_events: 100_000,
    };
}

/// The simulator's prediction for one plan. Seconds and bytes. The vectors
/// are empty at [`Detail::Summary`], and the timeline and events at
/// [`Detail::Times`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SimResult {
    /// When the last compute item or copy finished.
    pub step_time_s: f64,
    /// Time of the original graph's ops.
    pub compute_time_s: f64,
    /// Time of the recompute clones.
    pub recompute_time_s: f64,
    /// Time the compute stream waited for swap-ins.
    pub stall_time_s: f64,
    pub bytes_d2h: u64,
    pub bytes_h2d: u64,
    pub peak_bytes: u64,
    /// Most swapped bytes held in host memory at once (`host.rs`).
    #[serde(default)]
    pub host_peak_bytes: u64,
    /// First instant the peak is reached.
    pub peak_time_s: f64,
    /// `(time, bytes in use)`, one point per change (two points at one time
    /// for an op that takes no time).
    pub timeline: Vec<(f64, u64)>,
    /// Stream intervals sorted by start, at most `max_events` of them.
    pub events: Vec<SimEvent>,
    /// True when events were left out.
    pub events_truncated: bool,
    /// End of each swap's swap-out, in plan order.
    pub swap_out_end: Vec<f64>,
    /// Start of each swap's swap-out, in plan order (`host.rs`).
    #[serde(default)]
    pub swap_out_start: Vec<f64>,
    /// End of every swap-in, in plan order (swap by swap, then its `ins`).
    #[serde(default)]
    pub swap_in_end: Vec<f64>,
    /// Start of every original node on the compute stream, by node id.
    pub op_start: Vec<f64>,
}

impl SimResult {
    /// This result at [`Detail::Summary`]: the same figures, the vectors
    /// left empty (what [`Simulator::run`] gives at that detail).
    pub fn to_summary(&self) -> SimResult {
        SimResult {
            events_truncated: self.events_truncated || !self.events.is_empty(),
            timeline: Vec::new(),
            events: Vec::new(),
            swap_out_end: Vec::new(),
            swap_out_start: Vec::new(),
            swap_in_end: Vec::new(),
            op_start: Vec::new(),
            ..*self
        }
    }
}

/// The simulator of one graph, schedule and op times on one device: lays
/// the graph out once, then simulates any number of plans, keeping its
/// working arrays from one to the next (they never change a result).
pub struct Simulator<'a> {
    lay: Layout<'a>,
    dev: &'a DeviceModel,
    scratch: Scratch,
}

impl<'a> Simulator<'a> {
    /// A simulator of `g` run in schedule `s`, `costs[v]` seconds per node,
    /// on `dev`.
    ///
    /// # Errors
    /// [`PlanError::InvalidArgument`] when `costs` or `s` do not fit `g` or
    /// the device model is invalid.
    ///
    /// # Complexity
    /// O(N + T + E).
    pub fn new(
        g: &'a Graph,
        s: &'a Schedule,
        costs: &'a [f64],
        dev: &'a DeviceModel,
    ) -> Result<Simulator<'a>> {
        Ok(Simulator {
            lay: Layout::new(g, s, costs, dev)?,
            dev,
            scratch: Scratch::default(),
        })
    }

    /// Simulates `plan`, reporting `detail`.
    ///
    /// # Errors
    /// [`PlanError::InvalidArgument`] when the device model is invalid or
    /// the plan is: an id out of range, a tensor swapped twice, a consumer
    /// that does not read the tensor, a trigger not before its consumers, a
    /// node read from two places, a clone of an op that must not be cloned,
    /// or a clone input not available when it runs.
    ///
    /// # Complexity
    /// See the module docs.
    ///
    /// # Example
    /// ```
    /// use hybridplan_core::build::{build, BuildOptions, NodeSpec, OutSpec, Shape};
    /// use hybridplan_core::{analyze_graph, device::preset, dtype::DType};
    /// use hybridplan_core::{plan::Plan, simulate::{Detail, Simulator}};
    /// let out = vec![OutSpec { dtype: Some(DType::FLOAT), shape: Shape(Some(vec![256])) }];
    /// let n = |name, op, inputs| NodeSpec { name, op, device: "", inputs, outputs: out.clone(), calls_function: false };
    /// let specs = [n("x", "Placeholder", vec![]), n("a", "Relu", vec!["x"]), n("b", "Relu", vec!["a"])];
    /// let a = analyze_graph(build(&specs, &BuildOptions::default()).unwrap()).unwrap();
    /// let (costs, dev) = ([0.0, 1e-3, 1e-3], preset("cpu").unwrap());
    /// let mut sim = Simulator::new(&a.graph, &a.schedule, &costs, &dev).unwrap();
    /// let r = sim.run(&Plan::default(), Detail::FULL).unwrap();
    /// assert_eq!(r.step_time_s, 2e-3);
    /// assert_eq!(r.peak_bytes, a.liveness.peak_bytes);
    /// assert_eq!(sim.run(&Plan::default(), Detail::Summary).unwrap(), r.to_summary());
    /// ```
    pub fn run(&mut self, plan: &Plan, detail: Detail) -> Result<SimResult> {
        self.dev.validate()?;
        let sc = &mut self.scratch;
        let prep = Prep::new(self.lay.g, self.lay.s, plan, sc)?;
        let mut sim = Sim::new(&self.lay, plan, &prep, self.dev, sc);
        sim.run()?;
        let r = sim.result(detail);
        sim.recycle(sc);
        prep.recycle(sc);
        Ok(r)
    }
}

/// The working arrays of a simulation (per stream item, buffer and tensor),
/// kept between simulations of one graph so that each does not allocate
/// and page in fresh memory ([`Simulator`] holds one). Its contents never
/// change a result; a simulation that fails leaves some arrays out (they
/// are allocated again).
#[derive(Debug, Default)]
struct Scratch {
    start: Vec<f64>,
    end: Vec<f64>,
    last: Vec<u32>,
    freed: Vec<u64>,
    freed_wide: Vec<i128>,
    item_node: Vec<u32>,
    item_clone: Vec<u32>,
    node_item: Vec<u32>,
    redirected: Vec<bool>,
    root: Vec<u32>,
    saved: Vec<(u32, u64)>,
}

/// `v` taken out of a scratch, emptied, and filled with `n` copies of `x`.
fn reuse<T: Clone>(v: &mut Vec<T>, n: usize, x: T) -> Vec<T> {
    let mut w = std::mem::take(v);
    w.clear();
    w.resize(n, x);
    w
}

/// `v` taken out of a scratch, emptied, with room for `cap` elements.
fn reuse_empty<T>(v: &mut Vec<T>, cap: usize) -> Vec<T> {
    let mut w = std::mem::take(v);
    w.clear();
    w.reserve(cap);
    w
}

fn invalid(msg: String) -> PlanError {
    PlanError::InvalidArgument(msg)
}

fn check_args(g: &Graph, s: &Schedule, costs: &[f64], dev: &DeviceModel) -> Result<()> {
    let n = g.num_nodes();
    if s.order.len() != n || s.pos.len() != n {
        return Err(invalid(format!(
            "the schedule has {} entries for a graph of {n} nodes: schedule this graph",
            s.order.len()
        )));
    }
    if costs.len() != n {
        return Err(invalid(format!(
            "{} op costs for a graph of {n} nodes: pass one time per node",
            costs.len()
        )));
    }
    if let Some(v) = costs.iter().position(|c| !(c.is_finite() && *c >= 0.0)) {
        return Err(invalid(format!(
            "op cost of node {v} is {}: costs must be finite seconds >= 0",
            costs[v]
        )));
    }
    dev.validate()
}
