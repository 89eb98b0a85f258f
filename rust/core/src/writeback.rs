//! A plan's swaps written into the `GraphDef` bytes: the write-back's part
//! that grows with the plan (`hybridplan.rewriting` writes recomputes, gates
//! and keepers on the result, in Python, and says what every inserted node is).
//!
//! # Rule
//! Swap `i` of producer `p`, output `k` (the plan's order): one node
//! `<prefix>/swap_out/<i>/<p>` (`swap_out_op` on the host; input `p:k`, a
//! control input from `after` when it is not `p`); the gate node, when
//! given, gets a control input from it; each `ins[j]` adds a node
//! `<p><pad><prefix>/swap_in/<i>_<j>` (`swap_in_op` on the device; input the
//! swap-out, control inputs from the trigger and, with `follows`, from the
//! swap-in last written with that trigger), named by [`ranked`] so that the
//! commutative readers keep their inputs' order; every data input of a
//! consumer that reads `p:k` reads the swap-in (a consumer without a device
//! gets the device when the target pins consumers); the clone consumers are
//! handed back ([`Written::redirects`]). Every inserted node has `T` (the
//! output's dtype from its op's signature, [`OpSig`]),
//! `_grappler_do_not_remove = true` and the producer's `_output_shapes`
//! entry `k` when it has one. Errors are the Python writer's checks, in
//! its order and of its classes (the glue reads every swap's values before
//! any check; an unsupported graph gets [`PlanError::Unsupported`]'s words).
//! Read otherwise than protobuf would (inputs TensorFlow does not write, left
//! as they are): an output index in non-ASCII digits, group fields (wire
//! types 3 and 4), an `AttrValue` that sets two members of its oneof or a map
//! entry that carries its value twice, enum values past 32 bits.
//!
//! # Model
//! The bytes are not parsed into messages: the `GraphDef`'s fields are
//! located once ([`NodeIndex`]); the nodes the plan names are read on
//! demand, parsed again at each read (a parse of a node's bytes costs less
//! than a hash map's random lookups of parsed nodes); the output copies
//! every field but the changed nodes' inputs and devices byte for byte,
//! and appends the new nodes. Parsed by protobuf,
//! it equals the Python writer's message (`tests/test_rewrite_identity.py`).
//!
//! # Complexity
//! O(bytes) to locate the nodes and to copy them; O(S + inputs of the nodes
//! the plan names) expected for S swaps, swap-ins and consumers (hash maps
//! of names), and O(readers' sibling inputs x pads) for the names.

use std::rc::Rc;

use rustc_hash::{FxHashMap, FxHashSet};

use crate::error::{PlanError, Result};
use crate::wire::{Malformed, Scan, LEN, VARINT};

/// `_grappler_do_not_remove`: keeps Grappler from deleting the copies.
pub const DO_NOT_REMOVE: &str = "_grappler_do_not_remove";

/// What goes between a producer's name and the tag of a node standing for
/// its tensor, tried in this order (see [`ranked`]).
const PADS: [&str; 8] = ["-", "--", "---", "9", "99", "999", "A", "AA"];

/// A node index as the plan gives it: an integer; (`Out`) an integer past
/// `i64`, in decimal; or (`Bad`) the Python `repr` of a value that is none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ix {
    Int(i64),
    Out(String),
    Bad(String),
}

/// One swap-in of a [`Swap`].
#[derive(Debug, Clone)]
pub struct SwapIn {
    pub trigger: Ix,
    pub follows: bool,
    pub consumers: Vec<Ix>,
    pub clone_consumers: Vec<Ix>,
}

/// One swap of the plan (the plan schema's fields the write-back reads).
#[derive(Debug, Clone)]
pub struct Swap {
    pub node: Ix,
    pub output: i64,
    /// `None`: the producer itself.
    pub after: Option<Ix>,
    pub gate: Option<Ix>,
    pub ins: Vec<SwapIn>,
}

impl From<&crate::schema::SwapDecision> for Swap {
    /// The swap a planned decision writes: the fields the glue reads from the
    /// decision's dict (`plan_swaps`), taken from the decision itself.
    fn from(d: &crate::schema::SwapDecision) -> Self {
        let ix = |v: u32| Ix::Int(i64::from(v));
        let ixs = |v: &[u32]| v.iter().map(|&x| ix(x)).collect();
        Swap {
            node: ix(d.node),
            output: i64::from(d.output),
            after: Some(ix(d.after)),
            gate: d.gate.as_ref().map(|g| ix(g.node)),
            ins: d
                .ins
                .iter()
                .map(|i| SwapIn {
                    trigger: ix(i.trigger),
                    follows: i.follows,
                    consumers: ixs(&i.consumers),
                    clone_consumers: ixs(&i.clone_consumers),
                })
                .collect(),
        }
    }
}

