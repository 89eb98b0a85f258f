//! What the planner knows about op types: which are control flow, which must
//! never be cloned, which share or take over their input's buffer, which are
//! collectives, which take kernel scratch and from which operands, which are
//! checkpoint ops that head a recompute unit.
//!
//! This is the one table of op facts: the rest of the core and the Python
//! package (through the per-node facts of `analyze`, `crate::facts`) ask it.
//!
//! These are facts about TensorFlow op semantics (the op registry), not about
//! any model: no decision anywhere depends on node names.

/// Control-flow and function-call ops (TF2 functional and TF1 dataflow forms).
pub(crate) fn is_control_flow(op: &str) -> bool {
    matches!(
        op,
        "While"
            | "StatelessWhile"
            | "If"
            | "StatelessIf"
            | "Case"
            | "StatelessCase"
            | "PartitionedCall"
            | "StatefulPartitionedCall"
            | "Enter"
            | "Exit"
            | "Switch"
            | "Merge"
            | "NextIteration"
            | "LoopCond"
            | "RefEnter"
            | "RefSwitch"
            | "RefMerge"
            | "_If"
            | "_While"
            | "SymbolicGradient"
            | "RemoteCall"
    )
}

/// Ops that call one function of the GraphDef's library with their inputs and return
/// its outputs. hybridplan's Python layer inlines them before planning
/// (`python/hybridplan/inlining.py`, which reads this list), as TensorFlow does
/// before it runs a step; one left in the graph was not inlinable there.
pub const FUNCTION_CALLS: [&str; 2] = ["PartitionedCall", "StatefulPartitionedCall"];

/// Is `op` one of [`FUNCTION_CALLS`]?
pub(crate) fn is_function_call(op: &str) -> bool {
    FUNCTION_CALLS.contains(&op)
}

/// Collective communication ops (all-reduce, all-gather, broadcast across
/// replicas): never recomputed, and the distributed rewrite swaps none of
/// their outputs.
pub(crate) fn is_collective(op: &str) -> bool {
    op.starts_with("Collective") || op.starts_with("Nccl")
}

/// Control-flow ops the planner takes as one op of the schedule once their
/// body's memory is stated ([`crate::body`]): the functional conditional,
/// whose branch TensorFlow runs in place of the node (lowered to
/// `Switch`/`Merge` with the branches inlined, `LowerFunctionalOpsPass`; the
/// node's outputs keep their names through an `IdentityN`), and the
/// functional loop (lowered to `Enter`/`Merge`/`Switch`/`NextIteration`/`Exit`
/// frames, `lower_while_op.cc`; the outputs keep their names the same way),
/// whose accumulators are stated as the `TensorList`s it returns.
pub(crate) fn runs_as_one_op(op: &str) -> bool {
    CONDITIONALS.contains(&op) || ONE_OP_LOOPS.contains(&op)
}

/// The functional conditionals of [`runs_as_one_op`] (`tf.cond` in a
/// `tf.function`): the branches are the `then_branch`/`else_branch` functions.
pub const CONDITIONALS: [&str; 2] = ["If", "StatelessIf"];

/// The functional loops of [`runs_as_one_op`] (`tf.while_loop`, a Keras RNN):
/// the body and condition are the `body`/`cond` functions.
pub const ONE_OP_LOOPS: [&str; 2] = ["While", "StatelessWhile"];

/// `TensorList` ops that add one element to the list they take as input 0,
/// with the input that is the element: the list keeps the element's buffer
/// (no copy, `list_kernels.h`).
pub const LIST_ADDS_ELEMENT: [(&str, usize); 2] =
    [("TensorListPushBack", 1), ("TensorListSetItem", 2)];

/// `TensorList` ops that take one element off the list they take as input 0
/// (the element is returned, the list holds one buffer less).
pub const LIST_TAKES_ELEMENT: [&str; 1] = ["TensorListPopBack"];

