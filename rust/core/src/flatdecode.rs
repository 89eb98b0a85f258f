//! Direct decoding of a serialized `GraphDef` for the direct build route
//! ([`crate::direct`]): one callback per `NodeDef`, with its strings
//! borrowed from the input and the attributes the build reads folded into a
//! few numbers; shapes and type lists go to flat arrays shared by all nodes.
//! Nothing is allocated per node.
//!
//! It reads the same fields in the same way as [`crate::graphdef::decode`]
//! (the reference decoder) and rejects at least what it rejects: every
//! attribute value the reference decodes is walked and checked here too,
//! even where the build does not need it, so a `GraphDef` accepted here is
//! one the reference accepts, with the same meaning. Error messages are left
//! to the reference: the direct route re-runs it on any error. The one
//! exception is UTF-8: the name, op and device of a node (the last of each,
//! where a field repeats) and its inputs are handed over as bytes, for the
//! caller to check (or to find equal to a checked string); every other
//! string is checked here.
//!
//! # Complexity
//! O(bytes) time; memory O(N + D + L) for N nodes, D shape dimensions and L
//! type-list entries (flat arrays), plus the inputs of one node at a time.
//! No recursion deeper than five message levels.

use crate::dtype::DType;
use crate::wire::{Malformed, Scan, Scanned, LEN};

/// [`ShapeRec::rank`] of a shape of unknown rank.
pub(crate) const UNKNOWN_RANK: u32 = u32::MAX;

/// A shape in a [`ShapeBuf`]: `rank` dimensions from `off` in
/// [`ShapeBuf::dims`], or [`UNKNOWN_RANK`] (then no dimensions).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ShapeRec {
    pub off: u32,
    pub rank: u32,
}

/// The dimensions of shape `s` in `dims` (the dimensions of a [`ShapeBuf`]);
/// `None` for an unknown rank.
pub(crate) fn dims_in(dims: &[i64], s: ShapeRec) -> Option<&[i64]> {
    if s.rank == UNKNOWN_RANK {
        return None;
    }
    dims.get(s.off as usize..s.off as usize + s.rank as usize)
}

/// Shapes and their dimensions, concatenated.
#[derive(Debug, Default)]
pub(crate) struct ShapeBuf {
    pub dims: Vec<i64>,
    pub shapes: Vec<ShapeRec>,
}

impl ShapeBuf {
    /// The dimensions of a shape; `None` for an unknown rank.
    pub(crate) fn dims_of(&self, s: ShapeRec) -> Option<&[i64]> {
        dims_in(&self.dims, s)
    }

    fn mark(&self) -> (usize, usize) {
        (self.dims.len(), self.shapes.len())
    }

    fn rollback(&mut self, (d, s): (usize, usize)) {
        self.dims.truncate(d);
        self.shapes.truncate(s);
    }
}

/// The flat arrays the decoder fills.
#[derive(Debug, Default)]
pub(crate) struct Arrays {
    /// The `_output_shapes` of every node that has them, in node order: the
    /// shapes of node after node, nothing else.
    pub out: ShapeBuf,
    /// Shapes of `shape` attributes and `Const` values (fallback shapes).
    pub side: ShapeBuf,
    /// Entries of type lists, each folded by [`DType::from_proto`] (0: not a
    /// known dtype).
    pub types: Vec<u8>,
}

/// A range of entries in one of the [`Arrays`].
pub(crate) type Span = (u32, u32);

/// Number of type-list attributes read, in the priority order of
/// [`crate::build`]'s dtype rule: `Tout`, `output_types`, `out_types`,
/// `component_types`, `T`.
pub(crate) const LIST_KEYS: usize = 5;

/// Index of `T` in [`NodeAttrs::lists`].
pub(crate) const T_LIST: usize = 4;

/// What the build reads of one node's attributes (see `build::specs_from_raw`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct NodeAttrs {
    /// Shapes of the outputs (a span of [`Arrays::out`]'s shapes) when the
    /// first `_output_shapes` is a shape or a list of shapes.
    pub output_shapes: Option<Span>,
    /// The shape of a `shape` attribute, else of a `value` tensor, in
    /// [`Arrays::side`]; `None`: unknown rank.
    pub fallback: Option<ShapeRec>,
    /// The node has a `shape` or a `value` attribute (of any kind).
    pub has_shape_or_value: bool,
    /// The type lists, in [`LIST_KEYS`] order: spans of [`Arrays::types`].
    pub lists: [Option<Span>; LIST_KEYS],
    /// The dtype of any output that no type list of the right length gives
    /// (`VarHandleOp`'s resource, or the first single type attribute).
    pub single: Option<DType>,
    /// Some attribute names a function.
    pub calls_function: bool,
}

