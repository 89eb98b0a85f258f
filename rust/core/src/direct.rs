//! The GraphDef decoder's build: serialized `GraphDef` bytes to a [`Graph`],
//! [`crate::graph_from_bytes`], and so [`crate::analyze`],
//! in flat arrays, with no record per node:
//!
//! 1. [`flatdecode::decode`] hands over one node at a time, its strings
//!    borrowed from the input. The name is appended to one buffer (which
//!    becomes the graph's, shared by every [`Name`]), the op and device are
//!    interned, and each input is parsed once. An input naming one of the
//!    last few nodes (most of them: a layer reads the one before) is
//!    resolved on sight; the others are kept with their hash. Shapes stay in
//!    the decoder's flat arrays; dtypes are read off the folded attributes
//!    as soon as the number of outputs is known.
//! 2. Every name goes into one [`nametable::NameTable`] (the only name map),
//!    and the kept inputs are resolved against it, both in batches. Nodes
//!    without `_output_shapes` get their output count from the largest
//!    output index read from them.
//! 3. In node order: dtypes inherited from the first data input, tensors
//!    (sized by [`build::tensor_size`]), and edges. When every node has
//!    `_output_shapes`, the decoder's dimensions are [`Graph::dims`] as they
//!    stand.
//! 4. [`build::finish`], shared with [`build::build`] (flat node specs).
//!
//! Errors are typed and say what is wrong and where ([`faults`]): malformed
//! bytes and strings that are not UTF-8 are [`crate::PlanError::Decode`]
//! (byte offset, node, attribute); a graph that decodes but is not a valid
//! dataflow graph gets the error, in the order of the checks, of the
//! reference route (`graphdef::decode`, `reference::specs_from_raw`,
//! [`build::build`]), kept as a test oracle: a fault met while streaming is
//! held until the bytes are known to decode. The context an error needs
//! stays off the hot path: a first pass checks no input for a `:`, and on
//! any error a second, exact pass makes the error again
//! ([`graph_from_bytes`]).
//!
//! # Complexity
//! O(bytes + N + T + E + D) expected time for N nodes, T tensors, E edges
//! and D dimensions (hash lookups); memory O(N + T + E + D) besides the
//! graph, in a few dozen vectors whatever N: nothing is allocated per node.
//! An error costs the exact pass, and O(N + E) more at most, once.

mod faults;
mod tensors;

use std::mem::take;
use std::sync::Arc;

use rustc_hash::FxHashSet;

use crate::build::{self, BuildOptions, MAX_OUTPUTS};
use crate::error::{PlanError, Result};
use crate::flatdecode::{self, Arrays, NodeAttrs, NodeView};
use crate::graph::{big_vec, Graph, Name, Node, NodeFlags, NONE};
use crate::nametable::{self, Interner, Names};
use crate::opkind;
use faults::Faults;

/// [`Builder::in_k`] of an output index of `u16::MAX` or more, kept in
/// [`Faults::big_k`].
const BIG_K: u16 = u16::MAX;

/// Decodes and builds in one call: the graph of the serialized `GraphDef`
/// `bytes` (the graph [`build::build`] gives for the same node specs), with
/// no record per node, one name map, inputs parsed once. Public as
/// `hybridplan_core::graph_from_bytes`.
///
/// # Errors
/// [`PlanError::Decode`] for malformed bytes (what is wrong, the byte
/// offset, the node and attribute); [`PlanError::InvalidGraph`] and
/// [`PlanError::UnknownShape`] as [`build::build`] gives them for the same
/// node specs; those of [`build::finish`].
///
/// # Complexity
/// See the module documentation.
///
/// ```
/// use hybridplan_core::{build::BuildOptions, graph_from_bytes};
/// use hybridplan_core::synth::{residual_graphdef, SynthSpec};
/// let bytes = residual_graphdef(&SynthSpec { blocks: 1, ..Default::default() });
/// let g = graph_from_bytes(&bytes, &BuildOptions::default()).unwrap();
/// assert!(g.num_nodes() > 10);
/// assert!(graph_from_bytes(&bytes[..bytes.len() / 2], &BuildOptions::default()).is_err());
/// ```
pub fn graph_from_bytes(bytes: &[u8], opts: &BuildOptions) -> Result<Graph> {
    // The first pass checks no input for a `:` (a node name with one,
    // which TensorFlow never writes, ends it at once): an input taken whole
    // that has one then names no node, so the pass fails. Any error is made
    // again by the exact pass, which parses every input as the reference
    // does and gives the reference's error; a graph that builds is built by
    // the first pass alone.
    match build_graph(bytes, opts, false) {
        Some(Ok(g)) => Ok(g),
        _ => build_graph(bytes, opts, true).unwrap_or_else(|| Err(build::no_nodes())),
    }
}

