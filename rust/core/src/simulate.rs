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
//! Each engine serves ready copies first-come first-served (ties: order of
//! becoming ready). A copy takes `link_latency_s` (the engine is busy, the
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
//! # Complexity
//! O((N + C) + E + P log P + M) time and O(N + T + E + C + P) memory for
//! N nodes, T tensors, C clones, E edges, P swap and recompute entries of
//! the plan and M kept events. The graph's layout in schedule order
//! (`layout.rs`, O(N + T + E)) can be built once for many simulations
//! ([`simulate_on`], [`simulate_summary_on`]), and their O(N + T + C)
//! working arrays kept from one to the next ([`Scratch`]: [`simulate_in`],
//! [`simulate_summary_in`]; no fresh memory to page in per simulation).
//! Deterministic: hash maps serve keyed lookups (and one minimum for an
//! error message), never an iteration order.

mod layout;
mod link;
mod prep;
mod reads;

pub use layout::Layout;
pub use reads::{stream_items, Read, StreamItem};

use serde::{Deserialize, Serialize};

use crate::device::DeviceModel;
use crate::error::{PlanError, Result};
use crate::graph::{Graph, NONE};
use crate::opkind;
use crate::plan::Plan;
use crate::schedule::Schedule;
use link::{Link, Xfer};
use prep::{Fire, Prep, Src};

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

/// Options of a simulation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimOptions {
    /// Most events kept in [`SimResult::events`] (transfers first, then
    /// compute items in stream order).
    pub max_events: usize,
}

impl Default for SimOptions {
    fn default() -> Self {
        SimOptions {
            max_events: 100_000,
        }
    }
}

/// The simulator's prediction for one plan. Seconds and bytes.
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

/// Simulates `plan` on `g` run in schedule `s`, `costs[v]` seconds per node.
///
/// # Errors
/// [`PlanError::InvalidArgument`] when `costs` or `s` do not fit `g`, the
/// device model is invalid, or the plan is: an id out of range, a tensor
/// swapped twice, a consumer that does not read the tensor, a trigger not
/// before its consumers, a node read from two places, a clone of an op
/// that must not be cloned, or a clone input not available when it runs.
///
/// # Complexity
/// See the module docs.
///
/// # Example
/// ```
/// use hybridplan_core::build::{build, BuildOptions, NodeSpec, OutSpec, Shape};
/// use hybridplan_core::{analyze_graph, device::preset, dtype::DType};
/// use hybridplan_core::{plan::Plan, simulate::simulate};
/// let out = vec![OutSpec { dtype: Some(DType::FLOAT), shape: Shape(Some(vec![256])) }];
/// let n = |name, op, inputs| NodeSpec { name, op, device: "", inputs, outputs: out.clone(), calls_function: false };
/// let specs = [n("x", "Placeholder", vec![]), n("a", "Relu", vec!["x"]), n("b", "Relu", vec!["a"])];
/// let a = analyze_graph(build(&specs, &BuildOptions::default()).unwrap()).unwrap();
/// let r = simulate(&a.graph, &a.schedule, &[0.0, 1e-3, 1e-3], &preset("cpu").unwrap(), &Plan::default()).unwrap();
/// assert_eq!(r.step_time_s, 2e-3);
/// assert_eq!(r.peak_bytes, a.liveness.peak_bytes);
/// ```
pub fn simulate(
    g: &Graph,
    s: &Schedule,
    costs: &[f64],
    dev: &DeviceModel,
    plan: &Plan,
) -> Result<SimResult> {
    simulate_with(g, s, costs, dev, plan, &SimOptions::default())
}

/// [`simulate`] with options.
///
/// # Errors
/// As [`simulate`].
pub fn simulate_with(
    g: &Graph,
    s: &Schedule,
    costs: &[f64],
    dev: &DeviceModel,
    plan: &Plan,
    opts: &SimOptions,
) -> Result<SimResult> {
    let lay = Layout::new(g, s, costs, dev)?;
    simulate_on(&lay, dev, plan, opts)
}

/// [`simulate_with`] on a graph already laid out ([`Layout`]): for many
/// simulations of one graph, schedule and op times.
///
/// # Errors
/// As [`simulate`].
pub fn simulate_on(
    lay: &Layout<'_>,
    dev: &DeviceModel,
    plan: &Plan,
    opts: &SimOptions,
) -> Result<SimResult> {
    simulate_in(lay, dev, plan, opts, &mut Scratch::default())
}

