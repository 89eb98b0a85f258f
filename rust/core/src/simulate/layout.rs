//! The graph laid out in schedule order for the simulator: per position its
//! op's time, input slots and output slots, where a slot numbers a tensor by
//! its producer's position (output `k` of the op at position `q` is slot
//! `out_off[q] + k`). The simulator walks the stream front to back, so
//! every per-op read is sequential instead of a jump into the node and
//! tensor records; one layout serves every simulation of the same graph,
//! schedule and op times.
//!
//! The buffers of the original tensors are numbered here too, once: in
//! position order (the op at position `q` makes buffers
//! `buf_off[q]..buf_off[q + 1]`), an alias sharing its owner's number. An
//! input edge names its buffer directly, so the stream walk marks a read
//! with one write and no lookup.
//!
//! # Complexity
//! O(N + T + E) time and memory for N nodes, T tensors and E data edges.

use super::check_args;
use crate::device::DeviceModel;
use crate::error::Result;
use crate::graph::{Graph, NONE};
use crate::schedule::Schedule;

/// The static part of a simulation: the graph in schedule order.
pub(crate) struct Layout<'a> {
    pub(super) g: &'a Graph,
    pub(super) s: &'a Schedule,
    pub(super) costs: &'a [f64],
    /// Op time of the op at each position.
    pub(super) cost: Vec<f64>,
    /// Buffer of every input of the op at each position (CSR, in input
    /// order; NONE: a tensor without a buffer).
    pub(super) in_off: Vec<u32>,
    pub(super) in_buf: Vec<u32>,
    /// First buffer the op at each position makes (len N + 1).
    pub(super) buf_off: Vec<u32>,
    /// Bytes of each buffer, and of all of them.
    pub(super) buf_bytes: Vec<u64>,
    pub(super) buf_total: u128,
    /// Buffer of every slot (NONE: none; an alias: its owner's).
    pub(super) buf: Vec<u32>,
    /// Slot of every tensor id.
    pub(super) slot: Vec<u32>,
    /// In-place forwarding of every op type ([`crate::inplace::table`]).
    pub(super) fwd: Vec<u8>,
    /// Buffers made by a source op (a constant, a fed input): held for the
    /// step, never written in place.
    pub(super) buf_source: Vec<bool>,
    /// The ops that may write their output in place, in position order:
    /// (position, output buffer); their candidate inputs, those that fit
    /// whatever the plan (dtype, size, not a source's, read in one slot),
    /// in the order the op tries them: `site_in[site_off[i]..site_off[i+1]]`
    /// as (input slot, buffer).
    pub(super) sites: Vec<(u32, u32)>,
    pub(super) site_off: Vec<u32>,
    pub(super) site_in: Vec<(u32, u32)>,
}

