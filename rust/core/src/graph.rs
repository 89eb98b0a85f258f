//! The compact graph model every phase works on.
//!
//! Nodes are numbered by their position in the `GraphDef` (so a node id is
//! also the index the Python rewrite uses). Tensors are numbered so that the
//! outputs of node `n` are `out_off[n]..out_off[n + 1]`. Data inputs,
//! control inputs and the consumers of each tensor are stored as CSR arrays.

use std::borrow::Borrow;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::ops::Deref;
use std::sync::Arc;

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
    pub(crate) const VARIABLE: u8 = 1;
    /// Must never be cloned: stateful, random, reads a variable, has side
    /// effects, collective, or control flow. See `build::never_recompute`.
    pub const NO_RECOMPUTE: u8 = 2;
    /// Calls a function or is control flow (`While`, `If`, `PartitionedCall`...).
    pub(crate) const CALLS_FUNCTION: u8 = 4;
    /// Writes a variable (takes a resource handle, returns nothing).
    pub(crate) const WRITES_VARIABLE: u8 = 8;
    /// Has no inputs at all (placeholder, constant, variable handle).
    pub const SOURCE: u8 = 16;
    /// Neither the loss nor a variable write depends on it, and it is no
    /// source (`dead.rs`). Never a trigger.
    pub(crate) const DEAD: u8 = 32;
    /// Control flow whose body's memory the caller stated
    /// ([`crate::body::BodyMemory`]): planned as one op of the schedule.
    pub(crate) const BODY_KNOWN: u8 = 64;

    pub fn has(self, f: u8) -> bool {
        self.0 & f != 0
    }
}

/// A node's name, which reads as a `&str` (it derefs to `str`, and
/// compares, orders, hashes and prints as one).
///
/// The names of a built graph are slices of one buffer they share, so a
/// graph of N nodes holds one allocation for its names, not N; cloning a
/// name shares the buffer.
///
/// ```
/// use hybridplan_core::graph::Name;
/// let n = Name::new("dense/MatMul");
/// assert!(n.starts_with("dense/"));
/// assert_eq!(n, "dense/MatMul");
/// assert_eq!(format!("{n}"), "dense/MatMul");
/// ```
#[derive(Clone)]
pub struct Name {
    buf: Arc<String>,
    start: u32,
    /// [`WHOLE`]: the name is all of `buf`.
    end: u32,
}

/// [`Name::end`] of a name that is its whole buffer.
const WHOLE: u32 = u32::MAX;

impl Name {
    /// A name with a buffer of its own.
    pub fn new(s: &str) -> Name {
        Name {
            buf: Arc::new(s.to_owned()),
            start: 0,
            end: WHOLE,
        }
    }

    /// The names `buf[ends[i - 1]..ends[i]]` (the first from 0), sharing
    /// `buf` (a name past the first 4 GiB gets a buffer of its own). `ends`
    /// must be ascending char boundaries of `buf`; a range that is not
    /// reads as an empty name.
    pub(crate) fn split(
        buf: Arc<String>,
        ends: impl IntoIterator<Item = usize>,
    ) -> impl Iterator<Item = Name> {
        ends.into_iter().scan(0, move |start, end| {
            let range = (*start, end);
            *start = end;
            Some(match (u32::try_from(range.0), u32::try_from(range.1)) {
                (Ok(start), Ok(end)) if end != WHOLE => Name {
                    buf: Arc::clone(&buf),
                    start,
                    end,
                },
                _ => Name::new(buf.get(range.0..range.1).unwrap_or_default()),
            })
        })
    }

    /// The name as a string slice.
    pub(crate) fn as_str(&self) -> &str {
        if self.end == WHOLE {
            return &self.buf;
        }
        self.buf
            .get(self.start as usize..self.end as usize)
            .unwrap_or_default()
    }
}

