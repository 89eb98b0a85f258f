//! The writer of the synthetic `GraphDef`s: shapes, tensor references,
//! names, attributes, and [`Gen`], which appends one `NodeDef` at a time
//! (or, in a dry run, only counts it). The graph families (`step.rs`,
//! `residual.rs`, `transformer.rs`, `dag.rs`, `narrow.rs`) write through it.
//!
//! # Complexity
//! O(1) amortised per node, O(bytes) per attribute.

use super::{SynthKind, SynthSpec};
use crate::dtype::DType;
use crate::wire::{Writer, FIXED32, LEN};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Shp {
    pub(super) d: [i64; 4],
    pub(super) r: u8,
}

impl Shp {
    pub(super) const SCALAR: Shp = Shp { d: [0; 4], r: 0 };

    pub(super) fn new(dims: &[i64]) -> Shp {
        let mut d = [0; 4];
        d[..dims.len()].copy_from_slice(dims);
        Shp {
            d,
            r: dims.len() as u8,
        }
    }

    pub(super) fn dims(&self) -> &[i64] {
        &self.d[..self.r as usize]
    }

    pub(super) fn last(&self) -> i64 {
        self.d[self.r as usize - 1]
    }

    pub(super) fn with_last(mut self, c: i64) -> Shp {
        self.d[self.r as usize - 1] = c;
        self
    }

    /// The shape with `axes` reduced to 1 (`keep_dims`).
    pub(super) fn keep(mut self, axes: &[i64]) -> Shp {
        for &a in axes {
            self.d[a as usize] = 1;
        }
        self
    }
}

pub(super) fn s1(a: i64) -> Shp {
    Shp::new(&[a])
}

pub(super) fn s2(a: i64, b: i64) -> Shp {
    Shp::new(&[a, b])
}

pub(super) fn s4(a: i64, b: i64, c: i64, d: i64) -> Shp {
    Shp::new(&[a, b, c, d])
}

/// Output `idx` of node `node` (an internal id: the position in the output).
#[derive(Debug, Clone, Copy)]
pub(super) struct T {
    pub(super) node: u32,
    pub(super) idx: u32,
    pub(super) s: Shp,
}

/// A node name below the current scope: `pre`, `_k` when `k > 0`, `post`.
#[derive(Debug, Clone, Copy)]
pub(super) struct Nm<'a>(pub(super) &'a str, pub(super) usize, pub(super) &'a str);

impl<'a> From<&'a str> for Nm<'a> {
    fn from(s: &'a str) -> Self {
        Nm(s, 0, "")
    }
}

/// A constant tensor's values.
#[derive(Debug, Clone, Copy)]
pub(super) enum Val<'a> {
    Ints(&'a [i64]),
    Float(f64),
}

/// An attribute. `T` is the type attribute set to the spec's float dtype.
#[derive(Debug, Clone, Copy)]
pub(super) enum A<'a> {
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

