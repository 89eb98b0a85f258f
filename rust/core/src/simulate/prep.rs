//! The plan checked and resolved onto the compute stream: the stream's
//! items (originals in schedule order, clones after their trigger), where
//! every read is served from, and what each item sets off.
//!
//! # Complexity
//! O(N + C + E_c + P log P) for N nodes, C clones, E_c edges of the
//! consumers and clones the plan names, P plan entries.

use rustc_hash::FxHashMap;

use crate::error::{PlanError, Result};
use crate::graph::{Graph, NodeFlags, NONE};
use crate::plan::Plan;
use crate::schedule::Schedule;

use super::redirects::Redirects;
use super::{reuse, reuse_empty, Scratch};

fn invalid(msg: String) -> PlanError {
    PlanError::InvalidArgument(msg)
}

/// Where a read is served from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Src {
    /// The original tensor.
    Orig(u32),
    /// Swap-in number `i` (flat over all swaps).
    In(u32),
    /// Output `k` of clone `c` (clones numbered in plan order).
    Clone(u32, u32),
}

impl Src {
    pub(super) fn describe(self) -> String {
        match self {
            Src::Orig(_) => "the original".into(),
            Src::In(i) => format!("swap-in #{i}"),
            Src::Clone(c, _) => format!("recompute clone #{c}"),
        }
    }
}

/// A possible source of a clone's input, listed by a `clone_consumers`.
#[derive(Debug, Clone, Copy)]
struct Cand {
    src: Src,
    /// Usable by stream items after this one.
    avail: u32,
    used: bool,
}

/// What a compute item sets off when it finishes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Fire {
    /// The swap-out of swap `k` is ready.
    Out(u32),
    /// The trigger of swap-in `i` has run.
    Trigger(u32),
}

/// The plan checked and resolved onto the compute stream.
pub(super) struct Prep {
    /// Node of every stream item, and its clone id (NONE for originals).
    pub(super) item_node: Vec<u32>,
    pub(super) item_clone: Vec<u32>,
    pub(super) node_item: Vec<u32>,
    pub(super) clone_item: Vec<u32>,
    /// First clone id of each recompute (len R + 1).
    pub(super) rc_base: Vec<u32>,
    /// First output slot of each clone (len C + 1).
    pub(super) cout_off: Vec<u32>,
    /// Resolved inputs of each clone.
    pub(super) clone_in_off: Vec<u32>,
    pub(super) clone_in: Vec<Src>,
    /// Tensor of each swap-in; first swap-in of each swap (len S + 1).
    pub(super) in_tensor: Vec<u32>,
    /// The swap of each swap-in (`in_base` inverted).
    pub(super) in_swap: Vec<u32>,
    pub(super) in_base: Vec<u32>,
    /// The swap-in whose copy each swap-in's copy waits for (`follows`),
    /// and the one waiting for it (NONE: none).
    pub(super) in_pred: Vec<u32>,
    pub(super) in_succ: Vec<u32>,
    /// Reads of original nodes served by a swap-in or a clone.
    pub(super) redirect: Redirects,
    /// Per stream item: does it read anything redirected?
    pub(super) redirected: Vec<bool>,
    /// Sources listed for clones' reads, keyed by (node, tensor).
    cands: FxHashMap<(u32, u32), Vec<Cand>>,
    /// (item, event), sorted.
    pub(super) fires: Vec<(u32, Fire)>,
    /// (stream item, swap): the swap-out must end before the item starts;
    /// sorted.
    pub(super) release: Vec<(u32, u32)>,
}

/// Where in the plan a check failed; rendered only for the error message.
#[derive(Debug, Clone, Copy)]
enum What {
    Swap(usize),
    SwapIn(usize, u32, usize),
    Recompute(usize),
}

impl What {
    fn err(self, g: &Graph, msg: String) -> PlanError {
        let at = match self {
            What::Swap(k) => format!("swap {k}"),
            What::SwapIn(k, t, j) => format!("swap {k} ('{}'), swap-in {j}", g.tensor_name(t)),
            What::Recompute(r) => format!("recompute {r}"),
        };
        invalid(format!("{at}: {msg}"))
    }
}

fn check_node(g: &Graph, v: u32, what: What) -> Result<()> {
    if (v as usize) < g.num_nodes() {
        return Ok(());
    }
    Err(what.err(
        g,
        format!(
            "node id {v} is out of range (the graph has {} nodes)",
            g.num_nodes()
        ),
    ))
}