/// One output argument of an op's signature (TensorFlow's `OpDef.ArgDef`).
#[derive(Debug, Clone, Default)]
pub struct OutArg {
    pub type_list_attr: String,
    /// The fixed `DataType`, 0 when the type comes from an attribute.
    pub fixed: i64,
    pub type_attr: String,
    pub number_attr: String,
}

/// A default attribute value of an op: what the output dtypes may read.
#[derive(Debug, Clone, Default)]
pub struct AttrDefault {
    pub type_: i64,
    pub i: i64,
    pub types: Vec<i64>,
}

/// What the write-back needs of an op: from the running TensorFlow's
/// registry (ops it does not know have none).
#[derive(Debug, Clone, Default)]
pub struct OpSig {
    pub commutative: bool,
    pub outputs: Vec<OutArg>,
    pub defaults: FxHashMap<String, AttrDefault>,
}

/// Op name -> its signature.
pub type Sigs = FxHashMap<String, OpSig>;

/// The swap ops, devices and names of one target.
#[derive(Debug, Clone)]
pub struct Target {
    pub swap_out_op: String,
    pub swap_in_op: String,
    pub device: String,
    pub host: String,
    pub pin_consumers: bool,
    pub prefix: String,
}

/// The new graph and what the rest of the write-back needs to know.
#[derive(Debug, Default)]
pub struct Written<'a> {
    /// The serialized `GraphDef` with the swaps written.
    pub graph: Image<'a>,
    /// Nodes in the input graph.
    pub nodes: usize,
    pub swap_out: Vec<String>,
    pub swap_in: Vec<String>,
    /// Data input slots rewired.
    pub rewired: u64,
    /// Every original node whose inputs changed, ascending, with its inputs
    /// before.
    pub changed: Vec<(u32, Vec<&'a str>)>,
    /// Reads each original tensor lost to rewiring and gained from copies.
    pub lost: Vec<(String, u64)>,
    pub gained: Vec<(String, u64)>,
    /// (clone consumer, tensor, swap-in, where): its clone reads the swap-in.
    pub redirects: Vec<(u32, String, String, String)>,
}

/// The written `GraphDef`'s bytes, to be copied once where the caller wants
/// them ([`Image::write_to`]): the input with the changed nodes' fields
/// spliced in, then the new nodes.
#[derive(Debug, Default)]
pub struct Image<'a> {
    input: &'a [u8],
    /// (start, end) of a node's field in `input`, replaced by
    /// `bodies[from..to]`; in input order.
    splices: Vec<(usize, usize, usize, usize)>,
    bodies: Vec<u8>,
    tail: Vec<u8>,
}

impl Image<'_> {
    /// Its length in bytes.
    pub fn len(&self) -> usize {
        let replaced: usize = self.splices.iter().map(|&(s, e, _, _)| e - s).sum();
        self.input.len() - replaced + self.bodies.len() + self.tail.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Writes it into `out`, of exactly [`Image::len`] bytes.
    ///
    /// # Panics
    /// When `out` has another length.
    pub fn write_to(&self, out: &mut [u8]) {
        assert_eq!(out.len(), self.len(), "Image::write_to: wrong length");
        let mut at = 0;
        let mut put = |b: &[u8]| {
            out[at..at + b.len()].copy_from_slice(b);
            at += b.len();
        };
        let mut from = 0;
        for &(start, end, b0, b1) in &self.splices {
            put(&self.input[from..start]);
            put(&self.bodies[b0..b1]);
            from = end;
        }
        put(&self.input[from..]);
        put(&self.tail);
    }

    /// It, in a new vector.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut out = vec![0; self.len()];
        self.write_to(&mut out);
        out
    }
}

/// Where each node's bytes lie in the `GraphDef`, and its other fields.
pub struct NodeIndex<'a> {
    bytes: &'a [u8],
    /// Per node: its `NodeDef` payload, and where its field (key, length,
    /// payload) starts in `bytes`.
    nodes: Vec<&'a [u8]>,
    starts: Vec<usize>,
}

fn decode(bytes: &[u8], m: Malformed, what: &str) -> PlanError {
    let at = m
        .offset_in(bytes)
        .map_or(String::new(), |o| format!(" at byte {o}"));
    PlanError::Decode(format!("{what}: {:?}{at}", m.fault()))
}

impl<'a> NodeIndex<'a> {
    /// Locates every node of the serialized `GraphDef`. O(top-level fields).
    ///
    /// # Errors
    /// [`PlanError::Decode`] when the top level is not protobuf.
    pub fn new(bytes: &'a [u8]) -> Result<Self> {
        let mut s = Scan::new(bytes);
        let mut nodes = Vec::new();
        let mut starts = Vec::new();
        let top = |m| decode(bytes, m, "the GraphDef's fields");
        while !s.at_end() {
            let start = s.pos();
            let (field, wire) = s.key().map_err(top)?;
            if field == 1 && wire == LEN {
                nodes.push(s.bytes().map_err(top)?);
                starts.push(start);
            } else {
                s.skip(wire).map_err(top)?;
            }
        }
        Ok(NodeIndex {
            bytes,
            nodes,
            starts,
        })
    }

    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Node `i`'s fields.
    fn node(&self, i: usize) -> Result<Node<'a>> {
        Node::parse(self.nodes[i]).map_err(|m| decode(self.bytes, m, &format!("node {i}")))
    }
}

