//! Op costs: a roofline estimate of every op's time on a [`DeviceModel`],
//! from FLOPs and bytes counted on shapes alone, or a measured profile.
//!
//! # The model
//! `time = launch_overhead + max(flops / flops_per_s(dtype), bytes / mem_bandwidth)`
//! where `bytes` is the sum of the `value_bytes` of the op's data inputs and
//! outputs, and `dtype` is that of its first non-handle output (else input).
//! Exceptions:
//! - ops with no data inputs (`Const`, `Placeholder`, `VarHandleOp`,
//!   `NoOp`, `_Arg`) cost 0: they run no kernel in the step (constants are
//!   materialised when the graph is built, placeholders are fed);
//! - buffer-forwarding ops ([`opkind::aliased_input`]: `Identity`,
//!   `Reshape`, ...) and `ReadVariableOp` cost the launch overhead only;
//! - optimizer updates (`ResourceApply*`, `Apply*`) read the variable, its
//!   slots and the gradient and write them back: 5 FLOPs and 4x the
//!   gradient's bytes per gradient element (the variable is a handle, so its
//!   bytes are not on an input);
//! - ops the model does not know are costed by bytes alone and listed in
//!   [`OpCosts::unknown_ops`].
//!
//! # FLOPs (shapes only, NHWC / NDHWC, filters HWIO / DHWIO)
//! | ops | FLOPs |
//! |---|---|
//! | `Conv2D`, `Conv3D`, `_FusedConv2D` | 2 · out · kernel_spatial · in_channels = 2 · out · filter / out_channels |
//! | `DepthwiseConv2dNative` | 2 · out · kernel_spatial |
//! | their `BackpropInput` / `BackpropFilter` (V2) | as the forward: 2 · dy · filter / out_channels (filter: input 1, or output 0 of `BackpropFilter`) |
//! | `MatMul`, `_FusedMatMul`, `BatchMatMul(V2,V3)` | 2 · out · K, K read from `a`'s shape (the dimension of `a` that is not `out`'s row count) |
//! | `Einsum` | 2 · out · K with K = sqrt(a · b / out), exact for one contraction with no batch dimension; with a batch B it is off by sqrt(B) (the equation attribute is not kept) |
//! | elementwise | 1 per output element; transcendental (`Exp`, `Tanh`, `Sigmoid`, ...) 8, `Rsqrt`/`Sqrt`/`Reciprocal` 4, their grads 2-3 |
//! | reductions | 1 per input element (`L2Loss` 2) |
//! | pooling and grads | the largest of the input and output element counts (window = in/out ratio: the window is not kept) |
//! | normalisation, softmax, cross-entropy | 5 per element of input 0 |
//! | concat, slice, transpose, pad, tile, gather, fill, ... | 0 (bytes only) |
//!
//! # Complexity
//! O(N + E + D) for N nodes, E edges, D shape dimensions.

use crate::device::DeviceModel;
use crate::dtype::DType;
use crate::error::{PlanError, Result};
use crate::graph::Graph;
use crate::opkind;

/// Estimated (or measured) cost of every node.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct OpCosts {
    /// Seconds per node.
    pub time_s: Vec<f64>,
    /// Floating-point (or integer) operations per node.
    pub flops: Vec<f64>,
    /// Bytes read and written per node.
    pub bytes: Vec<f64>,
    /// Op types costed by bytes alone (sorted, unique).
    pub unknown_ops: Vec<String>,
}

/// How an op type is costed.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    /// No kernel: 0 s.
    Free,
    /// Launch overhead only.
    Overhead,
    Conv,
    Depthwise,
    ConvBackInput {
        depthwise: bool,
    },
    ConvBackFilter {
        depthwise: bool,
    },
    MatMul,
    Einsum,
    /// FLOPs per output element.
    PerOutput(f64),
    /// FLOPs per element of input 0.
    PerInput(f64),
    Pool,
    Optimizer,
    /// Known data movement: bytes only.
    Move,
    Unknown,
}

