//! The GraphDef decoder: one callback per `NodeDef`, with its strings
//! borrowed from the input and the attributes the build reads folded into a
//! few numbers; shapes and type lists go to flat arrays shared by all nodes.
//! Nothing is allocated per node.
//!
//! What it accepts is the format the core reads (the reference decoder
//! `graphdef`, kept as a test oracle, reads the same fields the same way):
//! every attribute value the build could read is walked and checked, even
//! where the build does not need it. Malformed bytes give a
//! [`PlanError::Decode`] that says what is wrong, at which byte of the
//! input, in which node and attribute ([`report`]). The name, op and device
//! of a node (the last of each, where a field repeats) and its inputs are
//! handed over as bytes, for the caller to check as UTF-8 (or to find
//! equal to a checked string), with [`not_utf8`] for its error; every other
//! string is checked here.
//!
//! # Complexity
//! O(bytes) time; memory O(N + D + L) for N nodes, D shape dimensions and L
//! type-list entries (flat arrays), plus the inputs of one node at a time.
//! No recursion deeper than five message levels.

mod report;
mod values;

pub(crate) use report::not_utf8;

use crate::dtype::DType;
use crate::error::{PlanError, Result};
use crate::wire::{Fault, Malformed, Scan, Scanned, LEN};
use values::{attr_value, library, ListKind, Val, Want, NOT_STORED};

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

/// What the build reads of one node's attributes (see `build::specs_from_raw`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct NodeAttrs {
    /// Shapes of the outputs (a span of [`Arrays::out`]'s shapes) when the
    /// first `_output_shapes` is a shape or a list of shapes.
    pub output_shapes: Option<Span>,
    /// The shape of a `shape` attribute, else of a `value` tensor, in
    /// [`Arrays::side`]; `None`: unknown rank.
    pub fallback: Option<ShapeRec>,
    /// The first `T`: `None` if there is none, `Some(None)` if it is not a
    /// list of types, else the number of types it lists (0 for an empty list).
    pub t: Option<Option<u32>>,
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
    /// Kept in the decoder's state: a view is a few words to hand over.
    pub attrs: &'n NodeAttrs,
}

/// Decodes `bytes`, calling `on_node` for every node in file order (with
/// its index); returns the names of the functions of the `library`.
///
/// # Errors
/// [`PlanError::Decode`] for malformed bytes (but for the UTF-8 of the byte
/// strings of [`NodeView`]), and whatever `on_node` returns.
///
/// # Complexity
/// O(bytes), plus the callbacks.
pub(crate) fn decode<'a>(
    bytes: &'a [u8],
    arrays: &mut Arrays,
    mut on_node: impl FnMut(&NodeView<'a, '_>, &Arrays) -> Result<()>,
) -> Result<Vec<&'a str>> {
    let mut functions = Vec::new();
    let mut st = NodeState::default();
    let mut r = Scan::new(bytes);
    let mut index = 0usize;
    while !r.at_end() {
        let at_top = |m| report::malformed(bytes, m, &report::Place::Top { nodes: index });
        let (field, wire) = r.key().map_err(at_top)?;
        match (field, wire) {
            (1, LEN) => {
                let b = r.bytes().map_err(at_top)?;
                let view = match st.decode(b, arrays) {
                    Ok(view) => view,
                    Err(m) => return Err(st.malformed(bytes, m, index)),
                };
                on_node(&view, arrays)?;
                index += 1;
            }
            (2, LEN) => library(r.bytes().map_err(at_top)?, &mut functions)
                .map_err(|m| report::malformed(bytes, m, &report::Place::Library))?,
            (1 | 2, _) => {
                let f = Fault::GraphDefWire {
                    field: field as u8,
                    wire,
                };
                return Err(at_top(r.fault_here(f)));
            }
            _ => r.skip(wire).map_err(at_top)?,
        }
    }
    Ok(functions)
}

/// The name of node `index` of `bytes` (its last name field) where it lies
/// in `bytes`, for an error about it; `None` if there is no such node or
/// the bytes do not decode that far.
///
/// # Complexity
/// O(bytes), walking the fields of the `GraphDef` and of the node.
#[cold]
#[inline(never)]
pub(crate) fn name_in_input(bytes: &[u8], index: usize) -> Option<&[u8]> {
    node_fields(bytes, index, 1)?.pop()
}

/// The input references of node `index` of `bytes`, in `NodeDef` order,
/// for an error about them; `None` as for [`name_in_input`].
///
/// # Complexity
/// O(bytes), as [`name_in_input`].
#[cold]
#[inline(never)]
pub(crate) fn inputs_in_input(bytes: &[u8], index: usize) -> Option<Vec<&[u8]>> {
    node_fields(bytes, index, 3)
}

