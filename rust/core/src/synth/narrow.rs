//! The narrow residual block ([`SynthKind::Narrow`](super::SynthKind)):
//! the deep, thin convolutional stacks whose plans hold thousands of swaps.
//!
//! # The block
//! `out = x + Relu(FusedBatchNormV3(Conv2D(x, 3x3 kernel)))` on `[batch,
//! size, size, channels]` maps, as `tf.keras` (Keras 2) writes a fused batch
//! norm in training with `scale=False, center=False` (the usual choice
//! before a ReLU: gamma and beta are `Const` ones and zeros): the moving
//! mean and variance go in, the op's outputs 1 and 2 (the updated averages,
//! `exponential_avg_factor` 0.01) are written back with `AssignVariableOp`.
//! Its gradient: `ReluGrad`, `FusedBatchNormGradV3` (reading the conv's
//! output and the reserve spaces), `ShapeN`, `Conv2DBackpropInput`,
//! `Conv2DBackpropFilter` and the `AddN` of the two paths; the kernel's
//! update, plain SGD (Keras 3 `SGD()`, no momentum), comes from the shared
//! train step (`step.rs`). 24 nodes per block: 14 forward, 6
//! gradient, 4 update.
//!
//! Every block keeps three activations of one size for the backward pass
//! (its input, the conv's output, the `Relu`'s output), so half the peak
//! needs about one swap per block: plans with decisions on several percent
//! of the nodes (the case `docs/scale.md` measures).
//!
//! # Complexity
//! O(1) nodes per block, written in O(1) each.

use super::writer::{s1, s4, Gen, Nm, Val, VarRef, A, CONV, I32, T};
use crate::dtype::DType;

pub(super) struct NarrowRec {
    scope: String,
    x: T,
    kernel: VarRef,
    gamma: T,
    conv: T,
    bn: u32,
    relu: T,
    pub(super) out: T,
}

/// Attributes of the fused batch norm and its gradient (the statistics'
/// type `U` is `float` for every activation type).
const BN: &[A<'static>] = &[
    A::T,
    A::Type("U", DType::FLOAT),
    A::Float("epsilon", 1e-3),
    A::Str("data_format", "NHWC"),
    A::Bool("is_training", true),
];

impl Gen {
    /// A `Const` of shape `[n]` filled with `v` (one value in the proto,
    /// as `keras.backend.constant` writes it; TensorFlow repeats it).
    fn cvec(&mut self, name: &str, v: f64, n: i64) -> T {
        let s = s1(n);
        let a = [A::Type("dtype", self.f), A::Value(self.f, s, Val::Float(v))];
        let node = self.op(name, "Const", &[], &[], &[s], &a);
        T { node, idx: 0, s }
    }

    pub(super) fn narrow_block(&mut self, i: usize, x: T) -> NarrowRec {
        let scope = format!("model/narrow{i}");
        self.set_scope(&[&scope]);
        let c = x.s.last();
        let kernel = self.var("conv", s4(3, 3, c, c), true);
        let conv = self.f1a("conv/Conv2D", "Conv2D", &[x, kernel.read], x.s, CONV);
        let gamma = self.cvec("bn/Const", 1.0, c);
        let beta = self.cvec("bn/Const_1", 0.0, c);
        let mean = self.var("bn/moving_mean", s1(c), false);
        let var = self.var("bn/moving_variance", s1(c), false);
        let ins = [conv, gamma, beta, mean.read, var.read];
        let mut attrs = BN.to_vec();
        attrs.push(A::Float("exponential_avg_factor", 0.01));
        let outs = [x.s, s1(c), s1(c), s1(c), s1(c), s1(0)];
        let bn = self.op(
            "bn/FusedBatchNormV3",
            "FusedBatchNormV3",
            &ins,
            &[],
            &outs,
            &attrs,
        );
        for (k, v) in [(1, &mean), (2, &var)] {
            let stat = T {
                node: bn,
                idx: k,
                s: s1(c),
            };
            let a = [A::Type("dtype", self.f), A::Bool("validate_shape", false)];
            let name = Nm("bn/AssignVariableOp", k as usize - 1, "");
            let w = self.op(
                name,
                "AssignVariableOp",
                &[v.handle, stat],
                &[v.read.node],
                &[],
                &a,
            );
            self.stateful.push(w);
        }
        let y = T {
            node: bn,
            idx: 0,
            s: x.s,
        };
        let relu = self.f1("Relu", "Relu", &[y], x.s);
        let out = self.f1("add", "AddV2", &[relu, x], x.s);
        NarrowRec {
            scope,
            x,
            kernel,
            gamma,
            conv,
            bn,
            relu,
            out,
        }
    }

    pub(super) fn narrow_grad(&mut self, r: &NarrowRec, d: T) -> T {
        self.set_scope(&["gradient_tape", &r.scope]);
        let (xs, c) = (r.x.s, s1(r.x.s.last()));
        let dr = self.f1("ReluGrad", "ReluGrad", &[d, r.relu], xs);
        let reserve = |idx| T {
            node: r.bn,
            idx,
            s: if idx == 5 { s1(0) } else { c },
        };
        let ins = [dr, r.conv, r.gamma, reserve(3), reserve(4), reserve(5)];
        let outs = [xs, c, c, s1(0), s1(0)];
        let g = self.op(
            "bn/FusedBatchNormGradV3",
            "FusedBatchNormGradV3",
            &ins,
            &[],
            &outs,
            BN,
        );
        let dconv = T {
            node: g,
            idx: 0,
            s: xs,
        };
        let a = [A::Int("N", 2), A::T, A::Type("out_type", I32)];
        let ins = [r.x, r.kernel.read];
        let shapes = self.op("conv/ShapeN", "ShapeN", &ins, &[], &[s1(4), s1(4)], &a);
        let size = |idx| T {
            node: shapes,
            idx,
            s: s1(4),
        };
        let ins = [size(0), r.kernel.read, dconv];
        let name = "conv/Conv2DBackpropInput";
        let dx = self.f1a(name, "Conv2DBackpropInput", &ins, xs, CONV);
        let ins = [r.x, size(1), dconv];
        let ks = r.kernel.read.s;
        let name = "conv/Conv2DBackpropFilter";
        let dk = self.f1a(name, "Conv2DBackpropFilter", &ins, ks, CONV);
        self.set_grad(&r.kernel, dk);
        self.addn(&[dx, d])
    }
}
