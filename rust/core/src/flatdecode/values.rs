//! The attribute values and the library of a `GraphDef`, as the decoder
//! of [`super`] reads them: every value walked and checked, only the data
//! the build needs kept (in the flat [`Arrays`]).
//!
//! # Complexity
//! O(bytes of the value); no recursion deeper than three message levels
//! (AttrValue > ListValue > TensorShapeProto).

use super::{Arrays, ShapeBuf, ShapeRec, Span, UNKNOWN_RANK};
use crate::dtype::DType;
use crate::wire::{Scan, Scanned, LEN};

/// Where the data of an attribute value goes, if anywhere.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Want {
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
pub(super) enum ListKind {
    /// Shapes (one or more).
    Shapes,
    /// No entry of any kind (the reference's empty list of shapes).
    Empty,
    Types,
    Funcs,
    Ints,
}

/// An attribute value, as the variant `graphdef::decode_attr_value` gives,
/// with where its data was stored (`NOT_STORED` if it was not).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Val {
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

pub(super) const NOT_STORED: u32 = u32::MAX;

impl Val {
    pub(super) fn names_function(self) -> bool {
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

/// An `AttrValue`: the last field of a known kind wins, as in the reference.
/// Only the data of that field stays in `arrays`, and only where `want`
/// asks for it.
#[inline]
pub(super) fn attr_value(b: &[u8], want: Want, arrays: &mut Arrays) -> Scanned<Val> {
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
#[inline]
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
        ListKind::Empty
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
#[inline]
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
pub(super) fn library<'a>(b: &'a [u8], out: &mut Vec<&'a str>) -> Scanned<()> {
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
