//! The parts of every synthetic train step: the inputs, the stem, the
//! blocks of the spec's kind (each family in its own file), the head with
//! the loss, the backward pass in reverse block order, and the Keras 3 SGD
//! updates with the final `Identity(loss, ^NoOp)`.
//!
//! # Complexity
//! O(N) for N nodes: each block and each variable written once.

use super::dag::DagRec;
use super::narrow::NarrowRec;
use super::residual::{ConvRec, ResRec};
use super::transformer::TfRec;
use super::writer::*;
use super::SynthKind;
use crate::dtype::DType;

pub(super) enum Block {
    Res(Box<ResRec>),
    Tf(Box<TfRec>),
    Dag(Box<DagRec>),
    Narrow(Box<NarrowRec>),
}

pub(super) struct DenseStem {
    pub(super) flat: T,
    pub(super) w: VarRef,
    pub(super) b: VarRef,
}

pub(super) enum Stem {
    Conv(Box<ConvRec>),
    Dense(Box<DenseStem>),
}

pub(super) struct Head {
    pub(super) feat: T,
    pub(super) pooled: T,
    pub(super) w: VarRef,
    pub(super) b: VarRef,
    pub(super) xent: u32,
    pub(super) sum: T,
    pub(super) cnt: T,
    pub(super) loss: T,
}

impl Gen {
    pub(super) fn train_step(&mut self) {
        let (b, n, c) = (self.batch, self.size, self.channels);
        let xs = match self.kind {
            SynthKind::Transformer | SynthKind::Dag => Shp::new(&[b, n, c]),
            _ => s4(b, n, n, 3),
        };
        let x = self.placeholder("x", self.f, xs);
        let y = self.placeholder("y", I32, s1(b));
        let (stem, mut h) = self.stem(x);
        let mut blocks = Vec::with_capacity(self.blocks);
        for i in 0..self.blocks {
            let blk = match self.kind {
                SynthKind::Residual => Block::Res(Box::new(self.res_block(i, h))),
                SynthKind::Transformer => Block::Tf(Box::new(self.tf_block(i, h))),
                SynthKind::Mixed if i % 2 == 0 => Block::Res(Box::new(self.res_block(i, h))),
                SynthKind::Mixed => Block::Tf(Box::new(self.tf_block(i, h))),
                SynthKind::Dag => Block::Dag(Box::new(self.dag_block(i, h))),
                SynthKind::Narrow => Block::Narrow(Box::new(self.narrow_block(i, h))),
            };
            h = match &blk {
                Block::Res(r) => r.out,
                Block::Tf(r) => r.ln2.out,
                Block::Dag(r) => r.out,
                Block::Narrow(r) => r.out,
            };
            blocks.push(blk);
        }
        let head = self.head(h, y);
        let mut d = self.head_grad(&head);
        for blk in blocks.iter().rev() {
            d = match blk {
                Block::Res(r) => self.res_grad(r, d),
                Block::Tf(r) => self.tf_grad(r, d),
                Block::Dag(r) => self.dag_grad(r, d),
                Block::Narrow(r) => self.narrow_grad(r, d),
            };
        }
        self.stem_grad(&stem, d);
        self.update(head.loss);
    }

    pub(super) fn stem(&mut self, x: T) -> (Stem, T) {
        if x.s.r == 4 {
            let r = self.conv_unit("model/stem".into(), x, 3, self.channels, true);
            let out = r.out;
            return (Stem::Conv(Box::new(r)), out);
        }
        let (m, c) = (self.batch * self.size, self.channels);
        self.set_scope(&["model/stem"]);
        let flat = self.reshape("Reshape", x, s2(m, c));
        let w = self.var("MatMul", s2(c, c), true);
        let mm = self.f1a("MatMul", "MatMul", &[flat, w.read], s2(m, c), MM_NN);
        let b = self.var("BiasAdd", s1(c), true);
        let out = self.f1a("BiasAdd", "BiasAdd", &[mm, b.read], s2(m, c), BIAS);
        (Stem::Dense(Box::new(DenseStem { flat, w, b })), out)
    }