/// `TensorList` ops that make a list holding no element's buffer (a reserved
/// list's elements are uninitialized until set).
pub const LIST_NEW: [&str; 2] = ["TensorListReserve", "EmptyTensorList"];

/// Ops that add `TensorList`s element by element: an element one list leaves
/// uninitialized is the other list's buffer, not a copy (`BinaryAddTensors`,
/// `variant_op_util.h`). A gradient loop sums the list of gradients it
/// carries with a new list holding one new element (the gradient of a
/// sequence the forward loop read one element at a time): the sum holds the
/// carried list's elements and the new one.
pub const LIST_SUMS: [&str; 1] = ["AddN"];

/// The op a `while_v2` forward loop fills an accumulator with, one element
/// per iteration (element: input 1), and the op its gradient loop empties it
/// with: the structure of a list that can be kept on the host
/// ([`crate::hosting`], found in the bodies by `hybridplan.accumulators`).
pub const ACCUMULATOR_PUSH: [&str; 1] = ["TensorListPushBack"];
/// See [`ACCUMULATOR_PUSH`].
pub const ACCUMULATOR_POP: [&str; 1] = ["TensorListPopBack"];

/// `TensorList` ops whose list holds their input 0's buffer, sliced along
/// dimension 0 (no copy, `list_kernels.h`): the list holds the input's bytes.
pub const LIST_HOLDS_INPUT: [&str; 1] = ["TensorListFromTensor"];

/// The op that wraps its inputs in an optional (`variant`): the optional holds
/// its components (`cond_v2` wraps the intermediates a gradient `If` reads).
pub const OPTIONAL_FROM_VALUE: [&str; 1] = ["OptionalFromValue"];

/// Ops whose output 0 is their input 0 unchanged, value and shape (a subset of
/// [`aliased_input`]: no reshape).
pub const IDENTITIES: [&str; 1] = ["Identity"];

/// The op of a function's argument in the GraphDef TensorFlow makes of a
/// function body (`function_def_to_graph_def`), and of a step's fed input.
pub const ARGUMENTS: [&str; 1] = ["Placeholder"];

/// Ops whose value is fed at run time (an argument, or a default that a feed
/// replaces): no constant subgraph reads one.
pub const FEEDS: [&str; 2] = ["Placeholder", "PlaceholderWithDefault"];

/// Element-wise `x < y` (a loop condition's bound).
pub const LESS: [&str; 1] = ["Less"];

/// Element-wise logical and (a loop condition joining bounds).
pub const LOGICAL_AND: [&str; 1] = ["LogicalAnd"];

/// Element-wise `x + y` (a loop counter's step).
pub const ADDITIONS: [&str; 2] = ["Add", "AddV2"];

/// The constants of [`is_constant`].
pub const CONSTANTS: [&str; 2] = ["Const", "HostConst"];

/// The variable reads of [`is_variable_read`].
pub const VARIABLE_READS: [&str; 1] = ["ReadVariableOp"];

/// All-reduces: collectives whose output is their first input reduced over
/// the group, of its shape and dtype (`is_collective`; each writes into its
/// input when it can, `forward_input_or_allocate_output`). The distributed
/// measurement runs one in place of each on one device
/// (`hybridplan.distributed.one_executor`).
pub const ALL_REDUCES: [&str; 4] = [
    "CollectiveReduce",
    "CollectiveReduceV2",
    "CollectiveReduceV3",
    "NcclAllReduce",
];

/// Ops TensorFlow's partitioner adds for a device crossing (a swap to the host
/// adds a pair): not the step's kernels.
pub const TRANSFERS: [&str; 4] = ["_Send", "_Recv", "_HostSend", "_HostRecv"];

/// The runtime's plumbing, not the step's kernels: function arguments and
/// results, and `_EagerConst` (converts a fed NumPy array once per process in
/// a function graph of its own).
pub const RUNTIME_PLUMBING: [&str; 5] = [
    "_Arg",
    "_Retval",
    "_DeviceArg",
    "_DeviceRetval",
    "_EagerConst",
];

