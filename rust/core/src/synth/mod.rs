//! Synthetic training-step `GraphDef`s for tests and benchmarks.
//!
//! The graphs are shaped like what TensorFlow 2.21 writes for a traced
//! Keras 3 train step (`tf.function` of the forward pass, `tape.gradient`
//! and SGD-momentum `apply_gradients`, exported with `add_shapes=True`):
//!
//! - `Placeholder`s `x` and `y` (int32 labels); every variable a resource
//!   `Placeholder` read by a `ReadVariableOp`;
//! - a stem (3x3 `Conv2D`, or a dense projection of the tokens), `blocks`
//!   residual bottleneck or transformer blocks, a global average pool, a
//!   dense head and a sparse softmax cross entropy reduced to the scalar loss
//!   `sparse_categorical_crossentropy/div_no_nan`; batch-norm-like layers
//!   update their moving averages;
//! - the gradient seed `Const` `ones` (not data-connected to the loss), the
//!   gradient ops under `gradient_tape/` in reverse layer order, reading the
//!   forward tensors they need, and `AddN` where gradients meet;
//! - per trainable variable the Keras 3 SGD-momentum update under `sgd/`
//!   (plain SGD for [`SynthKind::Narrow`]), then the iteration counter;
//! - `Identity(loss, ^NoOp)` followed by the `NoOp` with control inputs from
//!   every variable read and write (TensorFlow lists the `Identity` first, so
//!   the node order is topological except there).
//!
//! Every node carries `_output_shapes`, its dtype attributes and the
//! attributes its op requires, so TensorFlow itself can import the graph.
//!
//! # Complexity
//! O(N) time and memory for N nodes; no per-node allocation except the
//! amortised growth of the output buffers.

use crate::dtype::DType;
use crate::wire::{Writer, FIXED32, LEN};

mod narrow;

use narrow::NarrowRec;

/// The kind of block the synthetic model stacks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SynthKind {
    /// ResNet bottleneck blocks on `[batch, size, size, channels]` maps.
    Residual,
    /// Transformer blocks on `[batch * size, channels]` tokens.
    Transformer,
    /// Residual and transformer blocks alternating, starting with a residual
    /// one (the transformer blocks attend over the `size * size` positions).
    Mixed,
    /// Random layered DAGs of dense layers on `[batch * size, channels]`
    /// tokens, the topology stress of the rematerialisation literature
    /// (MOCCASIN's and Checkmate's random graphs): each block has
    /// `DAG_LAYERS` layers of `DAG_WIDTH` nodes; a node is `Relu(BiasAdd(
    /// MatMul(x)))` of one earlier node or of the sum of two, picked from the
    /// two layers before it by a generator seeded with the block's index (so
    /// the graph is deterministic). Nodes nobody reads, and the block's
    /// input, are summed into the block's output.
    Dag,
    /// Deep, narrow residual blocks (`narrow.rs`): per block one 3x3
    /// `Conv2D`, a fused batch norm (`FusedBatchNormV3` writing its moving
    /// averages back), `Relu` and the residual `AddV2`, on `[batch, size,
    /// size, channels]` maps: many small activations of one size, so a
    /// budget below the peak takes thousands of decisions.
    Narrow,
}

impl SynthKind {
    /// Every kind, in the order benchmarks list them.
    pub const ALL: [SynthKind; 5] = [
        SynthKind::Residual,
        SynthKind::Transformer,
        SynthKind::Mixed,
        SynthKind::Dag,
        SynthKind::Narrow,
    ];

    /// The name the Python API and the examples use (`"residual"`, ...).
    pub fn name(self) -> &'static str {
        match self {
            SynthKind::Residual => "residual",
            SynthKind::Transformer => "transformer",
            SynthKind::Mixed => "mixed",
            SynthKind::Dag => "dag",
            SynthKind::Narrow => "narrow",
        }
    }

    /// The kind named `name` (see [`SynthKind::name`]), or `None`.
    pub fn from_name(name: &str) -> Option<SynthKind> {
        SynthKind::ALL.into_iter().find(|k| k.name() == name)
    }
}

/// Layers and nodes per layer of a [`SynthKind::Dag`] block.
pub const DAG_LAYERS: usize = 4;
pub const DAG_WIDTH: usize = 3;

/// What to generate. Sizes below 1 are read as 1; a dtype that is not
/// `float32`, `float64`, `float16` or `bfloat16` is read as `float32`.
#[derive(Debug, Clone, PartialEq)]
pub struct SynthSpec {
    pub kind: SynthKind,
    /// Number of residual or transformer blocks (0 is allowed).
    pub blocks: usize,
    pub batch: i64,
    /// Spatial side (residual) or sequence length (transformer).
    pub size: i64,
    /// Channels (residual) or model width (transformer).
    pub channels: i64,
    /// Floating-point type of activations and weights.
    pub dtype: DType,
}

impl Default for SynthSpec {
    fn default() -> Self {
        SynthSpec {
            kind: SynthKind::Residual,
            blocks: 4,
            batch: 8,
            size: 32,
            channels: 64,
            dtype: DType::FLOAT,
        }
    }
}

/// Serialized `GraphDef` of the train step described by `spec`.
///
/// # Complexity
/// O(N) for N = [`node_count`]`(spec)` nodes.
pub fn graphdef(spec: &SynthSpec) -> Vec<u8> {
    let mut g = Gen::new(spec, false);
    g.train_step();
    g.out.buf
}

/// Largest `nodes` [`checked_graphdef`] accepts: about 2 GB of GraphDef.
pub const MAX_NODES: usize = 10_000_000;
/// Largest batch, size or channels [`checked_graphdef`] accepts.
pub const MAX_DIM: i64 = 1 << 20;

impl std::str::FromStr for SynthKind {
    type Err = crate::PlanError;
    fn from_str(s: &str) -> crate::Result<Self> {
        SynthKind::from_name(s).ok_or_else(|| {
            let names: Vec<&str> = SynthKind::ALL.iter().map(|k| k.name()).collect();
            crate::PlanError::InvalidArgument(format!(
                "unknown synthetic kind '{s}': use one of {}",
                names.join(", ")
            ))
        })
    }
}

/// [`graphdef`] of about `nodes` nodes of `kind`, with every argument checked
/// instead of clamped: `nodes` in `1..=MAX_NODES` (a larger graph would not fit
/// in memory, and an allocation failure aborts the process instead of
/// unwinding), `batch`, `size`, `channels` in `1..=MAX_DIM`.
///
/// # Errors
/// [`crate::PlanError::InvalidArgument`] naming the argument out of range.
///
/// # Complexity
/// O(nodes).
pub fn checked_graphdef(
    kind: &str,
    nodes: usize,
    batch: i64,
    size: i64,
    channels: i64,
) -> crate::Result<Vec<u8>> {
    let kind: SynthKind = kind.parse()?;
    if !(1..=MAX_NODES).contains(&nodes) {
        return Err(crate::PlanError::InvalidArgument(format!(
            "nodes must be from 1 to {MAX_NODES}, got {nodes}"
        )));
    }
    for (what, v) in [("batch", batch), ("size", size), ("channels", channels)] {
        if !(1..=MAX_DIM).contains(&v) {
            return Err(crate::PlanError::InvalidArgument(format!(
                "{what} must be from 1 to {MAX_DIM}, got {v}"
            )));
        }
    }
    Ok(graphdef(&SynthSpec {
        kind,
        blocks: blocks_for_nodes(kind, nodes),
        batch,
        size,
        channels,
        ..SynthSpec::default()
    }))
}

/// [`graphdef`] with the kind forced to [`SynthKind::Residual`].
pub fn residual_graphdef(spec: &SynthSpec) -> Vec<u8> {
    graphdef(&SynthSpec {
        kind: SynthKind::Residual,
        ..spec.clone()
    })
}

/// Number of nodes [`graphdef`] writes for `spec` (a dry run: O(N) time,
/// nothing written).
pub fn node_count(spec: &SynthSpec) -> usize {
    let mut g = Gen::new(spec, true);
    g.train_step();
    g.count as usize
}

/// The number of blocks (at least 1) that gives about `target_nodes` nodes
/// (within one block's worth, a few hundred nodes). The count of nodes does
/// not depend on the sizes of a spec, only on its kind and number of blocks.
///
/// # Complexity
/// O(1): two dry runs of at most two blocks.
pub fn blocks_for_nodes(kind: SynthKind, target_nodes: usize) -> usize {
    let count = |blocks| {
        node_count(&SynthSpec {
            kind,
            blocks,
            ..SynthSpec::default()
        })
    };
    let (base, two) = (count(0), count(2));
    let per_block = (two - base) as f64 / 2.0;
    let blocks = (target_nodes.saturating_sub(base) as f64 / per_block).round();
    blocks.max(1.0) as usize
}

// ---------------------------------------------------------------------------
// Shapes, tensor references, names, attributes.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Shp {
    d: [i64; 4],
    r: u8,
}

impl Shp {
    const SCALAR: Shp = Shp { d: [0; 4], r: 0 };