/// Whether op type `op` computes at least one output whatever its attributes
/// (a kernel this table costs by its outputs, inputs, FLOPs or bytes moved):
/// a node of such an op that lists no output shape and that nothing reads
/// still allocates its outputs, which no count may miss.
pub(crate) fn makes_an_output(op: &str) -> bool {
    match kind_of(op) {
        Kind::Conv
        | Kind::Depthwise
        | Kind::ConvBackInput { .. }
        | Kind::ConvBackFilter { .. }
        | Kind::MatMul
        | Kind::Einsum
        | Kind::PerOutput(_)
        | Kind::PerInput(_)
        | Kind::Pool => true,
        // The moves but the variable writes (ops on a handle) and the runtime's
        // plumbing (a function's return value), which output nothing, and
        // `Unpack` (as many outputs as its `num`, which may be 0).
        Kind::Move => {
            !(opkind::takes_handle(op) || opkind::RUNTIME_PLUMBING.contains(&op) || op == "Unpack")
        }
        _ => false,
    }
}

fn kind_of(op: &str) -> Kind {
    match op {
        "Conv2D" | "Conv3D" | "_FusedConv2D" | "Conv" => Kind::Conv,
        "DepthwiseConv2dNative" => Kind::Depthwise,
        "Conv2DBackpropInput" | "Conv3DBackpropInput" | "Conv3DBackpropInputV2" => {
            Kind::ConvBackInput { depthwise: false }
        }
        "DepthwiseConv2dNativeBackpropInput" => Kind::ConvBackInput { depthwise: true },
        "Conv2DBackpropFilter" | "Conv3DBackpropFilter" | "Conv3DBackpropFilterV2" => {
            Kind::ConvBackFilter { depthwise: false }
        }
        "DepthwiseConv2dNativeBackpropFilter" => Kind::ConvBackFilter { depthwise: true },
        "MatMul" | "_FusedMatMul" | "BatchMatMul" | "BatchMatMulV2" | "BatchMatMulV3" => {
            Kind::MatMul
        }
        "Einsum" => Kind::Einsum,
        "ReadVariableOp" => Kind::Overhead,
        _ if opkind::aliased_input(op).is_some() => Kind::Overhead,
        _ if op.starts_with("ResourceApply")
            || op.starts_with("ResourceSparseApply")
            || op.starts_with("Apply") =>
        {
            Kind::Optimizer
        }
        _ => per_element(op),
    }
}