/// Executed op types that replace one node of the graph without absorbing
/// others: a constant-folded node runs as `Const`/`HostConst` (its folded
/// inputs do not run), Grappler's arithmetic optimizer turns a division by a
/// constant into a `Mul`; identities, snapshots and no-ops absorb nothing.
pub const REPLACES_ONE_NODE: [&str; 6] =
    ["Const", "HostConst", "Mul", "Identity", "Snapshot", "NoOp"];

/// The output of a `TensorList` op that is the list (a `variant` whose
/// attributes name only its elements' dtype): the list these ops make or
/// return. Its bytes are those it holds, stated by the caller for the lists
/// a loop fills ([`crate::body`]); 0 otherwise.
pub(crate) fn list_output(op: &str) -> Option<usize> {
    match op {
        "TensorListFromTensor"
        | "TensorListReserve"
        | "EmptyTensorList"
        | "TensorListPushBack"
        | "TensorListPopBack"
        | "TensorListSetItem"
        | "TensorListResize"
        | "TensorListScatterV2"
        | "TensorListScatterIntoExistingList"
        | "TensorListSplit" => Some(0),
        _ => None,
    }
}

/// Functional loops: planned as one op once their memory is stated (trip
/// count and accumulators, [`crate::body`]); refused with their own advice
/// when it could not be.
pub(crate) fn is_loop(op: &str) -> bool {
    matches!(op, "While" | "StatelessWhile" | "_While")
}

/// Ops that must never be recomputed: random (stateful RNG), side effects,
/// collectives, I/O, and sources. Ops that take a resource handle (variable
/// reads and writes, iterators) are excluded separately by the builder.
/// Stateless random ops (`StatelessRandom*`) are deterministic given their
/// seed input and may be recomputed.
pub(crate) fn never_recompute(op: &str) -> bool {
    if op.starts_with("Stateless") {
        return false;
    }
    op.contains("Random")
        || is_collective(op)
        || op.starts_with("_Send")
        || op.starts_with("_Recv")
        || op.starts_with("_HostSend")
        || op.starts_with("_HostRecv")
        || op.starts_with("Print")
        || op.starts_with("Iterator")
        || op.starts_with("Save")
        || op.starts_with("Restore")
        || matches!(
            op,
            "TruncatedNormal"
                | "Multinomial"
                | "ParameterizedTruncatedNormal"
                | "Assert"
                | "Placeholder"
                | "PlaceholderWithDefault"
                | "_Arg"
                | "_Retval"
                | "Const"
                | "HostConst"
                | "VarHandleOp"
                | "VariableV2"
                | "Variable"
                | "NoOp"
                | "DeepCopy"
                | "Empty"
                | "TemporaryVariable"
                | "DestroyTemporaryVariable"
                | "Timestamp"
                | "MutableHashTable"
                | "HashTable"
                | "HashTableV2"
                | "MutableHashTableV2"
                | "DebugIdentity"
                | "DebugIdentityV2"
                | "DebugIdentityV3"
                | "Unique"
                | "XlaLaunch"
                | "_XlaRun"
        )
}

/// True if the op's input 0 is a resource handle by the op's definition: the
/// resource-variable ops (reads, assignments, `ResourceApply*` updates,
/// `ResourceGather`/`ResourceScatter*`, `VariableShape`...). A graph in which
/// such an input is not `DT_RESOURCE` was edited by hand or corrupted; the
/// builder refuses it (planning it as data would clone reads and miss writes).
pub fn takes_handle(op: &str) -> bool {
    op.starts_with("Resource")
        || matches!(
            op,
            "ReadVariableOp"
                | "AssignVariableOp"
                | "AssignAddVariableOp"
                | "AssignSubVariableOp"
                | "VarIsInitializedOp"
                | "VariableShape"
                | "DestroyResourceOp"
        )
}

