//! The assumed execution order: a deterministic topological order.
//!
//! # The rule
//! Kahn's algorithm that always runs the ready node with the lowest id.
//! Node ids are `GraphDef` positions, and a traced `FuncGraph` lists ops in
//! creation order (forward, then gradients in reverse layer order, then
//! updates), so for a traced step the order is the `GraphDef` order itself.
//! TensorFlow's executor runs ready ops as they become ready (inline or on a
//! thread pool), which on one stream follows the same dataflow frontier;
//! where several ops are ready at once the real order may differ, which
//! shifts peaks by at most the ops that are ready together.
//!
//! # Complexity
//! O(N + E) when the node order is already topological (checked first),
//! otherwise O(E + N log N) with a binary heap. A cycle is reported with the
//! nodes on it, found in O(N + E).

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use crate::error::{PlanError, Result};
use crate::graph::Graph;

/// A schedule: `order[p]` is the node at position `p`, `pos[v]` the position of node `v`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedule {
    pub order: Vec<u32>,
    pub pos: Vec<u32>,
}

/// Computes the schedule.
///
/// # Errors
/// [`PlanError::Cycle`] naming the nodes of one cycle.
pub fn schedule(g: &Graph) -> Result<Schedule> {
    let n = g.num_nodes();
    // A tensor's producer precedes v exactly when the tensor does precede
    // v's outputs (tensors are numbered in producer order).
    let identity = (0..n as u32).all(|v| {
        let first_output = g.out_off[v as usize];
        g.inputs(v).iter().all(|&t| t < first_output) && g.control_inputs(v).iter().all(|&p| p < v)
    });
    let order: Vec<u32> = if identity {
        (0..n as u32).collect()
    } else {
        kahn_min_id(g)?
    };
    let mut pos = vec![0u32; n];
    for (p, &v) in order.iter().enumerate() {
        pos[v as usize] = p as u32;
    }
    Ok(Schedule { order, pos })
}

/// Kahn's algorithm, lowest ready id first. Ready nodes below `cursor` wait
/// in a heap; those at or above it are found by scanning forward, so an
/// almost topological order (a traced step, whose output `Identity` comes
/// before the `NoOp` it waits for) costs O(N + E + H log H) for the H nodes
/// that become ready behind the cursor.
fn kahn_min_id(g: &Graph) -> Result<Vec<u32>> {
    let n = g.num_nodes();
    let mut indeg: Vec<u32> = (0..n as u32)
        .map(|v| (g.inputs(v).len() + g.control_inputs(v).len()) as u32)
        .collect();
    let mut heap: BinaryHeap<Reverse<u32>> = BinaryHeap::new();
    let mut cursor = 0usize;
    let mut order = Vec::with_capacity(n);
    loop {
        while cursor < n && indeg[cursor] != 0 {
            cursor += 1;
        }
        let v = match heap.peek() {
            Some(&Reverse(h)) if (h as usize) < cursor || cursor == n => {
                heap.pop();
                h
            }
            _ if cursor < n => {
                cursor += 1;
                (cursor - 1) as u32
            }
            _ => break,
        };
        order.push(v);
        for &s in g.data_consumers(v).iter().chain(g.control_outputs(v)) {
            let d = &mut indeg[s as usize];
            *d -= 1;
            if *d == 0 && (s as usize) < cursor {
                heap.push(Reverse(s));
            }
        }
    }
    if order.len() < n {
        return Err(PlanError::Cycle {
            nodes: find_cycle(g, &indeg),
        });
    }
    Ok(order)
}

/// Walks predecessors among unscheduled nodes until one repeats.
/// Every unscheduled node has an unscheduled predecessor, so the walk closes.
fn find_cycle(g: &Graph, indeg: &[u32]) -> Vec<String> {
    let n = g.num_nodes();
    let start = (0..n).find(|&v| indeg[v] > 0).unwrap_or(0) as u32;
    let mut step = vec![u32::MAX; n];
    let mut path = Vec::new();
    let mut v = start;
    while step[v as usize] == u32::MAX {
        step[v as usize] = path.len() as u32;
        path.push(v);
        match g.predecessors(v).find(|&p| indeg[p as usize] > 0) {
            Some(p) => v = p,
            None => break,
        }
    }
    let from = step[v as usize].min(path.len() as u32) as usize;
    let mut cycle: Vec<String> = path[from..]
        .iter()
        .rev()
        .map(|&u| g.nodes[u as usize].name.to_string())
        .collect();
    if cycle.is_empty() {
        cycle.push(g.nodes[start as usize].name.to_string());
    }
    cycle
}
