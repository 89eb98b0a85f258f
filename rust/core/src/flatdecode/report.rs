//! The decoder's error messages: what is wrong, where (the byte offset in
//! the input, the node by index and name, the attribute by key), and, with
//! [`PlanError::Decode`]'s own text, what to do.
//!
//! A [`Malformed`] carries a [`Fault`] and the address of the bytes it is
//! about; a field number or a declared length is read again from the input
//! at that offset.
//!
//! # Complexity
//! O(length of the names quoted): only on the way out with an error.

use crate::error::PlanError;
use crate::wire::{key_at, varint_at, Fault, Malformed};

/// Where in the `GraphDef` the decoder was.
pub(super) enum Place<'a> {
    /// Between the fields of the `GraphDef`, after `nodes` nodes.
    Top { nodes: usize },
    /// In the function library.
    Library,
    /// In node `index` (its name as read so far), in attribute `attr` if any.
    Node {
        index: usize,
        name: &'a [u8],
        attr: Option<&'a [u8]>,
    },
}

/// The [`PlanError::Decode`] of `m` met at `place` in `input`.
pub(super) fn malformed(input: &[u8], m: Malformed, place: &Place<'_>) -> PlanError {
    let off = m.offset_in(input);
    let what = describe(input, m.fault(), off);
    let at = match off {
        Some(o) => format!(" at byte {o} of {}", input.len()),
        None => String::new(),
    };
    let place = match place {
        Place::Top { nodes: 0 } => String::new(),
        Place::Top { nodes } => format!("after node {} of the GraphDef: ", nodes - 1),
        Place::Library => "in the function library: ".into(),
        Place::Node { index, name, attr } => {
            let attr = attr.map_or(String::new(), |k| format!(", attribute '{}'", lossy(k)));
            format!("{}{attr}: ", node(*index, name))
        }
    };
    PlanError::Decode(format!("{place}{what}{at}"))
}

/// The [`PlanError::Decode`] of the `field` (name, op, device, input) of
/// node `index` named `name`, the bytes `s` of `input`, not being UTF-8.
#[cold]
#[inline(never)]
pub(crate) fn not_utf8(
    input: &[u8],
    s: &[u8],
    index: usize,
    name: &[u8],
    field: &str,
) -> PlanError {
    let off = (s.as_ptr() as usize)
        .checked_sub(input.as_ptr() as usize)
        .filter(|&o| o <= input.len());
    let at = off.map_or(String::new(), |o| {
        format!(" at byte {o} of {}", input.len())
    });
    PlanError::Decode(format!(
        "{}: its {field} '{}' is a string field that is not valid UTF-8{at}",
        node(index, name),
        lossy(s)
    ))
}

fn node(index: usize, name: &[u8]) -> String {
    if name.is_empty() {
        format!("node {index} (no name read)")
    } else {
        format!("node {index} ('{}')", lossy(name))
    }
}

fn lossy(s: &[u8]) -> String {
    const MAX: usize = 200;
    let text = String::from_utf8_lossy(&s[..s.len().min(MAX)]);
    if s.len() > MAX {
        format!("{text}...")
    } else {
        text.into_owned()
    }
}

/// What `fault` at offset `off` of `input` is, in words.
fn describe(input: &[u8], fault: Fault, off: Option<usize>) -> String {
    match fault {
        Fault::TruncatedVarint => {
            "truncated varint: its message ends inside it (is the file cut short?)".into()
        }
        Fault::VarintOverflow => "varint overflows 64 bits".into(),
        Fault::FieldNumber => {
            let field = off.and_then(|o| key_at(input, o)).map_or(0, |(f, _)| f);
            format!("invalid field number {field}")
        }
        Fault::LengthPastEnd => {
            let len = off.and_then(|o| varint_at(input, o)).unwrap_or(0);
            let past_input =
                off.is_some_and(|o| (o as u64).saturating_add(len) > input.len() as u64);
            format!(
                "declared length {len} exceeds the bytes that remain in its message{}",
                if past_input {
                    " and in the whole input (is the file cut short?)"
                } else {
                    ""
                }
            )
        }
        Fault::TruncatedFixed => "truncated fixed-width field".into(),
        Fault::WireType(wire) => {
            format!("unsupported wire type {wire} (protobuf has 0, 1, 2 and 5)")
        }
        Fault::RepeatedIntWire(wire) => {
            format!("repeated integer field with a wrong wire type {wire}")
        }
        Fault::NotUtf8 => "string field is not valid UTF-8".into(),
        Fault::GraphDefWire { field, wire } => {
            let what = if field == 1 { "node" } else { "library" };
            format!(
                "GraphDef field {field} ({what}) has the wrong wire type {wire} (is this a GraphDef?)"
            )
        }
        Fault::NodeDefWire { field, wire } => {
            let what = ["name", "op", "input", "device", "attr"]
                .get(usize::from(field).wrapping_sub(1))
                .copied()
                .unwrap_or("?");
            format!(
                "NodeDef field {field} ({what}) has the wrong wire type {wire}, not length-delimited"
            )
        }
        Fault::TooLarge => "more than 2^32 shape dimensions or type-list entries in all, past what \
                            the decoder holds (a serialized GraphDef is at most 2 GiB: is this one?)"
            .into(),
    }
}