/// [`graph_from_bytes`]; `None` if a node name has a `:` and `exact` is
/// false. Its errors are the reference's only when `exact`.
fn build_graph(bytes: &[u8], opts: &BuildOptions, exact: bool) -> Option<Result<Graph>> {
    // Capacities from the size of the input, on the high side: traced steps
    // take 100 to 300 bytes a node, and pages reserved but never written
    // cost no memory. Vectors grow past them if need be.
    let mut b = Builder::new(bytes, bytes.len() / 128, bytes.len() / 4);
    b.exact = exact;
    // The same for the output shapes and their dimensions, which otherwise
    // grow by doubling, copied (the synthetic steps take about 175 bytes an
    // output shape and 100 a dimension).
    let mut arrays = Arrays::default();
    arrays.out.shapes = big_vec(bytes.len() / 48);
    arrays.out.dims = big_vec(bytes.len() / 16);
    let functions = match flatdecode::decode(bytes, &mut arrays, |v, a| b.node(v, a)) {
        Ok(f) => f,
        Err(e) => return Some(Err(e)),
    };
    if !exact && b.names.any_has(b':') {
        return None;
    }
    let mut g = match b.assemble(arrays, &functions) {
        Ok(g) => g,
        Err(e) => return Some(Err(e)),
    };
    let lookup = |g: &Graph, name: &str| {
        b.names
            .find(name.as_bytes(), |i| g.nodes[i as usize].name.as_bytes())
    };
    Some(build::finish(&mut g, opts, lookup).map(|()| g))
}

/// What is kept of a node without `_output_shapes` until its output count
/// is known.
struct Unshaped {
    node: u32,
    attrs: NodeAttrs,
}

/// Op and device ids and flags of a node, until its name is a [`Name`].
#[derive(Clone, Copy)]
struct Meta {
    op: u32,
    device: u32,
    flags: u8,
}

/// An input not resolved on sight.
struct Far<'a> {
    /// Position in [`Builder::in_src`], or in [`Builder::ctl_src`] for a
    /// control input.
    at: u32,
    control: bool,
    hash: u64,
    name: &'a [u8],
}

struct Builder<'a> {
    input: &'a [u8],
    names: Names,
    ops: Interner<'a>,
    devices: Interner<'a>,
    meta: Vec<Meta>,
    /// Data inputs of node n: `in_src[in_off[n]..in_off[n + 1]]` (source
    /// nodes, [`NONE`] until resolved or where none is; the tensors once
    /// edges are made) and the output indices they read, `in_k[..]`
    /// ([`BIG_K`]: see [`Faults::big_k`]).
    in_off: Vec<u32>,
    in_src: Vec<u32>,
    in_k: Vec<u16>,
    /// Control inputs of node n: `ctl_src[ctl_off[n]..ctl_off[n + 1]]`.
    ctl_off: Vec<u32>,
    ctl_src: Vec<u32>,
    far: Vec<Far<'a>>,
    /// Output count of every node (0 for an unshaped node until step 2).
    counts: Vec<u32>,
    /// Dtypes of the outputs of shaped nodes, aligned with
    /// [`Arrays::out`]'s shapes (0: unknown).
    out_dtype: Vec<u8>,
    /// Nodes without `_output_shapes`, in node order.
    unshaped: Vec<Unshaped>,
    /// What is wrong, held until it can be reported.
    faults: Faults,
    /// Parse every input exactly (else check none for a `:`: right for a
    /// graph that builds when no node name has one).
    exact: bool,
}