/// The fields of one `NodeDef` the write-back reads; its inputs and
/// attributes are read from `body` when asked for (no allocation here).
#[derive(Clone, Copy)]
struct Node<'a> {
    name: &'a str,
    op: &'a str,
    device: &'a str,
    body: &'a [u8],
}

impl<'a> Node<'a> {
    /// Reads name, op and device, and checks the rest is well formed, so
    /// that [`Node::inputs`] and [`Node::attr`] read it without errors.
    fn parse(b: &'a [u8]) -> std::result::Result<Self, Malformed> {
        let mut n = Node {
            name: "",
            op: "",
            device: "",
            body: b,
        };
        let mut s = Scan::new(b);
        while !s.at_end() {
            match s.key()? {
                (1, LEN) => n.name = s.str()?,
                (2, LEN) => n.op = s.str()?,
                (3, LEN) => {
                    s.str()?;
                }
                (4, LEN) => n.device = s.str()?,
                (5, LEN) => {
                    let mut e = Scan::new(s.bytes()?);
                    while !e.at_end() {
                        let (_, w) = e.key()?;
                        e.skip(w)?;
                    }
                }
                (_, w) => s.skip(w)?,
            }
        }
        Ok(n)
    }

    /// The inputs, in order.
    fn inputs(&self) -> Vec<&'a str> {
        let mut out = Vec::new();
        let mut s = Scan::new(self.body);
        while let Ok((field, wire)) = s.key() {
            if (field, wire) == (3, LEN) {
                match s.str() {
                    Ok(t) => out.push(t),
                    Err(_) => break,
                }
            } else if s.skip(wire).is_err() {
                break;
            }
            if s.at_end() {
                break;
            }
        }
        out
    }

    /// The `AttrValue` of `key` (a map's later entry wins, as protobuf reads it).
    fn attr(&self, key: &str) -> Option<&'a [u8]> {
        let mut found = None;
        let mut s = Scan::new(self.body);
        while !s.at_end() {
            let Ok((field, wire)) = s.key() else { break };
            if (field, wire) != (5, LEN) {
                if s.skip(wire).is_err() {
                    break;
                }
                continue;
            }
            let Ok(entry) = s.bytes() else { break };
            let mut e = Scan::new(entry);
            let (mut k, mut value): (&[u8], &'a [u8]) = (&[], &[]);
            while !e.at_end() {
                match e.key() {
                    Ok((1, LEN)) => k = e.bytes().unwrap_or_default(),
                    Ok((2, LEN)) => value = e.bytes().unwrap_or_default(),
                    Ok((_, w)) if e.skip(w).is_ok() => {}
                    _ => break,
                }
            }
            if k == key.as_bytes() {
                found = Some(value);
            }
        }
        found
    }
}

/// `"a"` -> (`"a"`, `""`), `"a:2"` -> (`"a"`, `"2"`): Python's
/// `_parse_input` (digits kept as text).
fn parse_input(text: &str) -> (&str, &str) {
    match text.rfind(':') {
        Some(at) if at + 1 < text.len() && text[at + 1..].bytes().all(|b| b.is_ascii_digit()) => {
            (&text[..at], &text[at + 1..])
        }
        _ => (text, ""),
    }
}

/// The tensor key of an input (`name`, or `name:k` for k > 0): Python's
/// `_tensor(*_parse_input(text))`, with `int`'s formatting of the digits.
fn tensor_key(text: &str) -> String {
    let (name, digits) = parse_input(text);
    tensor(name, digits.trim_start_matches('0'))
}

/// Whether `tensor_key(text) == key`, without making the key.
fn has_key(text: &str, key: &str) -> bool {
    let (name, digits) = parse_input(text);
    let k = digits.trim_start_matches('0');
    if k.is_empty() {
        return key == name;
    }
    key.len() == name.len() + 1 + k.len()
        && key.starts_with(name)
        && key.as_bytes()[name.len()] == b':'
        && key.ends_with(k)
}

fn tensor(name: &str, k: &str) -> String {
    if k.is_empty() || k == "0" {
        name.to_string()
    } else {
        concat(&[name, ":", k])
    }
}

/// The strings one after another (the hot names: no formatting machinery).
fn concat(parts: &[&str]) -> String {
    let mut s = String::with_capacity(parts.iter().map(|p| p.len()).sum());
    for p in parts {
        s.push_str(p);
    }
    s
}

/// `v` in decimal.
fn decimal(v: usize) -> String {
    let mut s = String::new();
    push_decimal(&mut s, v as u64);
    s
}