/// The op that reads a resource variable's value (its output aliases the
/// variable's buffer when its input is a handle, [`reads_variable`]).
pub(crate) fn is_variable_read(op: &str) -> bool {
    VARIABLE_READS.contains(&op)
}

/// Constants: their buffer is held by the kernel for the whole step.
pub(crate) fn is_constant(op: &str) -> bool {
    CONSTANTS.contains(&op)
}

/// True if the op's output aliases a variable's buffer (a read of a handle).
pub(crate) fn reads_variable(op: &str, takes_handle: bool) -> bool {
    takes_handle && is_variable_read(op)
}

/// For ops whose output shares an input's buffer: the input slot it
/// aliases (`usize::MAX`: output i aliases input i). TensorFlow forwards the
/// buffer for these ops instead of copying.
pub(crate) fn aliased_input(op: &str) -> Option<usize> {
    match op {
        "Identity" | "StopGradient" | "PreventGradient" | "Snapshot" | "Reshape" | "Squeeze"
        | "ExpandDims" | "EnsureShape" | "CheckNumerics" | "CheckNumericsV2" | "Bitcast" => Some(0),
        _ if passes_each_input_through(op.as_bytes()) => Some(usize::MAX),
        _ => None,
    }
}

/// Which inputs an op type may forward, and into which output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Forward {
    /// Output 0 from input 0.
    First,
    /// Output 0 from input 0, else input 1.
    Either,
    /// Output 0 from any input, in order (`AddN`).
    Any,
    /// Output 0 from input 1, else input 2 (`Select`: the branches).
    Branches,
    /// Output 1 from input 0 (`SparseSoftmaxCrossEntropyWithLogits`: the
    /// backprop written into the logits).
    BackpropIntoLogits,
}

impl Forward {
    /// The output written in place.
    pub fn output(self) -> u32 {
        match self {
            Forward::BackpropIntoLogits => 1,
            _ => 0,
        }
    }

    /// Input slots tried, in order, for an op of `n_inputs` inputs.
    pub fn slots(self, n_inputs: usize) -> std::ops::Range<usize> {
        let r = match self {
            Forward::First | Forward::BackpropIntoLogits => 0..1,
            Forward::Either => 0..2,
            Forward::Any => 0..n_inputs,
            Forward::Branches => 1..3,
        };
        r.start.min(n_inputs)..r.end.min(n_inputs)
    }

    pub(crate) fn code(self) -> u8 {
        self as u8 + 1
    }

    pub(crate) fn from_code(c: u8) -> Option<Forward> {
        [
            Forward::First,
            Forward::Either,
            Forward::Any,
            Forward::Branches,
            Forward::BackpropIntoLogits,
        ]
        .get(usize::from(c).wrapping_sub(1))
        .copied()
    }
}

/// How an op type forwards its output into an input's buffer (`crate::inplace`
/// decides when it may), or `None` if it always allocates. The kernels
/// named here call `forward_input_or_allocate_output` (or, for `AddN`,
/// `forward_input_to_output_with_shape`) in TensorFlow: unary and binary
/// element-wise ops, activations and their gradients, `BiasAdd`, softmax.
pub fn forwards(op: &str) -> Option<Forward> {
    Some(match op {
        "Neg" | "Abs" | "Sign" | "Square" | "Relu" | "Relu6" | "LeakyRelu" | "Elu" | "Selu"
        | "Floor" | "Ceil" | "Round" | "Rint" | "Rsqrt" | "Sqrt" | "Reciprocal" | "Inv" | "Exp"
        | "Expm1" | "Log" | "Log1p" | "Tanh" | "Sigmoid" | "Erf" | "Erfc" | "Softplus"
        | "Softsign" | "Sin" | "Cos" | "Tan" | "Atan" | "Lgamma" | "Digamma" | "LogicalNot"
        | "ClipByValue" | "BiasAdd" | "BiasAddV1" | "Softmax" | "LogSoftmax" => Forward::First,
        "Add" | "AddV2" | "Sub" | "Mul" | "Maximum" | "Minimum" | "RealDiv" | "Div"
        | "DivNoNan" | "MulNoNan" | "Xdivy" | "Xlogy" | "Pow" | "Atan2" | "FloorMod"
        | "FloorDiv" | "Mod" | "SquaredDifference" | "LogicalAnd" | "LogicalOr" | "ReluGrad"
        | "Relu6Grad" | "LeakyReluGrad" | "EluGrad" | "SeluGrad" | "SoftplusGrad"
        | "SoftsignGrad" | "TanhGrad" | "SigmoidGrad" | "RsqrtGrad" | "SqrtGrad"
        | "ReciprocalGrad" => Forward::Either,
        "AddN" | "AccumulateNV2" => Forward::Any,
        "Select" | "SelectV2" => Forward::Branches,
        "SparseSoftmaxCrossEntropyWithLogits" => Forward::BackpropIntoLogits,
        _ => return None,
    })
}