fn per_element(op: &str) -> Kind {
    match op {
        "Add" | "AddV2" | "Sub" | "Mul" | "Neg" | "Abs" | "Sign" | "Square" | "Maximum"
        | "Minimum" | "Relu" | "Relu6" | "ReluGrad" | "Relu6Grad" | "LeakyRelu"
        | "LeakyReluGrad" | "BiasAdd" | "BiasAddV1" | "Cast" | "Select" | "SelectV2" | "Less"
        | "LessEqual" | "Greater" | "GreaterEqual" | "Equal" | "NotEqual" | "LogicalAnd"
        | "LogicalOr" | "LogicalNot" | "Floor" | "Ceil" | "Round" | "Rint" | "FloorMod"
        | "FloorDiv" | "Mod" | "ClipByValue" | "SquaredDifference" | "OnesLike" | "ZerosLike" => {
            Kind::PerOutput(1.0)
        }
        "RealDiv" | "Div" | "DivNoNan" | "MulNoNan" | "Xdivy" | "TanhGrad" | "SigmoidGrad" => {
            Kind::PerOutput(2.0)
        }
        "Rsqrt" | "Sqrt" | "Reciprocal" | "Inv" | "RsqrtGrad" | "SqrtGrad" | "ReciprocalGrad"
        | "SoftplusGrad" | "SoftsignGrad" | "EluGrad" | "SeluGrad" => Kind::PerOutput(4.0),
        "Exp" | "Expm1" | "Log" | "Log1p" | "Tanh" | "Sigmoid" | "Erf" | "Erfc" | "Softplus"
        | "Softsign" | "Elu" | "Selu" | "Pow" | "Sin" | "Cos" | "Tan" | "Atan" | "Atan2"
        | "Xlogy" | "Gelu" | "Lgamma" | "Digamma" => Kind::PerOutput(8.0),
        "AddN" | "AccumulateNV2" => Kind::PerOutput(1.0),
        "Sum" | "Mean" | "Max" | "Min" | "Prod" | "All" | "Any" | "ArgMax" | "ArgMin"
        | "BiasAddGrad" | "EuclideanNorm" | "Cumsum" | "Cumprod" => Kind::PerInput(1.0),
        "L2Loss" => Kind::PerInput(2.0),
        "FusedBatchNorm"
        | "FusedBatchNormV2"
        | "FusedBatchNormV3"
        | "FusedBatchNormGrad"
        | "FusedBatchNormGradV2"
        | "FusedBatchNormGradV3"
        | "_FusedBatchNormEx"
        | "LRN"
        | "LRNGrad"
        | "Softmax"
        | "LogSoftmax"
        | "SoftmaxCrossEntropyWithLogits"
        | "SparseSoftmaxCrossEntropyWithLogits" => Kind::PerInput(5.0),
        "MaxPool"
        | "MaxPoolV2"
        | "AvgPool"
        | "MaxPool3D"
        | "AvgPool3D"
        | "MaxPoolGrad"
        | "MaxPoolGradV2"
        | "AvgPoolGrad"
        | "MaxPool3DGrad"
        | "AvgPool3DGrad"
        | "MaxPoolGradGrad"
        | "MaxPoolWithArgmax"
        | "MaxPoolGradWithArgmax" => Kind::Pool,
        _ => moves(op),
    }
}

fn moves(op: &str) -> Kind {
    match op {
        "ConcatV2"
        | "Concat"
        | "Slice"
        | "StridedSlice"
        | "StridedSliceGrad"
        | "Transpose"
        | "ConjugateTranspose"
        | "Pad"
        | "PadV2"
        | "MirrorPad"
        | "MirrorPadGrad"
        | "Tile"
        | "Pack"
        | "Unpack"
        | "Split"
        | "SplitV"
        | "GatherV2"
        | "Gather"
        | "GatherNd"
        | "ScatterNd"
        | "TensorScatterUpdate"
        | "Fill"
        | "BroadcastTo"
        | "ReverseV2"
        | "DeepCopy"
        | "Copy"
        | "Shape"
        | "ShapeN"
        | "Size"
        | "Rank"
        | "BroadcastGradientArgs"
        | "Range"
        | "OneHot"
        | "AssignVariableOp"
        | "AssignAddVariableOp"
        | "AssignSubVariableOp"
        | "ConcatOffset"
        | "InvertPermutation"
        | "DynamicStitch"
        | "UnsortedSegmentSum"
        | "ResizeBilinear"
        | "ResizeNearestNeighbor"
        | "_Retval" => Kind::Move,
        "NoOp"
        | "Const"
        | "HostConst"
        | "Placeholder"
        | "PlaceholderWithDefault"
        | "VarHandleOp"
        | "VariableV2"
        | "_Arg" => Kind::Free,
        _ => Kind::Unknown,
    }
}