/// Appends `v` in decimal (no formatting machinery: the hot names).
pub(crate) fn push_decimal(s: &mut String, mut v: u64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    s.extend(digits[at..].iter().map(|&d| d as char));
}

/// Whether `producer + s` sorts against `producer + r` as `producer + t`
/// does, whatever follows `r`.
fn suffix_fits(s: &str, r: &str, t: &str) -> bool {
    if r == t {
        return true;
    }
    if r < t {
        return s > r && !s.starts_with(r);
    }
    s < r
}

/// The name of a node standing for the tensors `producer + t` (`t` in
/// `targets`) among the data inputs `siblings` of commutative readers,
/// chosen so that every input keeps its rank: `producer + pad + tag`, the
/// first pad of [`PADS`] that ranks it right against the siblings that
/// start with `producer` (Grappler sorts a commutative op's inputs by name,
/// and an `AddN` sums in that order). O(siblings x pads).
pub fn ranked(producer: &str, targets: &[&str], siblings: &[&str], tag: &str) -> String {
    let rel: Vec<&str> = siblings
        .iter()
        .filter(|x| x.starts_with(producer) && **x != producer)
        .map(|x| &x[producer.len()..])
        .collect();
    for pad in PADS {
        let s = concat(&[pad, tag]);
        if rel
            .iter()
            .all(|r| targets.iter().all(|t| suffix_fits(&s, r, t)))
        {
            return concat(&[producer, &s]);
        }
    }
    concat(&[producer, PADS[0], tag])
}

/// Python's `repr` of a one-key list of strings (an error's words).
fn py_list(key: &str) -> String {
    format!("[{}]", py_str(key))
}

/// Python's `repr` of a string of printable characters: single quotes, or
/// double quotes when it holds a single quote and no double one.
fn py_str(s: &str) -> String {
    let s = s.replace('\\', "\\\\");
    if s.contains('\'') && !s.contains('"') {
        format!("\"{s}\"")
    } else {
        format!("'{}'", s.replace('\'', "\\'"))
    }
}

fn invalid(msg: String) -> PlanError {
    PlanError::InvalidArgument(msg)
}

/// An input of a changed node: as in the input graph, or a name the
/// write-back made (a swap-in, a control input from a swap-out), shared by
/// every input that names it.
enum Input<'a> {
    Orig(&'a str),
    New(Rc<str>),
}

impl std::ops::Deref for Input<'_> {
    type Target = str;

    fn deref(&self) -> &str {
        match self {
            Input::Orig(t) => t,
            Input::New(t) => t,
        }
    }
}

/// An original node whose inputs the write-back changes.
struct Changed<'a> {
    node: u32,
    original: Vec<&'a str>,
    now: Vec<Input<'a>>,
    device: Option<String>,
}

struct State<'i, 'a> {
    index: &'i NodeIndex<'a>,
    sigs: &'i Sigs,
    target: &'i Target,
    /// The changed nodes in the order first changed, and where each is
    /// among them (the output takes them by node id: one sort, then one
    /// walk, rather than a lookup and a removal each).
    changed: Vec<Changed<'a>>,
    changed_at: FxHashMap<u32, usize>,
    added: FxHashSet<String>,
    new_nodes: Vec<u8>,
    /// The node add_copy writes, reused.
    scratch: Vec<u8>,
    value: Vec<u8>,
    last_in: FxHashMap<u32, Rc<str>>,
    lost: FxHashMap<String, u64>,
    gained: FxHashMap<String, u64>,
    out: Written<'a>,
}

impl<'i, 'a> State<'i, 'a> {
    /// `value` as a node index; `what` names it in the error.
    fn ix(&self, value: &Ix, what: impl FnOnce() -> String) -> Result<u32> {
        let n = self.index.len();
        if let Ix::Int(v) = value {
            if (0..n as i64).contains(v) {
                return Ok(*v as u32);
            }
        }
        let what = what();
        match value {
            Ix::Int(v) => Err(invalid(format!(
                "{what} = {v} is not a node index of this GraphDef (it has {n} nodes)"
            ))),
            Ix::Out(v) => Err(invalid(format!(
                "{what} = {v} is not a node index of this GraphDef (it has {n} nodes)"
            ))),
            Ix::Bad(repr) => Err(invalid(format!("{what} must be a node index, got {repr}"))),
        }
    }

