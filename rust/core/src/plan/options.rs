//! Planning options with their memory effect and estimated cost: swapping
//! one buffer, or recomputing one unit.
//!
//! # Estimates
//! Times come from the op-time prefix sums of the schedule (`start[p]`).
//! A swap-out starts when its producer ends and takes `latency + bytes /
//! d2h`; the original is kept until its last early reader and until the
//! copy is done. The swap-in trigger is chosen from the cost model: the
//! latest op whose end leaves `latency + bytes / h2d` of compute before the
//! first late reader (not a fixed distance); when no op is early enough the
//! earliest possible trigger is used and the shortfall is the option's
//! exposed time. A recompute costs the clones' op times and keeps its
//! external inputs alive up to the clones (`extended`: the bytes of those
//! otherwise dead by then). A unit never reads from outside a tensor that has
//! a single reader (`fused_away`): TensorFlow may have fused its producer
//! into that reader, and a clone reading it would undo the fusion in the
//! original step and change its rounding; the producer is cloned too. These estimates are for one option alone: the
//! greedy queues the chosen swap-outs on the device-to-host engine
//! (`d2h.rs`) and feeds clones from swap-ins (`feed.rs`); the simulator
//! judges the finished plan.
//!
//! # Complexity
//! O(log d) per swap option and swap-in (searches on `start` galloping from
//! the producer up, from the first late reader down, d the positions to the
//! answer; O(log N) where the op there takes no time), O(size of the unit
//! + its inputs) per recompute option.

use super::candidates::{gallop_down, position_at_from, SwapCandidate};
use super::tried::{Reuse, Tried};
use super::trigger::{clone_splits_chain, regrouped, safe_trigger, safe_trigger_sorted};
use crate::graph::{Graph, NodeFlags, Phase};
use crate::liveness::Liveness;
use crate::schedule::Schedule;
use smallvec::SmallVec;

/// The copy times the option builders estimate: latency plus bytes over
/// the bandwidth, one copy at a time (the simulator's `simulate::link::Link`
/// models the engines themselves).
#[derive(Debug, Clone, Copy)]
pub struct LinkCost {
    pub d2h_bytes_per_s: f64,
    pub h2d_bytes_per_s: f64,
    pub latency_s: f64,
}

impl LinkCost {
    pub(crate) fn d2h(&self, bytes: u64) -> f64 {
        self.latency_s + bytes as f64 / self.d2h_bytes_per_s
    }
    pub(crate) fn h2d(&self, bytes: u64) -> f64 {
        self.latency_s + bytes as f64 / self.h2d_bytes_per_s
    }
}

/// Shared inputs of the option builders.
pub struct Ctx<'a> {
    pub g: &'a Graph,
    pub s: &'a Schedule,
    pub l: &'a Liveness,
    pub op_time: &'a [f64],
    pub start: Vec<f64>,
    pub link: LinkCost,
    /// Per tensor: its producer (`g.tensors[t].node`, packed: the option
    /// builders walk edges through it).
    pub producer: Vec<u32>,
}

impl<'a> Ctx<'a> {
    /// The context of an analysed graph: its schedule's start times under
    /// `op_time` and the device's link.
    pub fn new(
        a: &'a crate::Analysis,
        op_time: &'a [f64],
        dev: &crate::device::DeviceModel,
    ) -> Self {
        Ctx {
            g: &a.graph,
            s: &a.schedule,
            l: &a.liveness,
            op_time,
            start: super::candidates::start_times(&a.schedule, op_time),
            producer: a.graph.tensors.iter().map(|t| t.node).collect(),
            link: LinkCost {
                d2h_bytes_per_s: dev.d2h_bandwidth,
                h2d_bytes_per_s: dev.h2d_bandwidth,
                latency_s: dev.link_latency_s,
            },
        }
    }
}

/// One swap-in of a placed swap: its trigger position and the late readers
/// it serves (`late[lo..hi]` of the candidate).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlacedSwapIn {
    pub trigger: u32,
    pub lo: usize,
    pub hi: usize,
}

