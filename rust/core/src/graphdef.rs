//! Decoding of a serialized TensorFlow `GraphDef` into borrowed node records.
//!
//! Only the fields the planner needs are read; everything else is skipped
//! without being interpreted. Strings borrow from the input bytes.
//!
//! This is the reference decoder, kept as the test oracle of the decoder
//! of [`crate::graph_from_bytes`] (the crate-private `flatdecode`,
//! with no record per node), which must accept what this one accepts, with
//! the same meaning, and reject the rest. Compiled for tests and with the
//! `testing` feature only.
//!
//! # Complexity
//! O(bytes): one pass over the input, no recursion deeper than five message
//! levels (GraphDef > NodeDef > AttrValue > ListValue > TensorShapeProto).

use crate::dtype::DType;
use crate::error::{PlanError, Result};
use crate::wire::{Reader, LEN};

pub(crate) use crate::build::Shape;

/// The attribute values the planner reads.
#[derive(Debug, Clone, PartialEq)]
pub enum Attr<'a> {
    Type(i64),
    Types(Vec<i64>),
    Shape(Shape),
    Shapes(Vec<Shape>),
    Int(i64),
    Ints(Vec<i64>),
    Str(&'a [u8]),
    Bool(bool),
    Func(&'a str),
    /// A list of functions (e.g. the branches of `Case`).
    Funcs(Vec<&'a str>),
    /// The shape of a `TensorProto` value (the `value` of a `Const`).
    TensorShape(Shape),
    Other,
}

/// One `NodeDef`, borrowing its strings from the input bytes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RawNode<'a> {
    pub name: &'a str,
    pub op: &'a str,
    pub device: &'a str,
    pub inputs: Vec<&'a str>,
    /// Attributes the planner reads, in file order.
    pub attrs: Vec<(&'a str, Attr<'a>)>,
}

impl<'a> RawNode<'a> {
    pub(crate) fn attr(&self, key: &str) -> Option<&Attr<'a>> {
        self.attrs.iter().find(|(k, _)| *k == key).map(|(_, v)| v)
    }

    /// A `type` attribute folded onto a [`DType`].
    pub(crate) fn attr_type(&self, key: &str) -> Option<DType> {
        match self.attr(key)? {
            Attr::Type(t) => DType::from_proto(*t),
            _ => None,
        }
    }

    /// True if any attribute names a function (call or control-flow op).
    pub(crate) fn calls_function(&self) -> bool {
        self.attrs
            .iter()
            .any(|(_, v)| matches!(v, Attr::Func(_) | Attr::Funcs(_)))
    }
}

/// A decoded `GraphDef`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RawGraph<'a> {
    pub nodes: Vec<RawNode<'a>>,
    /// Names of the functions in the `library`.
    pub functions: Vec<&'a str>,
}

/// Attributes whose values are decoded; all others are skipped unread.
fn is_read_attr(key: &str) -> bool {
    matches!(
        key,
        "_output_shapes"
            | "T"
            | "dtype"
            | "out_type"
            | "output_type"
            | "DstT"
            | "Tout"
            | "Tidx"
            | "Tparams"
            | "output_types"
            | "out_types"
            | "component_types"
            | "_handle_dtypes"
            | "_handle_shapes"
            | "shape"
            | "value"
            | "equation"
            | "transpose_a"
            | "transpose_b"
            | "adj_x"
            | "adj_y"
            | "ksize"
            | "strides"
            | "data_format"
            | "f"
            | "then_branch"
            | "else_branch"
            | "cond"
            | "body"
            | "branches"
            | "_class"
    )
}

/// Decodes a serialized `GraphDef`.
///
/// # Errors
/// [`PlanError::Decode`] on malformed bytes (truncated, wrong wire types,
/// lengths past the end, invalid UTF-8 in names); the message gives the byte
/// offset.
///
/// # Complexity
/// O(bytes).
pub fn decode(bytes: &[u8]) -> Result<RawGraph<'_>> {
    let mut g = RawGraph::default();
    let mut r = Reader::new(bytes);
    while !r.at_end() {
        let (field, wire) = r.key()?;
        match (field, wire) {
            (1, LEN) => g.nodes.push(decode_node(r.bytes()?)?),
            (2, LEN) => decode_library(r.bytes()?, &mut g.functions)?,
            (1 | 2, _) => return Err(wrong_wire("GraphDef", field)),
            _ => r.skip(wire)?,
        }
    }
    Ok(g)
}

fn wrong_wire(msg: &str, field: u32) -> PlanError {
    PlanError::Decode(format!(
        "{msg} field {field} has the wrong wire type (is this a GraphDef?)"
    ))
}

fn decode_node(b: &[u8]) -> Result<RawNode<'_>> {
    let mut n = RawNode::default();
    let mut r = Reader::new(b);
    while !r.at_end() {
        let (field, wire) = r.key()?;
        match (field, wire) {
            (1, LEN) => n.name = r.str()?,
            (2, LEN) => n.op = r.str()?,
            (3, LEN) => n.inputs.push(r.str()?),
            (4, LEN) => n.device = r.str()?,
            (5, LEN) => {
                if let Some(kv) = decode_attr_entry(r.bytes()?)? {
                    n.attrs.push(kv);
                }
            }
            (1..=5, _) => return Err(wrong_wire("NodeDef", field)),
            _ => r.skip(wire)?,
        }
    }
    Ok(n)
}