    fn new(dims: &[i64]) -> Shp {
        let mut d = [0; 4];
        d[..dims.len()].copy_from_slice(dims);
        Shp {
            d,
            r: dims.len() as u8,
        }
    }

    fn dims(&self) -> &[i64] {
        &self.d[..self.r as usize]
    }

    fn last(&self) -> i64 {
        self.d[self.r as usize - 1]
    }

    fn with_last(mut self, c: i64) -> Shp {
        self.d[self.r as usize - 1] = c;
        self
    }

    /// The shape with `axes` reduced to 1 (`keep_dims`).
    fn keep(mut self, axes: &[i64]) -> Shp {
        for &a in axes {
            self.d[a as usize] = 1;
        }
        self
    }
}

fn s1(a: i64) -> Shp {
    Shp::new(&[a])
}

fn s2(a: i64, b: i64) -> Shp {
    Shp::new(&[a, b])
}

fn s4(a: i64, b: i64, c: i64, d: i64) -> Shp {
    Shp::new(&[a, b, c, d])
}

/// Output `idx` of node `node` (an internal id: the position in the output).
#[derive(Debug, Clone, Copy)]
struct T {
    node: u32,
    idx: u32,
    s: Shp,
}

/// A node name below the current scope: `pre`, `_k` when `k > 0`, `post`.
#[derive(Debug, Clone, Copy)]
struct Nm<'a>(&'a str, usize, &'a str);

impl<'a> From<&'a str> for Nm<'a> {
    fn from(s: &'a str) -> Self {
        Nm(s, 0, "")
    }
}

/// A constant tensor's values.
#[derive(Debug, Clone, Copy)]
enum Val<'a> {
    Ints(&'a [i64]),
    Float(f64),
}