/// [`simulate_on`] with the working arrays of `scratch` (see [`Scratch`]):
/// the same result, bit for bit.
///
/// # Errors
/// As [`simulate`].
pub fn simulate_in(
    lay: &Layout<'_>,
    dev: &DeviceModel,
    plan: &Plan,
    opts: &SimOptions,
    scratch: &mut Scratch,
) -> Result<SimResult> {
    dev.validate()?;
    let prep = Prep::new(lay.g, lay.s, plan, scratch)?;
    let mut sim = Sim::new(lay, plan, &prep, dev, scratch);
    sim.run()?;
    let r = sim.result(opts);
    sim.recycle(scratch);
    prep.recycle(scratch);
    Ok(r)
}

/// The working arrays of a simulation (per stream item, buffer and tensor),
/// kept between simulations of one graph so that each does not allocate
/// and page in fresh memory: pass the same one to every [`simulate_in`] or
/// [`simulate_summary_in`] call. Its contents never change a result; a
/// simulation that fails leaves some arrays out (they are allocated again).
#[derive(Debug, Default)]
pub struct Scratch {
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

/// A plan's peak and step time: what the planner's judge needs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SimSummary {
    pub peak_bytes: u64,
    pub step_time_s: f64,
    /// Most swapped bytes held in host memory at once (`host.rs`).
    pub host_peak_bytes: u64,
}

/// [`simulate`]'s peak and step time alone, without building the timeline,
/// the events and the per-op starts (the same figures, bit for bit).
///
/// # Errors
/// As [`simulate`].
///
/// # Complexity
/// O((N + C) + E + P log P): as [`simulate`], less the timeline and the M
/// kept events.
pub fn simulate_summary(
    g: &Graph,
    s: &Schedule,
    costs: &[f64],
    dev: &DeviceModel,
    plan: &Plan,
) -> Result<SimSummary> {
    simulate_summary_on(&Layout::new(g, s, costs, dev)?, dev, plan)
}

/// [`simulate_summary`] on a graph already laid out ([`Layout`]).
///
/// # Errors
/// As [`simulate`].
pub fn simulate_summary_on(lay: &Layout<'_>, dev: &DeviceModel, plan: &Plan) -> Result<SimSummary> {
    simulate_summary_in(lay, dev, plan, &mut Scratch::default())
}

