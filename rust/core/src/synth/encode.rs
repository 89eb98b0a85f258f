//! The protobuf encoder for hand-made `GraphDef`s in tests (the property
//! tests' random graphs): the wire format's varints and length-delimited
//! fields, and a `TensorShapeProto`. The synthetic generator writes through
//! the same `wire::Writer`.
//!
//! # Complexity
//! O(bytes written).

use crate::wire::Writer;

/// Appends field `field` of wire type 2 (bytes, string or message).
pub fn len_field(out: &mut Vec<u8>, field: u32, payload: &[u8]) {
    with_writer(out, |w| w.bytes_field(field, payload));
}

/// Appends field `field` of wire type 0 (a varint), written even when 0.
pub fn varint_field(out: &mut Vec<u8>, field: u32, v: u64) {
    with_writer(out, |w| w.varint_field(field, v));
}

/// A `TensorShapeProto`: one `dim` per size (negative sizes as their 64-bit
/// two's complement), or `unknown_rank` for `None`.
pub fn shape(dims: Option<&[i64]>) -> Vec<u8> {
    let mut w = Writer::default();
    match dims {
        None => w.varint_field(3, 1),
        Some(dims) => {
            for &d in dims {
                w.message(2, |dim| dim.varint_field(1, d as u64));
            }
        }
    }
    w.buf
}

fn with_writer(out: &mut Vec<u8>, f: impl FnOnce(&mut Writer)) {
    let mut w = Writer {
        buf: std::mem::take(out),
    };
    f(&mut w);
    *out = w.buf;
}