/// A swap of one candidate, placed.
#[derive(Debug, Clone, PartialEq)]
pub struct SwapOpt {
    pub cand: usize,
    /// The original stays until this position.
    pub keep_until: u32,
    /// The swap-ins, in schedule order (at least one; almost always one,
    /// held inline: building, choosing and copying an option allocate
    /// nothing for it).
    pub ins: SmallVec<[PlacedSwapIn; 1]>,
    pub exposed_s: f64,
    pub transfer_s: f64,
    /// Recompute clones reading its swap-ins (`feed.rs`), set by the greedy.
    pub feeds: Vec<super::feed::Feed>,
    /// A swap that the step waits for (`waiting_swap_option`): the position
    /// of its release node, which does not start before the copy has ended,
    /// and the node that takes the copy's control edge (`release.rs`).
    /// `None`: the copy hides behind compute (`swap_option`).
    pub wait: Option<(u32, u32)>,
}

impl SwapOpt {
    /// Position of the first swap-in's trigger.
    pub(crate) fn trigger(&self) -> u32 {
        self.ins[0].trigger
    }
}

/// Places a swap: `None` when it frees nothing.
///
/// Late readers are split into groups, each with its own swap-in, where the
/// compute between two consecutive late reads is longer than twice a copy:
/// fetching again costs less link time than the memory of holding the copy
/// across the gap is worth (the same idea as TFLMS's `groupby`). With
/// `split_all`, at every gap between late reads (one more option for the
/// greedy, for peaks that fall between two late reads).
pub(crate) fn swap_option(
    ctx: &Ctx<'_>,
    cand: usize,
    c: &SwapCandidate,
    split_all: bool,
) -> Option<SwapOpt> {
    let out_start = ctx.start[c.produce as usize + 1];
    let d_out = ctx.link.d2h(c.bytes);
    let out_done = position_at_from(&ctx.start, c.produce as usize + 1, out_start + d_out);
    let keep_until = c.last_early.max(out_done.saturating_sub(1));
    placed_swap(ctx, cand, c, keep_until, split_all)
}

/// Places a swap that the step waits for: its release node is the first op
/// after the original's last early reader that may take the copy's control
/// edge (`release::forward_release`), and the original is gone when that
/// op starts, however long the copy takes. The copy's time not hidden by
/// the compute between the producer and the release node is exposed step
/// time. `None` when it frees nothing or the tensor has no such release
/// node (only tensors made in the forward pass do). O(log N + W * d) for
/// the release walk (`release.rs`).
pub(crate) fn waiting_swap_option(
    ctx: &Ctx<'_>,
    cand: usize,
    c: &SwapCandidate,
    split_all: bool,
) -> Option<SwapOpt> {
    let x = ctx.g.tensors[c.tensor as usize].node;
    let from = c.last_early as usize + 1;
    let (node, gate) = super::release::forward_release(ctx.g, ctx.s, x, from)?;
    let at = ctx.s.pos[node as usize];
    let mut o = placed_swap(ctx, cand, c, at.checked_sub(1)?, split_all)?;
    let out_end = ctx.start[c.produce as usize + 1] + ctx.link.d2h(c.bytes);
    o.exposed_s += (out_end - ctx.start[at as usize]).max(0.0);
    o.wait = Some((at, gate));
    Some(o)
}