/// Ops whose output i is their data input i passed through, typed by entry
/// i of the type-list attribute `T`: one output per data input
/// (`IdentityN`). TensorFlow refuses such a `NodeDef` unless `T` lists one
/// type per data input, and the rewrite counts its outputs from `T`, so the
/// build refuses it too (a plan that named an output `T` lacks would not
/// apply).
pub(crate) fn passes_each_input_through(op: &[u8]) -> bool {
    op == b"IdentityN"
}

/// Does `reader` pair with its input's `producer` through a hidden workspace?
/// oneDNN's max-pooling and LRN forward kernels leave a workspace that the
/// gradient kernel picks up when its input comes straight from the forward
/// op. Fed a copy instead, the gradient recomputes the argmax itself and
/// breaks ties differently (measured: a swapped `MaxPool3D` output changed
/// a U-Net's weights after one step). Such a reader must read the original,
/// so the tensor is never swapped for it (a recompute clone is the same op
/// and pairs as the original did).
pub(crate) fn pairs_with_producer(reader: &str, producer: &str) -> bool {
    let pool = matches!(producer, "MaxPool" | "MaxPoolV2" | "MaxPool3D")
        && matches!(
            reader,
            "MaxPoolGrad" | "MaxPoolGradV2" | "MaxPool3DGrad" | "MaxPoolGradGrad"
        );
    pool || (producer == "LRN" && reader == "LRNGrad")
}

/// Convolutions and their gradients: the ops a GPU runs with cuDNN, which
/// takes a workspace of its own (see `workspace.rs`).
pub(crate) fn is_convolution(op: &str) -> bool {
    matches!(
        op,
        "Conv2D"
            | "Conv2DBackpropInput"
            | "Conv2DBackpropInputV2"
            | "Conv2DBackpropFilter"
            | "Conv2DBackpropFilterV2"
            | "Conv3D"
            | "Conv3DBackpropInputV2"
            | "Conv3DBackpropFilterV2"
            | "_FusedConv2D"
            | "DepthwiseConv2dNative"
            | "DepthwiseConv2dNativeBackpropInput"
            | "DepthwiseConv2dNativeBackpropFilter"
            | "Conv"
    )
}

/// TensorFlow's own CPU convolution gradients that take an im2col scratch
/// buffer (`crate::workspace` sizes it). Their inputs are (input or
/// `input_sizes`, filter or `filter_sizes`, `out_backprop`); see
/// [`Im2col::filter`] and [`Im2col::out_backprop`] for the operands the
/// size is computed from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Im2col {
    /// `Conv2DCustomBackpropFilterOp` (conv_grad_filter_ops.cc).
    Conv2DFilter,
    /// `Conv2DCustomBackpropInputOp` (conv_grad_input_ops.h).
    Conv2DInput,
    /// `Conv3DCustomBackpropInputOp` (conv_grad_ops_3d.cc).
    Conv3DInput,
}

/// Where a shape comes from: an input slot or output 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Operand {
    Input(usize),
    Output0,
}