fn check_sorted(g: &Graph, list: &[u32], what: What, field: &str) -> Result<()> {
    for (i, &v) in list.iter().enumerate() {
        check_node(g, v, what)?;
        if i > 0 && list[i - 1] >= v {
            return Err(what.err(
                g,
                format!("{field} must be sorted and unique, got {list:?}"),
            ));
        }
    }
    Ok(())
}

fn check_reads(g: &Graph, c: u32, t: u32, what: What) -> Result<()> {
    if g.consumers(t).binary_search(&c).is_ok() {
        return Ok(());
    }
    Err(what.err(
        g,
        format!(
            "node '{}' does not read tensor '{}'",
            g.nodes[c as usize].name,
            g.tensor_name(t)
        ),
    ))
}

fn check_recomputes(g: &Graph, s: &Schedule, plan: &Plan) -> Result<()> {
    for (r, rc) in plan.recomputes.iter().enumerate() {
        let what = What::Recompute(r);
        check_node(g, rc.trigger, what)?;
        if rc.nodes.is_empty() {
            return Err(what.err(g, "clones no nodes".into()));
        }
        for (i, &v) in rc.nodes.iter().enumerate() {
            check_node(g, v, what)?;
            if i > 0 && s.pos[v as usize] <= s.pos[rc.nodes[i - 1] as usize] {
                return Err(what.err(g, "nodes must be unique and in schedule order".into()));
            }
            if g.nodes[v as usize].flags.has(NodeFlags::NO_RECOMPUTE) {
                return Err(what.err(g, format!("node '{}' (op {}) must not be cloned: it is stateful, random, reads a variable, calls a function or makes no output",
                    g.nodes[v as usize].name,
                    g.op_name(v)
                )));
            }
        }
        check_sorted(g, &rc.consumers, what, "consumers")?;
        check_sorted(g, &rc.clone_consumers, what, "clone_consumers")?;
        if rc.consumers.is_empty() && rc.clone_consumers.is_empty() {
            return Err(what.err(g, "has no consumers".into()));
        }
    }
    Ok(())
}

impl Prep {
    /// Checks and resolves `plan`, its per-item arrays taken from `sc`.
    pub(super) fn new(g: &Graph, s: &Schedule, plan: &Plan, sc: &mut Scratch) -> Result<Prep> {
        check_tensors(g, plan)?;
        check_recomputes(g, s, plan)?;
        let mut p = Prep::stream(g, s, plan, sc);
        let listed = p
            .add_swaps(g, plan)
            .and_then(|()| p.add_recompute_reads(g, s, plan));
        // A read listed from two places before any other error is the
        // error (`redirects.rs`).
        p.redirect.settle(g, &p.item_node)?;
        listed?;
        p.resolve_clones(g, s, plan)?;
        p.check_unused(g)?;
        // Distinct entries: a stable sort gives the one order there is, and
        // finds the runs the plan's order leaves (`add_swaps`).
        p.fires.sort();
        p.release.sort();
        Ok(p)
    }

    /// Gives the per-item arrays back to `sc`.
    pub(super) fn recycle(self, sc: &mut Scratch) {
        sc.item_node = self.item_node;
        sc.item_clone = self.item_clone;
        sc.node_item = self.node_item;
        sc.redirected = self.redirected;
    }

