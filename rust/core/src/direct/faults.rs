//! What is wrong with a graph that [`super::Builder`] builds, and which
//! error it reports.
//!
//! Faults met while streaming the nodes are held, and every error of the
//! graph is reported after the errors of the bytes (a node name, or an
//! input naming no node, that is not UTF-8: [`Builder::fail`]). Among the
//! graph's errors, the first in the order the reference route checks them
//! (`reference::specs_from_raw`, then [`build::build`]):
//!
//! 1. where some node lacks `_output_shapes`, the first input (in node
//!    order) that does not parse or reads an output index of 2^16 or more;
//! 2. the first node that passes its inputs through but whose `T` (or
//!    `_output_shapes`) does not list one entry per data input;
//! 3. the first node with an output of unknown dtype whose first data input
//!    does not parse;
//! 4. no nodes; more than 2^31 nodes (or names past 4 GiB, more than 2^32
//!    inputs: limits of this decoder);
//! 5. the first node with an empty name or the name of an earlier node;
//! 6. the first tensor whose size cannot be told ([`build::tensor_size`]);
//! 7. the first node with an input that does not parse, names no node, or
//!    reads an output its source lacks; within that node, the first such
//!    input in NodeDef order (a control input naming no node may come
//!    before a bad data input in a mutated graph).
//!
//! The messages are those of the reference route.
//!
//! # Complexity
//! O(1) per fault held; O(N + E) to report one (only on the way out).

use rustc_hash::FxHashSet;

use super::{Builder, NONE};
use crate::build::{self, MAX_OUTPUTS};
use crate::error::PlanError;
use crate::flatdecode::{self, NodeView};
use crate::graph::Graph;

/// An output index of `u16::MAX` or more, read by a data input.
pub(super) struct BigK {
    /// Position of the input in `Builder::in_src`.
    pub at: u32,
    pub k: u32,
    pub node: u32,
}

/// The faults held while the nodes stream in: the first of each kind.
#[derive(Default)]
pub(super) struct Faults {
    /// A limit passed: the build stops (but the bytes are still checked).
    pub stopped: Option<PlanError>,
    pub empty_name: Option<u32>,
    /// The first input that does not parse: (node, data position, error).
    bad_input: Option<(u32, u32, PlanError)>,
    /// Check 2.
    pass_through: Option<PlanError>,
    /// Check 3.
    unparsed_dtype_source: Option<PlanError>,
    /// Every output index of `u16::MAX` or more, in input order.
    pub big_k: Vec<BigK>,
}

impl Faults {
    #[cold]
    #[inline(never)]
    pub(super) fn stop(&mut self, id: u32, what: &str) {
        if self.stopped.is_none() {
            self.stopped = Some(PlanError::InvalidGraph(format!(
                "{what} (at node {id}): past what the decoder holds"
            )));
        }
    }

    /// An input reference `s` of node `id`, its data input number `data`,
    /// that does not parse.
    #[cold]
    #[inline(never)]
    pub(super) fn bad_input(&mut self, id: u32, data: u32, s: &[u8]) {
        if self.bad_input.is_none() {
            self.bad_input = Some((id, data, parse_error(s)));
        }
    }

    /// Node `id` (the last one streamed) has an output of unknown dtype.
    #[cold]
    #[inline(never)]
    pub(super) fn unknown_dtype(&mut self, id: u32) {
        if let Some((node, 0, e)) = &self.bad_input {
            if *node == id && self.unparsed_dtype_source.is_none() {
                self.unparsed_dtype_source = Some(e.clone());
            }
        }
    }

    /// Check 2 for node `v`, of `data` data inputs.
    pub(super) fn check_pass_through(&mut self, v: &NodeView<'_, '_>, data: u32) {
        let shaped = v.attrs.output_shapes.map(|(lo, hi)| (hi - lo) as usize);
        let t = v.attrs.t.map(|t| t.map(|k| k as usize));
        if self.pass_through.is_none() {
            let (name, op) = (
                String::from_utf8_lossy(v.name),
                String::from_utf8_lossy(v.op),
            );
            self.pass_through = build::pass_through_fault(&name, &op, data as usize, t, shaped);
        }
    }