/// A swap whose original stays until position `keep_until`, its swap-ins
/// placed (`swap_option`). `None` when it frees nothing.
fn placed_swap(
    ctx: &Ctx<'_>,
    cand: usize,
    c: &SwapCandidate,
    keep_until: u32,
    split_all: bool,
) -> Option<SwapOpt> {
    if keep_until + 1 >= c.first_late() {
        return None;
    }
    let d_in = ctx.link.h2d(c.bytes);
    let mut ins = SmallVec::new();
    let mut exposed_s = 0.0;
    let mut lowest = keep_until + 1;
    let gap_s = if split_all { 0.0 } else { 2.0 * d_in };
    for (lo, hi) in groups(ctx, c, gap_s) {
        let first = c.late[lo].0;
        let Some((trigger, exposed)) = place_in(ctx, c, lo, hi, lowest, d_in) else {
            if ins.is_empty() {
                return None;
            }
            // This group keeps the previous copy: merge it into that one.
            let last: &mut PlacedSwapIn = ins.last_mut()?;
            last.hi = hi;
            continue;
        };
        debug_assert!(trigger < first);
        exposed_s += exposed;
        ins.push(PlacedSwapIn { trigger, lo, hi });
        lowest = c.late[hi - 1].0 + 1;
    }
    let transfer_s = ctx.link.d2h(c.bytes) + d_in * ins.len() as f64;
    Some(SwapOpt {
        cand,
        keep_until,
        ins,
        exposed_s,
        transfer_s,
        feeds: Vec::new(),
        wait: None,
    })
}

/// Late readers `lo..hi` split where the compute between two reads exceeds
/// `gap_s` (inline: most candidates have one group).
fn groups(ctx: &Ctx<'_>, c: &SwapCandidate, gap_s: f64) -> SmallVec<[(usize, usize); 4]> {
    let mut out = SmallVec::new();
    let mut lo = 0;
    for k in 1..c.late.len() {
        let idle = ctx.start[c.late[k].0 as usize] - ctx.start[c.late[k - 1].0 as usize + 1];
        if idle > gap_s {
            out.push((lo, k));
            lo = k;
        }
    }
    out.push((lo, c.late.len()));
    out
}

/// The trigger of the swap-in serving `late[lo..hi]`: the latest op whose end
/// leaves `d_in` of compute before the first of them, not before `lowest`,
/// and not fusible with a reader; with the time it fails to hide.
fn place_in(
    ctx: &Ctx<'_>,
    c: &SwapCandidate,
    lo: usize,
    hi: usize,
    lowest: u32,
    d_in: f64,
) -> Option<(u32, f64)> {
    let first = c.late[lo].0;
    if lowest >= first {
        return None;
    }
    let need = ctx.start[first as usize] - d_in;
    // Latest q with start[q + 1] <= need, i.e. q + 1 = (first index > need) - 1.
    // The copy is due at `first`: when it takes time, no start from there on
    // is at or before `need`, and the search gallops down from there.
    let at_or_before = if ctx.start[first as usize] > need {
        gallop_down(&ctx.start, first as usize, |&x| x <= need)
    } else {
        ctx.start.partition_point(|&x| x <= need)
    };
    let latest = at_or_before as i64 - 2;
    let ideal = latest.max(i64::from(lowest)).min(i64::from(first) - 1) as u32;
    // Inline: a group has a few readers.
    let consumers: SmallVec<[u32; 8]> = c.late[lo..hi].iter().map(|&(_, n)| n).collect();
    let trigger = safe_trigger(ctx.g, ctx.s, ideal, lowest, &consumers)?;
    let window = ctx.start[first as usize] - ctx.start[trigger as usize + 1];
    Some((trigger, (d_in - window).max(0.0)))
}

/// A recompute of one unit, placed. Its four lists share one allocation
/// (hundreds of thousands of options at 10^6 nodes): read them through
/// [`RecomputeOpt::clones`], [`RecomputeOpt::saved`],
/// [`RecomputeOpt::consumers`] and [`RecomputeOpt::inputs`].
#[derive(Debug, Clone)]
pub struct RecomputeOpt {
    pub unit: usize,
    /// The clones, the late readers, the inputs, then the saved buffers as
    /// (owner, last early reader) pairs, one after another; `ends` closes
    /// the first three.
    lists: Box<[u32]>,
    ends: [u32; 3],
    /// Clones run after the op at this position.
    pub trigger: u32,
    pub time_s: f64,
    pub bytes: u64,
    /// Bytes of clone outputs nobody reads late (live while the clones run).
    pub transient: u64,
    /// Bytes of the inputs whose buffers would otherwise be dead before the
    /// clones run: the recompute keeps them alive up to its trigger, so it
    /// frees `bytes - extended` at best (a clone of a `Relu` from the
    /// `MatMul` output it read frees nothing).
    pub extended: u64,
}