impl Deref for Name {
    type Target = str;

    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl AsRef<str> for Name {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl PartialEq for Name {
    fn eq(&self, other: &Name) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for Name {}

impl PartialEq<str> for Name {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for Name {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl PartialOrd for Name {
    fn partial_cmp(&self, other: &Name) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Name {
    fn cmp(&self, other: &Name) -> std::cmp::Ordering {
        self.as_str().cmp(other.as_str())
    }
}

impl Hash for Name {
    fn hash<H: Hasher>(&self, h: &mut H) {
        self.as_str().hash(h);
    }
}

impl Borrow<str> for Name {
    fn borrow(&self) -> &str {
        self.as_str()
    }
}

/// The name as an owned `String`, copied as a `str` (`to_string` would go
/// through `Display` and the formatting machinery: one per swap in a report).
impl From<&Name> for String {
    fn from(n: &Name) -> String {
        n.as_str().to_owned()
    }
}

impl From<&str> for Name {
    fn from(s: &str) -> Name {
        Name::new(s)
    }
}

impl fmt::Display for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self.as_str(), f)
    }
}

impl fmt::Debug for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

/// A vector with room for `n` items whose buffer, when it spans a few
/// megabytes, the kernel is asked to back with huge pages (Linux
/// `madvise(MADV_HUGEPAGE)`; elsewhere, or where the system lends none, an
/// ordinary vector). The arrays of a graph of 10^6 nodes take hundreds of
/// megabytes, written once: in 4 KiB pages that is some 50,000 page faults
/// per analysis (a fifth of its time, and the part that grows most when
/// other processes fault too), and the random reads of the later phases
/// miss the TLB. Nothing is touched here.
///
/// # Complexity
/// O(1) (one system call).
pub(crate) fn big_vec<T>(n: usize) -> Vec<T> {
    let v: Vec<T> = Vec::with_capacity(n);
    huge_pages::advise(v.as_ptr().cast(), v.capacity() * std::mem::size_of::<T>());
    v
}

/// [`big_vec`] holding `n` copies of `x`.
pub(crate) fn big_vec_of<T: Clone>(n: usize, x: T) -> Vec<T> {
    let mut v = big_vec(n);
    v.resize(n, x);
    v
}

#[cfg(target_os = "linux")]
mod huge_pages {
    use std::ffi::{c_int, c_void};

    extern "C" {
        fn madvise(addr: *mut c_void, len: usize, advice: c_int) -> c_int;
    }

    const MADV_HUGEPAGE: c_int = 14;
    const HUGE: usize = 2 << 20;

    /// Advises the whole huge pages inside `len` bytes from `ptr`, if at
    /// least two; the advice is only advice: its failure changes nothing.
    pub(super) fn advise(ptr: *const u8, len: usize) {
        let start = (ptr as usize).next_multiple_of(HUGE);
        let end = (ptr as usize).saturating_add(len) / HUGE * HUGE;
        if end >= start + 2 * HUGE {
            // SAFETY: the range lies inside a live allocation of this
            // process; MADV_HUGEPAGE changes how its pages are backed,
            // never their contents.
            unsafe {
                madvise(start as *mut c_void, end - start, MADV_HUGEPAGE);
            }
        }
    }
}

#[cfg(not(target_os = "linux"))]
mod huge_pages {
    pub(super) fn advise(_: *const u8, _: usize) {}
}

/// One op.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    /// The node's name (reads as a `&str`); also [`Graph::node_name`].
    pub name: Name,
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
#[derive(Debug, Clone, Default, PartialEq)]
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
    /// Consumers of tensor t: `cons_node[cons_off[t]..cons_off[t+1]]`,
    /// sorted by node id then input slot.
    pub cons_off: Vec<u32>,
    pub cons_node: Vec<u32>,
    /// Control consumers of node n: `ctl_dst[ctl_dst_off[n]..]`.
    pub ctl_dst_off: Vec<u32>,
    pub ctl_dst: Vec<u32>,
    /// Phase of every node.
    pub phase: Vec<Phase>,
    /// The loss tensor the phases were derived from.
    pub loss: u32,
    /// Bytes held by variables and optimizer slots on the device.
    pub persistent_bytes: u64,
    /// No in-place forwarding: every output in a buffer of its own
    /// ([`crate::build::BuildOptions::separate_buffers`]).
    pub separate_buffers: bool,
    /// Scratch bytes each node holds while it runs, on top of its inputs
    /// and outputs ([`crate::workspace`]); empty when no node has any.
    pub workspace: Vec<u64>,
    /// Loop accumulators the planner may keep on the host, largest first
    /// ([`crate::hosting`]); empty for most graphs.
    pub hostable: Vec<crate::hosting::Hostable>,
}

impl Graph {
    /// Scratch bytes node `v` holds while it runs (0 without workspace).
    #[inline]
    pub fn workspace_of(&self, v: u32) -> u64 {
        self.workspace.get(v as usize).copied().unwrap_or(0)
    }

    pub fn num_nodes(&self) -> usize {
        self.nodes.len()
    }

    pub fn num_tensors(&self) -> usize {
        self.tensors.len()
    }

    /// The name of node `n`.
    pub(crate) fn node_name(&self, n: u32) -> &str {
        &self.nodes[n as usize].name
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

    pub(crate) fn control_outputs(&self, n: u32) -> &[u32] {
        &self.ctl_dst
            [self.ctl_dst_off[n as usize] as usize..self.ctl_dst_off[n as usize + 1] as usize]
    }

    pub fn consumers(&self, t: u32) -> &[u32] {
        &self.cons_node[self.cons_off[t as usize] as usize..self.cons_off[t as usize + 1] as usize]
    }

    /// The data consumers of all outputs of node `n`, once per edge: one
    /// run of `cons_node`, as the outputs are consecutive tensors.
    pub(crate) fn data_consumers(&self, n: u32) -> &[u32] {
        let (lo, hi) = (self.out_off[n as usize], self.out_off[n as usize + 1]);
        &self.cons_node[self.cons_off[lo as usize] as usize..self.cons_off[hi as usize] as usize]
    }

    pub fn shape(&self, t: u32) -> &[i64] {
        let tt = &self.tensors[t as usize];
        &self.dims[tt.shape_off as usize..tt.shape_off as usize + tt.rank as usize]
    }

    /// `node:index` name of a tensor, as TensorFlow writes it.
    pub fn tensor_name(&self, t: u32) -> String {
        let tt = &self.tensors[t as usize];
        let name: &str = &self.nodes[tt.node as usize].name;
        let mut s = String::with_capacity(name.len() + 11);
        s.push_str(name);
        s.push(':');
        push_decimal(&mut s, u64::from(tt.index));
        s
    }

    /// Number of elements of a tensor.
    pub(crate) fn elements(&self, t: u32) -> u64 {
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

/// Appends `v` in decimal, as `Display` writes it, without the formatting
/// machinery (names of every swap are made per plan: `schema.rs`).
pub(crate) fn push_decimal(s: &mut String, mut v: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    s.extend(digits[i..].iter().map(|&d| char::from(d)));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_split_from_one_buffer_read_as_their_slices() {
        let buf = Arc::new("abcdefg".to_string());
        let names: Vec<Name> = Name::split(Arc::clone(&buf), [1, 3, 3, 7]).collect();
        let strs: Vec<&str> = names.iter().map(|n| n.as_str()).collect();
        assert_eq!(strs, ["a", "bc", "", "defg"]);
        assert_eq!(Arc::strong_count(&buf), 5);
        assert_eq!(names[1], Name::new("bc"));
        assert_eq!(format!("{:?}", names[3]), "\"defg\"");
        assert!(names[0] < names[1]);
        // Out-of-range ends read as empty names rather than panic.
        let bad: Vec<Name> = Name::split(buf, [9]).collect();
        assert_eq!(bad[0], "");
    }

    #[test]
    fn decimals_read_as_display_writes_them() {
        let mut values = vec![
            0,
            1,
            9,
            10,
            99,
            100,
            65_535,
            1 << 32,
            u64::MAX - 1,
            u64::MAX,
        ];
        values.extend((0..64).map(|k| 1u64 << k));
        values.extend((1..20).map(|k| 10u64.pow(k) - 1));
        for v in values {
            let mut s = String::from("x:");
            push_decimal(&mut s, v);
            assert_eq!(s, format!("x:{v}"));
        }
    }
}
