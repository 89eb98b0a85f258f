//! The direct route from serialized `GraphDef` bytes to a [`Graph`], taken
//! by [`crate::build::graph_from_bytes`] and so by [`crate::analyze`].
//!
//! It gives the graph of the reference route (`graphdef::decode`, then
//! `build::specs_from_raw`, then `build::build`) without its per-node
//! records, in flat arrays:
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
//! 4. [`build::finish`], shared with the reference route.
//!
//! Anything the reference route rejects, and a few legal oddities (an
//! output index of 2^16 or more, a `:` in a node name, names past 4 GiB),
//! stops the direct route, which then defers to the reference route: errors
//! and their messages are the reference's. Only the loss lookup of step 4
//! reports its error itself, being the last check of both routes.
//!
//! # Complexity
//! O(bytes + N + T + E + D) expected time for N nodes, T tensors, E edges
//! and D dimensions (hash lookups); memory O(N + T + E + D) besides the
//! graph, in a few dozen vectors whatever N: nothing is allocated per node.
//! On deferral, the reference route's time and memory are added.

use std::mem::take;
use std::sync::Arc;

use rustc_hash::FxHashSet;

use crate::build::{self, BuildOptions, MAX_OUTPUTS};
use crate::dtype::DType;
use crate::error::Result;
use crate::flatdecode::{self, Arrays, NodeAttrs, NodeView};
use crate::graph::{big_vec, Graph, Name, Node, NodeFlags, Tensor, NONE};
use crate::nametable::{self, Interner, Names};
use crate::opkind;
use crate::wire::Malformed;

/// The direct route cannot decide this graph; the reference route must.
#[derive(Debug)]
pub(crate) struct Defer;

type Step<T> = std::result::Result<T, Defer>;

// Output indices below MAX_OUTPUTS are exactly those that fit a u16.
const _: () = assert!(MAX_OUTPUTS == 1 << 16);

/// Builds the graph of `bytes` as [`build::build`] would from the specs of
/// the reference decoder, or `None` where the reference route must decide
/// (always for malformed bytes and invalid graphs).
///
/// # Errors
/// Only [`crate::phase::classify`]'s, for a loss that names nothing.
///
/// # Complexity
/// See the module documentation.
pub(crate) fn graph_from_bytes(bytes: &[u8], opts: &BuildOptions) -> Option<Result<Graph>> {
    // Capacities from the size of the input, on the high side: traced steps
    // take 100 to 300 bytes a node, and pages reserved but never written
    // cost no memory. Vectors grow past them if need be.
    let mut b = Builder::new(bytes.len() / 128, bytes.len() / 4);
    // The same for the output shapes and their dimensions, which otherwise
    // grow by doubling, copied (the synthetic steps take about 175 bytes an
    // output shape and 100 a dimension).
    let mut arrays = Arrays::default();
    arrays.out.shapes = big_vec(bytes.len() / 48);
    arrays.out.dims = big_vec(bytes.len() / 16);
    let functions = flatdecode::decode(bytes, &mut arrays, |v, a| {
        b.node(v, a).map_err(|Defer| Malformed)
    })
    .ok()?;
    let mut g = b.assemble(arrays, &functions).ok()?;
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
    names: Names,
    ops: Interner<'a>,
    devices: Interner<'a>,
    meta: Vec<Meta>,
    /// Data inputs of node n: `in_src[in_off[n]..in_off[n + 1]]` (source
    /// nodes, [`NONE`] until resolved; the tensors once edges are made) and
    /// the output indices they read, `in_k[..]` (below 2^16).
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
}