    fn node(&self, i: u32) -> Result<Node<'a>> {
        self.index.node(i as usize)
    }

    fn name(&self, i: u32) -> Result<&'a str> {
        Ok(self.node(i)?.name)
    }

    /// Node `i`'s inputs as in the input graph (`node`: its fields).
    fn inputs(&self, i: u32, node: Node<'a>) -> Vec<&'a str> {
        match self.changed_at.get(&i) {
            Some(&at) => self.changed[at].original.clone(),
            None => node.inputs(),
        }
    }

    /// Node `i`'s changes (`node`: its fields), begun when first asked for.
    fn changing(&mut self, i: u32, node: Node<'a>) -> &mut Changed<'a> {
        let at = match self.changed_at.get(&i) {
            Some(&at) => at,
            None => {
                let original = node.inputs();
                let now = original.iter().map(|&t| Input::Orig(t)).collect();
                self.changed.push(Changed {
                    node: i,
                    original,
                    now,
                    device: None,
                });
                self.changed_at.insert(i, self.changed.len() - 1);
                self.changed.len() - 1
            }
        };
        &mut self.changed[at]
    }

    /// The dtype of every output of node `p`, from its op's signature.
    fn dtypes(&self, p: u32, node: Node<'a>) -> Result<Vec<i64>> {
        let (name, op) = (node.name, node.op);
        let Some(sig) = self.sigs.get(op) else {
            return Err(PlanError::Unsupported {
                node: name.into(),
                op: op.into(),
                reason: "its op is unknown to this TensorFlow; load the library that registers \
                         it before rewriting"
                    .into(),
            });
        };
        let attr = |key: &str| -> Result<Option<&'a [u8]>> {
            match node.attr(key) {
                Some(v) => Ok(Some(v)),
                None if sig.defaults.contains_key(key) => Ok(None),
                None => Err(PlanError::Unsupported {
                    node: name.into(),
                    op: op.into(),
                    reason: format!("lacks attribute {}", py_str(key)),
                }),
            }
        };
        let bad = |m| {
            decode(
                self.index.bytes,
                m,
                &format!("node {p} ({name}), an attribute"),
            )
        };
        let mut out = Vec::new();
        for arg in &sig.outputs {
            if !arg.type_list_attr.is_empty() {
                match attr(&arg.type_list_attr)? {
                    Some(v) => list_types(v, &mut out).map_err(bad)?,
                    None => out.extend(&sig.defaults[&arg.type_list_attr].types),
                }
                continue;
            }
            let dtype = if arg.fixed != 0 {
                arg.fixed
            } else {
                match attr(&arg.type_attr)? {
                    Some(v) => scalar(v, 6).map_err(bad)?,
                    None => sig.defaults[&arg.type_attr].type_,
                }
            };
            let count = if arg.number_attr.is_empty() {
                1
            } else {
                match attr(&arg.number_attr)? {
                    Some(v) => scalar(v, 3).map_err(bad)?,
                    None => sig.defaults[&arg.number_attr].i,
                }
            };
            let count = count.max(0) as u64;
            if out.len() as u64 + count > u64::from(crate::build::MAX_OUTPUTS) {
                return Err(PlanError::Unsupported {
                    node: name.into(),
                    op: op.into(),
                    reason: format!(
                        "its attribute {} gives {count} outputs, more than the {} a node may have",
                        py_str(&arg.number_attr),
                        crate::build::MAX_OUTPUTS
                    ),
                });
            }
            out.extend(std::iter::repeat_n(dtype, count as usize));
        }
        Ok(out)
    }

    /// Producer `p`'s `_output_shapes` entry `k`, if it has one.
    fn output_shape(&self, p: u32, node: Node<'a>, k: usize) -> Result<Option<&'a [u8]>> {
        let Some(v) = node.attr("_output_shapes") else {
            return Ok(None);
        };
        let bytes = self.index.bytes;
        let bad = |m| decode(bytes, m, &format!("node {p}, attribute _output_shapes"));
        let mut s = Scan::new(v);
        let mut shapes = Vec::new();
        while !s.at_end() {
            match s.key().map_err(bad)? {
                (1, LEN) => {
                    let mut l = Scan::new(s.bytes().map_err(bad)?);
                    while !l.at_end() {
                        match l.key().map_err(bad)? {
                            (7, LEN) => shapes.push(l.bytes().map_err(bad)?),
                            (_, w) => l.skip(w).map_err(bad)?,
                        }
                    }
                }
                (_, w) => s.skip(w).map_err(bad)?,
            }
        }
        Ok(shapes.get(k).copied())
    }

    #[allow(clippy::too_many_arguments)]
    fn add_copy(
        &mut self,
        name: &str,
        op: &str,
        device: &str,
        source: &str,
        control: &[&str],
        dtype: i64,
        shape: Option<&[u8]>,
    ) {
        if !self.added.contains(parse_input(source).0) {
            *self.gained.entry(tensor_key(source)).or_insert(0) += 1;
        }
        self.added.insert(name.to_string());
        let node = &mut self.scratch;
        node.clear();
        put_bytes(node, 1, name.as_bytes());
        put_bytes(node, 2, op.as_bytes());
        put_bytes(node, 3, source.as_bytes());
        for c in control {
            put_varint(node, (3 << 3) | u64::from(LEN));
            put_varint(node, 1 + c.len() as u64);
            node.push(b'^');
            node.extend_from_slice(c.as_bytes());
        }
        put_bytes(node, 4, device.as_bytes());
        // T: AttrValue.type (6); DO_NOT_REMOVE: AttrValue.b (5).
        let value = &mut self.value;
        value.clear();
        put_varint_field(value, 6, dtype as u64);
        put_attr(node, "T", value);
        put_attr(node, DO_NOT_REMOVE, &[5 << 3, 1]);
        if let Some(shape) = shape {
            // _output_shapes: AttrValue.list (1) of one ListValue.shape (7).
            let inner = 1 + varint_len(shape.len() as u64) + shape.len();
            value.clear();
            put_varint(value, (1 << 3) | u64::from(LEN));
            put_varint(value, inner as u64);
            put_bytes(value, 7, shape);
            put_attr(node, "_output_shapes", value);
        }
        put_bytes(&mut self.new_nodes, 1, &self.scratch);
    }

    /// The data inputs of the commutative nodes among `readers` but those
    /// reading `skip`.
    fn siblings(
        &mut self,
        readers: &[&Ix],
        skip: &str,
        what: &dyn Fn() -> String,
    ) -> Result<Vec<&'a str>> {
        let mut out = Vec::new();
        for c in readers {
            let c = self.ix(c, what)?;
            let node = self.node(c)?;
            if self.sigs.get(node.op).is_some_and(|s| s.commutative) {
                for t in self.inputs(c, node) {
                    if !t.starts_with('^') && !has_key(t, skip) {
                        out.push(t);
                    }
                }
            }
        }
        Ok(out)
    }

    fn rewire(
        &mut self,
        c: u32,
        source: &str,
        to: &Rc<str>,
        what: &dyn Fn() -> String,
    ) -> Result<()> {
        let target = self.target;
        let node = self.node(c)?;
        let (has_device, name) = (!node.device.is_empty(), node.name);
        let entry = self.changing(c, node);
        let mut hits = 0u64;
        for slot in 0..entry.original.len() {
            let text: &str = &entry.now[slot];
            if text.starts_with('^') {
                continue;
            }
            let hit = if text.contains(':') {
                has_key(text, source)
            } else {
                text == source
            };
            if hit {
                entry.now[slot] = Input::New(Rc::clone(to));
                hits += 1;
            }
        }
        if hits == 0 {
            return Err(invalid(format!(
                "{}: consumer {} (index {c}) reads none of {}; list only nodes that read \
                 the tensor",
                what(),
                py_str(name),
                py_list(source)
            )));
        }
        if target.pin_consumers && !has_device {
            entry.device = Some(target.device.clone());
        }
        *self.lost.entry(source.to_string()).or_insert(0) += hits;
        self.out.rewired += hits;
        Ok(())
    }

    fn swap(&mut self, i: usize, swap: &Swap) -> Result<()> {
        let p = self.ix(&swap.node, || format!("swaps[{i}].node"))?;
        let k = swap.output;
        let after = match &swap.after {
            Some(a) => self.ix(a, || format!("swaps[{i}].after"))?,
            None => p,
        };
        // The producer's fields, read once.
        let pn = self.node(p)?;
        let dtypes = self.dtypes(p, pn)?;
        let (producer, op) = (pn.name, pn.op);
        if !(0..dtypes.len() as i64).contains(&k) {
            return Err(invalid(format!(
                "swaps[{i}]: node {} (op {op}) has {} output(s), no output {k}",
                py_str(producer),
                dtypes.len()
            )));
        }
        let dtype = dtypes[k as usize];
        let k_text = k.to_string();
        let source = tensor(producer, &k_text);
        if (1..=32).contains(&dtype) && crate::dtype::DType(dtype as u8).is_handle() {
            return Err(PlanError::Unsupported {
                node: producer.into(),
                op: op.into(),
                reason: format!(
                    "swaps[{i}]: {source} is a resource/variant handle, not a buffer; it cannot \
                     be swapped"
                ),
            });
        }
        let shape = self.output_shape(p, pn, k as usize)?;
        // The target outlives the state: read through its own reference
        // while the state changes.
        let target = self.target;
        let prefix = target.prefix.as_str();
        let i_text = decimal(i);
        let out_name = concat(&[prefix, "/swap_out/", &i_text, "/", producer]);
        let after_name = if after == p {
            producer
        } else {
            self.name(after)?
        };
        let control: Vec<&str> = if after != p { vec![after_name] } else { vec![] };
        let (out_op, host) = (&target.swap_out_op, &target.host);
        self.add_copy(&out_name, out_op, host, &source, &control, dtype, shape);
        self.out.swap_out.push(out_name.clone());
        if let Some(gate) = &swap.gate {
            let r = self.ix(gate, || format!("swaps[{i}].gate.node"))?;
            let node = self.node(r)?;
            self.changing(r, node)
                .now
                .push(Input::New(concat(&["^", &out_name]).into()));
        }
        let target_k = tensor("", &k_text);
        for (j, entry) in swap.ins.iter().enumerate() {
            let what = || format!("swaps[{i}].ins[{j}]");
            let t = self.ix(&entry.trigger, || format!("{}.trigger", what()))?;
            let trigger = self.name(t)?;
            let mut last = None;
            if entry.follows {
                match self.last_in.get(&t) {
                    Some(l) => last = Some(Rc::clone(l)),
                    None => {
                        return Err(invalid(format!(
                            "{}: follows no swap-in: no swap-in with the same trigger is \
                             listed before it",
                            what()
                        )))
                    }
                }
            }
            let readers: Vec<&Ix> = entry
                .consumers
                .iter()
                .chain(&entry.clone_consumers)
                .collect();
            let siblings = self.siblings(&readers, &source, &what)?;
            let tag = concat(&[prefix, "/swap_in/", &i_text, "_", &decimal(j)]);
            let in_name: Rc<str> = ranked(producer, &[&target_k], &siblings, &tag).into();
            let (in_op, device) = (&target.swap_in_op, &target.device);
            let mut control = vec![trigger];
            control.extend(last.as_deref());
            self.add_copy(&in_name, in_op, device, &out_name, &control, dtype, shape);
            self.out.swap_in.push(in_name.to_string());
            self.last_in.insert(t, Rc::clone(&in_name));
            for c in &entry.consumers {
                let c = self.ix(c, || format!("{}.consumers", what()))?;
                self.rewire(c, &source, &in_name, &what)?;
            }
            for c in &entry.clone_consumers {
                let c = self.ix(c, || format!("{}.clone_consumers", what()))?;
                let redirect = (c, source.clone(), in_name.to_string(), what());
                self.out.redirects.push(redirect);
            }
        }
        Ok(())
    }

    /// The output: every field as it was but the changed nodes, then the
    /// new nodes.
    fn assemble(mut self) -> Result<Written<'a>> {
        let bytes = self.index.bytes;
        let mut changed = std::mem::take(&mut self.changed);
        changed.sort_unstable_by_key(|c| c.node); // one entry per node
        let mut splices = Vec::with_capacity(changed.len());
        let mut bodies = Vec::new();
        let mut body = Vec::new();
        for c in &changed {
            let i = c.node;
            let node = self.index.nodes[i as usize];
            let start = node.as_ptr() as usize - bytes.as_ptr() as usize;
            // The field's key and length (as written, canonical or not) come before it.
            let field_start = self.index.starts[i as usize];
            body.clear();
            rewrite_node(node, c, &mut body).map_err(|m| decode(bytes, m, &format!("node {i}")))?;
            let at = bodies.len();
            put_bytes(&mut bodies, 1, &body);
            splices.push((field_start, start + node.len(), at, bodies.len()));
        }
        self.out.graph = Image {
            input: bytes,
            splices,
            bodies,
            tail: std::mem::take(&mut self.new_nodes),
        };
        self.out.nodes = self.index.len();
        self.out.changed = (changed.into_iter())
            .map(|c| (c.node, c.original))
            .collect();
        // FxHash is not seeded: the order is the same on every run.
        self.out.lost = self.lost.into_iter().collect();
        self.out.gained = self.gained.into_iter().collect();
        Ok(self.out)
    }
}