    /// The output index of the data input at `at`, one of [`Faults::big_k`].
    #[cold]
    #[inline(never)]
    pub(super) fn big_k_at(&self, at: u32) -> u32 {
        let i = self.big_k.partition_point(|b| b.at < at);
        self.big_k.get(i).map_or(u32::MAX, |b| b.k)
    }
}

/// The reference's error for an input reference that does not parse.
fn parse_error(s: &[u8]) -> PlanError {
    PlanError::InvalidGraph(format!(
        "input reference '{}' is not of the form node, node:index or ^node",
        String::from_utf8_lossy(s)
    ))
}

impl Builder<'_> {
    /// Checks 1 to 4 but for no nodes, once every node has streamed in.
    pub(super) fn checks_before_names(&self) -> Option<PlanError> {
        let f = &self.faults;
        if !self.unshaped.is_empty() {
            let big = f.big_k.iter().find(|b| b.k >= MAX_OUTPUTS).map(|b| {
                let data = b.at - self.in_off[b.node as usize];
                (b.node, data, self.big_k_error(b))
            });
            let bad = f.bad_input.as_ref().map(|(n, d, e)| (*n, *d, e.clone()));
            let first = [bad, big].into_iter().flatten().min_by_key(|x| (x.0, x.1));
            if let Some((_, _, e)) = first {
                return Some(e);
            }
        }
        let later = [&f.pass_through, &f.unparsed_dtype_source, &f.stopped];
        later.into_iter().flatten().next().cloned()
    }

    fn big_k_error(&self, b: &BigK) -> PlanError {
        let name = self
            .far
            .iter()
            .find(|x| !x.control && x.at == b.at)
            .map(|x| x.name)
            .unwrap_or_else(|| self.names.get(self.in_src[b.at as usize]));
        PlanError::InvalidGraph(format!(
            "node '{}' reads output {} of '{}': no op has that many outputs",
            String::from_utf8_lossy(self.names.get(b.node)),
            b.k,
            String::from_utf8_lossy(name)
        ))
    }

    /// Check 5, once the far inputs are resolved (`unique`: no two names
    /// are equal).
    pub(super) fn name_fault(&self, unique: bool) -> Option<PlanError> {
        let dup = if unique { None } else { self.first_duplicate() };
        let empty = self.faults.empty_name;
        match (empty, dup) {
            (Some(e), d) if d.is_none_or(|d| e <= d) => Some(PlanError::InvalidGraph(format!(
                "node {e} (op {}) has an empty name",
                self.ops.strings[self.meta[e as usize].op as usize]
            ))),
            (_, Some(d)) => Some(PlanError::InvalidGraph(format!(
                "two nodes are named '{}': node names must be unique",
                String::from_utf8_lossy(self.names.get(d))
            ))),
            _ => None,
        }
    }

    /// The first node whose name an earlier node has.
    #[cold]
    #[inline(never)]
    fn first_duplicate(&self) -> Option<u32> {
        let mut seen = FxHashSet::default();
        (0..self.meta.len() as u32).find(|&i| !seen.insert(self.names.get(i)))
    }

    /// The error of the first node name that is not UTF-8 (while the names
    /// are in [`Builder::names`]).
    pub(super) fn bad_name(&self) -> Option<PlanError> {
        let bad = (0..self.meta.len() as u32)
            .find(|&i| std::str::from_utf8(self.names.get(i)).is_err())?;
        let name =
            flatdecode::name_in_input(self.input, bad as usize).unwrap_or(self.names.get(bad));
        Some(flatdecode::not_utf8(
            self.input,
            name,
            bad as usize,
            name,
            "name",
        ))
    }

    /// The error of an input naming no node that is not UTF-8.
    fn bad_far_input(&self, g: Option<&Graph>) -> Option<PlanError> {
        let f = self
            .far
            .iter()
            .find(|f| std::str::from_utf8(f.name).is_err())?;
        let node = self.user_of(f.at, f.control);
        let user = match g {
            Some(g) => g.nodes[node as usize].name.as_bytes(),
            None => self.names.get(node),
        };
        Some(flatdecode::not_utf8(
            self.input,
            f.name,
            node as usize,
            user,
            "input",
        ))
    }

    /// The node of the data (or control) input at `at`.
    fn user_of(&self, at: u32, control: bool) -> u32 {
        let off = if control { &self.ctl_off } else { &self.in_off };
        (off.partition_point(|&o| o <= at) - 1) as u32
    }

    /// `e`, unless the bytes have an error (reported first), while the names
    /// are in [`Builder::names`].
    #[cold]
    #[inline(never)]
    pub(super) fn fail(&self, e: PlanError) -> PlanError {
        self.bad_name()
            .or_else(|| self.bad_far_input(None))
            .unwrap_or(e)
    }

    /// [`Builder::fail`] once the names are in `g` (and checked).
    #[cold]
    #[inline(never)]
    pub(super) fn fail_built(&self, g: &Graph, e: PlanError) -> PlanError {
        self.bad_far_input(Some(g)).unwrap_or(e)
    }

    /// Check 7: the first data input `bad` that cannot be made an edge, or
    /// the first control input naming no node.
    #[cold]
    #[inline(never)]
    pub(super) fn edge_fault(&self, g: &Graph, bad: Option<usize>) -> PlanError {
        let name = |n: u32| g.nodes[n as usize].name.as_str().to_owned();
        let data = bad.map(|j| {
            let node = self.user_of(j as u32, false);
            let src = self.in_src[j];
            let e = if src == NONE {
                match self.far.iter().find(|f| !f.control && f.at == j as u32) {
                    Some(f) => missing(&name(node), f.name),
                    None => match &self.faults.bad_input {
                        Some((_, _, e)) => e.clone(),
                        None => missing(&name(node), b""),
                    },
                }
            } else {
                let (lo, hi) = (g.out_off[src as usize], g.out_off[src as usize + 1]);
                PlanError::InvalidGraph(format!(
                    "node '{}' reads output {} of '{}', which has {} output(s)",
                    name(node),
                    self.k_of(j),
                    name(src),
                    hi - lo
                ))
            };
            (node, e)
        });
        let bad_control = self.ctl_src.iter().position(|&s| s == NONE);
        let control = bad_control.map(|c| {
            let node = self.user_of(c as u32, true);
            let f = self.far.iter().find(|f| f.control && f.at == c as u32);
            (node, missing(&name(node), f.map_or(&b""[..], |f| f.name)))
        });
        // The reference walks a node's inputs in NodeDef order, control
        // inputs too (TensorFlow wants them last, but a mutated graph may not).
        let control_first_in_node = match (bad, bad_control, &data, &control) {
            (Some(j), Some(c), Some(d), Some(k)) if d.0 == k.0 => {
                self.control_first(d.0, j as u32, c as u32)
            }
            _ => false,
        };
        let first = match (data, control) {
            (Some(d), Some(c)) if c.0 < d.0 || (c.0 == d.0 && control_first_in_node) => c,
            (Some(d), _) => d,
            (None, Some(c)) => c,
            (None, None) => (
                0,
                PlanError::InvalidGraph("an input cannot be resolved".into()),
            ),
        };
        first.1
    }
}

impl Builder<'_> {
    /// Whether, among the inputs of `node` in `NodeDef` order, the control
    /// input at `c` (of `ctl_src`) comes before the data input at `j` (of
    /// `in_src`).
    fn control_first(&self, node: u32, j: u32, c: u32) -> bool {
        let data_k = (j - self.in_off[node as usize]) as usize;
        let control_k = (c - self.ctl_off[node as usize]) as usize;
        let Some(inputs) = flatdecode::inputs_in_input(self.input, node as usize) else {
            return false;
        };
        let (mut data, mut control) = (0, 0);
        for s in inputs {
            if s.first() == Some(&b'^') {
                if control == control_k {
                    return true;
                }
                control += 1;
            } else {
                if data == data_k {
                    return false;
                }
                data += 1;
            }
        }
        false
    }
}

fn missing(user: &str, name: &[u8]) -> PlanError {
    PlanError::InvalidGraph(format!(
        "node '{user}' has an input from '{}', which is not in the graph",
        String::from_utf8_lossy(name)
    ))
}
