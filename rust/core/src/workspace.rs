//! Kernel workspace: the scratch bytes an op holds while it runs, on top of
//! its inputs and outputs, by the backend that runs its kernel.
//!
//! # The rule
//! A [`WorkspaceRule`] names the backend; [`op_workspace`] gives an op's
//! scratch from its type and shapes (NHWC, filters HWIO; `T` the element
//! size of the op's output dtype):
//!
//! | backend | ops | scratch bytes | source |
//! |---|---|---|---|
//! | `cpu-eigen` (TensorFlow's own CPU kernels: oneDNN off) | `Conv2DBackpropFilter(V2)` | `ceil(W / (A + B + C)) · A · T` with `W = 30 MiB / T`, `A = out_hw · k_h·k_w·c_in`, `B = out_hw · c_out`, `C = k_h·k_w·c_in · c_out`, `out_hw` the spatial size of `out_backprop` | `Conv2DCustomBackpropFilterOp` (tensorflow/core/kernels/conv_grad_filter_ops.cc): an im2col buffer of `shard_size` images, `shard_size` = the 30 MiB "L3" target over one image's matmul size, not capped by the batch |
//! | `cpu-eigen` | `Conv2DBackpropInput(V2)` | `A · T` when the batch is 1 or `(A + B + C) / threads ≥ 256 KiB / T` (parallel contraction, one image at a time), else as `BackpropFilter` | `Conv2DCustomBackpropInputOp` (conv_grad_input_ops.h); `threads` is the Session's intra-op thread count |
//! | `cpu-eigen` | `Conv3DBackpropInput(V2)` | `shard · out_dhw · k_d·k_h·k_w·c_in · T`, `shard` 1 for a batch of 1, else `ceil(L3 / T / (A + B + C))`; 0 when that exceeds 25x the elements of input, filter and `out_backprop` | `Conv3DCustomBackpropInputOp` (conv_grad_ops_3d.cc), L3 = Eigen's `CacheSizes().m_l3` |
//! | `cpu-onednn` | every op | 0 | measured: oneDNN kernels' scratch is a few KiB (`docs/devices.md`) |
//! | `cpu-onednn:THREADS:L3:DTYPES` | ops of `DTYPES` (`bfloat16`, `half`) | as `cpu-eigen:THREADS:L3` | TensorFlow rewrites an op to oneDNN's only when its type is one oneDNN runs on this CPU (`IsDataTypeSupportedByOneDNNOnThisCPU`, tensorflow/core/util/util.cc: `bfloat16` needs AVX512F or AVX-NE-CONVERT, `half` AVX512BW with AVX512-FP16 or AMX-FP16, or AVX-NE-CONVERT); the others run TensorFlow's own kernels, im2col scratch included |
//! | `gpu-cudnn` | convolutions and their gradients | `limit_bytes` each | cuDNN's workspace: TensorFlow's autotuner may give a convolution up to `TF_CUDNN_WORKSPACE_LIMIT_IN_MB` (default 4096 MiB) of scratch |
//! | `none` | every op | 0 | |
//!
//! Which op types take scratch, and the operands their size is read from,
//! are op facts ([`crate::opkind::im2col`], [`crate::opkind::is_convolution`]);
//! this file holds the rule's arithmetic.
//!
//! Smaller scratch the CPU kernels take (an Eigen `MatMul` in bfloat16:
//! 48 KiB; `MaxPoolGrad`: 8 KiB) is not modelled. A measured profile
//! overrides the rule per node ([`crate::build::BuildOptions::workspace_profile`]).
//!
//! Shapes come from the graph: an op whose shapes are not the rank the
//! kernel needs gets 0.
//!
//! # Complexity
//! O(N + E) for the table of a graph.

use serde::{Deserialize, Serialize};

use crate::dtype::DType;
use crate::error::{PlanError, Result};
use crate::graph::Graph;
use crate::opkind::{self, Im2col, Operand};