impl RecomputeOpt {
    /// The `lists` and `ends` of an option of `clones` (schedule order)
    /// for the late readers `consumers` (sorted), reading `inputs` from
    /// outside, freeing `saved`.
    fn pack(
        clones: &[u32],
        consumers: &[u32],
        inputs: &[u32],
        saved: impl ExactSizeIterator<Item = (u32, u32)>,
    ) -> (Box<[u32]>, [u32; 3]) {
        let mut lists =
            Vec::with_capacity(clones.len() + consumers.len() + inputs.len() + 2 * saved.len());
        let mut ends = [0u32; 3];
        for (end, part) in ends.iter_mut().zip([clones, consumers, inputs]) {
            lists.extend_from_slice(part);
            *end = lists.len() as u32;
        }
        for (t, last_early) in saved {
            lists.extend_from_slice(&[t, last_early]);
        }
        (lists.into_boxed_slice(), ends)
    }

    /// Nodes to clone, schedule order.
    pub fn clones(&self) -> &[u32] {
        &self.lists[..self.ends[0] as usize]
    }

    /// Late readers, redirected to the clones (node ids, sorted).
    pub fn consumers(&self) -> &[u32] {
        &self.lists[self.ends[0] as usize..self.ends[1] as usize]
    }

    /// Tensors outside the unit the clones read.
    pub fn inputs(&self) -> &[u32] {
        &self.lists[self.ends[1] as usize..self.ends[2] as usize]
    }

    /// Buffers freed (owner tensors), each with its last early reader
    /// position (over the owner and its aliases).
    pub fn saved(&self) -> impl ExactSizeIterator<Item = (u32, u32)> + Clone + '_ {
        self.lists[self.ends[2] as usize..]
            .chunks_exact(2)
            .map(|p| (p[0], p[1]))
    }
}

/// Working arrays of [`recompute_options`], made once for every call and
/// reused from option to option: no scratch list is allocated per option,
/// only the option's own lists.
pub(crate) struct Work {
    /// Per node: is it in the unit being placed (all `false` between calls).
    in_unit: Vec<bool>,
    /// Per tensor: marked (all `false` between uses): the buffers one
    /// option frees, or the owners of its inputs already counted.
    mark: Vec<bool>,
    /// Per node: [`triggered_link`] once known (`LINK_UNKNOWN` before):
    /// a segment's nodes are cloned by several options.
    link: Vec<u8>,
    /// The unit's candidates, then those idle across one clone time
    /// (indices into `cands`).
    saved: Vec<u32>,
    set: Vec<u32>,
    /// [`triggers`]' sorted lists and its clone times.
    early: Vec<(u32, u64)>,
    late: Vec<(u32, u64)>,
    scored: Vec<(u64, u32)>,
    /// Scratch lists of node or tensor ids: the late readers, the clones,
    /// the fused producers added to them, the clones' inputs.
    buf: Vec<u32>,
    clones: Vec<u32>,
    added: Vec<u32>,
    inputs: Vec<u32>,
    /// The options placed since the last [`Work::take`].
    out: Vec<RecomputeOpt>,
    /// The calls recorded, not to place their options twice (`tried.rs`).
    tried: Tried,
}

impl Work {
    /// Working arrays for graph `g`. O(N + T).
    pub(crate) fn new(g: &Graph) -> Self {
        Work {
            in_unit: vec![false; g.num_nodes()],
            mark: vec![false; g.num_tensors()],
            link: vec![LINK_UNKNOWN; g.num_nodes()],
            saved: Vec::new(),
            set: Vec::new(),
            early: Vec::new(),
            late: Vec::new(),
            scored: Vec::new(),
            buf: Vec::new(),
            clones: Vec::new(),
            added: Vec::new(),
            inputs: Vec::new(),
            out: Vec::new(),
            tried: Tried::new(),
        }
    }

