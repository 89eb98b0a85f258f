//! The compute stream of a plan as plain data: every item (an original op
//! in schedule order, or a recompute clone right after its trigger) with the
//! place each of its data inputs is read from. This is the resolution the
//! simulator itself runs on ([`super::prep`]), handed out for programs that
//! replay a plan (`crate::replay`), so that they cannot disagree with it.
//!
//! # The rule
//! An original op reads a swapped-in copy where a swap-in lists it as a
//! consumer, a clone's output where a recompute lists it as a consumer, and
//! the original tensor otherwise. A clone reads its own recompute's clones
//! for tensors made inside it, else the latest listed source (swap-in or
//! earlier clone) ready before it runs, else the original (see
//! [`crate::plan`]).
//!
//! # Complexity
//! O(N + C + E + P log P) for N nodes, C clones, E edges, P plan entries:
//! one plan check and resolution, then one pass over the items' inputs.

use crate::error::Result;
use crate::graph::{Graph, NONE};
use crate::plan::Plan;
use crate::schedule::Schedule;

use super::prep::{Prep, Src};
use super::Scratch;

/// Where one data input of a stream item is read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Read {
    /// The original tensor, on the device since its producer ran.
    Original { tensor: u32 },
    /// Swap-in `index` of `plan.swaps[swap]`: the copy brought back.
    SwapIn { tensor: u32, swap: u32, index: u32 },
    /// The clone of `plan.recomputes[recompute].nodes[index]`'s output
    /// `tensor` (the original tensor's id).
    Clone {
        tensor: u32,
        recompute: u32,
        index: u32,
    },
}

/// One item of the compute stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StreamItem {
    /// The node run (for a clone: the original node cloned).
    pub node: u32,
    /// `(recompute, index in its nodes)` for a clone, `None` for an original.
    pub clone: Option<(u32, u32)>,
    /// Data inputs in slot order.
    pub inputs: Vec<Read>,
}

/// The compute stream of `plan` on `g` run in schedule `s`, in stream order.
///
/// # Errors
/// [`crate::PlanError::InvalidArgument`] for a plan the simulator refuses
/// (the same checks, the same messages).
///
/// # Complexity
/// See the module docs.
pub(crate) fn stream_items(g: &Graph, s: &Schedule, plan: &Plan) -> Result<Vec<StreamItem>> {
    let p = Prep::new(g, s, plan, &mut Scratch::default())?;
    let place = |t: u32, src: Src| -> Read {
        match src {
            Src::Orig(t) => Read::Original { tensor: t },
            Src::In(i) => {
                let swap = p.in_swap[i as usize];
                Read::SwapIn {
                    tensor: t,
                    swap,
                    index: i - p.in_base[swap as usize],
                }
            }
            Src::Clone(c, _) => {
                let r = p.rc_base.partition_point(|&b| b <= c) as u32 - 1;
                Read::Clone {
                    tensor: t,
                    recompute: r,
                    index: c - p.rc_base[r as usize],
                }
            }
        }
    };
    let mut out = Vec::with_capacity(p.item_node.len());
    for (i, (&v, &c)) in p.item_node.iter().zip(&p.item_clone).enumerate() {
        let ins = g.inputs(v);
        let inputs = if c == NONE {
            ins.iter()
                .map(|&t| match p.redirected[i] {
                    true => place(t, p.redirect.get(i as u32, t).unwrap_or(Src::Orig(t))),
                    false => Read::Original { tensor: t },
                })
                .collect()
        } else {
            let (lo, hi) = (p.clone_in_off[c as usize], p.clone_in_off[c as usize + 1]);
            ins.iter()
                .zip(&p.clone_in[lo as usize..hi as usize])
                .map(|(&t, &src)| place(t, src))
                .collect()
        };
        let clone = (c != NONE).then(|| {
            let r = p.rc_base.partition_point(|&b| b <= c) as u32 - 1;
            (r, c - p.rc_base[r as usize])
        });
        out.push(StreamItem {
            node: v,
            clone,
            inputs,
        });
    }
    Ok(out)
}