impl<'a> Builder<'a> {
    /// A builder for about `n` nodes with `text` bytes of names.
    fn new(n: usize, text: usize) -> Builder<'a> {
        let mut devices = Interner::new();
        // Device 0 is the empty device, as in the reference route.
        let _ = devices.id(b"");
        let with_zero = |cap: usize| {
            let mut v = big_vec(cap);
            v.push(0);
            v
        };
        Builder {
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
        }
    }

    /// Step 1 for one node.
    fn node(&mut self, v: &NodeView<'a, '_>, arrays: &Arrays) -> Step<()> {
        let id = self.meta.len() as u32;
        if v.name.is_empty() || id >= NONE / 2 - 1 || !self.names.push(v.name) {
            return Err(Defer);
        }
        for &s in v.inputs {
            self.input(s)?;
        }
        self.in_off.push(self.in_src.len() as u32);
        self.ctl_off.push(self.ctl_src.len() as u32);
        let op = self.ops.id(v.op).ok_or(Defer)?;
        let device = if v.device.is_empty() {
            0
        } else {
            self.devices.id(v.device).ok_or(Defer)?
        };
        let mut flags = 0;
        if v.attrs.calls_function {
            flags |= NodeFlags::CALLS_FUNCTION | NodeFlags::NO_RECOMPUTE;
        }
        if v.inputs.is_empty() {
            flags |= NodeFlags::SOURCE;
        }
        if opkind::passes_each_input_through(v.op) && !passes_inputs_through(v) {
            return Err(Defer); // the reference route names what is wrong
        }
        self.meta.push(Meta { op, device, flags });
        match v.attrs.output_shapes {
            Some((lo, hi)) => {
                let count = hi - lo;
                for k in 0..count {
                    self.out_dtype.push(dtype_of(&v.attrs, arrays, k, count));
                }
                self.counts.push(count);
            }
            None => {
                self.unshaped.push(Unshaped {
                    node: id,
                    attrs: v.attrs,
                });
                self.counts.push(0);
            }
        }
        Ok(())
    }

    /// Parses one input reference and resolves it if it names one of the
    /// last nodes; the others wait for [`Builder::resolve_far_inputs`].
    #[inline]
    fn input(&mut self, s: &'a [u8]) -> Step<()> {
        let (name, k) = parse_input(s).ok_or(Defer)?;
        let h = nametable::hash(name);
        let src = self.names.recent(name, h);
        let control = k.is_none();
        let at = match k {
            None => {
                self.ctl_src.push(src.unwrap_or(NONE));
                self.ctl_src.len() - 1
            }
            Some(k) => {
                // Below MAX_OUTPUTS (the reference route rejects the others).
                let k = u16::try_from(k).map_err(|_| Defer)?;
                self.in_src.push(src.unwrap_or(NONE));
                self.in_k.push(k);
                self.in_src.len() - 1
            }
        };
        if src.is_none() {
            let at = u32::try_from(at).map_err(|_| Defer)?;
            self.far.push(Far {
                at,
                control,
                hash: h,
                name,
            });
        }
        Ok(())
    }

    /// Checks that node names are unique, and finds the source nodes of
    /// the inputs not resolved on sight. An input is checked as UTF-8 by
    /// being found equal to a node name.
    fn resolve_far_inputs(&mut self) -> Step<()> {
        let far = &self.far;
        let ids = self
            .names
            .resolve(far.len(), |i| (far[i].hash, far[i].name))
            .ok_or(Defer)?;
        for (f, src) in far.iter().zip(ids) {
            let list = if f.control {
                &mut self.ctl_src
            } else {
                &mut self.in_src
            };
            list[f.at as usize] = src;
        }
        Ok(())
    }

    /// Steps 2 and 3.
    fn assemble(&mut self, arrays: Arrays, functions: &[&str]) -> Step<Graph> {
        if self.meta.is_empty() {
            return Err(Defer);
        }
        self.resolve_far_inputs()?;
        let mut g = Graph {
            nodes: self.nodes()?,
            ops: take(&mut self.ops.strings),
            devices: take(&mut self.devices.strings),
            ..Graph::default()
        };
        mark_function_calls(&mut g, functions);
        let dtypes = self.output_counts(&mut g, &arrays)?;
        self.tensors(&mut g, arrays, dtypes)?;
        self.edges(&mut g)?;
        Ok(g)
    }

    /// The nodes, their names sharing one buffer, once the names are
    /// checked: UTF-8 (all at once, then each ends on a char boundary), and
    /// no `:` in any (so that [`parse_input`] splits inputs as the
    /// reference does).
    fn nodes(&mut self) -> Step<Vec<Node>> {
        let (text, ends) = self.names.take_text();
        if text.contains(&b':') {
            return Err(Defer);
        }
        let text = String::from_utf8(text).map_err(|_| Defer)?;
        if !ends.iter().all(|&e| text.is_char_boundary(e as usize)) {
            return Err(Defer);
        }
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

    /// Output counts (into `g.out_off`) and the dtypes read from attributes
    /// of every tensor (0: none).
    fn output_counts(&mut self, g: &mut Graph, arrays: &Arrays) -> Step<Vec<u8>> {
        if !self.unshaped.is_empty() {
            self.count_unshaped(arrays)?;
        }
        g.out_off = big_vec(self.counts.len() + 1);
        g.out_off.push(0);
        let mut total = 0u64;
        for &c in &self.counts {
            total += u64::from(c);
            if total >= u64::from(NONE) {
                return Err(Defer);
            }
            g.out_off.push(total as u32);
        }
        Ok(take(&mut self.out_dtype))
    }

    /// The output counts of the nodes without `_output_shapes` (from the
    /// output indices read, as `build::fallback_shapes` counts them), and
    /// the dtypes of every tensor, in tensor order.
    fn count_unshaped(&mut self, arrays: &Arrays) -> Step<()> {
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
                return Err(Defer);
            }
        }
        self.out_dtype = dtypes;
        Ok(())
    }

    /// For every node, 1 + the largest output index any input reads (0 if none).
    fn referenced_outputs(&self) -> Vec<u32> {
        let mut out = vec![0u32; self.meta.len()];
        for (&src, &k) in self.in_src.iter().zip(&self.in_k) {
            let r = &mut out[src as usize];
            *r = (*r).max(u32::from(k) + 1);
        }
        out
    }

    /// Step 3, tensors: dtypes inherited from the first data input, in node
    /// order, then sizes.
    fn tensors(&self, g: &mut Graph, mut arrays: Arrays, mut dt: Vec<u8>) -> Step<()> {
        // Every node shaped: the decoder's dimensions are the graph's, in order.
        let in_place = self.unshaped.is_empty();
        let out_dims = take(&mut arrays.out.dims);
        let out_shapes = take(&mut arrays.out.shapes);
        g.tensors = big_vec(dt.len());
        let (mut u, mut c) = (0, 0);
        for i in 0..self.meta.len() {
            let (lo, hi) = (g.out_off[i] as usize, g.out_off[i + 1] as usize);
            if dt[lo..hi].contains(&0) {
                let from = self.first_input_dtype(&g.out_off, &dt, i);
                for d in &mut dt[lo..hi] {
                    if *d == 0 {
                        *d = from;
                    }
                }
            }
            let fallback = match self.unshaped.get(u) {
                Some(x) if x.node as usize == i => {
                    u += 1;
                    Some(x.attrs.fallback)
                }
                _ => None,
            };
            for k in 0..hi - lo {
                let (rec, dims) = match fallback {
                    Some(f) => (f, f.and_then(|r| arrays.side.dims_of(r))),
                    None => {
                        let r = out_shapes[c];
                        c += 1;
                        (Some(r), flatdecode::dims_in(&out_dims, r))
                    }
                };
                let dtype = DType::from_proto(i64::from(dt[lo + k]));
                let node = &g.nodes[i];
                let size =
                    build::tensor_size(&node.name, &g.ops[node.op as usize], k as u32, dtype, dims);
                let (dtype, rank, bytes) = size.map_err(|_| Defer)?;
                let shape_off = match rec {
                    Some(r) if in_place => r.off,
                    _ => {
                        let off = g.dims.len() as u32;
                        g.dims.extend_from_slice(dims.unwrap_or(&[]));
                        off
                    }
                };
                g.tensors.push(Tensor {
                    node: i as u32,
                    index: k as u32,
                    dtype,
                    bytes,
                    value_bytes: bytes,
                    alias_of: NONE,
                    shape_off,
                    rank,
                });
            }
        }
        if in_place {
            g.dims = out_dims;
            g.dims.shrink_to_fit();
        }
        Ok(())
    }

    /// The dtype of node `i`'s first data input (0: none or unknown), as
    /// `build::inherit_dtypes` reads it.
    fn first_input_dtype(&self, out_off: &[u32], dt: &[u8], i: usize) -> u8 {
        let j = self.in_off[i] as usize;
        if j == self.in_off[i + 1] as usize {
            return 0;
        }
        let (src, k) = (self.in_src[j] as usize, u32::from(self.in_k[j]));
        let (lo, hi) = (out_off[src], out_off[src + 1]);
        if k < hi - lo {
            dt[(lo + k) as usize]
        } else {
            0
        }
    }

    /// Step 3, edges: every data input becomes the tensor it reads.
    fn edges(&mut self, g: &mut Graph) -> Step<()> {
        for (src, &k) in self.in_src.iter_mut().zip(&self.in_k) {
            let s = *src as usize;
            let (lo, hi) = (g.out_off[s], g.out_off[s + 1]);
            if u32::from(k) >= hi - lo {
                return Err(Defer);
            }
            *src = lo + u32::from(k);
        }
        g.in_tensor = take(&mut self.in_src);
        g.in_off = take(&mut self.in_off);
        g.ctl_src = take(&mut self.ctl_src);
        g.ctl_off = take(&mut self.ctl_off);
        Ok(())
    }
}