    /// From now on, record the calls' clone times, or skip those already
    /// recorded for an equal call (`tried.rs`).
    pub(crate) fn reusing(&mut self, mode: Reuse) {
        self.tried.set_mode(mode);
    }

    /// The options placed since the last call.
    pub(crate) fn take(&mut self) -> Vec<RecomputeOpt> {
        std::mem::take(&mut self.out)
    }
}

/// Most tensors one recompute option considers freeing (the largest).
const MAX_TENSORS_PER_OPTION: usize = 64;

/// Most recompute options built per unit (one per clone time).
const TRIGGERS_PER_UNIT: usize = 3;

/// Which candidates a recompute option may free.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SpanRule {
    /// The buffer never freed: the checkpoint a span of cut segments hands
    /// on to the next (`NONE`: none).
    pub kept: u32,
    /// Only buffers whose first late reader is in the backward pass (or
    /// later): a whole-plan span is recomputed for the gradients, as
    /// `keras.remat` does; a buffer the loss reads late in the forward pass
    /// (a label cast) would set a clone time before the backward pass,
    /// where the clones' outputs are held until their late reads and free
    /// little.
    pub backward_only: bool,
}

impl SpanRule {
    /// A unit or a segment of units: every candidate.
    pub(crate) const ANY: SpanRule = SpanRule {
        kept: crate::graph::NONE,
        backward_only: false,
    };
}

/// Places the recompute of `unit` at up to three clone times, each freeing
/// the unit's tensors idle across it (`gap_of[t]`: index into `cands` of the
/// candidate whose late readers read `t`, an owner or an alias of it). A
/// candidate read late through an alias counts when the unit holds both
/// the alias op and the owner's producer: the clone set then rebuilds the
/// owner and the alias, the late readers read the cloned alias, and the
/// owner's buffer is freed. `rule` narrows the candidates for spans of
/// cut segments ([`SpanRule`]). The greedy takes at most one of the
/// options (they free the same tensors). The options are appended to
/// `work.out` (no list per call; take them with [`Work::take`]).
pub(crate) fn recompute_options(
    ctx: &Ctx<'_>,
    unit: usize,
    nodes: &[u32],
    rule: SpanRule,
    cands: &[SwapCandidate],
    gap_of: &[u32],
    work: &mut Work,
) {
    let g = ctx.g;
    for &v in nodes {
        work.in_unit[v as usize] = true;
    }
    let (in_unit, saved) = (&work.in_unit, &mut work.saved);
    saved.clear();
    for &v in nodes {
        for t in g.outputs(v) {
            let i = gap_of[t as usize];
            let Some(c) = cands.get(i as usize) else {
                continue;
            };
            if c.owner != rule.kept
                && (!rule.backward_only || g.phase[c.late[0].1 as usize] != Phase::Forward)
                && (c.tensor == c.owner || in_unit[ctx.producer[c.owner as usize] as usize])
            {
                saved.push(i);
            }
        }
    }
    if saved.len() > MAX_TENSORS_PER_OPTION {
        // Keep the largest (ties: lowest id), so `triggers` stays O(1) per unit.
        saved.sort_by(|&a, &b| {
            let (a, b) = (&cands[a as usize], &cands[b as usize]);
            b.bytes.cmp(&a.bytes).then(a.tensor.cmp(&b.tensor))
        });
        saved.truncate(MAX_TENSORS_PER_OPTION);
    }
    work.tried.begin(nodes);
    let mut times = [0u32; TRIGGERS_PER_UNIT];
    let k = triggers(cands, work, &mut times);
    for &ideal in &times[..k] {
        // The candidates idle across the clone time, the latest of their
        // early reads, and their late readers.
        let Work {
            saved, set, buf, ..
        } = &mut *work;
        set.clear();
        buf.clear();
        let mut lowest = 0;
        for &i in saved.iter() {
            let c = &cands[i as usize];
            if idle(c, ideal) {
                set.push(i);
                lowest = lowest.max(c.last_early);
                buf.extend(c.late.iter().map(|&(_, n)| n));
            }
        }
        if work.tried.found(ideal, &work.set) {
            continue; // an equal call placed it (or nothing) already
        }
        work.tried.record(ideal, &work.set);
        let buf = &mut work.buf;
        let lowest = lowest + 1;
        buf.sort_unstable();
        buf.dedup();
        let Some(trigger) = safe_trigger_sorted(g, ctx.s, ideal, lowest, buf) else {
            continue;
        };
        clone_set(ctx, nodes, cands, work);
        let link = &mut work.link;
        if work
            .clones
            .iter()
            .any(|&v| triggered_link_known(g, link, v))
        {
            continue;
        }
        if let Some(r) = finish_recompute(ctx, unit, trigger, cands, work) {
            work.out.push(r);
        }
    }
    for &v in nodes {
        work.in_unit[v as usize] = false;
    }
}