    pub(super) fn stem_grad(&mut self, stem: &Stem, d: T) {
        match stem {
            Stem::Conv(r) => {
                let (dp, shapes) = self.conv_grad_pre(r, d);
                self.conv_filter_grad(r, dp, shapes);
            }
            Stem::Dense(s) => {
                self.set_scope(&["gradient_tape/model/stem"]);
                let db = self.f1a("BiasAdd/BiasAddGrad", "BiasAddGrad", &[d], s.b.read.s, BIAS);
                let dw = self.f1a("MatMul/MatMul", "MatMul", &[s.flat, d], s.w.read.s, MM_TN);
                self.set_grad(&s.b, db);
                self.set_grad(&s.w, dw);
            }
        }
    }
    pub(super) fn head(&mut self, feat: T, y: T) -> Head {
        let b = self.batch;
        self.set_scope(&["model/pool"]);
        let pooled = if feat.s.r == 4 {
            let ri = self.cint("Mean/reduction_indices", &[1, 2]);
            self.f1a("Mean", "Mean", &[feat, ri], s2(b, feat.s.last()), DROP)
        } else {
            let (m, c) = (feat.s.d[0], feat.s.d[1]);
            let seq = self.reshape("Reshape", feat, Shp::new(&[b, m / b, c]));
            let ri = self.cint("Mean/reduction_indices", &[1]);
            self.f1a("Mean", "Mean", &[seq, ri], s2(b, c), DROP)
        };
        self.set_scope(&["model/dense"]);
        let w = self.var("MatMul", s2(pooled.s.d[1], CLASSES), true);
        let ls = s2(b, CLASSES);
        let mm = self.f1a("MatMul", "MatMul", &[pooled, w.read], ls, MM_NN);
        let bv = self.var("BiasAdd", s1(CLASSES), true);
        let logits = self.f1a("BiasAdd", "BiasAdd", &[mm, bv.read], ls, BIAS);
        self.set_scope(&["sparse_categorical_crossentropy"]);
        let a = [
            A::Type("SrcT", I32),
            A::Type("DstT", I64),
            A::Bool("Truncate", false),
        ];
        let labels = self.f1a("Cast", "Cast", &[y], s1(b), &a);
        let name = "SparseSoftmaxCrossEntropyWithLogits/SparseSoftmaxCrossEntropyWithLogits";
        let a = [A::T, A::Type("Tlabels", I64)];
        let op = "SparseSoftmaxCrossEntropyWithLogits";
        let xent = self.op(name, op, &[logits, labels], &[], &[s1(b), ls], &a);
        let per_example = T {
            node: xent,
            idx: 0,
            s: s1(b),
        };
        let c0 = self.cint("Const", &[0]);
        let sum = self.f1a("Sum", "Sum", &[per_example, c0], Shp::SCALAR, DROP);
        let c1 = self.cint("Const_1", &[b]);
        let c2 = self.cint("Const_2", &[0]);
        let a = [
            A::Type("T", I32),
            A::Type("Tidx", I32),
            A::Bool("keep_dims", false),
        ];
        let prod = self.f1a("Prod", "Prod", &[c1, c2], Shp::SCALAR, &a);
        let a = [
            A::Type("SrcT", I32),
            A::Type("DstT", self.f),
            A::Bool("Truncate", false),
        ];
        let cnt = self.f1a("Cast_2", "Cast", &[prod], Shp::SCALAR, &a);
        let loss = self.f1("div_no_nan", "DivNoNan", &[sum, cnt], Shp::SCALAR);
        Head {
            feat,
            pooled,
            w,
            b: bv,
            xent,
            sum,
            cnt,
            loss,
        }
    }

