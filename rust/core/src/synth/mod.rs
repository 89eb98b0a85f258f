//! Synthetic training-step `GraphDef`s for tests and benchmarks (the
//! `testing` feature: not part of the planning core).
//!
//! The graphs are shaped like what TensorFlow 2.21 writes for a traced
//! Keras 3 train step (`tf.function` of the forward pass, `tape.gradient`
//! and SGD-momentum `apply_gradients`, exported with `add_shapes=True`):
//!
//! - `Placeholder`s `x` and `y` (int32 labels); every variable a resource
//!   `Placeholder` read by a `ReadVariableOp`;
//! - a stem (3x3 `Conv2D`, or a dense projection of the tokens), `blocks`
//!   residual bottleneck or transformer blocks, a global average pool, a
//!   dense head and a sparse softmax cross entropy reduced to the scalar loss
//!   `sparse_categorical_crossentropy/div_no_nan`; batch-norm-like layers
//!   update their moving averages;
//! - the gradient seed `Const` `ones` (not data-connected to the loss), the
//!   gradient ops under `gradient_tape/` in reverse layer order, reading the
//!   forward tensors they need, and `AddN` where gradients meet;
//! - per trainable variable the Keras 3 SGD-momentum update under `sgd/`
//!   (plain SGD for [`SynthKind::Narrow`]), then the iteration counter;
//! - `Identity(loss, ^NoOp)` followed by the `NoOp` with control inputs from
//!   every variable read and write (TensorFlow lists the `Identity` first, so
//!   the node order is topological except there).
//!
//! Every node carries `_output_shapes`, its dtype attributes and the
//! attributes its op requires, so TensorFlow itself can import the graph.
//!
//! One file per part: the writer (`writer.rs`: shapes, names,
//! attributes, one `NodeDef` at a time), the train step around the blocks
//! (`step.rs`: inputs, stem, head and loss, backward order, SGD updates),
//! the shared norms (`norm.rs`), and one file per block family
//! (`residual.rs`, `transformer.rs`, `dag.rs`, `narrow.rs`; `Mixed`
//! alternates the first two). [`encode`] is the protobuf encoder tests use
//! for hand-made `GraphDef`s.
//!
//! # Complexity
//! O(N) time and memory for N nodes; no per-node allocation except the
//! amortised growth of the output buffers.

use crate::dtype::DType;

mod dag;
pub mod encode;
mod narrow;
mod norm;
mod residual;
mod step;
#[cfg(test)]
mod tests;
mod transformer;
mod writer;

use writer::Gen;

/// The kind of block the synthetic model stacks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SynthKind {
    /// ResNet bottleneck blocks on `[batch, size, size, channels]` maps.
    Residual,
    /// Transformer blocks on `[batch * size, channels]` tokens.
    Transformer,
    /// Residual and transformer blocks alternating, starting with a residual
    /// one (the transformer blocks attend over the `size * size` positions).
    Mixed,
    /// Random layered DAGs of dense layers on `[batch * size, channels]`
    /// tokens, the topology stress of the rematerialisation literature
    /// (MOCCASIN's and Checkmate's random graphs): each block has
    /// `DAG_LAYERS` layers of `DAG_WIDTH` nodes; a node is `Relu(BiasAdd(
    /// MatMul(x)))` of one earlier node or of the sum of two, picked from the
    /// two layers before it by a generator seeded with the block's index (so
    /// the graph is deterministic). Nodes nobody reads, and the block's
    /// input, are summed into the block's output.
    Dag,
    /// Deep, narrow residual blocks (`narrow.rs`): per block one 3x3
    /// `Conv2D`, a fused batch norm (`FusedBatchNormV3` writing its moving
    /// averages back), `Relu` and the residual `AddV2`, on `[batch, size,
    /// size, channels]` maps: many small activations of one size, so a
    /// budget below the peak takes thousands of decisions.
    Narrow,
}

impl SynthKind {
    /// Every kind, in the order benchmarks list them.
    pub(crate) const ALL: [SynthKind; 5] = [
        SynthKind::Residual,
        SynthKind::Transformer,
        SynthKind::Mixed,
        SynthKind::Dag,
        SynthKind::Narrow,
    ];

    /// The name the Python API and the examples use (`"residual"`, ...).
    pub fn name(self) -> &'static str {
        match self {
            SynthKind::Residual => "residual",
            SynthKind::Transformer => "transformer",
            SynthKind::Mixed => "mixed",
            SynthKind::Dag => "dag",
            SynthKind::Narrow => "narrow",
        }
    }

    /// The kind named `name` (see [`SynthKind::name`]), or `None`.
    pub fn from_name(name: &str) -> Option<SynthKind> {
        SynthKind::ALL.into_iter().find(|k| k.name() == name)
    }
}