/// Which kernels run the step, and so how much scratch each op takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum WorkspaceRule {
    /// No scratch anywhere (the model before workspace existed).
    #[default]
    None,
    /// TensorFlow's own CPU kernels (Eigen and its im2col convolution
    /// gradients): a CPU with oneDNN off. `threads`: the intra-op threads.
    CpuEigen { threads: u32, l3_bytes: u64 },
    /// oneDNN's CPU kernels (`TF_ENABLE_ONEDNN_OPTS=1`), except for ops of
    /// the types oneDNN does not run on this CPU (`own_bf16`, `own_f16`),
    /// which run TensorFlow's own kernels with `threads` and `l3_bytes` as
    /// in [`WorkspaceRule::CpuEigen`].
    CpuOnednn {
        threads: u32,
        l3_bytes: u64,
        own_bf16: bool,
        own_f16: bool,
    },
    /// cuDNN convolutions with `TF_CUDNN_WORKSPACE_LIMIT_IN_MB` of scratch.
    GpuCudnn { limit_bytes: u64 },
}

impl WorkspaceRule {
    /// Parses `none`, `cpu-eigen:THREADS[:L3_BYTES]` (the L3 cache Eigen sees,
    /// [`DEFAULT_L3`] when not given), `cpu-onednn` (oneDNN runs every op),
    /// `cpu-onednn:THREADS:L3_BYTES:DTYPES` (`DTYPES`: `bfloat16`, `half` or
    /// both, comma-separated: the types oneDNN does not run on this CPU),
    /// `gpu-cudnn:MIB`.
    ///
    /// # Errors
    /// [`PlanError::InvalidArgument`] naming the forms accepted.
    ///
    /// # Example
    /// ```
    /// use hybridplan_core::workspace::WorkspaceRule;
    /// assert_eq!(
    ///     WorkspaceRule::parse("cpu-eigen:2:1048576").unwrap(),
    ///     WorkspaceRule::CpuEigen { threads: 2, l3_bytes: 1 << 20 }
    /// );
    /// assert_eq!(WorkspaceRule::parse("gpu-cudnn:64").unwrap(), WorkspaceRule::GpuCudnn { limit_bytes: 64 << 20 });
    /// ```
    pub fn parse(s: &str) -> Result<WorkspaceRule> {
        let (name, arg) = match s.split_once(':') {
            Some((n, a)) => (n, Some(a)),
            None => (s, None),
        };
        let num = |a: Option<&str>| a.and_then(|a| a.trim().parse::<u64>().ok());
        let rule = match (name.trim(), arg) {
            ("none", None) => Some(WorkspaceRule::None),
            ("cpu-onednn", None) => Some(WorkspaceRule::ONEDNN),
            ("cpu-onednn", Some(a)) => {
                let mut parts = a.splitn(3, ':');
                let (t, l3, types) = (
                    num(parts.next()),
                    num(parts.next()),
                    parts.next().unwrap_or(""),
                );
                let (mut own_bf16, mut own_f16, mut ok) = (false, false, !types.is_empty());
                for ty in types.split(',') {
                    match ty.trim() {
                        "bfloat16" => own_bf16 = true,
                        "half" => own_f16 = true,
                        _ => ok = false,
                    }
                }
                t.filter(|&t| ok && (1..=u64::from(u32::MAX)).contains(&t))
                    .zip(l3.filter(|&b| b > 0))
                    .map(|(t, l3_bytes)| WorkspaceRule::CpuOnednn {
                        threads: t as u32,
                        l3_bytes,
                        own_bf16,
                        own_f16,
                    })
            }
            ("cpu-eigen", Some(a)) => {
                let (t, l3) = match a.split_once(':') {
                    Some((t, l3)) => (num(Some(t)), num(Some(l3))),
                    None => (num(Some(a)), Some(DEFAULT_L3)),
                };
                t.filter(|&t| (1..=u64::from(u32::MAX)).contains(&t))
                    .zip(l3.filter(|&b| b > 0))
                    .map(|(t, l3_bytes)| WorkspaceRule::CpuEigen {
                        threads: t as u32,
                        l3_bytes,
                    })
            }
            ("gpu-cudnn", a) => num(a)
                .and_then(|m| m.checked_mul(1 << 20))
                .map(|limit_bytes| WorkspaceRule::GpuCudnn { limit_bytes }),
            _ => None,
        };
        rule.ok_or_else(|| {
            PlanError::InvalidArgument(format!(
                "unknown workspace rule '{s}': give 'none', 'cpu-eigen:THREADS' (TensorFlow's own CPU kernels, oneDNN off; THREADS = intra-op threads >= 1), 'cpu-onednn', 'cpu-onednn:THREADS:L3_BYTES:bfloat16,half' (the types oneDNN does not run on this CPU) or 'gpu-cudnn:MIB' (TF_CUDNN_WORKSPACE_LIMIT_IN_MB)"
            ))
        })
    }