/// Whether candidate `d` is idle across the clone time after position `t`:
/// read early before it and late after it.
fn idle(d: &SwapCandidate, t: u32) -> bool {
    d.last_early < t && d.first_late() > t
}

/// Clone times worth trying, most bytes freed first, written to `times`
/// (their number returned): each tensor's first late read, with the
/// tensors of `work.saved` idle across it (last early read before, first
/// late read after). The bytes idle across `t` are those read early before
/// `t` less those already read late by `t` (a candidate's late reads
/// follow its early ones): two sorted lists with prefix sums, O(k log k)
/// for k tensors of a unit.
fn triggers(
    cands: &[SwapCandidate],
    work: &mut Work,
    times: &mut [u32; TRIGGERS_PER_UNIT],
) -> usize {
    let Work {
        saved,
        early,
        late,
        scored,
        ..
    } = work;
    let cand = |i: &u32| &cands[*i as usize];
    early.clear();
    early.extend(saved.iter().map(cand).map(|c| (c.last_early, c.bytes)));
    late.clear();
    late.extend(saved.iter().map(cand).map(|c| (c.first_late(), c.bytes)));
    let ordered = saved
        .iter()
        .map(cand)
        .all(|c| c.last_early < c.first_late());
    early.sort_unstable();
    late.sort_unstable();
    cumulate(early);
    cumulate(late);
    let upto = |v: &[(u32, u64)], n: usize| n.checked_sub(1).map_or(0, |i| v[i].1);
    scored.clear();
    for &(first, _) in late.iter() {
        let t = first - 1;
        let bytes: u64 = if ordered {
            let read_early = upto(early, early.partition_point(|e| e.0 < t));
            read_early - upto(late, late.partition_point(|l| l.0 <= t))
        } else {
            (saved.iter().map(cand))
                .filter(|d| idle(d, t))
                .map(|d| d.bytes)
                .sum()
        };
        if bytes > 0 {
            scored.push((bytes, t));
        }
    }
    scored.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    scored.dedup_by_key(|x| x.1);
    scored.truncate(TRIGGERS_PER_UNIT);
    for (slot, &(_, t)) in times.iter_mut().zip(scored.iter()) {
        *slot = t;
    }
    scored.len()
}

/// [`triggered_link`] not known yet, known false, known true.
const LINK_UNKNOWN: u8 = 0;
const LINK_NO: u8 = 1;
const LINK_YES: u8 = 2;

/// [`triggered_link`] of `v`, worked out on the first call and kept in
/// `link`. O(1) after the first call for `v`.
fn triggered_link_known(g: &Graph, link: &mut [u8], v: u32) -> bool {
    let known = &mut link[v as usize];
    if *known == LINK_UNKNOWN {
        *known = if triggered_link(g, v) {
            LINK_YES
        } else {
            LINK_NO
        };
    }
    *known == LINK_YES
}