fn decode_attr_entry(b: &[u8]) -> Result<Option<(&str, Attr<'_>)>> {
    let mut r = Reader::new(b);
    let mut key = "";
    let mut value: Option<&[u8]> = None;
    while !r.at_end() {
        let (field, wire) = r.key()?;
        match (field, wire) {
            (1, LEN) => key = r.str()?,
            (2, LEN) => value = Some(r.bytes()?),
            _ => r.skip(wire)?,
        }
    }
    if !is_read_attr(key) {
        return Ok(None);
    }
    let attr = match value {
        Some(v) => decode_attr_value(v)?,
        None => Attr::Other,
    };
    Ok(Some((key, attr)))
}

fn decode_attr_value(b: &[u8]) -> Result<Attr<'_>> {
    let mut r = Reader::new(b);
    let mut out = Attr::Other;
    while !r.at_end() {
        let (field, wire) = r.key()?;
        out = match (field, wire) {
            (1, LEN) => decode_list(r.bytes()?)?,
            (2, LEN) => Attr::Str(r.bytes()?),
            (3, 0) => Attr::Int(r.varint()? as i64),
            (5, 0) => Attr::Bool(r.varint()? != 0),
            (6, 0) => Attr::Type(r.varint()? as i64),
            (7, LEN) => Attr::Shape(decode_shape(r.bytes()?)?),
            (8, LEN) => Attr::TensorShape(decode_tensor_shape(r.bytes()?)?),
            (10, LEN) => Attr::Func(decode_func_name(r.bytes()?)?),
            _ => {
                r.skip(wire)?;
                continue;
            }
        };
    }
    Ok(out)
}

fn decode_list(b: &[u8]) -> Result<Attr<'_>> {
    let mut r = Reader::new(b);
    let mut ints = Vec::new();
    let mut types = Vec::new();
    let mut shapes = Vec::new();
    let mut funcs = Vec::new();
    while !r.at_end() {
        let (field, wire) = r.key()?;
        match field {
            3 => r.varints(wire, &mut ints)?,
            6 => r.varints(wire, &mut types)?,
            7 if wire == LEN => shapes.push(decode_shape(r.bytes()?)?),
            9 if wire == LEN => funcs.push(decode_func_name(r.bytes()?)?),
            _ => r.skip(wire)?,
        }
    }
    Ok(if !shapes.is_empty() {
        Attr::Shapes(shapes)
    } else if !types.is_empty() {
        Attr::Types(types)
    } else if !funcs.is_empty() {
        Attr::Funcs(funcs)
    } else if !ints.is_empty() {
        Attr::Ints(ints)
    } else {
        // An empty list: for `_output_shapes` this means "no outputs".
        Attr::Shapes(Vec::new())
    })
}

/// Decodes a `TensorShapeProto`.
pub(crate) fn decode_shape(b: &[u8]) -> Result<Shape> {
    let mut r = Reader::new(b);
    let mut dims = Vec::new();
    let mut unknown_rank = false;
    while !r.at_end() {
        let (field, wire) = r.key()?;
        match (field, wire) {
            (2, LEN) => {
                let mut d = Reader::new(r.bytes()?);
                let mut size = 0i64;
                while !d.at_end() {
                    let (f, w) = d.key()?;
                    if f == 1 && w == 0 {
                        size = d.varint()? as i64;
                    } else {
                        d.skip(w)?;
                    }
                }
                dims.push(size);
            }
            (3, 0) => unknown_rank = r.varint()? != 0,
            _ => r.skip(wire)?,
        }
    }
    Ok(Shape(if unknown_rank { None } else { Some(dims) }))
}

/// Reads only the `tensor_shape` (field 2) of a `TensorProto`.
fn decode_tensor_shape(b: &[u8]) -> Result<Shape> {
    let mut r = Reader::new(b);
    let mut shape = Shape(Some(Vec::new()));
    while !r.at_end() {
        let (field, wire) = r.key()?;
        if field == 2 && wire == LEN {
            shape = decode_shape(r.bytes()?)?;
        } else {
            r.skip(wire)?;
        }
    }
    Ok(shape)
}

fn decode_func_name(b: &[u8]) -> Result<&str> {
    let mut r = Reader::new(b);
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

fn decode_library<'a>(b: &'a [u8], out: &mut Vec<&'a str>) -> Result<()> {
    let mut r = Reader::new(b);
    while !r.at_end() {
        let (field, wire) = r.key()?;
        if field == 1 && wire == LEN {
            // FunctionDef.signature (1) is an OpDef whose name is field 1.
            let mut f = Reader::new(r.bytes()?);
            while !f.at_end() {
                let (ff, fw) = f.key()?;
                if ff == 1 && fw == LEN {
                    out.push(decode_func_name(f.bytes()?)?);
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