    /// The compute stream: schedule order, clones after their trigger.
    fn stream(g: &Graph, s: &Schedule, plan: &Plan, sc: &mut Scratch) -> Prep {
        let rs = &plan.recomputes;
        let (mut rc_base, mut cout_off) = (vec![0u32], vec![0u32]);
        for r in rs {
            rc_base.push(rc_base[rc_base.len() - 1] + r.nodes.len() as u32);
            for &v in &r.nodes {
                cout_off.push(cout_off[cout_off.len() - 1] + g.outputs(v).len() as u32);
            }
        }
        let mut by_trigger: Vec<(u32, u32)> = (0..rs.len() as u32)
            .map(|r| (s.pos[rs[r as usize].trigger as usize], r))
            .collect();
        by_trigger.sort_unstable();
        let total = g.num_nodes() + rc_base[rs.len()] as usize;
        let mut p = Prep {
            item_node: reuse_empty(&mut sc.item_node, total),
            item_clone: reuse_empty(&mut sc.item_clone, total),
            node_item: reuse_empty(&mut sc.node_item, g.num_nodes()),
            clone_item: vec![0; rc_base[rs.len()] as usize],
            rc_base,
            cout_off,
            clone_in_off: vec![0],
            clone_in: Vec::new(),
            in_tensor: Vec::new(),
            in_swap: Vec::new(),
            in_base: vec![0],
            in_pred: Vec::new(),
            in_succ: Vec::new(),
            redirect: Redirects::default(),
            redirected: reuse(&mut sc.redirected, total, false),
            cands: FxHashMap::default(),
            fires: Vec::new(),
            release: Vec::new(),
        };
        if rs.is_empty() {
            // The schedule alone: item `pos` is the op at `pos`.
            p.item_node.extend_from_slice(&s.order);
            p.item_clone.resize(total, NONE);
            p.node_item.extend_from_slice(&s.pos);
            return p;
        }
        p.node_item.resize(g.num_nodes(), 0);
        // The originals up to each trigger in one run, then its clones.
        let mut from = 0usize;
        for &(pos, r) in &by_trigger {
            let to = pos as usize + 1;
            if from < to {
                p.push_originals(&s.order[from..to]);
                from = to;
            }
            let r = r as usize;
            for (i, &c) in rs[r].nodes.iter().enumerate() {
                p.push_item(c, p.rc_base[r] + i as u32);
            }
        }
        p.push_originals(&s.order[from..]);
        p
    }

    /// Original ops `vs`, in order, as the next stream items.
    fn push_originals(&mut self, vs: &[u32]) {
        let base = self.item_node.len() as u32;
        self.item_node.extend_from_slice(vs);
        self.item_clone
            .resize(self.item_clone.len() + vs.len(), NONE);
        for (k, &v) in vs.iter().enumerate() {
            self.node_item[v as usize] = base + k as u32;
        }
    }

    /// Number of clone output slots.
    pub(super) fn clone_buf_len(&self) -> usize {
        self.cout_off.last().copied().unwrap_or(0) as usize
    }

    fn push_item(&mut self, v: u32, clone: u32) {
        let item = self.item_node.len() as u32;
        if clone == NONE {
            self.node_item[v as usize] = item;
        } else {
            self.clone_item[clone as usize] = item;
        }
        self.item_node.push(v);
        self.item_clone.push(clone);
    }

    /// Lists that original node `c` reads `t` from `src` (checked for a
    /// read from two places by `Redirects::settle`).
    fn redirect_read(&mut self, c: u32, t: u32, src: Src) {
        let item = self.node_item[c as usize];
        self.redirect.list(item, t, src);
        self.redirected[item as usize] = true;
    }

    fn add_cand(&mut self, c: u32, t: u32, src: Src, avail: u32) {
        let cand = Cand {
            src,
            avail,
            used: false,
        };
        self.cands.entry((c, t)).or_default().push(cand);
    }

    fn add_swaps(&mut self, g: &Graph, plan: &Plan) -> Result<()> {
        let reads = |l: &[u32]| l.len();
        let ins = plan.swaps.iter().flat_map(|s| &s.ins);
        let rcs = plan.recomputes.iter();
        let n = ins.map(|i| reads(&i.consumers)).sum::<usize>()
            + rcs.map(|r| reads(&r.consumers)).sum::<usize>();
        self.redirect.reserve(n);
        // Per trigger: the swap-in listed last, and the stream item after
        // which its copy can start.
        let n_ins = plan.swaps.iter().map(|s| s.ins.len()).sum::<usize>();
        let mut last_in: FxHashMap<u32, (u32, u32)> =
            FxHashMap::with_capacity_and_hasher(n_ins, Default::default());
        // The swap-ins' triggers after the swap-outs: in a plan's order (by
        // need) each list is mostly one run, which the sort in `new` merges.
        let mut triggers: Vec<(u32, Fire)> = Vec::with_capacity(n_ins);
        for (k, sw) in plan.swaps.iter().enumerate() {
            check_node(g, sw.after, What::Swap(k))?;
            let prod = g.tensors[sw.tensor as usize].node;
            let out_item = self.node_item[prod as usize].max(self.node_item[sw.after as usize]);
            self.fires.push((out_item, Fire::Out(k as u32)));
            if sw.release != NONE {
                check_node(g, sw.release, What::Swap(k))?;
                if self.node_item[sw.release as usize] <= out_item {
                    return Err(What::Swap(k).err(
                        g,
                        format!(
                            "release node '{}' does not run after the swap-out can start (after its producer and `after`)",
                            g.nodes[sw.release as usize].name
                        ),
                    ));
                }
                self.release
                    .push((self.node_item[sw.release as usize], k as u32));
            }
            for (j, si) in sw.ins.iter().enumerate() {
                let what = What::SwapIn(k, sw.tensor, j);
                let (trig, i) = self.add_swap_in(g, sw.tensor, out_item, si, what, &mut last_in)?;
                triggers.push((trig, Fire::Trigger(i)));
            }
            self.in_base.push(self.in_tensor.len() as u32);
        }
        self.fires.append(&mut triggers);
        Ok(())
    }