/// Estimates the cost of every node of `g` on `dev` (see the module docs).
///
/// # Complexity
/// O(N + E + D).
///
/// # Example
/// ```
/// use hybridplan_core::build::{build, BuildOptions, NodeSpec, OutSpec, Shape};
/// use hybridplan_core::{cost::op_costs, device::preset, dtype::DType};
/// let out = |d: Vec<i64>| vec![OutSpec { dtype: Some(DType::FLOAT), shape: Shape(Some(d)) }];
/// let n = |name, op, inputs| NodeSpec { name, op, device: "", inputs, outputs: out(vec![64, 64]), calls_function: false };
/// let g = build(&[n("a", "Placeholder", vec![]), n("m", "MatMul", vec!["a", "a"])], &BuildOptions::default()).unwrap();
/// let c = op_costs(&g, &preset("cpu").unwrap());
/// assert_eq!(c.flops[1], 2.0 * 64.0 * 64.0 * 64.0);
/// assert_eq!(c.time_s[0], 0.0);
/// ```
pub fn op_costs(g: &Graph, dev: &DeviceModel) -> OpCosts {
    let n = g.num_nodes();
    let mut c = OpCosts {
        time_s: Vec::with_capacity(n),
        flops: Vec::with_capacity(n),
        bytes: Vec::with_capacity(n),
        unknown_ops: Vec::new(),
    };
    let kinds: Vec<Kind> = g.ops.iter().map(|op| kind_of(op)).collect();
    let mut unknown = vec![false; g.ops.len()];
    for v in 0..n as u32 {
        let op = g.nodes[v as usize].op as usize;
        let kind = node_kind(g, v, &kinds);
        if kind == Kind::Unknown {
            unknown[op] = true;
        }
        let (time, flops, bytes) = node_cost(g, v, kind, dev);
        c.time_s.push(time);
        c.flops.push(flops);
        c.bytes.push(bytes);
    }
    c.unknown_ops = (0..g.ops.len())
        .filter(|&i| unknown[i])
        .map(|i| g.ops[i].to_string())
        .collect();
    c.unknown_ops.sort_unstable();
    c
}

/// The FLOPs of every node (the `flops` of [`op_costs`], which do not
/// depend on the device): what a caller splitting a measured time over
/// nodes weighs them by.
///
/// # Complexity
/// O(N + E + D).
pub(crate) fn flops(g: &Graph) -> Vec<f64> {
    let kinds: Vec<Kind> = g.ops.iter().map(|op| kind_of(op)).collect();
    (0..g.num_nodes() as u32)
        .map(|v| match node_kind(g, v, &kinds) {
            Kind::Free | Kind::Overhead => 0.0,
            Kind::Optimizer => 5.0 * largest_input(g, v).0,
            kind => flops_of(g, v, kind),
        })
        .collect()
}

/// The kind of node `v` from the kinds of its op type: a node with no data
/// inputs runs no kernel (but an optimizer update).
fn node_kind(g: &Graph, v: u32, kinds: &[Kind]) -> Kind {
    let kind = kinds[g.nodes[v as usize].op as usize];
    if g.inputs(v).is_empty() && kind != Kind::Optimizer {
        Kind::Free
    } else {
        kind
    }
}

/// (seconds, FLOPs, bytes) of one node.
fn node_cost(g: &Graph, v: u32, kind: Kind, dev: &DeviceModel) -> (f64, f64, f64) {
    match kind {
        Kind::Free => (0.0, 0.0, 0.0),
        Kind::Overhead => (dev.launch_overhead_s, 0.0, 0.0),
        Kind::Optimizer => {
            let (elems, bytes) = largest_input(g, v);
            roofline(dev, dtype_of(g, v), 5.0 * elems, 4.0 * bytes)
        }
        _ => {
            let flops = flops_of(g, v, kind);
            roofline(dev, dtype_of(g, v), flops, moved_bytes(g, v))
        }
    }
}

fn roofline(dev: &DeviceModel, dtype: DType, flops: f64, bytes: f64) -> (f64, f64, f64) {
    let t = (flops / dev.flops_per_s(dtype)).max(bytes / dev.mem_bandwidth);
    (dev.launch_overhead_s + t, flops, bytes)
}

/// Sum of the value bytes of the data inputs and outputs.
fn moved_bytes(g: &Graph, v: u32) -> f64 {
    let ins: u64 = g
        .inputs(v)
        .iter()
        .map(|&t| g.tensors[t as usize].value_bytes)
        .sum();
    let outs: u64 = g
        .outputs(v)
        .map(|t| g.tensors[t as usize].value_bytes)
        .sum();
    ins as f64 + outs as f64
}