/// Splits an input reference as [`build::parse_input`] does, provided no
/// node name has a `:` (checked by [`Builder::assemble`]): `^node` gives
/// (`node`, `None`), `node:k` gives (`node`, `Some(k)`), `node` gives
/// (`node`, `Some(0)`). `None` where the reference fails.
///
/// A reference with a `:` not followed by digits only is taken whole as a
/// name, which then names no node (no name has a `:`): the reference reads
/// it as an error, or (for `node:+1`) as `node:1`, and the direct route
/// defers to it either way.
#[inline]
fn parse_input(s: &[u8]) -> Option<(&[u8], Option<u32>)> {
    if let [b'^', rest @ ..] = s {
        return Some((rest, None));
    }
    let digits = s.iter().rev().take_while(|b| b.is_ascii_digit()).count();
    let colon = s.len() - digits;
    if digits > 0 && colon > 0 && s[colon - 1] == b':' {
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
/// `build::output_dtype`.
/// Whether an `IdentityN` lists one type per data input in `T`, and, when
/// it has `_output_shapes`, one shape per data input (the reference route's
/// `build::check_pass_through`, stricter on nothing).
fn passes_inputs_through(v: &NodeView<'_, '_>) -> bool {
    let data = v.inputs.iter().filter(|s| !s.starts_with(b"^")).count() as u32;
    let listed = v.attrs.lists[crate::flatdecode::T_LIST].map(|(lo, hi)| hi - lo);
    let shaped = v.attrs.output_shapes.map(|(lo, hi)| hi - lo);
    listed == Some(data) && shaped.is_none_or(|c| c == data)
}

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