    /// The rule as [`WorkspaceRule::parse`] reads it (for the round-trip test).
    #[cfg(test)]
    fn name(&self) -> String {
        match self {
            WorkspaceRule::None => "none".into(),
            WorkspaceRule::CpuEigen { threads, l3_bytes } => {
                format!("cpu-eigen:{threads}:{l3_bytes}")
            }
            WorkspaceRule::CpuOnednn {
                threads,
                l3_bytes,
                own_bf16,
                own_f16,
            } => {
                let types: Vec<&str> = [(*own_bf16, "bfloat16"), (*own_f16, "half")]
                    .into_iter()
                    .filter_map(|(own, t)| own.then_some(t))
                    .collect();
                if types.is_empty() {
                    "cpu-onednn".into()
                } else {
                    format!("cpu-onednn:{threads}:{l3_bytes}:{}", types.join(","))
                }
            }
            WorkspaceRule::GpuCudnn { limit_bytes } => format!("gpu-cudnn:{}", limit_bytes >> 20),
        }
    }
}

impl WorkspaceRule {
    /// oneDNN runs every op: no scratch anywhere.
    pub(crate) const ONEDNN: WorkspaceRule = WorkspaceRule::CpuOnednn {
        threads: 1,
        l3_bytes: DEFAULT_L3,
        own_bf16: false,
        own_f16: false,
    };
}

/// Scratch bytes of node `v` under `rule` (see the module table).
pub(crate) fn op_workspace(g: &Graph, v: u32, rule: WorkspaceRule) -> u64 {
    let op = g.op_name(v);
    match rule {
        WorkspaceRule::None => 0,
        WorkspaceRule::CpuOnednn {
            threads,
            l3_bytes,
            own_bf16,
            own_f16,
        } => {
            // The op's type: that of its first output (`T` of the ops with scratch).
            let dtype = g.outputs(v).next().map(|t| g.tensors[t as usize].dtype);
            let own = match dtype {
                Some(DType::BFLOAT16) => own_bf16,
                Some(DType::HALF) => own_f16,
                _ => false,
            };
            if own {
                op_workspace(g, v, WorkspaceRule::CpuEigen { threads, l3_bytes })
            } else {
                0
            }
        }
        WorkspaceRule::GpuCudnn { limit_bytes } => {
            if opkind::is_convolution(op) {
                limit_bytes
            } else {
                0
            }
        }
        WorkspaceRule::CpuEigen { threads, l3_bytes } => match opkind::im2col(op) {
            Some(k @ (Im2col::Conv2DFilter | Im2col::Conv2DInput)) => {
                eigen_conv_grad(g, v, k, threads)
            }
            Some(k @ Im2col::Conv3DInput) => eigen_conv3d_input(g, v, k, l3_bytes),
            None => 0,
        },
    }
}

/// TensorFlow's "L3" working-set target of the im2col convolution
/// gradients, bytes.
const L3_TARGET: u64 = 30 << 20;
/// Their per-thread "L2" threshold for a parallel contraction, bytes.
const L2_MIN: u64 = 256 << 10;

/// The tensor of an op's operand: output 0 or an input slot.
fn operand(g: &Graph, v: u32, o: Operand) -> Option<u32> {
    match o {
        Operand::Output0 => g.outputs(v).next(),
        Operand::Input(k) => g.inputs(v).get(k).copied(),
    }
}

/// The output, filter and `out_backprop` of convolution gradient `v` (the
/// operands [`Im2col`] names); none when `v` has fewer than three inputs.
fn conv_grad_operands(g: &Graph, v: u32, which: Im2col) -> Option<(u32, u32, u32)> {
    let out = g.outputs(v).next()?;
    if g.inputs(v).len() < 3 {
        return None;
    }
    let f = operand(g, v, which.filter())?;
    let dy = operand(g, v, Operand::Input(which.out_backprop()))?;
    Some((out, f, dy))
}