/// (elements, value bytes) of the data input with the most bytes.
fn largest_input(g: &Graph, v: u32) -> (f64, f64) {
    g.inputs(v)
        .iter()
        .map(|&t| {
            (
                g.elements(t) as f64,
                g.tensors[t as usize].value_bytes as f64,
            )
        })
        .fold((0.0, 0.0), |a, b| if b.1 > a.1 { b } else { a })
}

/// The dtype an op computes in: its first non-handle output, else input.
fn dtype_of(g: &Graph, v: u32) -> DType {
    let outs = g.outputs(v).map(|t| g.tensors[t as usize].dtype);
    let ins = g.inputs(v).iter().map(|&t| g.tensors[t as usize].dtype);
    outs.chain(ins)
        .find(|d| !d.is_handle())
        .unwrap_or(DType::FLOAT)
}

fn elems(g: &Graph, t: Option<u32>) -> f64 {
    t.map_or(0.0, |t| g.elements(t) as f64)
}

fn input(g: &Graph, v: u32, k: usize) -> Option<u32> {
    g.inputs(v).get(k).copied()
}

fn output(g: &Graph, v: u32) -> Option<u32> {
    let r = g.outputs(v);
    (!r.is_empty()).then_some(r.start)
}

/// FLOPs of one node by its kind (see the module table).
fn flops_of(g: &Graph, v: u32, kind: Kind) -> f64 {
    let out = output(g, v);
    match kind {
        Kind::Conv => conv_flops(g, elems(g, out), input(g, v, 1), false),
        Kind::Depthwise => conv_flops(g, elems(g, out), input(g, v, 1), true),
        Kind::ConvBackInput { depthwise } => {
            conv_flops(g, elems(g, input(g, v, 2)), input(g, v, 1), depthwise)
        }
        Kind::ConvBackFilter { depthwise } => {
            conv_flops(g, elems(g, input(g, v, 2)), out, depthwise)
        }
        Kind::MatMul => matmul_flops(g, input(g, v, 0), out),
        Kind::Einsum => einsum_flops(g, v, out),
        Kind::PerOutput(f) => f * elems(g, out),
        Kind::PerInput(f) => f * elems(g, input(g, v, 0)),
        Kind::Pool => {
            let ins = g.inputs(v).iter().map(|&t| g.elements(t));
            ins.chain(g.outputs(v).map(|t| g.elements(t)))
                .max()
                .unwrap_or(0) as f64
        }
        Kind::Free | Kind::Overhead | Kind::Optimizer | Kind::Move | Kind::Unknown => 0.0,
    }
}

/// 2 · dy · filter / out_channels (regular) or 2 · dy · kernel_spatial
/// (depthwise: the filter's last two dims are in_channels and multiplier).
fn conv_flops(g: &Graph, dy: f64, filter: Option<u32>, depthwise: bool) -> f64 {
    let Some(f) = filter else { return 2.0 * dy };
    let shape = g.shape(f);
    let tail = if depthwise { 2 } else { 1 };
    if shape.len() <= tail {
        return 2.0 * dy;
    }
    let per: i64 = shape[..shape.len() - tail].iter().product();
    2.0 * dy * per as f64
}

/// 2 · out · K with K the dimension of `a` that is not the output's row
/// count (handles `transpose_a` / `adj_x` without attributes).
fn matmul_flops(g: &Graph, a: Option<u32>, out: Option<u32>) -> f64 {
    let (Some(a), Some(o)) = (a, out) else {
        return 0.0;
    };
    let (sa, so) = (g.shape(a), g.shape(o));
    let out_e = g.elements(o) as f64;
    if sa.len() < 2 || so.len() < 2 {
        let n = so.last().copied().unwrap_or(1).max(1) as f64;
        return 2.0 * g.elements(a) as f64 * n;
    }
    let m = so[so.len() - 2];
    let (r, c) = (sa[sa.len() - 2], sa[sa.len() - 1]);
    let k = if r == m { c } else { r };
    2.0 * out_e * k as f64
}