/// `node`'s fields with `c`'s inputs (and device, when pinned) in place of
/// its own.
fn rewrite_node(
    node: &[u8],
    c: &Changed<'_>,
    out: &mut Vec<u8>,
) -> std::result::Result<(), Malformed> {
    let mut s = Scan::new(node);
    let mut start = 0;
    let mut inputs_written = false;
    while !s.at_end() {
        let field_start = s.pos();
        let (field, wire) = s.key()?;
        s.skip(wire)?;
        let drop = wire == LEN && (field == 3 || (field == 4 && c.device.is_some()));
        if drop {
            out.extend_from_slice(&node[start..field_start]);
            start = s.pos();
            if field == 3 && !inputs_written {
                inputs_written = true;
                for t in &c.now {
                    put_bytes(out, 3, t.as_bytes());
                }
            }
        }
    }
    out.extend_from_slice(&node[start..]);
    if !inputs_written {
        for t in &c.now {
            put_bytes(out, 3, t.as_bytes());
        }
    }
    if let Some(d) = &c.device {
        put_bytes(out, 4, d.as_bytes());
    }
    Ok(())
}

/// The `DataType`s of an `AttrValue`'s `list.type`.
fn list_types(v: &[u8], out: &mut Vec<i64>) -> std::result::Result<(), Malformed> {
    let mut s = Scan::new(v);
    while !s.at_end() {
        match s.key()? {
            (1, LEN) => {
                let mut l = Scan::new(s.bytes()?);
                while !l.at_end() {
                    match l.key()? {
                        (6, w) => l.for_each_varint(w, |t| out.push(t as i64))?,
                        (_, w) => l.skip(w)?,
                    }
                }
            }
            (_, w) => s.skip(w)?,
        }
    }
    Ok(())
}