    /// Adds swap-in `si` of tensor `t`: its trigger's stream item and its
    /// number.
    fn add_swap_in(
        &mut self,
        g: &Graph,
        t: u32,
        out_item: u32,
        si: &crate::plan::SwapIn,
        what: What,
        last_in: &mut FxHashMap<u32, (u32, u32)>,
    ) -> Result<(u32, u32)> {
        let i = self.in_tensor.len() as u32;
        check_node(g, si.trigger, what)?;
        check_sorted(g, &si.consumers, what, "consumers")?;
        check_sorted(g, &si.clone_consumers, what, "clone_consumers")?;
        if si.consumers.is_empty() && si.clone_consumers.is_empty() {
            return Err(what.err(g, "has no consumers".into()));
        }
        let trig = self.node_item[si.trigger as usize];
        let mut avail = trig.max(out_item);
        let prev = last_in.get(&si.trigger).copied();
        let mut pred = NONE;
        if si.follows {
            let Some((p, p_avail)) = prev else {
                return Err(what.err(
                    g,
                    "follows no swap-in: no swap-in with the same trigger is listed before it"
                        .into(),
                ));
            };
            if p_avail > trig {
                return Err(what.err(
                    g,
                    "follows a swap-in whose swap-out cannot start before the trigger runs".into(),
                ));
            }
            pred = p;
            avail = avail.max(p_avail);
            self.in_succ[p as usize] = i;
        }
        self.in_pred.push(pred);
        self.in_succ.push(NONE);
        last_in.insert(si.trigger, (i, avail));
        for &c in &si.consumers {
            check_reads(g, c, t, what)?;
            self.check_before(g, trig, avail, c, what)?;
            self.redirect_read(c, t, Src::In(i));
        }
        for &c in &si.clone_consumers {
            check_reads(g, c, t, what)?;
            self.add_cand(c, t, Src::In(i), avail);
        }
        self.in_tensor.push(t);
        self.in_swap.push(self.in_base.len() as u32 - 1);
        Ok((trig, i))
    }

    /// The trigger and the swap-out's start must both precede consumer `c`.
    fn check_before(&self, g: &Graph, trig: u32, avail: u32, c: u32, what: What) -> Result<()> {
        let ci = self.node_item[c as usize];
        let name = &g.nodes[c as usize].name;
        if trig >= ci {
            return Err(what.err(
                g,
                format!("the trigger does not run before consumer '{name}' in the schedule"),
            ));
        }
        if avail >= ci {
            return Err(what.err(g, format!("the swap-out cannot start before consumer '{name}' runs (its producer or `after` is not earlier)"
            )));
        }
        Ok(())
    }

    /// The clone of `t`'s producer in recompute `r`, as a source.
    fn clone_src(&self, g: &Graph, s: &Schedule, plan: &Plan, r: usize, t: u32) -> Option<Src> {
        let nodes = &plan.recomputes[r].nodes;
        let prod = g.tensors[t as usize].node;
        let k = nodes
            .binary_search_by_key(&s.pos[prod as usize], |&m| s.pos[m as usize])
            .ok()?;
        let c = self.rc_base[r] + k as u32;
        Some(Src::Clone(c, t - g.out_off[prod as usize]))
    }

    fn add_recompute_reads(&mut self, g: &Graph, s: &Schedule, plan: &Plan) -> Result<()> {
        for (r, rc) in plan.recomputes.iter().enumerate() {
            let what = What::Recompute(r);
            let trig = self.node_item[rc.trigger as usize];
            for (list, clones) in [(&rc.consumers, false), (&rc.clone_consumers, true)] {
                for &c in list.iter() {
                    let mut any = false;
                    for &t in g.inputs(c) {
                        let Some(src) = self.clone_src(g, s, plan, r, t) else {
                            continue;
                        };
                        any = true;
                        if clones {
                            let Src::Clone(ci, _) = src else { continue };
                            self.add_cand(c, t, src, self.clone_item[ci as usize]);
                        } else {
                            self.check_before(g, trig, trig, c, what)?;
                            self.redirect_read(c, t, src);
                        }
                    }
                    if !any {
                        return Err(what.err(
                            g,
                            format!(
                                "node '{}' reads no output of the cloned nodes",
                                g.nodes[c as usize].name
                            ),
                        ));
                    }
                }
            }
        }
        Ok(())
    }