/// An attribute. `T` is the type attribute set to the spec's float dtype.
#[derive(Debug, Clone, Copy)]
enum A<'a> {
    T,
    Type(&'a str, DType),
    Types(&'a str, DType, usize),
    Bool(&'a str, bool),
    Float(&'a str, f32),
    Int(&'a str, i64),
    Ints(&'a str, &'a [i64]),
    Str(&'a str, &'a str),
    Shape(&'a str, Shp),
    Value(DType, Shp, Val<'a>),
}

const I32: DType = DType::INT32;
const I64: DType = DType::INT64;
const CONV: &[A<'static>] = &[
    A::T,
    A::Ints("strides", &[1, 1, 1, 1]),
    A::Str("padding", "SAME"),
    A::Str("data_format", "NHWC"),
    A::Ints("dilations", &[1, 1, 1, 1]),
];
const BIAS: &[A<'static>] = &[A::T, A::Str("data_format", "NHWC")];
const KEEP: &[A<'static>] = &[A::T, A::Type("Tidx", I32), A::Bool("keep_dims", true)];
const DROP: &[A<'static>] = &[A::T, A::Type("Tidx", I32), A::Bool("keep_dims", false)];
const MM_NN: &[A<'static>] = &[
    A::T,
    A::Bool("transpose_a", false),
    A::Bool("transpose_b", false),
];
const MM_NT: &[A<'static>] = &[
    A::T,
    A::Bool("transpose_a", false),
    A::Bool("transpose_b", true),
];
const MM_TN: &[A<'static>] = &[
    A::T,
    A::Bool("transpose_a", true),
    A::Bool("transpose_b", false),
];
const BMM_NN: &[A<'static>] = &[A::T, A::Bool("adj_x", false), A::Bool("adj_y", false)];
const BMM_NT: &[A<'static>] = &[A::T, A::Bool("adj_x", false), A::Bool("adj_y", true)];
const BMM_TN: &[A<'static>] = &[A::T, A::Bool("adj_x", true), A::Bool("adj_y", false)];
const TRANSPOSE: &[A<'static>] = &[A::T, A::Type("Tperm", I32)];
const HEADS_PERM: &[i64] = &[0, 2, 1, 3];
const CLASSES: i64 = 10;

// ---------------------------------------------------------------------------
// The writer.

#[derive(Debug, Clone)]
struct VarRef {
    handle: T,
    read: T,
    /// Index in `Gen::vars` (`usize::MAX` for a non-trainable variable).
    idx: usize,
}

struct Var {
    handle: T,
    read: T,
    grad: Option<T>,
}

struct Gen {
    dry: bool,
    f: DType,
    batch: i64,
    size: i64,
    channels: i64,
    kind: SynthKind,
    blocks: usize,
    count: u32,
    out: Writer,
    /// Scratch for one `NodeDef`, one `AttrValue` and one nested message.
    nb: Writer,
    ab: Writer,
    lb: Writer,
    /// All node names, concatenated; name i ends at `ends[i]`.
    names: String,
    ends: Vec<usize>,
    scope: String,
    vars: Vec<Var>,
    /// Variable reads and writes: control inputs of the final `NoOp`.
    stateful: Vec<u32>,
    addn: usize,
}

impl Gen {
    fn new(spec: &SynthSpec, dry: bool) -> Gen {
        let f = match spec.dtype {
            DType::FLOAT | DType::DOUBLE | DType::HALF | DType::BFLOAT16 => spec.dtype,
            _ => DType::FLOAT,
        };
        Gen {
            dry,
            f,
            batch: spec.batch.max(1),
            size: spec.size.max(1),
            channels: spec.channels.max(1),
            kind: spec.kind,
            blocks: spec.blocks,
            count: 0,
            out: Writer::default(),
            nb: Writer::default(),
            ab: Writer::default(),
            lb: Writer::default(),
            names: String::new(),
            ends: Vec::new(),
            scope: String::new(),
            vars: Vec::new(),
            stateful: Vec::new(),
            addn: 0,
        }
    }

    fn set_scope(&mut self, parts: &[&str]) {
        self.scope.clear();
        for (i, p) in parts.iter().enumerate() {
            if i > 0 {
                self.scope.push('/');
            }
            self.scope.push_str(p);
        }
    }

    fn name_of(&self, node: u32) -> &str {
        let n = node as usize;
        let start = if n == 0 { 0 } else { self.ends[n - 1] };
        &self.names[start..self.ends[n]]
    }

    /// Writes one `NodeDef` and returns its id.
    fn op<'a>(
        &mut self,
        name: impl Into<Nm<'a>>,
        op: &str,
        ins: &[T],
        ctl: &[u32],
        outs: &[Shp],
        attrs: &[A],
    ) -> u32 {
        let id = self.count;
        self.count += 1;
        if self.dry {
            return id;
        }
        let start = self.names.len();
        push_name(&mut self.names, &self.scope, name.into());
        self.ends.push(self.names.len());
        let mut nb = std::mem::take(&mut self.nb);
        nb.buf.clear();
        nb.bytes_field(1, &self.names.as_bytes()[start..]);
        nb.bytes_field(2, op.as_bytes());
        for t in ins {
            put_input(&mut nb, "", self.name_of(t.node), t.idx);
        }
        for &c in ctl {
            put_input(&mut nb, "^", self.name_of(c), 0);
        }
        for a in attrs {
            let key = put_attr(&mut self.ab, &mut self.lb, self.f, a);
            put_entry(&mut nb, key, &self.ab.buf);
        }
        self.lb.buf.clear();
        for s in outs {
            put_shape(&mut self.lb, 7, s);
        }
        self.ab.buf.clear();
        self.ab.bytes_field(1, &self.lb.buf);
        put_entry(&mut nb, "_output_shapes", &self.ab.buf);
        self.out.bytes_field(1, &nb.buf);
        self.nb = nb;
        id
    }

    /// One output of the float type.
    fn f1<'a>(&mut self, name: impl Into<Nm<'a>>, op: &str, ins: &[T], s: Shp) -> T {
        self.f1a(name, op, ins, s, &[A::T])
    }

    fn f1a<'a>(&mut self, name: impl Into<Nm<'a>>, op: &str, ins: &[T], s: Shp, a: &[A]) -> T {
        let node = self.op(name, op, ins, &[], &[s], a);
        T { node, idx: 0, s }
    }

    fn placeholder<'a>(&mut self, name: impl Into<Nm<'a>>, dt: DType, s: Shp) -> T {
        let a = [A::Type("dtype", dt), A::Shape("shape", s)];
        let node = self.op(name, "Placeholder", &[], &[], &[s], &a);
        T { node, idx: 0, s }
    }

    fn read<'a>(&mut self, name: impl Into<Nm<'a>>, h: T, s: Shp, dt: DType, ctl: &[u32]) -> T {
        let node = self.op(
            name,
            "ReadVariableOp",
            &[h],
            ctl,
            &[s],
            &[A::Type("dtype", dt)],
        );
        self.stateful.push(node);
        T { node, idx: 0, s }
    }

    fn var(&mut self, leaf: &str, s: Shp, trainable: bool) -> VarRef {
        let handle = self.placeholder(
            Nm(leaf, 0, "/ReadVariableOp/resource"),
            DType::RESOURCE,
            Shp::SCALAR,
        );
        let read = self.read(Nm(leaf, 0, "/ReadVariableOp"), handle, s, self.f, &[]);
        let mut idx = usize::MAX;
        if trainable {
            idx = self.vars.len();
            self.vars.push(Var {
                handle,
                read,
                grad: None,
            });
        }
        VarRef { handle, read, idx }
    }

    fn set_grad(&mut self, v: &VarRef, g: T) {
        if let Some(var) = self.vars.get_mut(v.idx) {
            var.grad = Some(g);
        }
    }

    fn cint<'a>(&mut self, name: impl Into<Nm<'a>>, vals: &[i64]) -> T {
        let s = s1(vals.len() as i64);
        let a = [A::Type("dtype", I32), A::Value(I32, s, Val::Ints(vals))];
        let node = self.op(name, "Const", &[], &[], &[s], &a);
        T { node, idx: 0, s }
    }

    fn cscalar<'a>(&mut self, name: impl Into<Nm<'a>>, dt: DType, v: Val) -> T {
        let s = Shp::SCALAR;
        let a = [A::Type("dtype", dt), A::Value(dt, s, v)];
        let node = self.op(name, "Const", &[], &[], &[s], &a);
        T { node, idx: 0, s }
    }

    fn cfloat<'a>(&mut self, name: impl Into<Nm<'a>>, v: f64) -> T {
        self.cscalar(name, self.f, Val::Float(v))
    }

    fn reshape<'a>(&mut self, name: impl Into<Nm<'a>>, t: T, s: Shp) -> T {
        let name = name.into();
        let shape = self.cint(Nm(name.0, name.1, "/shape"), s.dims());
        self.f1a(
            name,
            "Reshape",
            &[t, shape],
            s,
            &[A::T, A::Type("Tshape", I32)],
        )
    }

    /// `AddN` at the top level (`AddN`, `AddN_1`, ...), as TensorFlow names it.
    fn addn(&mut self, ins: &[T]) -> T {
        let scope = std::mem::take(&mut self.scope);
        let k = self.addn;
        self.addn += 1;
        let a = [A::Int("N", ins.len() as i64), A::T];
        let t = self.f1a(Nm("AddN", k, ""), "AddN", ins, ins[0].s, &a);
        self.scope = scope;
        t
    }
}

fn push_name(names: &mut String, scope: &str, n: Nm) {
    if !scope.is_empty() {
        names.push_str(scope);
        names.push('/');
    }
    names.push_str(n.0);
    if n.1 > 0 {
        names.push('_');
        push_num(names, n.1 as u64);
    }
    names.push_str(n.2);
}

fn push_num(s: &mut String, mut v: u64) {
    let mut buf = [0u8; 20];
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    for &b in &buf[i..] {
        s.push(b as char);
    }
}

fn vlen(v: u64) -> usize {
    (64 - (v | 1).leading_zeros() as usize).div_ceil(7)
}

fn field_len(payload: usize) -> usize {
    1 + vlen(payload as u64) + payload
}

/// Writes an input reference: `name`, `name:idx` or `^name`.
fn put_input(nb: &mut Writer, pre: &str, name: &str, idx: u32) {
    let mut num = [0u8; 11];
    let mut at = num.len();
    if idx > 0 {
        let mut v = idx;
        while v > 0 {
            at -= 1;
            num[at] = b'0' + (v % 10) as u8;
            v /= 10;
        }
        at -= 1;
        num[at] = b':';
    }
    nb.key(3, LEN);
    nb.varint((pre.len() + name.len() + num.len() - at) as u64);
    nb.buf.extend_from_slice(pre.as_bytes());
    nb.buf.extend_from_slice(name.as_bytes());
    nb.buf.extend_from_slice(&num[at..]);
}

fn put_entry(nb: &mut Writer, key: &str, value: &[u8]) {
    nb.key(5, LEN);
    nb.varint((field_len(key.len()) + field_len(value.len())) as u64);
    nb.bytes_field(1, key.as_bytes());
    nb.bytes_field(2, value);
}

/// Writes a `TensorShapeProto` as field `field` (zero sizes omitted, as
/// proto3 does).
fn put_shape(w: &mut Writer, field: u32, s: &Shp) {
    let dim_len = |d: i64| if d == 0 { 0 } else { 1 + vlen(d as u64) };
    let len: usize = s.dims().iter().map(|&d| field_len(dim_len(d))).sum();
    w.key(field, LEN);
    w.varint(len as u64);
    for &d in s.dims() {
        w.key(2, LEN);
        w.varint(dim_len(d) as u64);
        if d != 0 {
            w.varint_field(1, d as u64);
        }
    }
}

fn put_packed(w: &mut Writer, field: u32, vals: impl Iterator<Item = u64> + Clone) {
    w.key(field, LEN);
    w.varint(vals.clone().map(vlen).sum::<usize>() as u64);
    for v in vals {
        w.varint(v);
    }
}

/// Writes the `AttrValue` of `a` into `ab` (using `lb` for nested messages)
/// and returns the attribute's key.
fn put_attr<'a>(ab: &mut Writer, lb: &mut Writer, f: DType, a: &A<'a>) -> &'a str {
    ab.buf.clear();
    lb.buf.clear();
    match *a {
        A::T => {
            ab.varint_field(6, u64::from(f.0));
            "T"
        }
        A::Type(k, d) => {
            ab.varint_field(6, u64::from(d.0));
            k
        }
        A::Types(k, d, n) => {
            ab.message(1, |l| {
                put_packed(l, 6, std::iter::repeat_n(u64::from(d.0), n))
            });
            k
        }
        A::Bool(k, b) => {
            ab.varint_field(5, u64::from(b));
            k
        }
        A::Float(k, v) => {
            ab.buf.push((4 << 3) | FIXED32);
            ab.buf.extend_from_slice(&v.to_le_bytes());
            k
        }
        A::Int(k, v) => {
            ab.varint_field(3, v as u64);
            k
        }
        A::Ints(k, vs) => {
            put_packed(lb, 3, vs.iter().map(|&v| v as u64));
            ab.bytes_field(1, &lb.buf);
            k
        }
        A::Str(k, s) => {
            ab.bytes_field(2, s.as_bytes());
            k
        }
        A::Shape(k, s) => {
            put_shape(ab, 7, &s);
            k
        }
        A::Value(dt, s, v) => {
            put_tensor(lb, dt, &s, v);
            ab.bytes_field(8, &lb.buf);
            "value"
        }
    }
}

/// A `TensorProto` with `dtype`, `tensor_shape` and typed values.
fn put_tensor(w: &mut Writer, dt: DType, s: &Shp, v: Val) {
    w.varint_field(1, u64::from(dt.0));
    put_shape(w, 2, s);
    match v {
        Val::Ints(vs) => {
            let field = if dt == I64 { 10 } else { 7 };
            put_packed(w, field, vs.iter().map(|&v| v as u64));
        }
        Val::Float(x) => match dt {
            DType::DOUBLE => w.bytes_field(6, &x.to_le_bytes()),
            DType::HALF => put_packed(w, 13, std::iter::once(u64::from(f16_bits(x as f32)))),
            DType::BFLOAT16 => put_packed(
                w,
                13,
                std::iter::once(u64::from((x as f32).to_bits() >> 16)),
            ),
            _ => w.bytes_field(5, &(x as f32).to_le_bytes()),
        },
    }
}

/// IEEE half bits of a float (truncating; subnormals flush to zero).
fn f16_bits(v: f32) -> u16 {
    let b = v.to_bits();
    let sign = ((b >> 16) & 0x8000) as u16;
    let exp = ((b >> 23) & 0xff) as i32 - 127 + 15;
    let man = ((b >> 13) & 0x3ff) as u16;
    if v == 0.0 || exp <= 0 {
        sign
    } else if exp >= 31 {
        sign | 0x7c00
    } else {
        sign | ((exp as u16) << 10) | man
    }
}

// ---------------------------------------------------------------------------
// The model: forward records, then their gradients.

struct NormRec {
    scope: String,
    x: T,
    sg: T,
    sub: T,
    rsqrt: T,
    norm: T,
    axes: &'static [i64],
    gamma: VarRef,
    beta: VarRef,
    out: T,
}

struct ConvRec {
    scope: String,
    input: T,
    kernel: VarRef,
    bias: VarRef,
    norm: NormRec,
    relu: Option<T>,
    out: T,
}

struct ResRec {
    scope: String,
    /// The input's shape when it was reshaped from tokens.
    orig: Option<Shp>,
    units: [ConvRec; 3],
    out: T,
}

struct Proj {
    name: &'static str,
    w: VarRef,
    t: T,
}

struct TfRec {
    scope: String,
    orig: Option<Shp>,
    h: T,
    qkv: [Proj; 3],
    scale: T,
    probs: T,
    ctx2: T,
    wo: VarRef,
    ln1: NormRec,
    w1: VarRef,
    b1: VarRef,
    relu: T,
    w2: VarRef,
    b2: VarRef,
    ln2: NormRec,
}

enum Block {
    Res(Box<ResRec>),
    Tf(Box<TfRec>),
    Dag(Box<DagRec>),
    Narrow(Box<NarrowRec>),
}

/// One node of a DAG block: `relu(sum(sources) @ w + b)`.
struct DagNode {
    /// Indices into `DagRec::nodes` (0 is the block's input).
    sources: Vec<usize>,
    /// The `MatMul`'s input (a source, or the sum of two).
    x: T,
    w: VarRef,
    b: VarRef,
    out: T,
}

struct DagRec {
    scope: String,
    /// The block's input first (no sources), then the layers in order.
    nodes: Vec<DagNode>,
    /// Nodes summed into the output.
    sinks: Vec<usize>,
    out: T,
}

/// SplitMix64: a tiny, seeded, platform-independent generator.
fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

struct DenseStem {
    flat: T,
    w: VarRef,
    b: VarRef,
}

enum Stem {
    Conv(Box<ConvRec>),
    Dense(Box<DenseStem>),
}

struct Head {
    feat: T,
    pooled: T,
    w: VarRef,
    b: VarRef,
    xent: u32,
    sum: T,
    cnt: T,
    loss: T,
}

impl Gen {
    fn train_step(&mut self) {
        let (b, n, c) = (self.batch, self.size, self.channels);
        let xs = match self.kind {
            SynthKind::Transformer | SynthKind::Dag => Shp::new(&[b, n, c]),
            _ => s4(b, n, n, 3),
        };
        let x = self.placeholder("x", self.f, xs);
        let y = self.placeholder("y", I32, s1(b));
        let (stem, mut h) = self.stem(x);
        let mut blocks = Vec::with_capacity(self.blocks);
        for i in 0..self.blocks {
            let blk = match self.kind {
                SynthKind::Residual => Block::Res(Box::new(self.res_block(i, h))),
                SynthKind::Transformer => Block::Tf(Box::new(self.tf_block(i, h))),
                SynthKind::Mixed if i % 2 == 0 => Block::Res(Box::new(self.res_block(i, h))),
                SynthKind::Mixed => Block::Tf(Box::new(self.tf_block(i, h))),
                SynthKind::Dag => Block::Dag(Box::new(self.dag_block(i, h))),
                SynthKind::Narrow => Block::Narrow(Box::new(self.narrow_block(i, h))),
            };
            h = match &blk {
                Block::Res(r) => r.out,
                Block::Tf(r) => r.ln2.out,
                Block::Dag(r) => r.out,
                Block::Narrow(r) => r.out,
            };
            blocks.push(blk);
        }
        let head = self.head(h, y);
        let mut d = self.head_grad(&head);
        for blk in blocks.iter().rev() {
            d = match blk {
                Block::Res(r) => self.res_grad(r, d),
                Block::Tf(r) => self.tf_grad(r, d),
                Block::Dag(r) => self.dag_grad(r, d),
                Block::Narrow(r) => self.narrow_grad(r, d),
            };
        }
        self.stem_grad(&stem, d);
        self.update(head.loss);
    }

    fn stem(&mut self, x: T) -> (Stem, T) {
        if x.s.r == 4 {
            let r = self.conv_unit("model/stem".into(), x, 3, self.channels, true);
            let out = r.out;
            return (Stem::Conv(Box::new(r)), out);
        }
        let (m, c) = (self.batch * self.size, self.channels);
        self.set_scope(&["model/stem"]);
        let flat = self.reshape("Reshape", x, s2(m, c));
        let w = self.var("MatMul", s2(c, c), true);
        let mm = self.f1a("MatMul", "MatMul", &[flat, w.read], s2(m, c), MM_NN);
        let b = self.var("BiasAdd", s1(c), true);
        let out = self.f1a("BiasAdd", "BiasAdd", &[mm, b.read], s2(m, c), BIAS);
        (Stem::Dense(Box::new(DenseStem { flat, w, b })), out)
    }

    fn stem_grad(&mut self, stem: &Stem, d: T) {
        match stem {
            Stem::Conv(r) => {
                let (dp, shapes) = self.conv_grad_pre(r, d);
                self.conv_filter_grad(r, dp, shapes);
            }
            Stem::Dense(s) => {
                self.set_scope(&["gradient_tape/model/stem"]);
                let db = self.f1a("BiasAdd/BiasAddGrad", "BiasAddGrad", &[d], s.b.read.s, BIAS);
                let dw = self.f1a("MatMul/MatMul", "MatMul", &[s.flat, d], s.w.read.s, MM_TN);
                self.set_grad(&s.b, db);
                self.set_grad(&s.w, dw);
            }
        }
    }

    /// Batch norm (rank 4: statistics over batch and space, with moving
    /// averages) or layer norm (rank 2: statistics over features).
    fn norm(&mut self, scope: String, x: T, moving: bool) -> NormRec {
        self.set_scope(&[&scope]);
        let axes: &'static [i64] = if x.s.r == 4 { &[0, 1, 2] } else { &[1] };
        let (st, c) = (x.s.keep(axes), x.s.last());
        let ri = self.cint("moments/mean/reduction_indices", axes);
        let mean = self.f1a("moments/mean", "Mean", &[x, ri], st, KEEP);
        let sg = self.f1("moments/StopGradient", "StopGradient", &[mean], st);
        let sqd = self.f1(
            "moments/SquaredDifference",
            "SquaredDifference",
            &[x, sg],
            x.s,
        );
        let ri = self.cint("moments/variance/reduction_indices", axes);
        let var = self.f1a("moments/variance", "Mean", &[sqd, ri], st, KEEP);
        let eps = self.cfloat("batchnorm/add/y", 1e-3);
        let var_eps = self.f1("batchnorm/add", "AddV2", &[var, eps], st);
        let rsqrt = self.f1("batchnorm/Rsqrt", "Rsqrt", &[var_eps], st);
        let sub = self.f1("batchnorm/sub", "Sub", &[x, mean], x.s);
        let norm = self.f1("batchnorm/mul", "Mul", &[sub, rsqrt], x.s);
        let gamma = self.var("gamma", s1(c), true);
        let scaled = self.f1("batchnorm/mul_1", "Mul", &[norm, gamma.read], x.s);
        let beta = self.var("beta", s1(c), true);
        let out = self.f1("batchnorm/add_1", "AddV2", &[scaled, beta.read], x.s);
        if moving {
            self.moving_average(0, mean, axes);
            self.moving_average(1, var, axes);
        }
        NormRec {
            scope,
            x,
            sg,
            sub,
            rsqrt,
            norm,
            axes,
            gamma,
            beta,
            out,
        }
    }

    /// `moving = 0.99 * moving + 0.01 * stat`, written back.
    fn moving_average(&mut self, k: usize, stat: T, axes: &[i64]) {
        let c = s1(stat.s.last());
        let leaf = if k == 0 {
            "moving_mean"
        } else {
            "moving_variance"
        };
        let mv = self.var(leaf, c, false);
        let a = [A::T, A::Ints("squeeze_dims", axes)];
        let sq = self.f1a(Nm("moments/Squeeze", k, ""), "Squeeze", &[stat], c, &a);
        let y0 = self.cfloat(Nm("mul", 2 * k, "/y"), 0.99);
        let m0 = self.f1(Nm("mul", 2 * k, ""), "Mul", &[mv.read, y0], c);
        let y1 = self.cfloat(Nm("mul", 2 * k + 1, "/y"), 0.01);
        let m1 = self.f1(Nm("mul", 2 * k + 1, ""), "Mul", &[sq, y1], c);
        let add = self.f1(Nm("add", k, ""), "AddV2", &[m0, m1], c);
        let a = [A::Type("dtype", self.f), A::Bool("validate_shape", false)];
        let name = Nm("AssignVariableOp", k, "");
        let w = self.op(
            name,
            "AssignVariableOp",
            &[mv.handle, add],
            &[mv.read.node],
            &[],
            &a,
        );
        self.stateful.push(w);
    }

    fn norm_grad(&mut self, n: &NormRec, d: T) -> T {
        self.set_scope(&["gradient_tape", &n.scope]);
        let (xs, st, c) = (d.s, n.rsqrt.s, s1(d.s.last()));
        let pax: &[i64] = if xs.r == 4 { &[0, 1, 2] } else { &[0] };
        let ri = self.cint("batchnorm/add_1/Sum/reduction_indices", pax);
        let dbeta = self.f1a("batchnorm/add_1/Sum", "Sum", &[d, ri], c, DROP);
        let dnorm = self.f1("batchnorm/mul_1/Mul", "Mul", &[d, n.gamma.read], xs);
        let dg = self.f1("batchnorm/mul_1/Mul_1", "Mul", &[n.norm, d], xs);
        let ri = self.cint("batchnorm/mul_1/Sum/reduction_indices", pax);
        let dgamma = self.f1a("batchnorm/mul_1/Sum", "Sum", &[dg, ri], c, DROP);
        let dsub = self.f1("batchnorm/mul/Mul", "Mul", &[dnorm, n.rsqrt], xs);
        let dr = self.f1("batchnorm/mul/Mul_1", "Mul", &[n.sub, dnorm], xs);
        let ri = self.cint("batchnorm/mul/Sum/reduction_indices", n.axes);
        let drs = self.f1a("batchnorm/mul/Sum", "Sum", &[dr, ri], st, KEEP);
        let dvar = self.f1(
            "batchnorm/Rsqrt/RsqrtGrad",
            "RsqrtGrad",
            &[n.rsqrt, drs],
            st,
        );
        let dsqd = self.mean_grad("moments/variance", dvar, xs);
        let two = self.cfloat("moments/SquaredDifference/scalar", 2.0);
        let m = self.f1("moments/SquaredDifference/Mul", "Mul", &[two, dsqd], xs);
        let diff = self.f1("moments/SquaredDifference/sub", "Sub", &[n.x, n.sg], xs);
        let dx2 = self.f1("moments/SquaredDifference/mul_1", "Mul", &[m, diff], xs);
        let ri = self.cint("batchnorm/sub/Sum/reduction_indices", n.axes);
        let s = self.f1a("batchnorm/sub/Sum", "Sum", &[dsub, ri], st, KEEP);
        let dmean = self.f1("batchnorm/sub/Neg", "Neg", &[s], st);
        let dx3 = self.mean_grad("moments/mean", dmean, xs);
        self.set_grad(&n.gamma, dgamma);
        self.set_grad(&n.beta, dbeta);
        self.addn(&[dsub, dx2, dx3])
    }

    /// Gradient of a `keep_dims` mean: tile back to `xs`, divide by the count.
    fn mean_grad(&mut self, pre: &str, d: T, xs: Shp) -> T {
        let mut mult = [1i64; 4];
        let mut count = 1i64;
        for (m, (&x, &r)) in mult.iter_mut().zip(xs.dims().iter().zip(d.s.dims())) {
            *m = x / r.max(1);
            count = count.saturating_mul(*m);
        }
        let m = self.cint(Nm(pre, 0, "/Tile/multiples"), &mult[..xs.r as usize]);
        let a = [A::T, A::Type("Tmultiples", I32)];
        let t = self.f1a(Nm(pre, 0, "/Tile"), "Tile", &[d, m], xs, &a);
        let n = self.cfloat(Nm(pre, 0, "/Const"), count as f64);
        self.f1(Nm(pre, 0, "/truediv"), "RealDiv", &[t, n], xs)
    }

    /// Conv2D + BiasAdd + batch norm (+ Relu).
    fn conv_unit(&mut self, scope: String, input: T, k: i64, cout: i64, relu: bool) -> ConvRec {
        self.set_scope(&[&scope]);
        let cin = input.s.last();
        let kernel = self.var("convolution", s4(k, k, cin, cout), true);
        let xs = input.s.with_last(cout);
        let conv = self.f1a("convolution", "Conv2D", &[input, kernel.read], xs, CONV);
        let bias = self.var("BiasAdd", s1(cout), true);
        let pre = self.f1a("BiasAdd", "BiasAdd", &[conv, bias.read], xs, BIAS);
        let norm = self.norm(format!("{scope}/bn"), pre, true);
        let mut out = norm.out;
        let mut relu_out = None;
        if relu {
            self.set_scope(&[&scope]);
            out = self.f1("Relu", "Relu", &[norm.out], xs);
            relu_out = Some(out);
        }
        ConvRec {
            scope,
            input,
            kernel,
            bias,
            norm,
            relu: relu_out,
            out,
        }
    }

    /// Relu, norm and bias gradients and the `ShapeN` of the conv's inputs.
    fn conv_grad_pre(&mut self, r: &ConvRec, d: T) -> (T, u32) {
        let mut d = d;
        if let Some(relu) = r.relu {
            self.set_scope(&["gradient_tape", &r.scope]);
            d = self.f1("ReluGrad", "ReluGrad", &[d, relu], relu.s);
        }
        let d = self.norm_grad(&r.norm, d);
        self.set_scope(&["gradient_tape", &r.scope]);
        let db = self.f1a(
            "BiasAdd/BiasAddGrad",
            "BiasAddGrad",
            &[d],
            r.bias.read.s,
            BIAS,
        );
        self.set_grad(&r.bias, db);
        let a = [A::Int("N", 2), A::T, A::Type("out_type", I32)];
        let ins = [r.input, r.kernel.read];
        let shapes = self.op(
            "convolution/ShapeN",
            "ShapeN",
            &ins,
            &[],
            &[s1(4), s1(4)],
            &a,
        );
        (d, shapes)
    }

    fn conv_input_grad(&mut self, r: &ConvRec, d: T, shapes: u32) -> T {
        let sizes = T {
            node: shapes,
            idx: 0,
            s: s1(4),
        };
        let ins = [sizes, r.kernel.read, d];
        self.f1a(
            "convolution/Conv2DBackpropInput",
            "Conv2DBackpropInput",
            &ins,
            r.input.s,
            CONV,
        )
    }

    fn conv_filter_grad(&mut self, r: &ConvRec, d: T, shapes: u32) {
        let sizes = T {
            node: shapes,
            idx: 1,
            s: s1(4),
        };
        let ins = [r.input, sizes, d];
        let ks = r.kernel.read.s;
        let dk = self.f1a(
            "convolution/Conv2DBackpropFilter",
            "Conv2DBackpropFilter",
            &ins,
            ks,
            CONV,
        );
        self.set_grad(&r.kernel, dk);
    }

    fn conv_grad(&mut self, r: &ConvRec, d: T) -> T {
        let (dp, shapes) = self.conv_grad_pre(r, d);
        let din = self.conv_input_grad(r, dp, shapes);
        self.conv_filter_grad(r, dp, shapes);
        din
    }

    fn res_block(&mut self, i: usize, input: T) -> ResRec {
        let scope = format!("model/block{i}");
        self.set_scope(&[&scope]);
        let (b, n, c) = (self.batch, self.size, input.s.last());
        let (x, orig) = if input.s.r == 4 {
            (input, None)
        } else {
            (self.reshape("to_map", input, s4(b, n, n, c)), Some(input.s))
        };
        let cb = (c / 4).max(1);
        let u1 = self.conv_unit(format!("{scope}/conv1"), x, 1, cb, true);
        let u2 = self.conv_unit(format!("{scope}/conv2"), u1.out, 3, cb, true);
        let u3 = self.conv_unit(format!("{scope}/conv3"), u2.out, 1, c, false);
        self.set_scope(&[&scope]);
        let add = self.f1("add", "AddV2", &[u3.out, x], x.s);
        let out = self.f1("Relu", "Relu", &[add], x.s);
        ResRec {
            scope,
            orig,
            units: [u1, u2, u3],
            out,
        }
    }

    fn res_grad(&mut self, r: &ResRec, d: T) -> T {
        self.set_scope(&["gradient_tape", &r.scope]);
        let dadd = self.f1("ReluGrad", "ReluGrad", &[d, r.out], r.out.s);
        let d2 = self.conv_grad(&r.units[2], dadd);
        let d1 = self.conv_grad(&r.units[1], d2);
        let d0 = self.conv_grad(&r.units[0], d1);
        let dx = self.addn(&[d0, dadd]);
        match r.orig {
            Some(s) => {
                self.set_scope(&["gradient_tape", &r.scope]);
                self.reshape("to_map/Reshape", dx, s)
            }
            None => dx,
        }
    }

    /// A random layered DAG of dense nodes (see [`SynthKind::Dag`]).
    fn dag_block(&mut self, i: usize, input: T) -> DagRec {
        let scope = format!("model/dag{i}");
        let s = input.s;
        let c = s.last();
        let mut rng = 0x5EED_0000 + i as u64;
        let placeholder_node = |x: T| DagNode {
            sources: Vec::new(),
            x,
            w: VarRef {
                handle: x,
                read: x,
                idx: usize::MAX,
            },
            b: VarRef {
                handle: x,
                read: x,
                idx: usize::MAX,
            },
            out: x,
        };
        let mut nodes = vec![placeholder_node(input)];
        let mut read = [false; 1 + DAG_LAYERS * DAG_WIDTH];
        for l in 1..=DAG_LAYERS {
            // Candidates: the two layers before (layer 0 is the input alone).
            let lo = if l <= 2 { 0 } else { 1 + (l - 3) * DAG_WIDTH };
            let hi = 1 + (l - 1) * DAG_WIDTH;
            let span = (hi - lo) as u64;
            for j in 0..DAG_WIDTH {
                let k = nodes.len();
                let nsrc = if span > 1 && splitmix(&mut rng).is_multiple_of(2) {
                    2
                } else {
                    1
                };
                let a = lo + (splitmix(&mut rng) % span) as usize;
                let mut sources = vec![a];
                if nsrc == 2 {
                    let b = lo
                        + (a - lo + 1 + (splitmix(&mut rng) % (span - 1)) as usize) % span as usize;
                    sources.push(b);
                }
                for &q in &sources {
                    read[q] = true;
                }
                let name = format!("{scope}/l{l}n{j}");
                self.set_scope(&[&name]);
                let x = if sources.len() == 2 {
                    let ins = [nodes[sources[0]].out, nodes[sources[1]].out];
                    self.f1("add", "AddV2", &ins, s)
                } else {
                    nodes[sources[0]].out
                };
                let w = self.var("MatMul", s2(c, c), true);
                let mm = self.f1a("MatMul", "MatMul", &[x, w.read], s, MM_NN);
                let b = self.var("BiasAdd", s1(c), true);
                let h = self.f1a("BiasAdd", "BiasAdd", &[mm, b.read], s, BIAS);
                let out = self.f1("Relu", "Relu", &[h], s);
                nodes.push(DagNode {
                    sources,
                    x,
                    w,
                    b,
                    out,
                });
                debug_assert_eq!(nodes.len(), k + 1);
            }
        }
        let mut sinks: Vec<usize> = (1..nodes.len()).filter(|&k| !read[k]).collect();
        sinks.push(0);
        let outs: Vec<T> = sinks.iter().map(|&k| nodes[k].out).collect();
        let out = self.addn(&outs);
        DagRec {
            scope,
            nodes,
            sinks,
            out,
        }
    }

    /// Reverse mode through a DAG block: each node's gradient is the sum of
    /// what its readers send back.
    fn dag_grad(&mut self, r: &DagRec, d: T) -> T {
        let mut grads: Vec<Vec<T>> = vec![Vec::new(); r.nodes.len()];
        for &k in &r.sinks {
            grads[k].push(d);
        }
        for k in (1..r.nodes.len()).rev() {
            let n = &r.nodes[k];
            if grads[k].is_empty() {
                continue;
            }
            let dn = if grads[k].len() == 1 {
                grads[k][0]
            } else {
                self.addn(&grads[k])
            };
            let l = (k - 1) / DAG_WIDTH + 1;
            let j = (k - 1) % DAG_WIDTH;
            let name = format!("{}/l{l}n{j}", r.scope);
            self.set_scope(&["gradient_tape", &name]);
            let s = n.out.s;
            let dh = self.f1("ReluGrad", "ReluGrad", &[dn, n.out], s);
            let db = self.f1a(
                "BiasAdd/BiasAddGrad",
                "BiasAddGrad",
                &[dh],
                n.b.read.s,
                BIAS,
            );
            let dx = self.f1a("MatMul/MatMul", "MatMul", &[dh, n.w.read], s, MM_NT);
            let dw = self.f1a("MatMul/MatMul_1", "MatMul", &[n.x, dh], n.w.read.s, MM_TN);
            self.set_grad(&n.b, db);
            self.set_grad(&n.w, dw);
            for &q in &n.sources {
                grads[q].push(dx);
            }
        }
        match grads[0].len() {
            1 => grads[0][0],
            _ => self.addn(&grads[0]),
        }
    }

    /// `h @ W`, split into heads: `[batch, heads, seq, head_dim]`.
    fn proj(&mut self, scope: &str, name: &'static str, h: T, heads: Shp) -> Proj {
        self.set_scope(&[scope, "attn", name]);
        let (m, c) = (h.s.d[0], h.s.d[1]);
        let w = self.var("MatMul", s2(c, c), true);
        let y = self.f1a("MatMul", "MatMul", &[h, w.read], s2(m, c), MM_NN);
        let y4 = self.reshape("Reshape", y, heads);
        let perm = self.cint("transpose/perm", HEADS_PERM);
        let ts = s4(heads.d[0], heads.d[2], heads.d[1], heads.d[3]);
        let t = self.f1a("transpose", "Transpose", &[y4, perm], ts, TRANSPOSE);
        Proj { name, w, t }
    }

    fn tf_block(&mut self, i: usize, input: T) -> TfRec {
        let scope = format!("model/block{i}");
        self.set_scope(&[&scope]);
        let (h, orig) = if input.s.r == 2 {
            (input, None)
        } else {
            let d = input.s.dims();
            let flat = s2(d[..3].iter().product(), d[3]);
            (self.reshape("to_tokens", input, flat), Some(input.s))
        };
        let (m, c, b) = (h.s.d[0], h.s.d[1], self.batch);
        let (s, nh) = (m / b, if c % 4 == 0 { 4 } else { 1 });
        let heads = s4(b, s, nh, c / nh);
        let qkv = ["query", "key", "value"].map(|name| self.proj(&scope, name, h, heads));
        self.set_scope(&[&scope, "attn"]);
        let ss = s4(b, nh, s, s);
        let scores = self.f1a(
            "scores/MatMul",
            "BatchMatMulV2",
            &[qkv[0].t, qkv[1].t],
            ss,
            BMM_NT,
        );
        let scale = self.cfloat("scores/mul/y", 1.0 / ((c / nh) as f64).sqrt());
        let scaled = self.f1("scores/mul", "Mul", &[scores, scale], ss);
        let probs = self.f1("Softmax", "Softmax", &[scaled], ss);
        let cs = s4(b, nh, s, c / nh);
        let ctx = self.f1a(
            "context/MatMul",
            "BatchMatMulV2",
            &[probs, qkv[2].t],
            cs,
            BMM_NN,
        );
        let perm = self.cint("context/transpose/perm", HEADS_PERM);
        let ctx_t = self.f1a(
            "context/transpose",
            "Transpose",
            &[ctx, perm],
            heads,
            TRANSPOSE,
        );
        let ctx2 = self.reshape("context/Reshape", ctx_t, h.s);
        let wo = self.var("output/MatMul", s2(c, c), true);
        let o = self.f1a("output/MatMul", "MatMul", &[ctx2, wo.read], h.s, MM_NN);
        self.set_scope(&[&scope]);
        let r1 = self.f1("add", "AddV2", &[o, h], h.s);
        let ln1 = self.norm(format!("{scope}/ln1"), r1, false);
        self.set_scope(&[&scope, "mlp"]);
        let w1 = self.var("dense1/MatMul", s2(c, 4 * c), true);
        let a1 = self.f1a(
            "dense1/MatMul",
            "MatMul",
            &[ln1.out, w1.read],
            s2(m, 4 * c),
            MM_NN,
        );
        let b1 = self.var("dense1/BiasAdd", s1(4 * c), true);
        let h1 = self.f1a("dense1/BiasAdd", "BiasAdd", &[a1, b1.read], a1.s, BIAS);
        let relu = self.f1("dense1/Relu", "Relu", &[h1], h1.s);
        let w2 = self.var("dense2/MatMul", s2(4 * c, c), true);
        let a2 = self.f1a("dense2/MatMul", "MatMul", &[relu, w2.read], h.s, MM_NN);
        let b2 = self.var("dense2/BiasAdd", s1(c), true);
        let h2 = self.f1a("dense2/BiasAdd", "BiasAdd", &[a2, b2.read], h.s, BIAS);
        self.set_scope(&[&scope]);
        let r2 = self.f1("add_1", "AddV2", &[h2, ln1.out], h.s);
        let ln2 = self.norm(format!("{scope}/ln2"), r2, false);
        TfRec {
            scope,
            orig,
            h,
            qkv,
            scale,
            probs,
            ctx2,
            wo,
            ln1,
            w1,
            b1,
            relu,
            w2,
            b2,
            ln2,
        }
    }

    fn tf_grad(&mut self, r: &TfRec, d: T) -> T {
        let d_r2 = self.norm_grad(&r.ln2, d);
        let d_ln1 = self.mlp_grad(r, d_r2);
        let d_r1 = self.norm_grad(&r.ln1, d_ln1);
        self.set_scope(&["gradient_tape", &r.scope, "attn"]);
        let hs = r.h.s;
        let d_ctx2 = self.f1a(
            "output/MatMul/MatMul",
            "MatMul",
            &[d_r1, r.wo.read],
            hs,
            MM_NT,
        );
        let ins = [r.ctx2, d_r1];
        let dwo = self.f1a("output/MatMul/MatMul_1", "MatMul", &ins, r.wo.read.s, MM_TN);
        self.set_grad(&r.wo, dwo);
        let ts = r.qkv[0].t.s;
        let heads = s4(ts.d[0], ts.d[2], ts.d[1], ts.d[3]);
        let d_ctx_t = self.reshape("context/Reshape/Reshape", d_ctx2, heads);
        let perm = self.cint("context/transpose/perm", HEADS_PERM);
        let ins = [d_ctx_t, perm];
        let d_ctx = self.f1a(
            "context/transpose/transpose",
            "Transpose",
            &ins,
            ts,
            TRANSPOSE,
        );
        let ps = r.probs.s;
        let ins = [d_ctx, r.qkv[2].t];
        let d_p = self.f1a("context/MatMul/MatMul", "BatchMatMulV2", &ins, ps, BMM_NT);
        let ins = [r.probs, d_ctx];
        let d_vt = self.f1a("context/MatMul/MatMul_1", "BatchMatMulV2", &ins, ts, BMM_TN);
        let mul = self.f1("Softmax/mul", "Mul", &[d_p, r.probs], ps);
        let ri = self.cint("Softmax/Sum/reduction_indices", &[3]);
        let sum = self.f1a("Softmax/Sum", "Sum", &[mul, ri], ps.keep(&[3]), KEEP);
        let sub = self.f1("Softmax/sub", "Sub", &[d_p, sum], ps);
        let d_sm = self.f1("Softmax/mul_1", "Mul", &[sub, r.probs], ps);
        let d_sc = self.f1("scores/mul/Mul", "Mul", &[d_sm, r.scale], ps);
        let ins = [d_sc, r.qkv[1].t];
        let d_qt = self.f1a("scores/MatMul/MatMul", "BatchMatMulV2", &ins, ts, BMM_NN);
        let ins = [d_sc, r.qkv[0].t];
        let d_kt = self.f1a("scores/MatMul/MatMul_1", "BatchMatMulV2", &ins, ts, BMM_TN);
        let mut dh = [d_r1; 4];
        for (k, dt) in [d_qt, d_kt, d_vt].into_iter().enumerate() {
            dh[k + 1] = self.proj_grad(&r.scope, &r.qkv[k], dt, r.h);
        }
        let dx = self.addn(&dh);
        match r.orig {
            Some(s) => {
                self.set_scope(&["gradient_tape", &r.scope]);
                self.reshape("to_tokens/Reshape", dx, s)
            }
            None => dx,
        }
    }

    fn mlp_grad(&mut self, r: &TfRec, d: T) -> T {
        self.set_scope(&["gradient_tape", &r.scope, "mlp"]);
        let db2 = self.f1a(
            "dense2/BiasAdd/BiasAddGrad",
            "BiasAddGrad",
            &[d],
            r.b2.read.s,
            BIAS,
        );
        let rs = r.relu.s;
        let d_relu = self.f1a("dense2/MatMul/MatMul", "MatMul", &[d, r.w2.read], rs, MM_NT);
        let dw2 = self.f1a(
            "dense2/MatMul/MatMul_1",
            "MatMul",
            &[r.relu, d],
            r.w2.read.s,
            MM_TN,
        );
        let d_h1 = self.f1("dense1/ReluGrad", "ReluGrad", &[d_relu, r.relu], rs);
        let db1 = self.f1a(
            "dense1/BiasAdd/BiasAddGrad",
            "BiasAddGrad",
            &[d_h1],
            r.b1.read.s,
            BIAS,
        );
        let ins = [d_h1, r.w1.read];
        let d_ln = self.f1a("dense1/MatMul/MatMul", "MatMul", &ins, r.h.s, MM_NT);
        let ins = [r.ln1.out, d_h1];
        let dw1 = self.f1a("dense1/MatMul/MatMul_1", "MatMul", &ins, r.w1.read.s, MM_TN);
        self.set_grad(&r.b2, db2);
        self.set_grad(&r.w2, dw2);
        self.set_grad(&r.b1, db1);
        self.set_grad(&r.w1, dw1);
        self.addn(&[d, d_ln])
    }

    fn proj_grad(&mut self, scope: &str, p: &Proj, d: T, h: T) -> T {
        self.set_scope(&["gradient_tape", scope, "attn", p.name]);
        let ts = d.s;
        let heads = s4(ts.d[0], ts.d[2], ts.d[1], ts.d[3]);
        let perm = self.cint("transpose/perm", HEADS_PERM);
        let dt = self.f1a(
            "transpose/transpose",
            "Transpose",
            &[d, perm],
            heads,
            TRANSPOSE,
        );
        let d2 = self.reshape("Reshape/Reshape", dt, h.s);
        let dh = self.f1a("MatMul/MatMul", "MatMul", &[d2, p.w.read], h.s, MM_NT);
        let dw = self.f1a("MatMul/MatMul_1", "MatMul", &[h, d2], p.w.read.s, MM_TN);
        self.set_grad(&p.w, dw);
        dh
    }

    fn head(&mut self, feat: T, y: T) -> Head {
        let b = self.batch;
        self.set_scope(&["model/pool"]);
        let pooled = if feat.s.r == 4 {
            let ri = self.cint("Mean/reduction_indices", &[1, 2]);
            self.f1a("Mean", "Mean", &[feat, ri], s2(b, feat.s.last()), DROP)
        } else {
            let (m, c) = (feat.s.d[0], feat.s.d[1]);
            let seq = self.reshape("Reshape", feat, Shp::new(&[b, m / b, c]));
            let ri = self.cint("Mean/reduction_indices", &[1]);
            self.f1a("Mean", "Mean", &[seq, ri], s2(b, c), DROP)
        };
        self.set_scope(&["model/dense"]);
        let w = self.var("MatMul", s2(pooled.s.d[1], CLASSES), true);
        let ls = s2(b, CLASSES);
        let mm = self.f1a("MatMul", "MatMul", &[pooled, w.read], ls, MM_NN);
        let bv = self.var("BiasAdd", s1(CLASSES), true);
        let logits = self.f1a("BiasAdd", "BiasAdd", &[mm, bv.read], ls, BIAS);
        self.set_scope(&["sparse_categorical_crossentropy"]);
        let a = [
            A::Type("SrcT", I32),
            A::Type("DstT", I64),
            A::Bool("Truncate", false),
        ];
        let labels = self.f1a("Cast", "Cast", &[y], s1(b), &a);
        let name = "SparseSoftmaxCrossEntropyWithLogits/SparseSoftmaxCrossEntropyWithLogits";
        let a = [A::T, A::Type("Tlabels", I64)];
        let op = "SparseSoftmaxCrossEntropyWithLogits";
        let xent = self.op(name, op, &[logits, labels], &[], &[s1(b), ls], &a);
        let per_example = T {
            node: xent,
            idx: 0,
            s: s1(b),
        };
        let c0 = self.cint("Const", &[0]);
        let sum = self.f1a("Sum", "Sum", &[per_example, c0], Shp::SCALAR, DROP);
        let c1 = self.cint("Const_1", &[b]);
        let c2 = self.cint("Const_2", &[0]);
        let a = [
            A::Type("T", I32),
            A::Type("Tidx", I32),
            A::Bool("keep_dims", false),
        ];
        let prod = self.f1a("Prod", "Prod", &[c1, c2], Shp::SCALAR, &a);
        let a = [
            A::Type("SrcT", I32),
            A::Type("DstT", self.f),
            A::Bool("Truncate", false),
        ];
        let cnt = self.f1a("Cast_2", "Cast", &[prod], Shp::SCALAR, &a);
        let loss = self.f1("div_no_nan", "DivNoNan", &[sum, cnt], Shp::SCALAR);
        Head {
            feat,
            pooled,
            w,
            b: bv,
            xent,
            sum,
            cnt,
            loss,
        }
    }

    /// From the seed `ones` to the gradient of the pooled features' input.
    fn head_grad(&mut self, h: &Head) -> T {
        let (b, sc) = (self.batch, Shp::SCALAR);
        self.set_scope(&[]);
        let ones = self.cfloat("ones", 1.0);
        self.set_scope(&["gradient_tape/sparse_categorical_crossentropy"]);
        let dl = self.f1("div_no_nan/div_no_nan", "DivNoNan", &[ones, h.cnt], sc);
        let neg = self.f1("div_no_nan/Neg", "Neg", &[h.sum], sc);
        let d1 = self.f1("div_no_nan/div_no_nan_1", "DivNoNan", &[neg, h.cnt], sc);
        let d2 = self.f1("div_no_nan/div_no_nan_2", "DivNoNan", &[d1, h.cnt], sc);
        self.f1("div_no_nan/mul", "Mul", &[ones, d2], sc);
        let r = self.reshape("Reshape", dl, s1(1));
        let mult = self.cint("Const", &[b]);
        let a = [A::T, A::Type("Tmultiples", I32)];
        let tile = self.f1a("Tile", "Tile", &[r, mult], s1(b), &a);
        let dim = self.cscalar(
            "SparseSoftmaxCrossEntropyWithLogits/ExpandDims/dim",
            I32,
            Val::Ints(&[1]),
        );
        let a = [A::T, A::Type("Tdim", I32)];
        let name = "SparseSoftmaxCrossEntropyWithLogits/ExpandDims";
        let ed = self.f1a(name, "ExpandDims", &[tile, dim], s2(b, 1), &a);
        let backprop = T {
            node: h.xent,
            idx: 1,
            s: s2(b, CLASSES),
        };
        let name = "SparseSoftmaxCrossEntropyWithLogits/mul";
        let dlogits = self.f1(name, "Mul", &[ed, backprop], backprop.s);
        self.set_scope(&["gradient_tape/model/dense"]);
        let db = self.f1a(
            "BiasAdd/BiasAddGrad",
            "BiasAddGrad",
            &[dlogits],
            s1(CLASSES),
            BIAS,
        );
        let ps = h.pooled.s;
        let dp = self.f1a("MatMul/MatMul", "MatMul", &[dlogits, h.w.read], ps, MM_NT);
        let dw = self.f1a(
            "MatMul/MatMul_1",
            "MatMul",
            &[h.pooled, dlogits],
            h.w.read.s,
            MM_TN,
        );
        self.set_grad(&h.b, db);
        self.set_grad(&h.w, dw);
        self.set_scope(&["gradient_tape/model/pool"]);
        let fs = h.feat.s;
        if fs.r == 4 {
            let r = self.reshape("Reshape", dp, fs.keep(&[1, 2]));
            return self.mean_grad("Mean", r, fs);
        }
        let seq = Shp::new(&[b, fs.d[0] / b, fs.d[1]]);
        let r = self.reshape("Reshape", dp, seq.keep(&[1]));
        let g = self.mean_grad("Mean", r, seq);
        self.reshape("Reshape_1", g, fs)
    }

    /// Keras 3 SGD with momentum, the iteration counter, the output.
    fn update(&mut self, loss: T) {
        self.set_scope(&["sgd"]);
        let grads: Vec<(T, usize)> = (0..self.vars.len())
            .filter_map(|k| self.vars[k].grad.map(|g| (g, k)))
            .collect();
        for (i, &(g, _)) in grads.iter().enumerate() {
            self.f1(Nm("Identity", i, ""), "Identity", &[g], g.s);
        }
        let ins: Vec<T> = grads.iter().chain(&grads).map(|&(g, _)| g).collect();
        let outs: Vec<Shp> = ins.iter().map(|t| t.s).collect();
        let a = [A::Types("T", self.f, ins.len())];
        let idn = self.op("IdentityN", "IdentityN", &ins, &[], &outs, &a);
        let lr = self.placeholder("Cast/ReadVariableOp/resource", DType::RESOURCE, Shp::SCALAR);
        for (i, &(g, k)) in grads.iter().enumerate() {
            let grad = T {
                node: idn,
                idx: i as u32,
                s: g.s,
            };
            if self.kind == SynthKind::Narrow {
                self.sgd_step(i, grad, lr, k);
            } else {
                self.momentum_step(i, grad, lr, k);
            }
        }
        self.set_scope(&[]);
        let one = self.cscalar("Const", I64, Val::Ints(&[1]));
        let h = self.placeholder("Add/ReadVariableOp/resource", DType::RESOURCE, Shp::SCALAR);
        let it = self.read("Add/ReadVariableOp", h, Shp::SCALAR, I64, &[]);
        let add = self.f1a(
            "Add",
            "AddV2",
            &[it, one],
            Shp::SCALAR,
            &[A::Type("T", I64)],
        );
        let a = [A::Type("dtype", I64), A::Bool("validate_shape", false)];
        let w = self.op(
            "AssignVariableOp",
            "AssignVariableOp",
            &[h, add],
            &[it.node],
            &[],
            &a,
        );
        self.stateful.push(w);
        // TensorFlow writes the output Identity before the NoOp it waits for.
        let mark = self.out.buf.len();
        let stateful = std::mem::take(&mut self.stateful);
        let noop = self.op("NoOp", "NoOp", &[], &stateful, &[], &[]);
        let noop_bytes = self.out.buf.split_off(mark);
        self.op(
            "Identity",
            "Identity",
            &[loss],
            &[noop],
            &[Shp::SCALAR],
            &[A::T],
        );
        self.out.buf.extend_from_slice(&noop_bytes);
    }

    /// Keras 3 SGD without momentum: `var -= grad * lr`.
    fn sgd_step(&mut self, i: usize, grad: T, lr: T, k: usize) {
        let (f, s, sc) = (self.f, grad.s, Shp::SCALAR);
        let (var_handle, var_read) = (self.vars[k].handle, self.vars[k].read);
        let lr_read = self.read(Nm("Cast", i, "/ReadVariableOp"), lr, sc, f, &[]);
        let m = self.f1(Nm("Mul", i, ""), "Mul", &[grad, lr_read], s);
        let name = Nm("AssignSubVariableOp", i, "");
        let a = [A::Type("dtype", f)];
        let ins = [var_handle, m];
        let w = self.op(name, "AssignSubVariableOp", &ins, &[var_read.node], &[], &a);
        self.stateful.push(w);
    }

    fn momentum_step(&mut self, i: usize, grad: T, lr: T, k: usize) {
        let (f, s, sc) = (self.f, grad.s, Shp::SCALAR);
        let (var_handle, var_read) = (self.vars[k].handle, self.vars[k].read);
        let lr_read = self.read(Nm("Cast", 3 * i, "/ReadVariableOp"), lr, sc, f, &[]);
        let mom = self.cfloat(Nm("Cast", 3 * i + 1, "/x"), 0.9);
        let slot = self.placeholder(
            Nm("Mul", 2 * i, "/ReadVariableOp/resource"),
            DType::RESOURCE,
            sc,
        );
        let slot_read = self.read(Nm("Mul", 2 * i, "/ReadVariableOp"), slot, s, f, &[]);
        let m0 = self.f1(Nm("Mul", 2 * i, ""), "Mul", &[slot_read, mom], s);
        let m1 = self.f1(Nm("Mul", 2 * i + 1, ""), "Mul", &[grad, lr_read], s);
        let sub = self.f1(Nm("Sub", i, ""), "Sub", &[m0, m1], s);
        let a = [A::Type("dtype", f), A::Bool("validate_shape", false)];
        let name = Nm("AssignVariableOp", i, "");
        let w = self.op(
            name,
            "AssignVariableOp",
            &[slot, sub],
            &[slot_read.node],
            &[],
            &a,
        );
        self.stateful.push(w);
        let r2 = self.read(Nm("Cast", 3 * i + 2, "/ReadVariableOp"), slot, s, f, &[w]);
        let name = Nm("AssignAddVariableOp", i, "");
        let a = [A::Type("dtype", f)];
        let ins = [var_handle, r2];
        let w = self.op(name, "AssignAddVariableOp", &ins, &[var_read.node], &[], &a);
        self.stateful.push(w);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::build::BuildOptions;
    use crate::graph::Phase;

    fn small(kind: SynthKind, blocks: usize) -> SynthSpec {
        SynthSpec {
            kind,
            blocks,
            batch: 2,
            size: 4,
            channels: 8,
            dtype: DType::FLOAT,
        }
    }

    const KINDS: [SynthKind; 4] = [
        SynthKind::Residual,
        SynthKind::Transformer,
        SynthKind::Mixed,
        SynthKind::Narrow,
    ];

    #[test]
    fn every_kind_analyzes_with_the_loss_and_all_phases() {
        for kind in KINDS {
            for blocks in [0, 1, 3] {
                let spec = small(kind, blocks);
                let bytes = graphdef(&spec);
                let a = crate::analyze(&bytes, &BuildOptions::default()).unwrap();
                let g = &a.graph;
                assert_eq!(
                    g.tensor_name(g.loss),
                    "sparse_categorical_crossentropy/div_no_nan:0",
                    "{kind:?} {blocks}"
                );
                for p in [Phase::Forward, Phase::Backward, Phase::Update] {
                    assert!(g.phase.contains(&p), "{kind:?} {blocks}: no {p:?} op");
                }
                assert_eq!(g.num_nodes(), node_count(&spec), "{kind:?} {blocks}");
                assert!(a.liveness.peak_bytes > g.persistent_bytes);
            }
        }
    }

    #[test]
    fn generation_is_deterministic() {
        for kind in KINDS {
            let spec = small(kind, 2);
            assert_eq!(graphdef(&spec), graphdef(&spec));
        }
    }

    #[test]
    fn gradient_and_update_ops_are_in_their_phases() {
        let bytes = graphdef(&small(SynthKind::Mixed, 2));
        let g = crate::analyze(&bytes, &BuildOptions::default())
            .unwrap()
            .graph;
        for (i, n) in g.nodes.iter().enumerate() {
            let op = g.ops[n.op as usize].as_ref();
            if op.ends_with("Grad") || op.starts_with("Conv2DBackprop") {
                assert_eq!(g.phase[i], Phase::Backward, "{}", n.name);
            }
            if op.starts_with("Assign") && n.name.starts_with("sgd/") {
                assert_eq!(g.phase[i], Phase::Update, "{}", n.name);
            }
            if op == "Conv2D" || op == "Softmax" {
                assert_eq!(g.phase[i], Phase::Forward, "{}", n.name);
            }
        }
    }

    #[test]
    fn other_dtypes_and_tiny_sizes_build() {
        for dtype in [DType::HALF, DType::BFLOAT16, DType::DOUBLE, DType::INT32] {
            for kind in KINDS {
                let spec = SynthSpec {
                    kind,
                    blocks: 2,
                    batch: 1,
                    size: 1,
                    channels: 1,
                    dtype,
                };
                let a = crate::analyze(&graphdef(&spec), &BuildOptions::default()).unwrap();
                let want = if dtype == DType::INT32 {
                    DType::FLOAT
                } else {
                    dtype
                };
                assert_eq!(a.graph.tensors[a.graph.loss as usize].dtype, want);
            }
        }
    }

    #[test]
    fn blocks_for_nodes_lands_near_the_target() {
        for kind in KINDS {
            for target in [1_000usize, 10_000, 100_000] {
                let blocks = blocks_for_nodes(kind, target);
                let n = node_count(&SynthSpec {
                    kind,
                    blocks,
                    ..SynthSpec::default()
                });
                let err = (n as f64 - target as f64).abs() / target as f64;
                assert!(err < 0.35, "{kind:?} {target}: {blocks} blocks, {n} nodes");
            }
        }
    }

    #[test]
    fn f16_bits_of_common_constants() {
        assert_eq!(f16_bits(1.0), 0x3c00);
        assert_eq!(f16_bits(2.0), 0x4000);
        assert_eq!(f16_bits(-0.5), 0xb800);
        assert_eq!(f16_bits(1e9), 0x7c00);
        assert_eq!(f16_bits(0.0), 0);
    }
}