/// One decoded `NodeDef`. The strings are not checked as UTF-8.
#[derive(Debug)]
pub(crate) struct NodeView<'a, 'n> {
    pub name: &'a [u8],
    pub op: &'a [u8],
    pub device: &'a [u8],
    /// Input references in TensorFlow form, in file order.
    pub inputs: &'n [&'a [u8]],
    pub attrs: NodeAttrs,
}

/// Decodes `bytes`, calling `on_node` for every node in file order; returns
/// the names of the functions of the `library`.
///
/// # Errors
/// [`Malformed`] where the reference decoder fails (but for the UTF-8 of
/// the byte strings of [`NodeView`]), or where `on_node` does.
///
/// # Complexity
/// O(bytes), plus the callbacks.
pub(crate) fn decode<'a>(
    bytes: &'a [u8],
    arrays: &mut Arrays,
    mut on_node: impl FnMut(&NodeView<'a, '_>, &Arrays) -> Scanned<()>,
) -> Scanned<Vec<&'a str>> {
    let mut functions = Vec::new();
    let mut st = NodeState::default();
    let mut r = Scan::new(bytes);
    while !r.at_end() {
        let (field, wire) = r.key()?;
        match (field, wire) {
            (1, LEN) => {
                let view = st.decode(r.bytes()?, arrays)?;
                on_node(&view, arrays)?;
            }
            (2, LEN) => library(r.bytes()?, &mut functions)?,
            (1 | 2, _) => return Err(Malformed),
            _ => r.skip(wire)?,
        }
    }
    Ok(functions)
}

/// Slots of the attributes whose first occurrence the build reads.
#[derive(Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum Slot {
    OutputShapes = 0,
    // The type lists, in LIST_KEYS order (T doubles as a single type).
    Tout,
    OutputTypes,
    OutTypes,
    ComponentTypes,
    T,
    // Single types, in the order of the rule (Tidx only for Range).
    OutType,
    OutputType,
    DstT,
    Dtype,
    Tparams,
    Tidx,
    Shape,
    Value,
}

const SLOTS: usize = Slot::Value as usize + 1;
const LIST_SLOTS: [Slot; LIST_KEYS] = [
    Slot::Tout,
    Slot::OutputTypes,
    Slot::OutTypes,
    Slot::ComponentTypes,
    Slot::T,
];
const SINGLE_SLOTS: [Slot; 6] = [
    Slot::OutType,
    Slot::OutputType,
    Slot::DstT,
    Slot::Dtype,
    Slot::T,
    Slot::Tparams,
];

/// How an attribute key is read: `None` for keys the reference decoder
/// skips unread (`graphdef::is_read_attr` is false), `Some(None)` for keys
/// it decodes that the build does not use.
fn slot_of(key: &[u8]) -> Option<Option<Slot>> {
    Some(Some(match key {
        b"_output_shapes" => Slot::OutputShapes,
        b"T" => Slot::T,
        b"dtype" => Slot::Dtype,
        b"out_type" => Slot::OutType,
        b"output_type" => Slot::OutputType,
        b"DstT" => Slot::DstT,
        b"Tout" => Slot::Tout,
        b"Tidx" => Slot::Tidx,
        b"Tparams" => Slot::Tparams,
        b"output_types" => Slot::OutputTypes,
        b"out_types" => Slot::OutTypes,
        b"component_types" => Slot::ComponentTypes,
        b"shape" => Slot::Shape,
        b"value" => Slot::Value,
        b"_handle_dtypes" | b"_handle_shapes" | b"equation" | b"transpose_a" | b"transpose_b"
        | b"adj_x" | b"adj_y" | b"ksize" | b"strides" | b"data_format" | b"f" | b"then_branch"
        | b"else_branch" | b"cond" | b"body" | b"branches" | b"_class" => return Some(None),
        _ => return None,
    }))
}

/// Where the data of an attribute value goes, if anywhere.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Want {
    Nothing,
    /// A shape or a list of shapes into [`Arrays::out`].
    OutShapes,
    /// A shape into [`Arrays::side`].
    SideShape,
    /// A tensor's shape into [`Arrays::side`].
    SideTensorShape,
    /// A list of types into [`Arrays::types`].
    Types,
}

/// The list kinds of `graphdef::decode_list`, in its priority order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ListKind {
    /// Shapes, or an empty list.
    Shapes,
    Types,
    Funcs,
    Ints,
}