    fn resolve_clones(&mut self, g: &Graph, s: &Schedule, plan: &Plan) -> Result<()> {
        for (r, rc) in plan.recomputes.iter().enumerate() {
            for (i, &v) in rc.nodes.iter().enumerate() {
                let item = self.clone_item[self.rc_base[r] as usize + i];
                for &t in g.inputs(v) {
                    let src = self.clone_input(g, s, plan, (r, i), t, item)?;
                    self.clone_in.push(src);
                }
                self.clone_in_off.push(self.clone_in.len() as u32);
            }
        }
        Ok(())
    }

    /// Source of input `t` of the clone of `plan.recomputes[r].nodes[i]`,
    /// which runs at stream item `item`.
    fn clone_input(
        &mut self,
        g: &Graph,
        s: &Schedule,
        plan: &Plan,
        (r, i): (usize, usize),
        t: u32,
        item: u32,
    ) -> Result<Src> {
        let v = plan.recomputes[r].nodes[i];
        if let Some(src) = self.clone_src(g, s, plan, r, t) {
            return Ok(src);
        }
        let what = || {
            format!(
                "recompute {r}: the clone of '{}' reads '{}'",
                g.nodes[v as usize].name,
                g.tensor_name(t)
            )
        };
        if let Some(list) = self.cands.get_mut(&(v, t)) {
            let best = list.iter_mut().filter(|c| c.avail < item).fold(
                None::<&mut Cand>,
                |b, c| match b {
                    Some(b) if b.avail >= c.avail => Some(b),
                    _ => Some(c),
                },
            );
            let Some(best) = best else {
                return Err(invalid(format!(
                    "{}, listed as a clone consumer, but no listed source is ready before the clone runs",
                    what()
                )));
            };
            best.used = true;
            return Ok(best.src);
        }
        let prod = g.tensors[t as usize].node;
        if self.node_item[prod as usize] >= item {
            return Err(invalid(format!(
                "{}, which is made after the clone runs: move the trigger later",
                what()
            )));
        }
        Ok(Src::Orig(t))
    }

    /// Every listed clone consumer must be read by some clone.
    fn check_unused(&self, g: &Graph) -> Result<()> {
        let unused = self
            .cands
            .iter()
            .filter(|(_, l)| l.iter().any(|c| !c.used))
            .map(|(k, _)| *k)
            .min();
        match unused {
            None => Ok(()),
            Some((c, t)) => Err(invalid(format!(
                "node '{}' is listed as a clone consumer of '{}', but no clone of it reads that source (is it cloned after the source is ready?)",
                g.nodes[c as usize].name,
                g.tensor_name(t)
            ))),
        }
    }
}

fn check_tensors(g: &Graph, plan: &Plan) -> Result<()> {
    // One bit per tensor: a plan of S swaps sets S of them (O(T / 64)
    // words zeroed, no hashing per swap); the first swap of a tensor found
    // twice is looked up only then.
    let mut swapped = vec![0u64; g.num_tensors().div_ceil(64)];
    for (k, sw) in plan.swaps.iter().enumerate() {
        let t = sw.tensor;
        if t as usize >= g.num_tensors() {
            return Err(invalid(format!(
                "swap {k}: tensor id {t} is out of range (the graph has {} tensors)",
                g.num_tensors()
            )));
        }
        if g.tensors[t as usize].value_bytes == 0 {
            return Err(invalid(format!(
                "swap {k}: tensor '{}' has no device bytes to swap",
                g.tensor_name(t)
            )));
        }
        let (word, bit) = (t as usize / 64, 1u64 << (t % 64));
        if swapped[word] & bit != 0 {
            let j = (plan.swaps.iter().position(|s| s.tensor == t)).unwrap_or(k);
            return Err(invalid(format!(
                "tensor '{}' is swapped twice (swaps {j} and {k}): give it one swap with several swap-ins",
                g.tensor_name(t)
            )));
        }
        swapped[word] |= bit;
    }
    Ok(())
}