impl<'a> Builder<'a> {
    /// A builder for `input`, of about `n` nodes with `text` bytes of names.
    fn new(input: &'a [u8], n: usize, text: usize) -> Builder<'a> {
        let mut devices = Interner::new();
        // Device 0 is the empty device, as in the reference route.
        let _ = devices.id(b"");
        let with_zero = |cap: usize| {
            let mut v = big_vec(cap);
            v.push(0);
            v
        };
        Builder {
            input,
            names: Names::with_capacity(n, text),
            ops: Interner::new(),
            devices,
            meta: big_vec(n),
            in_off: with_zero(n + 1),
            in_src: big_vec(n * 3 / 2),
            in_k: big_vec(n * 3 / 2),
            ctl_off: with_zero(n + 1),
            ctl_src: big_vec(n / 2),
            far: big_vec(n / 2),
            counts: big_vec(n),
            out_dtype: big_vec(n),
            unshaped: Vec::new(),
            faults: Faults::default(),
            exact: false,
        }
    }

    /// Step 1 for one node. Returns only errors of the bytes (a string not
    /// UTF-8); the others are held in [`Builder::faults`].
    fn node(&mut self, v: &NodeView<'a, '_>, arrays: &Arrays) -> Result<()> {
        let id = self.meta.len() as u32;
        if self.faults.stopped.is_some() {
            return self.check_strings(id, v);
        }
        if id >= NONE / 2 - 1 || !self.names.push(v.name) {
            self.faults
                .stop(id, "more than 2^31 nodes, or names past 4 GiB in all");
            return self.check_strings(id, v);
        }
        if v.name.is_empty() {
            self.faults.empty_name.get_or_insert(id);
        }
        let mut data = 0u32;
        for &s in v.inputs {
            self.input(id, v.name, s, &mut data)?;
        }
        self.in_off.push(self.in_src.len() as u32);
        self.ctl_off.push(self.ctl_src.len() as u32);
        let op = self.intern_op(id, v)?;
        let device = if v.device.is_empty() {
            0
        } else {
            let d = self.devices.id(v.device);
            d.ok_or_else(|| {
                flatdecode::not_utf8(self.input, v.device, id as usize, v.name, "device")
            })?
        };
        let mut flags = 0;
        if v.attrs.calls_function {
            flags |= NodeFlags::CALLS_FUNCTION | NodeFlags::NO_RECOMPUTE;
        }
        if v.inputs.is_empty() {
            flags |= NodeFlags::SOURCE;
        }
        if opkind::passes_each_input_through(v.op) {
            self.faults.check_pass_through(v, data);
        }
        self.meta.push(Meta { op, device, flags });
        match v.attrs.output_shapes {
            Some((lo, hi)) => {
                let count = hi - lo;
                let start = self.out_dtype.len();
                for k in 0..count {
                    self.out_dtype.push(dtype_of(v.attrs, arrays, k, count));
                }
                if self.out_dtype[start..].contains(&0) {
                    self.faults.unknown_dtype(id);
                }
                self.counts.push(count);
            }
            None => {
                self.unshaped.push(Unshaped {
                    node: id,
                    attrs: *v.attrs,
                });
                self.counts.push(0);
            }
        }
        Ok(())
    }

    fn intern_op(&mut self, id: u32, v: &NodeView<'a, '_>) -> Result<u32> {
        let op = self.ops.id(v.op);
        op.ok_or_else(|| flatdecode::not_utf8(self.input, v.op, id as usize, v.name, "op"))
    }

    /// Once the graph is known invalid: only the UTF-8 of the strings of
    /// node `id` (the errors of the bytes come first).
    #[cold]
    #[inline(never)]
    fn check_strings(&self, id: u32, v: &NodeView<'a, '_>) -> Result<()> {
        let fields = [(v.name, "name"), (v.op, "op"), (v.device, "device")];
        let inputs = v.inputs.iter().map(|&s| (s, "input"));
        for (s, what) in fields.into_iter().chain(inputs) {
            if std::str::from_utf8(s).is_err() {
                return Err(flatdecode::not_utf8(
                    self.input,
                    s,
                    id as usize,
                    v.name,
                    what,
                ));
            }
        }
        Ok(())
    }

    /// Parses one input reference of node `id` and resolves it if it names
    /// one of the last nodes; the others wait for
    /// [`Builder::resolve_far_inputs`]. `data` counts the data inputs.
    #[inline]
    fn input(&mut self, id: u32, user: &[u8], s: &'a [u8], data: &mut u32) -> Result<()> {
        let Some((name, k)) = parse_input(s) else {
            return self.unparsed(id, user, s, data);
        };
        let h = nametable::hash(name);
        let src = self.names.recent(name, h);
        // Taken whole, an input is right unless it has a `:` (then what
        // follows the last one is not a `u32`). Checked only by the exact
        // pass: when no node name has a `:`, such an input names no node,
        // and the first pass fails (see `graph_from_bytes`).
        if self.exact && name.len() == s.len() && name.contains(&b':') {
            return self.unparsed(id, user, s, data);
        }
        let control = k.is_none();
        let at = match k {
            None => {
                self.ctl_src.push(src.unwrap_or(NONE));
                self.ctl_src.len() - 1
            }
            Some(k) => {
                let small = u16::try_from(k).ok().filter(|&k| k != BIG_K);
                if small.is_none() {
                    self.faults.big_k.push(faults::BigK {
                        at: self.in_src.len() as u32,
                        k,
                        node: id,
                    });
                }
                self.in_src.push(src.unwrap_or(NONE));
                self.in_k.push(small.unwrap_or(BIG_K));
                *data += 1;
                self.in_src.len() - 1
            }
        };
        if src.is_none() {
            let Ok(at) = u32::try_from(at) else {
                self.faults.stop(id, "more than 2^32 inputs");
                return Ok(());
            };
            self.far.push(Far {
                at,
                control,
                hash: h,
                name,
            });
        }
        Ok(())
    }

    /// Input `s` of node `id` (named `user`) does not parse.
    #[cold]
    #[inline(never)]
    fn unparsed(&mut self, id: u32, user: &[u8], s: &'a [u8], data: &mut u32) -> Result<()> {
        if std::str::from_utf8(s).is_err() {
            return Err(flatdecode::not_utf8(
                self.input,
                s,
                id as usize,
                user,
                "input",
            ));
        }
        self.faults.bad_input(id, *data, s);
        self.in_src.push(NONE);
        self.in_k.push(0);
        *data += 1;
        Ok(())
    }

    /// Finds the source nodes of the inputs not resolved on sight ([`NONE`]
    /// for a name no node has). An input is checked as UTF-8 by being found
    /// equal to a node name. `None` if two nodes have the same name.
    fn resolve_far_inputs(&mut self) -> Option<()> {
        let far = &self.far;
        let ids = self
            .names
            .resolve(far.len(), |i| (far[i].hash, far[i].name))?;
        for (f, src) in far.iter().zip(ids) {
            let list = if f.control {
                &mut self.ctl_src
            } else {
                &mut self.in_src
            };
            list[f.at as usize] = src;
        }
        Some(())
    }

    /// Steps 2 and 3, the checks in the order of the reference route's.
    fn assemble(&mut self, arrays: Arrays, functions: &[&str]) -> Result<Graph> {
        if let Some(e) = self.checks_before_names() {
            return Err(self.fail(e));
        }
        if self.meta.is_empty() {
            return Err(build::no_nodes());
        }
        let unique = self.resolve_far_inputs().is_some();
        if let Some(e) = self.name_fault(unique) {
            return Err(self.fail(e));
        }
        let mut g = Graph {
            nodes: self.nodes()?,
            ops: take(&mut self.ops.strings),
            devices: take(&mut self.devices.strings),
            ..Graph::default()
        };
        mark_function_calls(&mut g, functions);
        let dtypes = self.output_counts(&mut g, &arrays)?;
        self.tensors(&mut g, arrays, dtypes)
            .map_err(|e| self.fail_built(&g, e))?;
        self.edges(&mut g)?;
        Ok(g)
    }

    /// The nodes, their names sharing one buffer, once the names are
    /// checked as UTF-8 (all at once, then each ends on a char boundary).
    fn nodes(&mut self) -> Result<Vec<Node>> {
        let (text, ends) = self.names.take_text();
        let text = match String::from_utf8(text) {
            Ok(t) if ends.iter().all(|&e| t.is_char_boundary(e as usize)) => t,
            Ok(t) => return Err(self.report_bad_name(t.into_bytes())),
            Err(e) => return Err(self.report_bad_name(e.into_bytes())),
        };
        let names = Name::split(Arc::new(text), ends.iter().map(|&e| e as usize));
        let mut nodes = big_vec(self.meta.len());
        nodes.extend(names.zip(&self.meta).map(|(name, m)| Node {
            name,
            op: m.op,
            device: m.device,
            flags: NodeFlags(m.flags),
        }));
        Ok(nodes)
    }

    #[cold]
    #[inline(never)]
    fn report_bad_name(&mut self, text: Vec<u8>) -> PlanError {
        self.names.restore_text(text);
        self.bad_name().unwrap_or_else(build::no_nodes)
    }

    /// Output counts (into `g.out_off`) and the dtypes read from attributes
    /// of every tensor (0: none).
    fn output_counts(&mut self, g: &mut Graph, arrays: &Arrays) -> Result<Vec<u8>> {
        if !self.unshaped.is_empty() {
            self.count_unshaped(arrays)?;
        }
        g.out_off = big_vec(self.counts.len() + 1);
        g.out_off.push(0);
        let mut total = 0u64;
        for &c in &self.counts {
            total += u64::from(c);
            if total >= u64::from(NONE) {
                return Err(build::too_many_tensors());
            }
            g.out_off.push(total as u32);
        }
        Ok(take(&mut self.out_dtype))
    }

    /// The output counts of the nodes without `_output_shapes` (from the
    /// output indices read, as `reference::fallback_shapes` counts them),
    /// and the dtypes of every tensor, in tensor order.
    fn count_unshaped(&mut self, arrays: &Arrays) -> Result<()> {
        let referenced = self.referenced_outputs();
        let mut dtypes = Vec::with_capacity(self.out_dtype.len() + self.unshaped.len());
        let (mut u, mut c) = (0, 0);
        for (i, &refs) in referenced.iter().enumerate() {
            match self.unshaped.get(u) {
                Some(x) if x.node as usize == i => {
                    let count = if x.attrs.has_shape_or_value {
                        refs.max(1)
                    } else {
                        refs
                    };
                    self.counts[i] = count;
                    dtypes.extend((0..count).map(|k| dtype_of(&x.attrs, arrays, k, count)));
                    u += 1;
                }
                _ => {
                    let count = self.counts[i] as usize;
                    dtypes.extend_from_slice(&self.out_dtype[c..c + count]);
                    c += count;
                }
            }
            if dtypes.len() >= NONE as usize {
                return Err(build::too_many_tensors());
            }
        }
        self.out_dtype = dtypes;
        Ok(())
    }

    /// The output index read by data input `j`.
    #[inline]
    fn k_of(&self, j: usize) -> u32 {
        match self.in_k[j] {
            BIG_K => self.faults.big_k_at(j as u32),
            k => u32::from(k),
        }
    }

    /// For every node, 1 + the largest output index any input reads (0 if
    /// none); the indices are below [`MAX_OUTPUTS`] (else an error came first).
    fn referenced_outputs(&self) -> Vec<u32> {
        let mut out = vec![0u32; self.meta.len()];
        for (j, &src) in self.in_src.iter().enumerate() {
            if let Some(r) = out.get_mut(src as usize) {
                *r = (*r).max(self.k_of(j).min(MAX_OUTPUTS - 1) + 1);
            }
        }
        out
    }
}

/// Splits an input reference as `build::parse_input` does (the part after
/// the last `:` is the output index): `^node` gives (`node`, `None`),
/// `node:k` gives (`node`, `Some(k)`), `node` gives (`node`, `Some(0)`).
/// `None` where that fails: after the last `:`, something not a `u32` but
/// for nothing at all or a string without digits at its end (taken whole:
/// the caller checks those for a `:`).
#[inline]
fn parse_input(s: &[u8]) -> Option<(&[u8], Option<u32>)> {
    if let [b'^', rest @ ..] = s {
        return Some((rest, None));
    }
    let digits = s.iter().rev().take_while(|b| b.is_ascii_digit()).count();
    let mut colon = s.len() - digits;
    if digits > 0 && colon > 1 && s[colon - 1] == b'+' && s[colon - 2] == b':' {
        colon -= 1;
    }
    if colon > 0 && s[colon - 1] == b':' {
        return Some((&s[..colon - 1], Some(parse_index(&s[colon..])?)));
    }
    Some((s, Some(0)))
}

/// A `u32` as `str::parse::<u32>` reads it: an optional `+`, then digits.
fn parse_index(s: &[u8]) -> Option<u32> {
    let digits = match s {
        [b'+', rest @ ..] if !rest.is_empty() => rest,
        _ => s,
    };
    if digits.is_empty() {
        return None;
    }
    digits.iter().try_fold(0u32, |v, &b| {
        let d = b.checked_sub(b'0').filter(|&d| d < 10)?;
        v.checked_mul(10)?.checked_add(u32::from(d))
    })
}

/// The dtype of output `k` of `count` (0: none), by the rule of
/// `reference::output_dtype`.
fn dtype_of(a: &NodeAttrs, arrays: &Arrays, k: u32, count: u32) -> u8 {
    for &(lo, hi) in a.lists.iter().flatten() {
        if hi - lo == count {
            return arrays.types[(lo + k) as usize];
        }
    }
    a.single.map_or(0, |d| d.0)
}

/// Flags the nodes whose op is control flow or a function of the library.
fn mark_function_calls(g: &mut Graph, functions: &[&str]) {
    let functions: FxHashSet<&str> = functions.iter().copied().collect();
    let calls: Vec<bool> = g
        .ops
        .iter()
        .map(|op| opkind::is_control_flow(op) || functions.contains(&**op))
        .collect();
    if !calls.contains(&true) {
        return;
    }
    for node in &mut g.nodes {
        if calls[node.op as usize] {
            node.flags.0 |= NodeFlags::CALLS_FUNCTION | NodeFlags::NO_RECOMPUTE;
        }
    }
}

#[cfg(test)]
mod tests;
