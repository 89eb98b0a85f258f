//! The transformer family ([`SynthKind::Transformer`](super::SynthKind),
//! and the transformer half of `Mixed`): multi-head self-attention and an
//! MLP, each followed by a residual add and a layer norm, and their
//! gradients.
//!
//! # Complexity
//! O(1) nodes per block.

use super::norm::NormRec;
use super::writer::*;

pub(super) struct Proj {
    pub(super) name: &'static str,
    pub(super) w: VarRef,
    pub(super) t: T,
}

pub(super) struct TfRec {
    pub(super) scope: String,
    pub(super) orig: Option<Shp>,
    pub(super) h: T,
    pub(super) qkv: [Proj; 3],
    pub(super) scale: T,
    pub(super) probs: T,
    pub(super) ctx2: T,
    pub(super) wo: VarRef,
    pub(super) ln1: NormRec,
    pub(super) w1: VarRef,
    pub(super) b1: VarRef,
    pub(super) relu: T,
    pub(super) w2: VarRef,
    pub(super) b2: VarRef,
    pub(super) ln2: NormRec,
}

impl Gen {
    /// `h @ W`, split into heads: `[batch, heads, seq, head_dim]`.
    pub(super) fn proj(&mut self, scope: &str, name: &'static str, h: T, heads: Shp) -> Proj {
        self.set_scope(&[scope, "attn", name]);
        let (m, c) = (h.s.d[0], h.s.d[1]);
        let w = self.var("MatMul", s2(c, c), true);
        let y = self.f1a("MatMul", "MatMul", &[h, w.read], s2(m, c), MM_NN);
        let y4 = self.reshape("Reshape", y, heads);
        let perm = self.cint("transpose/perm", HEADS_PERM);
        let ts = s4(heads.d[0], heads.d[2], heads.d[1], heads.d[3]);
        let t = self.f1a("transpose", "Transpose", &[y4, perm], ts, TRANSPOSE);
        Proj { name, w, t }
    }

    pub(super) fn tf_block(&mut self, i: usize, input: T) -> TfRec {
        let scope = format!("model/block{i}");
        self.set_scope(&[&scope]);
        let (h, orig) = if input.s.r == 2 {
            (input, None)
        } else {
            let d = input.s.dims();
            let flat = s2(d[..3].iter().product(), d[3]);
            (self.reshape("to_tokens", input, flat), Some(input.s))
        };
        let (m, c, b) = (h.s.d[0], h.s.d[1], self.batch);
        let (s, nh) = (m / b, if c % 4 == 0 { 4 } else { 1 });
        let heads = s4(b, s, nh, c / nh);
        let qkv = ["query", "key", "value"].map(|name| self.proj(&scope, name, h, heads));
        self.set_scope(&[&scope, "attn"]);
        let ss = s4(b, nh, s, s);
        let scores = self.f1a(
            "scores/MatMul",
            "BatchMatMulV2",
            &[qkv[0].t, qkv[1].t],
            ss,
            BMM_NT,
        );
        let scale = self.cfloat("scores/mul/y", 1.0 / ((c / nh) as f64).sqrt());
        let scaled = self.f1("scores/mul", "Mul", &[scores, scale], ss);
        let probs = self.f1("Softmax", "Softmax", &[scaled], ss);
        let cs = s4(b, nh, s, c / nh);
        let ctx = self.f1a(
            "context/MatMul",
            "BatchMatMulV2",
            &[probs, qkv[2].t],
            cs,
            BMM_NN,
        );
        let perm = self.cint("context/transpose/perm", HEADS_PERM);
        let ctx_t = self.f1a(
            "context/transpose",
            "Transpose",
            &[ctx, perm],
            heads,
            TRANSPOSE,
        );
        let ctx2 = self.reshape("context/Reshape", ctx_t, h.s);
        let wo = self.var("output/MatMul", s2(c, c), true);
        let o = self.f1a("output/MatMul", "MatMul", &[ctx2, wo.read], h.s, MM_NN);
        self.set_scope(&[&scope]);
        let r1 = self.f1("add", "AddV2", &[o, h], h.s);
        let ln1 = self.norm(format!("{scope}/ln1"), r1, false);
        self.set_scope(&[&scope, "mlp"]);
        let w1 = self.var("dense1/MatMul", s2(c, 4 * c), true);
        let a1 = self.f1a(
            "dense1/MatMul",
            "MatMul",
            &[ln1.out, w1.read],
            s2(m, 4 * c),
            MM_NN,
        );
        let b1 = self.var("dense1/BiasAdd", s1(4 * c), true);
        let h1 = self.f1a("dense1/BiasAdd", "BiasAdd", &[a1, b1.read], a1.s, BIAS);
        let relu = self.f1("dense1/Relu", "Relu", &[h1], h1.s);
        let w2 = self.var("dense2/MatMul", s2(4 * c, c), true);
        let a2 = self.f1a("dense2/MatMul", "MatMul", &[relu, w2.read], h.s, MM_NN);
        let b2 = self.var("dense2/BiasAdd", s1(c), true);
        let h2 = self.f1a("dense2/BiasAdd", "BiasAdd", &[a2, b2.read], h.s, BIAS);
        self.set_scope(&[&scope]);
        let r2 = self.f1("add_1", "AddV2", &[h2, ln1.out], h.s);
        let ln2 = self.norm(format!("{scope}/ln2"), r2, false);
        TfRec {
            scope,
            orig,
            h,
            qkv,
            scale,
            probs,
            ctx2,
            wo,
            ln1,
            w1,
            b1,
            relu,
            w2,
            b2,
            ln2,
        }
    }