impl<'a> Layout<'a> {
    /// Lays out `g` in schedule `s` with `costs[v]` seconds per node.
    ///
    /// # Errors
    /// [`crate::PlanError::InvalidArgument`] when `costs` or `s` do not fit
    /// `g` or the device model is invalid (as [`super::Simulator::new`]).
    pub(crate) fn new(
        g: &'a Graph,
        s: &'a Schedule,
        costs: &'a [f64],
        dev: &DeviceModel,
    ) -> Result<Layout<'a>> {
        check_args(g, s, costs, dev)?;
        let (n, nt) = (g.num_nodes(), g.num_tensors());
        let mut slot = vec![NONE; nt];
        let mut cost = Vec::with_capacity(n);
        // One pass: inputs come before their readers in the schedule, so an
        // input or alias owner has its slot and buffer when it is looked up
        // (one not yet laid out, which a schedule never gives, reads as none).
        let at =
            |buf: &Vec<u32>, slot: &Vec<u32>, t: u32| buf.get(slot[t as usize] as usize).copied();
        let mut buf = Vec::with_capacity(nt);
        let mut buf_off = Vec::with_capacity(n + 1);
        let mut buf_bytes = Vec::new();
        let mut buf_source = Vec::new();
        let mut in_off = Vec::with_capacity(n + 1);
        let mut in_buf = Vec::with_capacity(g.in_tensor.len());
        buf_off.push(0);
        in_off.push(0);
        for &v in &s.order {
            cost.push(costs[v as usize]);
            in_buf.extend(
                g.inputs(v)
                    .iter()
                    .map(|&t| at(&buf, &slot, t).unwrap_or(NONE)),
            );
            in_off.push(in_buf.len() as u32);
            for t in g.outputs(v) {
                slot[t as usize] = buf.len() as u32;
                let tt = &g.tensors[t as usize];
                buf.push(match tt.alias_of {
                    NONE if tt.bytes > 0 => {
                        buf_bytes.push(tt.bytes);
                        buf_source.push(crate::inplace::pinned(g, v));
                        buf_bytes.len() as u32 - 1
                    }
                    NONE => NONE,
                    a => at(&buf, &slot, a).unwrap_or(NONE),
                });
            }
            buf_off.push(buf_bytes.len() as u32);
        }
        let fwd = crate::inplace::table(g);
        let (sites, site_off, site_in) = forwarding_sites(
            g,
            s,
            &fwd,
            &in_off,
            &in_buf,
            &buf,
            &slot,
            &buf_bytes,
            &buf_source,
        );
        Ok(Layout {
            g,
            s,
            costs,
            cost,
            in_off,
            in_buf,
            buf_off,
            buf_total: buf_bytes.iter().map(|&b| u128::from(b)).sum(),
            buf_bytes,
            buf,
            slot,
            fwd,
            buf_source,
            sites,
            site_off,
            site_in,
        })
    }
}

/// [`Layout::sites`], [`Layout::site_off`], [`Layout::site_in`].
type SiteLists = (Vec<(u32, u32)>, Vec<u32>, Vec<(u32, u32)>);

/// The static part of in-place forwarding ([`Layout::sites`]): per op that
/// may forward, the candidate inputs that fit whatever the plan does. A
/// plan changes only who reads last (and, for an op whose inputs it
/// redirects, which buffer it reads: the simulator checks those apart).
#[allow(clippy::too_many_arguments)]
fn forwarding_sites(
    g: &Graph,
    s: &Schedule,
    fwd: &[u8],
    in_off: &[u32],
    in_buf: &[u32],
    buf: &[u32],
    slot: &[u32],
    buf_bytes: &[u64],
    buf_source: &[bool],
) -> SiteLists {
    let (mut sites, mut site_off, mut site_in) = (Vec::new(), vec![0u32], Vec::new());
    let mut sorted = Vec::new();
    for (q, &v) in s.order.iter().enumerate() {
        let Some((f, out)) = crate::inplace::of_node(g, fwd, v) else {
            continue;
        };
        let u = buf[slot[out as usize] as usize];
        if u == NONE {
            continue;
        }
        let ins = &in_buf[in_off[q] as usize..in_off[q + 1] as usize];
        // Buffers read in one slot only: O(k log k) for an op of k inputs
        // (an `AddN` may have thousands).
        sorted.clear();
        sorted.extend_from_slice(ins);
        sorted.sort_unstable();
        let once = |b: u32| {
            let i = sorted.partition_point(|&x| x < b);
            sorted.get(i + 1) != Some(&b)
        };
        let before = site_in.len();
        for k in f.slots(ins.len()) {
            let b = ins[k];
            if b != NONE
                && !buf_source[b as usize]
                && buf_bytes[b as usize] == buf_bytes[u as usize]
                && crate::inplace::fits(g, v, k, out)
                && once(b)
            {
                site_in.push((k as u32, b));
            }
        }
        if site_in.len() > before {
            sites.push((q as u32, u));
            site_off.push(site_in.len() as u32);
        }
    }
    (sites, site_off, site_in)
}
