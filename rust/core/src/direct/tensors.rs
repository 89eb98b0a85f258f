//! Step 3 of the decoder's build ([`super`]): in node order, dtypes
//! inherited from the first data input, tensors sized by
//! [`build::tensor_size`], and edges.
//!
//! # Complexity
//! O(N + T + E + D).

use std::mem::take;

use super::Builder;
use crate::build;
use crate::dtype::DType;
use crate::error::Result;
use crate::flatdecode::{self, Arrays};
use crate::graph::{big_vec, Graph, Tensor, NONE};

impl Builder<'_> {
    /// Step 3, tensors: dtypes inherited from the first data input, in node
    /// order, then sizes.
    pub(super) fn tensors(&self, g: &mut Graph, mut arrays: Arrays, mut dt: Vec<u8>) -> Result<()> {
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
                let (dtype, rank, bytes) = size?;
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
    /// `reference::inherit_dtypes` reads it.
    fn first_input_dtype(&self, out_off: &[u32], dt: &[u8], i: usize) -> u8 {
        let j = self.in_off[i] as usize;
        if j == self.in_off[i + 1] as usize {
            return 0;
        }
        let (src, k) = (self.in_src[j] as usize, self.k_of(j));
        match out_off.get(src..src + 2) {
            Some(&[lo, hi]) if k < hi - lo => dt[(lo + k) as usize],
            _ => 0,
        }
    }

    /// Step 3, edges: every data input becomes the tensor it reads.
    pub(super) fn edges(&mut self, g: &mut Graph) -> Result<()> {
        let mut bad = None;
        for j in 0..self.in_src.len() {
            let (s, k) = (self.in_src[j] as usize, self.k_of(j));
            match g.out_off.get(s..s + 2) {
                Some(&[lo, hi]) if k < hi - lo => self.in_src[j] = lo + k,
                _ => {
                    bad = Some(j);
                    break;
                }
            }
        }
        if bad.is_some() || self.ctl_src.contains(&NONE) {
            let e = self.edge_fault(g, bad);
            return Err(self.fail_built(g, e));
        }
        g.in_tensor = take(&mut self.in_src);
        g.in_off = take(&mut self.in_off);
        g.ctl_src = take(&mut self.ctl_src);
        g.ctl_off = take(&mut self.ctl_off);
        Ok(())
    }
}