/// Whether the clone of `v` would take the trigger's control edge itself
/// while Grappler's arithmetic optimizer regroups `v` with its reader: the
/// rewriter gates every input of a clone but constants and variable reads
/// (python/hybridplan/rewriting.py), so a clone reading only those waits
/// for the trigger by a control input of its own, and a `Mul` chain's link
/// driven by a control edge is left out of the chain (the product then
/// rounds otherwise: tests/test_default_grappler.py). O(in-degree of `v`).
fn triggered_link(g: &Graph, v: u32) -> bool {
    let ungated = |t: &u32| {
        let op = g.op_name(g.tensors[*t as usize].node);
        crate::opkind::is_constant(op) || crate::opkind::is_variable_read(op)
    };
    g.inputs(v).iter().all(ungated) && regrouped(g, v)
}

/// Replaces each entry's bytes by the sum of the bytes up to it.
fn cumulate(v: &mut [(u32, u64)]) {
    let mut sum = 0u64;
    for e in v {
        sum += e.1;
        e.1 = sum;
    }
}

/// Nodes of the unit that the candidates of `work.set` depend on, in
/// schedule order, written to `work.clones`. One sweep over the unit in
/// reverse schedule order (every predecessor of a node comes before it): a
/// node is marked needed by clearing its `in_unit` flag, and a needed node
/// marks its predecessors in the unit (flags restored before returning).
/// No stack, no hashing: O(size of the unit + the edges of its needed
/// nodes).
fn clone_set(ctx: &Ctx<'_>, nodes: &[u32], cands: &[SwapCandidate], work: &mut Work) {
    let (g, producer) = (ctx.g, &ctx.producer);
    let Work {
        in_unit,
        set,
        clones,
        ..
    } = work;
    for &i in set.iter() {
        in_unit[producer[cands[i as usize].tensor as usize] as usize] = false;
    }
    for &v in nodes.iter().rev() {
        if in_unit[v as usize] {
            continue;
        }
        for &t in g.inputs(v) {
            in_unit[producer[t as usize] as usize] = false;
        }
        for &p in g.control_inputs(v) {
            in_unit[p as usize] = false;
        }
    }
    clones.clear();
    clones.extend(nodes.iter().copied().filter(|&v| !in_unit[v as usize]));
    for &v in nodes {
        in_unit[v as usize] = true;
    }
}

/// Whether the clones must not read tensor `t` (made by `p`) from outside
/// their unit: it has one data reader, so TensorFlow may fuse `p` into that
/// reader (a convolution with its `BiasAdd` and activation) and the tensor
/// never exists; a clone reading it would add a reader and stop the
/// original's fusion, and the step would round differently. Such a `p` is
/// cloned too (`with_fused_producers`). Sources and variable reads fuse with
/// nothing. O(1).
fn fused_away(g: &Graph, p: u32, t: u32) -> bool {
    g.consumers(t).len() == 1
        && !g.nodes[p as usize].flags.has(NodeFlags::SOURCE)
        && !crate::opkind::is_variable_read(g.op_name(p))
}

/// `work.clones` grown by the producers of the tensors they read that are
/// `fused_away`, transitively, in schedule order; the added nodes are
/// marked in `in_unit` and listed in `work.added` (the caller unmarks
/// them). O(size of the grown set + its inputs).
fn with_fused_producers(ctx: &Ctx<'_>, work: &mut Work) {
    let g = ctx.g;
    let Work {
        in_unit,
        clones,
        added,
        ..
    } = work;
    added.clear();
    let mut i = 0;
    while i < clones.len() {
        for &t in g.inputs(clones[i]) {
            let p = ctx.producer[t as usize];
            if !in_unit[p as usize] && fused_away(g, p, t) {
                in_unit[p as usize] = true;
                added.push(p);
                clones.push(p);
            }
        }
        i += 1;
    }
    if !added.is_empty() {
        clones.sort_unstable_by_key(|&v| ctx.s.pos[v as usize]);
    }
}