/// Layers and nodes per layer of a [`SynthKind::Dag`] block.
pub(crate) const DAG_LAYERS: usize = 4;
pub(crate) const DAG_WIDTH: usize = 3;

/// What to generate. Sizes below 1 are read as 1; a dtype that is not
/// `float32`, `float64`, `float16` or `bfloat16` is read as `float32`.
#[derive(Debug, Clone, PartialEq)]
pub struct SynthSpec {
    pub kind: SynthKind,
    /// Number of residual or transformer blocks (0 is allowed).
    pub blocks: usize,
    pub batch: i64,
    /// Spatial side (residual) or sequence length (transformer).
    pub size: i64,
    /// Channels (residual) or model width (transformer).
    pub channels: i64,
    /// Floating-point type of activations and weights.
    pub dtype: DType,
}

impl Default for SynthSpec {
    fn default() -> Self {
        SynthSpec {
            kind: SynthKind::Residual,
            blocks: 4,
            batch: 8,
            size: 32,
            channels: 64,
            dtype: DType::FLOAT,
        }
    }
}

/// Serialized `GraphDef` of the train step described by `spec`.
///
/// # Complexity
/// O(N) for N = [`node_count`]`(spec)` nodes.
pub fn graphdef(spec: &SynthSpec) -> Vec<u8> {
    let mut g = Gen::new(spec, false);
    g.train_step();
    g.out.buf
}

/// Largest `nodes` [`checked_graphdef`] accepts: about 2 GB of GraphDef.
pub(crate) const MAX_NODES: usize = 10_000_000;
/// Largest batch, size or channels [`checked_graphdef`] accepts.
pub(crate) const MAX_DIM: i64 = 1 << 20;

impl std::str::FromStr for SynthKind {
    type Err = crate::PlanError;
    fn from_str(s: &str) -> crate::Result<Self> {
        SynthKind::from_name(s).ok_or_else(|| {
            let names: Vec<&str> = SynthKind::ALL.iter().map(|k| k.name()).collect();
            crate::PlanError::InvalidArgument(format!(
                "unknown synthetic kind '{s}': use one of {}",
                names.join(", ")
            ))
        })
    }
}

/// [`graphdef`] of about `nodes` nodes of `kind`, with every argument checked
/// instead of clamped: `nodes` in `1..=MAX_NODES` (a larger graph would not fit
/// in memory, and an allocation failure aborts the process instead of
/// unwinding), `batch`, `size`, `channels` in `1..=MAX_DIM`.
///
/// # Errors
/// [`crate::PlanError::InvalidArgument`] naming the argument out of range.
///
/// # Complexity
/// O(nodes).
pub fn checked_graphdef(
    kind: &str,
    nodes: usize,
    batch: i64,
    size: i64,
    channels: i64,
) -> crate::Result<Vec<u8>> {
    let kind: SynthKind = kind.parse()?;
    if !(1..=MAX_NODES).contains(&nodes) {
        return Err(crate::PlanError::InvalidArgument(format!(
            "nodes must be from 1 to {MAX_NODES}, got {nodes}"
        )));
    }
    for (what, v) in [("batch", batch), ("size", size), ("channels", channels)] {
        if !(1..=MAX_DIM).contains(&v) {
            return Err(crate::PlanError::InvalidArgument(format!(
                "{what} must be from 1 to {MAX_DIM}, got {v}"
            )));
        }
    }
    Ok(graphdef(&SynthSpec {
        kind,
        blocks: blocks_for_nodes(kind, nodes),
        batch,
        size,
        channels,
        ..SynthSpec::default()
    }))
}

/// [`graphdef`] with the kind forced to [`SynthKind::Residual`].
pub fn residual_graphdef(spec: &SynthSpec) -> Vec<u8> {
    graphdef(&SynthSpec {
        kind: SynthKind::Residual,
        ..spec.clone()
    })
}

/// Number of nodes [`graphdef`] writes for `spec` (a dry run: O(N) time,
/// nothing written).
pub fn node_count(spec: &SynthSpec) -> usize {
    let mut g = Gen::new(spec, true);
    g.train_step();
    g.count as usize
}

/// The number of blocks (at least 1) that gives about `target_nodes` nodes
/// (within one block's worth, a few hundred nodes). The count of nodes does
/// not depend on the sizes of a spec, only on its kind and number of blocks.
///
/// # Complexity
/// O(1): two dry runs of at most two blocks.
pub fn blocks_for_nodes(kind: SynthKind, target_nodes: usize) -> usize {
    let count = |blocks| {
        node_count(&SynthSpec {
            kind,
            blocks,
            ..SynthSpec::default()
        })
    };
    let (base, two) = (count(0), count(2));
    let per_block = (two - base) as f64 / 2.0;
    let blocks = (target_nodes.saturating_sub(base) as f64 / per_block).round();
    blocks.max(1.0) as usize
}