/// The im2col buffer of `Conv2DCustom{BackpropFilter,BackpropInput}Op`,
/// the shapes taken from the operands [`Im2col`] names.
fn eigen_conv_grad(g: &Graph, v: u32, which: Im2col, threads: u32) -> u64 {
    let Some((out, f, dy)) = conv_grad_operands(g, v, which) else {
        return 0;
    };
    let (filter, dy) = (g.shape(f), g.shape(dy));
    let r = which.rank();
    if filter.len() != r || dy.len() != r || filter.iter().chain(dy).any(|&d| d < 0) {
        return 0;
    }
    let t = g.tensors[out as usize].dtype.size().max(1);
    let d = |x: i64| x as u64;
    let out_hw = d(dy[1]).saturating_mul(d(dy[2]));
    let fts = d(filter[0]) * d(filter[1]) * d(filter[2]);
    let a = out_hw.saturating_mul(fts);
    let work = a
        .saturating_add(out_hw.saturating_mul(d(filter[3])))
        .saturating_add(fts.saturating_mul(d(filter[3])));
    if work == 0 {
        return 0;
    }
    let parallel = which == Im2col::Conv2DInput
        && (dy[0] == 1 || work / u64::from(threads.max(1)) >= L2_MIN / t);
    let shard = if parallel {
        1
    } else {
        (L3_TARGET / t).div_ceil(work)
    };
    shard.saturating_mul(a).saturating_mul(t)
}

/// The L3 size assumed when a `cpu-eigen` rule does not give one, bytes.
pub(crate) const DEFAULT_L3: u64 = 32 << 20;

/// The im2col buffer of `Conv3DCustomBackpropInputOp` (conv_grad_ops_3d.cc):
/// `shard · out_dhw · fts · T`, `shard` 1 for a batch of 1, else the L3
/// cache (`Eigen::internal::CacheSizes().m_l3`) over one image's matmul
/// size; none when that buffer would exceed 25x the elements of input,
/// filter and `out_backprop` together (the kernel then falls back on
/// Eigen's own, measured without scratch).
fn eigen_conv3d_input(g: &Graph, v: u32, which: Im2col, l3: u64) -> u64 {
    let Some((out, f, dy)) = conv_grad_operands(g, v, which) else {
        return 0;
    };
    let (x, f, dy) = (g.shape(out), g.shape(f), g.shape(dy));
    let r = which.rank();
    if x.len() != r || f.len() != r || dy.len() != r || x.iter().chain(f).chain(dy).any(|&d| d < 0)
    {
        return 0;
    }
    let t = g.tensors[out as usize].dtype.size().max(1);
    let prod = |s: &[i64]| s.iter().fold(1u64, |a, &d| a.saturating_mul(d as u64));
    let out_dhw = prod(&dy[1..4]);
    let fts = prod(&f[0..4]);
    let c_out = dy[4] as u64;
    let work = out_dhw
        .saturating_mul(c_out)
        .saturating_add(fts.saturating_mul(c_out))
        .saturating_add(out_dhw.saturating_mul(fts));
    if work == 0 {
        return 0;
    }
    let shard = if dy[0] == 1 {
        1
    } else {
        (l3 / t).div_ceil(work)
    };
    let col = shard.saturating_mul(out_dhw).saturating_mul(fts);
    let total = prod(x)
        .saturating_add(prod(f))
        .saturating_add(prod(dy))
        .max(1);
    if col / total > 25 {
        return 0;
    }
    col.saturating_mul(t)
}