/// An attribute value, as the variant `graphdef::decode_attr_value` gives,
/// with where its data was stored (`NOT_STORED` if it was not).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Val {
    Other,
    Scalar,
    Type(i64),
    Shape(u32),
    TensorShape(u32),
    Func,
    List {
        kind: ListKind,
        shapes: Span,
        types: Span,
    },
}

const NOT_STORED: u32 = u32::MAX;

impl Val {
    fn names_function(self) -> bool {
        matches!(
            self,
            Val::Func
                | Val::List {
                    kind: ListKind::Funcs,
                    ..
                }
        )
    }
}

/// The state of one node being decoded; reused from node to node.
struct NodeState<'a> {
    inputs: Vec<&'a [u8]>,
    /// The value of the first occurrence of each slot, valid where `seen`
    /// has the slot's bit.
    first: [Val; SLOTS],
    seen: u16,
    calls_function: bool,
}

impl Default for NodeState<'_> {
    fn default() -> Self {
        NodeState {
            inputs: Vec::new(),
            first: [Val::Other; SLOTS],
            seen: 0,
            calls_function: false,
        }
    }
}

impl<'a> NodeState<'a> {
    fn decode(&mut self, b: &'a [u8], arrays: &mut Arrays) -> Scanned<NodeView<'a, '_>> {
        self.inputs.clear();
        self.seen = 0;
        self.calls_function = false;
        let (mut name, mut op, mut device): (&[u8], &[u8], &[u8]) = (b"", b"", b"");
        let mut r = Scan::new(b);
        while !r.at_end() {
            let (field, wire) = r.key()?;
            match (field, wire) {
                (1, LEN) => name = replace(name, r.bytes()?)?,
                (2, LEN) => op = replace(op, r.bytes()?)?,
                (3, LEN) => self.inputs.push(r.bytes()?),
                (4, LEN) => device = replace(device, r.bytes()?)?,
                (5, LEN) => self.attr_entry(r.bytes()?, arrays)?,
                (1..=5, _) => return Err(Malformed),
                _ => r.skip(wire)?,
            }
        }
        let limit = u32::MAX as usize;
        if [
            arrays.out.dims.len(),
            arrays.out.shapes.len(),
            arrays.side.dims.len(),
            arrays.side.shapes.len(),
            arrays.types.len(),
        ]
        .iter()
        .any(|&n| n >= limit)
        {
            return Err(Malformed);
        }
        let attrs = self.summary(op, arrays);
        Ok(NodeView {
            name,
            op,
            device,
            inputs: &self.inputs,
            attrs,
        })
    }

    fn attr_entry(&mut self, b: &'a [u8], arrays: &mut Arrays) -> Scanned<()> {
        let mut r = Scan::new(b);
        let mut key: &[u8] = b"";
        let mut value: Option<&[u8]> = None;
        while !r.at_end() {
            let (field, wire) = r.key()?;
            match (field, wire) {
                (1, LEN) => key = replace(key, r.bytes()?)?,
                (2, LEN) => value = Some(r.bytes()?),
                _ => r.skip(wire)?,
            }
        }
        let Some(slot) = slot_of(key) else {
            // The reference reads every key as a string.
            if !key.is_ascii() {
                std::str::from_utf8(key).map_err(|_| Malformed)?;
            }
            return Ok(());
        };
        let first = slot.filter(|&s| self.seen & (1 << s as u16) == 0);
        let want = match first {
            Some(Slot::OutputShapes) => Want::OutShapes,
            Some(Slot::Shape) => Want::SideShape,
            Some(Slot::Value) => Want::SideTensorShape,
            Some(s) if LIST_SLOTS.contains(&s) => Want::Types,
            _ => Want::Nothing,
        };
        let v = match value {
            Some(v) => attr_value(v, want, arrays)?,
            None => Val::Other,
        };
        self.calls_function |= v.names_function();
        if let Some(s) = first {
            self.first[s as usize] = v;
            self.seen |= 1 << s as u16;
        }
        Ok(())
    }

