//! The residual family ([`SynthKind::Residual`](super::SynthKind), and the
//! residual half of `Mixed`): ResNet bottleneck blocks of three
//! Conv2D + BiasAdd + batch norm units with the shortcut `AddV2`, and their
//! gradients (`Conv2DBackpropInput`, `Conv2DBackpropFilter`).
//!
//! # Complexity
//! O(1) nodes per block.

use super::norm::NormRec;
use super::writer::*;

pub(super) struct ConvRec {
    pub(super) scope: String,
    pub(super) input: T,
    pub(super) kernel: VarRef,
    pub(super) bias: VarRef,
    pub(super) norm: NormRec,
    pub(super) relu: Option<T>,
    pub(super) out: T,
}

pub(super) struct ResRec {
    pub(super) scope: String,
    /// The input's shape when it was reshaped from tokens.
    pub(super) orig: Option<Shp>,
    pub(super) units: [ConvRec; 3],
    pub(super) out: T,
}

impl Gen {
    /// Conv2D + BiasAdd + batch norm (+ Relu).
    pub(super) fn conv_unit(
        &mut self,
        scope: String,
        input: T,
        k: i64,
        cout: i64,
        relu: bool,
    ) -> ConvRec {
        self.set_scope(&[&scope]);
        let cin = input.s.last();
        let kernel = self.var("convolution", s4(k, k, cin, cout), true);
        let xs = input.s.with_last(cout);
        let conv = self.f1a("convolution", "Conv2D", &[input, kernel.read], xs, CONV);
        let bias = self.var("BiasAdd", s1(cout), true);
        let pre = self.f1a("BiasAdd", "BiasAdd", &[conv, bias.read], xs, BIAS);
        let norm = self.norm(format!("{scope}/bn"), pre, true);
        let mut out = norm.out;
        let mut relu_out = None;
        if relu {
            self.set_scope(&[&scope]);
            out = self.f1("Relu", "Relu", &[norm.out], xs);
            relu_out = Some(out);
        }
        ConvRec {
            scope,
            input,
            kernel,
            bias,
            norm,
            relu: relu_out,
            out,
        }
    }

    /// Relu, norm and bias gradients and the `ShapeN` of the conv's inputs.
    pub(super) fn conv_grad_pre(&mut self, r: &ConvRec, d: T) -> (T, u32) {
        let mut d = d;
        if let Some(relu) = r.relu {
            self.set_scope(&["gradient_tape", &r.scope]);
            d = self.f1("ReluGrad", "ReluGrad", &[d, relu], relu.s);
        }
        let d = self.norm_grad(&r.norm, d);
        self.set_scope(&["gradient_tape", &r.scope]);
        let db = self.f1a(
            "BiasAdd/BiasAddGrad",
            "BiasAddGrad",
            &[d],
            r.bias.read.s,
            BIAS,
        );
        self.set_grad(&r.bias, db);
        let a = [A::Int("N", 2), A::T, A::Type("out_type", I32)];
        let ins = [r.input, r.kernel.read];
        let shapes = self.op(
            "convolution/ShapeN",
            "ShapeN",
            &ins,
            &[],
            &[s1(4), s1(4)],
            &a,
        );
        (d, shapes)
    }

    pub(super) fn conv_input_grad(&mut self, r: &ConvRec, d: T, shapes: u32) -> T {
        let sizes = T {
            node: shapes,
            idx: 0,
            s: s1(4),
        };
        let ins = [sizes, r.kernel.read, d];
        self.f1a(
            "convolution/Conv2DBackpropInput",
            "Conv2DBackpropInput",
            &ins,
            r.input.s,
            CONV,
        )
    }

    pub(super) fn conv_filter_grad(&mut self, r: &ConvRec, d: T, shapes: u32) {
        let sizes = T {
            node: shapes,
            idx: 1,
            s: s1(4),
        };
        let ins = [r.input, sizes, d];
        let ks = r.kernel.read.s;
        let dk = self.f1a(
            "convolution/Conv2DBackpropFilter",
            "Conv2DBackpropFilter",
            &ins,
            ks,
            CONV,
        );
        self.set_grad(&r.kernel, dk);
    }

    pub(super) fn conv_grad(&mut self, r: &ConvRec, d: T) -> T {
        let (dp, shapes) = self.conv_grad_pre(r, d);
        let din = self.conv_input_grad(r, dp, shapes);
        self.conv_filter_grad(r, dp, shapes);
        din
    }

    pub(super) fn res_block(&mut self, i: usize, input: T) -> ResRec {
        let scope = format!("model/block{i}");
        self.set_scope(&[&scope]);
        let (b, n, c) = (self.batch, self.size, input.s.last());
        let (x, orig) = if input.s.r == 4 {
            (input, None)
        } else {
            (self.reshape("to_map", input, s4(b, n, n, c)), Some(input.s))
        };
        let cb = (c / 4).max(1);
        let u1 = self.conv_unit(format!("{scope}/conv1"), x, 1, cb, true);
        let u2 = self.conv_unit(format!("{scope}/conv2"), u1.out, 3, cb, true);
        let u3 = self.conv_unit(format!("{scope}/conv3"), u2.out, 1, c, false);
        self.set_scope(&[&scope]);
        let add = self.f1("add", "AddV2", &[u3.out, x], x.s);
        let out = self.f1("Relu", "Relu", &[add], x.s);
        ResRec {
            scope,
            orig,
            units: [u1, u2, u3],
            out,
        }
    }

    pub(super) fn res_grad(&mut self, r: &ResRec, d: T) -> T {
        self.set_scope(&["gradient_tape", &r.scope]);
        let dadd = self.f1("ReluGrad", "ReluGrad", &[d, r.out], r.out.s);
        let d2 = self.conv_grad(&r.units[2], dadd);
        let d1 = self.conv_grad(&r.units[1], d2);
        let d0 = self.conv_grad(&r.units[0], d1);
        let dx = self.addn(&[d0, dadd]);
        match r.orig {
            Some(s) => {
                self.set_scope(&["gradient_tape", &r.scope]);
                self.reshape("to_map/Reshape", dx, s)
            }
            None => dx,
        }
    }
}