/// The scratch of every node: the rule's, replaced by `overrides` (node
/// id, bytes) where given. Empty when every node's is 0 (a graph without
/// workspace is the graph it was before workspace existed).
///
/// # Complexity
/// O(N + E + overrides).
pub(crate) fn table(g: &Graph, rule: WorkspaceRule, overrides: &[(u32, u64)]) -> Vec<u64> {
    if rule == WorkspaceRule::None && overrides.iter().all(|&(_, b)| b == 0) {
        return Vec::new();
    }
    let mut ws: Vec<u64> = (0..g.num_nodes() as u32)
        .map(|v| op_workspace(g, v, rule))
        .collect();
    for &(v, b) in overrides {
        if let Some(w) = ws.get_mut(v as usize) {
            *w = b;
        }
    }
    if ws.iter().all(|&b| b == 0) {
        ws.clear();
    }
    ws
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::build::{build, BuildOptions, NodeSpec, OutSpec, Shape};
    use crate::dtype::DType;

    fn out(dtype: DType, dims: &[i64]) -> Vec<OutSpec> {
        vec![OutSpec {
            dtype: Some(dtype),
            shape: Shape(Some(dims.to_vec())),
        }]
    }

    /// x -> Relu -> both convolution gradients of a `k`x`k` filter,
    /// `dy` of the same spatial size (stride 1, SAME) and `c_out` channels.
    fn conv_grads(x: [i64; 4], k: i64, c_out: i64, dtype: DType, opts: &BuildOptions) -> Graph {
        let dy = [x[0], x[1], x[2], c_out];
        let filter = [k, k, x[3], c_out];
        let node = |name, op, inputs, outputs| NodeSpec {
            name,
            op,
            device: "",
            inputs,
            outputs,
            calls_function: false,
        };
        let specs = [
            node("x", "Placeholder", vec![], out(dtype, &x)),
            node("dy", "Placeholder", vec![], out(dtype, &dy)),
            node("f", "Placeholder", vec![], out(dtype, &filter)),
            node("sizes", "Const", vec![], out(DType::INT32, &[4])),
            node("h", "Relu", vec!["x"], out(dtype, &x)),
            node(
                "bpf",
                "Conv2DBackpropFilter",
                vec!["h", "sizes", "dy"],
                out(dtype, &filter),
            ),
            node(
                "bpi",
                "Conv2DBackpropInput",
                vec!["sizes", "f", "dy"],
                out(dtype, &x),
            ),
        ];
        build(&specs, opts).unwrap()
    }

    fn eigen(threads: u32) -> BuildOptions {
        BuildOptions {
            workspace: WorkspaceRule::CpuEigen {
                threads,
                l3_bytes: DEFAULT_L3,
            },
            ..BuildOptions::default()
        }
    }

    /// The rule gives the bytes measured with TensorFlow 2.21, oneDNN off,
    /// 2 intra-op threads (allocation records of one node, freed inside it;
    /// docs/devices.md).
    #[test]
    fn eigen_rule_gives_the_measured_scratch() {
        let cases: [([i64; 4], i64, i64, DType, u64, u64); 6] = [
            ([8, 32, 32, 16], 3, 16, DType::FLOAT, 28_311_552, 589_824),
            ([8, 32, 32, 3], 3, 16, DType::FLOAT, 19_574_784, 19_574_784),
            ([8, 16, 16, 32], 3, 32, DType::FLOAT, 25_657_344, 25_657_344),
            ([8, 8, 8, 64], 3, 64, DType::FLOAT, 15_040_512, 15_040_512),
            ([1, 32, 32, 16], 3, 16, DType::FLOAT, 28_311_552, 589_824),
            (
                [8, 32, 32, 16],
                3,
                16,
                DType::BFLOAT16,
                28_016_640,
                28_016_640,
            ),
        ];
        for (x, k, c, dt, filter_bytes, input_bytes) in cases {
            let g = conv_grads(x, k, c, dt, &eigen(2));
            let at = |name: &str| (0..g.num_nodes() as u32).find(|&v| g.node_name(v) == name);
            assert_eq!(g.workspace_of(at("bpf").unwrap()), filter_bytes, "{x:?}");
            assert_eq!(g.workspace_of(at("bpi").unwrap()), input_bytes, "{x:?}");
            assert_eq!(g.workspace_of(at("h").unwrap()), 0);
        }
    }

    #[test]
    fn no_rule_no_workspace_and_liveness_counts_it_at_the_op() {
        let plain = conv_grads(
            [8, 32, 32, 16],
            3,
            16,
            DType::FLOAT,
            &BuildOptions::default(),
        );
        assert!(plain.workspace.is_empty());
        let onednn = BuildOptions {
            workspace: WorkspaceRule::ONEDNN,
            ..BuildOptions::default()
        };
        let g1 = conv_grads([8, 32, 32, 16], 3, 16, DType::FLOAT, &onednn);
        assert!(g1.workspace.is_empty());
        let g = conv_grads([8, 32, 32, 16], 3, 16, DType::FLOAT, &eigen(2));
        let (a0, a) = (
            crate::analyze_graph(plain).unwrap(),
            crate::analyze_graph(g).unwrap(),
        );
        for (p, &v) in a.schedule.order.iter().enumerate() {
            let ws = a.graph.workspace_of(v);
            assert_eq!(a.liveness.timeline[p], a0.liveness.timeline[p] + ws);
        }
        assert_eq!(
            a.liveness.tensor_peak_bytes(&a.graph, &a.schedule),
            a0.liveness.peak_bytes
        );
        // The simulator's empty plan sees the same peak.
        let dev = crate::device::preset("cpu").unwrap();
        let costs = vec![1e-6; a.graph.num_nodes()];
        let r = crate::simulate::Simulator::new(&a.graph, &a.schedule, &costs, &dev)
            .and_then(|mut s| s.run(&Default::default(), crate::simulate::Detail::FULL))
            .unwrap();
        assert_eq!(r.peak_bytes, a.liveness.peak_bytes);
    }

    #[test]
    fn rules_parse_and_print() {
        for s in [
            "none",
            "cpu-onednn",
            "cpu-onednn:2:1048576:half",
            "cpu-onednn:2:1048576:bfloat16,half",
            "cpu-eigen:4:1048576",
            "gpu-cudnn:4096",
        ] {
            assert_eq!(WorkspaceRule::parse(s).unwrap().name(), s);
        }
        for bad in [
            "",
            "cpu-eigen",
            "cpu-eigen:0",
            "cpu-onednn:2:1048576",
            "cpu-onednn:2:1048576:float",
            "cpu-onednn:0:1048576:half",
            "gpu-cudnn:x",
            "tpu",
        ] {
            assert!(WorkspaceRule::parse(bad).is_err(), "{bad}");
        }
        let g = conv_grads(
            [8, 32, 32, 16],
            3,
            16,
            DType::FLOAT,
            &BuildOptions {
                workspace: WorkspaceRule::GpuCudnn {
                    limit_bytes: 1 << 20,
                },
                workspace_profile: vec![("h".into(), 7)],
                ..BuildOptions::default()
            },
        );
        let ws: Vec<u64> = g.workspace.clone();
        assert_eq!(ws, vec![0, 0, 0, 0, 7, 1 << 20, 1 << 20]);
    }

    /// With oneDNN on, an op of a type oneDNN does not run on this CPU runs
    /// TensorFlow's own kernel and holds its scratch: measured with
    /// TensorFlow 2.21, `TF_ENABLE_ONEDNN_OPTS=1`, on an AVX-512 CPU without
    /// AVX512-FP16 (a Keras CNN under `mixed_float16`, 64 channels at 32x32,
    /// batch 8: 27,131,904 bytes, the oneDNN-off rule's figure); a type it
    /// runs holds none.
    #[test]
    fn onednn_leaves_the_types_it_does_not_run_to_tensorflows_kernels() {
        let rule = |own_bf16, own_f16| BuildOptions {
            workspace: WorkspaceRule::CpuOnednn {
                threads: 2,
                l3_bytes: DEFAULT_L3,
                own_bf16,
                own_f16,
            },
            ..BuildOptions::default()
        };
        let x = [8, 32, 32, 64];
        for (dt, own_bf16, own_f16, expect) in [
            (DType::HALF, false, true, true),
            (DType::HALF, true, false, false),
            (DType::BFLOAT16, true, false, true),
            (DType::BFLOAT16, false, true, false),
            (DType::FLOAT, true, true, false),
        ] {
            let g = conv_grads(x, 3, 64, dt, &rule(own_bf16, own_f16));
            let e = conv_grads(x, 3, 64, dt, &eigen(2));
            let want = if expect { e.workspace.clone() } else { vec![] };
            assert_eq!(g.workspace, want, "{dt:?} {own_bf16} {own_f16}");
        }
        let g = conv_grads(x, 3, 64, DType::HALF, &rule(false, true));
        assert_eq!(g.workspace.iter().max(), Some(&27_131_904));
    }
}