/// The option of the clones `work.clones` at position `trigger`, freeing
/// the candidates of `work.set` for the late readers `work.buf`: the
/// clones grown by their fused producers, their inputs from outside and
/// the costs. `None` when a clone must not be recomputed, or when cloning
/// it would change how Grappler's arithmetic optimizer groups it with its
/// readers (`trigger::clone_splits_chain`).
fn finish_recompute(
    ctx: &Ctx<'_>,
    unit: usize,
    trigger: u32,
    cands: &[SwapCandidate],
    work: &mut Work,
) -> Option<RecomputeOpt> {
    with_fused_producers(ctx, work);
    let opt = finish_grown(ctx, unit, trigger, cands, work);
    for &p in &work.added {
        work.in_unit[p as usize] = false;
    }
    opt
}

fn finish_grown(
    ctx: &Ctx<'_>,
    unit: usize,
    trigger: u32,
    cands: &[SwapCandidate],
    work: &mut Work,
) -> Option<RecomputeOpt> {
    let (g, l) = (ctx.g, ctx.l);
    let Work {
        in_unit,
        mark,
        set,
        buf: consumers,
        clones,
        inputs,
        ..
    } = work;
    inputs.clear();
    // `clones` is in schedule order, `consumers` sorted by node.
    let pos = &ctx.s.pos;
    let is_clone = |c: u32| {
        clones
            .binary_search_by_key(&pos[c as usize], |&x| pos[x as usize])
            .is_ok()
    };
    let is_consumer = |c: u32| consumers.binary_search(&c).is_ok();
    for &v in clones.iter() {
        if g.nodes[v as usize].flags.has(NodeFlags::NO_RECOMPUTE)
            || clone_splits_chain(g, v, is_clone, is_consumer)
        {
            return None;
        }
        for &t in g.inputs(v) {
            if !in_unit[ctx.producer[t as usize] as usize] {
                inputs.push(t);
            }
        }
    }
    inputs.sort_unstable();
    inputs.dedup();
    // The inputs' buffers, each counted once (marked, then unmarked).
    let mut extended = 0;
    for &x in inputs.iter() {
        let o = l.owner[x as usize] as usize;
        if !mark[o] {
            mark[o] = true;
            if l.last_use[o] < trigger {
                extended += g.tensors[o].bytes;
            }
        }
    }
    for &x in inputs.iter() {
        mark[l.owner[x as usize] as usize] = false;
    }
    let cand = |i: &u32| &cands[*i as usize];
    for c in set.iter().map(cand) {
        mark[c.owner as usize] = true;
    }
    let transient = clones
        .iter()
        .flat_map(|&v| g.outputs(v))
        .filter(|&t| !mark[t as usize])
        .map(|t| g.tensors[t as usize].bytes)
        .sum();
    for c in set.iter().map(cand) {
        mark[c.owner as usize] = false;
    }
    // The rewrite redirects each late reader to the clones' outputs and
    // refuses a reader that reads none of them.
    debug_assert!(
        consumers.iter().all(|&c| g
            .inputs(c)
            .iter()
            .any(|&t| clones.contains(&ctx.producer[t as usize]))),
        "unit {unit}: a late reader reads no output of the clones"
    );
    let saved = set.iter().map(cand).map(|c| (c.owner, c.last_early));
    let (lists, ends) = RecomputeOpt::pack(clones, consumers, inputs, saved);
    Some(RecomputeOpt {
        unit,
        lists,
        ends,
        trigger,
        time_s: clones.iter().map(|&v| ctx.op_time[v as usize]).sum(),
        bytes: set.iter().map(cand).map(|c| c.bytes).sum(),
        transient,
        extended,
    })
}

#[cfg(test)]
mod tests;