pub(super) const I32: DType = DType::INT32;
pub(super) const I64: DType = DType::INT64;
pub(super) const CONV: &[A<'static>] = &[
    A::T,
    A::Ints("strides", &[1, 1, 1, 1]),
    A::Str("padding", "SAME"),
    A::Str("data_format", "NHWC"),
    A::Ints("dilations", &[1, 1, 1, 1]),
];
pub(super) const BIAS: &[A<'static>] = &[A::T, A::Str("data_format", "NHWC")];
pub(super) const KEEP: &[A<'static>] = &[A::T, A::Type("Tidx", I32), A::Bool("keep_dims", true)];
pub(super) const DROP: &[A<'static>] = &[A::T, A::Type("Tidx", I32), A::Bool("keep_dims", false)];
pub(super) const MM_NN: &[A<'static>] = &[
    A::T,
    A::Bool("transpose_a", false),
    A::Bool("transpose_b", false),
];
pub(super) const MM_NT: &[A<'static>] = &[
    A::T,
    A::Bool("transpose_a", false),
    A::Bool("transpose_b", true),
];
pub(super) const MM_TN: &[A<'static>] = &[
    A::T,
    A::Bool("transpose_a", true),
    A::Bool("transpose_b", false),
];
pub(super) const BMM_NN: &[A<'static>] = &[A::T, A::Bool("adj_x", false), A::Bool("adj_y", false)];
pub(super) const BMM_NT: &[A<'static>] = &[A::T, A::Bool("adj_x", false), A::Bool("adj_y", true)];
pub(super) const BMM_TN: &[A<'static>] = &[A::T, A::Bool("adj_x", true), A::Bool("adj_y", false)];
pub(super) const TRANSPOSE: &[A<'static>] = &[A::T, A::Type("Tperm", I32)];
pub(super) const HEADS_PERM: &[i64] = &[0, 2, 1, 3];
pub(super) const CLASSES: i64 = 10;

// ---------------------------------------------------------------------------
// The writer.

#[derive(Debug, Clone)]
pub(super) struct VarRef {
    pub(super) handle: T,
    pub(super) read: T,
    /// Index in `Gen::vars` (`usize::MAX` for a non-trainable variable).
    pub(super) idx: usize,
}

pub(super) struct Var {
    pub(super) handle: T,
    pub(super) read: T,
    pub(super) grad: Option<T>,
}

pub(super) struct Gen {
    pub(super) dry: bool,
    pub(super) f: DType,
    pub(super) batch: i64,
    pub(super) size: i64,
    pub(super) channels: i64,
    pub(super) kind: SynthKind,
    pub(super) blocks: usize,
    pub(super) count: u32,
    pub(super) out: Writer,
    /// Scratch for one `NodeDef`, one `AttrValue` and one nested message.
    pub(super) nb: Writer,
    pub(super) ab: Writer,
    pub(super) lb: Writer,
    /// All node names, concatenated; name i ends at `ends[i]`.
    pub(super) names: String,
    pub(super) ends: Vec<usize>,
    pub(super) scope: String,
    pub(super) vars: Vec<Var>,
    /// Variable reads and writes: control inputs of the final `NoOp`.
    pub(super) stateful: Vec<u32>,
    pub(super) addn: usize,
}

impl Gen {
    pub(super) fn new(spec: &SynthSpec, dry: bool) -> Gen {
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

    pub(super) fn set_scope(&mut self, parts: &[&str]) {
        self.scope.clear();
        for (i, p) in parts.iter().enumerate() {
            if i > 0 {
                self.scope.push('/');
            }
            self.scope.push_str(p);
        }
    }

    pub(super) fn name_of(&self, node: u32) -> &str {
        let n = node as usize;
        let start = if n == 0 { 0 } else { self.ends[n - 1] };
        &self.names[start..self.ends[n]]
    }

    /// Writes one `NodeDef` and returns its id.
    pub(super) fn op<'a>(
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
    pub(super) fn f1<'a>(&mut self, name: impl Into<Nm<'a>>, op: &str, ins: &[T], s: Shp) -> T {
        self.f1a(name, op, ins, s, &[A::T])
    }

    pub(super) fn f1a<'a>(
        &mut self,
        name: impl Into<Nm<'a>>,
        op: &str,
        ins: &[T],
        s: Shp,
        a: &[A],
    ) -> T {
        let node = self.op(name, op, ins, &[], &[s], a);
        T { node, idx: 0, s }
    }

    pub(super) fn placeholder<'a>(&mut self, name: impl Into<Nm<'a>>, dt: DType, s: Shp) -> T {
        let a = [A::Type("dtype", dt), A::Shape("shape", s)];
        let node = self.op(name, "Placeholder", &[], &[], &[s], &a);
        T { node, idx: 0, s }
    }

    pub(super) fn read<'a>(
        &mut self,
        name: impl Into<Nm<'a>>,
        h: T,
        s: Shp,
        dt: DType,
        ctl: &[u32],
    ) -> T {
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

    pub(super) fn var(&mut self, leaf: &str, s: Shp, trainable: bool) -> VarRef {
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

    pub(super) fn set_grad(&mut self, v: &VarRef, g: T) {
        if let Some(var) = self.vars.get_mut(v.idx) {
            var.grad = Some(g);
        }
    }

    pub(super) fn cint<'a>(&mut self, name: impl Into<Nm<'a>>, vals: &[i64]) -> T {
        let s = s1(vals.len() as i64);
        let a = [A::Type("dtype", I32), A::Value(I32, s, Val::Ints(vals))];
        let node = self.op(name, "Const", &[], &[], &[s], &a);
        T { node, idx: 0, s }
    }

    pub(super) fn cscalar<'a>(&mut self, name: impl Into<Nm<'a>>, dt: DType, v: Val) -> T {
        let s = Shp::SCALAR;
        let a = [A::Type("dtype", dt), A::Value(dt, s, v)];
        let node = self.op(name, "Const", &[], &[], &[s], &a);
        T { node, idx: 0, s }
    }

    pub(super) fn cfloat<'a>(&mut self, name: impl Into<Nm<'a>>, v: f64) -> T {
        self.cscalar(name, self.f, Val::Float(v))
    }

    pub(super) fn reshape<'a>(&mut self, name: impl Into<Nm<'a>>, t: T, s: Shp) -> T {
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
    pub(super) fn addn(&mut self, ins: &[T]) -> T {
        let scope = std::mem::take(&mut self.scope);
        let k = self.addn;
        self.addn += 1;
        let a = [A::Int("N", ins.len() as i64), A::T];
        let t = self.f1a(Nm("AddN", k, ""), "AddN", ins, ins[0].s, &a);
        self.scope = scope;
        t
    }
}

pub(super) fn push_name(names: &mut String, scope: &str, n: Nm) {
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

pub(super) fn push_num(s: &mut String, v: u64) {
    crate::writeback::push_decimal(s, v);
}

pub(super) fn vlen(v: u64) -> usize {
    (64 - (v | 1).leading_zeros() as usize).div_ceil(7)
}

pub(super) fn field_len(payload: usize) -> usize {
    1 + vlen(payload as u64) + payload
}

/// Writes an input reference: `name`, `name:idx` or `^name`.
pub(super) fn put_input(nb: &mut Writer, pre: &str, name: &str, idx: u32) {
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

pub(super) fn put_entry(nb: &mut Writer, key: &str, value: &[u8]) {
    nb.key(5, LEN);
    nb.varint((field_len(key.len()) + field_len(value.len())) as u64);
    nb.bytes_field(1, key.as_bytes());
    nb.bytes_field(2, value);
}

/// Writes a `TensorShapeProto` as field `field` (zero sizes omitted, as
/// proto3 does).
pub(super) fn put_shape(w: &mut Writer, field: u32, s: &Shp) {
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

pub(super) fn put_packed(w: &mut Writer, field: u32, vals: impl Iterator<Item = u64> + Clone) {
    w.key(field, LEN);
    w.varint(vals.clone().map(vlen).sum::<usize>() as u64);
    for v in vals {
        w.varint(v);
    }
}

/// Writes the `AttrValue` of `a` into `ab` (using `lb` for nested messages)
/// and returns the attribute's key.
pub(super) fn put_attr<'a>(ab: &mut Writer, lb: &mut Writer, f: DType, a: &A<'a>) -> &'a str {
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
pub(super) fn put_tensor(w: &mut Writer, dt: DType, s: &Shp, v: Val) {
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
pub(super) fn f16_bits(v: f32) -> u16 {
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