impl Im2col {
    /// The operand holding the filter's shape: output 0 of a filter
    /// gradient (the inputs give only `filter_sizes`), else input 1.
    pub(crate) fn filter(self) -> Operand {
        match self {
            Im2col::Conv2DFilter => Operand::Output0,
            Im2col::Conv2DInput | Im2col::Conv3DInput => Operand::Input(1),
        }
    }

    /// The input slot of `out_backprop`.
    pub(crate) fn out_backprop(self) -> usize {
        2
    }

    /// The rank of the shapes (4: NHWC, 5: NDHWC).
    pub(crate) fn rank(self) -> usize {
        match self {
            Im2col::Conv3DInput => 5,
            _ => 4,
        }
    }
}

/// The im2col scratch an op type takes with TensorFlow's own CPU kernels.
pub(crate) fn im2col(op: &str) -> Option<Im2col> {
    Some(match op {
        "Conv2DBackpropFilter" | "Conv2DBackpropFilterV2" => Im2col::Conv2DFilter,
        "Conv2DBackpropInput" | "Conv2DBackpropInputV2" => Im2col::Conv2DInput,
        "Conv3DBackpropInputV2" | "Conv3DBackpropInput" => Im2col::Conv3DInput,
        _ => return None,
    })
}

/// Ops that are in none of Grappler's remapper patterns nor oneDNN's
/// fusions (contraction + bias + activation, batch norm + activation,
/// swish, GELU, layer norm, pad + convolution, transpose + convolution,
/// backprop filter + bias gradient...), so a control edge on them blocks
/// nothing.
pub(crate) fn never_fused(op: &str) -> bool {
    matches!(
        op,
        "MaxPool"
            | "MaxPoolV2"
            | "MaxPool3D"
            | "AvgPool"
            | "AvgPool3D"
            | "MaxPoolGrad"
            | "MaxPoolGradV2"
            | "MaxPool3DGrad"
            | "AvgPoolGrad"
            | "AvgPool3DGrad"
            | "ConcatV2"
            | "Pack"
            | "Unpack"
            | "Split"
            | "SplitV"
            | "Slice"
            | "StridedSlice"
            | "StridedSliceGrad"
            | "Tile"
            | "GatherV2"
            | "Softmax"
            | "LogSoftmax"
            | "SparseSoftmaxCrossEntropyWithLogits"
            | "SoftmaxCrossEntropyWithLogits"
    )
}

/// Checkpoint ops: the expensive, parameterised ops that head a recompute
/// unit (see `partition.rs`).
pub(crate) fn is_checkpoint(op: &str) -> bool {
    matches!(
        op,
        "Conv2D"
            | "Conv3D"
            | "DepthwiseConv2dNative"
            | "MatMul"
            | "BatchMatMul"
            | "BatchMatMulV2"
            | "BatchMatMulV3"
            | "Einsum"
            | "_FusedConv2D"
            | "_FusedMatMul"
            | "Conv"
            | "Conv2DBackpropInput"
            | "Conv3DBackpropInputV2"
    )
}

/// Does Grappler's arithmetic optimizer regroup a `producer` whose one data
/// reader is `reader` (`arithmetic_optimizer.cc`)? `MinimizeBroadcasts`
/// reorders a chain of one binary associative op (`Mul`, `Add`, `AddV2`)
/// by its inputs' shapes, and `AddOpsRewrite` collapses a tree of `Add`,
/// `AddV2` and `AddN` into one `AddN`; neither takes in a node that drives
/// a control edge, nor (`AddOpsRewrite`) starts from one. Each regrouping
/// sums or multiplies in another order, so it rounds differently.
pub(crate) fn regrouped_with(reader: &str, producer: &str) -> bool {
    let add = |op: &str| matches!(op, "Add" | "AddV2" | "AddN");
    (reader == producer && matches!(reader, "Mul" | "Add" | "AddV2"))
        || (add(reader) && add(producer))
}