    /// Folds the first occurrences into what the build reads.
    fn summary(&self, op: &[u8], arrays: &Arrays) -> NodeAttrs {
        let get = |s: Slot| (self.seen & (1 << s as u16) != 0).then(|| self.first[s as usize]);
        let output_shapes = match get(Slot::OutputShapes) {
            Some(Val::List {
                kind: ListKind::Shapes,
                shapes,
                ..
            }) => Some(shapes),
            Some(Val::Shape(i)) if i != NOT_STORED => Some((i, i + 1)),
            _ => None,
        };
        // First occurrences of `shape` and `value` are always stored.
        let side = |i: u32| arrays.side.shapes.get(i as usize).copied();
        let fallback = match (get(Slot::Shape), get(Slot::Value)) {
            (Some(Val::Shape(i)), _) => side(i),
            (_, Some(Val::TensorShape(i))) => side(i),
            _ => None,
        };
        let lists = LIST_SLOTS.map(|s| match get(s) {
            Some(Val::List {
                kind: ListKind::Types,
                types,
                ..
            }) => Some(types),
            _ => None,
        });
        let single = if op == b"VarHandleOp" {
            Some(DType::RESOURCE)
        } else {
            let keys: &[Slot] = if op == b"Range" {
                &[Slot::Tidx]
            } else {
                &SINGLE_SLOTS
            };
            keys.iter().find_map(|&s| match get(s) {
                Some(Val::Type(t)) => DType::from_proto(t),
                _ => None,
            })
        };
        NodeAttrs {
            output_shapes,
            fallback,
            has_shape_or_value: get(Slot::Shape).is_some() || get(Slot::Value).is_some(),
            lists,
            single,
            calls_function: self.calls_function,
        }
    }
}

/// `new`, for a string field read again: the reference checks every
/// occurrence as UTF-8, the caller checks only the last, so the one it
/// replaces is checked here.
#[inline]
fn replace<'a>(old: &[u8], new: &'a [u8]) -> Scanned<&'a [u8]> {
    if !old.is_ascii() {
        std::str::from_utf8(old).map_err(|_| Malformed)?;
    }
    Ok(new)
}

/// An `AttrValue`: the last field of a known kind wins, as in the reference.
/// Only the data of that field stays in `arrays`, and only where `want`
/// asks for it.
fn attr_value(b: &[u8], want: Want, arrays: &mut Arrays) -> Scanned<Val> {
    let marks = (arrays.out.mark(), arrays.side.mark(), arrays.types.len());
    let mut r = Scan::new(b);
    let mut out = Val::Other;
    while !r.at_end() {
        let (field, wire) = r.key()?;
        if !matches!((field, wire), (1 | 2 | 7 | 8 | 10, LEN) | (3 | 5 | 6, 0)) {
            r.skip(wire)?;
            continue;
        }
        if want != Want::Nothing {
            arrays.out.rollback(marks.0);
            arrays.side.rollback(marks.1);
            arrays.types.truncate(marks.2);
        }
        out = match field {
            1 => list(r.bytes()?, want, arrays)?,
            2 => {
                r.bytes()?;
                Val::Scalar
            }
            3 | 5 => {
                r.varint()?;
                Val::Scalar
            }
            6 => Val::Type(r.varint()? as i64),
            7 => {
                let to = match want {
                    Want::OutShapes => Some(&mut arrays.out),
                    Want::SideShape => Some(&mut arrays.side),
                    _ => None,
                };
                Val::Shape(shape(r.bytes()?, to)?)
            }
            8 => {
                let to = (want == Want::SideTensorShape).then_some(&mut arrays.side);
                Val::TensorShape(tensor_shape(r.bytes()?, to)?)
            }
            _ => {
                func_name(r.bytes()?)?;
                Val::Func
            }
        };
    }
    Ok(out)
}

/// A `ListValue`, kind chosen as `graphdef::decode_list` does.
fn list(b: &[u8], want: Want, arrays: &mut Arrays) -> Scanned<Val> {
    let s0 = arrays.out.shapes.len() as u32;
    let t0 = arrays.types.len() as u32;
    let (mut ints, mut types, mut shapes, mut funcs) = (0usize, 0usize, 0usize, 0usize);
    let mut r = Scan::new(b);
    while !r.at_end() {
        let (field, wire) = r.key()?;
        match field {
            3 => r.for_each_varint(wire, |_| ints += 1)?,
            6 => {
                let keep = want == Want::Types;
                let out = &mut arrays.types;
                r.for_each_varint(wire, |v| {
                    types += 1;
                    if keep {
                        out.push(DType::from_proto(v as i64).map_or(0, |d| d.0));
                    }
                })?
            }
            7 if wire == LEN => {
                let to = (want == Want::OutShapes).then_some(&mut arrays.out);
                shape(r.bytes()?, to)?;
                shapes += 1;
            }
            9 if wire == LEN => {
                func_name(r.bytes()?)?;
                funcs += 1;
            }
            _ => r.skip(wire)?,
        }
    }
    let kind = if shapes > 0 {
        ListKind::Shapes
    } else if types > 0 {
        ListKind::Types
    } else if funcs > 0 {
        ListKind::Funcs
    } else if ints > 0 {
        ListKind::Ints
    } else {
        ListKind::Shapes
    };
    // Lengths past u32 are rejected at the end of the node.
    let span = |start: u32, n: usize, stored: bool| {
        if stored {
            (start, start.wrapping_add(n as u32))
        } else {
            (NOT_STORED, NOT_STORED)
        }
    };
    Ok(Val::List {
        kind,
        shapes: span(s0, shapes, want == Want::OutShapes),
        types: span(t0, types, want == Want::Types),
    })
}

