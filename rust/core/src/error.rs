//! Typed errors of the planning core.
//!
//! Every fallible function of the core returns [`PlanError`]. The Python glue
//! maps each variant onto one exception class in exactly one place
//! (`rust/py/src/errors.rs`).

use thiserror::Error;

/// Everything that can go wrong while reading, analysing or planning a graph.
///
/// Messages say what was wrong and what to do about it.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum PlanError {
    /// The bytes are not a valid serialized `GraphDef`.
    #[error("malformed GraphDef bytes: {0}. Pass the output of GraphDef.SerializeToString() (a binary .pb) or a text .pbtxt file.")]
    Decode(String),

    /// The graph is well formed protobuf but not a valid dataflow graph.
    #[error("invalid graph: {0}")]
    InvalidGraph(String),

    /// The graph has a cycle; `nodes` names the nodes on one cycle.
    #[error("the graph has a cycle through {}: a training step must be a DAG (control-flow loops must stay inside a While op)", fmt_cycle(.nodes))]
    Cycle { nodes: Vec<String> },

    /// A tensor's shape or dtype is not fully known, so its size is unknown.
    #[error("tensor '{tensor}' has {what}: trace the step with concrete input shapes (tf.TensorSpec with every dimension set) and export with as_graph_def(add_shapes=True)")]
    UnknownShape { tensor: String, what: String },

    /// The graph holds something the planner cannot plan soundly.
    #[error("unsupported graph: node '{node}' (op {op}): {reason}")]
    Unsupported {
        node: String,
        op: String,
        reason: String,
    },

    /// The graph has no backward pass, so nothing can be swapped or
    /// recomputed, and it does not fit the budget as it is.
    #[error("the graph has no backward pass (no loss found, or no gradient op depends on it): there is nothing to swap or recompute, and its peak of {peak} bytes exceeds the budget of {budget} bytes; pass a training step's graph (forward, gradients, update) or name its loss with loss=...")]
    NoBackward { peak: u64, budget: u64 },

    /// No plan of any strategy fits the budget.
    #[error("no plan fits the budget of {budget} bytes: the smallest peak reached is {best_peak} bytes (strategy '{strategy}'); raise the budget to at least {best_peak} bytes or shrink the batch")]
    Budget {
        budget: u64,
        best_peak: u64,
        strategy: String,
    },

    /// Plans fit the device budget, but none the host memory budget (the
    /// swapped bytes held in host memory at once, `host.rs`).
    #[error("no plan within the device budget of {budget} bytes fits the host memory budget of {host_budget} bytes: the smallest host peak reached is {best_host_peak} bytes; raise the host budget to at least {best_host_peak} bytes, raise the device budget (fewer swaps), or use strategy 'recompute'")]
    HostBudget {
        host_budget: u64,
        best_host_peak: u64,
        budget: u64,
    },

    /// An argument given by the caller is invalid.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
}

fn fmt_cycle(nodes: &[String]) -> String {
    let mut s: Vec<&str> = nodes.iter().take(12).map(String::as_str).collect();
    if nodes.len() > 12 {
        s.push("...");
    }
    if let Some(first) = nodes.first() {
        s.push(first);
    }
    s.join(" -> ")
}

/// Result alias of the core.
pub type Result<T> = std::result::Result<T, PlanError>;
