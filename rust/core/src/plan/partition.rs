//! Recompute units: forward sub-graphs each headed by a checkpoint op.
//!
//! # The rule
//! Walk the forward ops in schedule order. A checkpoint op (convolution,
//! matmul, einsum: `opkind::is_checkpoint`) starts a new unit. Any other
//! forward op that may be recomputed joins the unit of its most recently
//! produced input that is in a unit (so BiasAdd, normalisation arithmetic and
//! activations follow their convolution, and a residual Add joins the branch
//! that just ran rather than the long-lived shortcut); with no such input it
//! starts a unit of its own. Ops that must never be recomputed (`NodeFlags::NO_RECOMPUTE`:
//! random, stateful, variable reads, control flow) belong to no unit. A
//! unit's clone reads its inputs from outside the unit, which must then be
//! kept on the device until the clone runs.
//!
//! # Complexity
//! O(N + E).

use crate::graph::{Graph, NodeFlags, Phase, NONE};
use crate::opkind;
use crate::schedule::Schedule;

/// The units, each a list of nodes in schedule order, and the unit of every
/// node (`NONE` when it is in none).
pub struct Units {
    pub units: Vec<Vec<u32>>,
    pub unit_of: Vec<u32>,
}

/// Partitions the forward ops into units.
pub fn partition(g: &Graph, s: &Schedule) -> Units {
    let mut unit_of = vec![NONE; g.num_nodes()];
    let mut units: Vec<Vec<u32>> = Vec::new();
    for &v in &s.order {
        let vi = v as usize;
        if g.phase[vi] != Phase::Forward || g.nodes[vi].flags.has(NodeFlags::NO_RECOMPUTE) {
            continue;
        }
        let join = if opkind::is_checkpoint(g.op_name(v)) {
            None
        } else {
            g.inputs(v)
                .iter()
                .map(|&t| g.tensors[t as usize].node)
                .filter(|&p| unit_of[p as usize] != NONE)
                .max_by_key(|&p| s.pos[p as usize])
                .map(|p| unit_of[p as usize])
        };
        let u = match join {
            Some(u) => u,
            None => {
                units.push(Vec::new());
                units.len() as u32 - 1
            }
        };
        unit_of[vi] = u;
        units[u as usize].push(v);
    }
    Units { units, unit_of }
}
