//! The compact graph model every phase works on.
//!
//! Nodes are numbered by their position in the `GraphDef` (so a node id is
//! also the index the Python rewrite uses). Tensors are numbered so that the
//! outputs of node `n` are `out_off[n]..out_off[n + 1]`. Data inputs,
//! control inputs and the consumers of each tensor are stored as CSR arrays.

use crate::dtype::DType;

/// Sentinel for "no such tensor / node".
pub const NONE: u32 = u32::MAX;

/// Phase of an op in the training step (see `phase.rs` for the rule).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum Phase {
    /// Ancestors of the loss: the forward pass and the loss itself.
    Forward = 0,
    /// Ops after the forward that compute gradients.
    Backward = 1,
    /// Variable writes and the ops that feed only them.
    Update = 2,
    /// Sources (placeholders, constants, variable handles) and unrelated ops.
    Other = 3,
}

impl Phase {
    pub fn name(self) -> &'static str {
        match self {
            Phase::Forward => "forward",
            Phase::Backward => "backward",
            Phase::Update => "update",
            Phase::Other => "other",
        }
    }
}

/// Per-node facts decided while building the graph.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NodeFlags(pub u8);

impl NodeFlags {
    /// Holds persistent state: a variable handle (resource placeholder,
    /// `VarHandleOp`). Its value's bytes count as persistent.
    pub const VARIABLE: u8 = 1;
    /// Must never be cloned: stateful, random, reads a variable, has side
    /// effects, collective, or control flow. See `build::never_recompute`.
    pub const NO_RECOMPUTE: u8 = 2;
    /// Calls a function or is control flow (`While`, `If`, `PartitionedCall`...).
    pub const CALLS_FUNCTION: u8 = 4;
    /// Writes a variable (takes a resource handle, returns nothing).
    pub const WRITES_VARIABLE: u8 = 8;
    /// Has no inputs at all (placeholder, constant, variable handle).
    pub const SOURCE: u8 = 16;

    pub fn has(self, f: u8) -> bool {
        self.0 & f != 0
    }
}

/// One op.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    pub name: Box<str>,
    /// Index into [`Graph::ops`].
    pub op: u32,
    /// Index into [`Graph::devices`].
    pub device: u32,
    pub flags: NodeFlags,
}

/// One output of one op.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Tensor {
    pub node: u32,
    pub index: u32,
    pub dtype: DType,
    /// Bytes on the device timeline (0 for handles and for aliases; see
    /// [`Tensor::alias_of`]).
    pub bytes: u64,
    /// Bytes of the value even where it is an alias (for reports and the
    /// cost model).
    pub value_bytes: u64,
    /// The tensor whose buffer this one shares (`Identity`, `Reshape`, ...),
    /// or [`NONE`]: the aliased input itself, not resolved through chains;
    /// [`crate::liveness::Liveness::owner`] gives the owning tensor.
    pub alias_of: u32,
    /// Offset of the shape in [`Graph::dims`].
    pub shape_off: u32,
    pub rank: u8,
}

/// The training-step graph.
#[derive(Debug, Clone, Default)]
pub struct Graph {
    pub nodes: Vec<Node>,
    pub tensors: Vec<Tensor>,
    /// Distinct op type names.
    pub ops: Vec<Box<str>>,
    /// Distinct device strings (index 0 is the empty device).
    pub devices: Vec<Box<str>>,
    /// All tensor dimensions, concatenated.
    pub dims: Vec<i64>,
    /// Outputs of node n: tensors `out_off[n]..out_off[n+1]`.
    pub out_off: Vec<u32>,
    /// Data inputs of node n: `in_tensor[in_off[n]..in_off[n+1]]`, in slot order.
    pub in_off: Vec<u32>,
    pub in_tensor: Vec<u32>,
    /// Control inputs of node n: `ctl_src[ctl_off[n]..ctl_off[n+1]]`.
    pub ctl_off: Vec<u32>,
    pub ctl_src: Vec<u32>,
    /// Consumers of tensor t: `(cons_node, cons_slot)[cons_off[t]..cons_off[t+1]]`,
    /// sorted by node id then slot.
    pub cons_off: Vec<u32>,
    pub cons_node: Vec<u32>,
    pub cons_slot: Vec<u32>,
    /// Control consumers of node n: `ctl_dst[ctl_dst_off[n]..]`.
    pub ctl_dst_off: Vec<u32>,
    pub ctl_dst: Vec<u32>,
    /// Phase of every node.
    pub phase: Vec<Phase>,
    /// The loss tensor the phases were derived from.
    pub loss: u32,
    /// Bytes held by variables and optimizer slots on the device.
    pub persistent_bytes: u64,
}

impl Graph {
    pub fn num_nodes(&self) -> usize {
        self.nodes.len()
    }

    pub fn num_tensors(&self) -> usize {
        self.tensors.len()
    }

    pub fn op_name(&self, n: u32) -> &str {
        &self.ops[self.nodes[n as usize].op as usize]
    }

    pub fn outputs(&self, n: u32) -> std::ops::Range<u32> {
        self.out_off[n as usize]..self.out_off[n as usize + 1]
    }

    pub fn inputs(&self, n: u32) -> &[u32] {
        &self.in_tensor[self.in_off[n as usize] as usize..self.in_off[n as usize + 1] as usize]
    }

    pub fn control_inputs(&self, n: u32) -> &[u32] {
        &self.ctl_src[self.ctl_off[n as usize] as usize..self.ctl_off[n as usize + 1] as usize]
    }

    pub fn control_outputs(&self, n: u32) -> &[u32] {
        &self.ctl_dst
            [self.ctl_dst_off[n as usize] as usize..self.ctl_dst_off[n as usize + 1] as usize]
    }

    pub fn consumers(&self, t: u32) -> &[u32] {
        &self.cons_node[self.cons_off[t as usize] as usize..self.cons_off[t as usize + 1] as usize]
    }

    pub fn consumer_slots(&self, t: u32) -> &[u32] {
        &self.cons_slot[self.cons_off[t as usize] as usize..self.cons_off[t as usize + 1] as usize]
    }

    pub fn shape(&self, t: u32) -> &[i64] {
        let tt = &self.tensors[t as usize];
        &self.dims[tt.shape_off as usize..tt.shape_off as usize + tt.rank as usize]
    }

    /// `node:index` name of a tensor, as TensorFlow writes it.
    pub fn tensor_name(&self, t: u32) -> String {
        let tt = &self.tensors[t as usize];
        format!("{}:{}", self.nodes[tt.node as usize].name, tt.index)
    }

    /// Number of elements of a tensor.
    pub fn elements(&self, t: u32) -> u64 {
        self.shape(t)
            .iter()
            .fold(1u64, |a, &d| a.saturating_mul(d.max(0) as u64))
    }

    /// Nodes whose data or control inputs include `n` (each consumer once per
    /// edge; control consumers after data consumers).
    pub fn successors(&self, n: u32) -> impl Iterator<Item = u32> + '_ {
        self.outputs(n)
            .flat_map(move |t| self.consumers(t).iter().copied())
            .chain(self.control_outputs(n).iter().copied())
    }

    /// Producers of the data and control inputs of `n`.
    pub fn predecessors(&self, n: u32) -> impl Iterator<Item = u32> + '_ {
        self.inputs(n)
            .iter()
            .map(move |&t| self.tensors[t as usize].node)
            .chain(self.control_inputs(n).iter().copied())
    }
}