/// A `TensorShapeProto`, as `graphdef::decode_shape` reads it; stored in
/// `to` if given. Returns the index of the stored shape, or `NOT_STORED`.
fn shape(b: &[u8], to: Option<&mut ShapeBuf>) -> Scanned<u32> {
    let mut to = to;
    let off = to.as_ref().map_or(0, |t| t.dims.len());
    let mut unknown_rank = false;
    let mut r = Scan::new(b);
    while !r.at_end() {
        let (field, wire) = r.key()?;
        match (field, wire) {
            (2, LEN) => {
                let mut d = Scan::new(r.bytes()?);
                let mut size = 0i64;
                while !d.at_end() {
                    let (f, w) = d.key()?;
                    if f == 1 && w == 0 {
                        size = d.varint()? as i64;
                    } else {
                        d.skip(w)?;
                    }
                }
                if let Some(t) = to.as_mut() {
                    t.dims.push(size);
                }
            }
            (3, 0) => unknown_rank = r.varint()? != 0,
            _ => r.skip(wire)?,
        }
    }
    let Some(t) = to else {
        return Ok(NOT_STORED);
    };
    let rank = if unknown_rank {
        t.dims.truncate(off);
        UNKNOWN_RANK
    } else {
        (t.dims.len() - off) as u32
    };
    t.shapes.push(ShapeRec {
        off: off as u32,
        rank,
    });
    Ok((t.shapes.len() - 1) as u32)
}

/// The `tensor_shape` of a `TensorProto` (last one wins; a scalar if none).
fn tensor_shape(b: &[u8], to: Option<&mut ShapeBuf>) -> Scanned<u32> {
    let mut to = to;
    let mark = to.as_ref().map(|t| t.mark());
    let mut found = None;
    let mut r = Scan::new(b);
    while !r.at_end() {
        let (field, wire) = r.key()?;
        if field == 2 && wire == LEN {
            if let (Some(t), Some(m)) = (to.as_mut(), mark) {
                t.rollback(m);
            }
            found = Some(shape(r.bytes()?, to.as_deref_mut())?);
        } else {
            r.skip(wire)?;
        }
    }
    match (found, to) {
        (Some(i), _) => Ok(i),
        (None, Some(t)) => {
            t.shapes.push(ShapeRec {
                off: t.dims.len() as u32,
                rank: 0,
            });
            Ok((t.shapes.len() - 1) as u32)
        }
        (None, None) => Ok(NOT_STORED),
    }
}

/// Checks a `NameAttrList` as `graphdef::decode_func_name` reads it.
fn func_name(b: &[u8]) -> Scanned<()> {
    let mut r = Scan::new(b);
    while !r.at_end() {
        let (field, wire) = r.key()?;
        if field == 1 && wire == LEN {
            r.str()?;
        } else {
            r.skip(wire)?;
        }
    }
    Ok(())
}

/// The function names of a `FunctionDefLibrary`, as `graphdef::decode_library`.
fn library<'a>(b: &'a [u8], out: &mut Vec<&'a str>) -> Scanned<()> {
    let mut r = Scan::new(b);
    while !r.at_end() {
        let (field, wire) = r.key()?;
        if field == 1 && wire == LEN {
            let mut f = Scan::new(r.bytes()?);
            while !f.at_end() {
                let (ff, fw) = f.key()?;
                if ff == 1 && fw == LEN {
                    out.push(op_def_name(f.bytes()?)?);
                } else {
                    f.skip(fw)?;
                }
            }
        } else {
            r.skip(wire)?;
        }
    }
    Ok(())
}

fn op_def_name(b: &[u8]) -> Scanned<&str> {
    let mut r = Scan::new(b);
    let mut name = "";
    while !r.at_end() {
        let (field, wire) = r.key()?;
        if field == 1 && wire == LEN {
            name = r.str()?;
        } else {
            r.skip(wire)?;
        }
    }
    Ok(name)
}