/// Does Grappler's constant folding turn `op` into a `Mul` when its divisor
/// (input 1) is a constant (`x / c` into `x * (1 / c)`, before the
/// arithmetic optimizer's stages run)? Floating-point types only.
pub(crate) fn div_folded_to_mul(op: &str) -> bool {
    matches!(op, "RealDiv" | "Div")
}

/// Is `op` a root `AddOpsRewrite` leaves alone when it drives a control edge
/// (see [`regrouped_with`])?
pub(crate) fn add_group_root(op: &str) -> bool {
    matches!(op, "Add" | "AddV2" | "AddN")
}

/// The kind of kernel an op type runs, for programs that replay a plan with
/// real kernels of the same shapes (`crate::replay`, `replay/runner.py`):
/// `None` for op types with no such stand-in (they replay as a timed busy
/// kernel of their predicted time). The classes: `conv` (forward
/// convolution, filter HWIO/DHWIO), `conv_backprop_input` (input 2 the
/// output gradient, output the input's shape), `conv_backprop_filter`
/// (input 0 the input, input 2 the output gradient), `matmul`,
/// `batch_matmul`, `batch_norm` and `batch_norm_grad` (fused, input 0 the
/// activations), `elementwise` (the output from every input broadcast to
/// its shape), `reduction` (input 0 reduced to the output's shape),
/// `softmax` (over the last axis of input 0), `pool` and `pool_grad` (the
/// window is not kept in the graph: the replayer uses the stride the shapes
/// give).
pub(crate) fn kernel_class(op: &str) -> Option<&'static str> {
    Some(match op {
        "Conv2D" | "Conv3D" | "_FusedConv2D" => "conv",
        "Conv2DBackpropInput" | "Conv3DBackpropInputV2" => "conv_backprop_input",
        "Conv2DBackpropFilter" | "Conv3DBackpropFilterV2" => "conv_backprop_filter",
        "MatMul" | "_FusedMatMul" => "matmul",
        "BatchMatMul" | "BatchMatMulV2" | "BatchMatMulV3" => "batch_matmul",
        "FusedBatchNorm" | "FusedBatchNormV2" | "FusedBatchNormV3" | "_FusedBatchNormEx" => {
            "batch_norm"
        }
        "FusedBatchNormGrad" | "FusedBatchNormGradV2" | "FusedBatchNormGradV3" => "batch_norm_grad",
        "Add" | "AddV2" | "Sub" | "Mul" | "Neg" | "Abs" | "Square" | "Maximum" | "Minimum"
        | "Relu" | "Relu6" | "ReluGrad" | "Relu6Grad" | "LeakyRelu" | "LeakyReluGrad"
        | "BiasAdd" | "BiasAddV1" | "RealDiv" | "Div" | "DivNoNan" | "TanhGrad" | "SigmoidGrad"
        | "Rsqrt" | "Sqrt" | "Reciprocal" | "RsqrtGrad" | "SqrtGrad" | "Exp" | "Log" | "Tanh"
        | "Sigmoid" | "Erf" | "Gelu" | "Pow" | "SquaredDifference" | "AddN" | "Select"
        | "SelectV2" | "Cast" | "OnesLike" | "ZerosLike" => "elementwise",
        "Sum" | "Mean" | "Max" | "Min" | "Prod" | "BiasAddGrad" | "L2Loss" | "EuclideanNorm" => {
            "reduction"
        }
        "Softmax"
        | "LogSoftmax"
        | "SoftmaxCrossEntropyWithLogits"
        | "SparseSoftmaxCrossEntropyWithLogits" => "softmax",
        "MaxPool" | "MaxPoolV2" | "AvgPool" | "MaxPool3D" | "AvgPool3D" => "pool",
        "MaxPoolGrad" | "MaxPoolGradV2" | "AvgPoolGrad" | "MaxPool3DGrad" | "AvgPool3DGrad" => {
            "pool_grad"
        }
        _ => return None,
    })
}

#[cfg(test)]
mod tests;