/// [`simulate_summary_on`] with the working arrays of `scratch` (see
/// [`Scratch`]): the same figures, bit for bit.
///
/// # Errors
/// As [`simulate`].
pub fn simulate_summary_in(
    lay: &Layout<'_>,
    dev: &DeviceModel,
    plan: &Plan,
    scratch: &mut Scratch,
) -> Result<SimSummary> {
    dev.validate()?;
    let prep = Prep::new(lay.g, lay.s, plan, scratch)?;
    let mut sim = Sim::new(lay, plan, &prep, dev, scratch);
    sim.run()?;
    let r = sim.summary();
    sim.recycle(scratch);
    prep.recycle(scratch);
    Ok(r)
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

/// Buffers on the device timeline: the original tensors' `0..O`
/// (numbered by the [`Layout`]), then swap-in copy `i` as `O + i`, then the
/// clones' outputs in the order their clones run.
struct Bufs {
    /// O: buffers of original tensors.
    n_orig: usize,
    /// Last stream item that reads each buffer (its allocating item until
    /// read; NONE: a swap-in copy not read).
    last: Vec<u32>,
    /// Bytes of each clone buffer (the others': layout and tensors).
    clone_bytes: Vec<u64>,
    /// Bytes each clone allocates when it starts, by clone id.
    clone_alloc: Vec<i128>,
    /// (buffer, time): held until its swap-out ends (`hold_swapped`).
    held: Vec<(u32, f64)>,
}

impl Bufs {
    /// The original and swap-in buffers, not yet read; room for the clones'.
    fn new(lay: &Layout<'_>, p: &Prep, sc: &mut Scratch) -> Bufs {
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
    fn push_clone(&mut self, bytes: u64, c: u32, item: u32) -> u32 {
        self.clone_bytes.push(bytes);
        self.clone_alloc[c as usize] += i128::from(bytes);
        self.last.push(item);
        self.last.len() as u32 - 1
    }

    /// Number of buffers.
    fn len(&self) -> usize {
        self.last.len()
    }
}

/// The state of one simulation.
struct Sim<'a> {
    g: &'a Graph,
    lay: &'a Layout<'a>,
    plan: &'a Plan,
    p: &'a Prep,
    /// Start and end of every stream item (pushed as the walk reaches it).
    start: Vec<f64>,
    end: Vec<f64>,
    /// Swap-outs `0..S`, then swap-ins.
    xf: Vec<Xfer>,
    n_swaps: usize,
    link: Link,
    done: Vec<u32>,
    /// End of each swap-in's trigger (NaN until it has run).
    trig_end: Vec<f64>,
    bufs: Bufs,
    clone_buf: Vec<u32>,
    /// Bytes freed by each stream item when it ends (`memory_events`): in
    /// `u64` when all buffers together fit one, else in `i128`.
    freed: Vec<u64>,
    freed_wide: Vec<i128>,
    stall: f64,
    compute: f64,
    recompute: f64,
    /// The buffer each buffer was written into in place (NONE: none).
    root: Vec<u32>,
    /// (stream item, bytes it did not allocate: its output went in place),
    /// in item order.
    saved: Vec<(u32, u64)>,
}

impl<'a> Sim<'a> {
    fn new(
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
    fn recycle(self, sc: &mut Scratch) {
        sc.start = self.start;
        sc.end = self.end;
        sc.last = self.bufs.last;
        sc.freed = self.freed;
        sc.freed_wide = self.freed_wide;
        sc.root = self.root;
        sc.saved = self.saved;
    }

    /// Walks the compute stream, then lets the link finish.
    fn run(&mut self) -> Result<()> {
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
    fn read_original(&mut self, item: u32, q: usize, prev: f64) -> Result<f64> {
        let lay = self.lay;
        let (lo, hi) = (lay.in_off[q] as usize, lay.in_off[q + 1] as usize);
        let mut st = prev;
        if self.p.redirected[item as usize] {
            let v = self.p.item_node[item as usize];
            for &t in self.g.inputs(v) {
                let src = self.p.redirect.get(&(v, t)).copied();
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
    fn read_clone(&mut self, item: u32, prev: f64) -> Result<f64> {
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
    fn released(&mut self, item: u32, st: f64) -> Result<f64> {
        let p = self.p;
        if p.release.is_empty() || p.item_clone[item as usize] != NONE {
            return Ok(st);
        }
        let Some(ks) = p.release.get(&p.item_node[item as usize]) else {
            return Ok(st);
        };
        let mut st = st;
        for &k in ks {
            st = st.max(self.wait(k as usize)?);
        }
        Ok(st)
    }

    fn buf_of(&self, src: Src) -> u32 {
        match src {
            Src::Orig(t) => self.lay.buf[self.lay.slot[t as usize] as usize],
            Src::In(i) => self.bufs.n_orig as u32 + i,
            Src::Clone(c, k) => self.clone_buf[(self.p.cout_off[c as usize] + k) as usize],
        }
    }

    /// Marks `src` read by `item`; returns when it is on the device.
    fn read(&mut self, src: Src, item: u32) -> Result<f64> {
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
    fn alloc_original(&mut self, item: u32, q: usize) {
        let lay = self.lay;
        let (lo, hi) = (lay.buf_off[q] as usize, lay.buf_off[q + 1] as usize);
        self.bufs.last[lo..hi].fill(item);
    }

    /// Buffers of the outputs of clone `item`: new ones, or the aliased
    /// input's.
    fn alloc_clone(&mut self, item: u32) {
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
    fn clone_alias_buf(&self, c: u32, v: u32, k: usize) -> u32 {
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
    fn fire(&mut self, ev: Fire, t: f64) {
        match ev {
            Fire::Out(k) => self.link.submit(0, k, t),
            Fire::Trigger(i) => {
                self.trig_end[i as usize] = t;
                let k = self.swap_of_in(i);
                if self.xf[k].done {
                    let ready = t.max(self.xf[k].end);
                    self.link
                        .submit(1, (self.n_swaps + i as usize) as u32, ready);
                }
            }
        }
    }

    fn swap_of_in(&self, i: u32) -> usize {
        self.p.in_base.partition_point(|&b| b <= i) - 1
    }

    /// One link step; starts the swap-ins whose swap-out just ended.
    fn step(&mut self) -> bool {
        let mut done = std::mem::take(&mut self.done);
        let progressed = self.link.step(&mut self.xf, &mut done);
        for &x in &done {
            let k = x as usize;
            if k >= self.n_swaps {
                continue;
            }
            let t = self.xf[k].end;
            for i in self.p.in_base[k]..self.p.in_base[k + 1] {
                let te = self.trig_end[i as usize];
                if !te.is_nan() {
                    self.link
                        .submit(1, (self.n_swaps + i as usize) as u32, te.max(t));
                }
            }
        }
        done.clear();
        self.done = done;
        progressed
    }

    /// Steps the link until copy `x` has ended; returns its end.
    fn wait(&mut self, x: usize) -> Result<f64> {
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
    fn drain(&mut self) -> Result<()> {
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

/// A memory event timed by the link (a swap-in's start, a swap-out's end).
#[derive(Debug, Clone, Copy)]
struct MemEv {
    time: f64,
    delta: i128,
}

/// Running memory: current bytes, peak, the compressed timeline.
struct Meter {
    cur: i128,
    peak: i128,
    peak_time: f64,
    timeline: Vec<(f64, u64)>,
    last_up: bool,
    /// Whether to record the timeline (the peak is kept either way).
    record: bool,
}

impl Meter {
    fn apply(&mut self, time: f64, delta: i128) {
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
trait Sum: Copy + Default + std::ops::AddAssign + std::ops::SubAssign + From<u64> + Into<i128> {}
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
    fn memory_events<F: Sum>(&self, freed: &mut Vec<F>) -> Vec<MemEv> {
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
    fn memory(&mut self, record: bool) -> Meter {
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
    fn sweep<F: Sum>(&self, record: bool, freed: &mut Vec<F>) -> Meter {
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
    fn hold_swapped(&mut self) {
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

    /// When the last compute item or copy finished.
    /// Bytes of buffer `b` (original, swap-in copy or clone output).
    fn bytes_of(&self, b: u32) -> u64 {
        let (b, n_orig, n_in) = (b as usize, self.bufs.n_orig, self.p.in_tensor.len());
        if b < n_orig {
            self.lay.buf_bytes[b]
        } else if b < n_orig + n_in {
            self.g.tensors[self.p.in_tensor[b - n_orig] as usize].value_bytes
        } else {
            self.bufs.clone_bytes[b - n_orig - n_in]
        }
    }

    /// The buffer that input `slot` of stream `item` reads (`q`: its
    /// position if it is an original op).
    fn input_buf(&self, item: usize, q: usize, slot: usize) -> u32 {
        let p = self.p;
        let v = p.item_node[item];
        match p.item_clone[item] {
            NONE if p.redirected[item] => {
                let t = self.g.inputs(v)[slot];
                self.buf_of(p.redirect.get(&(v, t)).copied().unwrap_or(Src::Orig(t)))
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
    /// static sites ([`Layout`]), the clones are checked in full.
    /// O(S + C log C + E_C) time for S sites and C clones with E_C inputs,
    /// O(B) memory for B buffers.
    fn forward_in_place(&mut self) {
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
    fn try_forward(
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
    fn forward_site(
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
        // Redirected inputs read a swap-in copy or a clone instead.
        let n_in = (lay.in_off[q as usize + 1] - lay.in_off[q as usize]) as usize;
        for &(k, _) in cands {
            let b = self.input_buf(item, q as usize, k as usize);
            let once = (0..n_in)
                .filter(|&j| self.input_buf(item, q as usize, j) == b)
                .count()
                == 1;
            if b != NONE && once && self.bytes_of(b) == self.bytes_of(u) {
                if let Some(r) = self.try_forward(item, u, b, root, swapped) {
                    return Some((u, r));
                }
            }
        }
        None
    }

    /// [`Self::forward_in_place`] for a clone: every check, on its inputs.
    fn forward_clone(
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

    fn step_time(&self) -> f64 {
        let last_end = self.end.last().copied().unwrap_or(0.0);
        self.xf.iter().map(|x| x.end).fold(last_end, f64::max)
    }

    fn summary(&mut self) -> SimSummary {
        self.hold_swapped();
        self.forward_in_place();
        let m = self.memory(false);
        SimSummary {
            peak_bytes: m.peak.clamp(0, i128::from(u64::MAX)) as u64,
            step_time_s: self.step_time(),
            host_peak_bytes: self.host_peak(),
        }
    }

    /// The host peak of the swaps (`host.rs`).
    fn host_peak(&self) -> u64 {
        let (outs, ins) = self.xf.split_at(self.n_swaps);
        let step = self.step_time();
        let bufs: Vec<crate::host::HostBuffer> = (0..self.n_swaps)
            .map(|k| {
                let (lo, hi) = (self.p.in_base[k] as usize, self.p.in_base[k + 1] as usize);
                let ends: Vec<f64> = ins[lo..hi].iter().map(|x| x.end).collect();
                crate::host::HostBuffer {
                    bytes: outs[k].bytes as u64,
                    from_s: outs[k].start,
                    to_s: crate::host::last_end(&ends, step),
                }
            })
            .collect();
        crate::host::host_peak(&bufs)
    }

    fn result(&mut self, opts: &SimOptions) -> SimResult {
        self.hold_swapped();
        self.forward_in_place();
        let m = self.memory(true);
        let step = self.step_time();
        let sum =
            |r: std::ops::Range<usize>| -> u64 { self.xf[r].iter().map(|x| x.bytes as u64).sum() };
        let (events, events_truncated) = self.events(opts.max_events);
        let op_start = self
            .p
            .node_item
            .iter()
            .map(|&i| self.start[i as usize])
            .collect();
        SimResult {
            step_time_s: step,
            compute_time_s: self.compute,
            recompute_time_s: self.recompute,
            stall_time_s: self.stall,
            bytes_d2h: sum(0..self.n_swaps),
            bytes_h2d: sum(self.n_swaps..self.xf.len()),
            peak_bytes: m.peak.clamp(0, i128::from(u64::MAX)) as u64,
            peak_time_s: m.peak_time,
            timeline: m.timeline,
            events,
            events_truncated,
            swap_out_end: self.xf[..self.n_swaps].iter().map(|x| x.end).collect(),
            swap_out_start: self.xf[..self.n_swaps].iter().map(|x| x.start).collect(),
            swap_in_end: self.xf[self.n_swaps..].iter().map(|x| x.end).collect(),
            op_start,
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A small mixed step, the v100 preset, its op costs and a TFLMS swap plan.
    fn swap_case() -> (crate::Analysis, DeviceModel, Vec<f64>, Plan) {
        use crate::plan::tflms::{tflms_plan, TflmsParams};
        use crate::synth::{graphdef, SynthKind, SynthSpec};
        let spec = SynthSpec {
            kind: SynthKind::Mixed,
            blocks: 4,
            ..SynthSpec::default()
        };
        let a = crate::analyze(&graphdef(&spec), &Default::default()).unwrap();
        let dev = crate::device::preset("v100-nvlink2").unwrap();
        let (costs, _) = crate::api::op_times(&a.graph, &dev, &[]).unwrap();
        let params = TflmsParams {
            threshold: 8,
            ahead: 4,
            groupby: 4,
            min_bytes: 1,
        };
        let plan = tflms_plan(&a.graph, &a.schedule, &a.liveness, &params);
        (a, dev, costs, plan)
    }

    #[test]
    fn summary_matches_the_full_simulation() {
        let (a, dev, costs, swapped) = swap_case();
        assert!(!swapped.swaps.is_empty());
        // One scratch through every simulation, the larger plan between two
        // smaller ones: its leftovers never change a result.
        let lay = Layout::new(&a.graph, &a.schedule, &costs, &dev).unwrap();
        let mut sc = Scratch::default();
        for plan in [Plan::default(), swapped, Plan::default()] {
            let full = simulate(&a.graph, &a.schedule, &costs, &dev, &plan).unwrap();
            let sum = simulate_summary(&a.graph, &a.schedule, &costs, &dev, &plan).unwrap();
            assert_eq!(sum.peak_bytes, full.peak_bytes);
            assert_eq!(sum.step_time_s.to_bits(), full.step_time_s.to_bits());
            let opts = SimOptions::default();
            assert_eq!(
                simulate_in(&lay, &dev, &plan, &opts, &mut sc).unwrap(),
                full
            );
            let again = simulate_summary_in(&lay, &dev, &plan, &mut sc).unwrap();
            assert_eq!(again, sum);
        }
    }

    #[test]
    fn narrow_and_wide_frees_sweep_alike() {
        let (a, dev, costs, plan) = swap_case();
        let lay = Layout::new(&a.graph, &a.schedule, &costs, &dev).unwrap();
        let mut sc = Scratch::default();
        let prep = Prep::new(lay.g, lay.s, &plan, &mut sc).unwrap();
        let mut sim = Sim::new(&lay, &plan, &prep, &dev, &mut sc);
        sim.run().unwrap();
        sim.hold_swapped();
        sim.forward_in_place();
        let narrow = sim.sweep(true, &mut Vec::<u64>::new());
        let wide = sim.sweep(true, &mut Vec::<i128>::new());
        assert_eq!((narrow.peak, narrow.peak_time), (wide.peak, wide.peak_time));
        assert_eq!(narrow.timeline, wide.timeline);
    }

    #[test]
    fn meter_keeps_spikes_and_merges_runs() {
        let mut m = Meter {
            cur: 10,
            peak: 10,
            peak_time: 0.0,
            timeline: vec![(0.0, 10)],
            last_up: true,
            record: true,
        };
        m.apply(1.0, 5);
        m.apply(1.0, 5); // same instant, same direction: one point
        m.apply(1.0, -20); // a zero-length spike stays visible
        m.apply(2.0, 0); // no change, no point
        assert_eq!(m.timeline, vec![(0.0, 10), (1.0, 20), (1.0, 0)]);
        assert_eq!((m.peak, m.peak_time), (20, 1.0));
    }
}