/// The varint field `field` of an `AttrValue` (6: `type`, 3: `i`), 0 when
/// absent (protobuf's default).
fn scalar(v: &[u8], field: u32) -> std::result::Result<i64, Malformed> {
    let mut s = Scan::new(v);
    let mut out = 0;
    while !s.at_end() {
        match s.key()? {
            (f, VARINT) if f == field => out = s.varint()? as i64,
            (_, w) => s.skip(w)?,
        }
    }
    Ok(out)
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn put_bytes(out: &mut Vec<u8>, field: u32, b: &[u8]) {
    put_varint(out, (u64::from(field) << 3) | u64::from(LEN));
    put_varint(out, b.len() as u64);
    out.extend_from_slice(b);
}

fn put_varint_field(out: &mut Vec<u8>, field: u32, v: u64) {
    put_varint(out, u64::from(field) << 3);
    put_varint(out, v);
}

fn varint_len(mut v: u64) -> usize {
    let mut n = 1;
    while v >= 0x80 {
        v >>= 7;
        n += 1;
    }
    n
}

/// A map entry `key -> value` of `NodeDef.attr` (5), written in place.
fn put_attr(node: &mut Vec<u8>, key: &str, value: &[u8]) {
    let inner =
        2 + varint_len(key.len() as u64) + key.len() + varint_len(value.len() as u64) + value.len();
    put_varint(node, (5 << 3) | u64::from(LEN));
    put_varint(node, inner as u64);
    put_bytes(node, 1, key.as_bytes());
    put_bytes(node, 2, value);
}

/// The ops of the nodes the swaps name (producers and readers): what
/// [`write`] needs an [`OpSig`] of. Indices out of range are left for
/// [`write`] to report.
///
/// # Errors
/// [`PlanError::Decode`] for a node that is not protobuf.
pub fn ops_needed(index: &NodeIndex<'_>, swaps: &[Swap]) -> Result<Vec<String>> {
    // Each node read once (a flag per node), its op's name borrowed from
    // the bytes until the end.
    let mut seen = vec![false; index.len()];
    let mut ops: FxHashSet<&str> = FxHashSet::default();
    let n = index.len() as i64;
    let mut visit = |ix: &Ix| -> Result<()> {
        if let Ix::Int(v) = ix {
            if (0..n).contains(v) && !std::mem::replace(&mut seen[*v as usize], true) {
                ops.insert(index.node(*v as usize)?.op);
            }
        }
        Ok(())
    };
    for s in swaps {
        visit(&s.node)?;
        for e in &s.ins {
            for c in e.consumers.iter().chain(&e.clone_consumers) {
                visit(c)?;
            }
        }
    }
    let mut ops: Vec<String> = ops.into_iter().map(str::to_string).collect();
    ops.sort_unstable();
    Ok(ops)
}

/// Writes `swaps` into the graph `index` locates (see the module's rule).
///
/// # Errors
/// [`PlanError::InvalidArgument`] for an index out of range or not an
/// integer, an output the node does not have, a `follows` with no swap-in
/// before it, a consumer that does not read the tensor;
/// [`PlanError::Unsupported`] for a producer whose op has no signature in
/// `sigs` or lacks an attribute its outputs' types need, and for a handle
/// (resource, variant); [`PlanError::Decode`] for bytes that are not a
/// `GraphDef`. Nothing is returned with an error.
pub fn write<'a>(
    index: &NodeIndex<'a>,
    swaps: &[Swap],
    sigs: &Sigs,
    target: &Target,
) -> Result<Written<'a>> {
    // The maps sized for the plan once (no rehash as they fill): S swaps,
    // I swap-ins, R readers named in all.
    let ins: usize = swaps.iter().map(|s| s.ins.len()).sum();
    let readers: usize = (swaps.iter().flat_map(|s| &s.ins))
        .map(|i| i.consumers.len() + i.clone_consumers.len())
        .sum();
    let n = swaps.len();
    let mut st = State {
        index,
        sigs,
        target,
        changed: Vec::with_capacity(n + readers),
        changed_at: FxHashMap::with_capacity_and_hasher(n + readers, Default::default()),
        added: FxHashSet::with_capacity_and_hasher(n + ins, Default::default()),
        new_nodes: Vec::with_capacity(swaps.len() * 3 * 160),
        scratch: Vec::new(),
        value: Vec::new(),
        last_in: FxHashMap::with_capacity_and_hasher(ins, Default::default()),
        lost: FxHashMap::with_capacity_and_hasher(n, Default::default()),
        gained: FxHashMap::with_capacity_and_hasher(n + ins, Default::default()),
        out: Written::default(),
    };
    for (i, swap) in swaps.iter().enumerate() {
        st.swap(i, swap)?;
    }
    st.assemble()
}

#[cfg(test)]
mod tests;