/// 2 · out · sqrt(a · b / out) for two operands; one operand: its elements.
fn einsum_flops(g: &Graph, v: u32, out: Option<u32>) -> f64 {
    let ins = g.inputs(v);
    let out_e = elems(g, out).max(1.0);
    match ins {
        [a] => g.elements(*a) as f64,
        [a, b] => {
            let ab = g.elements(*a) as f64 * g.elements(*b) as f64;
            2.0 * out_e * (ab / out_e).sqrt().max(1.0)
        }
        _ => ins.iter().map(|&t| g.elements(t) as f64).sum(),
    }
}

/// Replaces estimated times by measured ones: `times` holds
/// `(node id, seconds)`; nodes not listed keep their estimate.
///
/// # Errors
/// [`PlanError::InvalidArgument`] for a node id out of range, a time that
/// is negative or not finite, or times whose sum over the step is above
/// [`MAX_STEP_S`] (the simulations add them up, with copies and clones).
///
/// # Complexity
/// O(N + len(times)).
pub(crate) fn with_profile(costs: &OpCosts, times: &[(u32, f64)]) -> Result<OpCosts> {
    let mut c = costs.clone();
    for &(v, t) in times {
        let Some(slot) = c.time_s.get_mut(v as usize) else {
            return Err(PlanError::InvalidArgument(format!(
                "profile names node {v}, but the graph has {} nodes",
                costs.time_s.len()
            )));
        };
        if !(t.is_finite() && t >= 0.0) {
            return Err(PlanError::InvalidArgument(format!(
                "profile time of node {v} is {t}: times must be finite seconds >= 0"
            )));
        }
        *slot = t;
    }
    let total: f64 = c.time_s.iter().sum();
    if total > MAX_STEP_S {
        return Err(PlanError::InvalidArgument(format!(
            "the op times of the profile sum to {total:e} s, above {MAX_STEP_S:e} s: give each node's time in seconds"
        )));
    }
    Ok(c)
}