    /// From the seed `ones` to the gradient of the pooled features' input.
    pub(super) fn head_grad(&mut self, h: &Head) -> T {
        let (b, sc) = (self.batch, Shp::SCALAR);
        self.set_scope(&[]);
        let ones = self.cfloat("ones", 1.0);
        self.set_scope(&["gradient_tape/sparse_categorical_crossentropy"]);
        let dl = self.f1("div_no_nan/div_no_nan", "DivNoNan", &[ones, h.cnt], sc);
        let neg = self.f1("div_no_nan/Neg", "Neg", &[h.sum], sc);
        let d1 = self.f1("div_no_nan/div_no_nan_1", "DivNoNan", &[neg, h.cnt], sc);
        let d2 = self.f1("div_no_nan/div_no_nan_2", "DivNoNan", &[d1, h.cnt], sc);
        self.f1("div_no_nan/mul", "Mul", &[ones, d2], sc);
        let r = self.reshape("Reshape", dl, s1(1));
        let mult = self.cint("Const", &[b]);
        let a = [A::T, A::Type("Tmultiples", I32)];
        let tile = self.f1a("Tile", "Tile", &[r, mult], s1(b), &a);
        let dim = self.cscalar(
            "SparseSoftmaxCrossEntropyWithLogits/ExpandDims/dim",
            I32,
            Val::Ints(&[1]),
        );
        let a = [A::T, A::Type("Tdim", I32)];
        let name = "SparseSoftmaxCrossEntropyWithLogits/ExpandDims";
        let ed = self.f1a(name, "ExpandDims", &[tile, dim], s2(b, 1), &a);
        let backprop = T {
            node: h.xent,
            idx: 1,
            s: s2(b, CLASSES),
        };
        let name = "SparseSoftmaxCrossEntropyWithLogits/mul";
        let dlogits = self.f1(name, "Mul", &[ed, backprop], backprop.s);
        self.set_scope(&["gradient_tape/model/dense"]);
        let db = self.f1a(
            "BiasAdd/BiasAddGrad",
            "BiasAddGrad",
            &[dlogits],
            s1(CLASSES),
            BIAS,
        );
        let ps = h.pooled.s;
        let dp = self.f1a("MatMul/MatMul", "MatMul", &[dlogits, h.w.read], ps, MM_NT);
        let dw = self.f1a(
            "MatMul/MatMul_1",
            "MatMul",
            &[h.pooled, dlogits],
            h.w.read.s,
            MM_TN,
        );
        self.set_grad(&h.b, db);
        self.set_grad(&h.w, dw);
        self.set_scope(&["gradient_tape/model/pool"]);
        let fs = h.feat.s;
        if fs.r == 4 {
            let r = self.reshape("Reshape", dp, fs.keep(&[1, 2]));
            return self.mean_grad("Mean", r, fs);
        }
        let seq = Shp::new(&[b, fs.d[0] / b, fs.d[1]]);
        let r = self.reshape("Reshape", dp, seq.keep(&[1]));
        let g = self.mean_grad("Mean", r, seq);
        self.reshape("Reshape_1", g, fs)
    }