    pub(super) fn tf_grad(&mut self, r: &TfRec, d: T) -> T {
        let d_r2 = self.norm_grad(&r.ln2, d);
        let d_ln1 = self.mlp_grad(r, d_r2);
        let d_r1 = self.norm_grad(&r.ln1, d_ln1);
        self.set_scope(&["gradient_tape", &r.scope, "attn"]);
        let hs = r.h.s;
        let d_ctx2 = self.f1a(
            "output/MatMul/MatMul",
            "MatMul",
            &[d_r1, r.wo.read],
            hs,
            MM_NT,
        );
        let ins = [r.ctx2, d_r1];
        let dwo = self.f1a("output/MatMul/MatMul_1", "MatMul", &ins, r.wo.read.s, MM_TN);
        self.set_grad(&r.wo, dwo);
        let ts = r.qkv[0].t.s;
        let heads = s4(ts.d[0], ts.d[2], ts.d[1], ts.d[3]);
        let d_ctx_t = self.reshape("context/Reshape/Reshape", d_ctx2, heads);
        let perm = self.cint("context/transpose/perm", HEADS_PERM);
        let ins = [d_ctx_t, perm];
        let d_ctx = self.f1a(
            "context/transpose/transpose",
            "Transpose",
            &ins,
            ts,
            TRANSPOSE,
        );
        let ps = r.probs.s;
        let ins = [d_ctx, r.qkv[2].t];
        let d_p = self.f1a("context/MatMul/MatMul", "BatchMatMulV2", &ins, ps, BMM_NT);
        let ins = [r.probs, d_ctx];
        let d_vt = self.f1a("context/MatMul/MatMul_1", "BatchMatMulV2", &ins, ts, BMM_TN);
        let mul = self.f1("Softmax/mul", "Mul", &[d_p, r.probs], ps);
        let ri = self.cint("Softmax/Sum/reduction_indices", &[3]);
        let sum = self.f1a("Softmax/Sum", "Sum", &[mul, ri], ps.keep(&[3]), KEEP);
        let sub = self.f1("Softmax/sub", "Sub", &[d_p, sum], ps);
        let d_sm = self.f1("Softmax/mul_1", "Mul", &[sub, r.probs], ps);
        let d_sc = self.f1("scores/mul/Mul", "Mul", &[d_sm, r.scale], ps);
        let ins = [d_sc, r.qkv[1].t];
        let d_qt = self.f1a("scores/MatMul/MatMul", "BatchMatMulV2", &ins, ts, BMM_NN);
        let ins = [d_sc, r.qkv[0].t];
        let d_kt = self.f1a("scores/MatMul/MatMul_1", "BatchMatMulV2", &ins, ts, BMM_TN);
        let mut dh = [d_r1; 4];
        for (k, dt) in [d_qt, d_kt, d_vt].into_iter().enumerate() {
            dh[k + 1] = self.proj_grad(&r.scope, &r.qkv[k], dt, r.h);
        }
        let dx = self.addn(&dh);
        match r.orig {
            Some(s) => {
                self.set_scope(&["gradient_tape", &r.scope]);
                self.reshape("to_tokens/Reshape", dx, s)
            }
            None => dx,
        }
    }

    pub(super) fn mlp_grad(&mut self, r: &TfRec, d: T) -> T {
        self.set_scope(&["gradient_tape", &r.scope, "mlp"]);
        let db2 = self.f1a(
            "dense2/BiasAdd/BiasAddGrad",
            "BiasAddGrad",
            &[d],
            r.b2.read.s,
            BIAS,
        );
        let rs = r.relu.s;
        let d_relu = self.f1a("dense2/MatMul/MatMul", "MatMul", &[d, r.w2.read], rs, MM_NT);
        let dw2 = self.f1a(
            "dense2/MatMul/MatMul_1",
            "MatMul",
            &[r.relu, d],
            r.w2.read.s,
            MM_TN,
        );
        let d_h1 = self.f1("dense1/ReluGrad", "ReluGrad", &[d_relu, r.relu], rs);
        let db1 = self.f1a(
            "dense1/BiasAdd/BiasAddGrad",
            "BiasAddGrad",
            &[d_h1],
            r.b1.read.s,
            BIAS,
        );
        let ins = [d_h1, r.w1.read];
        let d_ln = self.f1a("dense1/MatMul/MatMul", "MatMul", &ins, r.h.s, MM_NT);
        let ins = [r.ln1.out, d_h1];
        let dw1 = self.f1a("dense1/MatMul/MatMul_1", "MatMul", &ins, r.w1.read.s, MM_TN);
        self.set_grad(&r.b2, db2);
        self.set_grad(&r.w2, dw2);
        self.set_grad(&r.b1, db1);
        self.set_grad(&r.w1, dw1);
        self.addn(&[d, d_ln])
    }

    pub(super) fn proj_grad(&mut self, scope: &str, p: &Proj, d: T, h: T) -> T {
        self.set_scope(&["gradient_tape", scope, "attn", p.name]);
        let ts = d.s;
        let heads = s4(ts.d[0], ts.d[2], ts.d[1], ts.d[3]);
        let perm = self.cint("transpose/perm", HEADS_PERM);
        let dt = self.f1a(
            "transpose/transpose",
            "Transpose",
            &[d, perm],
            heads,
            TRANSPOSE,
        );
        let d2 = self.reshape("Reshape/Reshape", dt, h.s);
        let dh = self.f1a("MatMul/MatMul", "MatMul", &[d2, p.w.read], h.s, MM_NT);
        let dw = self.f1a("MatMul/MatMul_1", "MatMul", &[h, d2], p.w.read.s, MM_TN);
        self.set_grad(&p.w, dw);
        dh
    }
}