/// The most seconds a step's op times may sum to: the simulations add op,
/// copy and clone times, and every sum of them stays finite with this much
/// room (a step of 10^300 s is no measurement).
pub(crate) const MAX_STEP_S: f64 = 1e300;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::build::{build, BuildOptions, NodeSpec, OutSpec, Shape};
    use crate::device::preset;

    fn spec<'a>(name: &'a str, op: &'a str, ins: Vec<&'a str>, shape: Vec<i64>) -> NodeSpec<'a> {
        NodeSpec {
            name,
            op,
            device: "",
            inputs: ins,
            outputs: vec![OutSpec {
                dtype: Some(DType::FLOAT),
                shape: Shape(Some(shape)),
            }],
            calls_function: false,
        }
    }

    fn costs(specs: &[NodeSpec<'_>]) -> (Graph, OpCosts) {
        let g = build(specs, &BuildOptions::default()).unwrap();
        let c = op_costs(&g, &preset("v100-nvlink2").unwrap());
        (g, c)
    }

    #[test]
    fn conv_and_backprops_count_the_forward_flops() {
        let (_, c) = costs(&[
            spec("x", "Placeholder", vec![], vec![8, 32, 32, 16]),
            spec("w", "Placeholder", vec![], vec![3, 3, 16, 64]),
            spec("s", "Placeholder", vec![], vec![4]),
            spec("y", "Conv2D", vec!["x", "w"], vec![8, 32, 32, 64]),
            spec(
                "dx",
                "Conv2DBackpropInput",
                vec!["s", "w", "y"],
                vec![8, 32, 32, 16],
            ),
            spec(
                "dw",
                "Conv2DBackpropFilter",
                vec!["x", "s", "y"],
                vec![3, 3, 16, 64],
            ),
            spec(
                "dwc",
                "DepthwiseConv2dNative",
                vec!["x", "w"],
                vec![8, 32, 32, 1024],
            ),
        ]);
        let fwd = 2.0 * (8 * 32 * 32 * 64) as f64 * 9.0 * 16.0;
        assert_eq!(c.flops[3], fwd);
        assert_eq!(c.flops[4], fwd);
        assert_eq!(c.flops[5], fwd);
        assert_eq!(c.flops[6], 2.0 * (8 * 32 * 32 * 1024) as f64 * 9.0);
        assert!(c.unknown_ops.is_empty());
    }

    #[test]
    fn matmul_k_from_shapes_and_einsum_estimate() {
        let (_, c) = costs(&[
            spec("a", "Placeholder", vec![], vec![128, 256]),
            spec("at", "Placeholder", vec![], vec![256, 128]),
            spec("b", "Placeholder", vec![], vec![256, 512]),
            spec("m", "MatMul", vec!["a", "b"], vec![128, 512]),
            spec("mt", "MatMul", vec!["at", "b"], vec![128, 512]),
            spec("e", "Einsum", vec!["a", "b"], vec![128, 512]),
            spec("bm", "BatchMatMulV2", vec!["a", "b"], vec![128, 512]),
        ]);
        let want = 2.0 * 128.0 * 512.0 * 256.0;
        assert_eq!(c.flops[3], want);
        assert_eq!(c.flops[4], want);
        assert_eq!(c.flops[5], want);
        assert_eq!(c.flops[6], want);
    }

    #[test]
    fn roofline_overheads_free_ops_and_unknown_ops() {
        let (_, c) = costs(&[
            spec("x", "Placeholder", vec![], vec![1024, 1024]),
            spec("r", "Relu", vec!["x"], vec![1024, 1024]),
            spec("i", "Identity", vec!["r"], vec![1024, 1024]),
            spec("t", "Tanh", vec!["i"], vec![1024, 1024]),
            spec("q", "Frobnicate", vec!["t"], vec![1024, 1024]),
            spec("s", "Sum", vec!["q"], vec![]),
        ]);
        let d = preset("v100-nvlink2").unwrap();
        let mb = 4.0 * 1024.0 * 1024.0;
        assert_eq!(c.time_s[0], 0.0);
        assert_eq!(c.bytes[1], 2.0 * mb);
        assert_eq!(
            c.time_s[1],
            d.launch_overhead_s + 2.0 * mb / d.mem_bandwidth
        );
        assert_eq!(c.time_s[2], d.launch_overhead_s);
        assert_eq!(c.flops[3], 8.0 * 1024.0 * 1024.0);
        assert_eq!(c.flops[4], 0.0);
        assert_eq!(c.flops[5], 1024.0 * 1024.0);
        assert_eq!(c.unknown_ops, vec!["Frobnicate".to_string()]);
    }

    #[test]
    fn profile_replaces_estimates() {
        let (_, c) = costs(&[
            spec("x", "Placeholder", vec![], vec![4]),
            spec("r", "Relu", vec!["x"], vec![4]),
        ]);
        let p = with_profile(&c, &[(1, 0.5)]).unwrap();
        assert_eq!(p.time_s, vec![0.0, 0.5]);
        assert!(with_profile(&c, &[(2, 0.5)]).is_err());
        assert!(with_profile(&c, &[(1, f64::NAN)]).is_err());
        assert!(with_profile(&c, &[(1, -1.0)]).is_err());
        // Each time finite, their sum not: refused, as is a sum above the bound.
        assert!(with_profile(&c, &[(0, 1e308), (1, 1e308)]).is_err());
        assert!(with_profile(&c, &[(1, 2e300)]).is_err());
        assert!(with_profile(&c, &[(1, 1e299)]).is_ok());
    }
}
