//! Per-node and per-tensor facts of an analysed graph, for callers outside
//! the core (the Python package, experiments) that would otherwise keep
//! their own copies of the op table or of the liveness model.
//!
//! # The model
//! Every figure is read from the one place the planner reads it:
//! op facts from [`crate::opkind`], FLOPs from [`crate::cost::flops`],
//! scratch from the graph's workspace table ([`crate::workspace`]), the
//! flags the builder set (`never_clone`), and the buffers of
//! [`crate::liveness`] (owner, in-place forwarding, live interval). Nothing
//! here decides anything: a caller that weighs or explains with these
//! facts agrees with the planner by construction.
//!
//! # Complexity
//! O(N + E + T + D) for N nodes, E edges, T tensors, D shape dimensions.

use crate::graph::{NodeFlags, NONE};
use crate::opkind;
use crate::Analysis;

/// [`NodeFacts::aliased_input`] of an op whose output i aliases input i.
pub(crate) const EACH_INPUT: i32 = -2;

/// Facts of every node, indexed by node id (the GraphDef position).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct NodeFacts {
    /// FLOPs from shapes ([`crate::cost::flops`]).
    pub flops: Vec<f64>,
    /// The input slot whose buffer the output shares ([`opkind::aliased_input`]):
    /// -1 none, [`EACH_INPUT`] output i shares input i.
    pub aliased_input: Vec<i32>,
    /// The output an element-wise op may write into an input's buffer
    /// ([`opkind::forwards`]), -1 none; whether it does depends on the
    /// schedule (see [`TensorFacts::written_into`]).
    pub forward_output: Vec<i32>,
    /// The input slots it tries, in order: `start..end` (empty: none).
    pub forward_slots: Vec<(u32, u32)>,
    /// A collective communication op ([`opkind::is_collective`]).
    pub collective: Vec<bool>,
    /// Input 0 is a resource handle by the op's definition ([`opkind::takes_handle`]).
    pub takes_handle: Vec<bool>,
    /// Never recomputed: the op's kind (random, I/O, collective, source),
    /// a variable access, or no outputs (the builder's flag).
    pub never_clone: Vec<bool>,
    /// The kind of kernel ([`opkind::kernel_class`]).
    pub kernel_class: Vec<Option<&'static str>>,
    /// Scratch bytes held while the op runs, under the graph's workspace rule.
    pub workspace: Vec<u64>,
}

/// Facts of every tensor, indexed by tensor id; schedule positions are those
/// of the analysis's schedule.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TensorFacts {
    /// Producer node and output index.
    pub node: Vec<u32>,
    pub index: Vec<u32>,
    /// TensorFlow `DataType` code ([`crate::dtype::DType`]).
    pub dtype: Vec<u8>,
    /// Bytes its buffer holds on the device (0: an alias, a handle, a variable read).
    pub bytes: Vec<u64>,
    /// Bytes of its value, owned or not.
    pub value_bytes: Vec<u64>,
    /// The tensor owning its buffer (itself unless an alias).
    pub owner: Vec<u32>,
    /// For an owner written in place into another buffer, that buffer's
    /// owner; else `u32::MAX`.
    pub written_into: Vec<u32>,
    /// Position at which it is produced.
    pub produce: Vec<u32>,
    /// Last position at which it (or an alias) is read.
    pub last_use: Vec<u32>,
    /// Last position of its buffer (outputs written into it included).
    pub buffer_end: Vec<u32>,
}

/// What the op table says of one op type, without a graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpTypeFacts {
    pub collective: bool,
    pub takes_handle: bool,
    /// Never recomputed by its kind ([`opkind::never_recompute`]); a node
    /// may be kept from recomputation for more reasons ([`NodeFacts::never_clone`]).
    pub never_recompute: bool,
    pub kernel_class: Option<&'static str>,
}

/// [`OpTypeFacts`] of `op`. O(1).
pub fn op_type_facts(op: &str) -> OpTypeFacts {
    OpTypeFacts {
        collective: opkind::is_collective(op),
        takes_handle: opkind::takes_handle(op),
        never_recompute: opkind::never_recompute(op),
        kernel_class: opkind::kernel_class(op),
    }
}

/// The facts of every node of `a`.
pub fn node_facts(a: &Analysis) -> NodeFacts {
    let g = &a.graph;
    let n = g.num_nodes() as u32;
    let mut f = NodeFacts {
        flops: crate::cost::flops(g),
        ..NodeFacts::default()
    };
    for v in 0..n {
        let op = g.op_name(v);
        f.aliased_input.push(match opkind::aliased_input(op) {
            None => -1,
            Some(usize::MAX) => EACH_INPUT,
            Some(k) => k as i32,
        });
        let fwd = opkind::forwards(op);
        let n_in = g.inputs(v).len();
        f.forward_output.push(fwd.map_or(-1, |w| w.output() as i32));
        f.forward_slots.push(fwd.map_or((0, 0), |w| {
            let r = w.slots(n_in);
            (r.start as u32, r.end as u32)
        }));
        f.collective.push(opkind::is_collective(op));
        f.takes_handle.push(opkind::takes_handle(op));
        f.never_clone
            .push(g.nodes[v as usize].flags.has(NodeFlags::NO_RECOMPUTE));
        f.kernel_class.push(opkind::kernel_class(op));
        f.workspace.push(g.workspace_of(v));
    }
    f
}

/// The facts of every tensor of `a`.
pub fn tensor_facts(a: &Analysis) -> TensorFacts {
    let (g, l) = (&a.graph, &a.liveness);
    let t = &g.tensors;
    TensorFacts {
        node: t.iter().map(|x| x.node).collect(),
        index: t.iter().map(|x| x.index).collect(),
        dtype: t.iter().map(|x| x.dtype.0).collect(),
        bytes: t.iter().map(|x| x.bytes).collect(),
        value_bytes: t.iter().map(|x| x.value_bytes).collect(),
        owner: l.owner.clone(),
        written_into: l.written_into.clone(),
        produce: l.produce.clone(),
        last_use: l.last_use.clone(),
        buffer_end: l.buffer_end.clone(),
    }
}

/// Is `NONE` the marker of [`TensorFacts::written_into`]? (Kept equal.)
const _: () = assert!(NONE == u32::MAX);
