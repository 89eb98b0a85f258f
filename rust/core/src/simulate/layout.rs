//! The graph laid out in schedule order for the simulator: per position its
//! op's time, input slots and output slots, where a slot numbers a tensor by
//! its producer's position (output `k` of the op at position `q` is slot
//! `out_off[q] + k`). The simulator walks the stream front to back, so
//! every per-op read is sequential instead of a jump into the node and
//! tensor records; one layout serves every simulation of the same graph,
//! schedule and op times.
//!
//! # Complexity
//! O(N + T + E) time and memory for N nodes, T tensors and E data edges.

use super::check_args;
use crate::device::DeviceModel;
use crate::error::Result;
use crate::graph::{Graph, NONE};
use crate::schedule::Schedule;

/// The static part of a simulation: the graph in schedule order.
pub struct Layout<'a> {
    pub(super) g: &'a Graph,
    pub(super) s: &'a Schedule,
    pub(super) costs: &'a [f64],
    /// Op time of the op at each position.
    pub(super) cost: Vec<f64>,
    /// Input slots of the op at each position (CSR, in input order).
    pub(super) in_off: Vec<u32>,
    pub(super) in_slot: Vec<u32>,
    /// First output slot of the op at each position (len N + 1).
    pub(super) out_off: Vec<u32>,
    /// Per slot: the slot it aliases (NONE: none), and its buffer bytes.
    pub(super) alias: Vec<u32>,
    pub(super) bytes: Vec<u64>,
    /// Slot of every tensor id.
    pub(super) slot: Vec<u32>,
}

impl<'a> Layout<'a> {
    /// Lays out `g` in schedule `s` with `costs[v]` seconds per node.
    ///
    /// # Errors
    /// [`crate::PlanError::InvalidArgument`] when `costs` or `s` do not fit
    /// `g` or the device model is invalid (as [`super::simulate`]).
    pub fn new(
        g: &'a Graph,
        s: &'a Schedule,
        costs: &'a [f64],
        dev: &DeviceModel,
    ) -> Result<Layout<'a>> {
        check_args(g, s, costs, dev)?;
        let (n, nt) = (g.num_nodes(), g.num_tensors());
        let mut out_off = Vec::with_capacity(n + 1);
        let mut slot = vec![NONE; nt];
        let mut cost = Vec::with_capacity(n);
        let mut next = 0u32;
        out_off.push(0);
        for &v in &s.order {
            cost.push(costs[v as usize]);
            for t in g.outputs(v) {
                slot[t as usize] = next;
                next += 1;
            }
            out_off.push(next);
        }
        let mut alias = Vec::with_capacity(nt);
        let mut bytes = Vec::with_capacity(nt);
        let mut in_off = Vec::with_capacity(n + 1);
        let mut in_slot = Vec::with_capacity(g.in_tensor.len());
        in_off.push(0);
        for &v in &s.order {
            for t in g.outputs(v) {
                let tt = &g.tensors[t as usize];
                alias.push(match tt.alias_of {
                    NONE => NONE,
                    a => slot[a as usize],
                });
                bytes.push(tt.bytes);
            }
            in_slot.extend(g.inputs(v).iter().map(|&t| slot[t as usize]));
            in_off.push(in_slot.len() as u32);
        }
        Ok(Layout {
            g,
            s,
            costs,
            cost,
            in_off,
            in_slot,
            out_off,
            alias,
            bytes,
            slot,
        })
    }
}