    /// Keras 3 SGD with momentum, the iteration counter, the output.
    pub(super) fn update(&mut self, loss: T) {
        self.set_scope(&["sgd"]);
        let grads: Vec<(T, usize)> = (0..self.vars.len())
            .filter_map(|k| self.vars[k].grad.map(|g| (g, k)))
            .collect();
        for (i, &(g, _)) in grads.iter().enumerate() {
            self.f1(Nm("Identity", i, ""), "Identity", &[g], g.s);
        }
        let ins: Vec<T> = grads.iter().chain(&grads).map(|&(g, _)| g).collect();
        let outs: Vec<Shp> = ins.iter().map(|t| t.s).collect();
        let a = [A::Types("T", self.f, ins.len())];
        let idn = self.op("IdentityN", "IdentityN", &ins, &[], &outs, &a);
        let lr = self.placeholder("Cast/ReadVariableOp/resource", DType::RESOURCE, Shp::SCALAR);
        for (i, &(g, k)) in grads.iter().enumerate() {
            let grad = T {
                node: idn,
                idx: i as u32,
                s: g.s,
            };
            if self.kind == SynthKind::Narrow {
                self.sgd_step(i, grad, lr, k);
            } else {
                self.momentum_step(i, grad, lr, k);
            }
        }
        self.set_scope(&[]);
        let one = self.cscalar("Const", I64, Val::Ints(&[1]));
        let h = self.placeholder("Add/ReadVariableOp/resource", DType::RESOURCE, Shp::SCALAR);
        let it = self.read("Add/ReadVariableOp", h, Shp::SCALAR, I64, &[]);
        let add = self.f1a(
            "Add",
            "AddV2",
            &[it, one],
            Shp::SCALAR,
            &[A::Type("T", I64)],
        );
        let a = [A::Type("dtype", I64), A::Bool("validate_shape", false)];
        let w = self.op(
            "AssignVariableOp",
            "AssignVariableOp",
            &[h, add],
            &[it.node],
            &[],
            &a,
        );
        self.stateful.push(w);
        // TensorFlow writes the output Identity before the NoOp it waits for.
        let mark = self.out.buf.len();
        let stateful = std::mem::take(&mut self.stateful);
        let noop = self.op("NoOp", "NoOp", &[], &stateful, &[], &[]);
        let noop_bytes = self.out.buf.split_off(mark);
        self.op(
            "Identity",
            "Identity",
            &[loss],
            &[noop],
            &[Shp::SCALAR],
            &[A::T],
        );
        self.out.buf.extend_from_slice(&noop_bytes);
    }

    /// Keras 3 SGD without momentum: `var -= grad * lr`.
    pub(super) fn sgd_step(&mut self, i: usize, grad: T, lr: T, k: usize) {
        let (f, s, sc) = (self.f, grad.s, Shp::SCALAR);
        let (var_handle, var_read) = (self.vars[k].handle, self.vars[k].read);
        let lr_read = self.read(Nm("Cast", i, "/ReadVariableOp"), lr, sc, f, &[]);
        let m = self.f1(Nm("Mul", i, ""), "Mul", &[grad, lr_read], s);
        let name = Nm("AssignSubVariableOp", i, "");
        let a = [A::Type("dtype", f)];
        let ins = [var_handle, m];
        let w = self.op(name, "AssignSubVariableOp", &ins, &[var_read.node], &[], &a);
        self.stateful.push(w);
    }

    pub(super) fn momentum_step(&mut self, i: usize, grad: T, lr: T, k: usize) {
        let (f, s, sc) = (self.f, grad.s, Shp::SCALAR);
        let (var_handle, var_read) = (self.vars[k].handle, self.vars[k].read);
        let lr_read = self.read(Nm("Cast", 3 * i, "/ReadVariableOp"), lr, sc, f, &[]);
        let mom = self.cfloat(Nm("Cast", 3 * i + 1, "/x"), 0.9);
        let slot = self.placeholder(
            Nm("Mul", 2 * i, "/ReadVariableOp/resource"),
            DType::RESOURCE,
            sc,
        );
        let slot_read = self.read(Nm("Mul", 2 * i, "/ReadVariableOp"), slot, s, f, &[]);
        let m0 = self.f1(Nm("Mul", 2 * i, ""), "Mul", &[slot_read, mom], s);
        let m1 = self.f1(Nm("Mul", 2 * i + 1, ""), "Mul", &[grad, lr_read], s);
        let sub = self.f1(Nm("Sub", i, ""), "Sub", &[m0, m1], s);
        let a = [A::Type("dtype", f), A::Bool("validate_shape", false)];
        let name = Nm("AssignVariableOp", i, "");
        let w = self.op(
            name,
            "AssignVariableOp",
            &[slot, sub],
            &[slot_read.node],
            &[],
            &a,
        );
        self.stateful.push(w);
        let r2 = self.read(Nm("Cast", 3 * i + 2, "/ReadVariableOp"), slot, s, f, &[w]);
        let name = Nm("AssignAddVariableOp", i, "");
        let a = [A::Type("dtype", f)];
        let ins = [var_handle, r2];
        let w = self.op(name, "AssignAddVariableOp", &ins, &[var_read.node], &[], &a);
        self.stateful.push(w);
    }
}
