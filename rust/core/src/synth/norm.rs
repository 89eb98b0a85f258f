//! Normalisation layers shared by the families: batch norm (rank 4, with
//! moving averages written back) and layer norm (rank 2), and their
//! gradients.
//!
//! # Complexity
//! O(1) nodes per layer.

use super::writer::*;

pub(super) struct NormRec {
    pub(super) scope: String,
    pub(super) x: T,
    pub(super) sg: T,
    pub(super) sub: T,
    pub(super) rsqrt: T,
    pub(super) norm: T,
    pub(super) axes: &'static [i64],
    pub(super) gamma: VarRef,
    pub(super) beta: VarRef,
    pub(super) out: T,
}

impl Gen {
    /// Batch norm (rank 4: statistics over batch and space, with moving
    /// averages) or layer norm (rank 2: statistics over features).
    pub(super) fn norm(&mut self, scope: String, x: T, moving: bool) -> NormRec {
        self.set_scope(&[&scope]);
        let axes: &'static [i64] = if x.s.r == 4 { &[0, 1, 2] } else { &[1] };
        let (st, c) = (x.s.keep(axes), x.s.last());
        let ri = self.cint("moments/mean/reduction_indices", axes);
        let mean = self.f1a("moments/mean", "Mean", &[x, ri], st, KEEP);
        let sg = self.f1("moments/StopGradient", "StopGradient", &[mean], st);
        let sqd = self.f1(
            "moments/SquaredDifference",
            "SquaredDifference",
            &[x, sg],
            x.s,
        );
        let ri = self.cint("moments/variance/reduction_indices", axes);
        let var = self.f1a("moments/variance", "Mean", &[sqd, ri], st, KEEP);
        let eps = self.cfloat("batchnorm/add/y", 1e-3);
        let var_eps = self.f1("batchnorm/add", "AddV2", &[var, eps], st);
        let rsqrt = self.f1("batchnorm/Rsqrt", "Rsqrt", &[var_eps], st);
        let sub = self.f1("batchnorm/sub", "Sub", &[x, mean], x.s);
        let norm = self.f1("batchnorm/mul", "Mul", &[sub, rsqrt], x.s);
        let gamma = self.var("gamma", s1(c), true);
        let scaled = self.f1("batchnorm/mul_1", "Mul", &[norm, gamma.read], x.s);
        let beta = self.var("beta", s1(c), true);
        let out = self.f1("batchnorm/add_1", "AddV2", &[scaled, beta.read], x.s);
        if moving {
            self.moving_average(0, mean, axes);
            self.moving_average(1, var, axes);
        }
        NormRec {
            scope,
            x,
            sg,
            sub,
            rsqrt,
            norm,
            axes,
            gamma,
            beta,
            out,
        }
    }

    /// `moving = 0.99 * moving + 0.01 * stat`, written back.
    pub(super) fn moving_average(&mut self, k: usize, stat: T, axes: &[i64]) {
        let c = s1(stat.s.last());
        let leaf = if k == 0 {
            "moving_mean"
        } else {
            "moving_variance"
        };
        let mv = self.var(leaf, c, false);
        let a = [A::T, A::Ints("squeeze_dims", axes)];
        let sq = self.f1a(Nm("moments/Squeeze", k, ""), "Squeeze", &[stat], c, &a);
        let y0 = self.cfloat(Nm("mul", 2 * k, "/y"), 0.99);
        let m0 = self.f1(Nm("mul", 2 * k, ""), "Mul", &[mv.read, y0], c);
        let y1 = self.cfloat(Nm("mul", 2 * k + 1, "/y"), 0.01);
        let m1 = self.f1(Nm("mul", 2 * k + 1, ""), "Mul", &[sq, y1], c);
        let add = self.f1(Nm("add", k, ""), "AddV2", &[m0, m1], c);
        let a = [A::Type("dtype", self.f), A::Bool("validate_shape", false)];
        let name = Nm("AssignVariableOp", k, "");
        let w = self.op(
            name,
            "AssignVariableOp",
            &[mv.handle, add],
            &[mv.read.node],
            &[],
            &a,
        );
        self.stateful.push(w);
    }

    pub(super) fn norm_grad(&mut self, n: &NormRec, d: T) -> T {
        self.set_scope(&["gradient_tape", &n.scope]);
        let (xs, st, c) = (d.s, n.rsqrt.s, s1(d.s.last()));
        let pax: &[i64] = if xs.r == 4 { &[0, 1, 2] } else { &[0] };
        let ri = self.cint("batchnorm/add_1/Sum/reduction_indices", pax);
        let dbeta = self.f1a("batchnorm/add_1/Sum", "Sum", &[d, ri], c, DROP);
        let dnorm = self.f1("batchnorm/mul_1/Mul", "Mul", &[d, n.gamma.read], xs);
        let dg = self.f1("batchnorm/mul_1/Mul_1", "Mul", &[n.norm, d], xs);
        let ri = self.cint("batchnorm/mul_1/Sum/reduction_indices", pax);
        let dgamma = self.f1a("batchnorm/mul_1/Sum", "Sum", &[dg, ri], c, DROP);
        let dsub = self.f1("batchnorm/mul/Mul", "Mul", &[dnorm, n.rsqrt], xs);
        let dr = self.f1("batchnorm/mul/Mul_1", "Mul", &[n.sub, dnorm], xs);
        let ri = self.cint("batchnorm/mul/Sum/reduction_indices", n.axes);
        let drs = self.f1a("batchnorm/mul/Sum", "Sum", &[dr, ri], st, KEEP);
        let dvar = self.f1(
            "batchnorm/Rsqrt/RsqrtGrad",
            "RsqrtGrad",
            &[n.rsqrt, drs],
            st,
        );
        let dsqd = self.mean_grad("moments/variance", dvar, xs);
        let two = self.cfloat("moments/SquaredDifference/scalar", 2.0);
        let m = self.f1("moments/SquaredDifference/Mul", "Mul", &[two, dsqd], xs);
        let diff = self.f1("moments/SquaredDifference/sub", "Sub", &[n.x, n.sg], xs);
        let dx2 = self.f1("moments/SquaredDifference/mul_1", "Mul", &[m, diff], xs);
        let ri = self.cint("batchnorm/sub/Sum/reduction_indices", n.axes);
        let s = self.f1a("batchnorm/sub/Sum", "Sum", &[dsub, ri], st, KEEP);
        let dmean = self.f1("batchnorm/sub/Neg", "Neg", &[s], st);
        let dx3 = self.mean_grad("moments/mean", dmean, xs);
        self.set_grad(&n.gamma, dgamma);
        self.set_grad(&n.beta, dbeta);
        self.addn(&[dsub, dx2, dx3])
    }

    /// Gradient of a `keep_dims` mean: tile back to `xs`, divide by the count.
    pub(super) fn mean_grad(&mut self, pre: &str, d: T, xs: Shp) -> T {
        let mut mult = [1i64; 4];
        let mut count = 1i64;
        for (m, (&x, &r)) in mult.iter_mut().zip(xs.dims().iter().zip(d.s.dims())) {
            *m = x / r.max(1);
            count = count.saturating_mul(*m);
        }
        let m = self.cint(Nm(pre, 0, "/Tile/multiples"), &mult[..xs.r as usize]);
        let a = [A::T, A::Type("Tmultiples", I32)];
        let t = self.f1a(Nm(pre, 0, "/Tile"), "Tile", &[d, m], xs, &a);
        let n = self.cfloat(Nm(pre, 0, "/Const"), count as f64);
        self.f1(Nm(pre, 0, "/truediv"), "RealDiv", &[t, n], xs)
    }
}