/// Every length-delimited field `field` of node `index` of `bytes`, in order.
fn node_fields(bytes: &[u8], index: usize, field: u32) -> Option<Vec<&[u8]>> {
    let mut r = Scan::new(bytes);
    let mut seen = 0;
    while !r.at_end() {
        let (f, wire) = r.key().ok()?;
        if (f, wire) != (1, LEN) {
            r.skip(wire).ok()?;
            continue;
        }
        let node = r.bytes().ok()?;
        if seen == index {
            let mut n = Scan::new(node);
            let mut found = Vec::new();
            while !n.at_end() {
                let (f, w) = n.key().ok()?;
                if (f, w) == (field, LEN) {
                    found.push(n.bytes().ok()?);
                } else {
                    n.skip(w).ok()?;
                }
            }
            return Some(found);
        }
        seen += 1;
    }
    None
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

/// The state of one node being decoded; reused from node to node.
struct NodeState<'a> {
    inputs: Vec<&'a [u8]>,
    /// The name read so far, and the key of the attribute being read (for
    /// errors).
    name: &'a [u8],
    attr: Option<&'a [u8]>,
    /// The value of the first occurrence of each slot, valid where `seen`
    /// has the slot's bit.
    first: [Val; SLOTS],
    seen: u16,
    calls_function: bool,
    /// The summary of the last node decoded.
    attrs: NodeAttrs,
}

impl Default for NodeState<'_> {
    fn default() -> Self {
        NodeState {
            inputs: Vec::new(),
            name: b"",
            attr: None,
            first: [Val::Other; SLOTS],
            seen: 0,
            calls_function: false,
            attrs: NodeAttrs {
                output_shapes: None,
                fallback: None,
                t: None,
                has_shape_or_value: false,
                lists: [None; LIST_KEYS],
                single: None,
                calls_function: false,
            },
        }
    }
}

impl<'a> NodeState<'a> {
    /// The error of `m`, met in node `index` of `input`.
    #[cold]
    #[inline(never)]
    fn malformed(&self, input: &[u8], m: Malformed, index: usize) -> PlanError {
        let place = report::Place::Node {
            index,
            name: self.name,
            attr: self.attr,
        };
        report::malformed(input, m, &place)
    }

    fn decode(&mut self, b: &'a [u8], arrays: &mut Arrays) -> Scanned<NodeView<'a, '_>> {
        self.inputs.clear();
        self.seen = 0;
        self.calls_function = false;
        self.name = b"";
        self.attr = None;
        let (mut op, mut device): (&[u8], &[u8]) = (b"", b"");
        let mut r = Scan::new(b);
        while !r.at_end() {
            let (field, wire) = r.key()?;
            match (field, wire) {
                (1, LEN) => self.name = replace(self.name, r.bytes()?)?,
                (2, LEN) => op = replace(op, r.bytes()?)?,
                (3, LEN) => self.inputs.push(r.bytes()?),
                (4, LEN) => device = replace(device, r.bytes()?)?,
                (5, LEN) => self.attr_entry(r.bytes()?, arrays)?,
                (1..=5, _) => {
                    let f = Fault::NodeDefWire {
                        field: field as u8,
                        wire,
                    };
                    return Err(r.fault_here(f));
                }
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
            return Err(Malformed::in_bytes(b, b.len(), Fault::TooLarge));
        }
        self.attr = None;
        self.summarize(op, arrays);
        Ok(NodeView {
            name: self.name,
            op,
            device,
            inputs: &self.inputs,
            attrs: &self.attrs,
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
            if !key.is_ascii() && std::str::from_utf8(key).is_err() {
                return Err(Malformed::in_bytes(key, 0, Fault::NotUtf8));
            }
            return Ok(());
        };
        self.attr = Some(key);
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
        self.attr = None;
        Ok(())
    }

    /// Folds the first occurrences into what the build reads, in
    /// [`NodeState::attrs`] (field by field: no summary to copy).
    fn summarize(&mut self, op: &[u8], arrays: &Arrays) {
        let (seen, first) = (self.seen, &self.first);
        let get = |s: Slot| (seen & (1 << s as u16) != 0).then(|| first[s as usize]);
        let a = &mut self.attrs;
        a.output_shapes = match get(Slot::OutputShapes) {
            Some(Val::List {
                kind: ListKind::Shapes | ListKind::Empty,
                shapes,
                ..
            }) => Some(shapes),
            Some(Val::Shape(i)) if i != NOT_STORED => Some((i, i + 1)),
            _ => None,
        };
        // First occurrences of `shape` and `value` are always stored.
        let side = |i: u32| arrays.side.shapes.get(i as usize).copied();
        a.fallback = match (get(Slot::Shape), get(Slot::Value)) {
            (Some(Val::Shape(i)), _) => side(i),
            (_, Some(Val::TensorShape(i))) => side(i),
            _ => None,
        };
        a.lists = LIST_SLOTS.map(|s| match get(s) {
            Some(Val::List {
                kind: ListKind::Types,
                types,
                ..
            }) => Some(types),
            _ => None,
        });
        a.single = if op == b"VarHandleOp" {
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
        a.t = get(Slot::T).map(|v| match v {
            Val::List {
                kind: ListKind::Types,
                types: (lo, hi),
                ..
            } => Some(hi - lo),
            Val::List {
                kind: ListKind::Empty,
                ..
            } => Some(0),
            _ => None,
        });
        a.has_shape_or_value = get(Slot::Shape).is_some() || get(Slot::Value).is_some();
        a.calls_function = self.calls_function;
    }
}

/// `new`, for a string field read again: the reference checks every
/// occurrence as UTF-8, the caller checks only the last, so the one it
/// replaces is checked here.
#[inline]
fn replace<'a>(old: &[u8], new: &'a [u8]) -> Scanned<&'a [u8]> {
    if !old.is_ascii() && std::str::from_utf8(old).is_err() {
        return Err(Malformed::in_bytes(old, 0, Fault::NotUtf8));
    }
    Ok(new)
}
