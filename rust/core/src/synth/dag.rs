//! The random-DAG family ([`SynthKind::Dag`](super::SynthKind)): layered
//! DAGs of dense nodes, each reading one earlier node or the sum of two,
//! drawn by a SplitMix64 generator seeded with the block's index, and their
//! reverse-mode gradients.
//!
//! # Complexity
//! O(DAG_LAYERS * DAG_WIDTH) nodes per block.

use super::writer::*;
use super::{DAG_LAYERS, DAG_WIDTH};

/// One node of a DAG block: `relu(sum(sources) @ w + b)`.
pub(super) struct DagNode {
    /// Indices into `DagRec::nodes` (0 is the block's input).
    pub(super) sources: Vec<usize>,
    /// The `MatMul`'s input (a source, or the sum of two).
    pub(super) x: T,
    pub(super) w: VarRef,
    pub(super) b: VarRef,
    pub(super) out: T,
}

pub(super) struct DagRec {
    pub(super) scope: String,
    /// The block's input first (no sources), then the layers in order.
    pub(super) nodes: Vec<DagNode>,
    /// Nodes summed into the output.
    pub(super) sinks: Vec<usize>,
    pub(super) out: T,
}

/// SplitMix64: a tiny, seeded, platform-independent generator.
pub(super) fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl Gen {
    /// A random layered DAG of dense nodes (see [`SynthKind::Dag`]).
    pub(super) fn dag_block(&mut self, i: usize, input: T) -> DagRec {
        let scope = format!("model/dag{i}");
        let s = input.s;
        let c = s.last();
        let mut rng = 0x5EED_0000 + i as u64;
        let placeholder_node = |x: T| DagNode {
            sources: Vec::new(),
            x,
            w: VarRef {
                handle: x,
                read: x,
                idx: usize::MAX,
            },
            b: VarRef {
                handle: x,
                read: x,
                idx: usize::MAX,
            },
            out: x,
        };
        let mut nodes = vec![placeholder_node(input)];
        let mut read = [false; 1 + DAG_LAYERS * DAG_WIDTH];
        for l in 1..=DAG_LAYERS {
            // Candidates: the two layers before (layer 0 is the input alone).
            let lo = if l <= 2 { 0 } else { 1 + (l - 3) * DAG_WIDTH };
            let hi = 1 + (l - 1) * DAG_WIDTH;
            let span = (hi - lo) as u64;
            for j in 0..DAG_WIDTH {
                let k = nodes.len();
                let nsrc = if span > 1 && splitmix(&mut rng).is_multiple_of(2) {
                    2
                } else {
                    1
                };
                let a = lo + (splitmix(&mut rng) % span) as usize;
                let mut sources = vec![a];
                if nsrc == 2 {
                    let b = lo
                        + (a - lo + 1 + (splitmix(&mut rng) % (span - 1)) as usize) % span as usize;
                    sources.push(b);
                }
                for &q in &sources {
                    read[q] = true;
                }
                let name = format!("{scope}/l{l}n{j}");
                self.set_scope(&[&name]);
                let x = if sources.len() == 2 {
                    let ins = [nodes[sources[0]].out, nodes[sources[1]].out];
                    self.f1("add", "AddV2", &ins, s)
                } else {
                    nodes[sources[0]].out
                };
                let w = self.var("MatMul", s2(c, c), true);
                let mm = self.f1a("MatMul", "MatMul", &[x, w.read], s, MM_NN);
                let b = self.var("BiasAdd", s1(c), true);
                let h = self.f1a("BiasAdd", "BiasAdd", &[mm, b.read], s, BIAS);
                let out = self.f1("Relu", "Relu", &[h], s);
                nodes.push(DagNode {
                    sources,
                    x,
                    w,
                    b,
                    out,
                });
                debug_assert_eq!(nodes.len(), k + 1);
            }
        }
        let mut sinks: Vec<usize> = (1..nodes.len()).filter(|&k| !read[k]).collect();
        sinks.push(0);
        let outs: Vec<T> = sinks.iter().map(|&k| nodes[k].out).collect();
        let out = self.addn(&outs);
        DagRec {
            scope,
            nodes,
            sinks,
            out,
        }
    }

    /// Reverse mode through a DAG block: each node's gradient is the sum of
    /// what its readers send back.
    pub(super) fn dag_grad(&mut self, r: &DagRec, d: T) -> T {
        let mut grads: Vec<Vec<T>> = vec![Vec::new(); r.nodes.len()];
        for &k in &r.sinks {
            grads[k].push(d);
        }
        for k in (1..r.nodes.len()).rev() {
            let n = &r.nodes[k];
            if grads[k].is_empty() {
                continue;
            }
            let dn = if grads[k].len() == 1 {
                grads[k][0]
            } else {
                self.addn(&grads[k])
            };
            let l = (k - 1) / DAG_WIDTH + 1;
            let j = (k - 1) % DAG_WIDTH;
            let name = format!("{}/l{l}n{j}", r.scope);
            self.set_scope(&["gradient_tape", &name]);
            let s = n.out.s;
            let dh = self.f1("ReluGrad", "ReluGrad", &[dn, n.out], s);
            let db = self.f1a(
                "BiasAdd/BiasAddGrad",
                "BiasAddGrad",
                &[dh],
                n.b.read.s,
                BIAS,
            );
            let dx = self.f1a("MatMul/MatMul", "MatMul", &[dh, n.w.read], s, MM_NT);
            let dw = self.f1a("MatMul/MatMul_1", "MatMul", &[n.x, dh], n.w.read.s, MM_TN);
            self.set_grad(&n.b, db);
            self.set_grad(&n.w, dw);
            for &q in &n.sources {
                grads[q].push(dx);
            }
        }
        match grads[0].len() {
            1 => grads[0][0],
            _ => self.addn(&grads[0]),
        }
    }
}
